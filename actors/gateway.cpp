// The syncer's side across processes: the gateway, the one actor a syncer process publishes (on
// loopback, behind the front door), which proves a site's identity and hands out relays; one relay
// per site session, which checks every frame's sender and island before it reaches the syncer.
#include "diloco/actors/remote.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>


#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/io/middleman.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/system_messages.hpp>
#include <spdlog/spdlog.h>

#include "detail.hpp"
#include "diloco/actors/identity.hpp"
#include "diloco/join_pool.hpp"
#include "diloco/leadership.hpp"
#include "session_protocol.hpp"

namespace diloco::actors {

namespace {

using namespace session;

// ---- relay: one per authenticated site session, in the syncer process ----

// A declared constructor: CAF 0.17 builds the state as State(self) whenever that compiles, and
// C++20's parenthesised aggregate initialisation would then set the first handle to self.
struct RelayState {
  RelayState() = default;
  caf::actor syncer;
  caf::actor connector;
  std::map<int, caf::actor_addr> joined;  // island → its proxy (for a heartbeat loss)
  // Each join costs the syncer a whole model: spaced out per island; a held one is the island's
  // newest request and who sent it.
  JoinThrottle<std::pair<caf::strong_actor_ptr, WireFrame>> joins{0.0};
  double last_heard = 0.0;
  bool closing = false;
};

caf::behavior relay_actor(caf::stateful_actor<RelayState>* self, std::shared_ptr<Runtime> rt, int site,
                          std::string name, std::vector<int> mine, caf::actor syncer, caf::actor connector, NetLog log) {
  detail::guard(self, "relay " + name);
  auto& st = self->state;
  st.syncer = syncer;
  st.connector = connector;
  st.last_heard = detail::now_s(self);
  st.joins = decltype(st.joins)(rt->cfg.net.join_interval_ms / 1000.0);
  self->monitor(syncer);
  self->monitor(connector);
  const caf::node_id peer = connector.node();
  // Counted and reported as the syncer's own refusals are (the app prints rejected events).
  auto refuse = [self, rt, name, site](const std::string& why) {
    ++rt->gateway.relay_refused[static_cast<std::size_t>(site)];
    rt->emit(Event::refused(detail::now_s(self), "site " + name + "'s session: " + why, "relay"));
  };
  // The island a frame speaks for, if its sender is the site's process and the island is the site's.
  auto admit = [self, mine, peer, name, refuse](const WireFrame& w, MessageType want, SiteFrame* out = nullptr) -> int {
    auto from = self->current_sender();
    if (!from || from->node() != peer) {
      refuse("sender is not on site " + name + "'s node");
      return -1;
    }
    auto f = admit_site_frame(detail::bytes_of(w), want, mine, name);
    if (!f) {
      refuse(f.error().message());
      return -1;
    }
    if (out) *out = *f;
    return f->island;
  };
  auto close = [self, rt, name, mine, log](const std::string& why, caf::sec code) {
    auto& st = self->state;
    if (st.closing) return;
    st.closing = true;
    // The syncer learns of a lost connection from its monitors; a silent site is lost by this
    // decision, so tell it as the monitors would.
    if (code == caf::sec::connection_timeout)
      for (auto& [i, addr] : st.joined) self->send(st.syncer, caf::down_msg{addr, caf::make_error(code, why)});
    // A site whose islands all finished (trained their budget, or drained when it left) is gone
    // by design, not lost.
    bool finished = true;
    for (int i : mine)
      finished = finished && rt->syncer.finished[static_cast<std::size_t>(i)].load();
    if (log) log("site " + name + (finished ? " left (its islands finished): " : " lost: ") + why);
    self->quit(caf::make_error(code, why));
  };
  self->set_down_handler([self, name, close](caf::down_msg& m) {
    if (m.source == self->state.syncer.address()) close("the syncer restarted", caf::sec::runtime_error);
    else if (m.source == self->state.connector.address())
      close("connection to " + name + " closed (" + self->system().render(m.reason) + ")",
            caf::sec::remote_linking_failed);
  });
  const double timeout = rt->cfg.net.timeout_ms / 1000.0;
  self->delayed_send(self, ms(rt->cfg.net.heartbeat_ms), pulse_atom::value);
  return {
      [=](join_atom a, WireFrame& w) {
        SiteFrame f;
        const int i = admit(w, MessageType::join_request, &f);
        if (i < 0) return;
        auto& st = self->state;
        const double now = detail::now_s(self);
        // Where the site's clock stands as its join arrives, before any hold below: the syncer's
        // end of the site's partitions follows that clock (SiteLinks::align).
        if (const double run_s = std::get<JoinRequest>(f.message).run_s; run_s > 0.0)
          rt->links.align(i, now - rt->t0.load() - run_s);
        auto got = st.joins.arrive(i, now, {self->current_sender(), std::move(w)});
        if (got.pass) {
          st.joined[i] = caf::actor_cast<caf::actor_addr>(self->current_sender());
          ++rt->gateway.relayed[static_cast<std::size_t>(site)];
          self->delegate(st.syncer, a, std::move(got.pass->second));
          return;
        }
        // Within the interval of the island's last join: it is held, the newest in place of any held one.
        if (got.wake) self->delayed_send(self, detail::micros(*got.wake - now), a, static_cast<std::uint64_t>(i));
      },
      [=](join_atom a, std::uint64_t island) {
        // The moment of island's waiting join came (this relay's own timer; from anyone else ignored).
        auto& st = self->state;
        const auto& from = self->current_sender();
        if (!from || from.get() != self->ctrl()) return;
        auto held = st.joins.release(static_cast<int>(island), detail::now_s(self));
        if (!held) return;
        auto& [sender, frame] = *held;
        st.joined[static_cast<int>(island)] = caf::actor_cast<caf::actor_addr>(sender);
        ++rt->gateway.relayed[static_cast<std::size_t>(site)];
        caf::send_as(caf::actor_cast<caf::actor>(sender), st.syncer, a, std::move(frame));
      },
      [=](progress_atom a, WireFrame& w) {
        const int i = admit(w, MessageType::progress);
        if (i < 0) return;
        ++rt->gateway.relayed[static_cast<std::size_t>(site)];
        self->delegate(self->state.syncer, a, std::move(w));
      },
      [=](fragment_atom a, WireFrame& w) {
        if (admit(w, MessageType::fragment) < 0) return;
        ++rt->gateway.relayed[static_cast<std::size_t>(site)];
        self->delegate(self->state.syncer, a, std::move(w));
      },
      [=](beat_atom, const WireFrame& w) {
        auto from = self->current_sender();
        auto msg = decode_message(detail::bytes_of(w));
        if (!from || from->node() != peer || !msg || !std::holds_alternative<Heartbeat>(*msg)) {
          refuse("bad heartbeat");
          return;
        }
        self->state.last_heard = detail::now_s(self);
        auto hb = std::get<Heartbeat>(*msg);
        hb.sender = syncer_id;  // echo: the site measures the round trip with its own clock
        self->send(self->state.connector, beat_atom::value, detail::to_wire(encode_message(hb, rt->leader_term)));
      },
      [=](over_atom a, const WireFrame& w) {
        // From the gateway of this process only: the run is over, the site is told.
        auto from = self->current_sender();
        if (!from || from->node() != self->node()) {
          refuse("run-over word not from this syncer");
          return;
        }
        self->send(self->state.connector, a, w);
      },
      [=](pulse_atom) {
        const double silent = detail::now_s(self) - self->state.last_heard;
        if (silent > timeout) {
          close("no heartbeat for " + std::to_string(static_cast<int>(silent * 1000)) + " ms",
                caf::sec::connection_timeout);
          return;
        }
        self->delayed_send(self, ms(rt->cfg.net.heartbeat_ms), pulse_atom::value);
      },
  };
}

// ---- gateway: the published actor; authenticates sites and hands out relays ----

struct Pending {
  std::string site;
  Bytes cert;
  Bytes nonce;
  int want = 0;             // a joiner: the islands it asks for (0: a site of the configuration)
  std::vector<int> held;    // a joiner: the islands it trains already
  std::string layout;       // a joiner: its model's layout_signature
};


// A follower replica in session: its name, what it acknowledged (by asking for more).
struct Follower {
  std::string name;
  std::uint64_t acked_round = 0;
  std::uint64_t acked_generation = 0;
  double last_heard = 0.0;
};

struct GatewayState {
  ChallengeTable<caf::actor_addr, Pending> pending{256};  // by the connector asking
  ChallengeTable<caf::actor_addr, Pending> pending_replicas{64};  // by the follower asking
  std::map<caf::actor_addr, Follower> followers;        // proven followers, by the actor asking
  std::uint64_t encoded_generation = 0;                 // the snapshot `encoded` holds (0: none)
  WireFrame encoded;
  std::map<int, caf::actor> sessions;          // site → its live relay (erased when the relay ends)
  std::map<int, caf::node_id> nodes;           // site → the node of its live session
  WireFrame over;                              // the run is over: this RunOver frame, the answer to every site
  std::string over_text;                       // ... as log lines say it
  std::optional<JoinPool> pool;                // net.allow_join: the open islands and who holds them
  std::map<int, std::string> names;            // session number → the joiner in session
};

caf::behavior gateway_actor(caf::stateful_actor<GatewayState>* self, std::shared_ptr<Runtime> rt, GatewayOptions o) {
  detail::guard(self, "gateway");
  // What a peer may address: this gateway, and each relay while it lives (spawn_relay).
  o.receivers->add(self->id());
  self->attach_functor([receivers = o.receivers, id = self->id()] { receivers->remove(id); });
  // rt->gateway.vacant mirrors the pool: the other threads read it (the run's end, the final sync).
  auto mirror_vacancy = [self, rt] {
    for (int i : self->state.pool->open()) rt->gateway.vacant[static_cast<std::size_t>(i)] = self->state.pool->vacant(i);
  };
  if (rt->cfg.net.allow_join) {
    auto& pool = self->state.pool.emplace(open_islands(rt->cfg), rt->cfg.net.join_lease_ms / 1000.0);
    const double lease = rt->cfg.net.join_lease_ms / 1000.0;
    pool.reserve(o.reserved, detail::now_s(self) + lease);
    mirror_vacancy();
    if (!o.reserved.empty()) self->delayed_send(self, detail::micros(lease + 0.001), pulse_atom::value);
  }
  auto refuse = [self, rt](const std::string& why) {
    ++rt->gateway.refused;
    rt->emit(Event::refused(detail::now_s(self), why, "session"));
    return caf::make_error(caf::sec::request_receiver_down, why);
  };
  // A relay ends with its session (connection closed, heartbeat lost, syncer restarted): the
  // site is free for its next claimant.
  // A joiner's islands go back to the open pool: free for the next joiner, waited for by nobody.
  auto released = [o, mirror_vacancy](const std::string& name) {
    mirror_vacancy();
    if (!o.log) return;
    if (const std::string r = "the joiner of "; name.rfind(r, 0) == 0)
      o.log(name.substr(r.size()) + ", kept since this syncer's start for the joiner that trained it, is open again");
    else o.log("joiner " + name + "'s islands are open again");
  };
  self->set_down_handler([self, rt, o, released](caf::down_msg& m) {
    o.receivers->remove(m.source.id());
    auto& st = self->state;
    auto& ss = st.sessions;
    for (auto it = ss.begin(); it != ss.end(); ++it)
      if (it->second.address() == m.source) {
        const int number = it->first;
        st.nodes.erase(number);
        ss.erase(it);
        auto n = st.names.find(number);
        if (n == st.names.end()) return;
        const std::string name = n->second;
        st.names.erase(n);
        // Left (its islands finished): open at once. Lost: kept for its return until the lease runs out.
        bool left = true;
        for (int i : st.pool->held_by(name)) left = left && rt->syncer.finished[static_cast<std::size_t>(i)].load();
        if (st.pool->lost(name, left, detail::now_s(self))) released(name);
        else self->delayed_send(self, detail::micros(rt->cfg.net.join_lease_ms / 1000.0 + 0.001), pulse_atom::value);
        return;
      }
  });
  // The challenge the sender of a proof was given (taken out of `pending`), once its signature
  // over it checks against the certificate it sent (without a CA, under --insecure, it is taken
  // at its word). `who` names the kind of peer in the refusal.
  auto take_proof = [self, o](ChallengeTable<caf::actor_addr, Pending>& pending, const std::string& who,
                              const WireFrame& sig) -> Expected<Pending> {
    auto taken = pending.take(caf::actor_cast<caf::actor_addr>(self->current_sender()));
    if (!taken) return Error{errc::unexpected_message, who + " proof without a challenge"};
    Pending x = std::move(*taken);
    if (!o.ca_file.empty())
      if (auto why = verify_site_proof(o.ca_file, x.cert, x.site, challenge_message(x.site, x.nonce), sig.bytes); !why.empty())
        return Error{errc::unexpected_message, who + " '" + x.site + "' not authenticated: " + why};
    return x;
  };
  // How log lines name session number `site`: the configuration's name, or the joiner's.
  auto name_of = [self, rt](int site) {
    if (site < site_count(rt->cfg)) return site_name(rt->cfg, site);
    auto n = self->state.names.find(site);
    return n == self->state.names.end() ? "joiner #" + std::to_string(site) : n->second;
  };
  auto told = [self, rt, o, name_of](int site, const std::string& how) {
    ++rt->gateway.run_over_sent;
    if (site >= 0) rt->gateway.told_over[static_cast<std::size_t>(site)] = true;
    if (auto n = self->state.names.find(site); n != self->state.names.end() && self->state.pool)
      for (int i : self->state.pool->held_by(n->second)) rt->gateway.told_island[static_cast<std::size_t>(i)] = true;
    if (o.log) o.log("site " + (site >= 0 ? name_of(site) : std::string("(a joiner)")) + " " + how + ": run over (" + self->state.over_text + ")");
  };
  // A joiner proven by `x` (net.allow_join): its islands, or the reason it is refused. A refusal
  // for good (it will never be taken) comes back in the session's `refused`; one that may pass
  // later (its name has a live session) as an error, and its connector dials again.
  auto join = [self, rt, o, refuse, mirror_vacancy](const Pending& x, const caf::actor_addr& from) -> caf::result<SiteSession> {
    auto& st = self->state;
    SiteSession s;
    s.term = o.term;
    auto no = [&](const std::string& why) {
      refuse("joiner '" + x.site + "' refused: " + why);
      s.refused = why;
      return s;
    };
    if (!st.pool) return no("this run takes no joiners (net.allow_join)");
    if (site_index(rt->cfg, x.site) >= 0) return no("the name '" + x.site + "' is a site of the configuration");
    for (const auto& r : rt->cfg.syncers)
      if (r.name == x.site) return no("the name '" + x.site + "' is a syncer replica's");
    if (x.site == rt->cfg.net.syncer_name) return no("the name '" + x.site + "' is the syncer's");
    if (const auto mine = layout_signature(rt->layout_model->layout()); x.layout != mine)
      return no("its model differs: it brings " + x.layout + ", the run trains " + mine);
    auto syncer = rt->dir.syncer();
    if (!syncer) return caf::make_error(caf::sec::request_receiver_down, "the syncer is restarting");
    const auto answer = st.pool->ask(x.site, x.want, x.held, [rt](int i) {
      return rt->budget_spent(rt->syncer.heard_step[static_cast<std::size_t>(i)].load());
    });
    if (!answer.refused.empty()) return no(answer.refused);
    if (!answer.busy.empty()) {
      const auto holds = st.pool->held_by(x.site);
      if (holds.empty()) return refuse("joiner '" + x.site + "' refused for now: " + answer.busy);
      return refuse(answer.busy + " (from node " + caf::to_string(st.nodes[site_count(rt->cfg) + holds.front()]) +
                    "); refused the claim from node " + caf::to_string(from.node()));
    }
    const auto& got = answer.islands;
    const bool back = answer.back;  // within its lease
    const int number = site_count(rt->cfg) + got.front();
    auto connector = caf::actor_cast<caf::actor>(from);
    auto relay = self->spawn(relay_actor, rt, number, x.site, got, syncer, connector, o.log);
    ++rt->gateway.sessions;
    self->monitor(relay);
    o.receivers->add(relay.id());
    st.sessions[number] = relay;
    st.nodes[number] = from.node();
    st.names[number] = x.site;
    mirror_vacancy();
    s.relay = relay;
    for (int i : got) {
      s.islands.push_back(i);
      s.steps.push_back(rt->syncer.heard_step[static_cast<std::size_t>(i)].load());
      // An island taken over from a joiner that left trains on (its finish was the leaver's).
      s.finished.push_back(back && rt->syncer.finished[static_cast<std::size_t>(i)].load() ? 1 : 0);
    }
    if (o.log) {
      std::string list;
      for (int i : got) list += (list.empty() ? "" : ",") + std::to_string(i);
      o.log("joiner " + x.site + (o.ca_file.empty() ? " connected (insecure: identity not checked)"
                                                     : " authenticated (certificate CN=" + x.site + ", key proven)") +
            ", takes open islands " + list + ", from node " + caf::to_string(from.node()));
    }
    return s;
  };
  return {
      [=](over_atom a, const WireFrame& w) {
        // From this process only (the app); a peer cannot end the run.
        auto from = self->current_sender();
        if (!from || from->node() != self->node()) {
          refuse("run-over word not from this syncer's process");
          return;
        }
        auto msg = decode_message(detail::bytes_of(w));
        if (!msg || !std::holds_alternative<RunOver>(*msg) || !self->state.over.bytes.empty()) return;
        const auto& ro = std::get<RunOver>(*msg);
        self->state.over = w;
        self->state.over_text = std::string(to_string(ro.outcome)) + ": " + ro.reason;
        for (const auto& [site, relay] : self->state.sessions) {
          self->send(relay, a, w);
          told(site, "told in session");
        }
      },
      [=](pulse_atom) {
        // A lost joiner's lease may have run out (timers from this actor only).
        auto from = self->current_sender();
        if (!from || from->node() != self->node()) return;
        if (!self->state.pool) return;
        for (const auto& name : self->state.pool->expire(detail::now_s(self))) released(name);
      },
      [=](hello_atom, JoinAsk& ask) -> caf::result<WireFrame> {
        auto from = caf::actor_cast<caf::actor_addr>(self->current_sender());
        if (!from) return refuse("hello without a sender");
        if (ask.site.empty() || ask.site.size() > 256 || ask.islands <= 0 || ask.islands > rt->cfg.train.islands ||
            ask.held.size() > static_cast<std::size_t>(rt->cfg.train.islands) || ask.layout.size() > 1024 ||
            ask.cert.bytes.size() > kMaxCertificateBytes)
          return refuse("a malformed join request");
        std::vector<int> held;
        for (auto i : ask.held) {
          if (i < 0 || i >= rt->cfg.train.islands) return refuse("a join request holding island " + std::to_string(i));
          held.push_back(static_cast<int>(i));
        }
        if (!held.empty() && held.size() != static_cast<std::size_t>(ask.islands))
          return refuse("a join request holding " + std::to_string(held.size()) + " islands and asking for " + std::to_string(ask.islands));
        Pending x{ask.site, std::move(ask.cert.bytes), random_nonce(), ask.islands, std::move(held), std::move(ask.layout)};
        auto nonce = frame_of(x.nonce);
        self->state.pending.put(from, std::move(x));  // bounded: the oldest unanswered challenge goes
        return nonce;
      },
      [=](hello_atom, const std::string& site, const WireFrame& cert) -> caf::result<WireFrame> {
        auto from = caf::actor_cast<caf::actor_addr>(self->current_sender());
        if (!from) return refuse("hello without a sender");
        if (site_index(rt->cfg, site) < 0) return refuse("hello from unknown site '" + site + "'");
        if (cert.bytes.size() > kMaxCertificateBytes) return refuse("hello from '" + site + "' with a certificate over 64 KiB");
        Pending x{site, cert.bytes, random_nonce()};
        auto nonce = frame_of(x.nonce);
        self->state.pending.put(from, std::move(x));  // bounded: the oldest unanswered challenge goes
        return nonce;
      },
      [=](prove_atom, const WireFrame& sig) -> caf::result<SiteSession> {
        auto from = self->current_sender();
        auto proven = take_proof(self->state.pending, "site", sig);
        if (!from || !proven) return refuse(proven ? "proof without a sender" : proven.error().reason);
        const Pending x = std::move(*proven);
        const int site = x.want > 0 ? -1 : site_index(rt->cfg, x.site);
        if (!self->state.over.bytes.empty()) {  // proven, but the run ended: no session, the word that it is over
          SiteSession s;
          s.over = self->state.over;
          s.term = o.term;
          if (x.want > 0 && self->state.pool)  // a joiner back after the end: its islands' joiner is told
            for (int i : self->state.pool->held_by(x.site)) rt->gateway.told_island[static_cast<std::size_t>(i)] = true;
          told(site, "joined after the run ended, told");
          return s;
        }
        if (rt->leading && !rt->leading())  // a deposed leader serves nobody (the app closes its door)
          return refuse("site '" + x.site + "' refused: this replica no longer leads (term " + std::to_string(o.term) + ")");
        if (x.want > 0) return join(x, caf::actor_cast<caf::actor_addr>(from));
        if (site < 0) return refuse("site '" + x.site + "' is not a site of the configuration");
        auto syncer = rt->dir.syncer();
        if (!syncer) return caf::make_error(caf::sec::request_receiver_down, "the syncer is restarting");
        auto& relay = self->state.sessions[site];
        // One live session per site: a second claimant (another process for the same site) is
        // refused until the first one's session ends; it never displaces it.
        if (relay)
          return refuse("site '" + x.site + "' already has a live session (from node " +
                        caf::to_string(self->state.nodes[site]) + "); refused the claim from node " +
                        caf::to_string(from->node()));
        auto connector = caf::actor_cast<caf::actor>(from);
        relay = self->spawn(relay_actor, rt, site, x.site, islands_of_site(rt->cfg, site), syncer, connector, o.log);
        ++rt->gateway.sessions;
        self->monitor(relay);
        o.receivers->add(relay.id());
        self->state.nodes[site] = from->node();
        SiteSession s;
        s.relay = relay;
        s.term = o.term;
        for (int i : islands_of_site(rt->cfg, site)) {
          s.islands.push_back(i);
          s.steps.push_back(rt->syncer.heard_step[static_cast<std::size_t>(i)].load());
          s.finished.push_back(rt->syncer.finished[static_cast<std::size_t>(i)].load() ? 1 : 0);
        }
        if (o.log)
          o.log("site " + x.site + (o.ca_file.empty() ? " connected (insecure: identity not checked)"
                                                      : " authenticated (certificate CN=" + x.site + ", key proven)") +
                ", from node " + caf::to_string(from->node()));
        return s;
      },
      // ---- a follower replica: proves its name, then pulls the snapshots it lacks ----
      [=](replica_atom, hello_atom, const std::string& name, const WireFrame& cert) -> caf::result<WireFrame> {
        auto from = caf::actor_cast<caf::actor_addr>(self->current_sender());
        if (!from) return refuse("replica hello without a sender");
        if (std::find(o.replicas.begin(), o.replicas.end(), name) == o.replicas.end())
          return refuse("hello from '" + name + "', not a syncer replica of this run");
        if (cert.bytes.size() > kMaxCertificateBytes) return refuse("hello from '" + name + "' with a certificate over 64 KiB");
        Pending x{name, cert.bytes, random_nonce()};
        auto nonce = frame_of(x.nonce);
        self->state.pending_replicas.put(from, std::move(x));
        return nonce;
      },
      [=](replica_atom, prove_atom, const WireFrame& sig) -> caf::result<std::uint64_t> {
        auto addr = caf::actor_cast<caf::actor_addr>(self->current_sender());
        auto proven = take_proof(self->state.pending_replicas, "replica", sig);
        if (!addr || !proven) return refuse(proven ? "replica proof without a sender" : proven.error().reason);
        const Pending x = std::move(*proven);
        auto& fs = self->state.followers;
        for (auto f = fs.begin(); f != fs.end();)  // a replica's new session replaces its old one
          f = f->second.name == x.site ? fs.erase(f) : std::next(f);
        if (fs.size() >= o.replicas.size()) return refuse("too many follower sessions");
        Follower f;
        f.name = x.site;
        f.last_heard = detail::now_s(self);
        fs[addr] = f;  // holds nothing until its first request says what it holds
        rt->gateway.followers = static_cast<int>(fs.size());
        if (o.log) o.log("replica " + x.site + " follows (term " + std::to_string(o.term) + ")");
        return o.term;
      },
      [=](replica_atom, std::uint64_t have_generation, std::uint64_t have_round) -> caf::result<ReplicaUpdate> {
        auto addr = caf::actor_cast<caf::actor_addr>(self->current_sender());
        auto it = self->state.followers.find(addr);
        if (it == self->state.followers.end()) return refuse("state asked for by an unproven replica");
        auto& st = self->state;
        if (rt->leading && !rt->leading()) return refuse("state asked of a replica that no longer leads");
        const auto held = rt->syncer.held();
        // What it asks for after an update is what it holds: its acknowledgement.
        it->second.acked_round = std::min(have_round, held.round);
        it->second.acked_generation = std::min(have_generation, held.generation);
        it->second.last_heard = detail::now_s(self);
        std::vector<std::uint64_t> rounds, generations;
        for (const auto& [a, f] : st.followers) {
          rounds.push_back(f.acked_round);
          generations.push_back(f.acked_generation);
        }
        const auto majority = majority_round(held.round, rounds, o.replicas.size());
        if (majority > rt->gateway.majority_round.load()) rt->gateway.majority_round = majority;
        // What a majority holds may now reach the islands (Run::hold_until_replicated).
        const auto held_by_majority = majority_round(held.generation, generations, o.replicas.size());
        if (held_by_majority > rt->gateway.majority_generation.load()) {
          rt->gateway.majority_generation = held_by_majority;
          if (auto syncer = rt->dir.syncer()) self->send(syncer, replicated_atom::value, held_by_majority);
        }
        ReplicaUpdate u;
        u.term = o.term;
        u.generation = held.generation;
        u.round = held.round;
        u.over = st.over;
        if (held.snapshot && held.generation != have_generation) {
          if (st.encoded_generation != held.generation) {
            auto bytes = encode_checkpoint(rt->layout_model->layout(), rt->plan, *held.snapshot);
            if (!bytes) return caf::make_error(caf::sec::runtime_error, "snapshot not encodable: " + bytes.error().message());
            st.encoded.bytes.assign(bytes->begin(), bytes->end());
            st.encoded_generation = held.generation;
          }
          u.state = st.encoded;
        }
        return u;
      },
  };
}

}  // namespace

std::unique_ptr<Door> open_syncer_door(const RunConfig& cfg, const FragmentPlan& plan, const Endpoint& at,
                                       std::uint16_t caf_port, const TlsFiles* tls, NetLog log,
                                       std::shared_ptr<const PeerReceivers> receivers) {
  DoorOptions d;
  d.max_payload = peer_payload_bound(plan.largest(), static_cast<std::size_t>(plan.count()));
  d.role = DoorOptions::Role::syncer;
  d.listen = at;
  d.forward = Endpoint{"127.0.0.1", caf_port};
  if (tls) d.tls = *tls;
  for (int s = 0; s < site_count(cfg); ++s) d.peers.push_back(site_name(cfg, s));
  for (const auto& r : cfg.syncers) d.peers.push_back(r.name);  // followers of a replicated syncer
  d.any_peer = cfg.net.allow_join;
  d.peer_messages = peer_messages(std::move(receivers));
  d.admission = {static_cast<std::size_t>(cfg.net.pending_per_address), static_cast<std::size_t>(cfg.net.pending_total),
                 cfg.net.handshake_ms / 1000.0};
  d.log = std::move(log);
  return Door::open(std::move(d));
}

caf::actor spawn_gateway(caf::actor_system& sys, std::shared_ptr<Runtime> rt, GatewayOptions o) {
  return sys.spawn(gateway_actor, std::move(rt), std::move(o));
}

void tell_run_over(const caf::actor& gateway, const RunOver& o, std::uint64_t term) {
  caf::scoped_actor self{gateway.home_system()};
  self->send(gateway, session::over_atom::value, detail::to_wire(encode_message(o, term)));
}

bool every_site_told(const Runtime& rt) {
  for (int s = 0; s < site_count(rt.cfg); ++s) {
    if (rt.gateway.told_over[static_cast<std::size_t>(s)].load()) continue;
    for (int i : islands_of_site(rt.cfg, s))
      if (!rt.syncer.finished[static_cast<std::size_t>(i)].load()) return false;
  }
  // Joiners: one still holding unfinished islands (in session, or lost within its lease) is told too.
  if (!rt.cfg.net.allow_join) return true;
  for (int i : open_islands(rt.cfg)) {
    const auto k = static_cast<std::size_t>(i);
    if (!rt.gateway.vacant[k].load() && !rt.syncer.finished[k].load() && !rt.gateway.told_island[k].load()) return false;
  }
  return true;
}

caf::expected<std::uint16_t> publish_gateway(const caf::actor& gateway) {
  return gateway.home_system().middleman().publish(gateway, 0, "127.0.0.1", true);
}

}  // namespace diloco::actors
