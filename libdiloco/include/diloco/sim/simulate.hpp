// Goodput at internet scale: a discrete-event simulator of chip interruptions over millions of
// chips, comparing synchronous data parallel, elastic data parallel and decoupled learners
// (Decoupled DiLoCo, arXiv 2604.21428) on one shared failure trace. See docs/simulator.md.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "diloco/merge.hpp"

namespace diloco {

inline constexpr double kMinute = 60.0;
inline constexpr double kHour = 3600.0;
inline constexpr double kDay = 86400.0;
inline constexpr double kYear = 365.0 * kDay;

/// Everything the simulator assumes. Times are in seconds of simulated time. Only the chip
/// count, learner count and per-chip MTBI are published (arXiv 2604.21428); every other value is
/// ours. `restart_s` and `reconfig_s` are the two parameters calibrated on the 1.2M-chip column
/// of the published table (docs/simulator.md says how); the rest are a-priori defaults.
struct SimConfig {
  // ---- the system ----
  double chips = 1.2e6;           // N provisioned (working) chips
  int learners = 8;               // M decoupled learners (islands) of N/M chips each
  double slice_chips = 256;       // chips per slice: the unit that fails, is excluded and replaced
  int spare_slices = 0;           // hot spare slices (provisioned, idle until they replace one)
  // ---- failures ----
  double mtbi_s = kYear;          // per-chip mean time between interruptions (Poisson)
  double horizon_s = kYear;       // simulated wall time
  std::uint64_t seed = 1;         // the failure trace (shared by every policy)
  // ---- recovery (unpublished; documented flags) ----
  double detect_s = 10.0;         // interruption → noticed (the collective hangs meanwhile)
  double restart_s = 59.3;        // noticed → failed slice usable again (reboot / reschedule and reload).
                                  // CALIBRATED on data parallel at 1.2M chips.
  double swap_s = 10.0;           // noticed → a hot spare slice takes the failed one's place
  double reconfig_s = 5.5;        // elastic re-mesh pause per membership change (a slice leaves or
                                  // rejoins). CALIBRATED on elastic data parallel at 1.2M chips.
  double heal_s = 40.0;           // a restarted learner fetches the global fragments before training
                                  // (learner_recovery = "restart" only)
  double checkpoint_s = 1.0;      // data parallel: progress between checkpoints (lost on failure)
  std::string learner_recovery = "elastic";  // decoupled learner on a slice failure: "elastic"
                                  // (re-mesh without the slice, like elastic DP inside the learner)
                                  // or "restart" (stop, wait for the slice, heal, lose unsent work)
  // ---- decoupled syncer (libdiloco merge policy with simulated time) ----
  double step_s = 1.0;            // inner step time
  int inner_steps = 100;          // H: a learner sends its outer gradient every H·step_s of compute
  double sync_latency_s = 1.0;    // send → arrival at the syncer (t_sync in the grace rule)
  QuorumConfig quorum{1, GraceRule::adaptive, 0.0, 1.0, 5};  // K = 1, adaptive grace, γ = 1, τ = 5
  MergeConfig merge;              // max_staleness / staleness_discount decide what is dropped
  // ---- output ----
  double series_every_s = 0.0;    // > 0: record a time series point every this many seconds
};

/// Specific errors (each names its flag), empty when the configuration is usable.
std::vector<std::string> validate(const SimConfig& cfg);

/// One chip interruption: when, and which slice (0 ≤ slice < slice_count(cfg)).
struct Interruption {
  double t = 0.0;
  std::uint32_t slice = 0;
};

/// Number of slices: ceil(chips / slice_chips); slice i belongs to learner i·M / slices.
std::uint32_t slice_count(const SimConfig& cfg);

/// The shared failure trace: chip interruptions are independent Poisson processes, so their
/// superposition over all chips is one Poisson process of rate chips / mtbi, each event hitting a
/// uniformly random slice (weighted by its chips). O(events), not O(chips). Deterministic in seed.
std::vector<Interruption> poisson_trace(const SimConfig& cfg);

enum class Policy { data_parallel, elastic, decoupled };
const char* policy_name(Policy p);

struct SeriesPoint {
  double t = 0.0;             // seconds
  double goodput = 0.0;       // cumulative goodput up to t
  double learners_alive = 0;  // learners (or, for DP, the whole job = 1) alive at t
};

/// What one policy achieved on one trace.
struct PolicyResult {
  Policy policy = Policy::decoupled;
  int learners = 1;              // 1 for the data-parallel policies
  double goodput = 0.0;          // useful chip-time / provisioned chip-time (spares included)
  double uptime = 0.0;           // share of time the global model advances
  double rounds = 0.0;           // decoupled: rounds committed; DP: committed progress / (H·step)
  double mean_learners_alive = 0.0;
  std::uint64_t interruptions = 0;  // trace events that hit running chips (others were idle)
  std::uint64_t dropped_contributions = 0;  // decoupled: past max staleness
  std::vector<SeriesPoint> series;
};

/// Replays `trace` (sorted by time; events at or past horizon are ignored) under `policy`:
/// - data_parallel: any interruption stalls every chip for detect + restart (or swap, with a
///   spare); progress since the last checkpoint is lost.
/// - elastic: every chip stalls for detect + reconfig, then the job continues without the slice;
///   the slice rejoins after restart (or swap) with another reconfig pause.
/// - decoupled: only the affected learner stops (elastic re-mesh or restart + heal); learners send
///   outer gradients every H steps and the syncer commits rounds with decide() (quorum K, grace).
/// An interruption that lands on chips already idle (stalled, paused, excluded) is absorbed.
PolicyResult simulate(Policy policy, const SimConfig& cfg, std::span<const Interruption> trace);

/// The three policies side by side on poisson_trace(cfg).
std::vector<PolicyResult> simulate_all(const SimConfig& cfg);

/// "90", "30s", "10m", "1.5h", "2d", "1y" (365 d) → seconds. Throws std::invalid_argument.
double parse_duration(std::string_view text);
/// "1200000", "1.2e6", "150k", "1.2M", "2G" → number. Throws std::invalid_argument.
double parse_count(std::string_view text);
/// Seconds as a short human string ("57s", "10m", "1.5h", "1y").
std::string format_duration(double seconds);

}  // namespace diloco
