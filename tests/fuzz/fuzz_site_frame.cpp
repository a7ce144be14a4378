// libFuzzer target: a frame a syncer's relay takes from a site, through the checks and state the
// syncer applies. Input: one byte naming the relay's path (join, progress, fragment), then the
// frame. fuzz::apply_site_frame (the relay's check, then what the syncer does with it: a join
// answers with the global parameters, progress is heard, a fragment goes through
// SyncerCore::receive), then a poll that may commit it.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>

#include "fuzz_targets.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace diloco;
  static const fuzz::SiteRun run;
  if (size < 1) return 0;
  SyncerCore core = run.core();
  fuzz::apply_site_frame(run, core, data[0] % 3, std::as_bytes(std::span(data + 1, size - 1)), 1.0);
  bool finite = true;
  for (const auto& c : core.poll(1e9)) finite = finite && c.finite;
  for (float x : core.params()) finite = finite && std::isfinite(x);
  if (!finite && core.health()) __builtin_trap();  // a diverged merge is never silent
  return 0;
}
