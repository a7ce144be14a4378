// `diloco`: run a training job from a TOML configuration, or print the default configuration.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include "diloco/config.hpp"
#include "diloco/checkpoint.hpp"
#include "diloco/inspect.hpp"
#include "diloco/loops.hpp"
#include "diloco/memory.hpp"
#include "diloco/sim/simulate.hpp"

#include "decoupled_run.hpp"
#include "site_run.hpp"

namespace {

std::string json_number(double x) {
  if (!std::isfinite(x)) return "null";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", x);
  return buf;
}

/// The machine's physical memory: what `run` and `check` let a configuration plan for.
std::uint64_t physical_memory() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return diloco::kDefaultMemoryLimit;
  return static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page);
}

int run(const std::string& path, std::vector<std::string> overrides, const std::string& metrics,
        std::optional<std::uint64_t> seed, std::uint64_t memory_limit, bool on_actors = false,
        const std::string& init = {}, const std::string& save = {}) {
  if (seed) {
    overrides.push_back("train.seed=" + std::to_string(*seed));
    overrides.push_back("data.seed=" + std::to_string(*seed));
  }
  diloco::RunConfig cfg = path.empty() ? diloco::parse_config("", overrides, "defaults", memory_limit)
                                       : diloco::load_config(path, overrides, memory_limit);
  const auto initial = init.empty() ? std::vector<float>{} : load_params(cfg, init);
  if (cfg.train.mode == diloco::TrainMode::decoupled || on_actors) return run_decoupled(cfg, metrics, path, initial, save);
  if (cfg.chaos.enabled || !cfg.faults.empty() || cfg.wan.enabled || !cfg.sites.empty())
    spdlog::warn("the reference loop ignores [chaos], [[faults]], [wan] and [[sites]]: add --actors to run {} on the "
                 "actor runtime with them", diloco::name_of(cfg.train.mode));
  std::ofstream jsonl;
  if (!metrics.empty()) {
    jsonl.open(metrics);
    if (!jsonl) throw std::runtime_error("--metrics: cannot open '" + metrics + "' for writing");
  }
  const auto corpus_line = diloco::Corpus::make(cfg.data).describe();
  spdlog::info("config: {}", path.empty() ? "built-in defaults" : path);
  spdlog::info("data: {}", corpus_line);
  spdlog::info("mode {}: {} islands x {} steps, batch {}x{}, H={}, model {} L={} C={}", diloco::name_of(cfg.train.mode),
               cfg.train.islands, cfg.train.steps, cfg.train.batch, cfg.model.seq_len, cfg.train.H,
               cfg.model.kind, cfg.model.n_layer, cfg.model.n_embd);
  std::printf("%6s %7s %11s %10s %12s %12s %9s\n", "round", "step", "train_loss", "eval_loss", "tokens",
              "MB_on_wire", "tok/s");
  std::fflush(stdout);
  auto summary = diloco::run_reference(cfg, [&](const diloco::RoundReport& r) {
    std::printf("%6ld %7ld %11.4f %10.4f %12llu %12.2f %9.0f\n", r.round, r.step, r.train_loss, r.eval_loss,
                static_cast<unsigned long long>(r.tokens), r.bytes / 1e6, r.tokens / std::max(r.seconds, 1e-9));
    std::fflush(stdout);
    if (jsonl) {
      jsonl << "{\"round\":" << r.round << ",\"step\":" << r.step << ",\"train_loss\":" << json_number(r.train_loss)
            << ",\"eval_loss\":" << json_number(r.eval_loss) << ",\"tokens\":" << r.tokens
            << ",\"bytes\":" << json_number(r.bytes) << ",\"seconds\":" << json_number(r.seconds) << "}\n";
      jsonl.flush();
    }
  }, initial);
  if (summary.diverged) {
    // NaN parameters are no result: nothing is saved and the run fails, naming where it diverged.
    spdlog::error("run stopped: {} (eval loss {:.4f} at that point)", summary.diverged->reason, summary.final_eval_loss);
    return 1;
  }
  if (!save.empty()) save_params(cfg, save, summary.params);
  if (jsonl)
    jsonl << "{\"summary\":true,\"mode\":\"" << diloco::name_of(cfg.train.mode) << "\",\"final_eval_loss\":"
          << json_number(summary.final_eval_loss) << ",\"final_eval_std_error\":" << json_number(summary.final_eval_std_error)
          << ",\"seconds\":" << json_number(summary.seconds)
          << ",\"tokens\":" << summary.tokens << ",\"bytes\":" << json_number(summary.bytes) << "}\n";
  std::printf("done: %s, final eval loss %.4f ± %.4f nats/token", std::string(diloco::name_of(cfg.train.mode)).c_str(),
              summary.final_eval_loss, summary.final_eval_std_error);
  if (summary.entropy_floor)
    std::printf(" (entropy floor %.4f, unigram entropy %.4f; %.1f%% of the way from unigram to floor)",
                *summary.entropy_floor, summary.unigram_entropy,
                100.0 * (summary.unigram_entropy - summary.final_eval_loss) /
                    (summary.unigram_entropy - *summary.entropy_floor));
  std::printf(", %.1f s, %.2f MB would cross the network\n", summary.seconds, summary.bytes / 1e6);
  return 0;
}

}  // namespace

