// Chips that run PyTorch models: model.kind = "torchscript" loads a TorchScript module
// (torch.jit.script(m).save(path)) whose forward(inputs, targets) returns the mean loss. Its named
// parameters become the model's layout, bound as views over the island's flat parameter buffer
// (copied to the device and back per step where model.device is "cuda:N"), so fragments, codecs,
// RDA, merges and checkpoints work unchanged. Built as its own target
// (diloco::torch, when libtorch is found); no torch header is reached through this one.
#pragma once

#include "diloco/model_registry.hpp"

namespace diloco {

/// The kind's name and its one-line description, for an app that registers the kind before the
/// backend is loaded (the app's own `diloco` does).
inline constexpr const char* kTorchScriptKind = "torchscript";
inline constexpr const char* kTorchScriptDoc =
    "a TorchScript module (model.path) whose forward(inputs, targets) returns the mean loss";

/// The "torchscript" kind (its factory and its validation of model.path and model.options), for
/// an app that registers it itself, e.g. behind a module it loads on first use.
ModelKind torchscript_kind();

/// Registers "torchscript" with the model registry (model_registry.hpp). Call once before the
/// configuration is loaded; calling it again does nothing.
void register_torchscript();

}  // namespace diloco
