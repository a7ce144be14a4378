// A model of the example's own: a bag-of-context classifier. It predicts each next token from the
// average of one learned row per token of the last `window` tokens (a linear softmax classifier
// over the context's bag of tokens), the way a bag-of-words model classifies a text's topic.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <diloco/model.hpp>
#include <diloco/model_registry.hpp>

namespace own {

/// logits(t) = b + (1/n) Σ_{j = t-n+1..t} W[x_j], n = min(window, t + 1); W (V, V), b (V).
/// Takes `model.options.window` (default 8).
class BagOfContext final : public diloco::Model {
public:
  explicit BagOfContext(const diloco::ModelConfig& c) : V_(c.vocab), std_(c.init_std) {
    if (auto it = c.options.find("window"); it != c.options.end()) window_ = std::stoi(it->second);
    const auto V = static_cast<std::size_t>(V_);
    layout_.add("bag.w", {V, V}, 0, /*decay=*/true, /*embedding=*/true);  // a row per context token
    layout_.add("bag.b", {V}, 1, /*decay=*/false);                        // the classes' prior
  }

  const diloco::ParamLayout& layout() const override { return layout_; }

  void init(std::span<float> params, std::uint64_t seed) const override {
    std::mt19937_64 gen(seed);  // the engine's output is fixed by the standard; map it ourselves
    for (auto& p : params) {
      // Sum of 12 uniforms: mean 6, variance 1 (an approximate normal that is the same everywhere).
      double s = 0.0;
      for (int k = 0; k < 12; ++k) s += static_cast<double>(gen() >> 11) * 0x1.0p-53;
      p = static_cast<float>(std_ * (s - 6.0));
    }
  }

  float loss_and_grad(std::span<const float> params, const diloco::Batch& batch, std::span<float> grads) override {
    std::fill(grads.begin(), grads.end(), 0.0f);
    return pass(params, batch, grads.data());
  }
  float loss(std::span<const float> params, const diloco::Batch& batch) override { return pass(params, batch, nullptr); }
  double flops_per_token(int) const override { return 6.0 * (window_ + 2) * V_; }

private:
  float pass(std::span<const float> params, const diloco::Batch& batch, float* grads) {
    const auto V = static_cast<std::size_t>(V_);
    const float* W = params.data();
    const float* b = W + V * V;
    const double N = static_cast<double>(batch.num_targets());
    logits_.resize(V);
    double total = 0.0;
    for (int r = 0; r < batch.B; ++r) {
      const std::uint32_t* x = batch.tokens.data() + static_cast<std::size_t>(r) * (batch.T + 1);
      for (int t = 0; t <= batch.T; ++t)
        if (x[t] >= V) throw std::invalid_argument("bag: token id " + std::to_string(x[t]) + " >= model.vocab");
      for (int t = 0; t < batch.T; ++t) {
        const int lo = std::max(0, t - window_ + 1);
        const double inv_n = 1.0 / (t - lo + 1);
        // Forward: logits = b + mean of the context's rows; then log-softmax.
        for (std::size_t v = 0; v < V; ++v) logits_[v] = b[v];
        for (int j = lo; j <= t; ++j) {
          const float* row = W + x[j] * V;
          for (std::size_t v = 0; v < V; ++v) logits_[v] += inv_n * row[v];
        }
        const double mx = *std::max_element(logits_.begin(), logits_.end());
        double z = 0.0;
        for (auto& l : logits_) z += l = std::exp(l - mx);  // logits_ now holds exp(logit - mx)
        const std::uint32_t y = x[t + 1];
        total += std::log(z) - std::log(logits_[y]);
        if (!grads) continue;
        // Backward: d loss / d logit_v = (softmax_v - [v == y]) / N, shared by b and every row.
        float* dW = grads;
        float* db = grads + V * V;
        for (std::size_t v = 0; v < V; ++v) {
          const double g = (logits_[v] / z - (v == y ? 1.0 : 0.0)) / N;
          db[v] += static_cast<float>(g);
          for (int j = lo; j <= t; ++j) dW[x[j] * V + v] += static_cast<float>(g * inv_n);
        }
      }
    }
    return static_cast<float>(total / N);
  }

  int V_;
  double std_;
  int window_ = 8;
  diloco::ParamLayout layout_;
  std::vector<double> logits_;  // workspace (one instance per chip)
};

/// Adds "bag" to diloco's model registry; `model.kind = "bag"` then builds it everywhere.
inline void register_bag_model() {
  diloco::register_model(
      {"bag", "bag-of-context classifier (examples/own_model)",
       [](const diloco::ModelConfig& c) -> std::unique_ptr<diloco::Model> { return std::make_unique<BagOfContext>(c); },
       [](const diloco::ModelConfig& c) {
         std::vector<std::string> problems;
         for (const auto& [key, value] : c.options) {
           if (key != "window") {
             problems.push_back("model.options." + key + ": unknown option of \"bag\" (it takes window)");
             continue;
           }
           char* end = nullptr;
           const long w = std::strtol(value.c_str(), &end, 10);
           if (end == value.c_str() || *end || w < 1 || w > c.seq_len)
             problems.push_back("model.options.window: a whole number from 1 to model.seq_len (got \"" + value + "\")");
         }
         return problems;
       }});
}

}  // namespace own
