// Inner optimizer (AdamW with warm-up, cosine decay and global-norm clipping) and the outer
// optimizers of DiLoCo (Nesterov SGD, plain SGD = FedAvg, Delayed Nesterov).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "diloco/params.hpp"

namespace diloco {

/// AdamW hyper-parameters; defaults are DiLoCo's inner optimizer (arXiv 2311.08105).
struct AdamWConfig {
  float lr = 4e-4f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;    // decoupled, on tensors whose TensorSpec::decay is set
  float grad_clip = 1.0f;       // global L2 norm; 0 disables clipping
  long warmup_steps = 100;      // linear warm-up from lr/warmup to lr
  long decay_steps = 0;         // cosine from lr to lr·min_lr_ratio over this many steps after
                                // warm-up; 0 keeps lr constant after warm-up
  float min_lr_ratio = 0.1f;
};

/// Learning rate at inner step `step` (1-based: the first step is step 1).
float learning_rate(const AdamWConfig& cfg, long step);

/// AdamW (Loshchilov & Hutter) over a flat parameter vector, state laid out like the params.
class AdamW {
public:
  AdamW(const ParamLayout& layout, AdamWConfig cfg);
  /// One step; clips `grads` in place to the global norm and returns the norm before clipping.
  float step(std::span<float> params, std::span<float> grads);
  long steps_taken() const { return t_; }
  /// The learning-rate schedule goes on at `step` (a restarted island resuming the run's step
  /// count) instead of starting over at its warm-up and peak. Its moments start afresh, so the
  /// rate is ramped up again over warmup_steps, from the schedule's rate at that point.
  void resume_schedule(long step);
  /// The rate the next step() uses.
  float next_lr() const;
  const AdamWConfig& config() const { return cfg_; }
  std::span<const float> m() const { return m_; }
  std::span<const float> v() const { return v_; }
  /// Restores state (e.g. from a checkpoint); sizes must match the layout.
  void restore(long t, std::span<const float> m, std::span<const float> v);

private:
  const ParamLayout* layout_;
  AdamWConfig cfg_;
  long t_ = 0;
  long offset_ = 0;  // schedule steps before this optimizer's first (resume_schedule)
  std::vector<float> m_, v_;
  std::vector<std::uint8_t> decay_;  // per element: 1 if weight decay applies
};

/// Global L2 norm of a gradient vector (accumulated in double).
double global_norm(std::span<const float> g);

/// Outer optimizer settings; kind "nesterov" (default), "sgd" or "delayed_nesterov".
struct OuterConfig {
  std::string kind = "nesterov";
  float lr = 0.7f;
  float momentum = 0.9f;
  int delay = 4;          // delayed_nesterov: momentum step every `delay` contributions
  float eager = 0.0f;     // delayed_nesterov: share c of each contribution applied at once (c ≤ 1/delay)
};

/// The syncer's optimizer for one fragment (or the whole model): takes the merged outer
/// gradient Δ = θ_global − mean θ_local and moves the global parameters. Arithmetic in double,
/// so that SGD with lr 1 and momentum 0 lands exactly on the islands' mean.
class OuterOptimizer {
public:
  OuterOptimizer(std::size_t size, OuterConfig cfg);
  /// Applies one merged outer gradient to `theta` (size fixed at construction).
  void step(std::span<float> theta, std::span<const double> delta);
  /// The leftover progress at the end of a run (the islands' last contributions, a part of a
  /// period): θ ← θ − lr·Δ, momentum untouched. A full step would also coast on the momentum
  /// once more, as if a whole period had passed.
  void flush(std::span<float> theta, std::span<const double> delta);
  std::span<const float> momentum() const { return m_; }
  std::span<float> momentum() { return m_; }
  const OuterConfig& config() const { return cfg_; }
  long steps_taken() const { return t_; }
  /// Delayed Nesterov: sum of the contributions waiting for the next momentum step.
  std::span<const double> pending_sum() const { return buf_; }
  int pending_count() const { return pending_; }
  /// Restores state from a checkpoint: step count, momentum and (delayed_nesterov) the pending
  /// buffer; sizes must match. Throws std::invalid_argument on a mismatch.
  void restore(long t, std::span<const float> momentum, std::span<const double> pending_sum = {},
               int pending_count = 0);

private:
  OuterConfig cfg_;
  std::vector<float> m_;       // momentum buffer
  std::vector<double> buf_;    // delayed_nesterov: sum of contributions since the last momentum step
  int pending_ = 0;
  long t_ = 0;
};

std::vector<std::string> validate(const AdamWConfig& cfg);
std::vector<std::string> validate(const OuterConfig& cfg);

}  // namespace diloco
