// Faults (faults.hpp): every source becomes a Fault, and one fire() carries it out; the driver
// plays the timed schedule. The driver stands outside the supervision tree, like a chaos monkey:
// it kills, the supervisors restart, the repair window keeps the restarted unit out until it is
// over.
#include "diloco/actors/faults.hpp"

#include <algorithm>

#include <caf/actor_system.hpp>
#include <caf/send.hpp>
#include <caf/system_messages.hpp>
#include <spdlog/spdlog.h>

#include "detail.hpp"
#include "diloco/actors/runtime.hpp"

namespace diloco::actors {

namespace {

using chaos_atom = caf::atom_constant<caf::atom("dl_chaos")>;
using chaos_late_atom = caf::atom_constant<caf::atom("dl_chlate")>;

bool runs_island(const SpawnSet& what, int i) {
  return what.all_islands || std::find(what.islands.begin(), what.islands.end(), i) != what.islands.end();
}

}  // namespace

Fault Fault::of(const ChaosEvent& e) {
  static constexpr FaultKind kinds[] = {FaultKind::chip, FaultKind::island, FaultKind::syncer, FaultKind::straggle,
                                        FaultKind::partition};  // by ChaosEvent::Kind
  Fault f;
  f.kind = kinds[e.kind];
  f.island = e.island, f.chip = e.chip, f.site = e.site;
  f.duration_s = e.duration_s, f.factor = e.factor;
  f.with_chips = true;
  f.description = e.describe();
  return f;
}

Fault Fault::of(const FaultSpec& s, long step) {
  Fault f;
  f.kind = s.kill;
  f.island = s.island, f.chip = s.kill == FaultKind::chip ? s.chip : -1;
  f.duration_s = s.duration_s, f.factor = s.factor, f.step = step;
  f.description = fmt::format("{} {}{} at island {} step {}", s.kill == FaultKind::straggle ? "slow" : "kill",
                              s.kill == FaultKind::straggle ? std::string_view("island") : name_of(s.kill),
                              s.kill == FaultKind::chip ? fmt::format(" {}", s.chip) : std::string(), s.island, step);
  return f;
}

FaultWindows::FaultWindows(int islands, int max_chips, std::size_t step_faults)
    : island_(static_cast<std::size_t>(islands)), chip_(static_cast<std::size_t>(islands)),
      straggle_until_(static_cast<std::size_t>(islands)), straggle_factor_(static_cast<std::size_t>(islands)),
      fired_(step_faults) {
  for (auto& r : island_) r = 0.0;
  for (auto& v : chip_) {
    v = std::vector<std::atomic<double>>(static_cast<std::size_t>(max_chips));
    for (auto& r : v) r = 0.0;
  }
  for (auto& u : straggle_until_) u = 0.0;
  for (auto& f : straggle_factor_) f = 1.0;
  for (auto& f : fired_) f = false;
}

double FaultWindows::slowdown(int island, double now) const {
  const auto i = static_cast<std::size_t>(island);
  return i < straggle_until_.size() && now < straggle_until_[i].load() ? straggle_factor_[i].load() : 1.0;
}

void fire(caf::event_based_actor* self, Runtime& rt, const Fault& f, const SpawnSet& what) {
  if (f.kind == FaultKind::syncer ? !what.syncer
                                  : f.kind != FaultKind::partition && !runs_island(what, f.island))
    return;
  const double now = detail::now_s(self);
  const double back = now + f.duration_s;  // repair time (0: at once)
  const std::string line = "injected fault: " + f.description;
  rt.emit(Event::fault_fired(now, f.kind, f.island, f.chip, f.step, line, f.duration_s));
  spdlog::warn("{}", line);
  auto& w = rt.windows;
  const auto reason = caf::make_error(caf::sec::runtime_error, line);
  // A unit that is told to kill itself quits at once; any other gets an exit message.
  auto kill = [&](const caf::actor& a) {
    if (a && a.address() == self->address()) self->quit(reason);
    else exit_signal(a, reason);
  };
  const auto i = static_cast<std::size_t>(f.island);
  switch (f.kind) {
    case FaultKind::chip:
      w.chip_[i][static_cast<std::size_t>(f.chip)] = back;
      kill(rt.dir.chip(f.island, f.chip));
      break;
    case FaultKind::island:
      w.island_[i] = back;
      if (f.with_chips)  // the island and its chips go down together (a host or a slice lost)
        for (int c = 0; c < rt.cfg.islands.chips_of(f.island); ++c) {
          w.chip_[i][static_cast<std::size_t>(c)] = back;
          kill(rt.dir.chip(f.island, c));
        }
      kill(rt.dir.island(f.island));
      break;
    case FaultKind::syncer:
      w.syncer_ = back;
      kill(rt.dir.syncer());
      break;
    case FaultKind::straggle:
      w.straggle_factor_[i] = f.factor;
      w.straggle_until_[i] = back;
      break;
    case FaultKind::partition:
      break;  // the site's links hold their frames for the window (SiteLinks)
  }
}

void fire_step_faults(caf::event_based_actor* self, Runtime& rt, int island, long step) {
  SpawnSet here;
  here.syncer = true;  // a step fault may kill the syncer of this process
  for (std::size_t k = 0; k < rt.cfg.faults.size(); ++k) {
    const auto& f = rt.cfg.faults[k];
    if (f.at_step < 1 || f.island != island || f.at_step != step || !rt.windows.claim(k)) continue;
    fire(self, rt, Fault::of(f, step), here);
  }
}

namespace {

caf::behavior driver_actor(caf::event_based_actor* self, std::shared_ptr<Runtime> rt, SpawnSet what, caf::actor root) {
  detail::guard(self, "chaos");
  // It ends with the tree it torments.
  self->monitor(root);
  self->set_down_handler([self](caf::down_msg& m) { self->quit(m.reason); });
  // When event k falls on this process's clock: a partition of a site on another clock
  // (SiteLinks::align) begins when that site's clock says, its links hold frames from then on,
  // and the fault is reported then.
  auto due_at = [rt](std::size_t k) {
    const auto& e = rt->schedule[k];
    return rt->t0.load() + e.at_s + (e.kind == ChaosEvent::partition ? rt->links.clock_offset(e.site).value_or(0.0) : 0.0);
  };
  // A partition of a site in another process whose clock the syncer does not know yet (it has
  // not joined): when it falls is unknown until it joins.
  auto clock_unknown = [rt, what](const ChaosEvent& e) {
    if (e.kind != ChaosEvent::partition || !what.syncer || rt->links.clock_offset(e.site)) return false;
    for (int i = 0; i < rt->cfg.train.islands; ++i)
      if (site_of(rt->cfg, i) == e.site && runs_island(what, i)) return false;  // a site of this process
    return true;
  };
  // Event k now, or put off (chaos_late_atom) until its site's clock says or is known.
  auto play = [self, rt, what, due_at, clock_unknown](std::size_t k) {
    if (rt->all_done()) return;  // the run is over
    const auto& e = rt->schedule[k];
    const double late = clock_unknown(e) ? 0.1 : e.kind == ChaosEvent::partition ? due_at(k) - detail::now_s(self) : 0.0;
    if (late > 1e-3) self->delayed_send(self, detail::micros(late), chaos_late_atom::value, static_cast<std::uint64_t>(k));
    else fire(self, *rt, Fault::of(e), what);
  };
  // One timer at a time: the next event is armed when the previous one fired, at its time on
  // this process's clock or earlier for a partition of a site whose clock is ahead; a partition
  // due later on its site's clock is put off when its timer comes (play), so that it never holds
  // back the events after it.
  auto arm = [self, rt, due_at](std::size_t k) {
    if (k >= rt->schedule.size()) return;
    const double at = std::min(rt->t0.load() + rt->schedule[k].at_s, due_at(k));
    self->delayed_send(self, detail::micros(at - detail::now_s(self)), chaos_atom::value, static_cast<std::uint64_t>(k));
  };
  arm(0);
  return {
      [=](chaos_atom, std::uint64_t k) {
        if (rt->all_done()) return;  // the run is over
        play(k);
        arm(k + 1);
      },
      [=](chaos_late_atom, std::uint64_t k) { play(k); },
  };
}

}  // namespace

caf::actor spawn_fault_driver(caf::actor_system& sys, std::shared_ptr<Runtime> rt, SpawnSet what, caf::actor root) {
  return sys.spawn(driver_actor, std::move(rt), std::move(what), std::move(root));
}

}  // namespace diloco::actors
