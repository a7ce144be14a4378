// A small deterministic random generator: the same seed gives the same numbers on every
// platform and standard library (std::*_distribution does not promise that).
#pragma once

#include <cmath>
#include <cstdint>

namespace diloco {

/// SplitMix64: one 64-bit state word; used for seeding, sampling data and initialising weights.
class Rng {
public:
  explicit Rng(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  /// Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  /// Uniform integer in [0, n).
  std::uint64_t below(std::uint64_t n) { return static_cast<std::uint64_t>(uniform() * static_cast<double>(n)); }
  /// Standard normal by Box-Muller (one value per call; simple over fast).
  double normal() {
    double u1 = uniform();
    double u2 = uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
  std::uint64_t state() const { return state_; }

private:
  std::uint64_t state_;
};

/// Derives an independent seed for a named sub-stream (island i, chip j, ...).
inline std::uint64_t derive_seed(std::uint64_t seed, std::uint64_t stream) {
  Rng r(seed ^ (stream * 0xD1B54A32D192ED03ULL + 0x8CB92BA72F3D8DD7ULL));
  r.next();
  return r.next();
}

}  // namespace diloco
