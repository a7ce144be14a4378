// The model interface every island and chip trains through, and the configs of the built-in models.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "diloco/params.hpp"

namespace diloco {

/// A batch of B windows of T+1 byte tokens each: inputs are tokens[b][0..T), targets [1..T].
struct Batch {
  int B = 0;
  int T = 0;
  std::vector<std::uint8_t> tokens;  // (B, T+1) row-major
  std::size_t num_targets() const { return static_cast<std::size_t>(B) * T; }
};

/// Sizes of the models; `kind` picks "gpt" (byte transformer) or "mlp" (next-byte classifier).
struct ModelConfig {
  std::string kind = "gpt";
  int vocab = 256;     // bytes
  int seq_len = 64;    // T: context length (also the position-embedding table size)
  int n_layer = 4;     // L
  int n_head = 4;      // NH
  int n_embd = 128;    // C
  // mlp only: predicts token t from the `context` tokens before it.
  int context = 3;
  int hidden = 256;
  float init_std = 0.02f;
};

/// A trainable model over a flat parameter vector. The object owns activation workspace only,
/// so one instance per chip computes on parameters shared read-only with its island.
class Model {
public:
  virtual ~Model() = default;
  virtual const ParamLayout& layout() const = 0;
  /// Writes initial parameters drawn from `seed` (same seed, same parameters, on every machine).
  virtual void init(std::span<float> params, std::uint64_t seed) const = 0;
  /// Mean cross-entropy over the batch's targets; `grads` is overwritten with d loss / d params.
  virtual float loss_and_grad(std::span<const float> params, const Batch& batch,
                              std::span<float> grads) = 0;
  /// Mean cross-entropy only (evaluation).
  virtual float loss(std::span<const float> params, const Batch& batch) = 0;
  /// Floating-point operations of one forward+backward pass per target token (for FLOP/s).
  virtual double flops_per_token(int T) const = 0;
};

/// Builds the model described by `cfg` (validated first; see config.hpp).
std::unique_ptr<Model> make_model(const ModelConfig& cfg);

/// Mean loss of `params` over evaluation batches (what every eval-loss figure reports).
double evaluate(Model& model, std::span<const float> params, const std::vector<Batch>& eval);

}  // namespace diloco
