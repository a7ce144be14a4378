// WanLink: bandwidth queue, latency and jitter, loss with retransmission, partitions.
#include "diloco/wan.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace diloco {

std::vector<std::string> validate(const LinkConfig& c, const std::string& name) {
  std::vector<std::string> e;
  if (!(c.bandwidth_Bps > 0.0 && std::isfinite(c.bandwidth_Bps))) e.push_back(name + ".bandwidth: must be positive");
  if (!(c.latency_s >= 0.0)) e.push_back(name + ".latency: must be ≥ 0");
  if (!(c.jitter_s >= 0.0 && c.jitter_s <= c.latency_s)) e.push_back(name + ".jitter: must be in [0, latency]");
  if (!(c.loss >= 0.0 && c.loss < 1.0)) e.push_back(name + ".loss: must be in [0, 1)");
  if (!(c.retransmit_timeout_s >= 0.0)) e.push_back(name + ".retransmit_timeout: must be ≥ 0");
  double prev = -1.0;
  for (const auto& p : c.partitions) {
    if (!(p.end_s > p.start_s && p.start_s >= prev)) {
      e.push_back(name + ".partitions: must be sorted, non-overlapping [start, end) windows with end > start");
      break;
    }
    prev = p.end_s;
  }
  return e;
}

WanLink::WanLink(LinkConfig cfg) : cfg_(std::move(cfg)), rng_(cfg_.seed) {
  if (auto e = validate(cfg_); !e.empty()) throw std::invalid_argument(e.front());
}

namespace {
// The first of `partitions`, moved by `shift` seconds, for which `pick` holds.
template <class Pick>
std::optional<Partition> first_shifted(const std::vector<Partition>& partitions, double shift, Pick pick) {
  for (const auto& p : partitions)
    if (const Partition q{p.start_s + shift, p.end_s + shift}; pick(q)) return q;
  return std::nullopt;
}
}  // namespace

std::optional<Partition> WanLink::partition_at(double t) const {
  return first_shifted(cfg_.partitions, shift_, [t](const Partition& q) { return t >= q.start_s && t < q.end_s; });
}

std::optional<Partition> WanLink::partition_starting_in(double from, double to) const {
  return first_shifted(cfg_.partitions, shift_, [=](const Partition& q) { return q.start_s > from && q.start_s < to; });
}

bool WanLink::partitioned(double t) const { return partition_at(t).has_value(); }

Delivery WanLink::send(std::uint64_t bytes, double now) {
  Delivery d;
  d.sent_at = now;
  double t = std::max(now, busy_until_);
  const double duration = static_cast<double>(bytes) / cfg_.bandwidth_Bps;
  for (;;) {
    if (const auto p = partition_at(t)) t = p->end_s;  // nothing leaves while partitioned
    const double end = t + duration;
    ++d.transmissions;
    if (const auto cut = partition_starting_in(t, end)) {
      // The partition cuts the transmission: what was sent is lost; send again after it heals.
      const auto sent = static_cast<std::uint64_t>((cut->start_s - t) * cfg_.bandwidth_Bps);
      d.wire_bytes += sent;
      busy_.emplace_back(t, cut->start_s);
      t = cut->end_s;
      continue;
    }
    d.wire_bytes += bytes;
    busy_.emplace_back(t, end);
    if (cfg_.loss > 0.0 && rng_.uniform() < cfg_.loss) {
      t = end + cfg_.retransmit_timeout_s;  // noticed missing, then sent again
      continue;
    }
    busy_until_ = end;
    const double jitter = cfg_.jitter_s > 0.0 ? cfg_.jitter_s * (2.0 * rng_.uniform() - 1.0) : 0.0;
    d.delivered_at = std::max(end + cfg_.latency_s + jitter, last_delivery_);
    last_delivery_ = d.delivered_at;
    break;
  }
  bytes_ += d.wire_bytes;
  payload_ += bytes;
  ++messages_;
  retransmissions_ += static_cast<std::uint64_t>(d.transmissions - 1);
  return d;
}

double WanLink::peak_utilisation(double window_s) const {
  // Slide a window starting at each transmission start; intervals are in send order.
  double best = 0.0;
  for (std::size_t i = 0; i < busy_.size(); ++i) {
    const double lo = busy_[i].first, hi = lo + window_s;
    double used = 0.0;
    for (std::size_t j = i; j < busy_.size() && busy_[j].first < hi; ++j)
      used += std::min(busy_[j].second, hi) - busy_[j].first;
    best = std::max(best, used / window_s);
  }
  return std::min(best, 1.0);
}

}  // namespace diloco
