// What a run is, fixed when it starts (the "run" room): the configuration and what follows from
// it. Read by every actor; written by nobody once the supervision tree is spawned.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <vector>

#include "diloco/budget.hpp"
#include "diloco/checkpoint.hpp"
#include "diloco/chaos.hpp"
#include "diloco/config.hpp"
#include "diloco/data.hpp"
#include "diloco/fragments.hpp"
#include "diloco/model.hpp"

namespace diloco::actors {

/// What a run is, fixed when it starts: the configuration and what follows from it (the
/// budget, the data, the layout and fragment plan, the initial parameters, the fault schedule).
/// Read by every actor; written by nobody once the tree is spawned (an app may set `initial`
/// before, as --init does).
struct Run {
  /// `resumed_at`: seconds the run had trained before it was resumed from a state directory
  /// (the fault schedule goes on from there: resume_schedule).
  explicit Run(RunConfig cfg, double resumed_at = 0.0);

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
  /// A resumed run (`--state DIR`): per island, the state its first incarnation restores
  /// (IslandCore::restore) before it joins, keeping its parameters when it heals; empty for an
  /// island that had none saved (it starts from the global parameters at resume_steps).
  std::vector<std::shared_ptr<const IslandState>> resume_islands;
  /// Sets island `s.island`'s saved state and, with it, the step it resumes from (parameters,
  /// moments and step belong together). Before the tree is spawned; a state of an island this
  /// run has not is ignored.
  void resume_island(IslandState s);
  double resumed_at_s = 0.0;
  /// Islands hand their state to the ledger (IslandRecord::keep_state) whenever they send, and
  /// the syncer writes it with its state file: a run with a state directory.
  bool keep_island_states = false;
  /// A simulated run (`--simulate`, on CAF's test coordinator): a chip's step takes the model's
  /// FLOPs over islands.chip_flops, over the island's speed, of virtual time, and the syncer's
  /// merge time is left out of the adaptive grace, so that no wall-clock reading reaches a
  /// decision and the same seed and config give the same run.
  bool simulated = false;
  /// A site process (`diloco site`), whose syncer runs in another process that started at
  /// another time: its islands' join requests carry this process's run time (JoinRequest::run_s),
  /// so that the syncer plays this site's partitions on this process's clock.
  bool site_process = false;
  /// A replicated syncer's leader: whether it still holds its lease (LeaseHold). While it does
  /// not, the syncer commits nothing: a deposed leader never commits next to its successor.
  /// Empty: not replicated, always leading.
  std::function<bool()> leading;
  /// A replicated syncer's leader (net.replicate_before_broadcast): a commit reaches islands
  /// (its broadcast, and any join reply that holds it) only once a majority of the replicas
  /// holds it (the gateway tells the syncer: replicated_atom), so a failover loses no round an
  /// island has seen.
  bool hold_until_replicated = false;
  /// A replicated syncer's leader: its term, carried by every frame its syncer sends (broadcasts,
  /// welcomes, heartbeats, the run-over word). 0: not replicated.
  std::uint64_t leader_term = 0;
  /// A site process: the newest syncer leader term it has heard of (its connector raises it when
  /// it admits a session). Frames from a syncer of an older term are refused (stale_term) and
  /// counted: they come from a deposed leader.
  std::atomic<std::uint64_t> newest_term{0};

  int P() const { return plan.count(); }
  /// train.mode "diloco" / "streaming" on the actors: islands wait for each merged fragment
  /// (K = all islands, as the reference loops; under faults, a round whose missing islands wait
  /// on other rounds commits without them: SyncerSettings::lockstep); "decoupled": they never wait.
  bool synchronous() const { return cfg.train.mode == TrainMode::diloco || cfg.train.mode == TrainMode::streaming; }
  /// train.mode "ddp" on the actors: every step, islands send gradients and the parameter
  /// server averages them, takes the AdamW step and sends the parameters back.
  bool ddp() const { return cfg.train.mode == TrainMode::ddp; }
  int tau() const { return cfg.train.mode == TrainMode::diloco ? 0 : cfg.fragments.tau; }
  double alpha() const { return cfg.train.mode == TrainMode::diloco ? 0.0 : cfg.fragments.effective_alpha(); }
  /// Decoupled islands send their unsent progress at the end (train.final_sync_s > 0).
  bool final_sync() const { return cfg.train.mode == TrainMode::decoupled && cfg.train.final_sync_s > 0.0; }
};

}  // namespace diloco::actors
