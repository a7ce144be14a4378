// Reference training loops: single-threaded, deterministic golden models of synchronous data
// parallel, DiLoCo and Streaming DiLoCo, against which the actor runtime is checked.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "diloco/config.hpp"
#include "diloco/expected.hpp"

namespace diloco {

/// Progress after each period of train.H inner steps (one DiLoCo round).
struct RoundReport {
  long round = 0;             // periods completed
  long step = 0;              // inner steps taken by each island
  double train_loss = 0.0;    // mean island training loss over the period
  double eval_loss = 0.0;     // global parameters on train.eval_windows windows of the evaluation split
  double eval_std_error = 0.0;  // standard error of eval_loss (window to window)
  std::uint64_t tokens = 0;   // training tokens over all islands so far
  double bytes = 0.0;         // bytes that would have crossed the network so far
  double seconds = 0.0;       // wall time so far
};

struct RunSummary {
  std::vector<RoundReport> reports;
  std::vector<float> params;               // final global parameters
  double final_eval_loss = 0.0;
  double final_eval_std_error = 0.0;       // standard error of final_eval_loss
  std::uint64_t tokens = 0;
  double bytes = 0.0;
  double seconds = 0.0;
  std::optional<double> entropy_floor;     // of the corpus, nats/token, when known
  double unigram_entropy = 0.0;
  /// The run diverged and stopped there (errc::non_finite, naming the island or fragment, the
  /// step and what held NaN or infinity: a training loss, a gradient, the global parameters after
  /// an outer step); `params` and `final_eval_loss` are those of that moment. A caller must not
  /// report such a run as finished.
  std::optional<Error> diverged;
};

/// Bytes one island sends and receives in a ring all-reduce of `payload` bytes among M islands:
/// 2·S·(M−1)/M (the analytic cost DESIGN.md §6 compares against).
double allreduce_bytes_per_island(double payload, int M);

/// Runs train.mode ("ddp", "diloco" or "streaming") to completion and reports every period.
///  - ddp: every step all M islands' gradients are averaged and one AdamW step is taken.
///  - diloco: each island takes H AdamW steps on its own copy; then the outer gradients
///    Θ − θ_i are averaged (plain mean: every island has equal tokens and the current round)
///    and the outer optimizer moves Θ, which every island adopts (arXiv 2311.08105).
///  - streaming: the same with P fragments, fragment p synced at its offset p·H/P, the merged
///    fragment adopted τ steps later as θ_i ← α·θ_i + (1−α)·Θ_p (arXiv 2501.18512).
/// Bytes are counted as all-reduce equivalents of fp32 payloads. A run that diverges stops at
/// the step it is detected (RunSummary::diverged). `initial` (optional) starts
/// from given parameters instead of the seeded initialisation, e.g. a shared pretrained model.
RunSummary run_reference(const RunConfig& cfg, const std::function<void(const RoundReport&)>& on_report = {},
                         std::span<const float> initial = {});

}  // namespace diloco
