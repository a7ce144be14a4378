// An island's membership with the syncer, or a ddp replica's with the parameter server (private
// to the actors): one join request at a time, the unit it joined, and the one it saw die (the
// directory may still hold it until the successor takes its place).
#pragma once

#include <memory>
#include <optional>

#include <caf/event_based_actor.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/system_messages.hpp>

#include "detail.hpp"
#include "diloco/actors/chip_pool.hpp"
#include "diloco/actors/runtime.hpp"
#include "diloco/island_core.hpp"
#include "diloco/wire.hpp"

namespace diloco::actors {

struct Membership {
  caf::actor syncer;           // the unit joined (or asked to join)
  bool join_inflight = false;  // a join request or retry is under way
  bool requested = false;      // a join request went out and no welcome has come since
  caf::actor_addr dead;        // the unit we saw die
  /// Heals keep the parameters (the island healed once in this life, or was restored from a
  /// saved state): join requests say so (JoinRequest::keeps_local). Never for ddp replicas.
  bool keeps_local = false;

  /// Asks the syncer in the directory to join, as island `island` in its `incarnation`. With
  /// none alive yet, asks again on a timer (a join_atom to itself) unless `after_next_step`
  /// (the caller is training and asks again after its next step).
  /// `holder`: an island's core, whose held global fragments the request names
  /// (JoinRequest::holds: the syncer sends none it holds already); none for a ddp replica.
  void ask(caf::event_based_actor* self, Runtime& rt, int island, int incarnation, bool after_next_step,
           IslandCore* holder = nullptr) {
    if (join_inflight) return;
    auto s = rt.dir.syncer_for(island);
    if (!s || s.address() == dead) {
      if (after_next_step) return;
      join_inflight = true;
      self->delayed_send(self, detail::micros(0.01), join_atom::value);
      return;
    }
    join_inflight = true;
    requested = true;
    if (s != syncer) {
      syncer = s;
      self->monitor(s);
    }
    JoinRequest jr{island, static_cast<std::uint64_t>(incarnation), keeps_local, 0.0, {}};
    if (holder) jr.holds = holder->holds();
    if (!rt.site_process) {
      detail::send_over_link(self, rt, island, true, s, join_atom::value, detail::to_wire(encode_message(jr)));
      return;
    }
    // The request says when it reaches the syncer on this process's clock: the link's delay
    // first (a partition may hold it), then the stamp.
    const double now = detail::now_s(self) - rt.t0.load();
    const double delay = rt.links.delay(island, true, encode_message(jr).size(), now);
    jr.run_s = std::max(0.0, now + delay);
    deliver_after(self, delay, s, join_atom::value, detail::to_wire(encode_message(jr)));
  }

  /// The join_atom of a retry timer: the request it stood for is over; ask again.
  void retry(caf::event_based_actor* self, Runtime& rt, int island, int incarnation, bool after_next_step,
             IslandCore* holder = nullptr) {
    join_inflight = false;
    ask(self, rt, island, incarnation, after_next_step, holder);
  }

