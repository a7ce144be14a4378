// SyncerCore: per-fragment rounds, quorum + grace decisions, token-weighted merge and snapshots.
#include "diloco/syncer_core.hpp"
#include "diloco/digest.hpp"
#include "diloco/invariants.hpp"
#include "diloco/limits.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <system_error>

namespace diloco {

namespace {

// The syncer's own metadata entries in a snapshot (checkpoint.hpp keeps them as strings).
std::string outer_steps_key(std::size_t p) { return "syncer.outer_steps." + std::to_string(p); }
std::string pending_count_key(std::size_t p) { return "syncer.outer_pending_count." + std::to_string(p); }
std::string island_step_key(std::size_t i) { return "syncer.island_step." + std::to_string(i); }
std::string island_finished_key(std::size_t i) { return "syncer.island_finished." + std::to_string(i); }
// Tokens of every contribution merged since the run began (across restarts and leaders).
constexpr const char* kMergedTokensKey = "syncer.merged_tokens";

/// The syncer metadata of a checkpoint, each value checked: what restore() applies.
struct SyncerMeta {
  std::vector<long> outer_steps;           // [p]
  std::vector<int> pending_counts;         // [p]
  std::vector<std::uint64_t> island_steps; // [island]
  std::vector<bool> finished;              // [island]
};

/// Entry `key` as a decimal integer ≤ `max` (absent: `fallback`); anything else is corrupt.
Expected<std::uint64_t> meta_uint(const Checkpoint& cp, const std::string& key, std::uint64_t max,
                                  std::uint64_t fallback) {
  auto it = cp.metadata.find(key);
  if (it == cp.metadata.end()) return fallback;
  const std::string& s = it->second;
  std::uint64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc{} || end != s.data() + s.size() || v > max)
    return Error{errc::corrupt_checkpoint, "metadata " + key + " = '" + s.substr(0, 40) + "' is not an integer in [0, " +
                                               std::to_string(max) + "]"};
  return v;
}

Expected<SyncerMeta> read_meta(const Checkpoint& cp, std::size_t P, int islands, const OuterConfig& outer) {
  SyncerMeta m;
  for (std::size_t p = 0; p < P; ++p) {
    auto t = meta_uint(cp, outer_steps_key(p), kMaxCounter, 0);
    if (!t) return t.error();
    m.outer_steps.push_back(static_cast<long>(*t));
    // Delayed Nesterov: fewer than `delay` contributions wait in the buffer.
    auto n = meta_uint(cp, pending_count_key(p), 1u << 30, 0);
    if (!n) return n.error();
    if (*n >= static_cast<std::uint64_t>(std::max(outer.delay, 1)))
      return Error{errc::checkpoint_mismatch, "metadata " + pending_count_key(p) + " = " + std::to_string(*n) +
                                                  " pending contributions, the run's outer.delay is " +
                                                  std::to_string(outer.delay)};
    m.pending_counts.push_back(static_cast<int>(*n));
  }
  for (int i = 0; i < islands; ++i) {
    const auto k = static_cast<std::size_t>(i);
    auto step = meta_uint(cp, island_step_key(k), kMaxCounter, 0);
    if (!step) return step.error();
    auto done = meta_uint(cp, island_finished_key(k), 1, 0);
    if (!done) return done.error();
    m.island_steps.push_back(*step);
    m.finished.push_back(*done == 1);
  }
  return m;
}

}  // namespace

std::vector<int> islands_in_progress(const Checkpoint& cp, int islands) {
  std::vector<int> out;
  for (int i = 0; i < islands; ++i) {
    const auto k = static_cast<std::size_t>(i);
    auto step = meta_uint(cp, island_step_key(k), kMaxCounter, 0);
    auto done = meta_uint(cp, island_finished_key(k), 1, 0);
    if (step && done && *step > 0 && *done == 0) out.push_back(i);
  }
  return out;
}

namespace {

WireContext context_for(const FragmentPlan& plan, const SyncerSettings& s) {
  WireContext ctx;
  for (int p = 0; p < plan.count(); ++p) ctx.fragment_sizes.push_back(plan.size(p));
  ctx.rounds.assign(static_cast<std::size_t>(plan.count()), 0);
  ctx.islands = s.islands;
  ctx.accept = FragmentKind::outer_gradient;
  ctx.max_staleness = s.merge.max_staleness;
  ctx.max_tokens_per_step = s.max_tokens_per_step;
  return ctx;
}
}  // namespace

