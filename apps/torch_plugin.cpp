// The TorchScript chip backend as a module that `diloco` loads the first time a configuration
// names model.kind = "torchscript" (torch_backend.cpp). Linked into the app, libtorch's static
// initialisation took about a second at every start of every command, `diloco --help` included;
// loaded on demand, only the runs that use it pay for it. The module holds the backend and
// libtorch; the library code it calls (parameter layouts, the Model base) is the app's own,
// exported to it (the app's dynamic list, apps/exports.list).
#include "diloco/torchscript.hpp"

extern "C" __attribute__((visibility("default"))) const diloco::ModelKind* diloco_torchscript_kind_v1() {
  static const diloco::ModelKind kind = diloco::torchscript_kind();
  return &kind;
}
