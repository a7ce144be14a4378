// An island's chips as one step sees them: hand out the shares of the batch, gather the replies,
// note the chips that die (chip_pool.hpp).
#include "diloco/actors/chip_pool.hpp"

#include <caf/event_based_actor.hpp>
#include <caf/system_messages.hpp>

namespace diloco::actors {

bool ChipPool::all_up(const Directory& dir) const {
  for (int c = 0; c < chips_; ++c) {
    auto chip = dir.chip(island_, c);
    if (!chip) return false;
    auto it = monitored_.find(chip.address());
    if (it != monitored_.end() && it->second < 0) return false;
  }
  return true;
}

void ChipPool::hand_out(caf::event_based_actor* self, const Directory& dir, long step,
                        std::shared_ptr<const std::vector<float>> params, const Batch& batch) {
  step_ = step;
  waiting_.clear();
  results_.clear();
  for (int c = 0; c < chips_; ++c) {
    auto chip = dir.chip(island_, c);
    if (!chip) continue;
    if (auto it = monitored_.find(chip.address()); it == monitored_.end()) {
      monitored_[chip.address()] = c;
      self->monitor(chip);
    } else if (it->second < 0) {
      continue;  // known dead; its restart will have a new handle
    }
    waiting_[c] = chip;
    self->send(chip, compute_atom::value, ChipWork{step, params, std::make_shared<Batch>(chip_share(batch, c, chips_))});
  }
}

bool ChipPool::take(const ChipResult& r) {
  if (r.step != step_ || !waiting_.erase(r.chip)) return false;
  results_.push_back(r);
  return true;
}

bool ChipPool::lost(const caf::down_msg& m) {
  auto it = monitored_.find(m.source);
  if (it == monitored_.end() || it->second < 0) return false;
  const int chip = it->second;
  it->second = -1;
  return waiting_.erase(chip) > 0;
}

std::vector<ChipResult> ChipPool::collect() {
  std::vector<ChipResult> out;
  out.swap(results_);
  return out;
}

std::vector<ChipGradient> gradients_of(const std::vector<ChipResult>& results) {
  std::vector<ChipGradient> g;
  g.reserve(results.size());
  for (const auto& r : results) g.push_back({*r.grads, r.tokens, r.loss});
  return g;
}

}  // namespace diloco::actors
