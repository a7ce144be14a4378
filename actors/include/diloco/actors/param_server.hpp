// The parameter server of train.mode "ddp": DdpServer (libdiloco/ddp.hpp) behind a mailbox. It
// takes each island's gradient, averages them when all arrived, takes the AdamW step and sends
// the new parameters to every island.
#pragma once

#include <memory>

#include <caf/actor.hpp>
#include <caf/fwd.hpp>

#include "diloco/actors/runtime.hpp"

namespace diloco::actors {

/// Spawns the parameter server from `parent` (in the syncer's place of the tree and the
/// directory). Its state (Runtime::ddp_server) lives on across restarts in this process; the
/// gradients of the step in flight are gone with a dead server, and the islands send them again.
caf::actor spawn_param_server(caf::event_based_actor* parent, std::shared_ptr<Runtime> rt);

}  // namespace diloco::actors
