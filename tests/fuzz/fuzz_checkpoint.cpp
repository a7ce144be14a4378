// libFuzzer target: parse_checkpoint (read_safetensors, then the diloco metadata and tensors
// against a tiny run) on arbitrary file contents.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>

#include "diloco/checkpoint.hpp"
#include "fuzz_targets.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const diloco::fuzz::TinyRun run;
  auto file = std::as_bytes(std::span(data, size));
  auto cp = diloco::parse_checkpoint(file, run.model->layout(), run.plan);
  if (cp) {
    if (cp->params.size() != run.model->layout().size()) __builtin_trap();
    for (float x : cp->params)
      if (!std::isfinite(x)) __builtin_trap();
  }
  return 0;
}