// ---- `diloco simulate`: goodput of DP / elastic DP / decoupled learners under chip failures ----
// (issue 7; the model is libdiloco/include/diloco/simulate.hpp, its parameters docs/simulator.md)
namespace simcmd {

/// Flags of `diloco simulate` as typed by the user (durations and counts take suffixes).
struct Flags {
  diloco::SimConfig cfg;
  std::string chips = "1.2M", mtbi = "1y", horizon = "1y", detect, restart, swap, reconfig, heal, checkpoint, step,
              sync_latency, grace_window, series, grace;
  std::string policy = "all";
  std::vector<std::string> sweep_chips;
  std::vector<int> sweep_learners;
  bool sweep = false, json = false;
};

std::unique_ptr<Flags> add_command(CLI::App& app) {
  auto f = std::make_unique<Flags>();
  auto& c = f->cfg;
  const auto d = [](double s) { return diloco::format_duration(s); };
  f->detect = d(c.detect_s), f->restart = d(c.restart_s), f->swap = d(c.swap_s), f->reconfig = d(c.reconfig_s);
  f->heal = d(c.heal_s), f->checkpoint = d(c.checkpoint_s), f->step = d(c.step_s), f->sync_latency = d(c.sync_latency_s);
  f->grace_window = d(c.quorum.grace_s), f->series = "0s", f->grace = std::string(diloco::name_of(c.quorum.grace));
  auto* s = app.add_subcommand("simulate",
      "goodput of data parallel, elastic DP and decoupled learners under chip interruptions "
      "(discrete-event simulation, one shared failure trace; see docs/simulator.md)");
  s->add_option("--chips", f->chips, "provisioned chips N (1.2e6, 150k, 2.4M)")->capture_default_str();
  s->add_option("--learners", c.learners, "decoupled learners M (N/M chips each)")->capture_default_str();
  s->add_option("--mtbi", f->mtbi, "per-chip mean time between interruptions (s, m, h, d, y)")->capture_default_str();
  s->add_option("--horizon", f->horizon, "simulated wall time")->capture_default_str();
  s->add_option("--seed", c.seed, "failure trace seed (shared by every policy)")->capture_default_str();
  s->add_option("--slice", c.slice_chips, "chips per slice: the unit that fails and is replaced")->capture_default_str();
  s->add_option("--spares", c.spare_slices, "hot spare slices (provisioned, idle until used)")->capture_default_str();
  s->add_option("--detect", f->detect, "interruption -> noticed")->capture_default_str();
  s->add_option("--restart", f->restart, "noticed -> failed slice usable again (calibrated)")->capture_default_str();
  s->add_option("--swap", f->swap, "noticed -> a free hot spare replaces the slice")->capture_default_str();
  s->add_option("--reconfig", f->reconfig, "elastic re-mesh pause per membership change (calibrated)")
      ->capture_default_str();
  s->add_option("--heal", f->heal, "restarted learner fetches the global fragments (restart recovery)")
      ->capture_default_str();
  s->add_option("--checkpoint", f->checkpoint, "data parallel checkpoint interval (progress lost since)")
      ->capture_default_str();
  s->add_option("--learner-recovery", c.learner_recovery, "decoupled learner on a failure: elastic or restart")
      ->capture_default_str();
  s->add_option("--step", f->step, "inner step time")->capture_default_str();
  s->add_option("--inner-steps", c.inner_steps, "H: steps between a learner's outer-gradient sends")
      ->capture_default_str();
  s->add_option("--sync-latency", f->sync_latency, "send -> arrival at the syncer (t_sync)")->capture_default_str();
  s->add_option("--quorum", c.quorum.min_islands, "K: contributions a round needs")->capture_default_str();
  s->add_option("--grace", f->grace, "grace rule: adaptive, fixed or none")->capture_default_str();
  s->add_option("--grace-window", f->grace_window, "fixed grace window")->capture_default_str();
  s->add_option("--gamma", c.quorum.gamma, "adaptive grace: gamma")->capture_default_str();
  s->add_option("--tau", c.quorum.tau, "adaptive grace: overlap steps tau")->capture_default_str();
  s->add_option("--max-staleness", c.merge.max_staleness, "rounds after which a contribution is dropped")
      ->capture_default_str();
  s->add_option("--policy", f->policy, "all, data_parallel, elastic or decoupled")->capture_default_str();
  s->add_option("--series", f->series, "record a time series point every this long (0 = off; not in sweeps)")
      ->capture_default_str();
  s->add_flag("--sweep", f->sweep, "chips x learners table (defaults: the paper's 150k..2.4M x 2,4,8,16)");
  s->add_option("--sweep-chips", f->sweep_chips, "chip counts of the sweep (implies --sweep)")->delimiter(',');
  s->add_option("--sweep-learners", f->sweep_learners, "learner counts of the sweep (implies --sweep)")
      ->delimiter(',');
  s->add_flag("--json", f->json, "print one JSON object instead of tables");
  return f;
}

std::string jnum(double x, int prec = 6) {
  if (!std::isfinite(x)) return "null";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g", prec, x);
  return buf;
}

std::string chips_label(double n) {
  char buf[32];
  if (n >= 1e6) std::snprintf(buf, sizeof buf, "%gM", n / 1e6);
  else if (n >= 1e3) std::snprintf(buf, sizeof buf, "%gk", n / 1e3);
  else std::snprintf(buf, sizeof buf, "%g", n);
  return buf;
}

std::string config_json(const diloco::SimConfig& c) {
  std::ostringstream o;
  o << "{\"mtbi_s\":" << jnum(c.mtbi_s) << ",\"horizon_s\":" << jnum(c.horizon_s) << ",\"seed\":" << c.seed
    << ",\"slice_chips\":" << jnum(c.slice_chips) << ",\"spare_slices\":" << c.spare_slices
    << ",\"detect_s\":" << jnum(c.detect_s) << ",\"restart_s\":" << jnum(c.restart_s) << ",\"swap_s\":"
    << jnum(c.swap_s) << ",\"reconfig_s\":" << jnum(c.reconfig_s) << ",\"heal_s\":" << jnum(c.heal_s)
    << ",\"checkpoint_s\":" << jnum(c.checkpoint_s) << ",\"learner_recovery\":\"" << c.learner_recovery
    << "\",\"step_s\":" << jnum(c.step_s) << ",\"inner_steps\":" << c.inner_steps << ",\"sync_latency_s\":"
    << jnum(c.sync_latency_s) << ",\"quorum\":" << c.quorum.min_islands << ",\"grace\":\"" << diloco::name_of(c.quorum.grace)
    << "\",\"grace_s\":" << jnum(c.quorum.grace_s) << ",\"gamma\":" << jnum(c.quorum.gamma) << ",\"tau\":"
    << c.quorum.tau << ",\"max_staleness\":" << c.merge.max_staleness << "}";
  return o.str();
}

std::string result_json(double chips, const diloco::PolicyResult& r, bool series) {
  std::ostringstream o;
  o << "{\"chips\":" << jnum(chips, 10) << ",\"policy\":\"" << diloco::policy_name(r.policy)
    << "\",\"learners\":" << r.learners << ",\"goodput\":" << jnum(r.goodput) << ",\"uptime\":" << jnum(r.uptime)
    << ",\"rounds\":" << jnum(r.rounds, 10) << ",\"mean_learners_alive\":" << jnum(r.mean_learners_alive)
    << ",\"interruptions\":" << r.interruptions << ",\"dropped_contributions\":" << r.dropped_contributions;
  if (series) {
    o << ",\"series\":[";
    for (std::size_t i = 0; i < r.series.size(); ++i)
      o << (i ? "," : "") << "[" << jnum(r.series[i].t) << "," << jnum(r.series[i].goodput) << ","
        << jnum(r.series[i].learners_alive) << "]";
    o << "]";
  }
  return o.str() + "}";
}

std::vector<diloco::Policy> policies(const std::string& p) {
  using diloco::Policy;
  if (p == "all") return {Policy::data_parallel, Policy::elastic, Policy::decoupled};
  if (p == "data_parallel" || p == "dp") return {Policy::data_parallel};
  if (p == "elastic") return {Policy::elastic};
  if (p == "decoupled") return {Policy::decoupled};
  throw diloco::ConfigError({"--policy: must be all, data_parallel, elastic or decoupled (got \"" + p + "\")"});
}

int run(Flags& f) {
  using namespace diloco;
  auto& c = f.cfg;
  // Every flag is parsed before anything runs; a bad one is named with the reason.
  std::vector<std::string> errors;
  auto parse = [&](auto parser, const std::string& text, const char* flag, double& out) {
    try {
      out = parser(text);
    } catch (const std::invalid_argument& e) {
      errors.push_back(std::string(flag) + ": " + e.what());
    }
  };
  const auto count = [](const std::string& s) { return parse_count(s); };
  const auto duration = [](const std::string& s) { return parse_duration(s); };
  parse(count, f.chips, "--chips", c.chips);
  parse(duration, f.mtbi, "--mtbi", c.mtbi_s);
  parse(duration, f.horizon, "--horizon", c.horizon_s);
  parse(duration, f.detect, "--detect", c.detect_s);
  parse(duration, f.restart, "--restart", c.restart_s);
  parse(duration, f.swap, "--swap", c.swap_s);
  parse(duration, f.reconfig, "--reconfig", c.reconfig_s);
  parse(duration, f.heal, "--heal", c.heal_s);
  parse(duration, f.checkpoint, "--checkpoint", c.checkpoint_s);
  parse(duration, f.step, "--step", c.step_s);
  parse(duration, f.sync_latency, "--sync-latency", c.sync_latency_s);
  parse(duration, f.grace_window, "--grace-window", c.quorum.grace_s);
  if (auto g = diloco::choice_of<diloco::GraceRule>(f.grace)) c.quorum.grace = *g;
  else errors.push_back("--grace: must be " + diloco::choice_list<diloco::GraceRule>() + " (got \"" + f.grace + "\")");
  parse(duration, f.series, "--series", c.series_every_s);
  const auto which = policies(f.policy);
  const bool sweep = f.sweep || !f.sweep_chips.empty() || !f.sweep_learners.empty();

  std::vector<double> chips_list{c.chips};
  std::vector<int> learner_list{c.learners};
  if (sweep) {
    chips_list.clear();
    for (const auto& s : f.sweep_chips) parse(count, s, "--sweep-chips", chips_list.emplace_back());
    if (chips_list.empty()) chips_list = {150e3, 300e3, 600e3, 1.2e6, 2.4e6};
    learner_list = f.sweep_learners.empty() ? std::vector<int>{2, 4, 8, 16} : f.sweep_learners;
    c.series_every_s = 0;
  }
  if (!errors.empty()) throw ConfigError(errors);
  // Validate every combination up front, naming the flag.
  for (double n : chips_list)
    for (int m : learner_list) {
      SimConfig x = c;
      x.chips = n;
      x.learners = m;
      for (auto& e : validate(x)) errors.push_back(e);
    }
  if (!errors.empty()) {
    std::sort(errors.begin(), errors.end());
    errors.erase(std::unique(errors.begin(), errors.end()), errors.end());
    throw ConfigError(errors);
  }

  struct Cell {
    double chips;
    PolicyResult r;
  };
  std::vector<Cell> cells;
  std::vector<std::size_t> trace_sizes;
  for (double n : chips_list) {
    SimConfig x = c;
    x.chips = n;
    const auto trace = poisson_trace(x);  // shared by every policy and learner count of this column
    trace_sizes.push_back(trace.size());
    for (auto p : which) {
      if (p != Policy::decoupled) {
        cells.push_back({n, simulate(p, x, trace)});
        continue;
      }
      for (int m : learner_list) {
        x.learners = m;
        cells.push_back({n, simulate(p, x, trace)});
      }
    }
  }

  if (f.json) {
    std::ostringstream o;
    o << "{\"config\":" << config_json(c) << ",\"chips\":[";
    for (std::size_t j = 0; j < chips_list.size(); ++j) o << (j ? "," : "") << jnum(chips_list[j], 10);
    o << "],\"trace_interruptions\":[";
    for (std::size_t j = 0; j < trace_sizes.size(); ++j) o << (j ? "," : "") << trace_sizes[j];
    o << "],\"results\":[";
    for (std::size_t i = 0; i < cells.size(); ++i)
      o << (i ? "," : "") << result_json(cells[i].chips, cells[i].r, c.series_every_s > 0);
    std::printf("%s]}\n", o.str().c_str());
    return 0;
  }

  std::printf("per-chip MTBI %s over %s, seed %llu; detect %s, restart %s, swap %s (%d spare slices), reconfig %s, "
              "heal %s, checkpoint %s, slice %g chips, learner recovery %s, H x step %s, K %d, grace %s\n",
              format_duration(c.mtbi_s).c_str(), format_duration(c.horizon_s).c_str(),
              static_cast<unsigned long long>(c.seed), format_duration(c.detect_s).c_str(),
              format_duration(c.restart_s).c_str(), format_duration(c.swap_s).c_str(), c.spare_slices,
              format_duration(c.reconfig_s).c_str(), format_duration(c.heal_s).c_str(),
              format_duration(c.checkpoint_s).c_str(), c.slice_chips, c.learner_recovery.c_str(),
              format_duration(c.inner_steps * c.step_s).c_str(), c.quorum.min_islands, std::string(diloco::name_of(c.quorum.grace)).c_str());
  if (!sweep) {
    std::printf("%s chips, %d learners: %zu interruptions in the trace\n\n", chips_label(c.chips).c_str(), c.learners,
                trace_sizes[0]);
    std::printf("%-14s %8s %8s %9s %12s %11s %13s %8s\n", "policy", "learners", "goodput", "uptime", "rounds",
                "mean_alive", "interruptions", "dropped");
    for (const auto& cell : cells) {
      const auto& r = cell.r;
      std::printf("%-14s %8d %7.2f%% %8.3f%% %12.0f %11.3f %13llu %8llu\n", policy_name(r.policy), r.learners,
                  100 * r.goodput, 100 * r.uptime, r.rounds, r.mean_learners_alive,
                  static_cast<unsigned long long>(r.interruptions),
                  static_cast<unsigned long long>(r.dropped_contributions));
    }
    if (c.series_every_s > 0) {
      std::printf("\ntime series (cumulative goodput %%, learners alive):\n%10s", "t");
      for (const auto& cell : cells) std::printf("  %14s %5s", policy_name(cell.r.policy), "alive");
      std::printf("\n");
      const std::size_t n = cells.front().r.series.size();
      for (std::size_t i = 0; i < n; ++i) {
        std::printf("%10s", format_duration(cells.front().r.series[i].t).c_str());
        for (const auto& cell : cells)
          if (i < cell.r.series.size())
            std::printf("  %13.2f%% %5.2f", 100 * cell.r.series[i].goodput, cell.r.series[i].learners_alive);
        std::printf("\n");
      }
    }
    return 0;
  }
  // Sweep: one row per policy (and learner count), one column per chip count; goodput %.
  std::printf("\ngoodput %%%-9s", "");
  for (double n : chips_list) std::printf(" %9s", chips_label(n).c_str());
  std::printf("\n");
  std::vector<std::pair<Policy, int>> rows;
  for (auto p : which)
    if (p != Policy::decoupled) rows.push_back({p, 1});
    else
      for (int m : learner_list) rows.push_back({p, m});
  for (const auto& [p, m] : rows) {
    std::string name = p == Policy::decoupled ? "decoupled M=" + std::to_string(m) : policy_name(p);
    std::printf("%-18s", name.c_str());
    for (double n : chips_list)
      for (const auto& cell : cells)
        if (cell.chips == n && cell.r.policy == p && cell.r.learners == m) std::printf(" %8.1f%%", 100 * cell.r.goodput);
    std::printf("\n");
  }
  return 0;
}

}  // namespace simcmd

