// libFuzzer target: codec decode of raw payloads. Input: encoding byte, 4-byte block size,
// 2-byte count, then scales (4 bytes each, as many as the block size implies) and the payload.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "diloco/codec.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 7) return 0;
  diloco::CodecParams p;
  p.encoding = static_cast<diloco::Encoding>(data[0] % 8);  // includes unknown ids 5..7
  std::memcpy(&p.block_size, data + 1, 4);
  std::uint16_t n16;
  std::memcpy(&n16, data + 5, 2);
  const std::size_t n = n16;
  data += 7;
  size -= 7;
  // No encoding packs more than two values into a byte: a larger count is refused by the length
  // check, which smaller counts reach as well, and would only make every run cost O(count).
  if (n > 2 * size + 64) return 0;
  std::vector<float> scales;
  if (diloco::check(p)) {
    const std::size_t ns = std::min(diloco::scale_count(p, n), size / 4);
    scales.resize(ns);
    if (ns) std::memcpy(scales.data(), data, 4 * ns);
    data += 4 * ns;
    size -= 4 * ns;
  }
  diloco::EncodedView v(p, n, scales, std::span<const std::uint8_t>(data, size));
  std::vector<float> out(n, 1.0f);
  auto st = diloco::decode(v, std::span<float>(out));
  for (float x : out)
    if (!std::isfinite(x) || (!st && x != 0.0f)) __builtin_trap();  // finite, and zeroed on failure
  if (st) {
    // Re-encoding what was decoded must succeed (it is finite).
    if (!diloco::encode(diloco::CodecParams{p.encoding, p.block_size}, out)) __builtin_trap();
  }
  return 0;
}
