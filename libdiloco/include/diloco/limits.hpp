// Bounds on the values users bring: how long a timer may be, how much memory a configuration may
// plan for. Policy code takes limits as parameters; these are the documented defaults.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>

namespace diloco {

/// The longest duration any setting may ask for: 30 days. Back-offs, repairs, latencies,
/// timeouts and fault times become integer timer ticks; a bound far inside their range keeps
/// every conversion exact (1e300 s would overflow and fire at once).
inline constexpr double kMaxDurationS = 30.0 * 86400.0;

/// Memory a run configuration may plan for when the caller passes no limit of its own: 1 TiB.
/// `diloco run` and `diloco check` pass the machine's physical memory instead.
inline constexpr std::uint64_t kDefaultMemoryLimit = std::uint64_t{1} << 40;

/// The largest step, token or round count a frame or a saved state may carry: 2^62, what a
/// checkpoint records and reads back. Frames above it are refused when decoded, so a peer's
/// counter can neither wrap a sum nor make the syncer's state unreadable at its next restore.
inline constexpr std::uint64_t kMaxCounter = std::uint64_t{1} << 62;

/// The most tokens one step of one island may count in any run: 2^31, the bound a configuration's
/// batch × (seq_len + 1) is held to. A run's syncer holds outer gradients to its own batch
/// (WireContext::max_tokens_per_step): claiming more tokens than steps × that would weigh more in
/// the token-weighted merge than any island can earn (merge.hpp).
inline constexpr std::uint64_t kMaxTokensPerStep = std::uint64_t{1} << 31;

/// tokens ≤ steps × per_step, without the product (which can wrap for counters up to 2^62).
inline constexpr bool within_tokens_per_step(std::uint64_t tokens, std::uint64_t steps, std::uint64_t per_step) {
  if (steps == 0) return tokens == 0;
  return tokens / steps < per_step || (tokens / steps == per_step && tokens % steps == 0);
}

/// a + b, at most kMaxCounter: counters summed over many frames stay readable.
inline constexpr std::uint64_t add_counters(std::uint64_t a, std::uint64_t b) {
  return a >= kMaxCounter || b >= kMaxCounter - a ? kMaxCounter : a + b;
}

/// Bytes as a short string in binary units: "512 B", "3.2 MiB", "1.2 PiB" (any size, even
/// past 64 bits, since estimates are made in long double).
inline std::string format_bytes(long double bytes) {
  static constexpr const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "ZiB", "YiB"};
  if (!(bytes >= 0) || std::isinf(bytes)) return "an unbounded amount";
  int u = 0;
  while (bytes >= 1024 && u < 8) {
    bytes /= 1024;
    ++u;
  }
  char buf[64];
  if (u == 0) std::snprintf(buf, sizeof buf, "%.0Lf B", bytes);
  else std::snprintf(buf, sizeof buf, bytes < 10 ? "%.1Lf %s" : "%.3Lg %s", bytes, units[u]);
  return buf;
}

}  // namespace diloco
