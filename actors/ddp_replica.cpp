// The ddp replica: an island of train.mode "ddp" as a thin shell. Its phases are named
// behaviours: joining → training → computing → awaiting → training ... → done (or diverged).
#include "diloco/actors/ddp_replica.hpp"

#include <cmath>
#include <string>

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/message_handler.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/system_messages.hpp>
#include <spdlog/spdlog.h>

#include "detail.hpp"
#include "membership.hpp"
#include "diloco/actors/chip_pool.hpp"
#include "diloco/ddp.hpp"
#include "diloco/island_core.hpp"
#include "diloco/invariants.hpp"

namespace diloco::actors {

namespace {

/// What a replica knows; where it is in its step is the behaviour it runs (see the phases below).
struct ReplicaState {
  static constexpr bool names_holds = false;  // the server sends its parameters whole (ask_to_join)
  std::shared_ptr<Runtime> rt;
  int island = 0;
  std::unique_ptr<IslandCore> core;  // holds the server's parameters and the step count
  std::unique_ptr<BatchSource> data;
  std::unique_ptr<ChipPool> chips;
  Membership member;                // the parameter server it joined, its join requests
  int incarnation = 0;
  double step_started = 0.0;         // actor time the step in flight began (goodput)
  std::shared_ptr<bool> live;        // joined and not dead: counted among the live islands
  // The gradient sent for the step in flight (awaiting): counted once the server's step lands.
  double loss = 0.0;
  std::uint64_t tokens = 0;
  int answered = 0;
  std::vector<float> grad;
};

using Self = caf::stateful_actor<ReplicaState>*;

caf::behavior joining(Self self);
caf::behavior training(Self self);
caf::behavior computing(Self self);
caf::behavior awaiting(Self self);
caf::behavior done(Self self);
caf::behavior diverged(Self self);

/// Seconds since the run started: the time base of the goodput meter.
double run_time(Self self) { return detail::now_s(self) - self->state.rt->t0.load(); }

/// The replica's gradient holds NaN or infinity: reports it, stops the run, and takes no more
/// steps. It stays alive, so that its supervisor does not restart it into the same step again.
void halt_diverged(Self self, const std::string& why) {
  auto& st = self->state;
  auto& rt = *st.rt;
  rt.emit(Event::diverged_state(detail::now_s(self), st.island, 0, st.core->step(), why));
  spdlog::error("{}", why);
  rt.stop(why);
  if (st.member.syncer) {
    auto pm = st.core->progress();
    pm.diverged = true;
    detail::send_over_link(self, rt, st.island, true, st.member.syncer, progress_atom::value,
                           detail::to_wire(encode_message(pm)));
  }
  self->become(diverged(self));
}

/// The budget is spent: no more steps (ddp has no final sync).
void send_gradient(Self self);

void finish(Self self) {
  count_done(self, self->state.core->step());
  self->become(done(self));
}

/// Training, between steps: hands the next step to the chips (computing) once every chip is up
/// (synchronous data parallel needs them all: with one down, everyone waits for it), or finishes.
void next_step(Self self) {
  auto& st = self->state;
  auto& rt = *st.rt;
  if (rt.budget_spent(st.core->step())) return finish(self);  // e.g. restarted at the end
  if (!st.chips->all_up(rt.dir)) {
    self->delayed_send(self, detail::micros(0.01), step_atom::value);
    return;
  }
  self->become(computing(self));
  st.step_started = run_time(self);
  Batch batch;  // the island's batch of the step (train.batch windows), split among its chips
  st.data->next(rt.cfg.train.batch, rt.cfg.model.seq_len, batch);
  st.chips->hand_out(self, rt.dir, st.core->step() + 1, st.core->shared_params(), batch);
  if (st.chips->complete()) send_gradient(self);  // no chip asked: the step is lost
}

/// A replica that lost its server asks again on a timer, never "after its next step" as an island
/// does (Membership::ask): it takes no step without the server (one computing or awaiting the
/// server's parameters would wait for good where the directory still names the dead server).
constexpr bool kOnATimer = false;

/// The step in flight is lost (a chip died in it, or there is no server to send to): back in
/// training, do it again shortly.
void step_again(Self self) {
  self->become(training(self));
  self->delayed_send(self, detail::micros(0.01), step_atom::value);
}

/// Every chip asked answered or died: with all of them, send the island's token-weighted
/// gradient to the server and wait for its step (awaiting).
void send_gradient(Self self) {
  auto& st = self->state;
  auto& rt = *st.rt;
  const int i = st.island;
  const auto results = st.chips->collect();
  st.answered = static_cast<int>(results.size());
  if (st.answered < rt.cfg.islands.chips_of(i)) return step_again(self);  // lost for all
  const double seconds = run_time(self) - st.step_started;
  st.loss = combine_chips(gradients_of(results), st.grad, st.tokens);
  auto frame = gradient_frame(i, static_cast<std::uint64_t>(st.core->step()), st.tokens, st.grad);
  if (!frame && frame.error().code == errc::non_finite)  // doing the step again would give the same NaN
    return halt_diverged(self, "island " + std::to_string(i) + " diverged: its gradient of step " +
                                   std::to_string(st.core->step() + 1) + " holds NaN or infinity (loss " +
                                   std::to_string(st.loss) + ")");
  if (!frame || !st.member.syncer) return step_again(self);  // nobody to send to (or nothing computed)
  detail::tell_meter(rt, GoodputFact::stepped(i, st.answered, seconds));
  detail::tell_meter(rt, GoodputFact::sent_of(i, 0));
  rt.islands[static_cast<std::size_t>(i)].bytes_up += frame->size();
  self->become(awaiting(self));
  detail::send_over_link(self, rt, i, true, st.member.syncer, grad_atom::value, detail::to_wire(*frame));
}

/// Back in training after the server's step (`mine`: the replica's gradient was in it; false:
/// the step in flight was void): report and account for it, fire step faults, go on.
void after_step(Self self, bool mine) {
  auto& st = self->state;
  auto& rt = *st.rt;
  const int i = st.island;
  const long step = st.core->step();
  self->become(training(self));
  if (mine) {
    auto& rec = rt.islands[static_cast<std::size_t>(i)];
    rec.tokens += st.tokens;
    rec.step = step;
    rt.emit(Event::stepped(detail::now_s(self), i, step, st.answered, st.loss));
    if (st.member.syncer)
      detail::send_over_link(self, rt, i, true, st.member.syncer, progress_atom::value,
                             detail::to_wire(encode_message(st.core->progress())));
    fire_step_faults(self, rt, i, step);
    if (!st.member.syncer) ask_to_join(self, kOnATimer);
  }
  if (rt.budget_spent(step)) return finish(self);
  if (!mine) self->delayed_send(self, detail::micros(0.01), step_atom::value);
  else next_step(self);
}

/// The server's JoinReply: adopt its parameters and step (a step in flight is void), and count
/// the island as live. Returns whether it was taken (false: refused, counted and reported).
bool take_welcome(Self self, const WireFrame& w, bool rejoin) {
  auto& st = self->state;
  auto& rt = *st.rt;
  const int i = st.island;
  const auto got = admit_welcome(self, w);
  if (!got) return false;
  const auto& reply = *got;
  (void)st.core->heal(reply, /*keep_local=*/false);  // replicas are the server's parameters, always (none held)
  if (!reply.fragments.empty()) st.core->resume_at(static_cast<long>(reply.fragments[0].header.base_round));
  count_joined(self);
  auto e = Event::healed(detail::now_s(self), i, st.incarnation, st.core->base_round(0), st.core->step(), rejoin);
  if (!rejoin) {  // it holds exactly the server's parameters (the invariants compare them)
    const auto d = heal_digests(rt.plan, st.core->params(), reply);
    e.digest = d.island, e.global_digest = d.global;
  }
  rt.emit(e);
  return true;
}

/// The server's parameters of a newer step. Returns whether they were taken (heal and resume at
/// that step); older ones are ignored, a frame that is no fragment refused.
bool take_params(Self self, const WireFrame& w) {
  auto& st = self->state;
  auto got = detail::expect_message<FragmentMessage>(self, *st.rt, st.rt->islands[static_cast<std::size_t>(st.island)].refused,
                                                     "island " + std::to_string(st.island) + ": parameters", w);
  if (!got) return false;
  auto& fm = *got;
  if (fm.header.kind != FragmentKind::global_params ||
      fm.header.base_round <= static_cast<std::uint64_t>(st.core->step()))
    return false;
  JoinReply r;
  r.fragments.push_back(std::move(fm));
  (void)st.core->heal(r, false);
  st.core->resume_at(static_cast<long>(r.fragments[0].header.base_round));
  return true;
}

// ---- the phases ----
// Each handles every message of the replica's protocol: one it does not expect is ignored (an
// unhandled one would send its sender an error that ends it).

/// Joining: waits for the server's welcome (asking again on a timer while there is none, and a
/// moment after a refused welcome).
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
      [=](global_atom, const WireFrame&) {},  // the welcome brings the parameters
  };
}

