// Timing helpers the C++ benchmarks share: seconds on the steady clock, and the median of samples.
#pragma once

#include <algorithm>
#include <chrono>
#include <vector>

namespace diloco::bench {

using clock_type = std::chrono::steady_clock;

inline double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

/// The median of `v` (the mean of the two middle values for an even count); `v` must not be empty.
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const auto n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace diloco::bench
