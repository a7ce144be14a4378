// Discrete-event goodput simulator: one shared Poisson interruption trace replayed under data
// parallel, elastic data parallel and decoupled learners (arXiv 2604.21428). See simulate.hpp.
#include "diloco/sim/simulate.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <deque>
#include <functional>
#include <limits>
#include <queue>
#include <stdexcept>

#include "diloco/limits.hpp"
#include "diloco/rng.hpp"

namespace diloco {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

/// Hot spare slices: a failed slice is replaced by a free spare after detect + swap; the failed
/// one is back (as a spare) after detect + restart. Without a free spare the unit waits restart.
class SparePool {
public:
  explicit SparePool(int n) : free_(n) {}
  /// Replacement delay after detection for a slice failing at `t`.
  double replace(double t, const SimConfig& cfg) {
    while (!back_.empty() && back_.top() <= t) {
      back_.pop();
      ++free_;
    }
    if (free_ <= 0) return cfg.restart_s;
    --free_;
    back_.push(t + cfg.detect_s + cfg.restart_s);
    return cfg.swap_s;
  }

private:
  int free_;
  std::priority_queue<double, std::vector<double>, std::greater<>> back_;
};

struct Common {
  std::uint32_t slices;
  double chips_per_slice;
  double provisioned_rate;  // chips incl. spares
  double period;            // H · step: one round's worth of compute
  double horizon;
};

Common common(const SimConfig& cfg) {
  Common c;
  c.slices = slice_count(cfg);
  c.chips_per_slice = cfg.chips / c.slices;
  c.provisioned_rate = cfg.chips + cfg.spare_slices * c.chips_per_slice;
  c.period = cfg.inner_steps * cfg.step_s;
  c.horizon = cfg.horizon_s;
  return c;
}

/// Records a point every `every` seconds of simulated time, from cumulative good chip-seconds.
class Series {
public:
  Series(const SimConfig& cfg, const Common& c) : every_(cfg.series_every_s), rate_(c.provisioned_rate) {
    next_ = every_ > 0 ? every_ : kInf;
  }
  /// Samples due up to `t`, the next event: `good(s)` is the work done by time s and not (yet)
  /// lost, in chip-seconds; `alive(s)` the learners computing at s.
  template <class Good, class Alive>
  void sample_until(double t, Good good, Alive alive, std::vector<SeriesPoint>& out) {
    while (next_ <= t) {
      out.push_back({next_, good(next_) / (rate_ * next_), alive(next_)});
      next_ += every_;
    }
  }

private:
  double every_, rate_, next_;
};

// ---------------------------------------------------------------- synchronous data parallel

PolicyResult simulate_dp(const SimConfig& cfg, std::span<const Interruption> trace) {
  const Common c = common(cfg);
  PolicyResult r;
  r.policy = Policy::data_parallel;
  SparePool spares(cfg.spare_slices);
  Series series(cfg, c);
  const double C = cfg.checkpoint_s;
  double committed = 0.0;  // progress (seconds of all-chip compute) safe in a checkpoint
  double pending = 0.0;    // progress since the last checkpoint
  double run_time = 0.0;
  double start = 0.0;      // running since (or resumes at, after a stall)
  auto run = [&](double dt) {
    if (dt <= 0) return;
    run_time += dt;
    if (C <= 0) {
      committed += dt;
      return;
    }
    pending += dt;
    const double k = std::floor(pending / C);
    committed += k * C;
    pending -= k * C;
  };
  auto dp_good = [&](double s) { return (committed + pending + std::max(0.0, s - start)) * cfg.chips; };
  auto dp_alive = [&](double s) { return s >= start ? 1.0 : 0.0; };
  for (const auto& ev : trace) {
    if (ev.t >= c.horizon) break;
    series.sample_until(ev.t, dp_good, dp_alive, r.series);
    if (ev.t < start) continue;  // stalled: idle chips are not interrupted; restart in progress
    run(ev.t - start);
    ++r.interruptions;
    pending = 0.0;  // lost: roll back to the last checkpoint
    start = ev.t + cfg.detect_s + spares.replace(ev.t, cfg);
  }
  series.sample_until(c.horizon, dp_good, dp_alive, r.series);
  if (start < c.horizon) run(c.horizon - start);
  committed += pending;  // the run ends with a checkpoint
  r.goodput = committed * cfg.chips / (c.provisioned_rate * c.horizon);
  r.uptime = run_time / c.horizon;
  r.rounds = committed / c.period;
  r.mean_learners_alive = r.uptime;
  return r;
}

// ---------------------------------------------------------------- elastic data parallel

PolicyResult simulate_elastic(const SimConfig& cfg, std::span<const Interruption> trace) {
  const Common c = common(cfg);
  PolicyResult r;
  r.policy = Policy::elastic;
  SparePool spares(cfg.spare_slices);
  Series series(cfg, c);
  std::vector<char> out(c.slices, 0);
  using Back = std::pair<double, std::uint32_t>;  // (rejoin time, slice)
  std::priority_queue<Back, std::vector<Back>, std::greater<>> back;
  double active = cfg.chips;  // chips in the mesh
  double paused_until = 0.0;
  double acc = 0.0;           // accounted up to
  double good = 0.0, run_time = 0.0;
  auto advance = [&](double to) {
    const double from = std::max(acc, paused_until);
    if (to > from) {
      good += active * (to - from);
      run_time += to - from;
    }
    acc = std::max(acc, to);
  };
  auto el_good = [&](double s) { return good + active * std::max(0.0, s - std::max(acc, paused_until)); };
  auto el_alive = [&](double s) { return s >= paused_until ? 1.0 : 0.0; };
  std::size_t i = 0;
  while (true) {
    const double tf = i < trace.size() ? trace[i].t : kInf;
    const double tb = back.empty() ? kInf : back.top().first;
    const double t = std::min({tf, tb, c.horizon});
    series.sample_until(t, el_good, el_alive, r.series);
    advance(t);
    if (t >= c.horizon) break;
    if (tb <= tf) {  // a replaced slice rejoins: one more membership change
      const auto s = back.top().second;
      back.pop();
      out[s] = 0;
      active += c.chips_per_slice;
      if (t >= paused_until) paused_until = t + cfg.reconfig_s;  // else folded into the re-mesh under way
      continue;
    }
    const auto ev = trace[i++];
    if (t < paused_until || out[ev.slice]) continue;  // idle chips: absorbed
    ++r.interruptions;
    out[ev.slice] = 1;
    active -= c.chips_per_slice;
    paused_until = t + cfg.detect_s + cfg.reconfig_s;
    back.push({t + cfg.detect_s + spares.replace(t, cfg), ev.slice});
  }
  r.goodput = good / (c.provisioned_rate * c.horizon);
  r.uptime = run_time / c.horizon;
  r.rounds = good / cfg.chips / c.period;
  r.mean_learners_alive = r.uptime;
  return r;
}

// ---------------------------------------------------------------- decoupled learners

struct Learner {
  double chips = 0.0;        // chips of its slices
  double active = 0.0;       // chips currently in its mesh
  double down_until = 0.0;   // paused (elastic re-mesh) or restarting + healing until
  bool down = false;
  double seg_progress = 0.0; // compute seconds since its last send
  double seg_work = 0.0;     // chip-seconds since its last send
  double acc = 0.0;          // accounted up to
};

struct InFlight {
  int learner;
  double arrival;
  double work;
  std::uint64_t base_round;
};

PolicyResult simulate_decoupled(const SimConfig& cfg, std::span<const Interruption> trace) {
  const Common c = common(cfg);
  const int M = cfg.learners;
  const bool restart_mode = cfg.learner_recovery == "restart";
  PolicyResult r;
  r.policy = Policy::decoupled;
  r.learners = M;
  SparePool spares(cfg.spare_slices);
  Series series(cfg, c);

  std::vector<Learner> L(M);
  std::vector<int> owner(c.slices);
  for (std::uint32_t s = 0; s < c.slices; ++s) {
    owner[s] = static_cast<int>(static_cast<std::uint64_t>(s) * M / c.slices);
    L[owner[s]].chips += c.chips_per_slice;
  }
  for (auto& l : L) l.active = l.chips;
  std::vector<char> out(c.slices, 0);
  using Back = std::pair<double, std::uint32_t>;
  std::priority_queue<Back, std::vector<Back>, std::greater<>> back;
  std::deque<InFlight> flight;  // constant latency: arrivals stay in send order

  // Syncer: one round open at a time (fragments are independent and identical here).
  std::uint64_t rounds = 0;
  RoundState round;
  std::vector<InFlight> pending;
  std::vector<char> in_round(M, 0);  // learners that already count towards this round's quorum
  double recheck = kInf;
  double good = 0.0, lost = 0.0, done = 0.0;  // done: every chip-second computed
  double alive_time = 0.0, quorum_time = 0.0;
  const double eps = 1e-9 * std::max(1.0, c.period);

  auto advance = [&](Learner& l, double to) {
    const double from = std::max(l.acc, l.down_until);
    if (!l.down && to > from && l.active > 0) {
      l.seg_progress += to - from;
      l.seg_work += l.active * (to - from);
      done += l.active * (to - from);
    }
    l.acc = std::max(l.acc, to);
  };
  auto commit = [&] {
    for (const auto& p : pending) {
      if (staleness_factor(cfg.merge, rounds, p.base_round)) {
        good += p.work;
      } else {
        lost += p.work;
        ++r.dropped_contributions;
      }
    }
    pending.clear();
    std::fill(in_round.begin(), in_round.end(), 0);
    ++rounds;
    round = RoundState{};
    recheck = kInf;
  };

  double now = 0.0;
  std::size_t i = 0;
  while (true) {
    // Next event time.
    double t = std::min(c.horizon, i < trace.size() ? trace[i].t : kInf);
    if (!back.empty()) t = std::min(t, back.top().first);
    if (!flight.empty()) t = std::min(t, flight.front().arrival);
    t = std::min(t, recheck);
    for (const auto& l : L) {
      if (l.down) t = std::min(t, l.down_until);
      else if (l.active > 0) t = std::min(t, std::max(now, l.acc) + (c.period - l.seg_progress));
    }
    t = std::max(t, now);
    int alive = 0;  // learners computing: not paused / restarting, and with chips in their mesh
    for (const auto& l : L) alive += (!l.down && l.active > 0) ? 1 : 0;
    series.sample_until(t, [&](double s) {
      double g = done - lost;
      for (const auto& l : L)
        if (!l.down && l.active > 0) g += l.active * (s - now);
      return g;
    }, [&](double) { return static_cast<double>(alive); }, r.series);
    alive_time += alive * (t - now);
    if (alive >= cfg.quorum.min_islands) quorum_time += t - now;
    for (auto& l : L) advance(l, t);
    now = t;
    if (now >= c.horizon) break;

    // 1. learners whose pause or restart (+ heal) is over.
    for (auto& l : L)
      if (l.down && l.down_until <= now) {
        l.down = false;
      }
    // 2. replaced slices rejoin their learner (elastic mode): a membership change.
    while (!back.empty() && back.top().first <= now) {
      const auto s = back.top().second;
      back.pop();
      out[s] = 0;
      auto& l = L[owner[s]];
      l.active += c.chips_per_slice;
      if (!l.down && cfg.reconfig_s > 0) {
        l.down = true;
        l.down_until = now + cfg.reconfig_s;
      }
    }
    // 3. interruptions.
    while (i < trace.size() && trace[i].t <= now) {
      const auto ev = trace[i++];
      auto& l = L[owner[ev.slice]];
      if (l.down || out[ev.slice]) continue;  // idle chips: absorbed
      ++r.interruptions;
      l.down = true;
      const double rep = spares.replace(now, cfg);
      if (restart_mode) {
        // The learner stops, waits for its slice, heals from the syncer; unsent work is lost.
        l.down_until = now + cfg.detect_s + rep + cfg.heal_s;
        lost += l.seg_work;
        l.seg_work = 0.0;
        l.seg_progress = 0.0;
      } else {
        // The learner re-meshes without the slice and continues; the slice rejoins later.
        l.down_until = now + cfg.detect_s + cfg.reconfig_s;
        out[ev.slice] = 1;
        l.active -= c.chips_per_slice;
        back.push({now + cfg.detect_s + rep, ev.slice});
      }
    }
    // 4. learners that finished H steps send their outer gradient.
    for (auto& l : L)
      if (!l.down && l.active > 0 && l.seg_progress >= c.period - eps) {
        flight.push_back({static_cast<int>(&l - L.data()), now + cfg.sync_latency_s, l.seg_work, rounds});
        l.seg_progress = 0.0;
        l.seg_work = 0.0;
      }
    // 5. arrivals at the syncer.
    while (!flight.empty() && flight.front().arrival <= now) {
      if (pending.empty()) round.opened_at = now;
      const int from = flight.front().learner;
      pending.push_back(flight.front());
      flight.pop_front();
      if (in_round[from]) continue;  // a second contribution of one learner: not another island
      in_round[from] = 1;
      ++round.arrivals;
      if (round.arrivals == cfg.quorum.min_islands) round.quorum_at = now;
    }
    // 6. the syncer's decision: libdiloco's quorum + grace rule, with simulated time.
    if (!pending.empty()) {
      int live = 0;
      for (const auto& l : L) live += (!l.down && l.active > 0) ? 1 : 0;
      round.live_islands = live;
      round.t_step = cfg.step_s;
      round.t_sync = cfg.sync_latency_s;
      const auto d = decide(cfg.quorum, round, now);
      if (d.merge) commit();
      else recheck = d.recheck_at;
    }
  }
  // The run ends with a final sync: work not yet merged reaches the model.
  for (const auto& p : pending) good += p.work;
  for (const auto& f : flight) good += f.work;
  for (const auto& l : L) good += l.seg_work;
  r.goodput = good / (c.provisioned_rate * c.horizon);
  r.uptime = quorum_time / c.horizon;
  r.rounds = static_cast<double>(rounds);
  r.mean_learners_alive = alive_time / c.horizon;
  return r;
}

// Bounds of what one simulation may hold and replay (validate() names the flag that exceeds them).
constexpr double kMaxTraceEvents = 5e7;  // interruptions in memory (16 bytes each)
constexpr double kMaxSlices = 1e8;       // per-slice state: owner, excluded flag, return time
constexpr double kSliceBytes = 16;
constexpr int kMaxLearners = 65536;
constexpr double kMaxSends = 1e8;        // learner rounds replayed, each visiting every learner
constexpr double kMaxDelay = 1000 * kYear;

std::string number(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", x);
  return buf;
}

// The flag whose value is furthest out (largest factor past its default).
const char* blame(std::initializer_list<std::pair<const char*, double>> factors) {
  const char* flag = factors.begin()->first;
  double most = -1;
  for (const auto& [f, x] : factors)
    if (x > most || std::isnan(x)) most = x, flag = f;
  return flag;
}

double parse_scaled(std::string_view text, const char* what, double (*unit)(char)) {
  const std::string s(text);
  if (s.empty()) throw std::invalid_argument(std::string(what) + ": empty value");
  std::size_t used = 0;
  double v = 0.0;
  try {
    v = std::stod(s, &used);
  } catch (const std::exception&) {
    throw std::invalid_argument(std::string(what) + ": not a number: '" + s + "'");
  }
  if (used == s.size()) return v;
  if (used + 1 != s.size()) throw std::invalid_argument(std::string(what) + ": bad suffix in '" + s + "'");
  const double u = unit(s.back());
  if (u <= 0) throw std::invalid_argument(std::string(what) + ": unknown suffix in '" + s + "'");
  return v * u;
}

}  // namespace

