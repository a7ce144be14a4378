// The island actor: a thin shell over IslandCore (libdiloco/island.hpp).
#include "diloco/actors/island.hpp"

#include <cmath>
#include <map>

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/system_messages.hpp>
#include <spdlog/spdlog.h>

#include "detail.hpp"
#include "diloco/island.hpp"

namespace diloco::actors {

namespace {

// ---- island: steps on whichever chips answer, never waits for other islands ----

struct IslandState {
  std::unique_ptr<IslandCore> core;
  std::unique_ptr<BatchSource> data;
  bool joined = false;   // healed at least once (a later join only re-bases)
  bool stepping = false; // a step is in flight
  bool finished = false;
  caf::actor syncer;
  bool join_inflight = false;                // a join request or retry is under way
  caf::actor_addr dead_syncer;               // the syncer we saw die (the directory may still hold it)
  std::map<int, caf::actor> waiting;         // chips asked in the current step
  std::vector<ChipResult> results;
  std::map<caf::actor_addr, int> monitored;  // chip handles we monitor
  std::vector<std::shared_ptr<const Batch>> batches;
  int incarnation = 0;
};

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

void island_fire_faults(caf::event_based_actor* self, Runtime& rt, int i, long step) {
  for (std::size_t k = 0; k < rt.cfg.faults.size(); ++k) {
    const auto& f = rt.cfg.faults[k];
    if (f.island != i || f.at_step != step || rt.fault_fired[k].exchange(true)) continue;
    const std::string why = fmt::format("injected fault: kill {}{} at island {} step {}", f.kill,
                                        f.kill == "chip" ? fmt::format(" {}", f.chip) : std::string(), i, step);
    rt.emit({RuntimeEvent::fault, i, f.kill == "chip" ? f.chip : -1, step, 0, -1, 0, {}, why, detail::now_s(self)});
    spdlog::warn("{}", why);
    auto reason = caf::make_error(caf::sec::runtime_error, why);
    if (f.kill == "chip") exit_signal(rt.dir.chip(i, f.chip), reason);
    else if (f.kill == "syncer") exit_signal(rt.dir.syncer(), reason);
    else self->quit(reason);
  }
}

void island_start_step(caf::event_based_actor* self, Runtime& rt, IslandState& st, int i);

void island_finish_step(caf::event_based_actor* self, Runtime& rt, IslandState& st, int i) {
  std::vector<ChipGradient> g;
  for (const auto& r : st.results) g.push_back({*r.grads, r.tokens, r.loss});
  const int answered = static_cast<int>(st.results.size());
  const double loss = st.core->apply_gradient(g);
  st.results.clear();
  st.stepping = false;
  const long step = st.core->step();
  if (!std::isnan(loss)) {
    std::uint64_t tokens = 0;
    for (const auto& x : g) tokens += x.tokens;
    rt.counters.tokens += tokens;
    rt.island_steps[static_cast<std::size_t>(i)] = step;
    RuntimeEvent ev{RuntimeEvent::step, i, -1, step, 0, -1, answered, {}, {}, detail::now_s(self)};
    ev.detail = std::to_string(loss);
    rt.emit(ev);
    if (st.syncer) {
      detail::send_over_link(self, rt, i, true, st.syncer, progress_atom::value,
                             detail::to_wire(encode_message(st.core->progress())));
      for (int p : st.core->due()) {
        auto frame = st.core->outer_gradient_frame(p);
        if (!frame) {
          spdlog::error("island {}: fragment {} not sent: {}", i, p, frame.error().message());
          continue;
        }
        rt.counters.bytes_sent += frame->size();
        detail::send_over_link(self, rt, i, true, st.syncer, fragment_atom::value, detail::to_wire(*frame));
      }
    }
    island_fire_faults(self, rt, i, step);
    if (!st.syncer && st.joined) island_try_join(self, rt, st, i);
  }
  if (step >= rt.cfg.train.steps) {
    if (!st.finished) {
      st.finished = true;
      ++rt.counters.islands_done;
      rt.emit({RuntimeEvent::done, i, -1, step, 0, -1, 0, {}, {}, detail::now_s(self)});
    }
    return;
  }
  // No chip alive: try again shortly (restarted chips show up in the directory).
  if (std::isnan(loss)) self->delayed_send(self, detail::micros(0.01), step_atom::value);
  else self->send(self, step_atom::value);
}

void island_start_step(caf::event_based_actor* self, Runtime& rt, IslandState& st, int i) {
  if (st.stepping || st.finished || !st.joined) return;
  if (rt.synchronous() && st.core->must_wait()) return;  // resumed by the broadcast
  st.stepping = true;
  const int C = rt.cfg.islands.chips;
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
  st.incarnation = ++rt->incarnations[static_cast<std::size_t>(i)];
  ++rt->counters.live_islands;
  self->attach_functor([rt](const caf::error&) { --rt->counters.live_islands; });
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
  self->send(self, join_atom::value);
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
        st.core->heal(std::get<JoinReply>(*msg), /*keep_local=*/rejoin);
        st.joined = true;
        RuntimeEvent ev{rejoin ? RuntimeEvent::rejoin : RuntimeEvent::heal, i, -1, st.core->step(),
                        st.core->base_round(0), -1, st.incarnation, {}, {}, detail::now_s(self)};
        rt->emit(ev);
        island_start_step(self, *rt, st, i);
      },
      [=](step_atom) { island_start_step(self, *rt, self->state, i); },
      [=](const ChipResult& r) {
        auto& st = self->state;
        if (!st.stepping || r.step != st.core->step() + 1 || !st.waiting.erase(r.chip)) return;
        st.results.push_back(r);
        if (st.waiting.empty()) island_finish_step(self, *rt, st, i);
      },
      [=](global_atom, const WireFrame& w) {
        auto got = self->state.core->adopt_frame(detail::bytes_of(w));
        if (!got) spdlog::warn("island {}: broadcast refused: {}", i, got.error().message());
        if (rt->synchronous()) island_start_step(self, *rt, self->state, i);  // if it was waiting
      },
  };
}

}  // namespace

caf::actor spawn_island(caf::event_based_actor* parent, std::shared_ptr<Runtime> rt, int island) {
  return parent->spawn(island_actor, std::move(rt), island);
}

}  // namespace diloco::actors