/// Training, between steps: starts the next one when every chip is up; newer parameters (a step
/// taken without this replica's gradient) void nothing but move it on.
caf::behavior training(Self self) {
  watch(self, kOnATimer);
  return {
      [=](join_atom) { retry_join(self, kOnATimer); },
      [=](welcome_atom, const WireFrame& w) {
        if (take_welcome(self, w, /*rejoin=*/true)) next_step(self);
      },
      [=](step_atom) { next_step(self); },
      [=](const ChipResult&) {},  // of a step that is over
      [=](global_atom, const WireFrame& w) {
        if (take_params(self, w)) after_step(self, false);
      },
  };
}

/// The handlers of a step in flight (computing and awaiting): a re-join's welcome or newer
/// parameters end it; `mine` says whether the server's step holds this replica's gradient.
caf::behavior in_step(Self self, bool mine, const caf::message_handler& chip_replies) {
  return chip_replies.or_else(
      [=](join_atom) { retry_join(self, kOnATimer); },
      [=](welcome_atom, const WireFrame& w) {
        if (!take_welcome(self, w, /*rejoin=*/true)) return;  // the step in flight is void
        self->become(training(self));
        next_step(self);
      },
      [=](step_atom) {},
      [=](global_atom, const WireFrame& w) {
        if (take_params(self, w)) after_step(self, mine);
      });
}

