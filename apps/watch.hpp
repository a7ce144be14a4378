// One watch loop for every app that runs actors (`diloco run` on the actors, `diloco syncer`,
// `diloco site`): the main thread only watches, draining what the runtime reports, until the run
// ends by the one end-of-run rule (libdiloco/budget.hpp) or cannot go on.
#pragma once

#include <functional>
#include <optional>
#include <string>

namespace caf {
class actor_system;
}

/// The actor clock of `sys` in seconds: the time stamps of the runtime's events (wall time, or
/// a simulated run's virtual time).
double actor_seconds(caf::actor_system& sys);

/// What a watched run is judged by. Every function is called from the watching thread.
struct WatchRules {
  std::function<bool()> done;     // the run is over (every island done)
  std::function<bool()> trained;  // every island trained its budget: the final-sync window opens
  std::optional<double> final_sync_s;  // how long after `trained` to wait for `done` (none: for ever)
  double linger_s = 0.0;          // after `done`, time for the last messages in flight to land
  std::function<bool()> failed;   // the supervision tree stopped
  std::function<std::optional<std::string>()> stopped;  // the run cannot go on, and why
  std::function<void()> on_end;   // called once, the moment the run is over (before lingering)
};

/// How a watched run ended.
struct WatchEnd {
  enum class How { done, final_sync_expired, stopped, tree_failed } how = How::done;
  std::string why;  // stopped: the reason
};

/// The time a watch goes by. By default the wall clock, and the watch sleeps 20 ms between
/// looks; a simulated run (--simulate) gives its virtual clock and a step that runs the pending
/// messages or fires the next timer, false when nothing is left to run.
struct WatchClock {
  std::function<double()> now;
  std::function<bool()> advance;
};

/// Calls `tick` after every advance of the clock (and once more at the end) until the run
/// ends; returns how. A simulation with nothing left to run before the run ended stops, saying so.
WatchEnd watch(const WatchRules& rules, const std::function<void()>& tick, const WatchClock& clock = {});
