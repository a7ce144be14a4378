// Chaos: the seeded fault schedule (per-unit renewal processes merged in time order).
// See chaos.hpp.
#include "diloco/chaos.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <tuple>

#include "diloco/hash.hpp"
#include "diloco/limits.hpp"
#include "diloco/rng.hpp"

namespace diloco {

namespace {

// A runaway config (MTBF of microseconds over a long horizon) would fill memory; refuse it.
constexpr std::size_t kMaxEvents = 10'000'000;

std::string seconds(double s) {
  char b[32];
  // "1.0", "2.5", but "0.05" rather than a rounded "0.1".
  if (std::abs(s) < 1e6 && std::abs(s * 10.0 - std::round(s * 10.0)) < 1e-9) std::snprintf(b, sizeof b, "%.1f", s);
  else std::snprintf(b, sizeof b, "%g", s);
  return b;
}

/// Waiting time to the next failure of a unit with mean time between failures `mean`.
double exponential(Rng& rng, double mean) { return -mean * std::log1p(-rng.uniform()); }

/// One stream per (seed, kind, unit): adding a unit or a kind leaves the others' draws alone.
Rng stream(std::uint64_t seed, ChaosEvent::Kind kind, int a, int b = 0) {
  const auto k = derive_seed(seed, static_cast<std::uint64_t>(kind) + 1);
  return Rng(derive_seed(derive_seed(k, static_cast<std::uint64_t>(a)), static_cast<std::uint64_t>(b)));
}

struct Window {
  double from, to;  // [from, to): the unit is down or busy
};

/// Start times of a unit's events: an alternating renewal process (up for Exp(mean), then down or
/// busy for `length`), so a unit is never hit again while it is still down. A candidate that falls
/// inside one of `blocked` (the island is down) is absorbed: the unit is down with its island and
/// its clock restarts when the island is back.
std::vector<double> renewal(Rng rng, double mean, double length, double horizon, const std::vector<Window>& blocked = {}) {
  std::vector<double> at;
  if (mean <= 0.0) return at;
  double t = exponential(rng, mean);
  std::size_t w = 0;
  while (t <= horizon) {
    while (w < blocked.size() && blocked[w].to <= t) ++w;
    if (w < blocked.size() && blocked[w].from <= t) {
      t = blocked[w].to + exponential(rng, mean);
      continue;
    }
    at.push_back(t);
    if (at.size() > kMaxEvents) throw std::invalid_argument("chaos: more than 10M events of one unit before chaos.horizon_s; raise the MTBFs");
    t += length + exponential(rng, mean);
  }
  return at;
}

void check_positive_or_off(std::vector<std::string>& e, const char* key, double v) {
  if (!(v >= 0.0 && std::isfinite(v)))
    e.push_back(std::string("chaos.") + key + ": must be ≥ 0 seconds (0: off) (got " + seconds(v) + ")");
}

// A duration that becomes timer ticks: [0, kMaxDurationS].
void check_duration(std::vector<std::string>& e, const char* key, double v) {
  if (!(v >= 0.0 && std::isfinite(v))) e.push_back(std::string("chaos.") + key + ": must be ≥ 0 seconds (got " + seconds(v) + ")");
  else if (v > kMaxDurationS)
    e.push_back(std::string("chaos.") + key + ": must be at most 30 days (" + seconds(kMaxDurationS) + " s, got " + seconds(v) + ")");
}

void mix(std::uint64_t& h, std::uint64_t v) { h = fnv1a_le(h, v); }  // the same hash everywhere

std::uint64_t bits(double d) {
  std::uint64_t u;
  std::memcpy(&u, &d, sizeof u);
  return u;
}

}  // namespace

std::vector<std::string> validate(const ChaosConfig& c) {
  std::vector<std::string> e;
  check_positive_or_off(e, "chip_mtbf_s", c.chip_mtbf_s);
  check_positive_or_off(e, "island_mtbf_s", c.island_mtbf_s);
  check_positive_or_off(e, "syncer_mtbf_s", c.syncer_mtbf_s);
  check_duration(e, "repair_s", c.repair_s);
  check_positive_or_off(e, "straggler_mtbf_s", c.straggler_mtbf_s);
  if (!(c.straggler_factor >= 1e-3 && c.straggler_factor <= 1.0))
    e.push_back("chaos.straggler_factor: must be in [0.001, 1] (got " + seconds(c.straggler_factor) + ")");
  check_duration(e, "straggler_s", c.straggler_s);
  check_positive_or_off(e, "partition_mtbf_s", c.partition_mtbf_s);
  check_duration(e, "partition_s", c.partition_s);
  if (!(c.horizon_s > 0.0 && std::isfinite(c.horizon_s)))
    e.push_back("chaos.horizon_s: must be positive and finite (got " + seconds(c.horizon_s) + ")");
  else check_duration(e, "horizon_s", c.horizon_s);
  return e;
}

const char* to_string(ChaosEvent::Kind k) {
  switch (k) {
    case ChaosEvent::kill_chip: return "kill_chip";
    case ChaosEvent::kill_island: return "kill_island";
    case ChaosEvent::kill_syncer: return "kill_syncer";
    case ChaosEvent::straggle: return "straggle";
    case ChaosEvent::partition: return "partition";
  }
  return "unknown";
}

std::string ChaosEvent::describe() const {
  char at[32];
  std::snprintf(at, sizeof at, "%.3fs ", at_s);
  std::string s = at;
  switch (kind) {
    case kill_chip:
      return s + "kill chip " + std::to_string(island) + "." + std::to_string(chip) + " (repair " + seconds(duration_s) + " s)";
    case kill_island: return s + "kill island " + std::to_string(island) + " (repair " + seconds(duration_s) + " s)";
    case kill_syncer: return s + "kill syncer (repair " + seconds(duration_s) + " s)";
    case straggle: {
      char f[32];
      std::snprintf(f, sizeof f, "%.2f", factor);
      return s + "straggle island " + std::to_string(island) + " (speed " + f + " for " + seconds(duration_s) + " s)";
    }
    case partition: return s + "partition site " + std::to_string(site) + " (" + seconds(duration_s) + " s)";
  }
  return s + "unknown event";
}

std::vector<ChaosEvent> chaos_schedule(const ChaosConfig& cfg, int islands, int chips_per_island, int sites) {
  if (auto e = validate(cfg); !e.empty()) throw std::invalid_argument(e.front());
  if (islands < 0 || chips_per_island < 0 || sites < 0)
    throw std::invalid_argument("chaos_schedule: islands, chips and sites must be ≥ 0");
  std::vector<ChaosEvent> out;
  if (!cfg.enabled) return out;
  const double horizon = cfg.horizon_s;

  for (int i = 0; i < islands; ++i) {
    // Island kills first: while an island is down its chips are down with it.
    std::vector<Window> down;
    for (double t : renewal(stream(cfg.seed, ChaosEvent::kill_island, i), cfg.island_mtbf_s, cfg.repair_s, horizon)) {
      ChaosEvent ev;
      ev.kind = ChaosEvent::kill_island;
      ev.at_s = t;
      ev.island = i;
      ev.duration_s = cfg.repair_s;
      out.push_back(ev);
      down.push_back({t, t + cfg.repair_s});
    }
    for (int c = 0; c < chips_per_island; ++c)
      for (double t : renewal(stream(cfg.seed, ChaosEvent::kill_chip, i, c), cfg.chip_mtbf_s, cfg.repair_s, horizon, down)) {
        ChaosEvent ev;
        ev.kind = ChaosEvent::kill_chip;
        ev.at_s = t;
        ev.island = i;
        ev.chip = c;
        ev.duration_s = cfg.repair_s;
        out.push_back(ev);
      }
    // A dead island does not straggle either.
    for (double t : renewal(stream(cfg.seed, ChaosEvent::straggle, i), cfg.straggler_mtbf_s, cfg.straggler_s, horizon, down)) {
      ChaosEvent ev;
      ev.kind = ChaosEvent::straggle;
      ev.at_s = t;
      ev.island = i;
      ev.duration_s = cfg.straggler_s;
      ev.factor = cfg.straggler_factor;
      out.push_back(ev);
    }
  }
  for (double t : renewal(stream(cfg.seed, ChaosEvent::kill_syncer, 0), cfg.syncer_mtbf_s, cfg.repair_s, horizon)) {
    ChaosEvent ev;
    ev.kind = ChaosEvent::kill_syncer;
    ev.at_s = t;
    ev.duration_s = cfg.repair_s;
    out.push_back(ev);
  }
  for (int s = 0; s < sites; ++s)
    for (double t : renewal(stream(cfg.seed, ChaosEvent::partition, s), cfg.partition_mtbf_s, cfg.partition_s, horizon)) {
      ChaosEvent ev;
      ev.kind = ChaosEvent::partition;
      ev.at_s = t;
      ev.site = s;
      ev.duration_s = cfg.partition_s;
      out.push_back(ev);
    }
  if (out.size() > kMaxEvents) throw std::invalid_argument("chaos: more than 10M events before chaos.horizon_s; raise the MTBFs");

  std::sort(out.begin(), out.end(), [](const ChaosEvent& a, const ChaosEvent& b) {
    return std::tie(a.at_s, a.kind, a.island, a.chip, a.site) < std::tie(b.at_s, b.kind, b.island, b.chip, b.site);
  });
  return out;
}

std::uint64_t schedule_hash(const std::vector<ChaosEvent>& events) {
  std::uint64_t h = kFnvBasis;
  for (const auto& e : events) {
    mix(h, static_cast<std::uint64_t>(e.kind));
    mix(h, bits(e.at_s));
    mix(h, static_cast<std::uint64_t>(static_cast<std::int64_t>(e.island)));
    mix(h, static_cast<std::uint64_t>(static_cast<std::int64_t>(e.chip)));
    mix(h, static_cast<std::uint64_t>(static_cast<std::int64_t>(e.site)));
    mix(h, bits(e.duration_s));
    mix(h, bits(e.factor));
  }
  return h;
}

std::vector<ChaosEvent> resume_schedule(std::vector<ChaosEvent> schedule, double elapsed_s) {
  if (elapsed_s <= 0.0) return schedule;
  std::vector<ChaosEvent> left;
  for (auto e : schedule) {
    const bool lasting = e.kind == ChaosEvent::straggle || e.kind == ChaosEvent::partition;
    if (e.at_s >= elapsed_s) {
      e.at_s -= elapsed_s;
    } else if (lasting && e.at_s + e.duration_s > elapsed_s) {
      e.duration_s = e.at_s + e.duration_s - elapsed_s;
      e.at_s = 0.0;
    } else {
      continue;
    }
    left.push_back(e);
  }
  std::stable_sort(left.begin(), left.end(), [](const ChaosEvent& a, const ChaosEvent& b) { return a.at_s < b.at_s; });
  return left;
}

}  // namespace diloco
