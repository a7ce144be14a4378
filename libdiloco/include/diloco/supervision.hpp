// OTP-style supervision policy as plain code (Erlang `supervisor`): child specs, restart types,
// strategies, sliding-window restart intensity and exponential back-off. The supervisor actor
// in actors/ only executes the decisions made here.
#pragma once

#include <cstddef>
#include <deque>
#include <string>
#include <vector>

namespace diloco {

/// When a child that stopped is restarted (OTP restart types).
enum class Restart {
  permanent,  // always
  transient,  // only after an abnormal exit
  temporary,  // never; the child is removed
};

/// Which children a child's failure takes down and brings back (OTP strategies).
enum class Strategy {
  one_for_one,   // only the failed child
  one_for_all,   // every child
  rest_for_one,  // the failed child and every child started after it
};

/// One child: its id, restart type and how long it gets to stop cleanly.
struct ChildSpec {
  std::string id;
  Restart restart = Restart::permanent;
  double shutdown_timeout_s = 5.0;
};

/// Supervisor settings: strategy, intensity (at most `intensity` restarts in `period_s`
/// seconds, else the supervisor gives up and fails to its parent) and restart back-off.
struct SupervisorFlags {
  Strategy strategy = Strategy::one_for_one;
  int intensity = 3;
  double period_s = 5.0;
  double backoff_initial_s = 0.05;  // delay before the first restart of a child
  double backoff_max_s = 2.0;       // cap of the exponential back-off
  double backoff_factor = 2.0;
};

/// Problems with flags or child specs ("supervision.intensity: ..."); empty when valid.
std::vector<std::string> validate(const SupervisorFlags& flags, const std::vector<ChildSpec>& children);
Strategy parse_strategy(const std::string& s);   // throws std::invalid_argument naming the value
Restart parse_restart(const std::string& s);
const char* to_string(Strategy s);
const char* to_string(Restart r);

/// Sliding-window restart intensity: allows `max_restarts` within any `period_s` window.
class RestartIntensity {
public:
  RestartIntensity(int max_restarts, double period_s) : max_(max_restarts), period_(period_s) {}
  /// Records a restart at `now`; false when it would exceed the intensity (the supervisor must fail).
  bool admit(double now);
  /// Restarts inside the window ending at `now`.
  int recent(double now) const;

private:
  int max_;
  double period_;
  mutable std::deque<double> times_;
};

/// What the supervisor does about one child exit.
struct SupervisorDecision {
  enum Action {
    ignore,    // nothing to restart (normal exit of a transient/temporary, or temporary crash)
    restart,   // stop `stop` (in this order), then after `delay_s` start `start` (in this order)
    escalate,  // intensity exceeded: stop every child (reverse start order) and fail upward
  } action = ignore;
  std::vector<std::size_t> stop;   // children to stop, reverse start order (excludes the dead one)
  std::vector<std::size_t> start;  // children to (re)start, start order
  std::vector<std::size_t> remove; // temporary children that leave the supervisor for good
  double delay_s = 0.0;
};

/// The decisions of one supervisor over its children (indices are start order).
class SupervisorPolicy {
public:
  SupervisorPolicy(SupervisorFlags flags, std::vector<ChildSpec> children);
  /// Child `index` exited at `now`; `abnormal` is false for a normal shutdown.
  SupervisorDecision on_exit(std::size_t index, bool abnormal, double now);
  /// Order to stop everything (reverse start order) when the supervisor itself shuts down.
  std::vector<std::size_t> shutdown_order() const;
  const std::vector<ChildSpec>& children() const { return children_; }
  const SupervisorFlags& flags() const { return flags_; }
  /// Whether child i is still supervised (temporary children leave after they stop).
  bool active(std::size_t i) const { return active_[i]; }

private:
  double backoff(std::size_t index, double now);
  SupervisorFlags flags_;
  std::vector<ChildSpec> children_;
  std::vector<bool> active_;
  RestartIntensity intensity_;
  std::vector<RestartIntensity> per_child_;  // recent restarts of each child, for back-off
};

}  // namespace diloco
