// Named constructors of the runtime's events.
#include "diloco/events.hpp"

#include <utility>

namespace diloco {

namespace {
Event make(Event::Kind k, double at) {
  Event e;
  e.kind = k;
  e.at = at;
  return e;
}
}  // namespace

Event Event::stepped(double at, int island, long step, int chips, double loss) {
  auto e = make(Kind::step, at);
  e.island = island, e.step = step, e.chips = chips, e.loss = loss;
  return e;
}

Event Event::committed(double at, std::uint64_t round, int fragment, int merged, std::vector<int> islands,
                       std::vector<int> staleness) {
  auto e = make(Kind::commit, at);
  e.round = round, e.fragment = fragment, e.merged = merged, e.islands = std::move(islands);
  e.staleness = std::move(staleness);
  return e;
}

Event Event::joined(double at, int island, std::uint64_t round) {
  auto e = make(Kind::join, at);
  e.island = island, e.round = round;
  return e;
}

Event Event::healed(double at, int island, int incarnation, std::uint64_t round, long step, bool rejoin) {
  auto e = make(rejoin ? Kind::rejoin : Kind::heal, at);
  e.island = island, e.incarnation = incarnation, e.round = round, e.step = step;
  return e;
}

Event Event::restored(double at, std::uint64_t round, std::string how) {
  auto e = make(Kind::restore, at);
  e.round = round, e.detail = std::move(how);
  return e;
}

Event Event::snapshot_taken(double at, std::uint64_t round) {
  auto e = make(Kind::snapshot, at);
  e.round = round;
  return e;
}

Event Event::fault_fired(double at, FaultKind what, int island, int chip, long step, std::string description,
                         double duration_s) {
  auto e = make(Kind::fault, at);
  e.fault = what, e.island = island, e.chip = chip, e.step = step, e.detail = std::move(description);
  e.duration_s = duration_s;
  return e;
}

Event Event::refused(double at, std::string why, std::string reason) {
  auto e = make(Kind::rejected, at);
  e.detail = std::move(why);
  e.reason = std::move(reason);
  return e;
}

Event Event::dropped_late(double at, std::string why) {
  auto e = make(Kind::dropped, at);
  e.detail = std::move(why);
  return e;
}

Event Event::island_done(double at, int island, long step) {
  auto e = make(Kind::done, at);
  e.island = island, e.step = step;
  return e;
}

Event Event::leaving(double at, int island, long step, int unsent) {
  auto e = make(Kind::leave, at);
  e.island = island, e.step = step, e.unsent = unsent;
  return e;
}

Event Event::diverged_state(double at, int island, int fragment, long step, std::string why) {
  auto e = make(Kind::diverged, at);
  e.island = island, e.fragment = fragment, e.step = step, e.detail = std::move(why);
  return e;
}

Event Event::unusable(double at, std::string why) {
  auto e = make(Kind::unusable_state, at);
  e.detail = std::move(why);
  return e;
}

const char* to_string(Event::Kind k) {
  switch (k) {
    case Event::Kind::step: return "step";
    case Event::Kind::commit: return "commit";
    case Event::Kind::join: return "join";
    case Event::Kind::heal: return "heal";
    case Event::Kind::rejoin: return "rejoin";
    case Event::Kind::restore: return "restore";
    case Event::Kind::snapshot: return "snapshot";
    case Event::Kind::fault: return "fault";
    case Event::Kind::rejected: return "rejected";
    case Event::Kind::dropped: return "dropped";
    case Event::Kind::done: return "done";
    case Event::Kind::leave: return "leave";
    case Event::Kind::diverged: return "diverged";
    case Event::Kind::unusable_state: return "unusable_state";
  }
  return "?";
}

}  // namespace diloco
