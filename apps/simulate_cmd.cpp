// `diloco simulate` (simulate_cmd.hpp): flags with duration and count suffixes, the checks of
// what they imply together, and the tables or JSON of the goodput simulation.
#include "simulate_cmd.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "diloco/config.hpp"
#include "diloco/sim/simulate.hpp"
#include "report.hpp"

namespace simcmd {


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
  s->add_option("--grace", f->grace, "grace rule: adaptive, fixed, steps or none")->capture_default_str();
  s->add_option("--grace-window", f->grace_window, "fixed grace window")->capture_default_str();
  s->add_option("--grace-steps", c.quorum.grace_steps, "steps grace: window in inner steps (--step each)")
      ->capture_default_str();
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

std::string chips_label(double n) {
  char buf[32];
  if (n >= 1e6) std::snprintf(buf, sizeof buf, "%gM", n / 1e6);
  else if (n >= 1e3) std::snprintf(buf, sizeof buf, "%gk", n / 1e3);
  else std::snprintf(buf, sizeof buf, "%g", n);
  return buf;
}

Json config_json(const diloco::SimConfig& c) {
  return Json{{"mtbi_s", c.mtbi_s},
              {"horizon_s", c.horizon_s},
              {"seed", c.seed},
              {"slice_chips", c.slice_chips},
              {"spare_slices", c.spare_slices},
              {"detect_s", c.detect_s},
              {"restart_s", c.restart_s},
              {"swap_s", c.swap_s},
              {"reconfig_s", c.reconfig_s},
              {"heal_s", c.heal_s},
              {"checkpoint_s", c.checkpoint_s},
              {"learner_recovery", c.learner_recovery},
              {"step_s", c.step_s},
              {"inner_steps", c.inner_steps},
              {"sync_latency_s", c.sync_latency_s},
              {"quorum", c.quorum.min_islands},
              {"grace", diloco::name_of(c.quorum.grace)},
              {"grace_s", c.quorum.grace_s},
              {"grace_steps", c.quorum.grace_steps},
              {"gamma", c.quorum.gamma},
              {"tau", c.quorum.tau},
              {"max_staleness", c.merge.max_staleness}};
}

Json result_json(double chips, const diloco::PolicyResult& r, bool series) {
  Json o{{"chips", chips},
         {"policy", diloco::policy_name(r.policy)},
         {"learners", r.learners},
         {"goodput", r.goodput},
         {"uptime", r.uptime},
         {"rounds", r.rounds},
         {"mean_learners_alive", r.mean_learners_alive},
         {"interruptions", r.interruptions},
         {"dropped_contributions", r.dropped_contributions}};
  if (series) {
    auto points = Json::array();
    for (const auto& pt : r.series) points.push_back(Json::array({pt.t, pt.goodput, pt.learners_alive}));
    o["series"] = std::move(points);
  }
  return o;
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
    auto results = Json::array();
    for (const auto& cell : cells) results.push_back(result_json(cell.chips, cell.r, c.series_every_s > 0));
    const Json out{{"config", config_json(c)},
                   {"chips", chips_list},
                   {"trace_interruptions", trace_sizes},
                   {"results", std::move(results)}};
    std::printf("%s\n", out.dump().c_str());
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
