// Models by name: an app registers a factory under a name and `model.kind` picks it. The built-in
// "gpt" and "mlp" are registered the same way, the first time the registry is used.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "diloco/model.hpp"

namespace diloco {

/// Builds one model instance from the run's [model] settings (one instance per chip; see the
/// Model contract in model.hpp). Throws std::invalid_argument naming the key on bad settings.
using ModelFactory = std::function<std::unique_ptr<Model>(const ModelConfig&)>;

/// A kind of model that `model.kind` can name. Solves "train my own model on the runtime without
/// changing it": everything that builds a model (reference loops, chips, the syncer, sites)
/// builds through the registry.
struct ModelKind {
  std::string name;  // what `model.kind` says: letters, digits, '_', '-', '.'
  std::string doc;   // one line: what it is
  ModelFactory make;
  /// Optional: problems of the settings, one "model.key: problem" line each (e.g. of the keys of
  /// `model.options` the model reads); called by config validation for this kind only.
  std::function<std::vector<std::string>(const ModelConfig&)> validate;
};

/// Adds a kind. Call it before the configuration is loaded (config validation asks the registry
/// whether `model.kind` exists). Throws std::invalid_argument if the name is malformed, already
/// registered, or the factory is empty. Thread-safe.
void register_model(ModelKind kind);

/// The registered names, sorted ("gpt", "mlp" and whatever the app added).
std::vector<std::string> model_kinds();

/// Whether `name` is registered.
bool is_model_kind(std::string_view name);

/// Problems of `cfg` that belong to its kind: "model.kind: unknown ..." (listing the registered
/// kinds) if it is not registered, otherwise what the kind's `validate` says. Empty when valid.
std::vector<std::string> validate_model_kind(const ModelConfig& cfg);

}  // namespace diloco
