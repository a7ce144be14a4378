// libFuzzer target: decode_message, the structural decoder of every frame type.
#include <cstddef>
#include <cstdint>
#include <span>

#include "diloco/wire.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  diloco::WireLimits limits;
  limits.max_fragment_values = 1 << 16;
  limits.max_fragments = 64;
  limits.max_model_values = 1 << 18;
  auto m = diloco::decode_message(std::as_bytes(std::span(data, size)), limits);
  if (m) {
    // Whatever decodes must re-encode and decode to the same type.
    auto again = diloco::decode_message(diloco::encode_message(*m), limits);
    if (!again || again->index() != m->index()) __builtin_trap();
  }
  return 0;
}
