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
  std::uint64_t next() { return mix(state_ += 0x9E3779B97F4A7C15ULL); }
  /// SplitMix64's finaliser: a bijection of 64-bit words that scatters every input bit.
  static constexpr std::uint64_t mix(std::uint64_t z) {
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

/// A seeded bijection of [0, n), evaluated one index at a time in O(1) memory: a four-round
/// balanced Feistel network over the smallest even power of two ≥ n, cycle-walked back into
/// [0, n) (Black and Rogaway, "Ciphers with Arbitrary Finite Domains", 2002). Solves "deal out a
/// corpus's windows in a random order" without holding a permutation of billions of indices.
class Permutation {
public:
  /// n ≥ 1; the same (n, seed) gives the same permutation on every platform.
  Permutation(std::uint64_t n, std::uint64_t seed) : n_(n) {
    int bits = 2;
    while (bits < 64 && (n - 1) >> bits) bits += 2;
    half_ = bits / 2;
    mask_ = (std::uint64_t{1} << half_) - 1;
    Rng r(seed);
    for (auto& k : keys_) k = r.next();
  }
  /// The image of i (< n): every i in [0, n) has its own.
  std::uint64_t operator()(std::uint64_t i) const {
    std::uint64_t x = i;
    do x = encrypt(x);
    while (x >= n_);  // the cycle through i comes back into [0, n) before it returns to i
    return x;
  }
  std::uint64_t size() const { return n_; }

private:
  std::uint64_t encrypt(std::uint64_t x) const {
    std::uint64_t l = x >> half_, r = x & mask_;
    for (auto k : keys_) {
      const std::uint64_t t = l ^ (Rng::mix(r + k) & mask_);
      l = r;
      r = t;
    }
    return (l << half_) | r;
  }
  std::uint64_t n_;
  int half_ = 1;
  std::uint64_t mask_ = 1;
  std::uint64_t keys_[4] = {};
};

/// Derives an independent seed for a named sub-stream (island i, chip j, ...).
inline std::uint64_t derive_seed(std::uint64_t seed, std::uint64_t stream) {
  Rng r(seed ^ (stream * 0xD1B54A32D192ED03ULL + 0x8CB92BA72F3D8DD7ULL));
  r.next();
  return r.next();
}

}  // namespace diloco