SyncerCore::SyncerCore(const FragmentPlan& plan, std::span<const float> initial, SyncerSettings settings)
    : plan_(&plan), settings_(std::move(settings)), params_(initial.begin(), initial.end()),
      inbox_(context_for(plan, settings_)) {
  const auto P = static_cast<std::size_t>(plan.count());
  for (int p = 0; p < plan.count(); ++p) outer_.emplace_back(plan.size(p), settings_.outer);
  rounds_.assign(P, 0);
  pending_.resize(P);
  rx_.resize(plan.largest());
  for (int p = 0; p < plan.count(); ++p) clips_.emplace_back(settings_.merge.clip_ratio, clip_start(p));
  merged_base_.assign(P, std::vector<std::uint64_t>(static_cast<std::size_t>(std::max(settings_.islands, 0)), 0));
  merged_seq_ = merged_base_;
  epochs_.assign(static_cast<std::size_t>(std::max(settings_.islands, 0)), 0);
  fresh_epoch_.assign(epochs_.size(), 0);
  state_.resize(P);
  for (auto& s : state_) s.live_islands = settings_.islands;
  finished_.assign(static_cast<std::size_t>(std::max(settings_.islands, 0)), false);
  last_step_.assign(finished_.size(), 0);
  sent_.resize(P);
  last_frame_.resize(P);
  digests_.resize(P);
  for (int p = 0; p < plan.count(); ++p) {
    Sent first;  // every island starts from the initial parameters, round 0
    if (lossy()) first.hat = gathered(p);
    sent_[static_cast<std::size_t>(p)].assign(finished_.size(), first);
  }
}

double SyncerCore::clip_start(int p) const {
  // What the ratio bound allows at these parameters, as a norm: max_delta_ratio × max(RMS(Θ_p), 1)
  // × sqrt(size), fixed until the islands' own norms take over.
  const auto theta = gathered(p);  // held: a range-for over *gathered(p) would outlive its vector
  double t2 = 0.0;
  for (float x : *theta) t2 += static_cast<double>(x) * x;
  const auto n = static_cast<double>(plan_->size(p));
  return settings_.merge.max_delta_ratio * std::max(std::sqrt(t2 / n), 1.0) * std::sqrt(n);
}

std::shared_ptr<const std::vector<float>> SyncerCore::gathered(int p) const {
  auto v = std::make_shared<std::vector<float>>(plan_->size(p));
  plan_->gather<float>(p, params_, *v);
  return v;
}

Expected<FragmentHeader> SyncerCore::receive(std::span<const std::byte> frame, double now) {
  auto got = inbox_.receive(frame, std::span<double>(rx_));
  if (!got) {
    if (const auto& h = inbox_.stale()) settle(static_cast<int>(h->index), *h);  // never to be merged
    return got.error();
  }
  stats_.bytes_in += frame.size();
  active_at_ = std::max(active_at_, now);
  const auto& h = got->header;
  const auto from = static_cast<std::size_t>(h.island);
  theta_.resize(plan_->size(static_cast<int>(h.index)));
  plan_->gather<float>(static_cast<int>(h.index), params_, theta_);
  if (auto ok = check_outer_gradient(std::span<const double>(rx_).first(got->count), theta_, settings_.merge); !ok) {
    refused_.add(ok.error().code);
    settle(static_cast<int>(h.index), h);  // never to be merged: the island may count it done
    return Error{ok.error().code, "island " + std::to_string(h.island) + "'s fragment " + std::to_string(h.index) +
                                      " based on round " + std::to_string(h.base_round) + ": " + ok.error().reason};
  }
  const bool kept_local = fresh_epoch_[from] != epochs_[from];  // its last join kept its parameters
  if (kept_local && h.seq >> 32 != epochs_[from] && this_life(h)) {
    ++stats_.withdrawn;
    refused_.add(errc::stale_round);  // a refusal like any other: counted by code, not accepted
    return Error{errc::stale_round, "island " + std::to_string(h.island) + " re-joined keeping its parameters (epoch " +
                                        std::to_string(epochs_[from]) + "): its send of epoch " + std::to_string(h.seq >> 32) +
                                        " of fragment " + std::to_string(h.index) + " comes again from the new base"};
  }
  if (merged_base_[h.index][from] > h.base_round) {
    ++stats_.overlapping;
    refused_.add(errc::stale_round);
    settle(static_cast<int>(h.index), h);  // never to be merged: the island may count it done
    return Error{errc::stale_round, "island " + std::to_string(h.island) + " already had a contribution based on round " +
                                        std::to_string(h.base_round) + " of fragment " + std::to_string(h.index) +
                                        " merged; this one repeats it"};
  }
  auto& list = pending_[h.index];
  auto it = std::find_if(list.begin(), list.end(), [&](const Pending& x) { return x.header.island == h.island; });
  Pending item{h, std::vector<double>(rx_.begin(), rx_.begin() + static_cast<long>(got->count)), now, frame_digest(frame)};
  if (it != list.end()) {
    // The newest outer gradient of an island supersedes its older one: its δ covers both
    // periods (same base round), so their counters add up.
    if (it->header.base_round == h.base_round) {
      item.header.tokens = add_counters(item.header.tokens, it->header.tokens);
      item.header.steps = add_counters(item.header.steps, it->header.steps);
    }
    *it = std::move(item);
    ++stats_.superseded;
  } else {
    list.push_back(std::move(item));
  }
  auto& st = state_[h.index];
  st.arrivals = static_cast<int>(list.size());
  QuorumConfig q;
  effective(static_cast<int>(h.index), q);
  if (!st.quorum_at && st.arrivals >= q.min_islands) st.quorum_at = now;
  return h;
}

