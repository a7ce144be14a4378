#include "torch_backend.hpp"

#include <dlfcn.h>

#include <filesystem>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "diloco/model_registry.hpp"
#include "diloco/torchscript.hpp"

namespace diloco::app {
namespace {

constexpr const char* kModule = "diloco-torch.so";

/// The loaded kind, or why it could not be loaded.
struct Loaded {
  const ModelKind* kind = nullptr;
  std::string error;
};

/// Where the module may be: beside the app (the build tree), then the installed library
/// directory relative to the installed app (DILOCO_TORCH_MODULE_DIR, set by the build).
std::vector<std::filesystem::path> candidates() {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  std::vector<std::filesystem::path> out;
  if (ec) return out;
  out.push_back(self.parent_path() / kModule);
  out.push_back((self.parent_path() / DILOCO_TORCH_MODULE_DIR / kModule).lexically_normal());
  return out;
}

const Loaded& load() {
  static Loaded loaded;
  static std::once_flag once;
  std::call_once(once, [] {
    std::string tried;
    for (const auto& path : candidates()) {
      std::error_code ec;
      if (!std::filesystem::exists(path, ec)) {
        tried += (tried.empty() ? "" : ", ") + path.string();
        continue;
      }
      // RTLD_NOW: a symbol the module needs and the app lacks is an error here, not a crash later.
      void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (handle == nullptr) {
        loaded.error = "cannot load " + path.string() + ": " + dlerror();
        return;
      }
      using Entry = const ModelKind* (*)();
      auto entry = reinterpret_cast<Entry>(dlsym(handle, "diloco_torchscript_kind_v1"));
      if (entry == nullptr) {
        loaded.error = path.string() + " has no diloco_torchscript_kind_v1: not this version's backend";
        return;
      }
      loaded.kind = entry();  // the module stays loaded for the life of the process
      return;
    }
    loaded.error = std::string("the TorchScript backend (") + kModule + ") is not installed (looked for " +
                   (tried.empty() ? "it beside the app, whose path /proc/self/exe did not give" : tried) + ")";
  });
  return loaded;
}

}  // namespace

void register_torchscript_on_demand() {
  register_model(ModelKind{
      kTorchScriptKind, kTorchScriptDoc,
      [](const ModelConfig& cfg) -> std::unique_ptr<Model> {
        const auto& l = load();
        if (l.kind == nullptr) throw std::invalid_argument("model.kind: " + l.error);
        return l.kind->make(cfg);
      },
      [](const ModelConfig& cfg) -> std::vector<std::string> {
        const auto& l = load();
        if (l.kind == nullptr) return {"model.kind: \"torchscript\": " + l.error};
        return l.kind->validate ? l.kind->validate(cfg) : std::vector<std::string>{};
      }});
}

}  // namespace diloco::app
