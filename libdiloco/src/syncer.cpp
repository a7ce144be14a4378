// SyncerCore: per-fragment rounds, quorum + grace decisions, token-weighted merge and snapshots.
#include "diloco/syncer.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace diloco {

namespace {
WireContext context_for(const FragmentPlan& plan, const SyncerSettings& s) {
  WireContext ctx;
  for (int p = 0; p < plan.count(); ++p) ctx.fragment_sizes.push_back(plan.size(p));
  ctx.rounds.assign(static_cast<std::size_t>(plan.count()), 0);
  ctx.islands = s.islands;
  ctx.accept = FragmentKind::outer_gradient;
  ctx.max_staleness = s.merge.max_staleness;
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
  merged_base_.assign(P, std::vector<std::uint64_t>(static_cast<std::size_t>(std::max(settings_.islands, 0)), 0));
  state_.resize(P);
  for (auto& s : state_) s.live_islands = settings_.islands;
  finished_.assign(static_cast<std::size_t>(std::max(settings_.islands, 0)), false);
  if (lossy()) {
    for (int p = 0; p < plan.count(); ++p) {
      held_.emplace_back(plan.size(p));
      plan.gather<float>(p, params_, held_.back());
    }
    held_round_.assign(P, 0);
    broadcast_.resize(P);
  }
}

Expected<FragmentHeader> SyncerCore::receive(std::span<const std::byte> frame, double now) {
  std::size_t largest = 0;
  for (int p = 0; p < plan_->count(); ++p) largest = std::max(largest, plan_->size(p));
  rx_.resize(largest);
  auto got = inbox_.receive(frame, std::span<double>(rx_));
  if (!got) return got.error();
  stats_.bytes_in += frame.size();
  const auto& h = got->header;
  if (merged_base_[h.index][static_cast<std::size_t>(h.island)] > h.base_round) {
    ++stats_.overlapping;
    ++dropped_in_merge_;
    return Error{errc::stale_round, "island " + std::to_string(h.island) + " already had a contribution based on round " +
                                        std::to_string(h.base_round) + " of fragment " + std::to_string(h.index) +
                                        " merged; this one repeats it"};
  }
  auto& list = pending_[h.index];
  auto it = std::find_if(list.begin(), list.end(), [&](const Pending& x) { return x.header.island == h.island; });
  Pending item{h, std::vector<double>(rx_.begin(), rx_.begin() + static_cast<long>(got->count)), now};
  if (it != list.end()) {
    // The newest outer gradient of an island supersedes its older one: its δ covers both
    // periods (same base round), so their counters add up.
    if (it->header.base_round == h.base_round) {
      item.header.tokens += it->header.tokens;
      item.header.steps += it->header.steps;
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
}

void SyncerCore::open_round(int p, double now) {
  auto& st = state_[static_cast<std::size_t>(p)];
  st.opened_at = now;
  st.quorum_at.reset();
  st.arrivals = 0;
}

Commit SyncerCore::commit(int p, double now) {
  const auto i = static_cast<std::size_t>(p);
  const auto n = plan_->size(p);
  std::vector<Contribution> contribs;
  for (const auto& x : pending_[i])
    contribs.push_back({x.header.island, x.header.base_round, x.header.tokens, x.header.steps, x.delta});
  merged_.assign(n, 0.0);
  const auto ms = merge(contribs, plan_->segments(p), settings_.merge, rounds_[i], merged_);
  Commit c;
  c.fragment = p;
  c.merged = ms.merged;
  c.dropped_stale = ms.dropped_stale;
  c.at = now;
  for (const auto& x : pending_[i])
    if (staleness_factor(settings_.merge, rounds_[i], x.header.base_round)) {
      c.islands.push_back(x.header.island);
      c.tokens += x.header.tokens;
      merged_base_[i][static_cast<std::size_t>(x.header.island)] = x.header.base_round + 1;
    }
  // n of L: L counts finished islands too (their share of the period is in, or lost), so a
  // last island training alone moves the global parameters by its share, not by a full step.
  const int live = state_[i].live_islands;
  if (settings_.merge.partial_scale && live > 0 && ms.merged > 0 && ms.merged < live) {
    const double share = static_cast<double>(ms.merged) / static_cast<double>(live);
    for (auto& v : merged_) v *= share;
  }
  theta_.resize(n);
  plan_->gather<float>(p, params_, theta_);
  // Only finished islands' last contributions: the rest of a period, not a new outer step.
  bool last = finished_count_ > 0 && !pending_[i].empty();
  for (const auto& x : pending_[i]) last = last && finished_[static_cast<std::size_t>(x.header.island)];
  if (last) outer_[i].flush(theta_, merged_);
  else outer_[i].step(theta_, merged_);
  plan_->scatter(p, theta_, params_);
  c.round = ++rounds_[i];
  inbox_.set_round(static_cast<std::uint32_t>(p), rounds_[i]);
  if (lossy()) encode_delta(p, theta_);
  pending_[i].clear();
  open_round(p, now);
  ++stats_.commits;
  stats_.merged += static_cast<std::uint64_t>(ms.merged);
  dropped_in_merge_ += static_cast<std::uint64_t>(ms.dropped_stale);
  stats_.merged_tokens += c.tokens;
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
  return out;
}

double SyncerCore::next_deadline(double now) const {
  double t = std::numeric_limits<double>::infinity();
  for (int p = 0; p < plan_->count(); ++p) {
    QuorumConfig q;
    const auto st = effective(p, q);
    t = std::min(t, decide(q, st, now).recheck_at);
  }
  return t;
}

void SyncerCore::set_live_islands(int n) {
  for (auto& s : state_) s.live_islands = n;
}

void SyncerCore::set_timing(double t_step, double t_sync) {
  for (auto& s : state_) {
    s.t_step = t_step;
    s.t_sync = t_sync;
  }
}

std::uint64_t SyncerCore::global_round() const {
  return rounds_.empty() ? 0 : *std::min_element(rounds_.begin(), rounds_.end());
}

const SyncerStats& SyncerCore::stats() const {
  stats_.rejected = inbox_.rejected();
  stats_.accepted = inbox_.accepted();
  stats_.dropped_stale = dropped_in_merge_ + stats_.rejected[errc::stale_round];
  return stats_;
}

void SyncerCore::encode_delta(int p, std::span<const float> theta) {
  const auto i = static_cast<std::size_t>(p);
  auto& hat = held_[i];
  // d = Θ_p − Θ̂_p: this commit's change plus whatever earlier broadcasts left out. Θ̂ moves
  // only by what the islands decode, so the quantisation residual stays in the next d (error
  // feedback without a separate residual) and Θ̂ − Θ stays bounded.
  delta_.resize(hat.size());
  for (std::size_t j = 0; j < hat.size(); ++j) delta_[j] = theta[j] - hat[j];
  FragmentHeader h;
  h.kind = FragmentKind::global_delta;
  h.island = syncer_id;
  h.index = static_cast<std::uint32_t>(p);
  h.base_round = rounds_[i];
  h.from_round = held_round_[i];
  auto enc = encode(settings_.broadcast, delta_);
  if (!enc) {  // Θ diverged: nothing is sent and Θ̂ stays; the next delta starts from its round
    broadcast_[i] = Expected<Frame>(enc.error());
    return;
  }
  sent_.resize(hat.size());
  if (auto st = decode(*enc, std::span<float>(sent_)); !st) {
    broadcast_[i] = Expected<Frame>(st.error());
    return;
  }
  // The islands compute exactly this sum (IslandCore::adopt_frame): Θ̂ is bit-equal on both ends.
  for (std::size_t j = 0; j < hat.size(); ++j) hat[j] += sent_[j];
  held_round_[i] = rounds_[i];
  broadcast_[i] = Expected<Frame>(encode_message(FragmentMessage{h, std::move(*enc)}));
}

Expected<Frame> SyncerCore::global_frame(int p) const {
  const auto i = static_cast<std::size_t>(p);
  if (lossy() && broadcast_[i]) return *broadcast_[i];
  FragmentHeader h;
  h.kind = FragmentKind::global_params;
  h.island = syncer_id;
  h.index = static_cast<std::uint32_t>(p);
  h.base_round = held_round(p);
  return encode_fragment(h, lossy() ? CodecParams{} : settings_.broadcast, held(p));
}

std::vector<float> SyncerCore::held(int p) const {
  const auto i = static_cast<std::size_t>(p);
  if (i < held_.size()) return held_[i];
  std::vector<float> v(plan_->size(p));
  plan_->gather<float>(p, params_, v);
  return v;
}

std::uint64_t SyncerCore::held_round(int p) const {
  const auto i = static_cast<std::size_t>(p);
  return i < held_round_.size() ? held_round_[i] : rounds_[i];
}

JoinReply SyncerCore::join_reply() const {
  JoinReply r;
  for (int p = 0; p < plan_->count(); ++p) {
    FragmentMessage m;
    m.header.kind = FragmentKind::global_params;
    m.header.island = syncer_id;
    m.header.index = static_cast<std::uint32_t>(p);
    m.header.base_round = held_round(p);
    m.data = encode(CodecParams{}, held(p)).value();  // fp32: the heal is exact
    r.fragments.push_back(std::move(m));
  }
  return r;
}

Checkpoint SyncerCore::snapshot() const {
  Checkpoint cp;
  cp.params = params_;
  for (const auto& o : outer_) cp.momentum.emplace_back(o.momentum().begin(), o.momentum().end());
  cp.rounds = rounds_;
  for (std::size_t p = 0; p < outer_.size(); ++p)
    cp.metadata["syncer.outer_steps." + std::to_string(p)] = std::to_string(outer_[p].steps_taken());
  if (!outer_.empty() && !outer_[0].pending_sum().empty()) {  // Delayed Nesterov
    for (std::size_t p = 0; p < outer_.size(); ++p) {
      cp.outer_pending.emplace_back(outer_[p].pending_sum().begin(), outer_[p].pending_sum().end());
      cp.metadata["syncer.outer_pending_count." + std::to_string(p)] = std::to_string(outer_[p].pending_count());
    }
  }
  return cp;
}

bool SyncerCore::snapshot_due() const {
  return settings_.snapshot_every > 0 &&
         global_round() >= snapshot_round_ + static_cast<std::uint64_t>(settings_.snapshot_every);
}

void SyncerCore::restore(const Checkpoint& cp) {
  const auto P = static_cast<std::size_t>(plan_->count());
  if (cp.params.size() != params_.size() || cp.momentum.size() != P || cp.rounds.size() != P)
    throw std::invalid_argument("SyncerCore::restore: checkpoint does not match the fragment plan");
  params_ = cp.params;
  for (std::size_t p = 0; p < P; ++p) {
    long t = 0;
    if (auto it = cp.metadata.find("syncer.outer_steps." + std::to_string(p)); it != cp.metadata.end())
      t = std::stol(it->second);
    int pending = 0;
    if (auto it = cp.metadata.find("syncer.outer_pending_count." + std::to_string(p)); it != cp.metadata.end())
      pending = std::stoi(it->second);
    if (p < cp.outer_pending.size()) outer_[p].restore(t, cp.momentum[p], cp.outer_pending[p], pending);
    else outer_[p].restore(t, cp.momentum[p]);
    rounds_[p] = cp.rounds[p];
    inbox_.set_round(static_cast<std::uint32_t>(p), rounds_[p]);
    pending_[p].clear();
    std::fill(merged_base_[p].begin(), merged_base_[p].end(), 0);
    open_round(static_cast<int>(p), state_[p].opened_at);
  }
  if (lossy()) {
    for (std::size_t p = 0; p < P; ++p) {
      plan_->gather<float>(static_cast<int>(p), params_, held_[p]);
      held_round_[p] = rounds_[p];
      broadcast_[p].reset();
    }
  }
  snapshot_round_ = global_round();
}

}  // namespace diloco
