// libFuzzer target: a whole session of frames a syncer's relay takes from a site, applied in
// order to one syncer, and the syncer's state saved and restored at the end. Input: records of
// [path byte][u16 little-endian length][frame] (path % 4: 0 join, 1 progress, 2 fragment, 3 a
// poll, which takes no length or frame), at most 32 of them; time goes up by one second a record.
//
// Checked after every record: the relay's check (admit_site_frame) passes only the path's message
// type from the site's own islands; every refusal of a fragment is counted; rounds only go up; a
// join reply re-decodes; the global parameters stay finite unless health() says why. At the end:
// the snapshot restores into a new syncer that holds the same rounds, bit-identical parameters,
// and the same last steps and finished islands (what a restarted syncer goes on from).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "fuzz_targets.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace diloco;
  static const fuzz::SiteRun run;
  SyncerCore core = run.core();
  const int P = run.plan.count();
  std::vector<std::uint64_t> rounds(static_cast<std::size_t>(P), 0);
  auto check_rounds = [&] {
    for (int p = 0; p < P; ++p) {
      if (core.round(p) < rounds[static_cast<std::size_t>(p)]) __builtin_trap();  // rounds only go up
      rounds[static_cast<std::size_t>(p)] = core.round(p);
    }
  };
  auto check_finite = [&] {
    for (float x : core.params())
      if (!std::isfinite(x) && core.health()) __builtin_trap();  // a diverged merge is never silent
  };
  double now = 0.0;
  std::size_t at = 0;
  for (int record = 0; record < 32 && at < size; ++record) {
    now += 1.0;
    const std::uint8_t path = data[at++] % 4;
    if (path == 3) {
      for (const auto& c : core.poll(now))
        if (!c.finite && core.health()) __builtin_trap();
      check_rounds();
      check_finite();
      continue;
    }
    if (size - at < 2) break;
    std::size_t len = static_cast<std::size_t>(data[at]) | static_cast<std::size_t>(data[at + 1]) << 8;
    at += 2;
    len = std::min(len, size - at);
    const auto frame = std::as_bytes(std::span(data + at, len));
    at += len;
    fuzz::apply_site_frame(run, core, path, frame, now);
    check_rounds();
    check_finite();
  }
  if (!core.health()) return 0;
  // What a restarted syncer goes on from: exactly what this one holds.
  SyncerCore restored = run.core();
  if (!restored.restore(core.snapshot())) __builtin_trap();
  for (int p = 0; p < P; ++p)
    if (restored.round(p) != core.round(p)) __builtin_trap();
  const auto a = core.params(), b = restored.params();
  if (a.size() != b.size() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) != 0) __builtin_trap();
  for (int i = 0; i < run.settings.islands; ++i)
    if (restored.last_step(i) != core.last_step(i) || restored.finished(i) != core.finished(i)) __builtin_trap();
  return 0;
}
