// The island actor: inner steps on whichever chips answer, fragments to the syncer when due,
// adoption of merged fragments, heal on (re)start; it never waits for other islands.
#pragma once

#include <memory>

#include <caf/actor.hpp>
#include <caf/fwd.hpp>

#include "diloco/actors/runtime.hpp"

namespace diloco::actors {

/// Spawns island `island` from `parent`. On start it joins the syncer and heals from the
/// JoinReply; a restarted island resumes the run's step count; when the syncer dies it keeps
/// training and re-joins the restarted one, keeping its parameters (its next δ resends).
caf::actor spawn_island(caf::event_based_actor* parent, std::shared_ptr<Runtime> rt, int island);

}  // namespace diloco::actors