const char* policy_name(Policy p) {
  switch (p) {
    case Policy::data_parallel: return "data_parallel";
    case Policy::elastic: return "elastic_dp";
    case Policy::decoupled: return "decoupled";
  }
  return "?";
}

std::uint32_t slice_count(const SimConfig& cfg) {
  return static_cast<std::uint32_t>(std::max(1.0, std::ceil(cfg.chips / cfg.slice_chips - 1e-9)));
}

std::vector<std::string> validate(const SimConfig& c) {
  std::vector<std::string> e;
  if (!(c.chips >= 1)) e.push_back("--chips: must be ≥ 1");
  if (c.learners < 1 || c.learners > kMaxLearners)
    e.push_back("--learners: must be in [1, " + std::to_string(kMaxLearners) + "] (every event visits every learner)");
  if (!(c.slice_chips >= 1)) e.push_back("--slice: must be ≥ 1 chip");
  if (c.chips >= 1 && c.slice_chips >= 1 && c.learners >= 1 && slice_count(c) < static_cast<std::uint32_t>(c.learners))
    e.push_back("--slice: fewer slices than learners (each learner needs at least one slice)");
  if (c.chips / std::max(1.0, c.slice_chips) > kMaxSlices)
    e.push_back("--slice: " + number(c.chips / std::max(1.0, c.slice_chips)) + " slices of " + number(c.slice_chips) +
                " chips need " + format_bytes(kSliceBytes * c.chips / std::max(1.0, c.slice_chips)) +
                " of per-slice state (limit " + number(kMaxSlices) + " slices)");
  if (c.spare_slices < 0) e.push_back("--spares: must be ≥ 0");
  if (!(c.mtbi_s > 0)) e.push_back("--mtbi: must be > 0");
  if (!(c.horizon_s > 0)) e.push_back("--horizon: must be > 0");
  for (auto [v, name] : {std::pair{c.detect_s, "--detect"}, {c.restart_s, "--restart"}, {c.swap_s, "--swap"},
                         {c.reconfig_s, "--reconfig"}, {c.heal_s, "--heal"}, {c.checkpoint_s, "--checkpoint"},
                         {c.sync_latency_s, "--sync-latency"}, {c.series_every_s, "--series"}})
    if (!(v >= 0 && v <= kMaxDelay)) e.push_back(std::string(name) + ": must be a finite duration in [0, 1000y]");
  if (c.learner_recovery != "elastic" && c.learner_recovery != "restart")
    e.push_back("--learner-recovery: must be \"elastic\" or \"restart\" (got \"" + c.learner_recovery + "\")");
  if (!(c.step_s > 0)) e.push_back("--step: must be > 0");
  if (c.inner_steps < 1) e.push_back("--inner-steps: must be ≥ 1");
  if (c.quorum.min_islands > c.learners) e.push_back("--quorum: K must be ≤ --learners");
  if (c.quorum.tau < 0) e.push_back("--tau: must be ≥ 0");
  for (auto& s : validate(c.quorum)) e.push_back(s);
  for (auto& s : validate(c.merge)) e.push_back(s);
  if (c.series_every_s > 0 && c.horizon_s / c.series_every_s > 1e6) e.push_back("--series: more than 1e6 points");
  if (!e.empty()) return e;
  // What the values imply together: the trace held in memory and the events replayed. The flag
  // named is the one furthest from its default in the direction that makes the work grow.
  const SimConfig d;
  const double events = c.chips / c.mtbi_s * c.horizon_s;
  if (!(events <= kMaxTraceEvents)) {
    const char* flag = blame({{"--horizon", c.horizon_s / d.horizon_s}, {"--chips", c.chips / d.chips}, {"--mtbi", d.mtbi_s / c.mtbi_s}});
    e.push_back(std::string(flag) + ": --chips × --horizon / --mtbi means about " + number(events) + " interruptions, " +
                format_bytes(static_cast<long double>(events) * sizeof(Interruption)) + " of trace (limit " +
                number(kMaxTraceEvents) + ", " + format_bytes(kMaxTraceEvents * sizeof(Interruption)) + ")");
  }
  const double sends = c.learners * c.horizon_s / (c.inner_steps * c.step_s);
  if (!(sends <= kMaxSends)) {
    const char* flag = blame({{"--horizon", c.horizon_s / d.horizon_s}, {"--step", d.step_s / c.step_s},
                              {"--inner-steps", static_cast<double>(d.inner_steps) / c.inner_steps},
                              {"--learners", static_cast<double>(c.learners) / d.learners}});
    e.push_back(std::string(flag) + ": --learners × --horizon / (--inner-steps × --step) means about " + number(sends) +
                " outer-gradient sends to replay (limit " + number(kMaxSends) + ")");
  }
  return e;
}

