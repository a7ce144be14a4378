// The syncer actor: a thin shell over SyncerCore (libdiloco/syncer_core.hpp).
#include "diloco/actors/syncer.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/system_messages.hpp>
#include <spdlog/spdlog.h>

#include "detail.hpp"
#include "diloco/run_state.hpp"
#include "diloco/syncer_core.hpp"
#include "diloco/invariants.hpp"

namespace diloco::actors {

namespace {

// ---- syncer: validates, merges by quorum + grace, broadcasts, snapshots ----
// One actor for all fragments: at this scale one merge is microseconds to milliseconds, and
// one actor keeps the round bookkeeping, the snapshot and the island registry consistent
// without cross-actor coordination; SyncerCore is per-fragment inside, so sharding later
// means one actor per fragment range with the same core.

struct SyncerState {
  std::unique_ptr<SyncerCore> core;
  // Goodput: frames accepted per (island, fragment) since its last commit. A newer frame of an
  // island supersedes its pending one and carries its work, so a commit settles all of them.
  std::map<std::pair<int, int>, int> accepted;
  double t_sync = 0.0;                     // merge + broadcast time estimate (adaptive grace)
  std::map<int, caf::actor> islands;       // registered islands by id
  std::uint64_t reported_round = 0;
  double pending_tick = std::numeric_limits<double>::infinity();
  // A replicated leader (Run::hold_until_replicated): the generation of its newest snapshot, the
  // one a majority of replicas holds, and what waits for it: broadcasts (with the generation
  // they belong to) and islands to welcome.
  std::uint64_t generation = 0;
  std::uint64_t replicated = 0;
  struct HeldFrame {
    std::uint64_t generation = 0;
    int island = 0;
    Frame frame;
  };
  std::deque<HeldFrame> held_frames;
  // Islands whose down link was busy when a frame fell due: sent when it is free (one frame per
  // fragment then carries every commit since the island's last), at the tick of this time.
  double link_free_tick = std::numeric_limits<double>::infinity();
  std::vector<detail::Joining> held_welcomes;
};

/// Whether what the syncer holds now may reach islands: always, unless a replicated leader's
/// newest snapshot is not yet held by a majority of the replicas.
bool replicated(const SyncerState& st, const Runtime& rt) { return !rt.hold_until_replicated || st.replicated >= st.generation; }

/// The islands of the run as the syncer core counts them: the registered ones and those that
/// finished (a finished island stays finished when it goes away, until it joins again): a merge's
/// share n/L counts them, and a finished one no longer holds up a round (SyncerCore::finish).
int members(const SyncerState& st, const Runtime& rt) {
  int n = 0;
  for (int i = 0; i < rt.cfg.train.islands; ++i)
    n += st.islands.count(i) || rt.syncer.finished[static_cast<std::size_t>(i)].load() ? 1 : 0;
  return n;
}

/// The last step heard of island `i` (never back): what a restarted site process resumes from.
void note_heard(Runtime& rt, const SyncerState& st, int i) {
  auto& heard = rt.syncer.heard_step[static_cast<std::size_t>(i)];
  const auto step = static_cast<long>(std::min<std::uint64_t>(st.core->last_step(i), std::numeric_limits<long>::max()));
  if (step > heard.load()) heard = step;
}

/// Island `id` finished, or (on joining) trains again: the flag the app reads, the member count
/// and the core's quorum, in that order (finished islands count among the members).
void set_finished(SyncerState& st, Runtime& rt, int id, bool finished) {
  const bool changed = st.core->finished(id) != finished;
  rt.syncer.finished[static_cast<std::size_t>(id)] = finished;
  st.core->set_live_islands(members(st, rt));
  st.core->finish(id, finished);
  if (changed && st.core->health()) st.generation = rt.syncer.keep_snapshot(std::make_shared<const Checkpoint>(st.core->snapshot()));
}

/// The syncer cannot go on: its state diverged (kind diverged) or its state file cannot be
/// resumed from (unusable_state). Reports it, stops the run with `why`, and returns a behaviour
/// that takes nothing more: the actor stays alive, so its supervisor does not restart it into
/// the same state again and again.
caf::behavior syncer_halt(caf::stateful_actor<SyncerState>* self, Runtime& rt, Event::Kind kind, int fragment,
                          const std::string& why) {
  const double now = detail::now_s(self);
  rt.emit(kind == Event::Kind::diverged ? Event::diverged_state(now, -1, fragment, 0, why) : Event::unusable(now, why));
  spdlog::error("syncer: {}", why);
  rt.stop(why);
  self->set_down_handler([](caf::down_msg&) {});
  // Every message of the syncer's protocol is taken and ignored (an unhandled one would send
  // its sender an error that ends it).
  return {
      [](join_atom, const WireFrame&) {}, [](progress_atom, const WireFrame&) {}, [](fragment_atom, const WireFrame&) {},
      [](grad_atom, const WireFrame&) {}, [](tick_atom) {},                     [](repaired_atom) {},
      [](replicated_atom, std::uint64_t) {},
  };
}

/// The join reply to island `j`, sent. Sends it withdrew (the island keeps its parameters and
/// sends that progress again) leave the goodput meter's books as dropped ones do.
void welcome(caf::stateful_actor<SyncerState>* self, Runtime& rt, const detail::Joining& j) {
  auto& st = self->state;
  std::vector<int> withdrawn;
  const auto held = st.core->held_sent();
  auto reply = st.core->join_reply(j.id, j.keeps_local, &withdrawn, j.holds);
  rt.syncer.heals_held += st.core->held_sent() - held;
  for (int p : withdrawn) {
    ++rt.syncer.dropped_stale;
    if (auto it = st.accepted.find({j.id, p}); it != st.accepted.end())
      for (; it->second > 0; --it->second) detail::tell_meter(rt, GoodputFact::dropped_of(j.id, p));
    rt.emit(Event::dropped_late(detail::now_s(self), "island " + std::to_string(j.id) + " re-joined keeping its parameters: its pending send of fragment " +
                                                         std::to_string(p) + " is withdrawn (that progress comes again from the new base)"));
  }
  detail::welcome(self, rt, j.id, j.who, reply, st.core->global_round());
}

/// Whether island `id` registered and is past its welcome (the join reply carries every commit).
caf::actor reachable(const SyncerState& st, int id) {
  auto it = st.islands.find(id);
  if (it == st.islands.end()) return {};
  for (const auto& j : st.held_welcomes)
    if (j.id == id && j.who == it->second) return {};
  return it->second;
}

void send_frame(caf::stateful_actor<SyncerState>* self, Runtime& rt, int id, const caf::actor& to, const Frame& frame,
                double& t_link) {
  auto w = detail::to_wire(frame);
  rt.syncer.bytes_down += w.bytes.size();
  t_link = std::max(t_link, detail::send_over_link(self, rt, id, false, to, global_atom::value, std::move(w)));
}

/// The frames that fell due (SyncerCore::due) for every registered island: built and sent now
/// when the island's down link is free, else left due for when it is (link_free_tick), so that
/// one frame per fragment then carries every commit since. A replicated leader holds them
/// (built now, with the state a majority will hold) until replicated. Returns the longest
/// delivery delay, or an error when a fragment cannot be encoded (the syncer diverged).
Expected<double> send_due(caf::stateful_actor<SyncerState>* self, Runtime& rt, double now) {
  auto& st = self->state;
  double t_link = 0.0;
  // The islands something is due to: most passes (a frame arrived, nothing committed) stop here.
  std::vector<std::pair<int, caf::actor>> due;
  for (const auto& [id, who] : st.islands) {
    bool any = false;
    for (int p = 0; p < rt.P() && !any; ++p) any = st.core->is_due(p, id);
    if (any && reachable(st, id)) due.emplace_back(id, who);
  }
  const bool hold = !replicated(st, rt);
  // Each link's state before this pass sends anything: islands sharing a site's link all go in
  // the pass that finds it free (read after each send, the first island's frame would hold back
  // the others).
  std::vector<double> free_at(due.size(), 0.0);
  if (!hold)
    for (std::size_t k = 0; k < due.size(); ++k) free_at[k] = rt.t0.load() + rt.links.busy_until(due[k].first, false);
  for (std::size_t k = 0; k < due.size(); ++k) {
    const auto& [id, who] = due[k];
    if (free_at[k] > now) {
      st.link_free_tick = std::min(st.link_free_tick, free_at[k]);
      continue;
    }
    for (int p = 0; p < rt.P(); ++p) {
      if (!st.core->is_due(p, id)) continue;
      auto frame = st.core->frame_for(p, id);
      if (!frame && !st.core->health()) return frame.error();
      if (!frame) continue;  // nothing new for it
      if (hold) st.held_frames.push_back({st.generation, id, std::move(*frame)});
      else send_frame(self, rt, id, who, *frame, t_link);
    }
  }
  return t_link;
}

/// What the syncer's state file holds: its committed state and, in a run with a state directory
/// (Run::keep_island_states), each island's own state as of its last send and how far the run
/// had gone (seconds, tokens per island): everything a resumed run needs, in one atomic write.
Checkpoint state_file(const Runtime& rt, const SyncerCore& core, double now) {
  Checkpoint cp = core.snapshot();
  if (!rt.keep_island_states) return cp;
  RunProgress progress;
  progress.elapsed_s = rt.resumed_at_s + (now - rt.t0.load());
  for (const auto& rec : rt.islands) {
    progress.tokens.push_back(rec.tokens.load());
    if (auto s = rec.kept_state()) cp.islands.push_back(*s);
  }
  put_run_progress(cp, progress);
  return cp;
}

void syncer_after_receive(caf::stateful_actor<SyncerState>* self, Runtime& rt) {
  auto& st = self->state;
  const double now = detail::now_s(self);
  const auto t_begin = std::chrono::steady_clock::now();
  double t_link = 0.0;
  if (rt.leading && !rt.leading()) return;  // deposed: nothing is committed (the app ends this leadership)
  auto commits = st.core->poll(now);
  // Nothing of a diverged syncer may reach the islands or a snapshot, and nobody would wait
  // for a frame that is never sent: the run ends here.
  auto diverged = [&](int fragment, const std::string& why) {
    self->become(syncer_halt(self, rt, Event::Kind::diverged, fragment, "the syncer diverged: " + why));
  };
  for (const auto& c : commits)
    if (!c.finite || !st.core->health())
      return diverged(c.fragment, st.core->health() ? "fragment " + std::to_string(c.fragment) + " is not finite"
                                                    : st.core->health().error().reason);
  if (!commits.empty()) {
    // The commits are held before anyone hears of them: a syncer killed from here on restarts
    // (in this process) from exactly these rounds, neither losing nor repeating one.
    st.generation = rt.syncer.keep_snapshot(std::make_shared<const Checkpoint>(st.core->snapshot()));
    rt.syncer.publish(st.core->params(), st.core->global_round(), true);
  }
  // Who a commit is due to gets it now, or once its link is free; a replicated leader holds it
  // until a majority of the replicas holds the commit.
  if (auto sent = send_due(self, rt, now)) t_link = *sent;
  else return diverged(-1, sent.error().reason);
  for (const auto& c : commits) {
    ++rt.syncer.commits;
    if (c.unblocked) {
      ++rt.syncer.unblocked;
      spdlog::warn("syncer: fragment {} committed round {} with {} of the islands: every island still training waited "
                   "for another fragment's round (their sends came in different orders after a restart or re-join)",
                   c.fragment, c.round, c.contributions);
    }
    if (c.excess > 0.0)
      spdlog::info("syncer: fragment {} round {}: {:.0f}% of the merge's weight was progress past one period of its contributions "
                   "(sent after an outage, or while a send waited for its merge), applied without the outer momentum",
                   c.fragment, c.round, 100.0 * c.excess);
    rt.syncer.clipped += c.clipped.size();
    for (int island : c.clipped)
      spdlog::warn("syncer: island {}'s outer gradient of fragment {} was clipped to {} × the median of the islands' last norms (round {})",
                   island, c.fragment, rt.cfg.merge.clip_ratio, c.round);
    rt.syncer.merged_tokens = st.core->stats().merged_tokens;
    for (auto& [key, n] : st.accepted) {
      if (key.second != c.fragment) continue;
      const bool merged = std::find(c.islands.begin(), c.islands.end(), key.first) != c.islands.end();
      for (; n > 0; --n)
        detail::tell_meter(rt, merged ? GoodputFact::merged_of(key.first, key.second)
                                      : GoodputFact::dropped_of(key.first, key.second));
    }
    detail::tell_meter(rt, GoodputFact::committed_at(now - rt.t0.load()));
    auto e = Event::committed(now, c.round, c.fragment, c.merged, c.islands, c.staleness);
    e.contributions = c.contributions, e.live = c.live, e.flush = c.flush, e.unblocked = c.unblocked, e.finite = c.finite, e.frames = c.frames;
    rt.emit(e);
  }
  if ((!commits.empty() && st.link_free_tick == std::numeric_limits<double>::infinity()) || t_link > 0.0) {
    // t_sync of the adaptive grace: merging and sending plus the slowest link's delivery (of
    // frames sent at the commit, or later once their link was free; a commit whose frames all
    // wait for a link is measured when they leave, from then: the wait itself is not counted).
    // (Simulated: the links' time alone; a wall-clock reading would make the run unrepeatable.)
    const double t = (rt.simulated ? 0.0 : std::chrono::duration<double>(std::chrono::steady_clock::now() - t_begin).count()) + t_link;
    st.t_sync = st.t_sync == 0.0 ? t : 0.9 * st.t_sync + 0.1 * t;
    st.core->set_sync_time(st.t_sync);
  }
  // The state file (syncer.checkpoint) is written every snapshot_every rounds and when an island
  // finishes: what a restarted process resumes from.
  if (!rt.cfg.syncer.checkpoint.empty() && st.core->snapshot_due()) {
    if (auto ok = save_checkpoint(rt.cfg.syncer.checkpoint, rt.layout_model->layout(), rt.plan, state_file(rt, *st.core, now)); !ok)
      spdlog::error("syncer: snapshot not written: {}", ok.error().message());
    st.core->mark_snapshot();
    rt.emit(Event::snapshot_taken(now, st.core->global_round()));
  }
  const double next = std::min(st.core->next_deadline(now), st.link_free_tick);
  st.link_free_tick = std::numeric_limits<double>::infinity();
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
  s.term = rt->leader_term;
  // An island's step counts the targets of one batch, at most batch × seq_len of them (chip_share);
  // the bound allows batch × (seq_len + 1), one token a window of slack.
  s.max_tokens_per_step = static_cast<std::uint64_t>(c.train.batch) * (static_cast<std::uint64_t>(c.model.seq_len) + 1);
  s.broadcast = CodecParams{*parse_encoding(c.fragments.broadcast_encoding), static_cast<std::uint32_t>(c.fragments.block_size)};
  s.broadcast_to = c.fragments.broadcast_to;
  if (rt->synchronous()) {
    // The synchronous baselines are the papers' algorithms (as in loops.cpp): every island in
    // every round, a plain mean of equal-weight outer gradients. Under faults, a round whose
    // missing islands wait on other rounds commits without them (lockstep).
    s.quorum.min_islands = c.train.islands;
    s.quorum.grace = GraceRule::none;
    s.merge.weighting = Weighting::uniform;
    s.merge.rda = false;
    s.merge.clip_ratio = 0.0;  // nor clipped: the reference loops do not clip
    s.lockstep = true;
  } else if (c.train.sync_every_s <= 0.0) {
    s.period_steps = c.train.H;  // a time cadence has no fixed period in steps
  }
  st.core = std::make_unique<SyncerCore>(rt->plan, rt->initial, s);
  st.replicated = rt->gateway.majority_generation.load();  // a restart in this process: what is already held
  // Under repair (a chaos kill): take our place in the directory once it is over; until then
  // islands find the dead predecessor and keep training on their own.
  if (const double now = detail::now_s(self), back = rt->windows.syncer_back(); now < back)
    self->delayed_send(self, detail::micros(back - now), repaired_atom::value);
  // Restart: resume from the last commit held in memory (a restart in this process), else from
  // the state file (a process started again). The file is read at every start all the same: one
  // that cannot be resumed from stops the run, at the first start as at a restart, since going
  // on would throw its rounds away or overwrite it at the next write.
  std::shared_ptr<const Checkpoint> cp;
  if (!c.syncer.checkpoint.empty()) {
    auto got = load_syncer_state(c.syncer.checkpoint, rt->layout_model->layout(), rt->plan, c.train.islands);
    if (!got)
      return syncer_halt(self, *rt, Event::Kind::unusable_state, -1,
                         "unusable syncer state file, refusing to start over it: " + got.error().message());
    if (*got) cp = std::make_shared<const Checkpoint>(std::move(**got));
  }
  if (auto held = rt->syncer.snapshot()) cp = std::move(held);
  const bool restart = ++rt->syncer.starts > 1;
  if (cp) {
    if (auto ok = st.core->restore(*cp); !ok)
      return syncer_halt(self, *rt, Event::Kind::unusable_state, -1,
                         "unusable syncer state" + (c.syncer.checkpoint.empty() ? std::string() : " file " + c.syncer.checkpoint) +
                             ", refusing to start over it: " + ok.error().message());
    rt->syncer.publish(st.core->params(), st.core->global_round(), false);
    rt->syncer.merged_tokens = st.core->stats().merged_tokens;
    // A replicated leader's followers get what it resumed from before islands hear of it.
    if (rt->hold_until_replicated) st.generation = rt->syncer.keep_snapshot(cp);
    auto e = Event::restored(detail::now_s(self), st.core->global_round(), "from the last snapshot");
    for (int p = 0; p < rt->P(); ++p) e.rounds.push_back(st.core->round(p));
    rt->emit(e);
  } else if (restart) {
    // Killed before its first snapshot: rounds start over from the initial parameters, and the
    // islands' next outer gradients (relative to those) carry all their progress.
    rt->emit(Event::restored(detail::now_s(self), 0, "no snapshot yet: initial parameters"));
  }
  // Who finished and the last step heard of come back with the snapshot (none without one): a
  // syncer process restarted after a site finished still ends the run, and a restarted site
  // learns where its islands were. Islands that are still around re-join and tell it anew.
  for (int i = 0; i < c.train.islands; ++i) {
    const auto k = static_cast<std::size_t>(i);
    rt->syncer.finished[k] = st.core->finished(i);
    note_heard(*rt, st, i);
  }
  st.core->set_live_islands(members(st, *rt));
  self->set_down_handler([self, rt](caf::down_msg& m) {
    auto& st = self->state;
    for (auto it = st.islands.begin(); it != st.islands.end(); ++it)
      if (it->second.address() == m.source) {
        st.islands.erase(it);
        break;
      }
    st.core->set_live_islands(members(st, *rt));
    syncer_after_receive(self, *rt);  // the living may now be a full house
  });
  return {
      [=](join_atom, const WireFrame& w) {
        auto& st = self->state;
        auto joining = detail::admit_join(self, *rt, w);
        if (!joining) return;
        const int id = joining->id;
        const auto& who = joining->who;
        st.islands[id] = who;
        self->monitor(who);
        set_finished(st, *rt, id, false);  // training again until it says otherwise
        // A join reply carries every commit: a replicated leader sends it once a majority holds them.
        if (replicated(st, *rt) && (!rt->leading || rt->leading())) welcome(self, *rt, *joining);
        else {
          // One held welcome per island, its newest join: repeated joins cannot grow the list.
          std::erase_if(st.held_welcomes, [id](const detail::Joining& j) { return j.id == id; });
          st.held_welcomes.push_back(*joining);
        }
      },
      [=](replicated_atom, std::uint64_t generation) {
        // From this process's gateway only: a majority of the replicas holds `generation`.
        auto& st = self->state;
        auto from = self->current_sender();
        if (!from || from->node() != self->node() || generation <= st.replicated) return;
        if (rt->leading && !rt->leading()) return;  // deposed: nothing more reaches the islands
        st.replicated = std::min(generation, st.generation);
        double t_link = 0.0;
        while (!st.held_frames.empty() && st.held_frames.front().generation <= st.replicated) {
          const auto& h = st.held_frames.front();
          if (auto to = reachable(st, h.island)) send_frame(self, *rt, h.island, to, h.frame, t_link);
          st.held_frames.pop_front();
        }
        if (!replicated(st, *rt)) return;
        auto welcomes = std::move(st.held_welcomes);
        st.held_welcomes.clear();
        for (auto& j : welcomes)
          if (auto it = st.islands.find(j.id); it != st.islands.end() && it->second == j.who) welcome(self, *rt, j);
      },
      [=](progress_atom, const WireFrame& w) {
        auto& st = self->state;
        const auto pm = detail::admit_progress(self, *rt, w);
        if (!pm) return;
        const int id = pm->island;
        const double now = detail::now_s(self);
        st.core->heard(id, pm->local_step, now, pm->step_seconds);
        note_heard(*rt, st, id);
        if (pm->diverged) return;  // the run stops (admit_progress)
        if (pm->finished) {
          // The island trained its budget and sent its last contributions: rounds stop
          // waiting for it, so those commit even below the quorum.
          set_finished(st, *rt, id, true);
          syncer_after_receive(self, *rt);
        }
      },
      [=](repaired_atom) { rt->dir.set_syncer(caf::actor_cast<caf::actor>(self)); },
      [](grad_atom, const WireFrame&) {},  // ddp's, not of this protocol (param_server.cpp)
      [=](fragment_atom, const WireFrame& w) {
        const auto superseded = self->state.core->superseded();
        auto got = self->state.core->receive(detail::bytes_of(w), detail::now_s(self));
        rt->syncer.superseded += self->state.core->superseded() - superseded;
        if (!got && got.error().code == errc::stale_round) return detail::drop_late(self, *rt, w, got.error().message());
        if (!got) {
          ++rt->syncer.refused;
          auto e = Event::refused(detail::now_s(self), got.error().message(), std::string(to_string(got.error().code)));
          e.digest = frame_digest(detail::bytes_of(w));  // nothing of it may reach a commit
          rt->emit(e);
          return;
        }
        ++self->state.accepted[{got->island, static_cast<int>(got->index)}];
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
