// FNV-1a, 64-bit: the one byte hash behind the library's digests (the fault schedule's hash, the
// final parameters' hash, the invariants' frame and heal digests). Not for security: it names
// values so that two runs, or a frame and a merge, can be compared at a glance.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace diloco {

inline constexpr std::uint64_t kFnvBasis = 0xCBF29CE484222325ULL;  // the 64-bit offset basis
inline constexpr std::uint64_t kFnvPrime = 0x100000001B3ULL;

/// Goes on hashing `bytes` from `h` (start from kFnvBasis).
inline std::uint64_t fnv1a(std::uint64_t h, std::span<const std::byte> bytes) {
  for (std::byte b : bytes) h = (h ^ static_cast<std::uint64_t>(b)) * kFnvPrime;
  return h;
}

/// Goes on hashing the low `n` bytes of `v`, least significant first, so that a hash of numbers
/// is the same on every machine.
inline std::uint64_t fnv1a_le(std::uint64_t h, std::uint64_t v, int n = 8) {
  for (int i = 0; i < n; ++i) h = (h ^ ((v >> (8 * i)) & 0xFF)) * kFnvPrime;
  return h;
}

}  // namespace diloco
