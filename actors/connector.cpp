// A site's side across processes: the connector dials the syncer through the site's front door,
// proves the site's identity, puts the relay it is given where the islands find their syncer,
// heartbeats, and on any loss reconnects with capped exponential back-off.
#include "diloco/actors/remote.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <stdexcept>
#include <thread>


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
#include "diloco/leadership.hpp"
#include "session_protocol.hpp"

namespace diloco::actors {

namespace {

using namespace session;

// ---- connector: a site process's link to the syncer ----

struct ConnectorState {
  ConnectorState() = default;  // not State(self): see RelayState in gateway.cpp
  caf::actor gateway;
  caf::actor relay;
  bool dialing = false;
  int failures = 0;
  std::uint64_t sequence = 0;
  double last_echo = 0.0;
  int sessions = 0;
  bool over = false;  // the syncer said the run is over: no more dialing
  TermFence fence;    // a replicated syncer: sessions of a deposed leader's term are refused
};

caf::behavior connector_actor(caf::stateful_actor<ConnectorState>* self, std::shared_ptr<Runtime> rt,
                              ConnectorOptions o) {
  detail::guard(self, "connector " + o.site);
  const auto& net = rt->cfg.net;
  const std::string where =
      o.syncer_label.empty() ? o.syncer.host + ":" + std::to_string(o.syncer.port) : o.syncer_label;
  std::string why;
  const Bytes cert = o.tls ? read_bytes(o.cert_file, &why) : Bytes{};
  if (o.tls && cert.empty()) throw std::runtime_error(why);
  auto log = [o](const std::string& s) {
    if (o.log) o.log(s);
  };
  // Capped exponential back-off: initial · 2^(failures−1), at most reconnect_max_ms.
  auto retry = [self, net, log, o](const std::string& what) {
    auto& st = self->state;
    st.dialing = false;
    if (st.over) return;
    ++st.failures;
    if (o.max_attempts > 0 && st.failures >= o.max_attempts) {
      log("giving up after " + std::to_string(st.failures) + " failed attempts: " + what);
      if (o.on_give_up) o.on_give_up();
      self->quit();
      return;
    }
    const double d = std::min(net.reconnect_max_ms, net.reconnect_initial_ms * std::pow(2.0, st.failures - 1));
    log(what + "; retrying in " + std::to_string(static_cast<int>(d)) + " ms");
    self->delayed_send(self, ms(d), redial_atom::value);
  };
  // Where the site's islands find their syncer: the directory's syncer entry, or their routes
  // when the syncer is in this process (ConnectorOptions::route).
  auto set_syncer = [rt, o](caf::actor relay) {
    if (o.route.empty()) rt->dir.set_syncer(std::move(relay));
    else rt->dir.set_route(o.route, std::move(relay));
  };
  auto lose = [self, log, set_syncer](const std::string& what) {
    auto& st = self->state;
    if (st.relay) {
      self->demonitor(st.relay);
      st.relay = caf::actor{};
      set_syncer(caf::actor{});  // islands keep training and re-join the next relay
      log("session lost: " + what);
    }
  };
  // The syncer's word that the run is over (a RunOver frame): told once, the connector ends.
  // Anything else in its place is refused as a broken answer (counted in the process's gateway
  // record: a site process has no gateway of its own), and the site dials again.
  auto hear_over = [self, rt, log, o, retry](const WireFrame& w) {
    const std::string where = "connector " + o.site + ": run-over word";
    const auto got = detail::stale_term(self, *rt, rt->gateway.connector_refused, where, w)
                         ? std::nullopt
                         : detail::expect_message<RunOver>(self, *rt, rt->gateway.connector_refused, where, w);
    if (!got) {
      retry("a broken run-over word from the syncer");
      return;
    }
    auto& st = self->state;
    if (st.over) return;
    st.over = true;
    const auto& ro = *got;
    log("the syncer says the run is over (" + std::string(to_string(ro.outcome)) + ": " + ro.reason + "); not reconnecting");
    if (o.on_run_over) o.on_run_over(ro);
    self->quit();
  };
  auto authenticate = [=](caf::actor gw) {
    // A joiner says what it brings; a site of the configuration, only who it is.
    auto hello = [=] {
      if (o.join_islands <= 0) return self->request(gw, std::chrono::seconds(10), hello_atom::value, o.site, frame_of(cert));
      JoinAsk ask;
      ask.site = o.site;
      ask.cert = frame_of(cert);
      if (o.held)
        for (int i : o.held()) ask.held.push_back(i);
      // Asking again for what it trains: that many, whatever it first asked for.
      ask.islands = ask.held.empty() ? o.join_islands : static_cast<std::int32_t>(ask.held.size());
      ask.layout = o.layout;
      return self->request(gw, std::chrono::seconds(10), hello_atom::value, std::move(ask));
    };
    hello()
        .then(
            [=](const WireFrame& nonce) {
              std::string err;
              Bytes sig;
              if (o.tls) {
                sig = sign_with_key(o.key_file, challenge_message(o.site, nonce.bytes), &err);
                if (sig.empty()) {
                  retry("cannot sign the challenge: " + err);
                  return;
                }
              }
              self->request(gw, std::chrono::seconds(10), prove_atom::value, frame_of(sig))
                  .then(
                      [=](SiteSession& s) {
                        auto& st = self->state;
                        st.dialing = false;
                        st.failures = 0;
                        const bool admitted = st.fence.admit(s.term);
                        rt->newest_term = st.fence.newest();  // frames of older terms are refused from here on
                        if (!admitted) {
                          ++rt->gateway.connector_refused;
                          rt->emit(Event::refused(detail::now_s(self),
                                                  "a session of term " + std::to_string(s.term) +
                                                      " from a deposed syncer leader (the newest term is " +
                                                      std::to_string(st.fence.newest()) + ")",
                                                  "session"));
                          retry("refused a session of the deposed leader's term " + std::to_string(s.term));
                          return;
                        }
                        if (!s.over.bytes.empty()) {
                          hear_over(s.over);
                          return;
                        }
                        if (!s.refused.empty()) {  // a joiner the run will not take: no point dialing again
                          st.over = true;
                          log("refused by the syncer: " + s.refused + "; not reconnecting");
                          if (o.on_refused) o.on_refused(s.refused);
                          self->quit();
                          return;
                        }
                        if (!s.relay) {
                          retry("session without a relay");
                          return;
                        }
                        st.relay = s.relay;
                        self->monitor(st.relay);
                        st.last_echo = detail::now_s(self);
                        ++st.sessions;
                        set_syncer(st.relay);
                        log("session " + std::to_string(st.sessions) + " with the syncer at " + where +
                            (s.term ? " (leader's term " + std::to_string(s.term) + ")" : std::string()) +
                            (o.tls ? " (mutual TLS, site proven)" : " (INSECURE)"));
                        if (o.on_session) o.on_session(s);
                      },
                      [=](caf::error& e) { retry("refused by the syncer: " + self->system().render(e)); });
            },
            [=](caf::error& e) { retry("hello failed: " + self->system().render(e)); });
  };
  auto dial = [=] {
    auto& st = self->state;
    if (st.dialing || st.relay || st.over) return;
    st.dialing = true;
    if (!st.gateway && o.gateway) {  // in this process: no connection to make
      st.gateway = o.gateway;
      self->monitor(o.gateway);
    }
    if (st.gateway) {
      authenticate(st.gateway);
      return;
    }
    auto mm = self->system().middleman().actor_handle();
    self->request(mm, std::chrono::seconds(10), caf::connect_atom::value, o.syncer.host, o.syncer.port)
        .then(
            [=](const caf::node_id&, caf::strong_actor_ptr& p, const std::set<std::string>&) {
              if (!p) {
                retry("nothing published at " + where);
                return;
              }
              auto gw = caf::actor_cast<caf::actor>(std::move(p));
              self->state.gateway = gw;
              self->monitor(gw);
              authenticate(gw);
            },
            [=](caf::error& e) { retry("cannot connect to " + where + ": " + self->system().render(e)); });
  };
  self->set_down_handler([=](caf::down_msg& m) {
    auto& st = self->state;
    if (st.gateway && m.source == st.gateway.address()) {
      st.gateway = caf::actor{};
      lose("connection to the syncer closed (" + self->system().render(m.reason) + ")");
    } else if (st.relay && m.source == st.relay.address()) {
      lose("the syncer closed the session (" + self->system().render(m.reason) + ")");
    } else {
      return;
    }
    if (!st.dialing) retry("reconnecting");
  });
  self->send(self, redial_atom::value);
  self->delayed_send(self, ms(net.heartbeat_ms), pulse_atom::value);
  return {
      [=](redial_atom) { dial(); },
      [=](pulse_atom) {
        auto& st = self->state;
        const double now = detail::now_s(self);
        if (st.relay) {
          if (now - st.last_echo > net.timeout_ms / 1000.0) {
            lose("no heartbeat from the syncer for " + std::to_string(static_cast<int>((now - st.last_echo) * 1000)) +
                 " ms");
            if (!st.dialing) retry("reconnecting");
          } else {
            Heartbeat hb{site_index(rt->cfg, o.site), ++st.sequence,
                         static_cast<std::uint64_t>(std::max(0.0, now) * 1e9)};
            self->send(st.relay, beat_atom::value, detail::to_wire(encode_message(hb)));
          }
        }
        self->delayed_send(self, ms(net.heartbeat_ms), pulse_atom::value);
      },
      [=](over_atom, const WireFrame& w) {
        auto from = self->current_sender();
        if (self->state.relay && from && from->address() == self->state.relay.address()) hear_over(w);
      },
      [=](beat_atom, const WireFrame& w) {
        auto msg = decode_message(detail::bytes_of(w));
        if (!msg || !std::holds_alternative<Heartbeat>(*msg) || std::get<Heartbeat>(*msg).sender != syncer_id) return;
        // A deposed leader's echo keeps nothing alive (refused and counted).
        if (detail::stale_term(self, *rt, rt->gateway.connector_refused, "connector " + o.site + ": heartbeat echo", w)) return;
        auto from = self->current_sender();
        if (self->state.relay && from && from->address() == self->state.relay.address())
          self->state.last_echo = detail::now_s(self);
      },
  };
}
}  // namespace

std::unique_ptr<Door> open_site_door(const RunConfig& cfg, const Endpoint& syncer, const TlsFiles* tls, NetLog log,
                                     std::vector<DoorOptions::Target> only) {
  DoorOptions d;
  d.role = DoorOptions::Role::site;
  d.listen = Endpoint{"127.0.0.1", 0};
  d.forward = syncer;
  if (tls) d.tls = *tls;
  d.peers = {cfg.net.syncer_name};
  // A replicated syncer: the door dials the replicas in turn until it reaches the leader.
  if (!only.empty()) d.targets = std::move(only);
  else
    for (const auto& r : cfg.syncers) d.targets.push_back({parse_endpoint(r.address), r.name});
  d.admission.handshake_s = cfg.net.handshake_ms / 1000.0;
  d.log = std::move(log);
  return Door::open(std::move(d));
}

caf::actor spawn_connector(caf::actor_system& sys, std::shared_ptr<Runtime> rt, ConnectorOptions o) {
  return sys.spawn(connector_actor, std::move(rt), std::move(o));
}

std::string follow_leader(caf::actor_system& sys, std::uint16_t door_port, const FollowOptions& o) {
  auto log = [&o](const std::string& s) {
    if (o.log) o.log(s);
  };
  auto gw = sys.middleman().remote_actor("127.0.0.1", door_port);
  if (!gw) return "cannot reach the leader: " + sys.render(gw.error());
  caf::scoped_actor self{sys};
  std::string why;
  const Bytes cert = o.tls ? read_bytes(o.cert_file, &why) : Bytes{};
  if (o.tls && cert.empty()) return why;
  std::string ended;
  auto failed = [&](const caf::error& e) { ended = sys.render(e); };
  WireFrame nonce;
  self->request(*gw, std::chrono::seconds(10), replica_atom::value, hello_atom::value, o.name, frame_of(cert))
      .receive([&](WireFrame& n) { nonce = std::move(n); }, failed);
  if (!ended.empty()) return "hello refused: " + ended;
  Bytes sig;
  if (o.tls) {
    sig = sign_with_key(o.key_file, challenge_message(o.name, nonce.bytes), &why);
    if (sig.empty()) return "cannot sign the challenge: " + why;
  }
  std::uint64_t term = 0;
  self->request(*gw, std::chrono::seconds(10), replica_atom::value, prove_atom::value, frame_of(sig))
      .receive([&](std::uint64_t t) { term = t; }, failed);
  if (!ended.empty()) return "proof refused: " + ended;
  log("following the leader (term " + std::to_string(term) + ")");
  std::uint64_t generation = 0, round = 0;
  // The leader answers at once; a dead or paused one is noticed when an answer is this late. A
  // snapshot of a large model takes longer to cross: the bound grows with the last one's size
  // (at 10 MB/s).
  std::size_t last_bytes = 0;
  while (!o.keep_going || o.keep_going()) {
    ReplicaUpdate u;
    bool got = false;
    const auto timeout = std::chrono::milliseconds(2000 + static_cast<long>(last_bytes / 10000));
    self->request(*gw, timeout, replica_atom::value, generation, round)
        .receive(
            [&](ReplicaUpdate& x) {
              u = std::move(x);
              got = true;
            },
            failed);
    if (!got) return "the leader stopped answering: " + ended;
    if (u.term != term) return "the leader's term changed from " + std::to_string(term) + " to " + std::to_string(u.term);
    const bool fresh = !u.state.bytes.empty();
    if (fresh) last_bytes = u.state.bytes.size();
    if (fresh || !u.over.bytes.empty()) {
      const auto g = u.generation, r = u.round;
      const bool over = !u.over.bytes.empty();
      // Acknowledged (by the next request) only once held: a snapshot the follower could not
      // check or write is asked for again, never counted towards a majority.
      const bool held = o.on_update ? o.on_update(u) : true;
      if (fresh && held) generation = g, round = r;
      if (over) return "the run is over";
      if (fresh && !held) std::this_thread::sleep_for(std::chrono::seconds(1));  // not at the leader's full speed
    }
    if (!fresh) std::this_thread::sleep_for(std::chrono::microseconds(static_cast<long>(o.poll_ms * 1000)));
  }
  return "stopped following";
}

}  // namespace diloco::actors
