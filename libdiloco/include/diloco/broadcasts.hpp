// The broadcast step as plain code: which island gets which global fragment when, coalescing
// every commit since the island's last broadcast into one frame sent when its link is free.
#pragma once

#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "diloco/codec.hpp"
#include "diloco/expected.hpp"
#include "diloco/fragments.hpp"
#include "diloco/wire.hpp"

namespace diloco {

class SyncerCore;

/// One frame due to one island: fragment `fragment` moved from `from_round` (what the island
/// holds) to `round` (the syncer's), every commit in between in one frame.
struct BroadcastSend {
  int island = 0;
  int fragment = 0;
  std::uint64_t from_round = 0, round = 0;
  Frame frame;
};

/// Problem: with a small quorum (K = 1) every contribution commits on its own, and sending each
/// commit to every island costs each down link L frames per fragment and period while its up
/// link carries one; each of those frames also pulls the island's parameters towards Θ_p
/// (α mix), so progress it has not sent yet is scaled by α at every commit of another island.
///
/// Broadcasts answers instead: an island gets fragment p when it waits for it, that is when a
/// contribution of its own to p was settled (merged or dropped in a commit, or refused as stale)
/// since its last broadcast of p, and only while its down link is free. The one frame then carries
/// every commit since the round it holds: fp32, Θ_p with its round (global_params); lossy, the
/// change Θ_p − Θ̂_{p,i} quantised, where Θ̂_{p,i} is what island i holds and moves by exactly what
/// it decodes (global_delta from its round to the syncer's; the quantisation error stays in its
/// next change: error feedback per island). A commit that comes while a frame is on the link is
/// not lost: the island still waits, and gets it when the link is free. So the down link carries
/// one frame per fragment per contribution, about what the up link carries. Time is a parameter.
class Broadcasts {
public:
  Broadcasts(const FragmentPlan& plan, int islands, CodecParams encoding);

  /// Island `island` (re)joined and healed from `core.join_reply()` at this moment: it holds Θ̂_p
  /// (`core.held(p)`) of round `core.held_round(p)` for every p and waits for nothing yet.
  void joined(int island, const SyncerCore& core);
  /// The island is gone: nothing more is sent to it until it joins again.
  void left(int island);
  /// A contribution of `island` to fragment p was settled (merged, dropped or refused as stale):
  /// the island waits for the fragment (it re-bases on it, SyncSchedule waits for it).
  void asked(int island, int p);
  /// The link towards `island` transmits until `t` (seconds, the clock of due()); before that
  /// nothing is sent to it.
  void busy_until(int island, double t);

  /// The frames due at `now`: per joined island whose link is free, per fragment it waits for
  /// and of which the syncer holds a newer round, one frame up to the syncer's round. Each moves
  /// what the island holds (Θ̂_{p,i} and its round) and ends its wait. Fails with non_finite when
  /// a change cannot be encoded (Θ diverged; nothing is sent then).
  Expected<std::vector<BroadcastSend>> due(const SyncerCore& core, double now);
  /// When due() must run again for an island that waits behind a link busy after `now`
  /// (infinity: none).
  double next_deadline(double now) const;

  bool joined(int island) const { return island_(island).joined; }
  bool waiting(int island, int p) const;
  std::uint64_t held_round(int island, int p) const;
  /// Θ̂_{p,i}: what island `island` holds of fragment p (lossy encodings only; empty with fp32).
  std::span<const float> held(int island, int p) const;

private:
  struct Island {
    bool joined = false;
    double free_at = 0.0;
    std::vector<bool> waiting;                 // [p]
    std::vector<std::uint64_t> round;          // [p] round it holds
    std::vector<std::vector<float>> held;      // [p] Θ̂_{p,i} (lossy only)
  };
  const Island& island_(int i) const { return islands_.at(static_cast<std::size_t>(i)); }
  bool lossy() const { return encoding_.encoding != Encoding::fp32; }

  const FragmentPlan* plan_;
  CodecParams encoding_;
  std::vector<Island> islands_;
  std::vector<float> theta_, delta_, sent_;
};

}  // namespace diloco
