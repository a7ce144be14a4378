// The island actor: a thin shell over IslandCore (libdiloco/island_core.hpp). Its phases are
// named behaviours: joining → training ⇄ stepping → winding_down → done (or diverged, halted).
#include "diloco/actors/island.hpp"

#include <chrono>
#include <cmath>
#include <map>

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/system_messages.hpp>
#include <spdlog/spdlog.h>

#include "detail.hpp"
#include "membership.hpp"
#include "diloco/actors/chip_pool.hpp"
#include "diloco/island_core.hpp"
#include "diloco/invariants.hpp"

namespace diloco::actors {

namespace {

// ---- island: steps on whichever chips answer, never waits for other islands ----

/// What an island knows; where it is in its life is the behaviour it runs (see the phases below).
struct IslandState {
  static constexpr bool names_holds = true;  // join requests name the fragments it holds (ask_to_join)
  std::shared_ptr<Runtime> rt;
  int island = 0;
  std::unique_ptr<IslandCore> core;
  std::unique_ptr<BatchSource> data;
  bool left = false;     // winding down: told the current syncer it finished
  bool resend = false;   // finished, then re-joined a (restarted) syncer: send every fragment
  bool draining = false; // told to leave (drain_atom): winds down as if its budget were spent
  bool announced = false; // its leaving was reported (Event::leaving)
  Membership member;                // the syncer it joined, its join requests
  std::unique_ptr<ChipPool> chips;            // hands each step to the chips, gathers their replies
  int incarnation = 0;
  std::uint64_t rebases = 0, mixes = 0, carries = 0;  // the core's adoptions already added to the island's record
  double step_started = 0.0;     // actor time the step in flight began (goodput)
  bool holding = false;          // between steps, holding the next for a merge (IslandCore::hold_until)
  double hold_started = 0.0;     // when the current hold began
  bool hold_armed = false;       // a step_atom is on its way for the hold's end ...
  double hold_timer = 0.0;       // ... at this time
  std::uint64_t wait_timeouts = 0;  // the core's waits that ran out already added to the island's record
  std::shared_ptr<bool> live;    // joined and not dead: counted among the live islands
};

using Self = caf::stateful_actor<IslandState>*;

/// Adds to a record's counter what the core's counter (`now`) grew by since `seen`, the part
/// already added, and marks it added.
void add_growth(std::atomic<std::uint64_t>& record, std::uint64_t now, std::uint64_t& seen) {
  record += now - seen;
  seen = now;
}

/// Adds the adoptions the core applied since the last call to the island's record (a step, a
/// broadcast or a settle may apply them).
void count_adoptions(Self self) {
  auto& st = self->state;
  auto& r = st.rt->islands[static_cast<std::size_t>(st.island)];
  add_growth(r.rebased, st.core->rebases(), st.rebases);
  add_growth(r.mixed, st.core->mixes(), st.mixes);
  add_growth(r.carried, st.core->carries(), st.carries);
}

/// A hold for a due merge is over (the merge came, the wait ran out, or the island winds down):
/// it goes to the island's record.
void end_hold(Self self) {
  auto& st = self->state;
  auto& rec = st.rt->islands[static_cast<std::size_t>(st.island)];
  if (st.holding) {
    rec.waits += 1;
    rec.waited_us += static_cast<std::uint64_t>(std::max(0.0, detail::now_s(self) - st.hold_started) * 1e6);
    st.holding = false;
  }
  add_growth(rec.wait_timeouts, st.core->wait_timeouts(), st.wait_timeouts);
}

// The phases, each a behaviour that names the messages it takes (defined further down).
caf::behavior joining(Self self);
caf::behavior training(Self self);
caf::behavior stepping(Self self);
caf::behavior winding_down(Self self);
caf::behavior done(Self self);
caf::behavior diverged(Self self);

/// Seconds since the run started: the time base of the goodput meter.
double run_time(Self self) { return detail::now_s(self) - self->state.rt->t0.load(); }

/// The island's state holds NaN or infinity (IslandCore::health): reports it with the fragment concerned (-1: none), stops the run, and takes no
/// more steps. It stays alive, so that its supervisor does not restart it: a restarted island
/// would heal from the same global state, train with the same settings and diverge again.
void halt_diverged(Self self, int fragment, const std::string& why) {
  auto& st = self->state;
  auto& rt = *st.rt;
  rt.emit(Event::diverged_state(detail::now_s(self), st.island, fragment, st.core->step(), why));
  spdlog::error("{}", why);
  rt.stop(why);
  if (st.member.syncer) {  // a syncer in another process learns it here (in one process rt is shared)
    auto pm = st.core->progress();
    pm.diverged = true;
    detail::send_over_link(self, rt, st.island, true, st.member.syncer, progress_atom::value,
                           detail::to_wire(encode_message(pm)));
  }
  self->become(diverged(self));
}

/// Sends fragment p's outer gradient to the syncer (the island has one). Returns false when the
/// island diverged instead (halt_diverged: it must do nothing more).
bool send_fragment(Self self, int p) {
  auto& st = self->state;
  auto& rt = *st.rt;
  const int i = st.island;
  auto frame = st.core->outer_gradient_frame(p);
  if (!frame) {
    if (const auto& h = st.core->health(); !h) {
      halt_diverged(self, p, h.error().reason);
      return false;
    }
    spdlog::error("island {}: fragment {} not sent: {}", i, p, frame.error().message());
    return true;
  }
  rt.islands[static_cast<std::size_t>(i)].bytes_up += frame->size();
  detail::tell_meter(rt, GoodputFact::sent_of(i, p));
  detail::send_over_link(self, rt, i, true, st.member.syncer, fragment_atom::value, detail::to_wire(*frame));
  return true;
}

/// Tells the syncer the island joined that it finished (Progress.finished): rounds stop waiting
/// for it. Once per syncer: a re-join clears `left`.
void say_finished(Self self) {
  auto& st = self->state;
  if (st.left) return;
  auto pm = st.core->progress();
  pm.finished = true;
  detail::send_over_link(self, *st.rt, st.island, true, st.member.syncer, progress_atom::value,
                         detail::to_wire(encode_message(pm)));
  st.left = true;
}

/// A run with a state directory: the island's state as of now goes to its record, for the
/// syncer's next state file (Run::keep_island_states).
void keep_state(Self self) {
  auto& st = self->state;
  if (!st.rt->keep_island_states) return;
  st.rt->islands[static_cast<std::size_t>(st.island)].keep_state(std::make_shared<const diloco::IslandState>(st.core->state()));
}

/// The budget is spent, or the island is leaving (draining): it takes no more steps
/// (winding_down). With the final sync, and always when it leaves, it first sends every
/// fragment's unsent progress (after the merge of one still in flight arrives, so as not to
/// repeat it), tells the syncer it finished (rounds stop waiting for it, and its going is no
/// failure), and is done once the syncer settled them (a frame says they were merged, or dropped
/// for good). Runs again on every broadcast and re-join.
void wind_down(Self self) {
  auto& st = self->state;
  auto& rt = *st.rt;
  const long step = st.core->step();
  self->become(winding_down(self));
  if (rt.synchronous() || (!rt.final_sync() && !st.draining)) {
    // Without the final sync its last progress stays local; the synchronous modes merge whole
    // rounds, so a leaving island's round in progress is left out too. There every round waits
    // for every island, so the syncer hears that it finished: rounds stop waiting for it, and
    // one restarted behind the others does not wait for ever for rounds they have left.
    if (rt.synchronous() && st.member.syncer) {
      keep_state(self);  // before the syncer hears it finished (and writes its state file)
      say_finished(self);
    }
    count_done(self, step);
    return self->become(done(self));
  }
  if (!st.member.syncer) return ask_to_join(self, false);  // goes on in welcome
  if (st.member.join_inflight) return;                      // so does this (see after_step)
  st.core->settle();
  count_adoptions(self);
  if (st.draining && !st.announced) {
    int unsent = 0;
    for (int p = 0; p < rt.P(); ++p) unsent += st.core->steps_since(p) > 0 ? 1 : 0;
    rt.emit(Event::leaving(detail::now_s(self), st.island, step, unsent));
    st.announced = true;
  }
  bool unsent = false, awaiting = false;
  for (int p = 0; p < rt.P(); ++p) {
    // After a re-join the restarted syncer may have lost (or restored from before) what this
    // island sent: its δ against the new base carries all of it, so every fragment that still
    // differs from the new base goes again, with the weight of its last send.
    if (st.core->steps_since(p) == 0 && !(st.resend && st.core->take_back_last_send(p))) continue;
    if (st.core->awaiting(p)) unsent = true;
    else if (!send_fragment(self, p)) return;
  }
  if (!unsent) st.resend = false;
  // Done once the syncer settled every send (a frame said so): a newer round alone may be
  // other islands' while this island's last contributions still wait on a cut link.
  for (int p = 0; p < rt.P(); ++p) awaiting = awaiting || st.core->awaiting(p) || !st.core->sends_settled(p);
  keep_state(self);  // before the syncer hears it finished (and writes its state file)
  if (!unsent) say_finished(self);
  if (!unsent && !awaiting) {
    count_done(self, step);
    self->become(done(self));
  }
}

void finish_step(Self self);

/// Training, between steps: starts the next step on the chips (stepping), or stays in training
/// (synchronous modes wait for a broadcast), or winds down.
void next_step(Self self) {
  auto& st = self->state;
  auto& rt = *st.rt;
  if (rt.budget_spent(st.core->step()) || st.draining) {  // e.g. restarted at the end
    end_hold(self);
    return wind_down(self);
  }
  if (rt.synchronous() && st.core->must_wait()) return;          // resumed by the broadcast
  if (!rt.synchronous() && st.member.syncer && !st.member.join_inflight) {
    // A bounded wait for a merge that is due (fragments.wait_steps): resumed by the broadcast
    // that brings it, or by the timer at the hold's end.
    const double now = detail::now_s(self);
    if (const double until = st.core->hold_until(now); until > now) {
      if (!st.holding) st.hold_started = now;
      st.holding = true;
      // A timer for the hold's end, unless one is on its way for it already (one armed for a
      // time now past may have arrived while the island stepped, and been ignored). A timer may
      // fire a hair before its time (microseconds rounded, a clock's nanoseconds as seconds):
      // then it is armed again, never left unarmed while the island holds.
      if (!st.hold_armed || until < st.hold_timer || st.hold_timer <= now) {
        st.hold_armed = true;
        st.hold_timer = until;
        self->delayed_send(self, detail::micros(until - now), step_atom::value);
      }
      return;
    }
  }
  end_hold(self);
  self->become(stepping(self));
  st.step_started = run_time(self);
  // The island's batch of the step (train.batch windows), split among its chips; a dead chip's
  // share is missing from this step (the others' gradients are weighted by their tokens).
  Batch batch;
  st.data->next(rt.cfg.train.batch, rt.cfg.model.seq_len, batch);
  st.chips->hand_out(self, rt.dir, st.core->step() + 1, st.core->shared_params(), batch);
  if (st.chips->complete()) finish_step(self);
}

/// After a step (`stepped`: one was taken; false: no chip answered), back in training: report it,
/// account for it, send what is due, fire step faults, go on.
void after_step(Self self, bool stepped, double loss, std::uint64_t tokens, int answered) {
  auto& st = self->state;
  auto& rt = *st.rt;
  const int i = st.island;
  const long step = st.core->step();
  if (stepped) {
    auto& rec = rt.islands[static_cast<std::size_t>(i)];
    rec.tokens += tokens;
    rec.step = step;
    rt.emit(Event::stepped(detail::now_s(self), i, step, answered, loss));
    if (st.member.syncer) {
      detail::send_over_link(self, rt, i, true, st.member.syncer, progress_atom::value,
                             detail::to_wire(encode_message(st.core->progress())));
      st.core->set_time(detail::now_s(self));
      // While a join is under way nothing is sent: the syncer that answers gives the base (and
      // the epoch) the progress goes out from, and a send numbered in the old epoch could reach
      // a restarted syncer whose epochs start again from 1.
      const auto due = st.member.join_inflight ? std::vector<int>{} : st.core->due();
      for (int p : due)
        if (!send_fragment(self, p)) return;
      if (!due.empty()) keep_state(self);
    }
    fire_step_faults(self, rt, i, step);
    if (!st.member.syncer) ask_to_join(self, true);
  }
  if (rt.budget_spent(step) || st.draining) return wind_down(self);
  // No chip alive: try again shortly (restarted chips show up in the directory). Otherwise the
  // next step starts at once: a step_atom to itself would wait behind every chip's work in the
  // scheduler's queue, and the chips would idle meanwhile.
  if (!stepped) self->delayed_send(self, detail::micros(0.01), step_atom::value);
  else next_step(self);
}

/// Every chip asked in this step answered or died: combine their gradients and take the step.
void finish_step(Self self) {
  auto& st = self->state;
  auto& rt = *st.rt;
  const int i = st.island;
  const auto results = st.chips->collect();
  const auto g = gradients_of(results);
  const int answered = static_cast<int>(results.size());
  const long before = st.core->step();
  const double loss = st.core->apply_gradient(g);
  count_adoptions(self);
  std::uint64_t tokens = 0;
  for (const auto& x : g) tokens += x.tokens;
  self->become(training(self));
  if (const auto& h = st.core->health(); !h) return halt_diverged(self, -1, h.error().reason);
  const bool stepped = st.core->step() > before;  // false: no chip answered
  // The chips' time on this step runs until the island's AdamW step is taken.
  const double step_s = run_time(self) - st.step_started;
  if (stepped) {
    detail::tell_meter(rt, GoodputFact::stepped(i, answered, step_s));
    st.core->step_took(step_s);
  }
  after_step(self, stepped, loss, tokens, answered);
}

/// The syncer's JoinReply: heal from it (a first join adopts the global fragments; a re-join of
/// a restarted syncer keeps the local progress and re-bases), and count the island as live.
/// Returns whether it was taken (false: refused, counted and reported).
bool take_welcome(Self self, const WireFrame& w, bool rejoin) {
  auto& st = self->state;
  auto& rt = *st.rt;
  const int i = st.island;
  const auto got = admit_welcome(self, w);
  if (!got) return false;
  const auto& reply = *got;
  // A re-join keeps the local progress and re-bases; so does the first join of an island
  // restored from a state directory (its parameters are its own, the syncer's may be older).
  // The request said which (Membership::keeps_local): the syncer dropped what it must.
  const bool keep_local = st.member.keeps_local;
  const auto held = st.core->base_round(0);
  st.core->set_time(detail::now_s(self));
  if (!st.core->heal(reply, keep_local)) {
    // A reply to an earlier request: it marks held values this island no longer has.
    detail::refuse(self, rt, rt.islands[static_cast<std::size_t>(i)].refused,
                   "island " + std::to_string(i) + ": welcome marks held a fragment whose values it no longer holds (a reply to an earlier join request); asking again",
                   "stale_held");
    ask_to_join(self, rejoin);
    return false;
  }
  st.member.keeps_local = true;  // later heals of this life keep its progress
  st.left = false;  // the syncer counts on a joining island until it says it finished
  count_joined(self);
  auto e = Event::healed(detail::now_s(self), i, st.incarnation, st.core->base_round(0), st.core->step(), rejoin);
  e.held_round = held;
  if (!keep_local) {  // a heal adopts the global fragments exactly (the invariants compare them)
    const auto d = heal_digests(rt.plan, st.core->params(), reply, &st.core->named());
    e.digest = d.island, e.global_digest = d.global;
  }
  st.core->drop_named();
  rt.emit(e);
  return true;
}

/// A merged fragment broadcast by the syncer (decoupled and synchronous modes): adopted, or a
/// missed round makes the island re-join to heal (`after_next_step`: see ask_to_join), any other
/// fault of the frame refuses it. Returns whether the frame was fine (taken or not newer than
/// what the island holds).
bool take_broadcast(Self self, const WireFrame& w, bool after_next_step) {
  auto& st = self->state;
  if (detail::stale_term(self, *st.rt, st.rt->islands[static_cast<std::size_t>(st.island)].refused,
                         "island " + std::to_string(st.island) + ": broadcast", w))
    return false;
  auto got = st.core->adopt_frame(detail::bytes_of(w));
  count_adoptions(self);
  if (!got && got.error().code == errc::missed_round) ask_to_join(self, after_next_step);  // missed a delta: heal
  else if (!got) detail::refuse(self, *st.rt, st.rt->islands[static_cast<std::size_t>(st.island)].refused, "island " + std::to_string(st.island) + ": broadcast: " + got.error().message(), std::string(to_string(got.error().code)));
  return got.has_value();
}

// ---- the phases ----
// Each handles every message of the island's protocol: one it does not expect is ignored (an
// unhandled one would send its sender an error that ends it).

/// Joining: waits for the syncer's welcome (asking again on a timer while there is none, and a
/// moment after a refused welcome); the
/// first JoinReply heals the island and training begins.
caf::behavior joining(Self self) {
  watch(self, false);
  return {
      [=](join_atom) { retry_join(self, false); },
      [=](welcome_atom, const WireFrame& w) {
        if (!take_welcome(self, w, /*rejoin=*/false)) return ask_again_later(self);
        self->become(training(self));
        next_step(self);
      },
      [=](step_atom) {},
      [=](const ChipResult&) {},
      [=](global_atom, const WireFrame&) {},  // the welcome brings the current fragments
      [=](drain_atom) {  // never joined: no progress to hand over
        self->state.draining = true;
        count_done(self, self->state.core->step());
        self->become(done(self));
      },
  };
}

/// Training, between steps: starts the next one (step_atom, or a broadcast the synchronous
/// modes wait for), adopts broadcasts, re-joins a restarted syncer keeping its progress.
caf::behavior training(Self self) {
  watch(self, true);
  return {
      [=](join_atom) { retry_join(self, true); },
      [=](welcome_atom, const WireFrame& w) {
        if (take_welcome(self, w, /*rejoin=*/true)) next_step(self);
      },
      [=](step_atom) {
        self->state.hold_armed = false;  // a hold's timer (or a retry): the hold re-arms if it goes on
        next_step(self);
      },
      [=](const ChipResult&) {},  // of a step that is over
      [=](global_atom, const WireFrame& w) {
        take_broadcast(self, w, true);
        if (self->state.rt->synchronous() || self->state.holding) next_step(self);  // if it was waiting
      },
      [=](drain_atom) {
        self->state.draining = true;
        end_hold(self);
        wind_down(self);
      },
  };
}

/// Stepping: the chips compute the step; it is taken when every chip asked answered or died.
caf::behavior stepping(Self self) {
  self->set_down_handler([self](caf::down_msg& m) {
    if (self->state.member.lost(m)) ask_to_join(self, true);
    else if (self->state.chips->lost(m) && self->state.chips->complete()) finish_step(self);
  });
  return {
      [=](join_atom) { retry_join(self, true); },
      [=](welcome_atom, const WireFrame& w) {
        take_welcome(self, w, /*rejoin=*/true);  // heals in place; the step goes on
      },
      [=](step_atom) {},
      [=](const ChipResult& r) {
        auto& chips = *self->state.chips;
        if (chips.take(r) && chips.complete()) finish_step(self);
      },
      [=](global_atom, const WireFrame& w) { take_broadcast(self, w, true); },
      [=](drain_atom) { self->state.draining = true; },  // winds down once this step is taken
  };
}

/// The handlers of an island that trained its budget (winding_down and done): a broadcast or a
/// restarted syncer's welcome runs the wind-down again.
caf::behavior finishing(Self self) {
  watch(self, false);
  return {
      [=](join_atom) { retry_join(self, false); },
      [=](welcome_atom, const WireFrame& w) {
        if (!take_welcome(self, w, /*rejoin=*/true)) return;
        self->state.resend = true;  // the new syncer may lack what was sent
        wind_down(self);
      },
      [=](step_atom) {},
      [=](const ChipResult&) {},
      [=](global_atom, const WireFrame& w) {
        if (take_broadcast(self, w, false)) wind_down(self);
      },
      [=](drain_atom) {},  // already leaving or done
  };
}

/// Winding down (the final sync): the budget is trained; the island sends its last progress,
/// waits for the merge of what is in flight and tells the syncer it finished (wind_down).
caf::behavior winding_down(Self self) { return finishing(self); }

/// Done: its budget trained and its last contributions merged. It stays current with the
/// broadcasts; a restarted syncer's welcome makes it send everything again (winding_down).
caf::behavior done(Self self) { return finishing(self); }

/// Diverged: the run is stopped (halt_diverged); every message is taken and ignored.
caf::behavior diverged(Self self) { return halted(self); }

caf::behavior island_actor(Self self, std::shared_ptr<Runtime> rt, int i) {
  detail::guard(self, "island " + std::to_string(i));
  auto& st = self->state;
  st.rt = rt;
  st.island = i;
  const auto& c = rt->cfg;
  IslandSettings s;
  s.island = i;
  s.schedule = SyncSchedule{c.train.H, rt->P()};
  s.sync_every_s = c.train.sync_every_s;
  s.tau = rt->tau();
  s.alpha = rt->alpha();
  s.wait_steps = c.fragments.wait_steps;
  s.adopt = c.fragments.adopt;
  s.islands = c.train.islands;
  s.codec = CodecParams{*parse_encoding(c.fragments.encoding), static_cast<std::uint32_t>(c.fragments.block_size)};
  s.error_feedback = c.fragments.error_feedback;
  st.core = std::make_unique<IslandCore>(rt->layout_model->layout(), rt->plan, s, c.inner, rt->initial);
  // The first start of a resumed run's island takes back its saved state (later restarts heal
  // from the global parameters, as in any run).
  if (const auto& saved = rt->resume_islands[static_cast<std::size_t>(i)];
      saved && rt->islands[static_cast<std::size_t>(i)].incarnation.load() == 0) {
    if (auto ok = st.core->restore(*saved); !ok)
      spdlog::error("island {}: saved state not restored, starting from the global parameters: {}", i, ok.error().message());
    else st.member.keeps_local = true;  // its first welcome keeps its parameters
  }
  start_member(self, rt, i);
  return joining(self);
}

}  // namespace

caf::actor spawn_island(caf::event_based_actor* parent, std::shared_ptr<Runtime> rt, int island) {
  return parent->spawn(island_actor, std::move(rt), island);
}

}  // namespace diloco::actors
