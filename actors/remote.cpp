// Across processes, what the gateway (gateway.cpp) and the connector (connector.cpp) share: the
// actor system's network setup and a party's TLS files. CAF speaks only to loopback; TLS, identity
// and the BASP checks are the front door's (door.hpp).
#include "diloco/actors/remote.hpp"

#include <filesystem>
#include <stdexcept>

#include <caf/actor_system_config.hpp>
#include <caf/atom.hpp>
#include <caf/io/middleman.hpp>

#include "session_protocol.hpp"

namespace diloco::actors {

TlsFiles tls_files(const std::string& dir, const std::string& name) {
  namespace fs = std::filesystem;
  TlsFiles t{(fs::path(dir) / "ca.pem").string(), (fs::path(dir) / (name + ".pem")).string(),
             (fs::path(dir) / (name + ".key")).string()};
  for (const auto& f : {t.ca, t.cert, t.key})
    if (!fs::exists(f))
      throw std::runtime_error("TLS: missing " + f + " (make them with scripts/make-certs.sh " + dir + " syncer SITE...)");
  return t;
}

PeerMessages peer_messages(std::shared_ptr<const PeerReceivers> receivers) {
  // What sites and follower replicas send to the syncer's process: atoms, the frames
  // (WireFrame: Cap'n Proto bytes our decoders check), a join ask, a site's name, a
  // replica's generation and round (gateway.cpp's handlers and the relay's), and CAF's own
  // (sys, get, "info") to a new node's "SpawnServ". Never an error, an exit or down message,
  // or a nested message. One message holds an actor pointer: SpawnServ's answer to this
  // process's middleman, (ok, "info", its handle, its name); never (atom, actor pointer)
  // alone, which CAF takes for a link request and casts to a proxy. And only to `receivers` (the
  // gateway and its relays) or CAF's "SpawnServ": the syncer's id, which a site learns as the
  // sender of what the syncer tells its islands, is no way around a relay's checks.
  return {{"@atom", "@str", "@u64", "diloco.WireFrame", "diloco.JoinAsk"},
          {"@<>+@atom+@str+@strong_actor_ptr+@str"},
          std::move(receivers),
          {static_cast<std::uint64_t>(caf::atom("SpawnServ"))}};
}

void configure_network(caf::actor_system_config& cfg, const NetConfig& net) {
  cfg.add_message_type<SiteSession>("diloco.SiteSession");
  cfg.add_message_type<JoinAsk>("diloco.JoinAsk");
  cfg.add_message_type<ReplicaUpdate>("diloco.ReplicaUpdate");
  cfg.load<caf::io::middleman>();
  // BASP's own heartbeats and timeout close a silent connection, which kills its proxies: the
  // monitors on both sides then report the loss as for a closed socket.
  cfg.set("middleman.heartbeat-interval", caf::timespan{session::ms(net.heartbeat_ms)});
  cfg.set("middleman.connection-timeout", caf::timespan{session::ms(net.timeout_ms)});
}

}  // namespace diloco::actors
