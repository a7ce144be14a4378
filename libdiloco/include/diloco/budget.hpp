// The end of a run as plain functions: when an island has trained its budget (train.budget), when
// every island has, and when the run is over. The counts are passed in; nothing here holds state.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "diloco/config.hpp"

namespace diloco {

/// What a run trains before it ends: every island `steps` local steps (Budget::island_steps), or
/// all islands together `tokens` tokens, in whatever order (Budget::total_tokens: faster islands
/// do more steps).
struct RunBudget {
  Budget kind = Budget::island_steps;
  long steps = 0;            // island_steps: local steps per island
  std::uint64_t tokens = 0;  // total_tokens: tokens trained by all islands together

  static RunBudget island_steps(long steps);
  static RunBudget total_tokens(std::uint64_t tokens);
  /// The budget train.budget names: `train.steps` per island, or the tokens of `train.steps`
  /// steps of every island (train.batch windows of model.seq_len tokens each, split among the
  /// island's chips).
  static RunBudget of(const RunConfig& cfg);
};

/// An island at local step `step` has trained its budget; `tokens` is what all islands have
/// trained so far (with Budget::total_tokens the step does not matter: the budget is shared).
bool budget_spent(const RunBudget& budget, long step, std::uint64_t tokens);

/// Every island has trained its budget: each last finished step in `island_steps` (one per
/// island) spent it, or the shared tokens budget is spent.
bool all_trained(const RunBudget& budget, std::span<const long> island_steps, std::uint64_t tokens);

/// The run is over: every island is done (trained its budget and, with the final sync, saw its
/// last contributions merged), or the tokens budget is spent and every island not done is down
/// (nothing is left for it to do). `island_done` and `island_up` hold one entry per island.
bool all_done(const RunBudget& budget, const std::vector<bool>& island_done, const std::vector<bool>& island_up,
              std::uint64_t tokens);

/// The final sync has waited long enough: more than `final_sync_s` seconds passed between
/// `trained_at_s`, when every island had trained, and `now_s` (times in seconds, any origin).
bool final_sync_expired(double trained_at_s, double now_s, double final_sync_s);

}  // namespace diloco
