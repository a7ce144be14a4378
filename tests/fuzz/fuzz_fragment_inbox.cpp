// libFuzzer target: FragmentInbox::receive, the syncer's validating fragment decoder.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "fuzz_targets.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const diloco::WireContext ctx = diloco::fuzz::inbox_context();
  diloco::FragmentInbox inbox(ctx);
  std::vector<float> out(64, 0.0f);
  auto frame = std::as_bytes(std::span(data, size));
  auto r = inbox.receive(frame, out);
  if (r) {
    for (std::size_t i = 0; i < r->count; ++i)
      if (!std::isfinite(out[i])) __builtin_trap();  // accepted values are always finite
  } else if (inbox.rejected().total() != 1) {
    __builtin_trap();  // every rejection is counted
  }
  std::vector<double> outd(64, 0.0);
  auto rd = inbox.receive(frame, outd);
  if (rd.has_value() != r.has_value()) __builtin_trap();
  return 0;
}