  /// The unit we joined died (true): forget it, so that its successor is joined next.
  bool lost(const caf::down_msg& m) {
    if (!syncer || m.source != syncer.address()) return false;
    dead = syncer.address();
    join_inflight = false;
    requested = false;
    syncer = caf::actor{};
    return true;
  }
};

/// The same for an island's or a ddp replica's actor: its state holds `member`, `rt`, `island`,
/// `incarnation`, `core` and `chips` (ChipPool); `State::names_holds` says whether its requests
/// name the fragments its core holds (an island's do; a ddp replica's server sends them all).
/// `after_next_step` where the unit takes its next step by itself: not where a synchronous mode
/// holds it at its round's end for the broadcast, which a lost syncer never sends (it would
/// then wait for good, asking only after a step that cannot come).
template <class State>
bool ask_after_next_step(const State& st, bool after_next_step) {
  return after_next_step && !(st.rt->synchronous() && st.core->must_wait());
}

template <class State>
void ask_to_join(caf::stateful_actor<State>* self, bool after_next_step) {
  auto& st = self->state;
  st.member.ask(self, *st.rt, st.island, st.incarnation, ask_after_next_step(st, after_next_step),
                State::names_holds ? st.core.get() : nullptr);
}

/// The join_atom of a retry timer: the request it stood for is over; ask again.
template <class State>
void retry_join(caf::stateful_actor<State>* self, bool after_next_step) {
  auto& st = self->state;
  st.member.retry(self, *st.rt, st.island, st.incarnation, ask_after_next_step(st, after_next_step),
                  State::names_holds ? st.core.get() : nullptr);
}

/// A unit whose welcome was refused (a frame that does not decode, one of a deposed leader's
/// term, or one marking held what the island no longer holds) asks again a moment later: the
/// reply it waited for will not come. A joining unit would wait for it for good; a training one
/// would go on sending its progress to the unit it asked (a deposed leader, say) until a missed
/// round made it ask again, and winding down it would wait for merges that unit never makes.
/// A request already under way (stale_held asks at once) is left alone, so each refused welcome
/// adds at most one request.
inline constexpr double kAskAgainAfterRefusal_s = 0.05;
template <class State>
void ask_again_later(caf::stateful_actor<State>* self) {
  auto& m = self->state.member;
  if (m.join_inflight) return;
  m.join_inflight = true;
  self->delayed_send(self, detail::micros(kAskAgainAfterRefusal_s), join_atom::value);
}

/// Down messages outside the chips' work: a dead syncer (or server) is re-joined
/// (`after_next_step`: see Membership::ask), a dead chip is noted.
template <class State>
void watch(caf::stateful_actor<State>* self, bool after_next_step) {
  self->set_down_handler([self, after_next_step](caf::down_msg& m) {
    if (self->state.member.lost(m)) ask_to_join(self, after_next_step);
    else self->state.chips->lost(m);
  });
}

/// What a (re)started island or ddp replica does before it joins, once its core is built: it
/// resumes at the last step the run heard of, goes on where its data shard was (every step drew
/// one batch, whichever chips were alive), gets its chip pool, takes its incarnation, arranges
/// that its death takes it out of the live islands (and the goodput meter), and asks to join
/// once its repair window (a chaos kill) is over. Alive means joined: a unit under repair or
/// still healing is not part of the run yet.
template <class State>
void start_member(caf::stateful_actor<State>* self, const std::shared_ptr<Runtime>& rt, int i) {
  auto& st = self->state;
  const auto& c = rt->cfg;
  auto& rec = rt->islands[static_cast<std::size_t>(i)];
  st.core->resume_at(std::max(rec.step.load(), rt->resume_steps[static_cast<std::size_t>(i)]));
  st.data = rt->corpus.shard(i, c.train.islands);
  st.data->skip(st.core->step(), c.train.batch, c.model.seq_len);
  st.chips = std::make_unique<ChipPool>(i, c.islands.chips_of(i));
  st.live = std::make_shared<bool>(false);
  st.incarnation = ++rec.incarnation;
  self->attach_functor([rt, i, incarnation = st.incarnation, sys = &self->home_system()](const caf::error&) {
    const double t = detail::now_s(sys->clock()) - rt->t0.load();
    int mine = incarnation;
    rt->islands[static_cast<std::size_t>(i)].live.compare_exchange_strong(mine, 0);
    detail::tell_meter(*rt, GoodputFact::lost_island(i));
    detail::tell_meter(*rt, GoodputFact::alive_at(rt->tally().live_islands, t));
  });
  if (const double now = detail::now_s(self), back = rt->windows.island_back(i); now < back)
    self->delayed_send(self, detail::micros(back - now), join_atom::value);
  else self->send(self, join_atom::value);
}

/// The JoinReply of a welcome frame; anything else is refused (counted in the unit's record and
/// reported) and gives nothing. A reply, or a refused one, ends the join request in flight: the
/// unit goes on sending rather than wait for a welcome that may never come (a later down message
/// or missed round asks again).
template <class State>
std::optional<JoinReply> admit_welcome(caf::stateful_actor<State>* self, const WireFrame& w) {
  auto& st = self->state;
  const int i = st.island;
  auto& refused = st.rt->islands[static_cast<std::size_t>(i)].refused;
  const std::string where = "island " + std::to_string(i) + ": welcome";
  // A refused welcome while a request of the unit was out asks again a moment later, in every
  // phase (ask_again_later); one that answered no request (a late reply while only a retry timer
  // runs) asks nothing.
  const bool asked = st.member.requested;
  st.member.join_inflight = false;
  st.member.requested = false;
  auto got = detail::stale_term(self, *st.rt, refused, where, w)  // a deposed leader's
                 ? std::nullopt
                 : detail::expect_message<JoinReply>(self, *st.rt, refused, where, w);
  if (!got && asked) ask_again_later(self);
  return got;
}

/// The unit joined in its incarnation: its record says so, and the first join of an incarnation
/// tells the goodput meter that one more island is alive.
template <class State>
void count_joined(caf::stateful_actor<State>* self) {
  auto& st = self->state;
  auto& rt = *st.rt;
  rt.islands[static_cast<std::size_t>(st.island)].live = st.incarnation;
  if (*st.live) return;
  *st.live = true;
  detail::tell_meter(rt, GoodputFact::alive_at(rt.tally().live_islands, detail::now_s(self) - rt.t0.load()));
}

/// The unit trained its budget (and, with the final sync, its last contributions were merged):
/// its record says it is done, reported once.
template <class State>
void count_done(caf::stateful_actor<State>* self, long step) {
  auto& st = self->state;
  if (st.rt->islands[static_cast<std::size_t>(st.island)].done.exchange(true)) return;
  st.rt->emit(Event::island_done(detail::now_s(self), st.island, step));
}

/// A diverged island or replica: the run is stopped (Runtime::stop), and every message of the
/// protocol is taken and ignored. It stays alive, so that its supervisor does not restart it into
/// the same state; an unhandled message would end its sender.
inline caf::behavior halted(caf::event_based_actor* self) {
  self->set_down_handler([](caf::down_msg&) {});
  return {
      [](join_atom) {},
      [](welcome_atom, const WireFrame&) {},
      [](step_atom) {},
      [](const ChipResult&) {},
      [](global_atom, const WireFrame&) {},
      [](drain_atom) {},
  };
}

}  // namespace diloco::actors
