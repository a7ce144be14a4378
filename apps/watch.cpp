// The one watch loop (watch.hpp).
#include "watch.hpp"

#include <chrono>
#include <cmath>
#include <thread>

#include <caf/actor_system.hpp>

#include "diloco/budget.hpp"

WatchEnd watch(const WatchRules& rules, const std::function<void()>& tick, const WatchClock& clock) {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  std::function<double()> now = clock.now ? clock.now : [t0] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  auto advance = clock.advance ? clock.advance : [] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return true;
  };
  double trained_at = NAN, done_at = NAN;
  WatchEnd end;
  for (;;) {
    tick();
    if (rules.failed && rules.failed()) return {WatchEnd::How::tree_failed, {}};
    if (rules.stopped)
      if (auto why = rules.stopped()) return {WatchEnd::How::stopped, *why};
    if (std::isnan(done_at)) {
      if (rules.done()) {
        done_at = now();
        end.how = WatchEnd::How::done;
        if (rules.on_end) rules.on_end();
      } else if (rules.final_sync_s && rules.trained && rules.trained()) {
        // The final sync: the islands' last contributions are on their way to a merge.
        if (std::isnan(trained_at)) trained_at = now();
        if (diloco::final_sync_expired(trained_at, now(), *rules.final_sync_s)) {
          if (rules.on_end) rules.on_end();
          tick();
          return {WatchEnd::How::final_sync_expired, {}};
        }
      }
    }
    if (!std::isnan(done_at) && now() - done_at >= rules.linger_s) {
      tick();
      return end;
    }
    if (!advance()) {
      tick();
      if (!std::isnan(done_at)) return end;
      return {WatchEnd::How::stopped, "the simulation has nothing left to run, and the run has not ended"};
    }
  }
}

double actor_seconds(caf::actor_system& sys) {
  return std::chrono::duration<double>(sys.clock().now().time_since_epoch()).count();
}
