// The Decoupled DiLoCo runtime as CAF 0.17 actors in one process: chips, islands and the syncer
// under a supervision tree (root → syncer + one supervisor per island → island + chips). The
// Runtime joins the rooms every actor shares: the run (run.hpp), the ledger (ledger.hpp), the
// directory, the fault windows and the links.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include <caf/actor.hpp>
#include <caf/fwd.hpp>

#include "diloco/actors/directory.hpp"
#include "diloco/actors/faults.hpp"
#include "diloco/actors/ledger.hpp"
#include "diloco/actors/link.hpp"
#include "diloco/actors/meter.hpp"
#include "diloco/actors/protocol.hpp"
#include "diloco/actors/run.hpp"
#include "diloco/actors/supervisor.hpp"

namespace diloco::actors {

/// Everything the runtime's actors share inside one process, by room: the run (fixed), the
/// ledger (what happens), the directory (where units are), the fault windows and each site's
/// links.
struct Runtime : Run, Ledger {
  /// `resumed_at`: seconds trained before a resume from a state directory (Run).
  Runtime(RunConfig cfg, std::function<void(const Event&)> on_event = {}, double resumed_at = 0.0);

  Directory dir;
  /// The goodput meter (meter.hpp): units tell it what they did; set by spawn_runtime before any
  /// unit starts, never changed after.
  caf::actor meter;
  /// The windows injected faults leave (repair, slow-downs) and which [[faults]] fired (faults.hpp).
  FaultWindows windows;
  /// Each site's emulated WAN links (the "link" step of a fragment's life: link.hpp).
  SiteLinks links;

  /// The speed of island `island`'s chips at actor time `now`: islands.speed × any straggling.
  double speed(int island, double now) const;
  /// train.budget is spent for an island at local step `step` ("total_tokens": for all).
  bool budget_spent(long step) const;
  /// Every island trained its budget (or the tokens budget is spent).
  bool trained() const;
  /// Every island is done, or the tokens budget is spent and those not done are down (nothing is
  /// left for them to do).
  bool all_done() const;
};

/// Which units a process runs: all of them in one process; the syncer alone or one site's
/// islands in multi-process runs.
struct SpawnSet {
  bool syncer = true;
  bool all_islands = true;
  std::vector<int> islands;  // used when !all_islands
};

/// The supervision tree: root (one_for_one) → "syncer" and "island-i" supervisors, each with
/// "island" and "chip-c" children (supervision.* flags), plus the chaos driver when the run
/// has a fault schedule. Returns the root supervisor.
caf::actor spawn_runtime(caf::actor_system& sys, std::shared_ptr<Runtime> rt, EventSink sink = {},
                         SpawnSet what = {});

}  // namespace diloco::actors
