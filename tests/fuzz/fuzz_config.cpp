// libFuzzer target: parse_config, the TOML config loader with its validation. Any text either
// gives a RunConfig that validate() accepts or throws ConfigError; anything else is a bug.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "diloco/config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const auto cfg = diloco::parse_config(text, {}, "fuzz.toml");
    if (!diloco::validate(cfg).empty()) __builtin_trap();  // accepted means valid
  } catch (const diloco::ConfigError& e) {
    if (e.problems().empty()) __builtin_trap();  // a refusal names at least one problem
  } catch (...) {
    __builtin_trap();  // the documented error type only
  }
  return 0;
}
