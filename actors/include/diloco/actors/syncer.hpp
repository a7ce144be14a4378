// The syncer actor: SyncerCore behind a mailbox, grace deadlines as delayed messages,
// broadcasts to registered islands, snapshots every N global rounds, restore on restart.
#pragma once

#include <memory>

#include <caf/actor.hpp>
#include <caf/fwd.hpp>

#include "diloco/actors/runtime.hpp"

namespace diloco::actors {

/// Spawns the syncer from `parent`. It restores the last snapshot (syncer.checkpoint file, or
/// the in-memory one) when there is one, so a restart loses at most snapshot_every rounds.
caf::actor spawn_syncer(caf::event_based_actor* parent, std::shared_ptr<Runtime> rt);

}  // namespace diloco::actors