RoundState SyncerCore::effective(int p, QuorumConfig& q) const {
  const auto i = static_cast<std::size_t>(p);
  q = settings_.quorum;
  RoundState s = state_[i];
  if (finished_count_ == 0) return s;
  int finished_pending = 0;
  for (const auto& x : pending_[i])
    if (finished_[static_cast<std::size_t>(x.header.island)]) ++finished_pending;
  s.live_islands = std::max(0, s.live_islands - finished_count_) + finished_pending;
  q.min_islands = std::max(1, std::min(q.min_islands, s.live_islands));
  return s;
}

void SyncerCore::finish(int island, bool finished) {
  if (island < 0 || island >= settings_.islands || finished_[static_cast<std::size_t>(island)] == finished) return;
  finished_[static_cast<std::size_t>(island)] = finished;
  finished_count_ += finished ? 1 : -1;
  ++finish_changes_;
}

void SyncerCore::heard(int island, std::uint64_t step, double now, double step_seconds) {
  if (island < 0 || island >= settings_.islands) return;
  auto& s = last_step_[static_cast<std::size_t>(island)];
  s = std::max(s, step);
  active_at_ = std::max(active_at_, now);
  clock_.heard(island, step, now, step_seconds);
  for (auto& r : state_) r.t_step = clock_.t_step();
}

std::uint64_t SyncerCore::last_step(int island) const {
  return island < 0 || island >= settings_.islands ? 0 : last_step_[static_cast<std::size_t>(island)];
}

bool SyncerCore::finished(int island) const {
  return island >= 0 && island < settings_.islands && finished_[static_cast<std::size_t>(island)];
}

void SyncerCore::open_round(int p, double now) {
  auto& st = state_[static_cast<std::size_t>(p)];
  st.opened_at = now;
  st.quorum_at.reset();
  st.arrivals = 0;
}

double SyncerCore::core_share(const Contribution& m) const {
  // Delayed Nesterov takes each contribution in 1/delay at a time already, and a flush would
  // move Θ by more than the step does; a time cadence has no period in steps. Within half a
  // period over (a catch-up one step late, a send τ steps after its point) it is one period.
  if (settings_.period_steps <= 0 || settings_.outer.kind == "delayed_nesterov") return 1.0;
  const auto period = static_cast<double>(settings_.period_steps);
  const auto steps = static_cast<double>(m.steps);
  return steps > 1.5 * period ? period / steps : 1.0;
}

double SyncerCore::excess_share(std::span<const Contribution> contribs, std::uint64_t round) const {
  double w_all = 0.0, w_excess = 0.0;
  for (const auto& m : contribs) {
    const double w = merged_weight(m, settings_.merge, round);
    if (!(w > 0.0)) continue;
    w_all += w;
    w_excess += w * (1.0 - core_share(m));
  }
  return w_all > 0.0 ? w_excess / w_all : 0.0;
}

