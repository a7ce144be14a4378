// Each site's emulated WAN links (link.hpp): built from [wan], [[sites]] and the scheduled
// partitions; every frame between an island and the syncer goes through its site's link.
#include "diloco/actors/link.hpp"

#include <algorithm>

namespace diloco::actors {

SiteLinks::SiteLinks(const RunConfig& cfg, const std::vector<ChaosEvent>& schedule) : cfg_(cfg) {
  // Links per site: emulated WAN when enabled; an ideal link (no delay) that only honours the
  // scheduled partitions otherwise.
  const int S = site_count(cfg);
  std::vector<std::vector<Partition>> cuts(static_cast<std::size_t>(S));
  for (const auto& e : schedule)
    if (e.kind == ChaosEvent::partition && e.site >= 0 && e.site < S)
      cuts[static_cast<std::size_t>(e.site)].push_back({e.at_s, e.at_s + e.duration_s});
  bool any_cut = false;
  for (auto& v : cuts) {
    // Overlapping cuts (a [[faults]] partition inside a chaos one) become one.
    std::sort(v.begin(), v.end(), [](const Partition& a, const Partition& b) { return a.start_s < b.start_s; });
    std::vector<Partition> merged;
    for (const auto& p : v) {
      if (!merged.empty() && p.start_s <= merged.back().end_s) merged.back().end_s = std::max(merged.back().end_s, p.end_s);
      else merged.push_back(p);
    }
    v = std::move(merged);
    any_cut = any_cut || !v.empty();
  }
  if (!cfg.wan.enabled && !any_cut) return;
  for (int s = 0; s < S; ++s) {
    auto up = link_config(cfg, s, true), down = link_config(cfg, s, false);
    if (!cfg.wan.enabled)
      for (auto* l : {&up, &down}) l->bandwidth_Bps = 1e18, l->latency_s = 0.0, l->jitter_s = 0.0, l->loss = 0.0;
    up.partitions = down.partitions = cuts[static_cast<std::size_t>(s)];
    sites_.push_back(std::make_unique<Site>(std::move(up), std::move(down)));
  }
}

double SiteLinks::delay(int island, bool up, std::size_t bytes, double now) {
  const int site = site_of(cfg_, island);
  if (sites_.empty() || site < 0 || static_cast<std::size_t>(site) >= sites_.size()) return 0.0;
  auto& l = *sites_[static_cast<std::size_t>(site)];
  std::lock_guard lk(l.mu);
  return (up ? l.up : l.down).send(bytes, now).delivered_at - now;
}

double SiteLinks::busy_until(int island, bool up) const {
  const int site = site_of(cfg_, island);
  if (sites_.empty() || site < 0 || static_cast<std::size_t>(site) >= sites_.size()) return 0.0;
  auto& l = *sites_[static_cast<std::size_t>(site)];
  std::lock_guard lk(l.mu);
  return (up ? l.up : l.down).busy_until();
}

void SiteLinks::align(int island, double offset_s) {
  const int site = site_of(cfg_, island);
  if (sites_.empty() || site < 0 || static_cast<std::size_t>(site) >= sites_.size()) return;
  auto& l = *sites_[static_cast<std::size_t>(site)];
  std::lock_guard lk(l.mu);
  l.offset = offset_s;
  l.up.shift_partitions(offset_s);
  l.down.shift_partitions(offset_s);
}

std::optional<double> SiteLinks::clock_offset(int site) const {
  if (site < 0 || static_cast<std::size_t>(site) >= sites_.size()) return std::nullopt;
  auto& l = *sites_[static_cast<std::size_t>(site)];
  std::lock_guard lk(l.mu);
  return l.offset;
}

SiteLinks::Totals SiteLinks::totals() const {
  Totals t;
  for (auto& l : sites_) {
    std::lock_guard lk(l->mu);
    t.bytes += l->up.bytes_carried() + l->down.bytes_carried();
    t.retransmissions += l->up.retransmissions() + l->down.retransmissions();
  }
  return t;
}

std::vector<SiteLinks::Report> SiteLinks::report() const {
  std::vector<Report> out;
  for (std::size_t s = 0; s < sites_.size(); ++s) {
    auto& l = *sites_[s];
    std::lock_guard lk(l.mu);
    out.push_back({site_name(cfg_, static_cast<int>(s)), l.up.bytes_carried(), l.down.bytes_carried(), l.up.messages(),
                   l.down.messages(), l.up.peak_utilisation(1.0), l.down.peak_utilisation(1.0), l.up.config().bandwidth_Bps});
  }
  return out;
}

}  // namespace diloco::actors
