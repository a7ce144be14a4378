// The ddp replica: an island in train.mode "ddp" (synchronous data parallel). Each step it hands
// the batch to its chips, sends their token-weighted gradient to the parameter server and waits
// for the server's parameters of the next step.
#pragma once

#include <memory>

#include <caf/actor.hpp>
#include <caf/fwd.hpp>

#include "diloco/actors/runtime.hpp"

namespace diloco::actors {

/// Spawns the ddp replica of island `island` from `parent`. On start it joins the parameter
/// server and takes its parameters; a step needs every chip of the island (with one down it
/// waits) and every island (the server waits for all gradients); a step a chip died in is lost
/// and done again.
caf::actor spawn_ddp_replica(caf::event_based_actor* parent, std::shared_ptr<Runtime> rt, int island);

}  // namespace diloco::actors
