// The chaos driver: plays the run's fault schedule (Runtime::schedule, from [chaos] and the
// time-triggered [[faults]]) against the units this process runs. It stands outside the
// supervision tree, like a chaos monkey: it kills, the supervisors restart, the repair time
// keeps the restarted unit out until it is over.
#include "diloco/actors/chaos.hpp"

#include <algorithm>

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/send.hpp>
#include <caf/system_messages.hpp>
#include <spdlog/spdlog.h>

#include "detail.hpp"

namespace diloco::actors {

namespace {

using chaos_atom = caf::atom_constant<caf::atom("dl_chaos")>;

bool runs_island(const SpawnSet& what, int i) {
  return what.all_islands || std::find(what.islands.begin(), what.islands.end(), i) != what.islands.end();
}

void fire(caf::event_based_actor* self, Runtime& rt, const SpawnSet& what, const ChaosEvent& e) {
  const double now = detail::now_s(self);
  const double back = now + e.duration_s;
  auto reason = [&] { return caf::make_error(caf::sec::runtime_error, "injected fault: " + e.describe()); };
  switch (e.kind) {
    case ChaosEvent::kill_chip:
      if (!runs_island(what, e.island)) return;
      rt.chip_repair[static_cast<std::size_t>(e.island)][static_cast<std::size_t>(e.chip)] = back;
      exit_signal(rt.dir.chip(e.island, e.chip), reason());
      break;
    case ChaosEvent::kill_island:
      if (!runs_island(what, e.island)) return;
      // The island and its chips go down together (a host or a slice lost).
      rt.island_repair[static_cast<std::size_t>(e.island)] = back;
      for (int c = 0; c < rt.cfg.islands.chips_of(e.island); ++c) {
        rt.chip_repair[static_cast<std::size_t>(e.island)][static_cast<std::size_t>(c)] = back;
        exit_signal(rt.dir.chip(e.island, c), reason());
      }
      exit_signal(rt.dir.island(e.island), reason());
      break;
    case ChaosEvent::kill_syncer:
      if (!what.syncer) return;
      rt.syncer_repair = back;
      exit_signal(rt.dir.syncer(), reason());
      break;
    case ChaosEvent::straggle:
      if (!runs_island(what, e.island)) return;
      rt.straggle_factor[static_cast<std::size_t>(e.island)] = e.factor;
      rt.straggle_until[static_cast<std::size_t>(e.island)] = back;
      break;
    case ChaosEvent::partition:
      break;  // the site's links hold their frames for the window (Runtime::links)
  }
  const std::string line = "injected fault: " + e.describe();
  spdlog::warn("{}", line);
  static constexpr FaultKind kinds[] = {FaultKind::chip, FaultKind::island, FaultKind::syncer, FaultKind::straggle,
                                        FaultKind::partition};  // by ChaosEvent::Kind
  rt.emit(Event::fault_fired(now, kinds[e.kind], e.island, e.chip, 0, line));
}

caf::behavior chaos_actor(caf::event_based_actor* self, std::shared_ptr<Runtime> rt, SpawnSet what, caf::actor root) {
  detail::guard(self, "chaos");
  // It ends with the tree it torments.
  self->monitor(root);
  self->set_down_handler([self](caf::down_msg& m) { self->quit(m.reason); });
  // One timer at a time: the next event is armed when the previous one fired.
  auto arm = [self, rt](std::size_t k) {
    if (k >= rt->schedule.size()) return;
    const double at = rt->t0.load() + rt->schedule[k].at_s;
    self->delayed_send(self, detail::micros(at - detail::now_s(self)), chaos_atom::value, static_cast<std::uint64_t>(k));
  };
  arm(0);
  return {
      [=](chaos_atom, std::uint64_t k) {
        if (rt->all_done()) return;  // the run is over
        fire(self, *rt, what, rt->schedule[k]);
        arm(k + 1);
      },
  };
}

}  // namespace

caf::actor spawn_chaos(caf::actor_system& sys, std::shared_ptr<Runtime> rt, SpawnSet what, caf::actor root) {
  return sys.spawn(chaos_actor, std::move(rt), std::move(what), std::move(root));
}

}  // namespace diloco::actors
