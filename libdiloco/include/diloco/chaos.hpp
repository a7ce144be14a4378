// Chaos as plain code: a seeded schedule of faults (chip, island and syncer kills with a mean
// time between failures, stragglers, link partitions) that replays exactly for the same seed and
// topology, and the goodput / global downtime accounting that judges a run under it.
// Time is passed in (seconds since the run started); nothing here reads a clock.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

namespace diloco {

/// [chaos]: rates are per unit (each chip, each island, the syncer, each site's link) as a mean
/// time between failures in seconds; 0 turns that kind off.
struct ChaosConfig {
  bool enabled = false;
  std::uint64_t seed = 1;
  double chip_mtbf_s = 0.0;          // per chip
  double island_mtbf_s = 0.0;        // per island (the island and its chips go down)
  double syncer_mtbf_s = 0.0;
  double repair_s = 1.0;             // a killed unit is back (restartable) this long after its kill
  double straggler_mtbf_s = 0.0;     // per island: it slows down for straggler_s
  double straggler_factor = 0.5;     // speed while straggling, in (0, 1]
  double straggler_s = 5.0;
  double partition_mtbf_s = 0.0;     // per site: its link to the syncer is cut for partition_s
  double partition_s = 2.0;
  double horizon_s = 600.0;          // no event is scheduled after this
  double downtime_gap_s = 2.0;       // GoodputMeter's expected_gap_s: a longer wait for a global
                                     // commit with >= K islands alive is global downtime
};

/// Problems of a chaos config ("chaos.repair_s: ..."); empty when valid.
std::vector<std::string> validate(const ChaosConfig& cfg);

struct ChaosEvent {
  enum Kind { kill_chip, kill_island, kill_syncer, straggle, partition } kind = kill_chip;
  double at_s = 0.0;        // seconds since the start of the run
  int island = -1;          // kill_chip, kill_island, straggle
  int chip = -1;            // kill_chip
  int site = -1;            // partition: index into the run's sites
  double duration_s = 0.0;  // kills: repair time; straggle and partition: how long it lasts
  double factor = 1.0;      // straggle: speed meanwhile
  /// "12.500s kill chip 1.0 (repair 1.0 s)": one line for logs and timelines.
  std::string describe() const;
};
const char* to_string(ChaosEvent::Kind k);

/// The fault schedule of a run: for every unit and kind, exponential inter-arrival times with the
/// configured mean from a stream derived from (seed, kind, unit), merged and sorted by time
/// (ties by kind, island, chip, site). A unit is not failed again while it is still down: the
/// mean counts up time, so a unit fails at rate 1/(mtbf + repair_s) (straggle and partition
/// likewise with their durations). A killed island's chips are down with it: no chip kill and no
/// straggle of an island is scheduled while the island is down. Partitions name sites
/// 0..sites-1. Empty when `enabled` is false; throws std::invalid_argument on an invalid config.
std::vector<ChaosEvent> chaos_schedule(const ChaosConfig& cfg, int islands, int chips_per_island, int sites);

/// FNV-1a over the schedule's fields: equal for equal schedules (printed so runs can be compared).
std::uint64_t schedule_hash(const std::vector<ChaosEvent>& events);

/// Goodput and global downtime, fed by the runtime as things happen.
///
/// Provisioned chip-seconds: every chip of every island over the wall time of the run, alive or
/// not. Useful chip-seconds: the chip time of inner steps whose outer gradients the syncer
/// merged into the global model; each step's time is split evenly over the P fragments, and a
/// fragment's share becomes useful when the contribution that carries it is merged. Everything
/// else is lost: steps of an island that died before sending them, contributions dropped as
/// stale, and chips waiting or down. (In ddp mode one "fragment", sent and merged every step.)
///
/// Global downtime: time during which at least K islands were alive but no global round
/// committed, counted beyond an allowance of `expected_gap_s` (a round every so often is normal):
/// Σ max(0, length − expected_gap_s) over the stretches with ≥ K alive and no commit. A stretch
/// starts at a commit or when K islands are alive again, and ends at a commit or when fewer than K
/// are alive. Every island counts as alive at `start_s`.
class GoodputMeter {
public:
  GoodputMeter(int islands, int chips_per_island, int fragments, int quorum_k, double expected_gap_s, double start_s);
  /// Island `island` finished an inner step that kept `chips` chips busy for `seconds`.
  void step(int island, int chips, double seconds);
  /// Island `island` sent its outer gradient for `fragment`: the work since its last send of that
  /// fragment is now in flight.
  void sent(int island, int fragment);
  /// The syncer merged (or dropped) the oldest in-flight contribution of (island, fragment).
  void merged(int island, int fragment);
  void dropped(int island, int fragment);
  /// The island died: its unsent work is lost (in-flight contributions may still merge).
  void island_lost(int island);
  /// A global round committed at `now`.
  void commit(double now);
  /// The number of live islands changed at `now`.
  void alive(int islands_alive, double now);

  struct Report {
    double provisioned_chip_s = 0.0;
    double useful_chip_s = 0.0;
    double lost_failure_chip_s = 0.0;   // unsent work of islands that died
    double lost_stale_chip_s = 0.0;     // dropped contributions
    double in_flight_chip_s = 0.0;      // sent or not yet sent, not decided at `now`
    double goodput = 0.0;               // useful / provisioned
    double global_downtime_s = 0.0;
    double elapsed_s = 0.0;
  };
  /// Islands of different sizes: the chips provisioned in all (default islands × chips_per_island).
  void set_total_chips(int n) { total_chips_ = n; }
  /// The figures as of `now` (downtime includes the current stretch).
  Report report(double now) const;

private:
  double take_oldest(int island, int fragment);
  void close_stretch(double now);
  int islands_, chips_, fragments_, k_;
  int total_chips_ = -1;
  double expected_gap_s_, start_s_;
  std::vector<std::vector<double>> unsent_;                   // [island][fragment] chip-seconds
  std::vector<std::vector<std::deque<double>>> in_flight_;    // [island][fragment] FIFO
  double useful_ = 0.0, lost_failure_ = 0.0, lost_stale_ = 0.0;
  int alive_ = 0;
  double stretch_from_ = 0.0, downtime_ = 0.0;  // current stretch with ≥ K alive; closed ones
};

}  // namespace diloco
