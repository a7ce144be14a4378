// The run's invariants, checked as it goes: a plain-code checker fed the runtime's events one by
// one (their own time stamps are the time) and, at the end, the goodput figures. It records every
// violation with its time and a sentence that names it; it changes nothing in the run.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "diloco/events.hpp"
#include "diloco/fragments.hpp"
#include "diloco/goodput.hpp"
#include "diloco/wire.hpp"

namespace diloco {

/// A 64-bit digest (FNV-1a) of a frame's bytes: names a frame in events, so that a merge can be
/// matched against an earlier refusal without keeping the frame. Never 0.
std::uint64_t frame_digest(std::span<const std::byte> frame);

/// Digests of a heal: the fragments an island holds after adopting a JoinReply and the global
/// fragments the reply carries, fragment by fragment in plan order (equal exactly when every
/// fragment is bit-equal; a fragment missing from the reply or undecodable makes them differ).
struct HealDigests {
  std::uint64_t island = 0;
  std::uint64_t global = 0;
};
/// A fragment the reply marks held counts as `named`'s (IslandCore::named: the values whose
/// SHA-256 the syncer found its Θ_p to have); without `named`, as missing.
HealDigests heal_digests(const FragmentPlan& plan, std::span<const float> params, const JoinReply& reply,
                         const std::vector<std::vector<float>>* named = nullptr);

/// What the checker must know of the run.
struct InvariantSettings {
  int islands = 1;
  int fragments = 1;
  int quorum = 1;                 // K: contributions a round needs (all islands in the synchronous modes)
  std::vector<int> chips;         // per island: its chips (a chip is repaired by a step with all of them)
  /// How long past its repair time a killed unit may take to come back (restart back-off, a
  /// join's round trip, the next step) before it counts as never repaired.
  double repair_allowance_s = 0.0;
};

/// One broken invariant.
struct Violation {
  enum class Kind {
    rounds,         // a fragment's round went down or stood still in a syncer's life, or a restore went past the commits
    quorum,         // a commit with fewer than min(K, live) contributions that is no final flush (nor unblocked)
    refused_frame,  // a commit merged a frame that was refused
    heal,           // a healed island does not hold exactly the global fragments
    non_finite,     // NaN or infinity in a parameter (global or an island's)
    goodput,        // goodput's chip-seconds do not add up
    unrepaired,     // a fault was not repaired though the run went on past its repair
  };
  Kind kind = Kind::rounds;
  double at = 0.0;
  std::string what;
};

/// Stable name of a kind ("quorum").
const char* to_string(Violation::Kind k);

/// Checks, event by event, what every run must keep:
/// - rounds: each fragment's commits carry rounds that only go up within a syncer's life, and a
///   restore never brings back a round past the last one committed;
/// - quorum: every commit has ≥ min(K, live) contributions, or is a final flush, or a round of
///   the synchronous modes unblocked (SyncerSettings::lockstep: its missing islands waited on other rounds);
/// - refused frames: no commit merges a frame that was refused (matched by frame_digest);
/// - heal: a healed island holds exactly the global fragments (heal_digests);
/// - finite: no commit leaves NaN or infinity in a global fragment, no unit reports divergence;
/// - goodput (goodput()): useful + lost to failures + lost as stale + in flight = the steps'
///   chip-seconds ≤ provisioned (the rest is chips idle or down);
/// - repairs (end()): every kill was followed by its unit's return (chip: its island stepping
///   with all its chips; island: its heal or re-join; syncer: its restore), or the run (or the
///   unit's island) ended first.
class Invariants {
public:
  explicit Invariants(InvariantSettings settings);

  /// The next event of the run; its `at` is the time.
  void on(const Event& e);
  /// The goodput figures at `at` (a report of GoodputMeter).
  void goodput(const GoodputMeter::Report& r, double at);
  /// The run ended at `at`: faults still unrepaired whose repair (plus the allowance) was due
  /// before it are violations; the others were cut short by the end. A process that holds part
  /// of the run judges only the faults whose repair it can see: `syncer` (its restore) and
  /// `islands` (chips and islands: their steps and heals).
  void end(double at, bool syncer = true, bool islands = true);

  const std::vector<Violation>& violations() const { return violations_; }
  bool ok() const { return violations_.empty(); }
  std::size_t count(Violation::Kind k) const;

private:
  struct Outstanding {
    Event fault;
    bool island_done = false;
  };
  void violate(Violation::Kind k, double at, std::string what);
  void repaired(FaultKind kind, int island, double at);

  InvariantSettings s_;
  std::vector<Violation> violations_;
  std::vector<std::uint64_t> round_;      // [fragment] the round of this syncer life
  std::vector<std::uint64_t> committed_;  // [fragment] the highest round ever committed
  bool history_ = false;                  // a commit or a restore was seen (a first restore sets the origin)
  std::map<std::uint64_t, std::string> refused_;  // digest → what the refusal said
  std::vector<Outstanding> faults_;       // kills not repaired yet
  std::vector<bool> done_;                // [island] finished
};

}  // namespace diloco