Commit SyncerCore::commit(int p, double now) {
  const auto i = static_cast<std::size_t>(p);
  const auto n = plan_->size(p);
  Commit c;
  std::vector<Contribution> contribs;
  for (const auto& x : pending_[i])
    contribs.push_back({x.header.island, x.header.base_round, x.header.tokens, x.header.steps, x.delta});
  // Each contribution the merge takes in (not too stale, weight above 0) is clipped, in place, to
  // the bound the islands' last ones set (NormClip); its norm as merged is its island's next once
  // every one of this commit is bounded.
  const double bound = clips_[i].bound();
  std::vector<std::pair<int, double>> norms;
  for (std::size_t k = 0; k < contribs.size(); ++k) {
    const auto& m = contribs[k];
    if (!(merged_weight(m, settings_.merge, rounds_[i]) > 0.0)) continue;
    auto& delta = pending_[i][k].delta;  // what m.delta views
    double n2 = 0.0;
    for (double v : delta) n2 += v * v;
    const double norm = std::sqrt(n2);
    if (norm > bound) {
      for (auto& v : delta) v *= bound / norm;
      c.clipped.push_back(m.island);
    }
    norms.emplace_back(m.island, std::min(norm, bound));
  }
  for (const auto& [island, norm] : norms) clips_[i].record(island, norm);
  merged_.assign(n, 0.0);
  const auto ms = merge(contribs, plan_->segments(p), settings_.merge, rounds_[i], merged_);
  // The part of each contribution past one period (core_share) is merged apart, to move Θ
  // without feeding the momentum (below): the same merge of the contributions cut to a period
  // each is the part that does.
  bool last = finished_count_ > 0 && !pending_[i].empty();
  for (const auto& x : pending_[i]) last = last && finished_[static_cast<std::size_t>(x.header.island)];
  c.excess = last ? 0.0 : excess_share(contribs, rounds_[i]);
  excess_.assign(c.excess > 0.0 ? n : 0, 0.0);
  if (c.excess > 0.0) {
    std::vector<std::vector<double>> cut(contribs.size());
    std::vector<Contribution> cores(contribs.begin(), contribs.end());
    for (std::size_t k = 0; k < cores.size(); ++k) {
      const double share = core_share(cores[k]);
      cut[k].assign(cores[k].delta.begin(), cores[k].delta.end());
      for (auto& v : cut[k]) v *= share;
      cores[k].delta = cut[k];
    }
    std::vector<double> core(n, 0.0);
    (void)merge(cores, plan_->segments(p), settings_.merge, rounds_[i], core);
    for (std::size_t j = 0; j < n; ++j) {
      excess_[j] = merged_[j] - core[j];
      merged_[j] = core[j];
    }
  }
  c.fragment = p;
  c.merged = ms.merged;
  c.dropped_stale = ms.dropped_stale;
  c.contributions = static_cast<int>(pending_[i].size());
  {
    QuorumConfig q;
    c.live = effective(p, q).live_islands;
  }
  c.at = now;
  for (const auto& x : pending_[i]) {
    settle(p, x.header);  // merged, or dropped as too stale
    if (staleness_factor(settings_.merge, rounds_[i], x.header.base_round)) {
      c.islands.push_back(x.header.island);
      c.staleness.push_back(static_cast<int>(rounds_[i] - x.header.base_round));
      c.frames.push_back(x.digest);
      c.tokens += x.header.tokens;
      merged_base_[i][static_cast<std::size_t>(x.header.island)] = x.header.base_round + 1;
    }
  }
  // n of L: L counts finished islands too (their share of the period is in, or lost), so a
  // last island training alone moves the global parameters by its share, not by a full step.
  const int live = state_[i].live_islands;
  if (settings_.merge.partial_scale && live > 0 && ms.merged > 0 && ms.merged < live) {
    const double share = static_cast<double>(ms.merged) / static_cast<double>(live);
    for (auto& v : merged_) v *= share;
    for (auto& v : excess_) v *= share;
  }
  theta_.resize(n);
  plan_->gather<float>(p, params_, theta_);
  // Only finished islands' last contributions: the rest of a period, not a new outer step.
  c.flush = last;
  if (last) {
    outer_[i].flush(theta_, merged_);
  } else {
    outer_[i].step(theta_, merged_);
    if (c.excess > 0.0) outer_[i].flush(theta_, excess_);
  }
  plan_->scatter(p, theta_, params_);
  c.round = ++rounds_[i];
  inbox_.set_round(static_cast<std::uint32_t>(p), rounds_[i]);
  c.finite = std::all_of(theta_.begin(), theta_.end(), [](float x) { return std::isfinite(x); });
  if (!c.finite && health_) {
    std::string who;
    for (int x : c.islands) who += (who.empty() ? "" : ",") + std::to_string(x);
    health_ = Error{errc::non_finite, "global fragment " + std::to_string(p) + " holds NaN or infinity after round " +
                                          std::to_string(c.round) + " (outer step on the merge of islands " + who + ")"};
  }
  // Who hears of it: everyone, or those whose contribution it counted (merged or too stale),
  // and any island that fell max_staleness rounds behind: its contributions would be refused
  // as stale from the next commit on, and only a frame moves its base on.
  const std::uint64_t lag = std::max<std::uint64_t>(settings_.merge.max_staleness, 1);
  for (std::size_t k = 0; k < sent_[i].size(); ++k) {
    const bool counted = std::any_of(pending_[i].begin(), pending_[i].end(),
                                     [&](const Pending& x) { return x.header.island == static_cast<int>(k); });
    if (settings_.broadcast_to == BroadcastTo::all || counted || rounds_[i] - sent_[i][k].round >= lag)
      sent_[i][k].due = true;
  }
  pending_[i].clear();
  open_round(p, now);
  ++stats_.commits;
  stats_.merged += static_cast<std::uint64_t>(ms.merged);
  stats_.clipped += c.clipped.size();
  stats_.excess += c.excess > 0.0 ? 1 : 0;
  dropped_in_merge_ += static_cast<std::uint64_t>(ms.dropped_stale);
  stats_.merged_tokens = add_counters(stats_.merged_tokens, c.tokens);
  return c;
}

