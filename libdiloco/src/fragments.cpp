// Fragment plans: strided by layer and greedy size-balanced.
#include "diloco/fragments.hpp"

#include <algorithm>
#include <numeric>
#include <stdexcept>

namespace diloco {

FragmentPlan::FragmentPlan(const ParamLayout& layout, std::vector<int> owner, int P)
    : segments_(static_cast<std::size_t>(P)), sizes_(static_cast<std::size_t>(P), 0), owner_(std::move(owner)) {
  for (std::size_t i = 0; i < layout.tensors().size(); ++i) {
    const auto& t = layout[i];
    const auto p = static_cast<std::size_t>(owner_[i]);
    segments_[p].push_back({i, t.offset, sizes_[p], t.size, t.embedding});
    sizes_[p] += t.size;
  }
  for (auto s : sizes_) largest_ = std::max(largest_, s);
  for (int p = 0; p < P; ++p)
    if (sizes_[static_cast<std::size_t>(p)] == 0)
      throw std::invalid_argument("fragments.count: fragment " + std::to_string(p) + " of " + std::to_string(P) +
                                  " would be empty (the model has too few tensors or layers for this plan)");
}

FragmentPlan FragmentPlan::strided(const ParamLayout& layout, int P) {
  if (P < 1) throw std::invalid_argument("fragments.count: must be ≥ 1");
  std::vector<int> owner;
  for (const auto& t : layout.tensors()) owner.push_back(std::max(t.layer, 0) % P);
  return FragmentPlan(layout, std::move(owner), P);
}

FragmentPlan FragmentPlan::balanced(const ParamLayout& layout, int P) {
  if (P < 1) throw std::invalid_argument("fragments.count: must be ≥ 1");
  const auto& ts = layout.tensors();
  std::vector<std::size_t> order(ts.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](auto a, auto b) { return ts[a].size > ts[b].size; });
  std::vector<std::size_t> load(static_cast<std::size_t>(P), 0);
  std::vector<int> owner(ts.size(), 0);
  for (auto i : order) {
    const auto p = static_cast<std::size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    owner[i] = static_cast<int>(p);
    load[p] += ts[i].size;
  }
  return FragmentPlan(layout, std::move(owner), P);
}

FragmentPlan FragmentPlan::make(const std::string& plan, const ParamLayout& layout, int P) {
  if (plan == "strided") return strided(layout, P);
  if (plan == "balanced") return balanced(layout, P);
  throw std::invalid_argument("fragments.plan: must be \"strided\" or \"balanced\" (got \"" + plan + "\")");
}

void FragmentPlan::scatter(int p, std::span<const float> in, std::span<float> flat) const {
  for (const auto& s : segments(p)) std::copy_n(in.begin() + static_cast<std::ptrdiff_t>(s.dst), s.size,
                                                flat.begin() + static_cast<std::ptrdiff_t>(s.src));
}

}  // namespace diloco
