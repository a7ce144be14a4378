// The parameter server of train.mode "ddp" as a thin shell over DdpServer (libdiloco/ddp.hpp):
// joins, gradients, and the parameters of every step sent back to the islands.
#include "diloco/actors/param_server.hpp"

#include <map>
#include <string>

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/system_messages.hpp>
#include <spdlog/spdlog.h>

#include "detail.hpp"
#include "diloco/ddp.hpp"

namespace diloco::actors {

namespace {

struct ServerState {
  std::shared_ptr<DdpServer> ddp;     // Runtime::ddp_server: lives on across restarts
  std::map<int, caf::actor> islands;  // registered islands by id
};

using Self = caf::stateful_actor<ServerState>*;

/// The server cannot go on (its parameters hold NaN or infinity): reports it, stops the run with
/// `why`, and takes nothing more; it stays alive, so its supervisor does not restart it.
caf::behavior halted(Self self, Runtime& rt, const std::string& why) {
  rt.emit(Event::diverged_state(detail::now_s(self), -1, 0, 0, why));
  spdlog::error("syncer: {}", why);
  rt.stop(why);
  self->set_down_handler([](caf::down_msg&) {});
  return {
      [](join_atom, const WireFrame&) {}, [](progress_atom, const WireFrame&) {}, [](fragment_atom, const WireFrame&) {},
      [](grad_atom, const WireFrame&) {}, [](tick_atom) {},                     [](repaired_atom) {},
  };
}

/// When every island's gradient is in: the server's step, its parameters to every island, the
/// commit counted and reported (and published once per H steps, like the reference loop).
void poll(Self self, Runtime& rt) {
  auto& st = self->state;
  auto step = st.ddp->poll();
  if (!step) return;
  const double now = detail::now_s(self);
  auto frame = st.ddp->params_frame();
  if (!frame)  // NaN or infinity in the parameters: the islands would wait for them forever
    return self->become(halted(self, rt, "the parameter server diverged at step " + std::to_string(*step) + ": " +
                                             frame.error().message()));
  auto w = detail::to_wire(*frame);
  for (auto& [id, a] : st.islands) {
    rt.syncer.bytes_down += w.bytes.size();
    detail::send_over_link(self, rt, id, false, a, global_atom::value, w);
  }
  std::vector<int> all;
  for (int i = 0; i < rt.cfg.train.islands; ++i) all.push_back(i);
  for (int i : all) detail::tell_meter(rt, GoodputFact::merged_of(i, 0));
  detail::tell_meter(rt, GoodputFact::committed_at(now - rt.t0.load()));
  ++rt.syncer.commits;
  auto e = Event::committed(now, *step, 0, rt.cfg.train.islands, all);
  e.contributions = e.live = rt.cfg.train.islands;  // a server step waits for every island's gradient
  rt.emit(e);
  const auto H = static_cast<std::uint64_t>(rt.cfg.train.H);
  if (*step % H == 0 || *step == static_cast<std::uint64_t>(rt.cfg.train.steps))
    rt.syncer.publish(st.ddp->params(), (*step + H - 1) / H, true);
}

caf::behavior param_server_actor(Self self, std::shared_ptr<Runtime> rt) {
  detail::guard(self, "syncer");
  auto& st = self->state;
  const auto& c = rt->cfg;
  // Under repair (a chaos kill): take our place in the directory once it is over.
  if (const double now = detail::now_s(self), back = rt->windows.syncer_back(); now < back)
    self->delayed_send(self, detail::micros(back - now), repaired_atom::value);
  // The server's state lives on across restarts in this process; the gradients of the step in
  // flight are gone with the old actor and the islands send them again.
  if (!rt->syncer.ddp_server)
    rt->syncer.ddp_server = std::make_shared<DdpServer>(rt->layout_model->layout(), rt->initial, c.inner, c.train.islands);
  st.ddp = rt->syncer.ddp_server;
  st.ddp->clear_pending();
  if (++rt->syncer.starts > 1)
    rt->emit(Event::restored(detail::now_s(self), st.ddp->step(), "ddp server state kept in memory"));
  self->set_down_handler([self, rt](caf::down_msg& m) {
    auto& islands = self->state.islands;
    for (auto it = islands.begin(); it != islands.end(); ++it)
      if (it->second.address() == m.source) {
        islands.erase(it);
        break;
      }
    poll(self, *rt);
  });
  return {
      [=](join_atom, const WireFrame& w) {
        auto& st = self->state;
        auto joining = detail::admit_join(self, *rt, w);
        if (!joining) return;
        const auto& [id, who, keeps_local, holds] = *joining;  // replicas always heal fresh and whole (ddp_replica.cpp)
        st.islands[id] = who;
        self->monitor(who);
        rt->syncer.finished[static_cast<std::size_t>(id)] = false;
        detail::welcome(self, *rt, id, who, st.ddp->join_reply(), st.ddp->step());
      },
      [=](progress_atom, const WireFrame& w) {
        // Only a diverged island's report matters here (admit_progress stops the run): the
        // server waits for every gradient anyway.
        (void)detail::admit_progress(self, *rt, w);
      },
      [=](repaired_atom) { rt->dir.set_syncer(caf::actor_cast<caf::actor>(self)); },
      [=](grad_atom, const WireFrame& w) {
        auto got = self->state.ddp->receive(detail::bytes_of(w));
        if (!got && got.error().code == errc::stale_round) {
          // A gradient of a step the server took already, delivered late (one sent before its
          // replica re-joined and did the step again, or a dead incarnation's held by a cut
          // link): dropped and counted as the syncer drops a late contribution, not a faulty frame.
          return detail::drop_late(self, *rt, w, got.error().message());
        }
        if (!got) {
          ++rt->syncer.refused;
          rt->emit(Event::refused(detail::now_s(self), got.error().message(), std::string(to_string(got.error().code))));
          return;
        }
        poll(self, *rt);
      },
      [](fragment_atom, const WireFrame&) {},  // not of this protocol
      [](tick_atom) {},
  };
}

}  // namespace

caf::actor spawn_param_server(caf::event_based_actor* parent, std::shared_ptr<Runtime> rt) {
  return parent->spawn(param_server_actor, std::move(rt));
}

}  // namespace diloco::actors
