// The TorchScript model (torchscript.hpp) on libtorch.
//
// Per step a chip binds its module's parameters to views over the island's flat parameter buffer
// (torch::from_blob, no copy) and each parameter's gradient to a view over the chip's flat
// gradient buffer, so autograd accumulates straight into it; then it runs forward(inputs,
// targets) and backward. The module's own parameter tensors are never used after load except to
// give the initial values and to run forward once when the model is built (probe: a bad return
// or a module that cannot take model.seq_len tokens is refused by the configuration's check). On a
// CUDA device (model.device = "cuda:N", where libtorch has CUDA) the parameters are copied to the
// device each step and the gradients back after backward: the buffers and AdamW live on the host.
#include "diloco/torchscript.hpp"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <mutex>
#include <set>
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

/// Where the module runs: "cpu", or "cuda:N" where this libtorch has CUDA and sees GPU N. The
/// index is read here, not by torch::Device, whose 8-bit index would wrap "cuda:256" to GPU 0.
torch::Device device_of(const std::string& s) {
  if (s == "cpu") return torch::Device(torch::kCPU);
  if (s.rfind("cuda", 0) != 0) refuse("model.device", "\"" + s + "\": use \"cpu\" or \"cuda:N\"");
  int index = 0;
  if (s != "cuda") {
    const auto digits = s.size() > 5 && s[4] == ':' ? s.substr(5) : std::string();
    const bool number = !digits.empty() && digits.size() <= 4 &&
                        std::all_of(digits.begin(), digits.end(), [](unsigned char c) { return std::isdigit(c); });
    if (!number) refuse("model.device", "\"" + s + "\": not a device (use \"cpu\" or \"cuda:N\", N a GPU's index)");
    index = std::stoi(digits);
  }
  if (!torch::cuda::is_available())
    refuse("model.device", "\"" + s + "\": this libtorch was built without CUDA (or sees no GPU); use \"cpu\"");
  const auto count = static_cast<int>(torch::cuda::device_count());
  if (index >= count)
    refuse("model.device", "\"" + s + "\": no GPU " + std::to_string(index) + " (this process sees " + std::to_string(count) + ")");
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index));
}

/// The last line of an error (the interpreter's come with the whole TorchScript traceback).
std::string last_line(std::string what) {
  while (!what.empty() && (what.back() == '\n' || what.back() == ' ')) what.pop_back();
  const auto nl = what.rfind('\n');
  return nl == std::string::npos ? what : what.substr(nl + 1);
}

/// Modules whose forward already passed the probe in this process (path, sizes, device, file
/// time): a configuration check builds the model several times, and every chip builds its own.
bool probed(const std::string& key, bool mark) {
  static std::mutex m;
  static std::set<std::string> seen;
  std::lock_guard<std::mutex> lock(m);
  if (mark) seen.insert(key);
  return seen.count(key) > 0;
}

torch::jit::Module load_module(const ModelConfig& cfg, torch::Device device) {
  if (cfg.path.empty()) refuse("model.path", "model.kind = \"torchscript\" needs the path of a .pt file");
  if (!std::filesystem::is_regular_file(cfg.path)) refuse("model.path", "no file '" + cfg.path + "'");
  try {
    auto m = torch::jit::load(cfg.path, device);
    m.eval();  // no dropout: a chip's loss is a function of parameters and batch
    return m;
  } catch (const c10::Error& e) {
    refuse("model.path", "'" + cfg.path + "' did not load as a TorchScript module (torch::jit::load): " + e.what_without_backtrace());
  }
}

class TorchScriptModel final : public Model {
public:
  explicit TorchScriptModel(const ModelConfig& cfg)
      : cfg_(cfg), device_(device_of(cfg.device)), module_(load_module(cfg, device_)) {
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
      initial_.push_back(t.detach().to(torch::kCPU).contiguous());  // on the CPU: the module's own, no copy
    }
    // Process-wide: libtorch has one intra-op pool, which every chip of the process shares.
    at::set_num_threads(threads_of(cfg));
    probe();
    unbind();  // between steps the module holds the host values (on a GPU: no second model there)
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
    Bound bound(*this, params, grads);
    auto loss = run(batch);
    loss.backward();
    if (!device_.is_cpu()) gradients_to_host(grads);
    return loss.item<float>();
  }

  float loss(std::span<const float> params, const Batch& batch) override {
    at::NoGradGuard no_grad;
    Bound bound(*this, params, {});
    return run(batch).item<float>();
  }

  double flops_per_token(int) const override { return 6.0 * static_cast<double>(layout_.size()); }

