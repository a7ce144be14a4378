// OTP supervision decisions: which children to stop and start, when, and when to give up.
#include "diloco/supervision.hpp"

#include <algorithm>
#include <cmath>
#include <set>
#include <stdexcept>

#include "diloco/limits.hpp"

namespace diloco {

Strategy parse_strategy(const std::string& s) {
  if (s == "one_for_one") return Strategy::one_for_one;
  if (s == "one_for_all") return Strategy::one_for_all;
  if (s == "rest_for_one") return Strategy::rest_for_one;
  throw std::invalid_argument("supervision.strategy: must be one_for_one, one_for_all or rest_for_one (got \"" + s + "\")");
}

Restart parse_restart(const std::string& s) {
  if (s == "permanent") return Restart::permanent;
  if (s == "transient") return Restart::transient;
  if (s == "temporary") return Restart::temporary;
  throw std::invalid_argument("restart: must be permanent, transient or temporary (got \"" + s + "\")");
}

const char* to_string(Strategy s) {
  switch (s) {
    case Strategy::one_for_one: return "one_for_one";
    case Strategy::one_for_all: return "one_for_all";
    case Strategy::rest_for_one: return "rest_for_one";
  }
  return "?";
}

const char* to_string(Restart r) {
  switch (r) {
    case Restart::permanent: return "permanent";
    case Restart::transient: return "transient";
    case Restart::temporary: return "temporary";
  }
  return "?";
}

std::vector<std::string> validate(const SupervisorFlags& f, const std::vector<ChildSpec>& children) {
  std::vector<std::string> e;
  if (f.intensity < 0) e.push_back("supervision.intensity: must be ≥ 0");
  if (!(f.period_s > 0.0)) e.push_back("supervision.period_s: must be positive");
  if (!(f.backoff_initial_s >= 0.0)) e.push_back("supervision.backoff_initial_s: must be ≥ 0");
  if (!(f.backoff_max_s >= f.backoff_initial_s)) e.push_back("supervision.backoff_max_s: must be ≥ backoff_initial_s");
  if (!(f.backoff_factor >= 1.0)) e.push_back("supervision.backoff_factor: must be ≥ 1");
  // Periods and back-offs become timer ticks: at most kMaxDurationS.
  for (auto [v, key] : {std::pair{f.period_s, "period_s"}, {f.backoff_initial_s, "backoff_initial_s"},
                        {f.backoff_max_s, "backoff_max_s"}})
    if (std::isfinite(v) && v > kMaxDurationS)
      e.push_back(std::string("supervision.") + key + ": must be at most 30 days (2592000 s)");
  std::set<std::string> ids;
  for (const auto& c : children) {
    if (c.id.empty()) e.push_back("child: empty id");
    else if (!ids.insert(c.id).second) e.push_back("child " + c.id + ": duplicate id");
    if (!(c.shutdown_timeout_s >= 0.0)) e.push_back("child " + c.id + ": shutdown timeout must be ≥ 0");
  }
  return e;
}

int RestartIntensity::recent(double now) const {
  while (!times_.empty() && times_.front() <= now - period_) times_.pop_front();
  return static_cast<int>(times_.size());
}

bool RestartIntensity::admit(double now) {
  if (recent(now) >= max_) return false;
  times_.push_back(now);
  return true;
}

SupervisorPolicy::SupervisorPolicy(SupervisorFlags flags, std::vector<ChildSpec> children)
    : flags_(flags),
      children_(std::move(children)),
      active_(children_.size(), true),
      intensity_(flags.intensity, flags.period_s),
      per_child_(children_.size(), RestartIntensity(1 << 30, flags.period_s)) {
  if (auto e = validate(flags_, children_); !e.empty()) throw std::invalid_argument(e.front());
}

double SupervisorPolicy::backoff(std::size_t index, double now) {
  // Exponential in the child's restarts within the intensity period, capped.
  const int n = per_child_[index].recent(now);
  per_child_[index].admit(now);
  return std::min(flags_.backoff_max_s, flags_.backoff_initial_s * std::pow(flags_.backoff_factor, n));
}

SupervisorDecision SupervisorPolicy::on_exit(std::size_t index, bool abnormal, double now) {
  SupervisorDecision d;
  if (index >= children_.size() || !active_[index]) return d;
  const Restart r = children_[index].restart;
  if (r == Restart::temporary || (r == Restart::transient && !abnormal)) {
    // Not restarted. A temporary child leaves; a transient one that finished stays out too.
    active_[index] = false;
    d.remove.push_back(index);
    return d;
  }
  if (!intensity_.admit(now)) {
    d.action = SupervisorDecision::escalate;
    for (auto i : shutdown_order())
      if (i != index) d.stop.push_back(i);
    return d;
  }
  d.action = SupervisorDecision::restart;
  d.delay_s = backoff(index, now);
  std::size_t first = index, last = index;
  if (flags_.strategy == Strategy::one_for_all) first = 0, last = children_.size() - 1;
  if (flags_.strategy == Strategy::rest_for_one) last = children_.size() - 1;
  for (std::size_t i = last + 1; i-- > first;) {
    if (i == index || !active_[i]) continue;
    d.stop.push_back(i);
  }
  for (std::size_t i = first; i <= last; ++i) {
    if (!active_[i]) continue;
    if (i != index && children_[i].restart == Restart::temporary) {
      // OTP: a temporary sibling stopped by the strategy is not restarted.
      active_[i] = false;
      d.remove.push_back(i);
      continue;
    }
    d.start.push_back(i);
  }
  return d;
}

std::vector<std::size_t> SupervisorPolicy::shutdown_order() const {
  std::vector<std::size_t> out;
  for (std::size_t i = children_.size(); i-- > 0;)
    if (active_[i]) out.push_back(i);
  return out;
}

}  // namespace diloco