int main(int argc, char** argv) {
  diloco::keep_large_buffers_in_heap();
  CLI::App app{"diloco: fault-tolerant, low-communication distributed training"};
  app.require_subcommand(1);

  auto* run_cmd = app.add_subcommand("run", "train with the configuration's mode and report every round");
  std::string path, metrics;
  std::vector<std::string> overrides;
  std::optional<std::uint64_t> seed;
  run_cmd->add_option("config", path, "TOML configuration (built-in defaults when omitted)")->check(CLI::ExistingFile);
  run_cmd->add_option("--set", overrides, "override a key, e.g. --set train.H=10 (repeatable)");
  run_cmd->add_option("--metrics", metrics, "write one JSON object per round to this file");
  run_cmd->add_option("--seed", seed, "seed for both the model initialisation and the data");
  std::string init_path, save_path;
  run_cmd->add_option("--init", init_path, "start from the parameters in this checkpoint (one written by --save)")
      ->check(CLI::ExistingFile);
  run_cmd->add_option("--save", save_path, "write the final global parameters to this checkpoint (safetensors)");
  bool on_actors = false;
  run_cmd->add_flag("--actors", on_actors,
                    "run ddp / diloco / streaming on the actor runtime (synchronous, with faults, chaos and WAN links) "
                    "instead of the reference loop");

  app.add_subcommand("config", "print the default configuration with every key documented");

  auto* check_cmd = app.add_subcommand("check", "validate configuration files and report every problem");
  std::vector<std::string> check_paths;
  check_cmd->add_option("configs", check_paths, "TOML configurations")->required()->check(CLI::ExistingFile);

  auto sim_flags = simcmd::add_command(app);

  auto* inspect_cmd = app.add_subcommand("inspect", "print what a wire frame (fragment, progress, join, heartbeat) or a checkpoint holds");
  std::vector<std::string> inspect_paths;
  inspect_cmd->add_option("files", inspect_paths, "frame or .safetensors checkpoint files")->required()->check(CLI::ExistingFile);

  auto* demo_cmd = app.add_subcommand("demo", "built-in demonstrations of the actor runtime");
  std::string demo_name = "supervision";
  demo_cmd->add_option("name", demo_name, "which demo: supervision (kill a chip, an island, the syncer)")
      ->check(CLI::IsMember({"supervision"}));

  // Across processes (README "Across sites"): the syncer alone, or one site's islands.
  NetFlags net;
  std::vector<std::string> net_overrides;
  auto* syncer_cmd = app.add_subcommand("syncer", "run only the syncer and publish it for the sites (mutual TLS)");
  auto* site_cmd = app.add_subcommand("site", "run one site's islands and chips, connected to the syncer");
  for (auto* c : {syncer_cmd, site_cmd}) {
    c->add_option("config", net.config, "TOML topology ([[sites]], [net]); the same file at every process")
        ->required()->check(CLI::ExistingFile);
    c->add_option("--certs", net.certs, "directory from scripts/make-certs.sh (default: net.certs)");
    c->add_flag("--insecure", net.insecure, "no TLS and no identity check (prints a warning; trusted networks only)");
    c->add_option("--set", net_overrides, "override a key, e.g. --set train.steps=100 (repeatable)");
  }
  syncer_cmd->add_option("--listen", net.endpoint, "HOST:PORT to listen on (default: net.listen, loopback; port 0: any)");
  syncer_cmd->add_option("--state", net.state, "directory of the syncer's checkpoint when syncer.checkpoint is \"\"")
      ->capture_default_str();
  syncer_cmd->add_option("--metrics", net.metrics, "append one JSON object per commit and round to this file");
  syncer_cmd->add_flag("--fresh", net.fresh,
                       "start from round 0 when the state file is unusable, moving it aside to FILE.corrupt-N "
                       "(without it such a file is refused)");
  site_cmd->add_option("--site", net.site, "this process's site name (a [[sites]] name)")->required();
  site_cmd->add_option("--connect", net.endpoint, "HOST:PORT of the syncer (default: net.listen)");
  site_cmd->add_option("--max-attempts", net.max_attempts, "give up after this many failed attempts in a row (0: never)")
      ->capture_default_str();

  CLI11_PARSE(app, argc, argv);
  const std::uint64_t memory = physical_memory();  // the bound of every size a configuration implies
  try {
    if (app.got_subcommand("simulate")) return simcmd::run(*sim_flags);
    if (app.got_subcommand("syncer")) return run_syncer_process(diloco::load_config(net.config, net_overrides), net);
    if (app.got_subcommand("site")) return run_site_process(diloco::load_config(net.config, net_overrides), net);
    if (app.got_subcommand("demo")) return run_demo_supervision();
    if (app.got_subcommand("inspect")) {
      int bad = 0;
      for (const auto& p : inspect_paths) {
        auto bytes = diloco::read_file(p);
        auto text = bytes ? diloco::describe_file(*bytes) : diloco::Expected<std::string>(bytes.error());
        if (text) {
          std::printf("%s: %s", p.c_str(), text->c_str());
        } else {
          std::printf("%s: refused: %s\n", p.c_str(), text.error().message().c_str());
          ++bad;
        }
      }
      return bad ? 2 : 0;
    }
    if (app.got_subcommand("config")) {
      std::cout << diloco::default_config_toml();
      return 0;
    }
    if (app.got_subcommand("check")) {
      int bad = 0;
      for (const auto& p : check_paths) {
        try {
          const auto cfg = diloco::load_config(p, {}, memory);
          std::printf("%s: ok (mode %s, %d islands, model %s)\n", p.c_str(), std::string(diloco::name_of(cfg.train.mode)).c_str(),
                      cfg.train.islands, cfg.model.kind.c_str());
        } catch (const diloco::ConfigError& e) {
          std::printf("%s: %s\n", p.c_str(), e.what());
          ++bad;
        }
      }
      return bad ? 2 : 0;
    }
    return run(path, overrides, metrics, seed, memory, on_actors, init_path, save_path);
  } catch (const diloco::ConfigError& e) {
    spdlog::error("{}", e.what());
    return 2;
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    return 1;
  }
}