private:
  /// The island's parameters bound for one step; the module's own back however the step ends
  /// (a step that throws leaves no views of the island's buffers in the module).
  struct Bound {
    Bound(TorchScriptModel& m, std::span<const float> params, std::span<float> grads) : m_(m) {
      try {
        m_.bind(params, grads);
      } catch (...) {
        m_.unbind();
        throw;
      }
    }
    ~Bound() { m_.unbind(); }
    Bound(const Bound&) = delete;
    Bound& operator=(const Bound&) = delete;
    TorchScriptModel& m_;
  };

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

  /// Tensor i of the layout as a view over the flat buffer at `base` (no copy).
  torch::Tensor view(float* base, std::size_t i) const {
    const auto& spec = layout_[i];
    return torch::from_blob(base + spec.offset, std::vector<std::int64_t>(spec.shape.begin(), spec.shape.end()), torch::kFloat);
  }

  void bind(std::span<const float> params, std::span<float> grads) {
    if (params.size() != layout_.size()) throw std::invalid_argument("torchscript: parameter vector of another layout");
    for (std::size_t i = 0; i < slots_.size(); ++i) {
      // Read-only in practice: autograd never writes a leaf's data.
      auto p = view(const_cast<float*>(params.data()), i);
      if (!device_.is_cpu()) {
        // On a GPU the island's parameters cross to the device each step (the optimizer and the
        // flat buffer live on the host) and the gradients come back after backward.
        p = p.to(device_, /*non_blocking=*/false, /*copy=*/true);
        if (!grads.empty()) p.requires_grad_(true);
      } else if (!grads.empty()) {
        p.requires_grad_(true);
        // Gradients accumulate in place into this view: the chip's flat gradient buffer.
        p.mutable_grad() = view(grads.data(), i);
      }
      slots_[i].owner.setattr(slots_[i].attr, p);
    }
  }

  /// The device's gradients into the chip's flat buffer (a parameter the loss did not use keeps 0).
  void gradients_to_host(std::span<float> grads) {
    for (std::size_t i = 0; i < slots_.size(); ++i) {
      const auto g = slots_[i].owner.attr(slots_[i].attr).toTensor().grad();
      if (g.defined()) view(grads.data(), i).copy_(g);
    }
  }

  void unbind() {
    for (std::size_t i = 0; i < slots_.size(); ++i) slots_[i].owner.setattr(slots_[i].attr, initial_[i]);
  }

  /// One forward pass on a row of model.vocab - 1 tokens with the module's own parameters, so that
  /// a forward that returns anything but the mean loss, or that cannot take model.seq_len tokens
  /// of those ids, is refused when the model is built (the configuration's check), not at a
  /// chip's first step.
  void probe() {
    const auto T = static_cast<std::int64_t>(cfg_.seq_len);
    std::error_code ec;
    const auto written = std::filesystem::last_write_time(cfg_.path, ec).time_since_epoch().count();
    const std::string key = cfg_.path + "|" + std::to_string(written) + "|" + std::to_string(T) + "|" +
                            std::to_string(cfg_.vocab) + "|" + cfg_.device;
    if (probed(key, false)) return;
    at::NoGradGuard no_grad;
    // The largest token id the data can hold: a module whose vocabulary is smaller fails here.
    auto tokens = torch::full({1, T}, static_cast<std::int64_t>(cfg_.vocab - 1), torch::kLong);
    c10::IValue out;
    auto failed = [&](const std::string& what) {
      refuse("model.path", "'" + cfg_.path + "': forward(inputs, targets) failed on one row of model.seq_len = " +
                               std::to_string(T) + " tokens of id model.vocab - 1 = " + std::to_string(cfg_.vocab - 1) +
                               ": " + last_line(what));
    };
    try {
      out = call(tokens, tokens);
    } catch (const c10::Error& e) {
      failed(e.what_without_backtrace());
    } catch (const std::exception& e) {
      failed(e.what());
    }
    (void)checked(out);
    probed(key, true);
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
    return checked(call(inputs, targets));
  }

  c10::IValue call(const torch::Tensor& inputs, const torch::Tensor& targets) {
    return module_.forward({inputs.to(device_), targets.to(device_)});
  }

  /// forward's result as the mean loss: one float32 value.
  torch::Tensor checked(const c10::IValue& out) const {
    if (!out.isTensor()) refuse("model.path", "'" + cfg_.path + "': forward must return a tensor (the mean loss)");
    auto loss = out.toTensor();
    if (loss.numel() != 1)
      refuse("model.path", "'" + cfg_.path + "': forward must return the mean loss as a scalar, it returned " +
                               std::to_string(loss.numel()) + " values");
    if (loss.scalar_type() != torch::kFloat) refuse("model.path", "'" + cfg_.path + "': forward must return a float32 loss");
    return loss.reshape({});
  }

  ModelConfig cfg_;
  torch::Device device_;
  torch::jit::Module module_;
  ParamLayout layout_;
  std::vector<Slot> slots_;
  std::vector<torch::Tensor> initial_;  // the module's own parameters' values, on the host
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