std::vector<Interruption> poisson_trace(const SimConfig& cfg) {
  if (const auto errors = validate(cfg); !errors.empty()) throw std::invalid_argument("poisson_trace: " + errors.front());
  std::vector<Interruption> trace;
  const std::uint32_t slices = slice_count(cfg);
  const double rate = cfg.chips / cfg.mtbi_s;  // superposition of per-chip Poisson processes
  trace.reserve(static_cast<std::size_t>(rate * cfg.horizon_s * 1.01 + 16));
  Rng rng(derive_seed(cfg.seed, 0x7A11));
  double t = 0.0;
  while (true) {
    double u = rng.uniform();
    if (u <= 0.0) u = 0x1.0p-53;
    t += -std::log(u) / rate;
    if (t >= cfg.horizon_s) break;
    // All slices hold chips/slices chips, so a uniformly random slice is chip-weighted.
    const auto s = static_cast<std::uint32_t>(std::min<std::uint64_t>(rng.below(slices), slices - 1));
    trace.push_back({t, s});
  }
  return trace;
}

PolicyResult simulate(Policy policy, const SimConfig& cfg, std::span<const Interruption> trace) {
  const auto errors = validate(cfg);
  if (!errors.empty()) throw std::invalid_argument("simulate: " + errors.front());
  const std::uint32_t slices = slice_count(cfg);
  for (std::size_t k = 0; k < trace.size(); ++k) {
    if (trace[k].slice >= slices) throw std::invalid_argument("simulate: trace names slice beyond slice_count");
    if (k > 0 && trace[k].t < trace[k - 1].t) throw std::invalid_argument("simulate: trace not sorted by time");
  }
  switch (policy) {
    case Policy::data_parallel: return simulate_dp(cfg, trace);
    case Policy::elastic: return simulate_elastic(cfg, trace);
    case Policy::decoupled: return simulate_decoupled(cfg, trace);
  }
  throw std::invalid_argument("simulate: unknown policy");
}

