// Trains a tiny model for a few DiLoCo rounds through the installed library.
#include <cstdio>

#include <diloco/config.hpp>
#include <diloco/loops.hpp>
#ifdef CONSUMER_HAS_TORCH
#include <diloco/torchscript.hpp>
#endif

int main() {
  auto cfg = diloco::parse_config(R"(
[model]
kind = "mlp"
seq_len = 16
n_embd = 8
hidden = 32
[train]
islands = 2
steps = 20
H = 5
batch = 4
eval_windows = 8
)");
  auto summary = diloco::run_reference(cfg);
  std::printf("consumer: %zu rounds, final eval loss %.4f\n", summary.reports.size(), summary.final_eval_loss);
  if (summary.reports.size() != 4 || !(summary.final_eval_loss > 0.0)) return 1;
#ifdef CONSUMER_HAS_TORCH
  // diloco::torch registers model.kind = "torchscript": the configuration's check then reads the
  // module file (here a missing one, refused under model.path).
  diloco::register_torchscript();
  bool named = false;
  try {
    (void)diloco::parse_config("[model]\nkind = \"torchscript\"\npath = \"/nonexistent/model.pt\"\n");
  } catch (const diloco::ConfigError& e) {
    for (const auto& p : e.problems()) named = named || p.rfind("model.path: no file", 0) == 0;
  }
  std::printf("consumer: diloco::torch linked, a missing module %s\n", named ? "refused under model.path" : "NOT refused");
  if (!named) return 1;
#endif
  return 0;
}
