// Reference loops: synchronous data parallel, DiLoCo and Streaming DiLoCo, one thread.
#include "diloco/loops.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <memory>
#include <stdexcept>
#include <string>

#include "diloco/fragments.hpp"

namespace diloco {

double allreduce_bytes_per_island(double payload, int M) {
  return M <= 1 ? 0.0 : 2.0 * payload * (M - 1) / M;
}

namespace {

using Clock = std::chrono::steady_clock;

/// One model copy with its optimizer and data: what an island owns.
struct Replica {
  std::vector<float> params, grads;
  std::unique_ptr<AdamW> opt;
  std::unique_ptr<BatchSource> data;
};

/// Bookkeeping shared by the loops: period losses, reports, totals.
struct Recorder {
  const RunConfig& cfg;
  Model& model;
  const std::vector<Batch>& eval;
  const std::function<void(const RoundReport&)>& on_report;
  RunSummary& out;
  Clock::time_point start = Clock::now();
  double loss_sum = 0.0;
  long loss_count = 0;

  void step_loss(double l) {
    loss_sum += l;
    ++loss_count;
  }
  /// Stops the run: `what` held NaN or infinity at `step` (returns false for the caller's `return`).
  bool diverged(const std::string& who, const std::string& what, long step) {
    out.diverged = Error{errc::non_finite, who + " diverged: " + what + " at step " + std::to_string(step)};
    return false;
  }
  /// A training loss and the gradient norm of the step it took: both finite, or the run stops.
  bool finite_step(int island, double loss, double norm, long step) {
    const std::string who = "island " + std::to_string(island);
    if (!std::isfinite(loss)) return diverged(who, "its training loss is " + std::to_string(loss), step);
    if (!std::isfinite(norm)) return diverged(who, "its gradient norm is " + std::to_string(norm), step);
    return true;
  }
  void maybe_report(long step, std::span<const float> global) {
    if (step % cfg.train.H != 0 && step != cfg.train.steps) return;
    RoundReport r;
    r.round = (step + cfg.train.H - 1) / cfg.train.H;
    r.step = step;
    r.train_loss = loss_count ? loss_sum / static_cast<double>(loss_count) : 0.0;
    const auto measured = evaluate_with_error(model, global, eval);
    r.eval_loss = measured.loss;
    r.eval_std_error = measured.std_error;
    r.tokens = out.tokens;
    r.bytes = out.bytes;
    r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    loss_sum = 0.0;
    loss_count = 0;
    out.reports.push_back(r);
    if (on_report) on_report(r);
  }
};

void run_ddp(const RunConfig& cfg, Model& model, const Corpus& corpus, Recorder& rec, std::vector<float>& theta) {
  const int M = cfg.train.islands, B = cfg.train.batch, T = cfg.model.seq_len;
  const auto N = theta.size();
  AdamW opt(model.layout(), cfg.inner);
  std::vector<std::unique_ptr<BatchSource>> shards;
  for (int i = 0; i < M; ++i) shards.push_back(corpus.shard(i, M));
  std::vector<float> grad(N), sum(N);
  Batch batch;
  const double per_step = M * allreduce_bytes_per_island(4.0 * static_cast<double>(N), M);
  for (long s = 1; s <= cfg.train.steps; ++s) {
    std::fill(sum.begin(), sum.end(), 0.0f);
    double loss = 0.0;
    for (int i = 0; i < M; ++i) {
      shards[static_cast<std::size_t>(i)]->next(B, T, batch);
      const double li = model.loss_and_grad(theta, batch, grad);
      if (!rec.finite_step(i, li, 0.0, s)) return;
      loss += li;
      for (std::size_t j = 0; j < N; ++j) sum[j] += grad[j];
      rec.out.tokens += batch.num_targets();
    }
    const float inv = 1.0f / static_cast<float>(M);
    for (auto& g : sum) g *= inv;
    if (const double norm = opt.step(theta, sum); !std::isfinite(norm)) {
      rec.diverged("the model", "the mean gradient norm is " + std::to_string(norm), s);
      return;
    }
    rec.out.bytes += per_step;
    rec.step_loss(loss / M);
    rec.maybe_report(s, theta);
  }
}

void run_fragments(const RunConfig& cfg, Model& model, const Corpus& corpus, Recorder& rec,
                   std::vector<float>& theta) {
  const int M = cfg.train.islands, B = cfg.train.batch, T = cfg.model.seq_len;
  const int P = cfg.train.mode == TrainMode::diloco ? 1 : cfg.fragments.count;
  const int tau = cfg.train.mode == TrainMode::diloco ? 0 : cfg.fragments.tau;
  const double alpha = cfg.train.mode == TrainMode::diloco ? 0.0 : cfg.fragments.effective_alpha();
  const auto N = theta.size();
  const auto plan = FragmentPlan::make(cfg.fragments.plan, model.layout(), P);
  const SyncSchedule sched{cfg.train.H, P};
  // The synchronous baselines are the papers' algorithms: a plain mean of equal-weight deltas.
  MergeConfig mcfg;
  mcfg.weighting = Weighting::uniform;
  mcfg.rda = false;

  std::vector<Replica> isl(static_cast<std::size_t>(M));
  for (int i = 0; i < M; ++i) {
    auto& r = isl[static_cast<std::size_t>(i)];
    r.params = theta;
    r.grads.assign(N, 0.0f);
    r.opt = std::make_unique<AdamW>(model.layout(), cfg.inner);
    r.data = corpus.shard(i, M);
  }
  std::vector<OuterOptimizer> outer;
  std::vector<std::uint64_t> rounds(static_cast<std::size_t>(P), 0);
  for (int p = 0; p < P; ++p) outer.emplace_back(plan.size(p), cfg.outer);
  // Per island and fragment: tokens and steps since the fragment last synced.
  std::vector<std::uint64_t> tokens_since(static_cast<std::size_t>(M * P), 0), steps_since(tokens_since.size(), 0);

  struct Pending {
    long apply_at;
    int p;
    std::vector<float> global;
  };
  std::deque<Pending> pending;
  std::vector<std::vector<double>> deltas(static_cast<std::size_t>(M));
  std::vector<double> merged;
  std::vector<float> gp, local;
  Batch batch;

  for (long s = 1; s <= cfg.train.steps; ++s) {
    double loss = 0.0;
    for (int i = 0; i < M; ++i) {
      auto& r = isl[static_cast<std::size_t>(i)];
      r.data->next(B, T, batch);
      const double li = model.loss_and_grad(r.params, batch, r.grads);
      if (!rec.finite_step(i, li, 0.0, s)) return;
      loss += li;
      if (!rec.finite_step(i, li, r.opt->step(r.params, r.grads), s)) return;
      rec.out.tokens += batch.num_targets();
      for (int p = 0; p < P; ++p) {
        tokens_since[static_cast<std::size_t>(i * P + p)] += batch.num_targets();
        steps_since[static_cast<std::size_t>(i * P + p)] += 1;
      }
    }
    rec.step_loss(loss / M);
    for (int p = 0; p < P; ++p) {
      if (!sched.due(s, p)) continue;
      const auto n = plan.size(p);
      gp.resize(n);
      plan.gather<float>(p, theta, gp);
      std::vector<Contribution> contribs;
      for (int i = 0; i < M; ++i) {
        auto& d = deltas[static_cast<std::size_t>(i)];
        d.resize(n);
        plan.gather<double>(p, isl[static_cast<std::size_t>(i)].params, d);
        for (std::size_t j = 0; j < n; ++j) d[j] = static_cast<double>(gp[j]) - d[j];  // δ = Θ_p − θ_i,p
        const auto k = static_cast<std::size_t>(i * P + p);
        contribs.push_back({i, rounds[static_cast<std::size_t>(p)], tokens_since[k], steps_since[k], d});
        tokens_since[k] = steps_since[k] = 0;
      }
      merged.resize(n);
      merge(contribs, plan.segments(p), mcfg, rounds[static_cast<std::size_t>(p)], merged);
      outer[static_cast<std::size_t>(p)].step(gp, merged);
      plan.scatter(p, gp, theta);
      ++rounds[static_cast<std::size_t>(p)];
      if (!std::all_of(gp.begin(), gp.end(), [](float x) { return std::isfinite(x); })) {
        rec.diverged("the syncer", "global fragment " + std::to_string(p) + " holds NaN or infinity after round " +
                                       std::to_string(rounds[static_cast<std::size_t>(p)]) + " (outer step)", s);
        return;
      }
      rec.out.bytes += M * allreduce_bytes_per_island(4.0 * static_cast<double>(n), M);
      pending.push_back({s + tau, p, gp});
    }
    while (!pending.empty() && pending.front().apply_at <= s) {
      const auto& pd = pending.front();
      local.resize(pd.global.size());
      for (auto& r : isl) {
        plan.gather<float>(pd.p, r.params, local);
        for (std::size_t j = 0; j < local.size(); ++j)
          local[j] = static_cast<float>(alpha * local[j] + (1.0 - alpha) * pd.global[j]);
        plan.scatter(pd.p, local, r.params);
      }
      pending.pop_front();
    }
    rec.maybe_report(s, theta);
  }
}

}  // namespace

RunSummary run_reference(const RunConfig& cfg, const std::function<void(const RoundReport&)>& on_report,
                         std::span<const float> initial) {
  if (auto errs = validate(cfg); !errs.empty()) throw ConfigError(std::move(errs));
  const Corpus corpus = Corpus::make(cfg.data, cfg.model.vocab);
  auto model = make_model(cfg.model);
  std::vector<float> theta(model->layout().size());
  if (initial.empty()) model->init(theta, cfg.train.seed);
  else if (initial.size() != theta.size())
    throw std::invalid_argument("run_reference: initial parameters have " + std::to_string(initial.size()) +
                                " values, the model has " + std::to_string(theta.size()));
  else std::copy(initial.begin(), initial.end(), theta.begin());
  const auto eval = corpus.eval_windows(cfg.model.seq_len, cfg.train.eval_windows);
  RunSummary out;
  out.entropy_floor = corpus.entropy_floor();
  out.unigram_entropy = corpus.unigram_entropy();
  Recorder rec{cfg, *model, eval, on_report, out};
  if (cfg.train.mode == TrainMode::ddp) run_ddp(cfg, *model, corpus, rec, theta);
  else run_fragments(cfg, *model, corpus, rec, theta);
  if (out.diverged) {
    const auto measured = evaluate_with_error(*model, theta, eval);
    out.final_eval_loss = measured.loss;
    out.final_eval_std_error = measured.std_error;
  } else if (!out.reports.empty()) {
    out.final_eval_loss = out.reports.back().eval_loss;
    out.final_eval_std_error = out.reports.back().eval_std_error;
  }
  out.seconds = std::chrono::duration<double>(Clock::now() - rec.start).count();
  out.params = std::move(theta);
  return out;
}

}  // namespace diloco
