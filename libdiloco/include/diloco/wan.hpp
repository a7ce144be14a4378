// Emulated wide-area links as plain code: a bandwidth queue serialising messages in order,
// latency with jitter, loss with retransmission and partitions that start and heal. Time is
// passed in and randomness is seeded, so a link replays exactly; every byte sent is counted.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "diloco/rng.hpp"

namespace diloco {

/// A window of time during which a link carries nothing.
struct Partition {
  double start_s = 0.0;
  double end_s = 0.0;
};

/// One direction of a WAN link.
struct LinkConfig {
  double bandwidth_Bps = 625e6;      // bytes per second (5 Gbit/s)
  double latency_s = 0.03;           // one-way propagation delay
  double jitter_s = 0.0;             // uniform ± around the latency
  double loss = 0.0;                 // probability that one transmission of a message is lost
  double retransmit_timeout_s = 0.2; // a lost transmission is sent again this long after it ended
  std::vector<Partition> partitions; // sorted, non-overlapping
  std::uint64_t seed = 1;
};

/// Problems with a link config ("links.bandwidth: ..."); empty when valid.
std::vector<std::string> validate(const LinkConfig& cfg, const std::string& name = "link");

/// What happened to one message.
struct Delivery {
  double sent_at = 0.0;        // when the application handed it over
  double delivered_at = 0.0;   // when the receiver has it (in order)
  int transmissions = 0;       // 1 + retransmissions
  std::uint64_t wire_bytes = 0;// bytes put on the link for it, retransmissions included
};

/// A TCP-like ordered byte stream over an emulated WAN: each message waits for the link,
/// occupies it for bytes / bandwidth, then arrives latency ± jitter later, never before the
/// message ahead of it. A transmission that is lost, or that a partition cuts, is sent again
/// (after the retransmission timeout, or once the partition heals) and its bytes count again.
class WanLink {
public:
  explicit WanLink(LinkConfig cfg);
  /// Sends `bytes` at time `now` (seconds); calls must come with non-decreasing `now`.
  Delivery send(std::uint64_t bytes, double now);
  /// When the link finishes transmitting what it was given so far (0 before the first send):
  /// a sender that can wait, and coalesce what it has, sends once the link is free.
  double busy_until() const { return busy_until_; }
  /// Whether the link is inside a partition at `t`.
  bool partitioned(double t) const;
  /// Moves the configured partitions `by` seconds later (earlier when negative) on this link's
  /// clock, from where the config put them (not cumulative): the partitions of a site whose
  /// process counts time from another start than the process that holds this link.
  void shift_partitions(double by) { shift_ = by; }
  std::uint64_t bytes_carried() const { return bytes_; }  // all transmissions
  std::uint64_t payload_bytes() const { return payload_; } // each message once
  std::uint64_t messages() const { return messages_; }
  std::uint64_t retransmissions() const { return retransmissions_; }
  /// Largest share of a window of `window_s` seconds the link spent transmitting (peak use).
  double peak_utilisation(double window_s) const;
  const LinkConfig& config() const { return cfg_; }

private:
  std::optional<Partition> partition_at(double t) const;  // shifted
  std::optional<Partition> partition_starting_in(double from, double to) const;
  LinkConfig cfg_;
  double shift_ = 0.0;  // shift_partitions()
  Rng rng_;
  double busy_until_ = 0.0;
  double last_delivery_ = 0.0;
  std::uint64_t bytes_ = 0, payload_ = 0, messages_ = 0, retransmissions_ = 0;
  std::vector<std::pair<double, double>> busy_;  // transmission intervals, for peak use
};

}  // namespace diloco
