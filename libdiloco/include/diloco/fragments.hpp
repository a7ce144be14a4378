// Fragment plans (which tensors sync together) and the Streaming DiLoCo sync schedule.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "diloco/params.hpp"

namespace diloco {

/// A tensor's place inside a gathered fragment vector.
struct Segment {
  std::size_t tensor = 0;     // index in the ParamLayout
  std::size_t src = 0;        // offset in the flat parameter buffer
  std::size_t dst = 0;        // offset in the fragment vector
  std::size_t size = 0;
  bool embedding = false;     // RDA is not applied to embedding tensors
};

/// Splits a model into P fragments, each tensor in exactly one (Streaming DiLoCo, arXiv 2501.18512).
class FragmentPlan {
public:
  /// Tensor of layer l goes to fragment max(l, 0) mod P (the embeddings travel with block 0).
  static FragmentPlan strided(const ParamLayout& layout, int P);
  /// Greedy size-balanced bin packing: largest tensor first into the lightest fragment.
  static FragmentPlan balanced(const ParamLayout& layout, int P);
  /// By name: "strided" or "balanced"; throws std::invalid_argument naming fragments.plan.
  static FragmentPlan make(const std::string& plan, const ParamLayout& layout, int P);

  int count() const { return static_cast<int>(segments_.size()); }
  std::size_t size(int p) const { return sizes_[static_cast<std::size_t>(p)]; }
  /// The size of the largest fragment: what bounds a frame of this run (buffers, door limits).
  std::size_t largest() const { return largest_; }
  const std::vector<Segment>& segments(int p) const { return segments_[static_cast<std::size_t>(p)]; }
  /// Fragment holding tensor i.
  int fragment_of(std::size_t tensor) const { return owner_[tensor]; }

  /// Copies fragment p out of a flat buffer into a contiguous vector (size(p) elements).
  template <class Out>
  void gather(int p, std::span<const float> flat, std::span<Out> out) const {
    for (const auto& s : segments(p))
      for (std::size_t i = 0; i < s.size; ++i) out[s.dst + i] = static_cast<Out>(flat[s.src + i]);
  }
  /// Writes a contiguous fragment vector back into the flat buffer.
  void scatter(int p, std::span<const float> in, std::span<float> flat) const;

private:
  FragmentPlan(const ParamLayout& layout, std::vector<int> owner, int P);
  std::vector<std::vector<Segment>> segments_;
  std::vector<std::size_t> sizes_;
  std::size_t largest_ = 0;
  std::vector<int> owner_;
};

/// When each fragment syncs: fragment p is due after local step s (1-based) when
/// s ≡ p·H/P (mod H), so the P fragments spread their traffic evenly over the H steps.
struct SyncSchedule {
  int H = 100;
  int P = 1;
  int offset(int p) const { return static_cast<int>(static_cast<long>(p) * H / P); }
  bool due(long step, int p) const { return step > 0 && since_point(step, p) == 0; }
  /// Steps since fragment p's last point of the schedule at or before `step` (0: at one).
  long since_point(long step, int p) const {
    const long h = H, off = offset(p) % h;
    return ((step - off) % h + h) % h;
  }
};

}  // namespace diloco
