// Chaos as plain code: a seeded schedule of faults (chip, island and syncer kills with a mean
// time between failures, stragglers, link partitions) that replays exactly for the same seed and
// topology. The goodput / global downtime accounting that judges a run under it is goodput.hpp.
// Time is passed in (seconds since the run started); nothing here reads a clock.
#pragma once

#include <cstdint>
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

/// What is left of `schedule` for a run resumed after `elapsed_s` seconds, on a clock that starts
/// again at 0: later events `elapsed_s` earlier; a straggle or partition under way goes on from
/// 0 for the rest of its duration; earlier kills are over (the resumed run starts every unit).
std::vector<ChaosEvent> resume_schedule(std::vector<ChaosEvent> schedule, double elapsed_s);

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

}  // namespace diloco
