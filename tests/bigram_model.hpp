// A model the tests bring themselves, as an app would: a bigram table (logits of the next token
// given the current one), registered under a name and trained through the registry.
#pragma once

#include <cmath>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "diloco/model.hpp"
#include "diloco/model_registry.hpp"
#include "diloco/rng.hpp"

namespace diloco::testing {

/// logits(next | x) = W[x, :], W (V, V); reads `model.options.smoothing` (a number ≥ 0, added to
/// the loss as smoothing · mean W²) to show how an app's model takes settings of its own.
class Bigram final : public Model {
public:
  explicit Bigram(const ModelConfig& c) : V_(c.vocab), std_(c.init_std) {
    if (auto it = c.options.find("smoothing"); it != c.options.end()) smoothing_ = std::stod(it->second);
    layout_.add("bigram.w", {static_cast<std::size_t>(V_), static_cast<std::size_t>(V_)}, 0, false, true);
  }
  const ParamLayout& layout() const override { return layout_; }
  void init(std::span<float> params, std::uint64_t seed) const override {
    Rng rng(seed);
    for (auto& p : params) p = static_cast<float>(std_ * rng.normal());
  }
  float loss_and_grad(std::span<const float> params, const Batch& batch, std::span<float> grads) override {
    std::fill(grads.begin(), grads.end(), 0.0f);
    return run(params, batch, grads.data());
  }
  float loss(std::span<const float> params, const Batch& batch) override { return run(params, batch, nullptr); }
  double flops_per_token(int) const override { return 6.0 * V_; }

private:
  float run(std::span<const float> W, const Batch& batch, float* dW) {
    const double n = static_cast<double>(batch.num_targets());
    double total = 0.0;
    std::vector<double> p(static_cast<std::size_t>(V_));
    for (int b = 0; b < batch.B; ++b)
      for (int t = 0; t < batch.T; ++t) {
        const auto x = batch.tokens[static_cast<std::size_t>(b) * (batch.T + 1) + t];
        const auto y = batch.tokens[static_cast<std::size_t>(b) * (batch.T + 1) + t + 1];
        if (static_cast<int>(x) >= V_ || static_cast<int>(y) >= V_) throw std::invalid_argument("bigram: token >= model.vocab");
        const float* row = W.data() + static_cast<std::size_t>(x) * V_;
        double mx = row[0], z = 0.0;
        for (int v = 1; v < V_; ++v) mx = std::max(mx, static_cast<double>(row[v]));
        for (int v = 0; v < V_; ++v) z += p[static_cast<std::size_t>(v)] = std::exp(row[v] - mx);
        total += std::log(z) + mx - row[y];
        if (!dW) continue;
        for (int v = 0; v < V_; ++v)
          dW[static_cast<std::size_t>(x) * V_ + v] += static_cast<float>((p[static_cast<std::size_t>(v)] / z - (v == static_cast<int>(y))) / n);
      }
    double reg = 0.0;
    for (std::size_t i = 0; i < W.size(); ++i) {
      reg += static_cast<double>(W[i]) * W[i];
      if (dW) dW[i] += static_cast<float>(2.0 * smoothing_ * W[i] / static_cast<double>(W.size()));
    }
    return static_cast<float>(total / n + smoothing_ * reg / static_cast<double>(W.size()));
  }

  int V_;
  double std_;
  double smoothing_ = 0.0;
  ParamLayout layout_;
};

/// Registers "bigram" once per process (a test binary runs many cases).
inline void register_bigram() {
  static std::once_flag once;
  std::call_once(once, [] {
    register_model({"bigram", "a bigram table (tests)",
                    [](const ModelConfig& c) -> std::unique_ptr<Model> { return std::make_unique<Bigram>(c); },
                    [](const ModelConfig& c) {
                      std::vector<std::string> e;
                      for (const auto& [k, v] : c.options) {
                        if (k != "smoothing") e.push_back("model.options." + k + ": unknown option of \"bigram\"");
                        else {
                          char* end = nullptr;
                          const double x = std::strtod(v.c_str(), &end);
                          if (end == v.c_str() || *end || !(x >= 0.0))
                            e.push_back("model.options.smoothing: must be a number ≥ 0 (got \"" + v + "\")");
                        }
                      }
                      return e;
                    }});
  });
}

}  // namespace diloco::testing
