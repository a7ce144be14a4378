// The actor runtime on CAF's deterministic test coordinator, for the actor tests: an actor system
// whose messages and timers run only when the test says so, and the loop that runs them until
// the run is done or nothing is left. No sleeping.
#pragma once

#include <chrono>
#include <functional>
#include <vector>
#include <memory>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/atom.hpp>
#include <caf/scheduler/test_coordinator.hpp>

#include "diloco/actors/runtime.hpp"

namespace diloco::testing {

/// An actor system on the test coordinator that knows the runtime's message types.
struct Coordinated {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  caf::scheduler::test_coordinator* sched = nullptr;

  Coordinated() {
    cfg.set("scheduler.policy", caf::atom("testing"));
    actors::add_runtime_types(cfg);
    sys = std::make_unique<caf::actor_system>(cfg);
    sched = &dynamic_cast<caf::scheduler::test_coordinator&>(sys->scheduler());
  }

  /// Runs every message, then fires the next timer, again and again (at most 20,000 timers)
  /// until `done` holds or nothing is left to run; returns whether `done` held (false without it).
  bool settle(const std::function<bool()>& done = {}) {
    for (int i = 0; i < 20000; ++i) {
      sched->run();
      if (done && done()) return true;
      if (!sched->has_pending_timeout()) break;
      sched->trigger_timeout();
    }
    return done && done();
  }

  /// The actor clock's second now (what the runtime's events are stamped with).
  double now() const { return std::chrono::duration<double>(sys->clock().now().time_since_epoch()).count(); }

  /// The run of `rt` is over now: its invariants checker judges the end (goodput, repairs), and
  /// every broken invariant comes back (empty: the run kept them all).
  std::vector<Violation> end_of_run(actors::Runtime& rt) const {
    rt.check_end(now());
    return rt.violations();
  }

  /// settle() until every island of `rt` finished its steps.
  bool settle_until_done(const actors::Runtime& rt) {
    return settle([&rt] { return rt.tally().islands_done >= rt.cfg.train.islands; });
  }
};

}  // namespace diloco::testing
