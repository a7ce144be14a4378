// The syncer actor: a thin shell over SyncerCore (libdiloco/syncer.hpp).
#include "diloco/actors/syncer.hpp"

#include <cmath>
#include <filesystem>
#include <limits>
#include <map>

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/system_messages.hpp>
#include <spdlog/spdlog.h>

#include "detail.hpp"
#include "diloco/syncer.hpp"

namespace diloco::actors {

namespace {

// ---- syncer: validates, merges by quorum + grace, broadcasts, snapshots ----
// One actor for all fragments: at this scale one merge is microseconds to milliseconds, and
// one actor keeps the round bookkeeping, the snapshot and the island registry consistent
// without cross-actor coordination; SyncerCore is per-fragment inside, so sharding later
// means one actor per fragment range with the same core.

struct SyncerState {
  std::unique_ptr<SyncerCore> core;
  std::map<int, caf::actor> islands;       // registered islands by id
  std::map<int, double> last_progress;     // for the inner step time estimate
  double t_step = 0.0;
  std::uint64_t reported_round = 0;
  double pending_tick = std::numeric_limits<double>::infinity();
};

void syncer_after_receive(caf::stateful_actor<SyncerState>* self, Runtime& rt) {
  auto& st = self->state;
  const double now = detail::now_s(self);
  auto commits = st.core->poll(now);
  for (const auto& c : commits) {
    auto frame = st.core->global_frame(c.fragment);
    if (frame) {
      auto w = detail::to_wire(*frame);
      for (auto& [id, a] : st.islands) {
        rt.counters.bytes_sent += w.bytes.size();
        detail::send_over_link(self, rt, id, false, a, global_atom::value, w);
      }
    }
    rt.counters.merged_tokens += c.tokens;
    ++rt.counters.commits;
    rt.emit({RuntimeEvent::commit, -1, -1, 0, c.round, c.fragment, c.merged, c.islands, {}, now});
  }
  if (!commits.empty()) {
    std::lock_guard lk(rt.global_mu);
    rt.global.assign(st.core->params().begin(), st.core->params().end());
    if (st.core->global_round() > rt.global_round) {
      rt.new_rounds.emplace_back(st.core->global_round(), rt.global);
      if (rt.new_rounds.size() > Runtime::max_new_rounds) rt.new_rounds.pop_front();
    }
    rt.global_round = st.core->global_round();
  }
  if (st.core->snapshot_due()) {
    auto cp = st.core->snapshot();
    if (!rt.cfg.syncer.checkpoint.empty()) {
      auto ok = save_checkpoint(rt.cfg.syncer.checkpoint, rt.layout_model->layout(), rt.plan, cp);
      if (!ok) spdlog::error("syncer: snapshot not written: {}", ok.error().message());
    }
    {
      std::lock_guard lk(rt.snap_mu);
      rt.last_snapshot = std::move(cp);
    }
    st.core->mark_snapshot();
    rt.emit({RuntimeEvent::snapshot, -1, -1, 0, st.core->global_round(), -1, 0, {}, {}, now});
  }
  const double next = st.core->next_deadline(now);
  if (std::isfinite(next) && next < st.pending_tick) {
    st.pending_tick = next;
    self->delayed_send(self, detail::micros(next - now), tick_atom::value);
  }
}

caf::behavior syncer_actor(caf::stateful_actor<SyncerState>* self, std::shared_ptr<Runtime> rt) {
  detail::guard(self, "syncer");
  auto& st = self->state;
  const auto& c = rt->cfg;
  SyncerSettings s;
  s.islands = c.train.islands;
  s.merge = c.merge;
  s.quorum = c.quorum;
  s.outer = c.outer;
  s.snapshot_every = c.syncer.snapshot_every;
  if (rt->synchronous()) {
    // The synchronous baselines are the papers' algorithms (as in loops.cpp): every island in
    // every round, a plain mean of equal-weight outer gradients.
    s.quorum.min_islands = c.train.islands;
    s.quorum.grace = "none";
    s.merge.weighting = "uniform";
    s.merge.rda = false;
  }
  st.core = std::make_unique<SyncerCore>(rt->plan, rt->initial, s);
  // Restart: resume from the last snapshot (the file when configured, else memory).
  std::optional<Checkpoint> cp;
  if (!c.syncer.checkpoint.empty() && std::filesystem::exists(c.syncer.checkpoint)) {
    auto got = load_checkpoint(c.syncer.checkpoint, rt->layout_model->layout(), rt->plan, LoadOptions{false});
    if (got) cp = std::move(*got);
    else spdlog::error("syncer: snapshot {} unusable: {}", c.syncer.checkpoint, got.error().message());
  } else {
    std::lock_guard lk(rt->snap_mu);
    cp = rt->last_snapshot;
  }
  const bool restart = ++rt->syncer_starts > 1;
  if (cp) {
    st.core->restore(*cp);
    rt->emit({RuntimeEvent::restore, -1, -1, 0, st.core->global_round(), -1, 0, {}, "from the last snapshot",
              detail::now_s(self)});
  } else if (restart) {
    // Killed before its first snapshot: rounds start over from the initial parameters, and the
    // islands' next outer gradients (relative to those) carry all their progress.
    rt->emit({RuntimeEvent::restore, -1, -1, 0, 0, -1, 0, {}, "no snapshot yet: initial parameters",
              detail::now_s(self)});
  }
  st.core->set_live_islands(0);
  self->set_down_handler([self, rt](caf::down_msg& m) {
    auto& st = self->state;
    for (auto it = st.islands.begin(); it != st.islands.end(); ++it)
      if (it->second.address() == m.source) {
        st.islands.erase(it);
        break;
      }
    st.core->set_live_islands(static_cast<int>(st.islands.size()));
    syncer_after_receive(self, *rt);  // the living may now be a full house
  });
  return {
      [=](join_atom, const WireFrame& w) {
        auto& st = self->state;
        auto msg = decode_message(detail::bytes_of(w));
        if (!msg || !std::holds_alternative<JoinRequest>(*msg)) return;
        const int id = std::get<JoinRequest>(*msg).island;
        if (id < 0 || id >= rt->cfg.train.islands) return;
        auto who = caf::actor_cast<caf::actor>(self->current_sender());
        if (!who) return;
        st.islands[id] = who;
        self->monitor(who);
        st.core->set_live_islands(static_cast<int>(st.islands.size()));
        auto reply = detail::to_wire(encode_message(st.core->join_reply()));
        rt->counters.bytes_sent += reply.bytes.size();
        rt->emit({RuntimeEvent::join, id, -1, 0, st.core->global_round(), -1, 0, {}, {}, detail::now_s(self)});
        detail::send_over_link(self, *rt, id, false, who, welcome_atom::value, std::move(reply));
      },
      [=](progress_atom, const WireFrame& w) {
        auto& st = self->state;
        auto msg = decode_message(detail::bytes_of(w));
        if (!msg || !std::holds_alternative<ProgressMessage>(*msg)) return;
        const int id = std::get<ProgressMessage>(*msg).island;
        const double now = detail::now_s(self);
        if (auto it = st.last_progress.find(id); it != st.last_progress.end() && now > it->second)
          st.t_step = st.t_step == 0.0 ? now - it->second : 0.9 * st.t_step + 0.1 * (now - it->second);
        st.last_progress[id] = now;
        st.core->set_timing(st.t_step, 0.0);
      },
      [=](fragment_atom, const WireFrame& w) {
        auto got = self->state.core->receive(detail::bytes_of(w), detail::now_s(self));
        if (!got) {
          const bool stale = got.error().code == errc::stale_round;
          ++(stale ? rt->counters.dropped_stale : rt->counters.rejected);
          rt->emit({stale ? RuntimeEvent::dropped : RuntimeEvent::rejected, -1, -1, 0, 0, -1, 0, {},
                    got.error().message(), detail::now_s(self)});
          return;
        }
        syncer_after_receive(self, *rt);
      },
      [=](tick_atom) {
        self->state.pending_tick = std::numeric_limits<double>::infinity();
        syncer_after_receive(self, *rt);
      },
  };
}

}  // namespace

caf::actor spawn_syncer(caf::event_based_actor* parent, std::shared_ptr<Runtime> rt) {
  return parent->spawn(syncer_actor, std::move(rt));
}

}  // namespace diloco::actors