std::vector<Commit> SyncerCore::poll(double now) {
  std::vector<Commit> out;
  for (int p = 0; p < plan_->count(); ++p) {
    QuorumConfig q;
    auto st = effective(p, q);
    // A round never commits below quorum: decide() refuses, and this guard makes it explicit.
    if (st.arrivals < q.min_islands) continue;
    // The quorum shrank under the arrivals (an island died or finished): it is reached now.
    if (!st.quorum_at) st.quorum_at = state_[static_cast<std::size_t>(p)].quorum_at = now;
    if (decide(q, st, now).merge) out.push_back(commit(p, now));
  }
  if (out.empty() && settings_.lockstep) {
    double at = 0.0;
    if (const int p = blocked_round(at); p >= 0 && now >= at) {
      out.push_back(commit(p, now));
      out.back().unblocked = true;
      ++stats_.unblocked;
    }
  }
  return out;
}

int SyncerCore::blocked_round(double& at) const {
  // Every island of the run that has not finished: a round of the synchronous modes waits for
  // a dead one to come back, so islands waiting on one that sent nothing are no cycle.
  const int training = settings_.islands - finished_count_;
  std::vector<bool> waiting(finished_.size(), false);
  int n = 0;
  for (const auto& list : pending_)
    for (const auto& x : list) {
      const auto i = static_cast<std::size_t>(x.header.island);
      if (i < waiting.size() && !finished_[i] && !waiting[i]) waiting[i] = true, ++n;
    }
  if (n == 0 || n < training) return -1;
  // The round with the most contributions of islands still training (one of only finished
  // islands' unblocks nobody), the one waiting longest of those.
  int best = -1;
  std::size_t most = 0;
  double oldest = 0.0;
  for (int p = 0; p < plan_->count(); ++p) {
    std::size_t size = 0;
    double first = std::numeric_limits<double>::infinity();
    for (const auto& x : pending_[static_cast<std::size_t>(p)])
      if (!finished_[static_cast<std::size_t>(x.header.island)]) ++size, first = std::min(first, x.at);
    if (size > most || (size == most && size > 0 && first < oldest)) best = p, most = size, oldest = first;
  }
  // Only once nothing was heard for a while: an island within its τ steps after a send, or
  // restarted and stepping again, reports its steps and may still send what the others wait for.
  const double t = clock_.t_step();
  at = active_at_ + (t > 0.0 && std::isfinite(t) ? kLockstepQuietSteps * t : 0.0);
  return best;
}

double SyncerCore::next_deadline(double now) const {
  double t = std::numeric_limits<double>::infinity();
  for (int p = 0; p < plan_->count(); ++p) {
    QuorumConfig q;
    const auto st = effective(p, q);
    t = std::min(t, decide(q, st, now).recheck_at);
  }
  if (double at = 0.0; settings_.lockstep && blocked_round(at) >= 0) t = std::min(t, at);
  return t;
}

void SyncerCore::set_live_islands(int n) {
  for (auto& s : state_) s.live_islands = n;
}

void SyncerCore::set_sync_time(double t_sync) {
  for (auto& s : state_) s.t_sync = t_sync;
}

std::uint64_t global_round_of(std::span<const std::uint64_t> rounds) {
  return rounds.empty() ? 0 : *std::min_element(rounds.begin(), rounds.end());
}

std::uint64_t SyncerCore::global_round() const { return global_round_of(rounds_); }

const SyncerStats& SyncerCore::stats() const {
  stats_.rejected = inbox_.rejected();
  for (std::size_t k = 0; k < errc_count; ++k) stats_.rejected.by_code[k] += refused_.by_code[k];
  stats_.accepted = inbox_.accepted() - refused_.total();
  stats_.dropped_stale = dropped_in_merge_ + stats_.rejected[errc::stale_round];
  return stats_;
}

SyncerCore::Sent* SyncerCore::sent(int p, int island) {
  if (p < 0 || p >= plan_->count() || island < 0 || island >= settings_.islands) return nullptr;
  return &sent_[static_cast<std::size_t>(p)][static_cast<std::size_t>(island)];
}

const SyncerCore::Sent* SyncerCore::sent(int p, int island) const {
  return const_cast<SyncerCore*>(this)->sent(p, island);
}

std::vector<int> SyncerCore::due(int p) const {
  std::vector<int> out;
  for (int i = 0; i < settings_.islands; ++i)
    if (is_due(p, i)) out.push_back(i);
  return out;
}

bool SyncerCore::is_due(int p, int island) const {
  const Sent* s = sent(p, island);
  return s && s->due;
}