std::vector<PolicyResult> simulate_all(const SimConfig& cfg) {
  const auto trace = poisson_trace(cfg);
  return {simulate(Policy::data_parallel, cfg, trace), simulate(Policy::elastic, cfg, trace),
          simulate(Policy::decoupled, cfg, trace)};
}

double parse_duration(std::string_view text) {
  const double v = parse_scaled(text, "duration", [](char u) -> double {
    switch (u) {
      case 's': return 1.0;
      case 'm': return kMinute;
      case 'h': return kHour;
      case 'd': return kDay;
      case 'y': return kYear;
      default: return -1.0;
    }
  });
  if (!(v >= 0) || !std::isfinite(v)) throw std::invalid_argument("duration: must be finite and ≥ 0: '" + std::string(text) + "'");
  return v;
}

double parse_count(std::string_view text) {
  const double v = parse_scaled(text, "count", [](char u) -> double {
    switch (u) {
      case 'k': case 'K': return 1e3;
      case 'M': return 1e6;
      case 'G': return 1e9;
      default: return -1.0;
    }
  });
  if (!std::isfinite(v)) throw std::invalid_argument("count: must be finite: '" + std::string(text) + "'");
  return v;
}

std::string format_duration(double s) {
  char buf[32];
  auto fmt = [&](double v, const char* u) {
    std::snprintf(buf, sizeof buf, "%.3g%s", v, u);
    return std::string(buf);
  };
  if (s >= kYear) return fmt(s / kYear, "y");
  if (s >= kDay) return fmt(s / kDay, "d");
  if (s >= kHour) return fmt(s / kHour, "h");
  if (s >= kMinute) return fmt(s / kMinute, "m");
  return fmt(s, "s");
}

}  // namespace diloco
