// The chaos driver: plays Runtime::schedule (seeded [chaos] faults and time-triggered
// [[faults]]) against the units of this process, each fault logged as an Event.
#pragma once

#include <memory>

#include <caf/fwd.hpp>

#include "diloco/actors/runtime.hpp"

namespace diloco::actors {

/// Spawns the driver (unsupervised; it quits when `root`, the supervision tree, goes down).
/// spawn_runtime does this when the schedule is not empty.
caf::actor spawn_chaos(caf::actor_system& sys, std::shared_ptr<Runtime> rt, SpawnSet what, caf::actor root);

}  // namespace diloco::actors
