// Handing a step's work to an island's chips and gathering their replies: the part of a step that
// the island (island.cpp) and the ddp replica (ddp_replica.cpp) share.
#pragma once

#include <map>
#include <memory>
#include <vector>

#include <caf/actor.hpp>
#include <caf/actor_addr.hpp>
#include <caf/fwd.hpp>

#include "diloco/actors/protocol.hpp"
#include "diloco/actors/runtime.hpp"
#include "diloco/island_core.hpp"

namespace diloco::actors {

/// An island's chips as one step sees them: which were asked and have not answered, the answers
/// so far, and which chip handles are monitored (a dead one stays known dead: its restart has a
/// new handle). Plain data held by the actor that owns the chips; it never blocks: the owner
/// feeds it the chips' replies and down messages and asks whether the step is complete.
class ChipPool {
public:
  ChipPool(int island, int chips) : island_(island), chips_(chips) {}

  /// Every chip of the island is in the directory and not known dead (ddp needs them all).
  bool all_up(const Directory& dir) const;
  /// Starts step `step`: splits `batch` among the island's chips (chip_share) and asks every one
  /// that is in the directory and not known dead for the gradient of its share on `params`,
  /// monitoring the chips it has not seen yet. A dead chip's share is missing from the step.
  void hand_out(caf::event_based_actor* self, const Directory& dir, long step,
                std::shared_ptr<const std::vector<float>> params, const Batch& batch);
  /// A chip's reply: kept when it is of the step in flight and from a chip still asked.
  /// Returns whether it was kept.
  bool take(const ChipResult& r);
  /// A down message: when it is of a chip we monitor, that chip is known dead. Returns whether
  /// the step in flight was waiting for it (then it finishes with the chips that answered).
  bool lost(const caf::down_msg& m);
  /// Every chip asked answered or died.
  bool complete() const { return waiting_.empty(); }
  /// The replies of the step, handed over (the pool keeps none).
  std::vector<ChipResult> collect();

private:
  int island_;
  int chips_;
  long step_ = 0;
  std::map<int, caf::actor> waiting_;         // chips asked in the current step
  std::vector<ChipResult> results_;
  std::map<caf::actor_addr, int> monitored_;  // chip handles we monitor (-1: dead)
};

/// The replies' gradients as combine_chips takes them (views into `results`, which must outlive
/// them: a temporary would be gone before the step reads it, so passing one does not compile).
std::vector<ChipGradient> gradients_of(const std::vector<ChipResult>& results);
std::vector<ChipGradient> gradients_of(std::vector<ChipResult>&& results) = delete;

}  // namespace diloco::actors
