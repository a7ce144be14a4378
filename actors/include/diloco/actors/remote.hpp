// Islands and the syncer in separate processes: the syncer publishes a gateway over CAF's io
// middleman on loopback behind its front door (door.hpp: mutual TLS, identity and BASP checks),
// a site process connects through its own door with capped exponential back-off, proves which
// site it is, and gets a relay its islands treat as their syncer. Heartbeats in both
// directions; a silent or disconnected site loses its islands.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/expected.hpp>
#include <caf/fwd.hpp>
#include <caf/meta/type_name.hpp>

#include "diloco/actors/door.hpp"
#include "diloco/actors/protocol.hpp"
#include "diloco/actors/runtime.hpp"
#include "diloco/door.hpp"
#include "diloco/wire.hpp"

namespace diloco::actors {

/// The syncer's answer to a site that proved who it is: the relay its islands send to (their
/// "syncer" in the directory), and the last step the syncer heard of from each of the site's
/// islands, so that a restarted site process resumes them there instead of at step 0, and
/// whether each already finished (its last contributions merged), so that a site restarted
/// after its last step is told it is done instead of training again. After the run ended the
/// answer is `over` (a RunOver frame, wire.hpp) and no relay: the site exits instead of retrying.
struct SiteSession {
  caf::actor relay;
  std::vector<std::int64_t> islands;
  std::vector<std::int64_t> steps;
  std::vector<std::int8_t> finished;  // 1: the island finished
  WireFrame over;                     // non-empty: the run is over (RunOver frame)
  std::uint64_t term = 0;             // a replicated syncer: the leader's term (0: not replicated)
  std::string refused;                // a joiner refused for good (name, layout, no open island): why
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, SiteSession& x) {
  return f(caf::meta::type_name("diloco.SiteSession"), x.relay, x.islands, x.steps, x.finished, x.over, x.term,
           x.refused);
}

/// A site that is not in the configuration asks to join (net.allow_join): its name (its
/// certificate's CN), the certificate, how many islands it brings, the islands it already trains
/// (a joiner whose session was lost asks for them back; empty at first), and its model's
/// layout_signature (a different model is refused).
struct JoinAsk {
  std::string site;
  WireFrame cert;
  std::int32_t islands = 0;
  std::vector<std::int64_t> held;
  std::string layout;
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, JoinAsk& x) {
  return f(caf::meta::type_name("diloco.JoinAsk"), x.site, x.cert, x.islands, x.held, x.layout);
}

/// A replicated syncer: what the leader's gateway answers a follower replica that asks for the
/// state it lacks. `generation` counts the leader's snapshots (commits and changes of who
/// finished); `state` is the snapshot as a checkpoint file (checkpoint.hpp), empty when the
/// follower already holds that generation.
struct ReplicaUpdate {
  std::uint64_t term = 0;
  std::uint64_t generation = 0;
  std::uint64_t round = 0;
  WireFrame state;
  WireFrame over;  // non-empty: the run is over (RunOver frame); the follower ends too
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ReplicaUpdate& x) {
  return f(caf::meta::type_name("diloco.ReplicaUpdate"), x.term, x.generation, x.round, x.state, x.over);
}

/// A line for the process's timeline (who connected, was refused, was lost).
using NetLog = std::function<void(const std::string&)>;

/// One party's TLS material from a scripts/make-certs.sh directory: DIR/ca.pem, DIR/NAME.pem,
/// DIR/NAME.key. Throws std::runtime_error naming a missing file.
using TlsFiles = DoorTls;
TlsFiles tls_files(const std::string& dir, const std::string& name);

/// Prepares an actor system for the network: the site protocol's message types and the io
/// middleman with BASP heartbeats and connection timeout from [net]. CAF itself speaks only to
/// loopback: TLS is the door's (door.hpp). Call after configure_runtime_system.
void configure_network(caf::actor_system_config& cfg, const NetConfig& net);

/// What every message a site or a follower replica sends to the syncer's process holds (CAF's
/// portable type names), and to whom (`receivers`: the gateway and its relays; CAF's
/// "SpawnServ" by name): its front door refuses a message holding anything else, or to anyone else.
PeerMessages peer_messages(std::shared_ptr<const PeerReceivers> receivers);

/// The door of a syncer process: public connections on `at` are proven (mutual TLS with
/// `tls`, certificate CN = a site of the roster; none under --insecure), held to the
/// handshake bounds of [net], and spliced to the gateway CAF published on loopback at
/// `caf_port`; their messages may address the actors in `receivers` only (the gateway's
/// GatewayOptions::receivers), and be no longer than a fragment frame of `plan`'s largest
/// fragment (peer_payload_bound). Throws std::runtime_error when `at` cannot be bound.
std::unique_ptr<Door> open_syncer_door(const RunConfig& cfg, const FragmentPlan& plan, const Endpoint& at,
                                       std::uint16_t caf_port, const TlsFiles* tls, NetLog log,
                                       std::shared_ptr<const PeerReceivers> receivers);
/// The door of a site process: its CAF dials the returned door's loopback port, and the door
/// dials the syncer at `syncer`, requiring (with `tls`) a certificate for net.syncer_name.
/// `only`: dial these replicas alone (a follower dials its leader) instead of every [[syncers]] one.
std::unique_ptr<Door> open_site_door(const RunConfig& cfg, const Endpoint& syncer, const TlsFiles* tls, NetLog log,
                                     std::vector<DoorOptions::Target> only = {});

/// The syncer side. `ca_file` empty = insecure: a site is taken at its word (no proof).
struct GatewayOptions {
  std::string ca_file;
  NetLog log;
  /// A replicated syncer's leader: its term (in every session and update) and the replicas
  /// that may follow it (names of [[syncers]]; each proves its name as a site does).
  std::uint64_t term = 0;
  std::vector<std::string> replicas;
  /// net.allow_join, a syncer (re)started from a state file: the open islands that trained and
  /// have not finished wait net.join_lease_ms for the joiner that trains them (JoinPool::reserve).
  std::vector<int> reserved;
  /// The actors a peer may address (the syncer door's PeerMessages::receivers): the gateway
  /// puts itself and every relay it hands out here, and takes a relay out when it ends.
  std::shared_ptr<PeerReceivers> receivers = std::make_shared<PeerReceivers>();
};
/// Spawns the gateway, the one actor a syncer process publishes. A site says hello with its
/// certificate, signs the gateway's random challenge with the certificate's key (identity.hpp)
/// and gets a SiteSession whose relay checks every frame's sender and island before it reaches
/// the syncer (refusals are counted as rejected). A follower replica proves its name the same
/// way and then pulls the leader's snapshots (ReplicaUpdate); what it acknowledged sets
/// rt.gateway.majority_round.
caf::actor spawn_gateway(caf::actor_system& sys, std::shared_ptr<Runtime> rt, GatewayOptions o);
/// The run is over (`o`): the gateway tells every site in session now (through its relay) and
/// answers every site that proves itself later with `o` instead of a session; each site told is
/// marked in rt.gateway.told_over and counted in run_over_sent. The word carries `term` (a
/// replicated syncer's leader term, Run::leader_term).
void tell_run_over(const caf::actor& gateway, const RunOver& o, std::uint64_t term = 0);
/// Every site was told that the run is over, or needs no telling (each of its islands finished);
/// joiners too: one holding unfinished open islands (in session or within its lease) was told.
bool every_site_told(const Runtime& rt);
/// Publishes the gateway to CAF's middleman on loopback (any free port; only the door reaches
/// it); returns the bound port.
caf::expected<std::uint16_t> publish_gateway(const caf::actor& gateway);

/// The site side.
struct ConnectorOptions {
  std::string site;
  Endpoint syncer;                                    // the site's door on loopback
  std::string syncer_label;                           // how log lines name the syncer ("" = syncer's host:port)
  bool tls = true;                                    // prove the site's key to the gateway
  std::string cert_file, key_file;                    // tls: sent / signs the challenge
  int max_attempts = 0;                               // failed attempts in a row before giving up (0: never)
  std::function<void(const SiteSession&)> on_session; // every new session (on the connector's thread)
  std::function<void()> on_give_up;
  /// The syncer said the run is over (in session or answering a join): the connector stops
  /// retrying and ends; the app ends the site (on the connector's thread).
  std::function<void(const RunOver&)> on_run_over;
  NetLog log;
  /// `diloco site --join`: a site not in the configuration asks for this many open islands (0: a
  /// site of the configuration, whose islands the configuration names). `layout` is its model's
  /// layout_signature; `held` says which islands it trains already (empty until its first session).
  int join_islands = 0;
  std::string layout;
  std::function<std::vector<int>()> held;
  /// The syncer refused the joiner for good (SiteSession::refused): the connector ends.
  std::function<void(const std::string&)> on_refused;
  /// A site in the syncer's own process (`diloco run --simulate --relays`): the gateway itself, not
  /// dialed through the middleman (`syncer` is unused); and the islands whose route through the
  /// session goes into the directory (Directory::set_route), since the syncer's entry is the
  /// syncer's own there.
  caf::actor gateway;
  std::vector<int> route;
};
/// Spawns the connector of a site process: connects, authenticates, puts the relay into the
/// runtime's directory (islands join it as their syncer), heartbeats, and on any loss clears
/// the directory and reconnects with capped exponential back-off ([net] reconnect_*_ms). The
/// islands keep training meanwhile and re-join the new relay.
caf::actor spawn_connector(caf::actor_system& sys, std::shared_ptr<Runtime> rt, ConnectorOptions o);

/// A follower replica's side: through `door` (a site-role door dialling the leader), proves
/// that it is `name` to the leader's gateway and then pulls its snapshots; every new one is
/// handed to `on_update` (on the calling thread). Returns when `keep_going` turns false, the
/// connection fails (the caller looks up the leader again) or the leader says the run is over
/// (the update with `over` is handed on first). A short description of why it returned.
struct FollowOptions {
  std::string name;
  bool tls = true;
  std::string cert_file, key_file;
  std::function<bool()> keep_going;
  /// Takes an update; returns whether the follower now holds its state (written where it keeps
  /// it). Only a held snapshot is acknowledged to the leader.
  std::function<bool(ReplicaUpdate&)> on_update;
  double poll_ms = 20.0;  // how soon to ask again when the leader had nothing new
  NetLog log;
};
std::string follow_leader(caf::actor_system& sys, std::uint16_t door_port, const FollowOptions& o);

}  // namespace diloco::actors