/// Computing: the chips compute the step; when every chip asked answered or died, the gradient
/// goes to the server (send_gradient).
caf::behavior computing(Self self) {
  self->set_down_handler([self](caf::down_msg& m) {
    if (self->state.member.lost(m)) ask_to_join(self, kOnATimer);
    else if (self->state.chips->lost(m) && self->state.chips->complete()) send_gradient(self);
  });
  return in_step(self, false, caf::message_handler{[=](const ChipResult& r) {
                   auto& chips = *self->state.chips;
                   if (chips.take(r) && chips.complete()) send_gradient(self);
                 }});
}

/// Awaiting: the gradient is with the server; its parameters of the next step end the step.
caf::behavior awaiting(Self self) {
  watch(self, kOnATimer);
  return in_step(self, true, caf::message_handler{[](const ChipResult&) {}});
}

/// Done: the budget is trained. It stays current with the server's parameters.
caf::behavior done(Self self) {
  watch(self, false);
  return {
      [=](join_atom) { retry_join(self, false); },
      [=](welcome_atom, const WireFrame& w) { take_welcome(self, w, /*rejoin=*/true); },
      [=](step_atom) {},
      [=](const ChipResult&) {},
      [=](global_atom, const WireFrame& w) { take_params(self, w); },
  };
}

/// Diverged: the run is stopped (halt_diverged); every message is taken and ignored.
caf::behavior diverged(Self self) { return halted(self); }

caf::behavior replica_actor(Self self, std::shared_ptr<Runtime> rt, int i) {
  detail::guard(self, "island " + std::to_string(i));
  auto& st = self->state;
  st.rt = rt;
  st.island = i;
  const auto& c = rt->cfg;
  IslandSettings s;
  s.island = i;
  s.schedule = SyncSchedule{c.train.H, rt->P()};
  st.core = std::make_unique<IslandCore>(rt->layout_model->layout(), rt->plan, s, c.inner, rt->initial);
  start_member(self, rt, i);
  return joining(self);
}

}  // namespace

caf::actor spawn_ddp_replica(caf::event_based_actor* parent, std::shared_ptr<Runtime> rt, int island) {
  return parent->spawn(replica_actor, std::move(rt), island);
}

}  // namespace diloco::actors