Expected<Frame> SyncerCore::frame_for(int p, int island) {
  Sent* s = sent(p, island);
  if (!s)
    return Error{p < 0 || p >= plan_->count() ? errc::unknown_fragment : errc::unknown_sender,
                 "no fragment " + std::to_string(p) + " of island " + std::to_string(island) + " in this run"};
  if (!health_) return health_.error();
  const auto i = static_cast<std::size_t>(p);
  // A lossy frame from a round to the same round would move the syncer's Θ̂ by the residual
  // while the island, holding that round, ignores it: the two would part silently.
  if (lossy() && s->round == rounds_[i])
    return Error{errc::stale_round, "island " + std::to_string(island) + " already holds round " + std::to_string(s->round) +
                                        " of fragment " + std::to_string(p) + ": nothing to send"};
  // The frame made last for this fragment, if it starts where this island is (one encode per commit).
  auto& last = last_frame_[i];
  if (last.valid && last.round == rounds_[i] && last.from == s->hat) {
    s->hat = last.to;
    s->round = rounds_[i];
    s->due = false;
    return last.frame;
  }
  FragmentHeader h;
  h.island = syncer_id;
  h.index = static_cast<std::uint32_t>(p);
  h.base_round = rounds_[i];
  h.merged_seq = merged_seq_[i];
  theta_.resize(plan_->size(p));
  plan_->gather<float>(p, params_, theta_);
  // Θ diverged (or Θ − Θ̂ overflows): nothing can be sent, and the run cannot go on.
  auto fail = [&](const Error& e) -> Expected<Frame> {
    if (health_)
      health_ = Error{errc::non_finite, "merged fragment " + std::to_string(p) + " of round " + std::to_string(rounds_[i]) +
                                            " cannot be encoded for island " + std::to_string(island) + ": " + e.message()};
    return health_.error();
  };
  if (!lossy()) {
    h.kind = FragmentKind::global_params;
    auto f = encode_fragment(h, settings_.broadcast, theta_, settings_.term);
    if (!f) return fail(f.error());
    s->round = rounds_[i];
    s->due = false;
    last = {true, nullptr, nullptr, rounds_[i], *f};
    return f;
  }
  // d = Θ_p − Θ̂_p: every commit since the island's last frame plus whatever earlier frames left
  // out. Θ̂ moves only by what the island decodes, so the quantisation residual stays in the
  // next d (error feedback without a separate residual) and Θ̂ − Θ stays bounded.
  const auto& hat = *s->hat;
  delta_.resize(hat.size());
  for (std::size_t j = 0; j < hat.size(); ++j) delta_[j] = theta_[j] - hat[j];
  h.kind = FragmentKind::global_delta;
  h.from_round = s->round;
  auto enc = encode(settings_.broadcast, delta_);
  if (!enc) return fail(enc.error());
  decoded_.resize(hat.size());
  if (auto st = decode(*enc, std::span<float>(decoded_)); !st) return fail(st.error());
  // The island computes exactly this sum (IslandCore::adopt_frame): Θ̂ is bit-equal on both ends.
  auto next = std::make_shared<std::vector<float>>(hat.size());
  for (std::size_t j = 0; j < hat.size(); ++j) (*next)[j] = hat[j] + decoded_[j];
  last = {true, s->hat, next, rounds_[i], encode_message(FragmentMessage{h, std::move(*enc)}, settings_.term)};
  s->hat = std::move(next);
  s->round = rounds_[i];
  s->due = false;
  return last.frame;
}

std::size_t SyncerCore::reconstructions(int p) const {
  if (!lossy() || p < 0 || p >= plan_->count()) return 0;
  std::vector<const std::vector<float>*> seen;
  for (const auto& x : sent_[static_cast<std::size_t>(p)])
    if (std::find(seen.begin(), seen.end(), x.hat.get()) == seen.end()) seen.push_back(x.hat.get());
  return seen.size();
}

std::vector<float> SyncerCore::held(int p, int island) const {
  if (const Sent* s = sent(p, island); s && lossy()) return *s->hat;
  std::vector<float> v(plan_->size(p));
  plan_->gather<float>(p, params_, v);
  return v;
}

std::uint64_t SyncerCore::held_round(int p, int island) const {
  const Sent* s = sent(p, island);
  return s ? s->round : rounds_[static_cast<std::size_t>(p)];
}

const Sha256& SyncerCore::digest_at_round(int p, std::span<const float> theta) {
  const auto pi = static_cast<std::size_t>(p);
  auto& d = digests_[pi];
  if (!d.known || d.round != rounds_[pi]) {
    d = {true, rounds_[pi], sha256(theta)};
    ++hashed_;
  }
  return d.digest;
}

