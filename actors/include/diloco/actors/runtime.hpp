// The Decoupled DiLoCo runtime as CAF 0.17 actors in one process: chips, islands and the syncer
// under a supervision tree (root → syncer + one supervisor per island → island + chips).
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/fwd.hpp>

#include "diloco/actors/directory.hpp"
#include "diloco/actors/faults.hpp"
#include "diloco/actors/link.hpp"
#include "diloco/actors/protocol.hpp"
#include "diloco/actors/supervisor.hpp"
#include "diloco/chaos.hpp"
#include "diloco/budget.hpp"
#include "diloco/checkpoint.hpp"
#include "diloco/config.hpp"
#include "diloco/data.hpp"
#include "diloco/ddp.hpp"
#include "diloco/events.hpp"
#include "diloco/fragments.hpp"
#include "diloco/goodput.hpp"
#include "diloco/model.hpp"
#include "diloco/wan.hpp"

namespace diloco::actors {


/// What a run is, fixed when it starts: the configuration and what follows from it (the
/// budget, the data, the layout and fragment plan, the initial parameters, the fault schedule).
/// Read by every actor; written by nobody once the tree is spawned (an app may set `initial`
/// before, as --init does).
struct Run {
  explicit Run(RunConfig cfg);

  RunConfig cfg;
  RunBudget budget;                     // what the run trains before it ends (train.budget)
  Corpus corpus;
  std::unique_ptr<Model> layout_model;  // owns the layout the plans refer to
  FragmentPlan plan;
  std::vector<float> initial;           // seeded initial parameters
  /// The fault schedule: [chaos] events and the time-triggered [[faults]] (at_s), by time.
  std::vector<ChaosEvent> schedule;

  int P() const { return plan.count(); }
  /// train.mode "diloco" / "streaming" on the actors: islands wait for each merged fragment
  /// (K = all islands, as the reference loops); "decoupled": they never wait.
  bool synchronous() const { return cfg.train.mode == TrainMode::diloco || cfg.train.mode == TrainMode::streaming; }
  /// train.mode "ddp" on the actors: every step, islands send gradients and the parameter
  /// server averages them, takes the AdamW step and sends the parameters back.
  bool ddp() const { return cfg.train.mode == TrainMode::ddp; }
  int tau() const { return cfg.train.mode == TrainMode::diloco ? 0 : cfg.fragments.tau; }
  double alpha() const { return cfg.train.mode == TrainMode::diloco ? 0.0 : cfg.fragments.effective_alpha(); }
  /// Decoupled islands send their unsent progress at the end (train.final_sync_s > 0).
  bool final_sync() const { return cfg.train.mode == TrainMode::decoupled && cfg.train.final_sync_s > 0.0; }
};

/// Counters every actor updates (atomics; read by the app's progress lines).
struct RuntimeCounters {
  std::atomic<std::uint64_t> tokens{0};         // tokens trained by all islands
  std::atomic<std::uint64_t> bytes_sent{0};     // frame bytes islands → syncer and syncer → islands
  std::atomic<int> live_islands{0};
  std::atomic<int> live_chips{0};
  std::atomic<int> islands_done{0};
  std::atomic<std::uint64_t> dropped_stale{0};  // outer gradients too stale or repeating merged progress
  std::atomic<std::uint64_t> rejected{0};       // every other refusal (malformed, unknown sender, ...)
  std::atomic<std::uint64_t> commits{0};
};

/// What the actors record as a run goes on, and what the apps read: counters, each island's
/// progress and state of life, goodput, the global parameters and rounds, the syncer's last
/// snapshot, the events and why the run stopped.
struct Ledger {
  Ledger(const Run& run, std::function<void(const Event&)> on_event);

  RuntimeCounters counters;
  std::vector<std::atomic<long>> island_steps;   // last finished step per island (restarts resume)
  std::vector<std::atomic<int>> incarnations;    // starts per island
  std::atomic<int> syncer_starts{0};
  /// The end of the run. An island is done when it trained its budget and, with the final sync
  /// (decoupled), its last contributions were merged.
  std::vector<std::atomic<bool>> island_done;
  /// The incarnation of the island that is joined and not dead (0: none), so that a dead
  /// incarnation's clean-up cannot undo its successor's join.
  std::vector<std::atomic<int>> island_live;
  /// The syncer heard the island's Progress.finished (and it has not re-joined since): in a
  /// syncer-only process, what tells the run is over.
  std::vector<std::atomic<bool>> island_finished;
  /// Actor-clock second at which the run started (set by spawn_runtime): chaos event times,
  /// link partitions and goodput are relative to it.
  std::atomic<double> t0{0.0};

  /// Goodput and global downtime (goodput.hpp), fed by the actors; times relative to t0.
  std::mutex goodput_mu;
  std::unique_ptr<GoodputMeter> goodput;
  template <class F>
  void account(F&& f) {
    std::lock_guard lk(goodput_mu);
    f(*goodput);
  }
  GoodputMeter::Report goodput_report(double now);

  /// The syncer's last snapshot in memory (also written to cfg.syncer.checkpoint when set).
  std::mutex snap_mu;
  std::optional<Checkpoint> last_snapshot;
  /// ddp: the parameter server's state, kept across restarts in this process (as a torchrun job
  /// keeps its replicas' state in memory); null until the first server starts.
  std::shared_ptr<DdpServer> ddp_server;
  /// The syncer's newest global parameters and round (for the final evaluation).
  std::mutex global_mu;
  std::vector<float> global;
  std::uint64_t global_round = 0;
  /// Every new global round with its parameters, for reporters that want each one (the app
  /// drains it); bounded so a reporter that never reads costs little memory.
  std::deque<std::pair<std::uint64_t, std::vector<float>>> new_rounds;
  static constexpr std::size_t max_new_rounds = 64;

  void emit(const Event& e);
  /// The run cannot go on and must end with an error: an island or the syncer diverged, or the
  /// syncer's state file is unusable. Not a crash: a restarted unit would meet the same state
  /// (or the same settings) again, and its supervisor would restart it forever. The first
  /// reason is kept; the app ends the run with it and a non-zero exit.
  void stop(const std::string& why);
  /// Why the run was stopped, if it was.
  std::optional<std::string> stopped() const;

private:
  mutable std::mutex stop_mu_;
  std::optional<std::string> stop_reason_;
  std::mutex ev_mu_;
  std::function<void(const Event&)> on_event_;
};

/// Everything the runtime's actors share inside one process, by room: the run (fixed), the
/// ledger (what happens), the directory (where units are), the fault windows and each site's
/// links.
struct Runtime : Run, Ledger {
  Runtime(RunConfig cfg, std::function<void(const Event&)> on_event = {});

  Directory dir;
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
