// What a simulated run pins to replay on any machine (replay.hpp).
#include "diloco/replay.hpp"

#include <cstdlib>
#include <cstring>

#include "gemm.hpp"

namespace diloco {

std::vector<std::pair<std::string, std::string>> replay_environment(const char* tunables) {
  // glibc 2.36 picks exp, log, pow, cos and their float forms by CPU: an FMA variant where FMA and
  // AVX2 are usable (FMA4 on older AMD), else SSE2 (or AVX, the same code in VEX encoding, which
  // rounds as SSE2 does). Masking FMA, FMA4 and AVX2 leaves every x86-64 CPU on the SSE2 results.
  std::string t;
  const std::string hwcaps = "glibc.cpu.hwcaps=";
  for (const char* p = tunables ? tunables : ""; *p;) {
    const char* end = std::strchr(p, ':');
    const std::string item(p, end ? static_cast<std::size_t>(end - p) : std::strlen(p));
    if (!item.empty() && item.compare(0, hwcaps.size(), hwcaps) != 0) t += item + ":";
    p = end ? end + 1 : p + item.size();
  }
  t += hwcaps + "-AVX2,-FMA,-FMA4";
  return {{"GLIBC_TUNABLES", t},
          {"OPENBLAS_CORETYPE", "Prescott"},
          {"ATEN_CPU_CAPABILITY", "default"},
          {"DILOCO_REPLAY_PINNED", "1"}};
}

bool replay_environment_pinned() {
  const char* v = std::getenv("DILOCO_REPLAY_PINNED");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

void pin_products_for_replay() { nn::pin_eigen_gemm(); }

}  // namespace diloco
