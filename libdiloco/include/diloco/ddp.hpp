// Synchronous data parallel (the conventional baseline) on the runtime's units, as plain code.
// The syncer plays parameter server: every step each island sends its gradient on the current
// parameters, the server averages them (weighted by tokens), takes the one AdamW step and
// sends the new parameters back. The arithmetic is that of an all-reduce (every replica takes
// the same step on the same mean), and so are the bytes per island: one model-sized gradient up
// and one model-sized parameter vector down per step, 2·N values, like a ring all-reduce's
// 2·N·(M−1)/M. A step needs every island: ddp stalls while any unit is down.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "diloco/expected.hpp"
#include "diloco/island_core.hpp"
#include "diloco/optim.hpp"
#include "diloco/params.hpp"
#include "diloco/wire.hpp"

namespace diloco {

class DdpServer {
public:
  DdpServer(const ParamLayout& layout, std::span<const float> initial, AdamWConfig inner, int islands);

  /// Validates a gradient frame (FragmentInbox: kind gradient, the current step, sizes, finite
  /// values) and keeps it; a second gradient of the same island for the step replaces the first.
  Expected<FragmentHeader> receive(std::span<const std::byte> frame);
  /// When every one of the run's islands has sent its gradient for the current step: averages
  /// them by tokens, takes the AdamW step and returns the new step. Otherwise nothing.
  std::optional<std::uint64_t> poll();

  /// The step the server's parameters are at (gradients must be for this step).
  std::uint64_t step() const { return step_; }
  std::span<const float> params() const { return params_; }
  /// The parameters as a global_params frame (fp32) with base_round = step().
  Expected<Frame> params_frame() const;
  /// What a (re)starting island heals from: the parameters at step().
  JoinReply join_reply() const;
  /// Forgets the gradients received for the current step (a restarted server: the islands
  /// rejoin and send them again).
  void clear_pending();
  /// Islands whose gradient for the current step is in.
  int received() const;
  const RejectCounts& rejected() const { return inbox_.rejected(); }

private:
  std::vector<float> params_;
  AdamW opt_;
  int islands_;
  std::uint64_t step_ = 0;
  FragmentInbox inbox_;
  std::vector<std::vector<float>> grads_;  // per island, for the current step
  std::vector<std::uint64_t> tokens_;      // per island; 0 = not in yet
  std::vector<float> mean_;
};

/// The island's gradient for step `step` as a frame for the server (fp32).
Expected<Frame> gradient_frame(int island, std::uint64_t step, std::uint64_t tokens, std::span<const float> grad);

}  // namespace diloco
