// The syncer actor: SyncerCore behind a mailbox, grace deadlines as delayed messages,
// broadcasts to registered islands, a snapshot of every commit in memory (and every N global
// rounds on disk), restore on restart.
#pragma once

#include <memory>

#include <caf/actor.hpp>
#include <caf/fwd.hpp>

#include "diloco/actors/runtime.hpp"

namespace diloco::actors {

/// Spawns the syncer from `parent`. It restores the last snapshot when there is one: the one in
/// memory, published at every commit (a restart in this process loses no committed round), or
/// else the syncer.checkpoint file (a process started again: at most snapshot_every rounds back).
caf::actor spawn_syncer(caf::event_based_actor* parent, std::shared_ptr<Runtime> rt);

}  // namespace diloco::actors
