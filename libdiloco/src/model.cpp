// The model registry and make_model: the factory registered under ModelConfig::kind, the built-in
// gpt and mlp among them; evaluate: the mean loss over evaluation batches and its standard error.
#include "diloco/model.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <stdexcept>
#include <utility>

#include "diloco/model_registry.hpp"

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

// The built-in kinds take no [model.options].
std::vector<std::string> no_options(const ModelConfig& cfg) {
  std::vector<std::string> e;
  for (const auto& [key, value] : cfg.options)
    e.push_back("model.options." + key + ": unknown option (model.kind \"" + cfg.kind + "\" takes none)");
  return e;
}

struct Registry {
  std::mutex mu;
  std::map<std::string, ModelKind, std::less<>> kinds;
};

void add(Registry& r, ModelKind kind) {
  const auto ok = [](char ch) {
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_' || ch == '-' ||
           ch == '.';
  };
  if (kind.name.empty() || !std::all_of(kind.name.begin(), kind.name.end(), ok))
    throw std::invalid_argument("register_model: the name \"" + kind.name +
                                "\" must be non-empty letters, digits, '_', '-' or '.'");
  if (!kind.make) throw std::invalid_argument("register_model: \"" + kind.name + "\" has no factory");
  if (r.kinds.count(kind.name)) throw std::invalid_argument("register_model: \"" + kind.name + "\" is already registered");
  auto name = kind.name;
  r.kinds.emplace(std::move(name), std::move(kind));
}

// The built-ins register like any app's model, from the accessor (not from a global
// constructor, which a static library may drop and whose order is unspecified).
void register_builtins(Registry& r) {
  add(r, {"gpt", "byte-level transformer (pre-LN, causal attention, GELU MLP, tied head)",
          [](const ModelConfig& c) -> std::unique_ptr<Model> { return std::make_unique<NetModel<Gpt<float>>>(c); },
          no_options});
  add(r, {"mlp", "next-token classifier over a fixed context (for tests)",
          [](const ModelConfig& c) -> std::unique_ptr<Model> { return std::make_unique<NetModel<Mlp<float>>>(c); },
          no_options});
}

// Built once, thread-safely, and never destroyed (chips may still build models while the
// process exits).
Registry& registry() {
  static Registry& r = *[] {
    auto* x = new Registry;
    register_builtins(*x);
    return x;
  }();
  return r;
}

std::string kinds_list(const Registry& r) {
  std::string s;
  for (const auto& [name, kind] : r.kinds) s += (s.empty() ? "\"" : ", \"") + name + "\"";
  return s;
}

}  // namespace

void register_model(ModelKind kind) {
  auto& r = registry();
  std::lock_guard lock(r.mu);
  add(r, std::move(kind));
}

std::vector<std::string> model_kinds() {
  auto& r = registry();
  std::lock_guard lock(r.mu);
  std::vector<std::string> names;
  for (const auto& [name, kind] : r.kinds) names.push_back(name);
  return names;
}

bool is_model_kind(std::string_view name) {
  auto& r = registry();
  std::lock_guard lock(r.mu);
  return r.kinds.find(name) != r.kinds.end();
}

std::vector<std::string> validate_model_kind(const ModelConfig& cfg) {
  auto& r = registry();
  std::function<std::vector<std::string>(const ModelConfig&)> check;
  {
    std::lock_guard lock(r.mu);
    auto it = r.kinds.find(cfg.kind);
    if (it == r.kinds.end())
      return {"model.kind: unknown model \"" + cfg.kind + "\" (registered: " + kinds_list(r) + ")" +
              (cfg.kind == "torchscript" ? "; this program was built without the TorchScript backend (diloco::torch, "
                                           "built when libtorch-dev is installed)"
                                         : "")};
    check = it->second.validate;
  }
  return check ? check(cfg) : std::vector<std::string>{};
}

std::unique_ptr<Model> make_model(const ModelConfig& cfg) {
  auto& r = registry();
  ModelFactory make;
  {
    std::lock_guard lock(r.mu);
    auto it = r.kinds.find(cfg.kind);
    if (it == r.kinds.end())
      throw std::invalid_argument("model.kind: unknown model \"" + cfg.kind + "\" (registered: " + kinds_list(r) + ")");
    make = it->second.make;
  }
  // The factories validate the sizes and name the offending key.
  auto model = make(cfg);
  if (!model) throw std::invalid_argument("model.kind: the factory of \"" + cfg.kind + "\" built nothing");
  return model;
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