JoinReply SyncerCore::join_reply(int island, bool keeps_local, std::vector<int>* withdrawn,
                                 std::span<const std::vector<std::byte>> holds) {
  JoinReply r;
  std::vector<FragmentCounters> gone;
  // A new epoch for the island's sends: those of its earlier lives (or of before this re-join)
  // never count as merged sends of this one, whatever their numbers.
  std::uint32_t epoch = 0;
  if (island >= 0 && island < settings_.islands) {
    const auto i = static_cast<std::size_t>(island);
    epoch = ++epochs_[i];
    clock_.forget(island);  // the time it was away is not a step
    if (keeps_local) gone = withdraw(island);
    else fresh_epoch_[i] = epoch;
  }
  for (int p = 0; p < plan_->count(); ++p) {
    FragmentMessage m;
    m.header.kind = FragmentKind::global_params;
    m.header.island = syncer_id;
    m.header.index = static_cast<std::uint32_t>(p);
    m.header.base_round = rounds_[static_cast<std::size_t>(p)];
    theta_.resize(plan_->size(p));
    plan_->gather<float>(p, params_, theta_);
    m.header.seq = std::uint64_t{epoch} << 32;  // the island numbers its sends from here
    const auto pi = static_cast<std::size_t>(p);
    if (pi < holds.size() && holds[pi].size() == std::tuple_size_v<Sha256> &&
        std::ranges::equal(holds[pi], m.header.held_digest = digest_at_round(p, theta_))) {
      m.header.held = true;  // the island holds Θ_p: no values, only their number and digest
      m.data.count = theta_.size();
      ++held_sent_;
    } else {
      m.header.held_digest = {};
      m.data = encode(CodecParams{}, theta_).value();  // fp32: the heal is exact
    }
    if (Sent* s = sent(p, island)) {
      merged_seq_[static_cast<std::size_t>(p)][static_cast<std::size_t>(island)] = 0;
      s->round = rounds_[static_cast<std::size_t>(p)];
      s->due = false;
      if (lossy()) s->hat = std::make_shared<const std::vector<float>>(theta_);
    }
    r.fragments.push_back(std::move(m));
  }
  for (const auto& g : gone) {  // the withdrawn sends' counters go back to the island
    auto& h = r.fragments[g.index].header;
    h.tokens = g.tokens, h.steps = g.steps;
    if (withdrawn) withdrawn->push_back(static_cast<int>(g.index));
  }
  return r;
}

bool SyncerCore::this_life(const FragmentHeader& h) const {
  return h.seq >> 32 >= fresh_epoch_[static_cast<std::size_t>(h.island)];
}

void SyncerCore::settle(int p, const FragmentHeader& h) {
  // Only sends of the island's current epoch (join_reply) say what its current life sent.
  const auto from = static_cast<std::size_t>(h.island);
  if (h.island < 0 || from >= epochs_.size()) return;
  auto& seq = merged_seq_[static_cast<std::size_t>(p)][from];
  if (h.seq >> 32 == epochs_[from]) seq = std::max(seq, h.seq);
}

std::vector<FragmentCounters> SyncerCore::withdraw(int island) {
  std::vector<FragmentCounters> gone;
  for (int p = 0; p < plan_->count(); ++p) {
    auto& list = pending_[static_cast<std::size_t>(p)];
    const auto n = list.size();
    // Only sends of this life: one from before its last fresh join is progress its θ dropped.
    const auto mine = [&](const Pending& x) { return x.header.island == island && this_life(x.header); };
    for (const auto& x : list)
      if (mine(x)) gone.push_back({x.header.index, x.header.base_round, x.header.tokens, x.header.steps});
    std::erase_if(list, mine);
    if (list.size() == n) continue;
    stats_.withdrawn += n - list.size();
    dropped_in_merge_ += n - list.size();
    auto& st = state_[static_cast<std::size_t>(p)];
    st.arrivals = static_cast<int>(list.size());
    QuorumConfig q;
    effective(p, q);
    if (st.arrivals < q.min_islands) st.quorum_at.reset();  // the quorum is to be reached again
  }
  return gone;
}

Checkpoint SyncerCore::snapshot() const {
  Checkpoint cp;
  cp.params = params_;
  for (const auto& o : outer_) cp.momentum.emplace_back(o.momentum().begin(), o.momentum().end());
  cp.rounds = rounds_;
  for (std::size_t p = 0; p < outer_.size(); ++p)
    cp.metadata[outer_steps_key(p)] = std::to_string(outer_[p].steps_taken());
  if (!outer_.empty() && !outer_[0].pending_sum().empty()) {  // Delayed Nesterov
    for (std::size_t p = 0; p < outer_.size(); ++p) {
      cp.outer_pending.emplace_back(outer_[p].pending_sum().begin(), outer_[p].pending_sum().end());
      cp.metadata[pending_count_key(p)] = std::to_string(outer_[p].pending_count());
    }
  }
  for (std::size_t i = 0; i < finished_.size(); ++i) {
    cp.metadata[island_step_key(i)] = std::to_string(last_step_[i]);
    cp.metadata[island_finished_key(i)] = finished_[i] ? "1" : "0";
  }
  cp.metadata[kMergedTokensKey] = std::to_string(stats_.merged_tokens);
  return cp;
}

bool SyncerCore::snapshot_due() const {
  return health_ && settings_.snapshot_every > 0 &&
         (global_round() >= snapshot_round_ + static_cast<std::uint64_t>(settings_.snapshot_every) ||
          finish_changes_ != snapshot_finish_changes_);
}

