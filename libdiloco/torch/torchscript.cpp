// The TorchScript model (torchscript.hpp) on libtorch.
//
// Per step a chip binds its module's parameters to views over the island's flat parameter buffer
// (torch::from_blob, no copy) and each parameter's gradient to a view over the chip's flat
// gradient buffer, so autograd accumulates straight into it; then it runs forward(inputs,
// targets) and backward. The module's own parameter tensors are never used after load except to
// give the initial values.
#include "diloco/torchscript.hpp"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/Parallel.h>
#include <torch/cuda.h>
#include <torch/script.h>

#include "diloco/model_registry.hpp"

namespace diloco {

namespace {

[[noreturn]] void refuse(const std::string& key, const std::string& why) { throw std::invalid_argument(key + ": " + why); }

/// The block number in a dotted parameter name ("h.3.attn.qkv.w" → 3), or -1.
int block_of(const std::string& name) {
  std::size_t start = 0;
  while (start <= name.size()) {
    const auto end = std::min(name.find('.', start), name.size());
    const auto part = name.substr(start, end - start);
    if (!part.empty() && std::all_of(part.begin(), part.end(), [](unsigned char c) { return std::isdigit(c); }))
      return std::stoi(part);
    start = end + 1;
  }
  return -1;
}

/// Where a parameter lives: the submodule that holds it and its attribute name there.
struct Slot {
  torch::jit::Module owner;
  std::string attr;
};

Slot slot_of(const torch::jit::Module& root, const std::string& dotted) {
  torch::jit::Module m = root;
  std::size_t start = 0;
  for (auto dot = dotted.find('.'); dot != std::string::npos; dot = dotted.find('.', start)) {
    m = m.attr(dotted.substr(start, dot - start)).toModule();
    start = dot + 1;
  }
  return {m, dotted.substr(start)};
}

torch::jit::Module load_module(const ModelConfig& cfg) {
  if (cfg.path.empty()) refuse("model.path", "model.kind = \"torchscript\" needs the path of a .pt file");
  if (!std::filesystem::is_regular_file(cfg.path)) refuse("model.path", "no file '" + cfg.path + "'");
  try {
    auto m = torch::jit::load(cfg.path, torch::kCPU);
    m.eval();  // no dropout: a chip's loss is a function of parameters and batch
    return m;
  } catch (const c10::Error& e) {
    refuse("model.path", "'" + cfg.path + "' is not a TorchScript module: " + e.what_without_backtrace());
  }
}

class TorchScriptModel final : public Model {
public:
  explicit TorchScriptModel(const ModelConfig& cfg) : cfg_(cfg), module_(load_module(cfg)) {
    if (cfg.device != "cpu") {
      if (cfg.device.rfind("cuda", 0) == 0 && !torch::cuda::is_available())
        refuse("model.device", "\"" + cfg.device + "\": this libtorch was built without CUDA (or sees no GPU); use \"cpu\"");
      if (cfg.device.rfind("cuda", 0) != 0) refuse("model.device", "\"" + cfg.device + "\": use \"cpu\" or \"cuda:N\"");
      refuse("model.device", "\"" + cfg.device + "\": only the CPU path is built and tested here");
    }
    if (!module_.find_method("forward")) refuse("model.path", "'" + cfg.path + "' has no forward method");
    const auto& schema = module_.get_method("forward").function().getSchema();
    if (schema.arguments().size() != 3)  // self, inputs, targets
      refuse("model.path", "'" + cfg.path + "': forward must take (inputs, targets), it takes " +
                               std::to_string(schema.arguments().size() - 1) + " argument(s)");
    // The layout: every named parameter in the module's order. Blocks are the numbered parts of
    // the names; what comes before the first block is layer -1 (2-D tensors there are embeddings),
    // what comes after the last is one past it. Matrices are decayed, vectors not.
    int last_block = -1;
    std::vector<std::pair<std::string, torch::Tensor>> params;
    for (const auto& p : module_.named_parameters(/*recurse=*/true)) {
      params.emplace_back(p.name, p.value);
      last_block = std::max(last_block, block_of(p.name));
    }
    if (params.empty()) refuse("model.path", "'" + cfg.path + "' has no parameters");
    bool seen_block = false;
    for (auto& [name, t] : params) {
      if (t.scalar_type() != torch::kFloat)
        refuse("model.path", "'" + cfg.path + "': parameter " + name + " is not float32");
      const int b = block_of(name);
      seen_block = seen_block || b >= 0;
      const int layer = b >= 0 ? b : (seen_block ? last_block + 1 : -1);
      std::vector<std::size_t> shape;
      for (auto d : t.sizes()) shape.push_back(static_cast<std::size_t>(d));
      const bool matrix = t.dim() >= 2;
      layout_.add(name, shape, layer, matrix, matrix && layer == -1);
      slots_.push_back(slot_of(module_, name));
      initial_.push_back(t.detach().contiguous().clone());
    }
    at::set_num_threads(threads_of(cfg));
  }

