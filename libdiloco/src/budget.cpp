// The end-of-run rule: budgets spent per island and in all, and when a run is over. See budget.hpp.
#include "diloco/budget.hpp"

#include <stdexcept>

namespace diloco {

RunBudget RunBudget::island_steps(long steps) {
  RunBudget b;
  b.kind = Budget::island_steps;
  b.steps = steps;
  return b;
}

RunBudget RunBudget::total_tokens(std::uint64_t tokens) {
  RunBudget b;
  b.kind = Budget::total_tokens;
  b.tokens = tokens;
  return b;
}

RunBudget RunBudget::of(const RunConfig& cfg) {
  const auto& t = cfg.train;
  if (t.budget != Budget::total_tokens) return island_steps(t.steps);
  // The tokens of `steps` steps of every island (train.batch windows an island's step, whatever
  // its chip count), in whatever order.
  return total_tokens(static_cast<std::uint64_t>(t.steps) * static_cast<std::uint64_t>(t.batch) *
                      static_cast<std::uint64_t>(cfg.model.seq_len) * static_cast<std::uint64_t>(t.islands));
}

bool budget_spent(const RunBudget& budget, long step, std::uint64_t tokens) {
  if (budget.kind != Budget::total_tokens) return step >= budget.steps;
  return tokens >= budget.tokens;
}

bool all_trained(const RunBudget& budget, std::span<const long> island_steps, std::uint64_t tokens) {
  if (budget.kind == Budget::total_tokens) return budget_spent(budget, 0, tokens);
  for (long s : island_steps)
    if (!budget_spent(budget, s, tokens)) return false;
  return true;
}

bool all_done(const RunBudget& budget, const std::vector<bool>& island_done, const std::vector<bool>& island_up,
              std::uint64_t tokens) {
  if (island_up.size() != island_done.size())
    throw std::invalid_argument("all_done: island_done and island_up must have one entry per island");
  const bool tokens_spent = budget.kind == Budget::total_tokens && budget_spent(budget, 0, tokens);
  for (std::size_t i = 0; i < island_done.size(); ++i)
    if (!island_done[i] && !(tokens_spent && !island_up[i])) return false;
  return true;
}

bool final_sync_expired(double trained_at_s, double now_s, double final_sync_s) {
  return now_s - trained_at_s > final_sync_s;
}

}  // namespace diloco
