// The chip actor: loss and gradient of one micro-batch on its island's current parameters.
#pragma once

#include <memory>

#include <caf/actor.hpp>
#include <caf/fwd.hpp>

#include "diloco/actors/runtime.hpp"

namespace diloco::actors {

/// Spawns chip `chip` of island `island` from `parent` (a supervisor). It answers each
/// ChipWork with a ChipResult; an island slower than 1.0 (islands.speed) is emulated by
/// delaying the answer by (1/speed − 1) × the compute time.
caf::actor spawn_chip(caf::event_based_actor* parent, std::shared_ptr<Runtime> rt, int island, int chip);

}  // namespace diloco::actors
