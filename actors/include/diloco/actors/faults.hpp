// Faults injected into a run, in one room: what a fault is (whatever its source), the one
// `fire()` that carries every fault out, the repair and slow-down windows it leaves (read by the
// units as they restart and step), and the driver that plays the timed schedule. Sources: a
// [[faults]] entry with at_step, fired by its island when it reaches that step; a [[faults]]
// entry with at_s and the seeded [chaos] draws, played by the driver (Runtime::schedule).
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include <caf/event_based_actor.hpp>
#include <caf/fwd.hpp>

#include "diloco/chaos.hpp"
#include "diloco/config.hpp"

namespace diloco::actors {

struct Runtime;
struct SpawnSet;

/// One fault to carry out.
struct Fault {
  FaultKind kind = FaultKind::chip;
  int island = -1;
  int chip = -1;               // chip: which one
  int site = -1;               // partition: which site's link
  double duration_s = 0.0;     // kills: repair time; straggle and partition: how long
  double factor = 1.0;         // straggle: the island's speed meanwhile
  bool with_chips = false;     // island: its chips go down with it (a host lost), as [chaos] draws
  long step = 0;               // step-triggered: the island's step
  std::string description;     // "kill chip 1 at island 0 step 50"

  /// A scheduled event (a [chaos] draw or a timed [[faults]] entry).
  static Fault of(const ChaosEvent& e);
  /// A [[faults]] entry fired by its island at local step `step`.
  static Fault of(const FaultSpec& f, long step);
};

/// The windows faults leave: until when a unit stays out after a kill (its restarted actor waits
/// before it takes its place), and until when an island runs slow. Written by fire(), read by
/// the units; atomics, one writer per fault.
class FaultWindows {
public:
  FaultWindows(int islands, int max_chips, std::size_t step_faults);
  double island_back(int i) const { return island_[static_cast<std::size_t>(i)].load(); }
  double chip_back(int i, int c) const { return chip_[static_cast<std::size_t>(i)][static_cast<std::size_t>(c)].load(); }
  double syncer_back() const { return syncer_.load(); }
  /// The speed factor of island `island`'s chips at actor time `now` (1 unless straggling).
  double slowdown(int island, double now) const;
  /// Claims [[faults]] entry `k` (true once: each fires at most once per run).
  bool claim(std::size_t k) { return !fired_[k].exchange(true); }

private:
  friend void fire(caf::event_based_actor* self, Runtime& rt, const Fault& f, const SpawnSet& what);
  std::vector<std::atomic<double>> island_;
  std::vector<std::vector<std::atomic<double>>> chip_;
  std::atomic<double> syncer_{0.0};
  std::vector<std::atomic<double>> straggle_until_, straggle_factor_;
  std::vector<std::atomic<bool>> fired_;
};

/// Carries out `f` now: records its window, kills the unit (an exit through the directory; a
/// unit that kills itself quits), and reports it (Event::fault_fired). Units this process does
/// not run (`what`) are left alone.
void fire(caf::event_based_actor* self, Runtime& rt, const Fault& f, const SpawnSet& what);

/// The [[faults]] entries of island `island` due at its local step `step`, each fired once.
void fire_step_faults(caf::event_based_actor* self, Runtime& rt, int island, long step);

/// Spawns the driver that plays Runtime::schedule (unsupervised, like a chaos monkey; it quits
/// when `root`, the supervision tree, goes down). spawn_runtime does this when the schedule is
/// not empty.
caf::actor spawn_fault_driver(caf::actor_system& sys, std::shared_ptr<Runtime> rt, SpawnSet what, caf::actor root);

}  // namespace diloco::actors
