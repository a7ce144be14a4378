// Trains a tiny model for a few DiLoCo rounds through the installed library.
#include <cstdio>

#include <diloco/config.hpp>
#include <diloco/loops.hpp>

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
  return summary.reports.size() == 4 && summary.final_eval_loss > 0.0 ? 0 : 1;
}
