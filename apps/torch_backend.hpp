// model.kind = "torchscript" for the app, with libtorch loaded only when a run uses it.
#pragma once

namespace diloco::app {

/// Registers "torchscript" with the model registry. The backend (diloco-torch.so, beside the app
/// or in its installed library directory) is loaded the first time a configuration that names
/// the kind is validated or builds a model; if it cannot be loaded, validation says so under
/// model.kind with the loader's reason.
void register_torchscript_on_demand();

}  // namespace diloco::app
