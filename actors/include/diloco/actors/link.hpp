// The "link" step of a fragment's life: each site's emulated WAN link to the syncer (both
// directions), what a frame's delivery costs on it, and what the links carried. Every island of
// a site shares its site's links; partitions from the fault schedule hold frames for their window.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <caf/event_based_actor.hpp>

#include "diloco/actors/protocol.hpp"
#include "diloco/chaos.hpp"
#include "diloco/config.hpp"
#include "diloco/wan.hpp"

namespace diloco::actors {

/// Per site an up link (site → syncer) and a down link (syncer → site), when wan.enabled or a
/// partition is scheduled; none otherwise (frames are delivered at once). Safe to use from any
/// actor (one mutex per site).
class SiteLinks {
public:
  SiteLinks(const RunConfig& cfg, const std::vector<ChaosEvent>& schedule);

  bool empty() const { return sites_.empty(); }
  /// Seconds from `now` until a frame of `bytes` between island `island` and the syncer arrives
  /// (0 without links): queued behind earlier frames, latency added, losses resent, held
  /// through partitions. `now` is relative to the run's start.
  double delay(int island, bool up, std::size_t bytes, double now);

  /// When the link between island `island` and the syncer finishes transmitting what it was
  /// given (relative to the run's start; 0 without links): until then a frame would queue.
  double busy_until(int island, bool up) const;

  /// Island `island`'s site counts time from another start: its clock reads `offset_s` seconds
  /// less than this process's run clock (a site process that started later; JoinRequest::run_s).
  /// The site's partitions, which its own process plays on its clock, are moved here to match,
  /// so that both ends of a cut link hold their frames over the same window.
  void align(int island, double offset_s);
  /// How many seconds site `site`'s clock reads less than this process's; nothing until align()
  /// (a site of this process, or one in another process that has not joined yet).
  std::optional<double> clock_offset(int site) const;

  /// What all links carried: bytes (retransmissions included) and retransmissions.
  struct Totals {
    std::uint64_t bytes = 0;
    std::uint64_t retransmissions = 0;
  };
  Totals totals() const;
  /// Per site: bytes each way (retransmissions included) and the busiest second's share of the
  /// link's bandwidth (peak use).
  struct Report {
    std::string site;
    std::uint64_t up_bytes = 0, down_bytes = 0;
    std::uint64_t up_messages = 0, down_messages = 0;  // frames, each once
    double up_peak = 0.0, down_peak = 0.0;  // in [0, 1]
    double bandwidth_Bps = 0.0;
  };
  std::vector<Report> report() const;

private:
  struct Site {
    std::mutex mu;
    WanLink up, down;
    std::optional<double> offset;  // align()
    Site(LinkConfig u, LinkConfig d) : up(std::move(u)), down(std::move(d)) {}
  };
  const RunConfig& cfg_;
  std::vector<std::unique_ptr<Site>> sites_;
};

/// Sends frame `w` with `atom` from `self` to `dest`, `delay` seconds from now (at once when 0):
/// a frame whose link delay the caller took from SiteLinks::delay itself.
template <class Atom>
void deliver_after(caf::event_based_actor* self, double delay, const caf::actor& dest, Atom atom, WireFrame w) {
  if (delay > 0.0) {
    self->delayed_send(dest, std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::duration<double>(delay)),
                       atom, std::move(w));
  } else {
    self->send(dest, atom, std::move(w));
  }
}

/// Sends frame `w` with `atom` from `self` to `dest` over island `island`'s link (`up`: towards
/// the syncer), delivered when the link would deliver it. `t0` is the run's start on the actor
/// clock. Returns the delay it was given.
template <class Atom>
double send_over_link(caf::event_based_actor* self, SiteLinks& links, double t0, int island, bool up,
                      const caf::actor& dest, Atom atom, WireFrame w) {
  const double now = std::chrono::duration<double>(self->clock().now().time_since_epoch()).count();
  const double delay = links.delay(island, up, w.bytes.size(), now - t0);
  deliver_after(self, delay, dest, atom, std::move(w));
  return delay;
}

}  // namespace diloco::actors
