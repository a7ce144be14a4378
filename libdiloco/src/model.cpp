// make_model: picks the built-in model named by ModelConfig::kind behind the Model interface;
// evaluate: the mean loss over evaluation batches and its standard error.
#include "diloco/model.hpp"

#include <cmath>
#include <stdexcept>
#include <utility>

#include "diloco/gpt.hpp"
#include "diloco/mlp.hpp"

namespace diloco {
namespace {

/// Model over a float network class (Gpt<float>, Mlp<float>): forwards every call.
template <class Net>
class NetModel final : public Model {
public:
  explicit NetModel(const ModelConfig& cfg) : net_(cfg) {}
  const ParamLayout& layout() const override { return net_.layout(); }
  void init(std::span<float> params, std::uint64_t seed) const override {
    net_.init(params, seed);
  }
  float loss_and_grad(std::span<const float> params, const Batch& batch,
                      std::span<float> grads) override {
    return net_.loss_and_grad(params, batch, grads);
  }
  float loss(std::span<const float> params, const Batch& batch) override {
    return net_.loss(params, batch);
  }
  double flops_per_token(int T) const override { return net_.flops_per_token(T); }

private:
  Net net_;
};

}  // namespace

std::unique_ptr<Model> make_model(const ModelConfig& cfg) {
  // The network constructors validate the sizes and name the offending key.
  if (cfg.kind == "gpt") return std::make_unique<NetModel<Gpt<float>>>(cfg);
  if (cfg.kind == "mlp") return std::make_unique<NetModel<Mlp<float>>>(cfg);
  throw std::invalid_argument("model.kind: unknown kind '" + cfg.kind +
                              "' (expected 'gpt' or 'mlp')");
}

EvalResult mean_and_std_error(std::span<const double> losses) {
  EvalResult r;
  r.batches = losses.size();
  if (losses.empty()) {
    r.loss = std::nan("");
    return r;
  }
  const double n = static_cast<double>(losses.size());
  double sum = 0.0;
  for (double l : losses) sum += l;
  r.loss = sum / n;
  if (losses.size() < 2) return r;
  double ss = 0.0;  // two passes: the squares of deviations, not of values (no cancellation)
  for (double l : losses) ss += (l - r.loss) * (l - r.loss);
  r.std_error = std::sqrt(ss / (n - 1.0) / n);
  return r;
}

EvalResult evaluate_with_error(Model& model, std::span<const float> params, const std::vector<Batch>& eval) {
  std::vector<double> losses;
  losses.reserve(eval.size());
  for (const auto& b : eval) losses.push_back(model.loss(params, b));
  return mean_and_std_error(losses);
}

double evaluate(Model& model, std::span<const float> params, const std::vector<Batch>& eval) {
  return evaluate_with_error(model, params, eval).loss;
}

}  // namespace diloco