  const ParamLayout& layout() const override { return layout_; }

  /// The module's own parameters as saved: a TorchScript file carries its initialisation.
  void init(std::span<float> params, std::uint64_t) const override {
    for (std::size_t i = 0; i < initial_.size(); ++i) {
      const auto& t = initial_[i];
      std::copy_n(t.data_ptr<float>(), t.numel(), params.begin() + static_cast<std::ptrdiff_t>(layout_[i].offset));
    }
  }

  float loss_and_grad(std::span<const float> params, const Batch& batch, std::span<float> grads) override {
    std::fill(grads.begin(), grads.end(), 0.0f);
    bind(params, grads);
    auto loss = run(batch);
    loss.backward();
    unbind();
    return loss.item<float>();
  }

  float loss(std::span<const float> params, const Batch& batch) override {
    at::NoGradGuard no_grad;
    bind(params, {});
    const float l = run(batch).item<float>();
    unbind();
    return l;
  }

  double flops_per_token(int) const override { return 6.0 * static_cast<double>(layout_.size()); }

private:
  static int threads_of(const ModelConfig& cfg) {
    auto it = cfg.options.find("torch_threads");
    if (it == cfg.options.end()) return 1;
    try {
      const int n = std::stoi(it->second);
      if (n >= 1 && n <= 256) return n;
    } catch (const std::exception&) {
    }
    refuse("model.options.torch_threads", "must be an integer in [1, 256] (got " + it->second + ")");
  }

  void bind(std::span<const float> params, std::span<float> grads) {
    if (params.size() != layout_.size()) throw std::invalid_argument("torchscript: parameter vector of another layout");
    for (std::size_t i = 0; i < slots_.size(); ++i) {
      const auto& spec = layout_[i];
      std::vector<std::int64_t> shape(spec.shape.begin(), spec.shape.end());
      // Read-only in practice: autograd never writes a leaf's data.
      auto p = torch::from_blob(const_cast<float*>(params.data()) + spec.offset, shape, torch::kFloat);
      if (!grads.empty()) {
        p.requires_grad_(true);
        // Gradients accumulate in place into this view: the chip's flat gradient buffer.
        p.mutable_grad() = torch::from_blob(grads.data() + spec.offset, shape, torch::kFloat);
      }
      slots_[i].owner.setattr(slots_[i].attr, p);
    }
  }

  void unbind() {
    for (std::size_t i = 0; i < slots_.size(); ++i) slots_[i].owner.setattr(slots_[i].attr, initial_[i]);
  }

  torch::Tensor run(const Batch& batch) {
    const auto B = batch.B, T = batch.T;
    auto inputs = torch::empty({B, T}, torch::kLong);
    auto targets = torch::empty({B, T}, torch::kLong);
    auto* in = inputs.data_ptr<std::int64_t>();
    auto* tg = targets.data_ptr<std::int64_t>();
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < T; ++t) {
        const auto row = static_cast<std::size_t>(b) * static_cast<std::size_t>(T + 1);
        in[b * T + t] = batch.tokens[row + static_cast<std::size_t>(t)];
        tg[b * T + t] = batch.tokens[row + static_cast<std::size_t>(t) + 1];
      }
    auto out = module_.forward({inputs, targets});
    if (!out.isTensor()) throw std::runtime_error("model.path: '" + cfg_.path + "': forward must return a tensor (the mean loss)");
    auto loss = out.toTensor();
    if (loss.numel() != 1)
      throw std::runtime_error("model.path: '" + cfg_.path + "': forward must return the mean loss as a scalar, it returned " +
                               std::to_string(loss.numel()) + " values");
    return loss.reshape({});
  }

  ModelConfig cfg_;
  torch::jit::Module module_;
  ParamLayout layout_;
  std::vector<Slot> slots_;
  std::vector<torch::Tensor> initial_;
};

}  // namespace

ModelKind torchscript_kind() {
  return ModelKind{
      kTorchScriptKind, kTorchScriptDoc,
      [](const ModelConfig& cfg) -> std::unique_ptr<Model> { return std::make_unique<TorchScriptModel>(cfg); },
      [](const ModelConfig& cfg) {
        std::vector<std::string> e;
        if (cfg.path.empty()) e.push_back("model.path: model.kind = \"torchscript\" needs the path of a .pt file");
        else if (!std::filesystem::is_regular_file(cfg.path)) e.push_back("model.path: no file '" + cfg.path + "'");
        for (const auto& [k, v] : cfg.options)
          if (k != "torch_threads") e.push_back("model.options." + k + ": not a setting of the torchscript model (torch_threads)");
        return e;
      }};
}

void register_torchscript() {
  static std::once_flag once;
  std::call_once(once, [] { register_model(torchscript_kind()); });
}

}  // namespace diloco
