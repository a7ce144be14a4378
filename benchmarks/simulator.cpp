// The published goodput table of Decoupled DiLoCo (arXiv 2604.21428) next to our simulator's,
// cell by cell, plus the wall time of 2.4M chips × one simulated year on one core.
//
//   simulator [--seed N] [--horizon 1y] [--calibrate]
//
// --calibrate re-derives the two calibrated defaults (restart on data parallel, reconfig on
// elastic DP, both at 1.2M chips) by bisection and uses them. Last output line: one JSON object.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "diloco/sim/simulate.hpp"
#include "timing.hpp"

namespace {

using diloco::bench::clock_type;
using diloco::bench::seconds_since;

const std::vector<double> kChips{150e3, 300e3, 600e3, 1.2e6, 2.4e6};
const std::vector<int> kLearners{2, 4, 8, 16};
constexpr double kCalibrationChips = 1.2e6;

// Published goodput (%) at 150k, 300k, 600k, 1.2M, 2.4M chips, per-chip MTBI one year
// (Decoupled DiLoCo, arXiv 2604.21428). Only M = 8 is published for the decoupled learners.
const std::vector<double> kPubDP{72, 57, 38, 27, 18};
const std::vector<double> kPubElastic{88, 80, 69, 58, 40};
const std::vector<double> kPubDecoupled8{98, 96, 94, 88, 80};

struct Options {
  std::uint64_t seed = 1;
  double horizon = diloco::kYear;
  bool calibrate = false;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
      return argv[++i];
    };
    if (a == "--seed") o.seed = std::stoull(value());
    else if (a == "--horizon") o.horizon = diloco::parse_duration(value());
    else if (a == "--calibrate") o.calibrate = true;
    else if (a == "--help" || a == "-h") {
      std::puts("simulator [--seed N] [--horizon 1y] [--calibrate]");
      std::exit(0);
    } else {
      throw std::invalid_argument("unknown flag " + a);
    }
  }
  return o;
}

