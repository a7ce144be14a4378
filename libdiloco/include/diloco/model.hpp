// The model interface every island and chip trains through, and the configs of the built-in models.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "diloco/params.hpp"

namespace diloco {

/// The largest model.vocab (token ids are 32-bit; embeddings index with size_t).
inline constexpr int kMaxVocab = 1 << 24;

/// A batch of B windows of T+1 token ids each: inputs are tokens[b][0..T), targets [1..T].
/// Ids are below model.vocab (bytes: below 256).
struct Batch {
  int B = 0;
  int T = 0;
  std::vector<std::uint32_t> tokens;  // (B, T+1) row-major
  std::size_t num_targets() const { return static_cast<std::size_t>(B) * T; }
};

/// Sizes of the models; `kind` names a registered model (model_registry.hpp): the built-in "gpt"
/// (byte transformer) or "mlp" (next-byte classifier), or one an app registered.
struct ModelConfig {
  std::string kind = "gpt";
  int vocab = 256;     // V: token ids are < V (256: bytes); sizes the embedding (and the mlp's output)
  int seq_len = 64;    // T: context length (also the position-embedding table size)
  int n_layer = 4;     // L
  int n_head = 4;      // NH
  int n_embd = 128;    // C
  // mlp only: predicts token t from the `context` tokens before it.
  int context = 3;
  int hidden = 256;
  float init_std = 0.02f;
  // torchscript only (diloco::torch, torchscript.hpp): the module file and where it runs.
  std::string path;
  std::string device = "cpu";
  // [model.options]: settings of a registered model kind that the built-in keys do not cover,
  // as written in the TOML file (strings without their quotes, numbers and booleans as typed).
  // The kind's factory reads them; its `validate` names the unknown or bad ones. The built-in
  // kinds take none.
  std::map<std::string, std::string> options;
};

/// A trainable model over a flat parameter vector. The object owns activation workspace only,
/// so one instance per chip computes on parameters shared read-only with its island: calls on one
/// instance come from one thread at a time, but several instances read the same `params` at once.
/// The layout's tensor names and `layer` ids are the model's identity: fragments are cut from
/// them and checkpoints store and check them.
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

/// Builds the model described by `cfg` through the registry (model_registry.hpp): the factory
/// registered under `cfg.kind`. Throws std::invalid_argument naming model.kind and the registered
/// kinds if there is none, or naming the key the factory refuses.
std::unique_ptr<Model> make_model(const ModelConfig& cfg);

/// An eval loss and how far it may be from the loss over the whole held-out split: without the
/// standard error, a difference between two runs cannot be told from which windows were read.
struct EvalResult {
  double loss = 0.0;       // mean of the batch losses, nats/token
  double std_error = 0.0;  // of that mean: sample standard deviation of the batch losses / sqrt(batches);
                           // 0 with fewer than two batches
  std::size_t batches = 0; // batches measured (windows, when each batch is one window)
};

/// The mean of per-batch `losses` and its standard error (sample standard deviation with n − 1,
/// over sqrt(n)); the mean of nothing is NaN.
EvalResult mean_and_std_error(std::span<const double> losses);
/// Mean loss of `params` over evaluation batches (what every eval-loss figure reports) and its
/// standard error; all batches hold the same number of targets.
EvalResult evaluate_with_error(Model& model, std::span<const float> params, const std::vector<Batch>& eval);
/// The mean loss alone: evaluate_with_error(...).loss.
double evaluate(Model& model, std::span<const float> params, const std::vector<Batch>& eval);

}  // namespace diloco
