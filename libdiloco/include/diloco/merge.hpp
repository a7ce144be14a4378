// The syncer's merge policy as pure functions: contribution weights, staleness, plain and
// radial-directional averaging, and the quorum + adaptive grace decision (time passed in).
#pragma once

#include "diloco/choice.hpp"
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "diloco/expected.hpp"
#include "diloco/fragments.hpp"

namespace diloco {

/// One island's outer gradient δ = Θ_p − θ_p for a fragment, and what it is based on.
struct Contribution {
  int island = 0;
  std::uint64_t base_round = 0;   // global round of Θ_p the island started from
  std::uint64_t tokens = 0;       // tokens trained on since that round
  std::uint64_t steps = 0;        // inner steps since that round
  std::span<const double> delta;  // fragment-sized
};

/// A contribution's weight before staleness: 1, or tokens · (tokens / steps) (quantity × quality).
enum class Weighting { uniform, tokens };
template <>
struct Choices<Weighting> {
  static constexpr std::pair<Weighting, std::string_view> all[] = {{Weighting::uniform, "uniform"},
                                                                   {Weighting::tokens, "tokens"}};
};

/// How long a round waits past its quorum: not at all, a fixed window in seconds, as long as the
/// overlap can still hide (adaptive), or a fixed number of the islands' inner steps.
enum class GraceRule { none, fixed, adaptive, steps };
template <>
struct Choices<GraceRule> {
  static constexpr std::pair<GraceRule, std::string_view> all[] = {
      {GraceRule::none, "none"}, {GraceRule::fixed, "fixed"}, {GraceRule::adaptive, "adaptive"},
      {GraceRule::steps, "steps"}};
};

/// Who hears of a commit of fragment p (SyncerCore::due): every island (the change of each
/// commit goes to all), or the islands whose contribution took part in it (merged, or dropped
/// as too stale): each of those gets one frame carrying every commit since the last it was
/// sent, so the down link carries about what the up link does (one frame per contribution).
enum class BroadcastTo { all, contributors };
template <>
struct Choices<BroadcastTo> {
  static constexpr std::pair<BroadcastTo, std::string_view> all[] = {{BroadcastTo::all, "all"},
                                                                     {BroadcastTo::contributors, "contributors"}};
};

/// What the staleness discount is relative to. `relative`: the merge is Σ w·f·δ / Σ w·f over the
/// commit's contributions (f = discount^staleness), so the discount only shifts weight between
/// them, and a commit of one stale contribution takes it whole. `absolute`: Σ w·f·δ / Σ w, so a
/// stale contribution moves the global parameters by f of what a fresh one would, alone or not
/// (asynchronous SGD's rule, e.g. FedAsync's s(t − τ)).
enum class StalenessScale { relative, absolute };
template <>
struct Choices<StalenessScale> {
  static constexpr std::pair<StalenessScale, std::string_view> all[] = {{StalenessScale::relative, "relative"},
                                                                        {StalenessScale::absolute, "absolute"}};
};

/// How an island takes a merged fragment Θ_p it adopts. `mix`: θ_p ← α·θ_p + (1−α)·Θ_p, always
/// (Streaming DiLoCo's rule). `rebase`: when the island's own sends of p are all in the Θ_p it
/// holds, the new Θ_p carries only other islands' progress, and the island keeps its own unsent
/// progress whole, θ_p ← θ_p + (Θ_p,new − Θ_p,held); otherwise (the commit has its last send, or
/// it cannot tell) it mixes as `mix` does. The syncer's frames say whose sends they merged
/// (FragmentHeader::merged_seq). `carry`: as `rebase`, and a commit that holds the island's last
/// send mixes the parameters it sent instead of its current ones and carries the progress made
/// since over whole, θ_p ← α·θ_p,sent + (1−α)·Θ_p,new + (θ_p − θ_p,sent): the τ steps trained
/// while the send was on its way are not shrunk by α.
enum class AdoptRule { mix, rebase, carry };
template <>
struct Choices<AdoptRule> {
  static constexpr std::pair<AdoptRule, std::string_view> all[] = {
      {AdoptRule::mix, "mix"}, {AdoptRule::rebase, "rebase"}, {AdoptRule::carry, "carry"}};
};

/// How contributions are combined (Decoupled DiLoCo, arXiv 2604.21428; defaults configurable).
struct MergeConfig {
  Weighting weighting = Weighting::tokens;
  bool rda = true;                   // radial-directional averaging for non-embedding tensors
  std::uint64_t max_staleness = 4;   // contributions older than this many rounds are dropped
  double staleness_discount = 0.5;   // weight × discount^staleness
  StalenessScale staleness_scale = StalenessScale::relative;  // what the discount is relative to
  bool partial_scale = true;         // a merge of n of the L live islands applies n/L of the
                                     // average: contributions that arrive one by one then add
                                     // up over a period to one full outer step, not L of them
  double max_delta_ratio = 100.0;    // an outer gradient with RMS(δ) > this · max(RMS(Θ_p), 1)
                                     // is refused (check_outer_gradient)
  double clip_ratio = 100.0;         // a merged outer gradient's norm is clipped to this × the median
                                     // over islands of their last merged norms (NormClip; 0: off)
};

/// Whether an island's outer gradient δ for a fragment whose global parameters are `theta` is
/// one a run can produce: RMS(δ) ≤ cfg.max_delta_ratio · max(RMS(Θ_p), 1). H inner steps move
/// parameters by far less than 100 times their own size; a peer's finite but absurd values
/// (3e38) would overflow Θ_p in float at the outer step and end the run. errc::out_of_bounds
/// with both RMS values otherwise.
Status check_outer_gradient(std::span<const double> delta, std::span<const float> theta, const MergeConfig& cfg);

/// Bounds each merged contribution's size by what the islands' recent contributions were
/// (adaptive norm clipping, as robust federated averaging does). The ratio bound of
/// check_outer_gradient is relative to Θ_p as it is now, so it stops one absurd frame but not a
/// peer that sends δ just under it every round: merged as it is, Θ_p grows geometrically and
/// overflows within tens of rounds. Clipped to `ratio` × the median over islands of each one's
/// last merged norm (recorded as clipped), a minority of islands moves Θ_p by a bounded step a
/// round, however often it sends (one slot per island: sending more often does not fill the
/// median with its own norms), and the median follows the other islands' norms as they change
/// with the learning rate. Honest outer gradients of one fragment differ far less than the
/// default 100 times: a first send covering part of a period in the learning rate's warm-up
/// (tens of times smaller than the next), a send after a partition (several periods), a faster
/// island. Until 3 islands have a norm (the first sends of a run, or after a restore) the bound
/// is `start`, a fixed norm the caller derives from the parameters it started from: an island
/// merged alone again and again before the others first send (K = 1) would otherwise have the
/// ratio bound alone, relative to a Θ_p it is itself growing. Deterministic for the same commits.
class NormClip {
public:
  NormClip() = default;
  NormClip(double ratio, double start) : ratio_(ratio), start_(start) {}
  /// The largest L2 norm a contribution may have now: ratio × the median (the upper one of an
  /// even count) of the islands' last recorded norms; `start` while fewer than 3 islands have
  /// one; infinity while clipping is off (ratio 0).
  double bound() const;
  /// Records island `island`'s merged contribution's norm (after clipping) in place of its last.
  /// A norm of 0 (a contribution of zeros) is not recorded: it bounds nothing.
  void record(int island, double norm);
  /// Forgets every recorded norm and bounds by `start` until 3 islands have one again (a syncer
  /// restored from a snapshot).
  void restart(double start) {
    last_.clear();
    start_ = start;
  }

private:
  double ratio_ = 0.0;
  double start_ = std::numeric_limits<double>::infinity();
  std::map<int, double> last_;  // island → its last recorded norm
};

/// The islands' inner step time as the syncer sees it, for the grace windows (RoundState::t_step):
/// an exponential average (weight 0.1 to the newest) of the seconds per step between two progress
/// reports of the same island, over the reports of all islands; where a report carries the
/// island's own measure (its wall time per step on its chips, its waits for a merge and its sends
/// left out), the smaller of the two. A report whose island went back or stood still in steps, or
/// that follows the island's (re-)join (forget()), only marks where the island is: the time a
/// killed island was away, or a restarted island's older step, is not an inner step.
class StepClock {
public:
  /// Island `island` reported local step `step` at `now` (seconds), with its own measure of
  /// its step time `measured` (seconds; 0: none). The measure only shortens the time between
  /// reports: it never makes a step longer than the reports show.
  void heard(int island, std::uint64_t step, double now, double measured = 0.0);
  /// The island joined again (restarted or healing): its next report starts afresh.
  void forget(int island) { last_.erase(island); }
  /// Seconds per inner step; 0 until one island reported twice.
  double t_step() const { return t_step_; }

private:
  struct Mark {
    std::uint64_t step = 0;
    double at = 0.0;
  };
  std::map<int, Mark> last_;  // island → its last report
  double t_step_ = 0.0;
};

/// Weight of a contribution before staleness: 1, or tokens·(tokens/steps) (quantity × quality).
double contribution_weight(const Contribution& c, Weighting weighting);

/// Staleness multiplier for a contribution based on `base_round` merged into `current_round`:
/// discount^(current − base), or nothing if it must be dropped (too stale, or from the future).
std::optional<double> staleness_factor(const MergeConfig& cfg, std::uint64_t current_round, std::uint64_t base_round);

/// Contribution `c`'s weight in a merge into `current_round`: contribution_weight × its staleness
/// factor, 0 when it is dropped as too stale (merge() takes in those above 0).
double merged_weight(const Contribution& c, const MergeConfig& cfg, std::uint64_t current_round);

/// What a merge did.
struct MergeStats {
  int merged = 0;          // contributions that entered the average
  int dropped_stale = 0;   // contributions past max_staleness (or from a future round)
  double total_weight = 0.0;       // Σ w, staleness included
  double fresh_weight = 0.0;       // Σ w before staleness
};

/// Merges contributions into `out` (fragment-sized): per segment either the weighted mean
/// Σwδ/Σw, or (rda and not an embedding) RDA: (Σw‖δ‖/Σw) · unit(Σw·unit(δ)/Σw), which keeps
/// the norm of near-orthogonal updates instead of shrinking it as 1/√M; w includes the staleness
/// factor. With cfg.staleness_scale absolute the result is then scaled by Σw / Σ(w before
/// staleness). With nothing merged `out` is all zeros.
MergeStats merge(std::span<const Contribution> contribs, std::span<const Segment> segments,
                 const MergeConfig& cfg, std::uint64_t current_round, std::span<double> out);

/// When a round may commit (torchft-style: a pure decision, time in seconds passed in).
struct QuorumConfig {
  int min_islands = 1;             // K
  GraceRule grace = GraceRule::adaptive;
  double grace_s = 0.0;            // fixed window
  double grace_steps = 0.0;        // steps: a window of this many of the islands' inner steps
  double gamma = 1.0;              // adaptive: γ
  int tau = 0;                     // overlap steps the islands can hide a sync behind
};

/// What the syncer knows about one fragment's open round.
struct RoundState {
  double opened_at = 0.0;                 // when the round opened
  std::optional<double> quorum_at;        // when the K-th contribution arrived
  int arrivals = 0;                       // contributions received for this round
  int live_islands = 0;                   // islands currently alive
  double t_step = 0.0;                    // estimated inner step time of the islands
  double t_sync = 0.0;                    // estimated merge + broadcast time
};

/// Grace window after quorum: fixed, none, adaptive γ·max(0, τ·t_step − (t_quorum + t_sync))
/// with t_quorum = quorum_at − opened_at, i.e. only as long as the overlap can still hide, or
/// steps: grace_steps·t_step, a fixed window counted in the islands' inner steps, so the same
/// config waits for the same share of training on a faster or slower (or busier) machine.
double grace_window(const QuorumConfig& cfg, const RoundState& s);

struct QuorumDecision {
  bool merge = false;   // commit the round now
  double recheck_at = std::numeric_limits<double>::infinity();  // if waiting: when to decide again
};

/// Merge once ≥ K contributions are in and either every live island has contributed or the
/// grace window since the quorum has passed; otherwise wait (until the window ends, or forever
/// while the quorum is missing).
QuorumDecision decide(const QuorumConfig& cfg, const RoundState& s, double now);

std::vector<std::string> validate(const MergeConfig& cfg);
std::vector<std::string> validate(const QuorumConfig& cfg);

}  // namespace diloco