/// Finds x in [lo, hi] where f(x) (decreasing in x) equals target, to 0.01 s.
double bisect(const std::function<double(double)>& f, double target, double lo, double hi) {
  for (int k = 0; k < 40 && hi - lo > 0.01; ++k) {
    const double mid = 0.5 * (lo + hi);
    (f(mid) > target ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

std::string num(double x, int prec = 4) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*f", prec, x);
  return buf;
}

}  // namespace

int main(int argc, char** argv) try {
  using namespace diloco;
  const Options opt = parse(argc, argv);
  const auto t_all = clock_type::now();
  SimConfig base;
  base.seed = opt.seed;
  base.horizon_s = opt.horizon;

  // ---- calibration (optional): two shared parameters on the 1.2M-chip column only ----
  if (opt.calibrate) {
    SimConfig c = base;
    c.chips = kCalibrationChips;
    const auto trace = poisson_trace(c);
    c.restart_s = bisect([&](double r) {
      SimConfig x = c;
      x.restart_s = r;
      return 100 * simulate(Policy::data_parallel, x, trace).goodput;
    }, kPubDP[3], 0.0, 600.0);
    c.reconfig_s = bisect([&](double p) {
      SimConfig x = c;
      x.reconfig_s = p;
      return 100 * simulate(Policy::elastic, x, trace).goodput;
    }, kPubElastic[3], 0.0, 120.0);
    std::printf("calibrated on %.1fM chips: restart %.2f s (data parallel -> %.0f%%), reconfig %.2f s "
                "(elastic -> %.0f%%)\n", kCalibrationChips / 1e6, c.restart_s, kPubDP[3], c.reconfig_s,
                kPubElastic[3]);
    base.restart_s = c.restart_s;
    base.reconfig_s = c.reconfig_s;
  }

  std::printf("goodput, %% of provisioned chip-time; per-chip MTBI %s, horizon %s, seed %llu\n",
              format_duration(base.mtbi_s).c_str(), format_duration(base.horizon_s).c_str(),
              static_cast<unsigned long long>(base.seed));
  std::printf("detect %s, restart %s (calibrated), reconfig %s (calibrated), checkpoint %s, slice %.0f chips, "
              "learner recovery %s, H·step %s, K %d\n\n",
              format_duration(base.detect_s).c_str(), format_duration(base.restart_s).c_str(),
              format_duration(base.reconfig_s).c_str(), format_duration(base.checkpoint_s).c_str(), base.slice_chips,
              base.learner_recovery.c_str(), format_duration(base.inner_steps * base.step_s).c_str(),
              base.quorum.min_islands);

  // ours[row][col]; rows: dp, elastic, decoupled M=2,4,8,16.
  std::vector<std::string> rows{"data parallel", "elastic DP"};
  for (int m : kLearners) rows.push_back("decoupled M=" + std::to_string(m));
  std::vector<std::vector<double>> ours(rows.size(), std::vector<double>(kChips.size()));
  std::vector<std::vector<std::optional<double>>> pub(rows.size(), std::vector<std::optional<double>>(kChips.size()));
  std::vector<double> uptime8(kChips.size()), alive8(kChips.size()), rounds8(kChips.size());
  double wall_24m = 0.0, wall_24m_trace = 0.0;
  std::map<std::string, double> wall_24m_policy;

  for (std::size_t j = 0; j < kChips.size(); ++j) {
    SimConfig c = base;
    c.chips = kChips[j];
    const bool big = kChips[j] == 2.4e6;
    auto t0 = clock_type::now();
    const auto trace = poisson_trace(c);  // one trace, shared by every policy in this column
    if (big) wall_24m_trace = seconds_since(t0);
    auto timed = [&](Policy p, const std::string& name) {
      const auto t1 = clock_type::now();
      auto r = simulate(p, c, trace);
      if (big) wall_24m_policy[name] = seconds_since(t1);
      return r;
    };
    ours[0][j] = 100 * timed(Policy::data_parallel, "data_parallel").goodput;
    ours[1][j] = 100 * timed(Policy::elastic, "elastic").goodput;
    for (std::size_t k = 0; k < kLearners.size(); ++k) {
      c.learners = kLearners[k];
      const auto r = timed(Policy::decoupled, "decoupled_M" + std::to_string(kLearners[k]));
      ours[2 + k][j] = 100 * r.goodput;
      if (kLearners[k] == 8) {
        uptime8[j] = 100 * r.uptime;
        alive8[j] = r.mean_learners_alive;
        rounds8[j] = r.rounds;
      }
    }
    pub[0][j] = kPubDP[j];
    pub[1][j] = kPubElastic[j];
    pub[4][j] = kPubDecoupled8[j];
  }
  wall_24m = wall_24m_trace + wall_24m_policy["data_parallel"] + wall_24m_policy["elastic"] +
             wall_24m_policy["decoupled_M8"];

  // ---- the table ----
  std::printf("%-16s", "chips");
  for (double n : kChips) std::printf(" | %-20s", (n >= 1e6 ? num(n / 1e6, 1) + "M" : num(n / 1e3, 0) + "k").c_str());
  std::printf("\n%-16s", "");
  for (std::size_t j = 0; j < kChips.size(); ++j) std::printf(" | %-20s", "ours (paper, diff)");
  std::printf("\n");
  int cells = 0, within = 0;
  double worst = 0.0;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    std::printf("%-16s", rows[i].c_str());
    for (std::size_t j = 0; j < kChips.size(); ++j) {
      char cell[64];
      if (pub[i][j]) {
        const double d = ours[i][j] - *pub[i][j];
        std::snprintf(cell, sizeof cell, "%5.1f (%2.0f, %+5.1f)%s", ours[i][j], *pub[i][j], d,
                      std::abs(d) > 5.0 ? "!" : "");
        ++cells;
        within += std::abs(d) <= 5.0;
        worst = std::max(worst, std::abs(d));
      } else {
        std::snprintf(cell, sizeof cell, "%5.1f", ours[i][j]);
      }
      std::printf(" | %-20s", cell);
    }
    std::printf("\n");
  }
  std::printf("\ndecoupled M=8: uptime (>= K learners computing)");
  for (double u : uptime8) std::printf(" %.3f%%", u);
  std::printf("; mean learners alive");
  for (double a : alive8) std::printf(" %.3f", a);
  std::printf("\n%d of %d published cells within 5 points (largest |diff| %.1f): %s\n", within, cells, worst,
              within == cells ? "PASS" : "MISS (cells marked !)");
  std::printf("2.4M chips x %s on one core: %.2f s (trace %.2f + data parallel %.2f + elastic %.2f + "
              "decoupled M=8 %.2f; target < 60 s: %s); whole benchmark %.1f s\n",
              format_duration(base.horizon_s).c_str(), wall_24m, wall_24m_trace, wall_24m_policy["data_parallel"],
              wall_24m_policy["elastic"], wall_24m_policy["decoupled_M8"], wall_24m < 60 ? "PASS" : "MISS",
              seconds_since(t_all));

  // ---- JSON ----
  std::ostringstream js;
  js << "{\"benchmark\":\"simulator\",\"seed\":" << base.seed << ",\"horizon_s\":" << num(base.horizon_s, 0)
     << ",\"mtbi_s\":" << num(base.mtbi_s, 0) << ",\"calibrated\":{\"restart_s\":" << num(base.restart_s, 2)
     << ",\"reconfig_s\":" << num(base.reconfig_s, 2) << ",\"on_chips\":" << num(kCalibrationChips, 0)
     << ",\"recomputed\":" << (opt.calibrate ? "true" : "false") << "},\"defaults\":{\"detect_s\":"
     << num(base.detect_s, 2) << ",\"swap_s\":" << num(base.swap_s, 2) << ",\"heal_s\":" << num(base.heal_s, 2)
     << ",\"checkpoint_s\":" << num(base.checkpoint_s, 2) << ",\"slice_chips\":" << num(base.slice_chips, 0)
     << ",\"spare_slices\":" << base.spare_slices << ",\"learner_recovery\":\"" << base.learner_recovery
     << "\",\"step_s\":" << num(base.step_s, 2) << ",\"inner_steps\":" << base.inner_steps
     << ",\"quorum\":" << base.quorum.min_islands << "},\"chips\":[";
  for (std::size_t j = 0; j < kChips.size(); ++j) js << (j ? "," : "") << num(kChips[j], 0);
  js << "],\"rows\":[";
  const std::vector<std::string> keys{"data_parallel", "elastic", "decoupled_M2", "decoupled_M4", "decoupled_M8",
                                      "decoupled_M16"};
  for (std::size_t i = 0; i < rows.size(); ++i) {
    js << (i ? "," : "") << "{\"policy\":\"" << keys[i] << "\",\"ours\":[";
    for (std::size_t j = 0; j < kChips.size(); ++j) js << (j ? "," : "") << num(ours[i][j], 2);
    js << "],\"published\":";
    if (pub[i][0]) {
      js << "[";
      for (std::size_t j = 0; j < kChips.size(); ++j) js << (j ? "," : "") << num(*pub[i][j], 0);
      js << "],\"diff\":[";
      for (std::size_t j = 0; j < kChips.size(); ++j) js << (j ? "," : "") << num(ours[i][j] - *pub[i][j], 2);
      js << "]";
    } else {
      js << "null";
    }
    js << "}";
  }
  js << "],\"decoupled_M8\":{\"uptime\":[";
  for (std::size_t j = 0; j < kChips.size(); ++j) js << (j ? "," : "") << num(uptime8[j], 4);
  js << "],\"mean_learners_alive\":[";
  for (std::size_t j = 0; j < kChips.size(); ++j) js << (j ? "," : "") << num(alive8[j], 4);
  js << "],\"rounds\":[";
  for (std::size_t j = 0; j < kChips.size(); ++j) js << (j ? "," : "") << num(rounds8[j], 0);
  js << "]},\"cells\":" << cells << ",\"within_5_points\":" << within << ",\"max_abs_diff\":" << num(worst, 2)
     << ",\"all_within_5\":" << (within == cells ? "true" : "false")
     << ",\"wall_s_2p4M_1y\":" << num(wall_24m, 3) << ",\"wall_s_2p4M_trace\":" << num(wall_24m_trace, 3);
  for (const auto& [k, v] : wall_24m_policy) js << ",\"wall_s_2p4M_" << k << "\":" << num(v, 3);
  js << ",\"wall_target_met\":" << (wall_24m < 60 ? "true" : "false") << ",\"wall_s_total\":"
     << num(seconds_since(t_all), 2) << "}";
  std::printf("%s\n", js.str().c_str());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "simulator: %s\n", e.what());
  return 1;
}
