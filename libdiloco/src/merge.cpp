// Merge policy: weights, staleness, mean and radial-directional averaging, quorum and grace.
#include "diloco/merge.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "diloco/limits.hpp"

namespace diloco {

double contribution_weight(const Contribution& c, Weighting weighting) {
  if (weighting == Weighting::uniform) return 1.0;
  if (c.steps == 0 || c.tokens == 0) return 0.0;
  const auto t = static_cast<double>(c.tokens);
  return t * (t / static_cast<double>(c.steps));
}

std::optional<double> staleness_factor(const MergeConfig& cfg, std::uint64_t current, std::uint64_t base) {
  if (base > current) return std::nullopt;
  const std::uint64_t s = current - base;
  if (s > cfg.max_staleness) return std::nullopt;
  return std::pow(cfg.staleness_discount, static_cast<double>(s));
}

double merged_weight(const Contribution& c, const MergeConfig& cfg, std::uint64_t current_round) {
  const auto f = staleness_factor(cfg, current_round, c.base_round);
  return f ? contribution_weight(c, cfg.weighting) * *f : 0.0;
}

MergeStats merge(std::span<const Contribution> contribs, std::span<const Segment> segments,
                 const MergeConfig& cfg, std::uint64_t current_round, std::span<double> out) {
  MergeStats st;
  std::fill(out.begin(), out.end(), 0.0);
  std::vector<double> w;
  std::vector<const Contribution*> used;
  for (const auto& c : contribs) {
    if (c.delta.size() != out.size()) throw std::invalid_argument("merge: contribution size differs from fragment");
    const auto f = staleness_factor(cfg, current_round, c.base_round);
    if (!f) {
      ++st.dropped_stale;
      continue;
    }
    const double w0 = contribution_weight(c, cfg.weighting);
    const double wi = w0 * *f;
    if (wi <= 0.0) continue;
    w.push_back(wi);
    used.push_back(&c);
    st.total_weight += wi;
    st.fresh_weight += w0;
  }
  st.merged = static_cast<int>(used.size());
  if (used.empty()) return st;
  const double W = st.total_weight;
  for (const auto& seg : segments) {
    auto o = out.subspan(seg.dst, seg.size);
    if (!cfg.rda || seg.embedding) {
      for (std::size_t m = 0; m < used.size(); ++m) {
        const double a = w[m] / W;
        const double* d = used[m]->delta.data() + seg.dst;
        for (std::size_t i = 0; i < seg.size; ++i) o[i] += a * d[i];
      }
      continue;
    }
    // RDA: radius = weighted mean of norms; direction = unit(weighted mean of unit vectors).
    double radius = 0.0;
    for (std::size_t m = 0; m < used.size(); ++m) {
      const double* d = used[m]->delta.data() + seg.dst;
      double n2 = 0.0;
      for (std::size_t i = 0; i < seg.size; ++i) n2 += d[i] * d[i];
      const double norm = std::sqrt(n2);
      if (norm == 0.0) continue;
      radius += w[m] / W * norm;
      const double a = w[m] / (W * norm);
      for (std::size_t i = 0; i < seg.size; ++i) o[i] += a * d[i];
    }
    double n2 = 0.0;
    for (double x : o) n2 += x * x;
    const double scale = n2 > 0.0 ? radius / std::sqrt(n2) : 0.0;
    for (auto& x : o) x *= scale;
  }
  if (cfg.staleness_scale == StalenessScale::absolute) {
    const double f = W / st.fresh_weight;  // ≤ 1: the weighted mean of the staleness factors
    for (auto& x : out) x *= f;
  }
  return st;
}

Status check_outer_gradient(std::span<const double> delta, std::span<const float> theta, const MergeConfig& cfg) {
  if (delta.empty()) return {};
  // In double, the squares of float values (at most 3.4e38) stay finite; so do their sums.
  double d2 = 0.0, t2 = 0.0;
  for (double x : delta) d2 += x * x;
  for (float x : theta) t2 += static_cast<double>(x) * x;
  const double rms_d = std::sqrt(d2 / static_cast<double>(delta.size()));
  const double rms_t = theta.empty() ? 0.0 : std::sqrt(t2 / static_cast<double>(theta.size()));
  if (rms_d <= cfg.max_delta_ratio * std::max(rms_t, 1.0)) return {};
  char buf[160];
  std::snprintf(buf, sizeof buf, "outer gradient of RMS %.3g, more than %g × max(RMS(Θ) = %.3g, 1) (merge.max_delta_ratio)",
                rms_d, cfg.max_delta_ratio, rms_t);
  return Error{errc::out_of_bounds, buf};
}

double NormClip::bound() const {
  if (ratio_ <= 0.0) return std::numeric_limits<double>::infinity();
  if (last_.size() < 3) return start_;
  std::vector<double> v;
  v.reserve(last_.size());
  for (const auto& [island, norm] : last_) v.push_back(norm);
  auto mid = v.begin() + static_cast<long>(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  return ratio_ * *mid;
}

void NormClip::record(int island, double norm) {
  // A contribution of zeros (an island with nothing new) bounds nothing: counted, such islands
  // would make the median 0 and clip every later contribution away.
  if (ratio_ <= 0.0 || !(norm > 0.0)) return;
  last_[island] = norm;
}

void StepClock::heard(int island, std::uint64_t step, double now, double measured) {
  const auto it = last_.find(island);
  if (it != last_.end() && step > it->second.step && now > it->second.at) {
    double per_step = (now - it->second.at) / static_cast<double>(step - it->second.step);
    // The island's own measure leaves its waits out, and waits only lengthen the time between
    // reports: a measure longer than that is not believed (one report of 1e9 s would otherwise
    // hold every window open for hundreds of reports).
    if (measured > 0.0 && std::isfinite(measured)) per_step = std::min(per_step, measured);
    t_step_ = t_step_ == 0.0 ? per_step : 0.9 * t_step_ + 0.1 * per_step;
  }
  last_[island] = {step, now};
}

double grace_window(const QuorumConfig& cfg, const RoundState& s) {
  if (cfg.grace == GraceRule::none) return 0.0;
  if (cfg.grace == GraceRule::fixed) return cfg.grace_s;
  if (cfg.grace == GraceRule::steps) return cfg.grace_steps * s.t_step;
  const double t_quorum = s.quorum_at ? *s.quorum_at - s.opened_at : 0.0;
  return cfg.gamma * std::max(0.0, cfg.tau * s.t_step - (t_quorum + s.t_sync));
}

QuorumDecision decide(const QuorumConfig& cfg, const RoundState& s, double now) {
  if (s.arrivals < cfg.min_islands || !s.quorum_at) return {};
  if (s.arrivals >= s.live_islands) return {true, now};
  const double until = *s.quorum_at + grace_window(cfg, s);
  if (now >= until) return {true, now};
  return {false, until};
}

std::vector<std::string> validate(const MergeConfig& c) {
  std::vector<std::string> e;
  if (!(c.staleness_discount >= 0.0 && c.staleness_discount <= 1.0))
    e.push_back("merge.staleness_discount: must be in [0, 1]");
  if (!(c.max_delta_ratio >= 1.0 && c.max_delta_ratio <= 1e6)) e.push_back("merge.max_delta_ratio: must be in [1, 1e6]");
  if (!(c.clip_ratio == 0.0 || (c.clip_ratio >= 1.0 && c.clip_ratio <= 1e6)))
    e.push_back("merge.clip_ratio: must be 0 (off) or in [1, 1e6]");
  return e;
}

std::vector<std::string> validate(const QuorumConfig& c) {
  std::vector<std::string> e;
  if (c.min_islands < 1) e.push_back("quorum.min_islands: must be ≥ 1");
  if (!(c.grace_s >= 0.0 && c.grace_s <= kMaxDurationS)) e.push_back("quorum.grace_s: must be in [0, 2592000] s (30 days)");
  if (!(c.grace_steps >= 0.0 && c.grace_steps <= 1e6)) e.push_back("quorum.grace_steps: must be in [0, 1e6] steps");
  if (!(c.gamma >= 0.0 && c.gamma <= 100.0)) e.push_back("quorum.gamma: must be in [0, 100]");
  return e;
}

}  // namespace diloco