Status SyncerCore::restore(const Checkpoint& cp) {
  const auto P = static_cast<std::size_t>(plan_->count());
  if (cp.params.size() != params_.size() || cp.momentum.size() != P || cp.rounds.size() != P)
    return Error{errc::checkpoint_mismatch, "the checkpoint does not match the fragment plan (" +
                                                std::to_string(cp.params.size()) + " values in " +
                                                std::to_string(cp.momentum.size()) + " fragments)"};
  for (std::size_t p = 0; p < P; ++p)
    if (cp.momentum[p].size() != plan_->size(static_cast<int>(p)) ||
        (p < cp.outer_pending.size() && cp.outer_pending[p].size() != plan_->size(static_cast<int>(p))))
      return Error{errc::checkpoint_mismatch, "the checkpoint's outer state of fragment " + std::to_string(p) +
                                                  " does not match the fragment plan"};
  if (!cp.outer_pending.empty() && (outer_.empty() || outer_[0].pending_sum().empty()))
    return Error{errc::checkpoint_mismatch, "the checkpoint holds Delayed Nesterov buffers, the run's outer optimizer (" +
                                                settings_.outer.kind + ") has none"};
  auto meta = read_meta(cp, P, settings_.islands, settings_.outer);
  if (!meta) return meta.error();
  // Absent in files written before it was kept: counted from here on.
  auto merged_tokens = meta_uint(cp, kMergedTokensKey, kMaxCounter, 0);
  if (!merged_tokens) return merged_tokens.error();
  stats_.merged_tokens = *merged_tokens;
  params_ = cp.params;
  digests_.assign(P, {});  // the restored Θ may differ at a round already hashed
  for (std::size_t p = 0; p < P; ++p) {
    const long t = meta->outer_steps[p];
    const int pending = meta->pending_counts[p];
    if (p < cp.outer_pending.size()) outer_[p].restore(t, cp.momentum[p], cp.outer_pending[p], pending);
    else outer_[p].restore(t, cp.momentum[p]);
    rounds_[p] = cp.rounds[p];
    inbox_.set_round(static_cast<std::uint32_t>(p), rounds_[p]);
    pending_[p].clear();
    clips_[p].restart(clip_start(static_cast<int>(p)));
    std::fill(merged_base_[p].begin(), merged_base_[p].end(), 0);
    std::fill(merged_seq_[p].begin(), merged_seq_[p].end(), 0);
    open_round(static_cast<int>(p), state_[p].opened_at);
  }
  // Islands re-join a restored syncer and heal from Θ (join_reply): until then nothing is due.
  for (std::size_t p = 0; p < P; ++p) {
    const auto hat = lossy() ? gathered(static_cast<int>(p)) : nullptr;
    for (auto& x : sent_[p]) x = {rounds_[p], false, hat};
    last_frame_[p] = {};
  }
  finished_count_ = 0;
  for (std::size_t i = 0; i < finished_.size(); ++i) {
    finished_[i] = meta->finished[i];
    finished_count_ += finished_[i] ? 1 : 0;
    last_step_[i] = meta->island_steps[i];
  }
  health_ = {};
  mark_snapshot();
  return {};
}

Expected<std::optional<Checkpoint>> load_syncer_state(const std::string& path, const ParamLayout& layout,
                                                      const FragmentPlan& plan, int islands) {
  std::error_code ec;  // (set for a missing file too; any other failure is load_checkpoint's to report)
  if (std::filesystem::symlink_status(path, ec).type() == std::filesystem::file_type::not_found)
    return std::optional<Checkpoint>{};
  // load_checkpoint names the file in its errors already.
  auto cp = load_checkpoint(path, layout, plan, LoadOptions{false});
  if (!cp) return cp.error();
  // The metadata as restore() will read it (the outer optimizer's kind and delay do not matter
  // here: the syncer checks them when it restores).
  OuterConfig any;
  any.delay = 1 << 30;
  if (auto meta = read_meta(*cp, static_cast<std::size_t>(plan.count()), islands, any); !meta)
    return Error{meta.error().code, path + ": " + meta.error().reason};
  return std::optional<Checkpoint>(std::move(*cp));
}

Expected<std::string> move_aside(const std::string& path) {
  for (int n = 1; n <= 1000; ++n) {
    const std::string to = path + ".corrupt-" + std::to_string(n);
    std::error_code ec;
    if (std::filesystem::symlink_status(to, ec).type() != std::filesystem::file_type::not_found) continue;
    std::filesystem::rename(path, to, ec);
    if (ec) return Error{errc::io_error, "cannot rename '" + path + "' to '" + to + "': " + ec.message()};
    return to;
  }
  return Error{errc::io_error, "cannot move '" + path + "' aside: " + path + ".corrupt-1 to -1000 all exist"};
}

}  // namespace diloco
