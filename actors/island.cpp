// The island actor: a thin shell over IslandCore (libdiloco/island.hpp).
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
#include "diloco/ddp.hpp"
#include "diloco/island_core.hpp"

namespace diloco::actors {

namespace {

// ---- island: steps on whichever chips answer, never waits for other islands ----

struct IslandState {
  std::unique_ptr<IslandCore> core;
  std::unique_ptr<BatchSource> data;
  bool joined = false;   // healed at least once (a later join only re-bases)
  bool stepping = false; // a step is in flight
  bool finished = false; // trained its budget (with the final sync: winding down)
  bool left = false;     // told the current syncer it finished
  bool resend = false;   // finished, then re-joined a (restarted) syncer: send every fragment
  caf::actor syncer;
  bool join_inflight = false;                // a join request or retry is under way
  caf::actor_addr dead_syncer;               // the syncer we saw die (the directory may still hold it)
  std::map<int, caf::actor> waiting;         // chips asked in the current step
  std::vector<ChipResult> results;
  std::map<caf::actor_addr, int> monitored;  // chip handles we monitor
  std::vector<std::shared_ptr<const Batch>> batches;
  int incarnation = 0;
  double step_started = 0.0;     // actor time the step in flight began (goodput)
  std::shared_ptr<bool> live;    // joined and not dead: counted in counters.live_islands
  // ddp: the gradient sent for the step in flight waits for the server's new parameters.
  bool ddp_waiting = false;
  double ddp_loss = 0.0;
  std::uint64_t ddp_tokens = 0;
  int ddp_chips = 0;
  std::vector<float> ddp_grad;
};

/// Seconds since the run started: the time base of the goodput meter.
double run_time(caf::event_based_actor* self, Runtime& rt) { return detail::now_s(self) - rt.t0.load(); }

void island_try_join(caf::event_based_actor* self, Runtime& rt, IslandState& st, int i) {
  if (st.join_inflight) return;
  auto s = rt.dir.syncer();
  if (!s || s.address() == st.dead_syncer) {
    // No syncer yet: a training island asks again after its next step; an idle one on a timer.
    if (st.joined && !st.finished) return;
    st.join_inflight = true;
    self->delayed_send(self, detail::micros(0.01), join_atom::value);
    return;
  }
  st.join_inflight = true;
  if (s != st.syncer) {
    st.syncer = s;
    self->monitor(s);
  }
  JoinRequest jr{i, static_cast<std::uint64_t>(st.incarnation)};
  detail::send_over_link(self, rt, i, true, s, join_atom::value, detail::to_wire(encode_message(jr)));
}

void island_start_step(caf::event_based_actor* self, Runtime& rt, IslandState& st, int i);

/// The island's state holds NaN or infinity (IslandCore::health, or a ddp gradient that cannot
/// be framed): reports it with the fragment concerned (-1: none), stops the run, and takes no
/// more steps. It stays alive, so that its supervisor does not restart it: a restarted island
/// would heal from the same global state, train with the same settings and diverge again.
void island_diverged(caf::event_based_actor* self, Runtime& rt, IslandState& st, int i, int fragment,
                     const std::string& why) {
  rt.emit(Event::diverged_state(detail::now_s(self), i, fragment, st.core->step(), why));
  spdlog::error("{}", why);
  rt.stop(why);
  if (st.syncer) {  // a syncer in another process learns it here (in one process rt is shared)
    auto pm = st.core->progress();
    pm.diverged = true;
    detail::send_over_link(self, rt, i, true, st.syncer, progress_atom::value, detail::to_wire(encode_message(pm)));
  }
  self->set_down_handler([](caf::down_msg&) {});
  // Every message of the island's protocol is taken and ignored (an unhandled one would send
  // its sender an error that ends it).
  self->become([](step_atom) {}, [](join_atom) {}, [](welcome_atom, const WireFrame&) {}, [](const ChipResult&) {},
               [](global_atom, const WireFrame&) {});
}

/// Sends fragment p's outer gradient to the syncer (the island has one). Returns false when the
/// island diverged instead (island_diverged: it must do nothing more).
bool island_send_fragment(caf::event_based_actor* self, Runtime& rt, IslandState& st, int i, int p) {
  auto frame = st.core->outer_gradient_frame(p);
  if (!frame) {
    if (const auto& h = st.core->health(); !h) {
      island_diverged(self, rt, st, i, p, h.error().reason);
      return false;
    }
    spdlog::error("island {}: fragment {} not sent: {}", i, p, frame.error().message());
    return true;
  }
  rt.counters.bytes_sent += frame->size();
  rt.account([&](GoodputMeter& g) { g.sent(i, p); });
  detail::send_over_link(self, rt, i, true, st.syncer, fragment_atom::value, detail::to_wire(*frame));
  return true;
}

void island_mark_done(caf::event_based_actor* self, Runtime& rt, int i, long step) {
  if (rt.island_done[static_cast<std::size_t>(i)].exchange(true)) return;
  ++rt.counters.islands_done;
  rt.emit(Event::island_done(detail::now_s(self), i, step));
}

/// The budget is spent: the island takes no more steps. With the final sync it first sends
/// every fragment's unsent progress (after the merge of one still in flight arrives, so as not
/// to repeat it), tells the syncer it finished (rounds stop waiting for it), and is done once
/// those last contributions were merged. Runs again on every broadcast and re-join until then.
void island_wind_down(caf::event_based_actor* self, Runtime& rt, IslandState& st, int i) {
  st.finished = true;
  const long step = st.core->step();
  if (!rt.final_sync()) return island_mark_done(self, rt, i, step);
  if (!st.syncer) return island_try_join(self, rt, st, i);  // goes on in welcome
  st.core->settle();
  bool unsent = false, awaiting = false;
  for (int p = 0; p < rt.P(); ++p) {
    // After a re-join the restarted syncer may have lost (or restored from before) what this
    // island sent: its δ against the new base carries all of it, so every fragment goes again.
    if (st.core->steps_since(p) == 0 && !st.resend) continue;
    if (st.core->awaiting(p)) unsent = true;
    else if (!island_send_fragment(self, rt, st, i, p)) return;
  }
  if (!unsent) st.resend = false;
  for (int p = 0; p < rt.P(); ++p) awaiting = awaiting || st.core->awaiting(p);
  if (!unsent && !st.left) {
    auto pm = st.core->progress();
    pm.finished = true;
    detail::send_over_link(self, rt, i, true, st.syncer, progress_atom::value, detail::to_wire(encode_message(pm)));
    st.left = true;
  }
  if (!unsent && !awaiting) island_mark_done(self, rt, i, step);
}

/// After a step (`stepped`: one was taken; false: no chip answered): report it, account for
/// it, send what is due, fire step faults, go on.
void island_after_step(caf::event_based_actor* self, Runtime& rt, IslandState& st, int i, bool stepped, double loss,
                       std::uint64_t tokens, int answered, bool send_fragments) {
  const long step = st.core->step();
  if (stepped) {
    rt.counters.tokens += tokens;
    rt.island_steps[static_cast<std::size_t>(i)] = step;
    rt.emit(Event::stepped(detail::now_s(self), i, step, answered, loss));
    if (st.syncer) {
      detail::send_over_link(self, rt, i, true, st.syncer, progress_atom::value,
                             detail::to_wire(encode_message(st.core->progress())));
      for (int p : send_fragments ? st.core->due() : std::vector<int>{})
        if (!island_send_fragment(self, rt, st, i, p)) return;
    }
    fire_step_faults(self, rt, i, step);
    if (!st.syncer && st.joined) island_try_join(self, rt, st, i);
  }
  if (rt.budget_spent(step)) return island_wind_down(self, rt, st, i);
  // No chip alive: try again shortly (restarted chips show up in the directory). Otherwise the
  // next step starts at once: a step_atom to itself would wait behind every chip's work in the
  // scheduler's queue, and the chips would idle meanwhile.
  if (!stepped) self->delayed_send(self, detail::micros(0.01), step_atom::value);
  else island_start_step(self, rt, st, i);
}

void island_finish_step(caf::event_based_actor* self, Runtime& rt, IslandState& st, int i) {
  std::vector<ChipGradient> g;
  for (const auto& r : st.results) g.push_back({*r.grads, r.tokens, r.loss});
  const int answered = static_cast<int>(st.results.size());
  const double seconds = run_time(self, rt) - st.step_started;
  if (rt.ddp()) {
    if (answered < rt.cfg.islands.chips_of(i)) {
      // A chip died during the step: in synchronous data parallel the step is lost for all.
      st.results.clear();
      st.stepping = false;
      self->delayed_send(self, detail::micros(0.01), step_atom::value);
      return;
    }
    // Send the island's gradient and wait for the server's step (global_atom).
    st.ddp_loss = combine_chips(g, st.ddp_grad, st.ddp_tokens);
    st.ddp_chips = answered;
    st.results.clear();
    auto frame = gradient_frame(i, static_cast<std::uint64_t>(st.core->step()), st.ddp_tokens, st.ddp_grad);
    if (!frame && frame.error().code == errc::non_finite)  // doing the step again would give the same NaN
      return island_diverged(self, rt, st, i, 0,
                             "island " + std::to_string(i) + " diverged: its gradient of step " +
                                 std::to_string(st.core->step() + 1) + " holds NaN or infinity (loss " +
                                 std::to_string(st.ddp_loss) + ")");
    if (!frame || !st.syncer) {
      // Nobody to send to (or nothing computed): the step is lost, do it again.
      st.stepping = false;
      self->delayed_send(self, detail::micros(0.01), step_atom::value);
      return;
    }
    rt.account([&](GoodputMeter& m) {
      m.step(i, answered, seconds);
      m.sent(i, 0);
    });
    rt.counters.bytes_sent += frame->size();
    st.ddp_waiting = true;
    detail::send_over_link(self, rt, i, true, st.syncer, grad_atom::value, detail::to_wire(*frame));
    return;
  }
  const long before = st.core->step();
  const double loss = st.core->apply_gradient(g);
  std::uint64_t tokens = 0;
  for (const auto& x : g) tokens += x.tokens;
  st.results.clear();
  st.stepping = false;
  if (const auto& h = st.core->health(); !h) return island_diverged(self, rt, st, i, -1, h.error().reason);
  const bool stepped = st.core->step() > before;  // false: no chip answered
  // The chips' time on this step runs until the island's AdamW step is taken.
  const double step_s = run_time(self, rt) - st.step_started;
  if (stepped) rt.account([&](GoodputMeter& m) { m.step(i, answered, step_s); });
  island_after_step(self, rt, st, i, stepped, loss, tokens, answered, true);
}

/// ddp: the server's parameters of the next step arrived; the step in flight is done.
void island_ddp_params(caf::event_based_actor* self, Runtime& rt, IslandState& st, int i, const WireFrame& w) {
  auto msg = decode_message(detail::bytes_of(w));
  if (!msg || !std::holds_alternative<FragmentMessage>(*msg)) return;
  auto& fm = std::get<FragmentMessage>(*msg);
  if (fm.header.kind != FragmentKind::global_params ||
      fm.header.base_round <= static_cast<std::uint64_t>(st.core->step()))
    return;
  JoinReply r;
  r.fragments.push_back(std::move(fm));
  st.core->heal(r, false);
  st.core->resume_at(static_cast<long>(r.fragments[0].header.base_round));
  const bool mine = st.ddp_waiting;
  st.ddp_waiting = false;
  st.stepping = false;
  // A step the island took part in: its loss and tokens count. (Steps it missed while it was
  // down were taken without it: in ddp that cannot happen, the server waits for everyone.)
  island_after_step(self, rt, st, i, mine, mine ? st.ddp_loss : std::nan(""), mine ? st.ddp_tokens : 0,
                    mine ? st.ddp_chips : 0, false);
}

void island_start_step(caf::event_based_actor* self, Runtime& rt, IslandState& st, int i) {
  if (st.stepping || st.finished || !st.joined) return;
  if (rt.budget_spent(st.core->step())) return island_wind_down(self, rt, st, i);  // e.g. restarted at the end
  if (rt.synchronous() && st.core->must_wait()) return;  // resumed by the broadcast
  const int C = rt.cfg.islands.chips_of(i);
  if (rt.ddp()) {
    // Synchronous data parallel needs every chip: with one down, everyone waits for it.
    for (int c = 0; c < C; ++c) {
      auto chip = rt.dir.chip(i, c);
      auto it = chip ? st.monitored.find(chip.address()) : st.monitored.end();
      if (!chip || (it != st.monitored.end() && it->second < 0)) {
        self->delayed_send(self, detail::micros(0.01), step_atom::value);
        return;
      }
    }
  }
  st.stepping = true;
  st.step_started = run_time(self, rt);
  st.batches.resize(static_cast<std::size_t>(C));
  for (int c = 0; c < C; ++c) {
    auto b = std::make_shared<Batch>();
    st.data->next(rt.cfg.train.batch, rt.cfg.model.seq_len, *b);
    auto chip = rt.dir.chip(i, c);
    if (!chip) continue;
    if (!st.monitored.count(chip.address())) {
      st.monitored[chip.address()] = c;
      self->monitor(chip);
    } else if (st.monitored[chip.address()] < 0) {
      continue;  // known dead; its restart will have a new handle
    }
    st.waiting[c] = chip;
    self->send(chip, compute_atom::value, ChipWork{st.core->step() + 1, st.core->shared_params(), std::move(b)});
  }
  if (st.waiting.empty()) island_finish_step(self, rt, st, i);
}

caf::behavior island_actor(caf::stateful_actor<IslandState>* self, std::shared_ptr<Runtime> rt, int i) {
  detail::guard(self, "island " + std::to_string(i));
  auto& st = self->state;
  const auto& c = rt->cfg;
  IslandSettings s;
  s.island = i;
  s.schedule = SyncSchedule{c.train.H, rt->P()};
  s.tau = rt->tau();
  s.alpha = rt->alpha();
  s.codec = CodecParams{*parse_encoding(c.fragments.encoding), static_cast<std::uint32_t>(c.fragments.block_size)};
  s.error_feedback = c.fragments.error_feedback;
  st.core = std::make_unique<IslandCore>(rt->layout_model->layout(), rt->plan, s, c.inner, rt->initial);
  st.core->resume_at(rt->island_steps[static_cast<std::size_t>(i)]);
  st.data = rt->corpus.shard(i, c.train.islands);
  {
    // A restarted island goes on where its shard was, not from its start: every step drew one
    // batch per chip (dead or alive), so the stream is skipped by as many.
    Batch skip;
    for (long k = 0; k < st.core->step() * c.islands.chips_of(i); ++k) st.data->next(c.train.batch, c.model.seq_len, skip);
  }
  st.incarnation = ++rt->incarnations[static_cast<std::size_t>(i)];
  // Alive = joined: an island under repair or still healing is not part of the run yet.
  st.live = std::make_shared<bool>(false);
  self->attach_functor([rt, i, live = st.live, inc = st.incarnation, sys = &self->home_system()](const caf::error&) {
    const double t = detail::now_s(sys->clock()) - rt->t0.load();
    int mine = inc;
    rt->island_live[static_cast<std::size_t>(i)].compare_exchange_strong(mine, 0);
    const int n = *live ? --rt->counters.live_islands : rt->counters.live_islands.load();
    rt->account([&](GoodputMeter& g) {
      g.island_lost(i);
      g.alive(n, t);
    });
  });
  self->set_down_handler([self, rt, i](caf::down_msg& m) {
    auto& st = self->state;
    if (st.syncer && m.source == st.syncer.address()) {
      st.dead_syncer = st.syncer.address();
      st.join_inflight = false;
      st.syncer = caf::actor{};
      // Keep training and re-join the restarted syncer: a training island tries after each
      // step; one still waiting for its first JoinReply (it died with the request) on a timer.
      island_try_join(self, *rt, st, i);
      return;
    }
    auto it = st.monitored.find(m.source);
    if (it == st.monitored.end() || it->second < 0) return;
    const int chip = it->second;
    it->second = -1;
    if (st.waiting.erase(chip) && st.waiting.empty() && st.stepping) island_finish_step(self, *rt, st, i);
  });
  // Under repair (a chaos kill): ask to join only once the repair is over.
  if (const double now = detail::now_s(self), back = rt->windows.island_back(i); now < back)
    self->delayed_send(self, detail::micros(back - now), join_atom::value);
  else self->send(self, join_atom::value);
  return {
      [=](join_atom) {
        self->state.join_inflight = false;
        island_try_join(self, *rt, self->state, i);
      },
      [=](welcome_atom, const WireFrame& w) {
        auto& st = self->state;
        auto msg = decode_message(detail::bytes_of(w));
        if (!msg || !std::holds_alternative<JoinReply>(*msg)) return;
        st.join_inflight = false;
        const bool rejoin = st.joined;
        const auto& reply = std::get<JoinReply>(*msg);
        // ddp replicas are the server's parameters, always; the others keep their local progress.
        st.core->heal(reply, /*keep_local=*/rejoin && !rt->ddp());
        if (rt->ddp() && !reply.fragments.empty()) {
          st.core->resume_at(static_cast<long>(reply.fragments[0].header.base_round));
          st.ddp_waiting = false;
          st.stepping = false;
        }
        st.joined = true;
        st.left = false;  // the syncer counts on a joining island until it says it finished
        rt->island_live[static_cast<std::size_t>(i)] = st.incarnation;
        if (rejoin && st.finished) st.resend = true;  // the new syncer may lack what was sent
        if (!*st.live) {
          *st.live = true;
          const int n = ++rt->counters.live_islands;
          rt->account([&](GoodputMeter& g) { g.alive(n, run_time(self, *rt)); });
        }
        rt->emit(Event::healed(detail::now_s(self), i, st.incarnation, st.core->base_round(0), st.core->step(), rejoin));
        if (st.finished) island_wind_down(self, *rt, st, i);
        else island_start_step(self, *rt, st, i);
      },
      [=](step_atom) { island_start_step(self, *rt, self->state, i); },
      [=](const ChipResult& r) {
        auto& st = self->state;
        if (!st.stepping || r.step != st.core->step() + 1 || !st.waiting.erase(r.chip)) return;
        st.results.push_back(r);
        if (st.waiting.empty()) island_finish_step(self, *rt, st, i);
      },
      [=](global_atom, const WireFrame& w) {
        if (rt->ddp()) return island_ddp_params(self, *rt, self->state, i, w);
        auto got = self->state.core->adopt_frame(detail::bytes_of(w));
        if (!got && got.error().code == errc::missed_round) island_try_join(self, *rt, self->state, i);  // missed a delta: heal
        else if (!got) spdlog::warn("island {}: broadcast refused: {}", i, got.error().message());
        else if (self->state.finished) island_wind_down(self, *rt, self->state, i);
        if (rt->synchronous()) island_start_step(self, *rt, self->state, i);  // if it was waiting
      },
  };
}

}  // namespace

caf::actor spawn_island(caf::event_based_actor* parent, std::shared_ptr<Runtime> rt, int island) {
  return parent->spawn(island_actor, std::move(rt), island);
}

}  // namespace diloco::actors
