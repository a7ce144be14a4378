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
#include <span>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/fwd.hpp>

#include "diloco/actors/directory.hpp"
#include "diloco/actors/faults.hpp"
#include "diloco/actors/link.hpp"
#include "diloco/actors/meter.hpp"
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
  /// Per island, the step it resumes from when it first starts: 0, or what the syncer told a
  /// restarted site process (set by the app before the tree is spawned).
  std::vector<long> resume_steps;

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

/// What island i records, written by island i alone (its live incarnation; a dead incarnation's
/// clean-up clears only its own join, never its successor's).
struct IslandRecord {
  std::atomic<long> step{0};                // last finished step (a restarted island resumes here)
  std::atomic<std::uint64_t> tokens{0};     // tokens trained
  std::atomic<std::uint64_t> bytes_up{0};   // frame bytes sent to the syncer
  std::atomic<std::uint64_t> refused{0};    // frames from the syncer it refused
  std::atomic<int> incarnation{0};          // starts so far
  /// The incarnation that is joined and not dead (0: none): alive means joined.
  std::atomic<int> live{0};
  /// Trained its budget and, with the final sync (decoupled), its last contributions merged.
  std::atomic<bool> done{false};
};

/// What chip c of island i records, written by that chip alone: its starts and ends (alive
/// while more starts than ends, whatever order a restart's start and clean-up run in).
struct ChipRecord {
  std::atomic<int> starts{0};
  std::atomic<int> ends{0};
};

/// What the syncer records (or the ddp parameter server in its place: the same unit), written by
/// it alone and read by the apps and the gateway.
struct SyncerRecord {
  explicit SyncerRecord(const Run& run);

  std::atomic<int> starts{0};
  std::atomic<std::uint64_t> commits{0};
  std::atomic<std::uint64_t> bytes_down{0};     // frame bytes sent to islands
  std::atomic<std::uint64_t> dropped_stale{0};  // outer gradients too stale or repeating merged progress
  std::atomic<std::uint64_t> refused{0};        // frames refused (malformed, unknown sender, ...)
  /// Per island: its Progress.finished was heard (and it has not re-joined since): in a
  /// syncer-only process, what tells the run is over.
  std::vector<std::atomic<bool>> finished;
  /// Per island: the last step heard of, what a restarted site process is told to resume from.
  std::vector<std::atomic<long>> heard_step;

  /// The last snapshot in memory (also written to syncer.checkpoint when set).
  std::optional<Checkpoint> snapshot() const;
  void keep_snapshot(Checkpoint cp);
  /// New global parameters (`new_round`: a round the app has not seen yet).
  void publish(std::span<const float> params, std::uint64_t round, bool new_round);
  /// The newest global parameters and their round.
  std::pair<std::vector<float>, std::uint64_t> global() const;
  std::uint64_t round() const;
  /// Every new global round since the last call, oldest first (at most max_new_rounds: a reader
  /// that never reads costs little memory).
  std::deque<std::pair<std::uint64_t, std::vector<float>>> take_new_rounds();
  static constexpr std::size_t max_new_rounds = 64;

  /// ddp: the parameter server's state, kept across its restarts in this process (as a
  /// torchrun job keeps its replicas' state in memory); null until the first server starts.
  std::shared_ptr<DdpServer> ddp_server;

private:
  mutable std::mutex mu_;
  std::optional<Checkpoint> snapshot_;
  std::vector<float> global_;
  std::uint64_t round_ = 0;
  std::deque<std::pair<std::uint64_t, std::vector<float>>> new_rounds_;
};

/// Frames a process's gateway (sessions it refused) and each site's relay refused: each field
/// written by its own actor.
struct GatewayRecord {
  explicit GatewayRecord(int sites) : relay_refused(static_cast<std::size_t>(sites)) {}
  std::atomic<std::uint64_t> refused{0};
  std::vector<std::atomic<std::uint64_t>> relay_refused;  // per site
};

/// The ledger's figures at one moment, summed over the records (what progress lines print).
struct Tally {
  std::uint64_t tokens = 0;         // tokens trained by all islands
  std::uint64_t bytes_sent = 0;     // frame bytes islands → syncer and syncer → islands
  int live_islands = 0;
  int live_chips = 0;
  int islands_done = 0;
  std::uint64_t dropped_stale = 0;
  std::uint64_t rejected = 0;       // every refused frame: the islands', the syncer's, the gateway's, the relays'
  std::uint64_t commits = 0;
};

/// What happens in a run, and what the apps read: one record per writer (each island, each chip,
/// the syncer, the gateway), the goodput the meter publishes, the events and why the run stopped.
/// No field has two writers; what one unit learns of another it learns by message.
struct Ledger {
  Ledger(const Run& run, std::function<void(const Event&)> on_event);

  std::vector<IslandRecord> islands;
  std::vector<std::vector<ChipRecord>> chips;  // [island][chip]
  SyncerRecord syncer;
  GatewayRecord gateway;
  /// Actor-clock second at which the run started: written once by spawn_runtime before any unit
  /// starts; chaos event times, link partitions and goodput are relative to it.
  std::atomic<double> t0{0.0};

  Tally tally() const;
  /// Goodput and global downtime as of actor-clock second `now`, from the meter's last copy.
  GoodputMeter::Report goodput_report(double now) const;
  /// The meter's copy of its state (meter.hpp): written by the meter alone, after each fact.
  void publish_goodput(const GoodputMeter& m);
  GoodputMeter goodput_copy() const;

  void emit(const Event& e);
  /// The run cannot go on and must end with an error: an island or the syncer diverged, or the
  /// syncer's state file is unusable. Not a crash: a restarted unit would meet the same state
  /// (or the same settings) again, and its supervisor would restart it forever. Written once:
  /// the first reason is kept; the app ends the run with it and a non-zero exit.
  void stop(const std::string& why);
  /// Why the run was stopped, if it was.
  std::optional<std::string> stopped() const;

private:
  mutable std::mutex goodput_mu_;
  GoodputMeter goodput_;
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
