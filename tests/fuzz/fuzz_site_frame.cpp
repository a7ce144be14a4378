// libFuzzer target: a frame a syncer's relay takes from a site, through the checks and state the
// syncer applies. Input: one byte naming the relay's path (join, progress, fragment), then the
// frame. admit_site_frame (the relay's check: decode, message type, the site's islands), then
// what the syncer does with it: a join answers with the global parameters, progress is heard,
// a fragment goes through SyncerCore::receive and a poll that may commit it.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>

#include "fuzz_targets.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace diloco;
  static const fuzz::SiteRun run;
  if (size < 1) return 0;
  const MessageType paths[] = {MessageType::join_request, MessageType::progress, MessageType::fragment};
  const MessageType want = paths[data[0] % 3];
  const auto frame = std::as_bytes(std::span(data + 1, size - 1));
  auto f = admit_site_frame(frame, want, run.site_islands, "b");
  if (!f) return 0;
  if (type_of(f->message) != want) __builtin_trap();
  if (f->island != run.site_islands[0] && f->island != run.site_islands[1]) __builtin_trap();
  SyncerCore core = run.core();
  switch (want) {
    case MessageType::join_request:
      (void)core.join_reply(f->island);
      break;
    case MessageType::progress: {
      const auto& pm = std::get<ProgressMessage>(f->message);
      core.heard(pm.island, pm.local_step);
      if (core.last_step(pm.island) != pm.local_step) __builtin_trap();
      if (pm.finished) core.finish(pm.island, true);
      (void)core.poll(1.0);
      break;
    }
    default: {
      const auto before = core.stats().rejected.total();
      auto h = core.receive(frame, 1.0);
      if (!h && core.stats().rejected.total() != before + 1) __builtin_trap();  // every refusal counted
      if (h && h->island != f->island) __builtin_trap();
      bool finite = true;
      for (const auto& c : core.poll(1e9)) finite = finite && c.finite;
      for (float x : core.params()) finite = finite && std::isfinite(x);
      if (!finite && core.health()) __builtin_trap();  // a diverged merge is never silent
      break;
    }
  }
  return 0;
}
