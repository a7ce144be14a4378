// IslandCore: one island's inner steps, outer-gradient frames and adoption of merged fragments.
#include "diloco/island_core.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <variant>

#include "diloco/digest.hpp"
#include "diloco/limits.hpp"

namespace diloco {

namespace {
// sent_seq_ of a fragment whose θ may hold sends of an earlier life (a restore, until its heal):
// above every seq, so sends_settled() is false until a send of this epoch is merged.
constexpr std::uint64_t kUnknownSends = std::numeric_limits<std::uint64_t>::max();
}  // namespace

IslandCore::IslandCore(const ParamLayout& layout, const FragmentPlan& plan, IslandSettings settings,
                       AdamWConfig inner, std::span<const float> initial)
    : layout_(&layout), plan_(&plan), settings_(settings), opt_(layout, inner),
      params_(std::make_shared<std::vector<float>>(initial.begin(), initial.end())), grad_(initial.size()) {
  if (initial.size() != layout.size()) throw std::invalid_argument("IslandCore: initial parameters do not fit the layout");
  const auto P = static_cast<std::size_t>(plan.count());
  if (settings_.schedule.P != plan.count()) throw std::invalid_argument("IslandCore: schedule.P differs from the plan");
  global_.resize(P);
  for (int p = 0; p < plan.count(); ++p) {
    global_[static_cast<std::size_t>(p)].resize(plan.size(p));
    plan.gather<float>(p, initial, global_[static_cast<std::size_t>(p)]);
    ef_.emplace_back(plan.size(p), settings_.codec);
  }
  base_round_.assign(P, 0);
  tokens_.assign(P, 0);
  steps_.assign(P, 0);
  sent_tokens_.assign(P, 0);
  sent_steps_.assign(P, 0);
  sent_at_.assign(P, -1);
  sent_seq_.assign(P, 0);
  merged_seq_.assign(P, 0);
  sent_theta_.resize(P);
  awaiting_.assign(P, false);
  next_due_.assign(P, std::numeric_limits<double>::quiet_NaN());
  wait_seq_.assign(P, 0);
  wait_since_.assign(P, 0.0);
  gave_up_.assign(P, false);
}

std::vector<float>& IslandCore::writable() {
  if (params_.use_count() > 1) params_ = std::make_shared<std::vector<float>>(*params_);
  return *params_;
}

double combine_chips(std::span<const ChipGradient> chips, std::vector<float>& out, std::uint64_t& tokens) {
  tokens = 0;
  for (const auto& c : chips) {
    if (c.grads.size() != chips[0].grads.size()) throw std::invalid_argument("combine_chips: chip gradients differ in size");
    tokens += c.tokens;
  }
  if (tokens == 0) return std::numeric_limits<double>::quiet_NaN();
  out.resize(chips[0].grads.size());
  for (const auto& c : chips)
    if (c.tokens == tokens) {  // one chip holds every token: its gradient as it is
      std::copy(c.grads.begin(), c.grads.end(), out.begin());
      return c.loss;
    }
  std::fill(out.begin(), out.end(), 0.0f);
  double loss = 0.0;
  for (const auto& c : chips) {
    if (c.tokens == 0) continue;  // an empty share: nothing computed
    const float w = static_cast<float>(static_cast<double>(c.tokens) / static_cast<double>(tokens));
    for (std::size_t j = 0; j < out.size(); ++j) out[j] += w * c.grads[j];
    loss += c.loss * static_cast<double>(c.tokens) / static_cast<double>(tokens);
  }
  return loss;
}

Batch chip_share(const Batch& batch, int chip, int chips) {
  if (chips < 1 || chip < 0 || chip >= chips) throw std::invalid_argument("chip_share: no chip " + std::to_string(chip) + " of " + std::to_string(chips));
  const int base = batch.B / chips, extra = batch.B % chips;
  const int first = chip * base + std::min(chip, extra);
  Batch share;
  share.B = base + (chip < extra ? 1 : 0);
  share.T = batch.T;
  const auto row = static_cast<std::size_t>(batch.T) + 1;  // a window: T + 1 tokens
  const auto from = batch.tokens.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(first) * row);
  share.tokens.assign(from, from + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(share.B) * row));
  return share;
}

double IslandCore::apply_gradient(std::span<const ChipGradient> chips) {
  for (const auto& c : chips)
    if (c.grads.size() != grad_.size()) throw std::invalid_argument("IslandCore: chip gradient has the wrong size");
  std::uint64_t total = 0;
  const double loss = combine_chips(chips, grad_, total);
  if (total == 0) return loss;  // NaN: the step is skipped
  if (!std::isfinite(loss)) {   // the chips answered: the model diverged
    diverged("its training loss is " + std::to_string(loss) + " at step " + std::to_string(step_ + 1));
    return loss;
  }
  const float norm = opt_.step(writable(), grad_);
  if (!std::isfinite(norm))
    diverged("its gradient norm is " + std::to_string(norm) + " at step " + std::to_string(step_ + 1));
  ++step_;
  tokens_total_ += total;
  for (std::size_t p = 0; p < tokens_.size(); ++p) {
    tokens_[p] += total;
    steps_[p] += 1;
  }
  apply_ready();
  return loss;
}

void IslandCore::set_time(double now) { now_ = now; }

bool IslandCore::due(int p) const {
  const auto i = static_cast<std::size_t>(p);
  if (const double period = settings_.sync_every_s; period > 0.0) {
    if (steps_[i] == 0) return false;  // nothing trained since the last send (or a heal that reset it)
    for (const auto& q : queue_)
      if (q.p == p) return false;  // its merge waits for τ: sending now would repeat merged progress
    return now_ >= next_due_[i] + (awaiting_[i] ? period : 0.0);  // false before the first heal (NaN)
  }
  const int H = settings_.schedule.H;
  // No send since the last heal: due at the schedule's steps, and at once when one of them
  // passed over unsent progress (a join under way skips its send). The synchronous modes'
  // rounds wait for every island's contribution: one skipped would stall them.
  if (sent_at_[i] < 0) return settings_.schedule.due(step_, p) || missed_point(p) >= 0;
  const long since = step_ - sent_at_[i];
  return awaiting_[i] ? since >= 2L * H : since >= H;
}

long IslandCore::missed_point(int p) const {
  const auto i = static_cast<std::size_t>(p);
  if (settings_.sync_every_s > 0.0 || sent_at_[i] >= 0 || settings_.schedule.H <= 0) return -1;
  const long since = settings_.schedule.since_point(step_, p);
  const long point = step_ - since;
  return since > 0 && point > 0 && steps_[i] > static_cast<std::uint64_t>(since) ? point : -1;
}

std::vector<int> IslandCore::due() const {
  std::vector<int> out;
  for (int p = 0; p < plan_->count(); ++p)
    if (due(p)) out.push_back(p);
  return out;
}

Expected<Frame> IslandCore::outer_gradient_frame(int p) {
  if (p < 0 || p >= plan_->count()) return Error{errc::unknown_fragment, "fragment " + std::to_string(p)};
  const auto i = static_cast<std::size_t>(p);
  const auto& g = global_[i];
  work_.resize(g.size());
  plan_->gather<float>(p, *params_, work_);
  for (std::size_t j = 0; j < g.size(); ++j) work_[j] = g[j] - work_[j];  // δ_p = Θ_p − θ_p
  FragmentHeader h;
  h.kind = FragmentKind::outer_gradient;
  h.island = settings_.island;
  h.index = static_cast<std::uint32_t>(p);
  h.base_round = base_round_[i];
  h.tokens = tokens_[i];
  h.steps = steps_[i];
  h.seq = (std::uint64_t{epoch_} << 32) | (sends_ + 1u);
  auto frame = settings_.error_feedback && settings_.codec.encoding != Encoding::fp32
                   ? encode_fragment(h, ef_[i], work_)
                   : encode_fragment(h, settings_.codec, work_);
  if (!frame && frame.error().code == errc::non_finite)
    diverged("the outer gradient of fragment " + std::to_string(p) + " at step " + std::to_string(step_) +
             " holds NaN or infinity (" + frame.error().reason + ")");
  if (frame) {
    ++sends_;
    sent_seq_[i] = h.seq;
    // A send that catches up a missed point belongs to it: the next falls on the schedule again
    // (H after it), in the same order among the fragments as every other island's.
    const long missed = missed_point(p);
    sent_at_[i] = missed >= 0 ? missed : step_;
    if (settings_.adopt == AdoptRule::carry) {  // θ_p as sent: θ itself is unchanged since work_ was gathered
      sent_theta_[i].resize(g.size());
      plan_->gather<float>(p, *params_, sent_theta_[i]);
    }
    if (const double period = settings_.sync_every_s; period > 0.0) {
      next_due_[i] += period;  // the phase stays, unless the send came more than a period late
      if (!(next_due_[i] > now_)) next_due_[i] = now_ + period;
    }
    awaiting_[i] = true;
    sent_tokens_[i] = tokens_[i];
    sent_steps_[i] = steps_[i];
    tokens_[i] = steps_[i] = 0;  // the next contribution counts from here (the syncer adds up
                                 // counters when a newer frame supersedes a pending one)
  }
  return frame;
}

bool IslandCore::take_back_last_send(int p) {
  if (p < 0 || p >= plan_->count()) return false;
  const auto i = static_cast<std::size_t>(p);
  if (steps_[i] > 0) return true;
  if (sent_steps_[i] == 0) return false;
  work_.resize(global_[i].size());
  plan_->gather<float>(p, *params_, work_);
  if (std::equal(work_.begin(), work_.end(), global_[i].begin())) return false;  // nothing the new base lacks
  tokens_[i] = sent_tokens_[i];
  steps_[i] = sent_steps_[i];
  return true;
}

void IslandCore::diverged(const std::string& what) {
  if (health_) health_ = Error{errc::non_finite, "island " + std::to_string(settings_.island) + " diverged: " + what};
}

void IslandCore::take(int p, std::span<const float> values, Take how) {
  work_.resize(values.size());
  auto& theta = writable();
  plan_->gather<float>(p, theta, work_);
  const auto i = static_cast<std::size_t>(p);
  const auto& held = global_[i];
  const double a = settings_.alpha;
  switch (how) {
    case Take::rebase:
      for (std::size_t j = 0; j < work_.size(); ++j) work_[j] += values[j] - held[j];
      break;
    case Take::mix:
      for (std::size_t j = 0; j < work_.size(); ++j) work_[j] = static_cast<float>(a * work_[j] + (1.0 - a) * values[j]);
      break;
    case Take::carry: {
      const auto& sent = sent_theta_[i];
      for (std::size_t j = 0; j < work_.size(); ++j)
        work_[j] = static_cast<float>(a * sent[j] + (1.0 - a) * values[j] + (double{work_[j]} - sent[j]));
      break;
    }
  }
  plan_->scatter(p, work_, theta);
}

bool IslandCore::adopt(int p, std::uint64_t round, std::span<const float> values, std::uint64_t merged_seq) {
  if (p < 0 || p >= plan_->count() || values.size() != plan_->size(p)) return false;
  const auto i = static_cast<std::size_t>(p);
  if (round <= base_round_[i]) return false;
  for (const auto& q : queue_)
    if (q.p == p && q.round >= round) return false;
  std::erase_if(queue_, [p](const Adoption& q) { return q.p == p; });
  const long at = sent_at_[i] < 0 ? step_ : std::max(step_, sent_at_[i] + settings_.tau);
  awaiting_[i] = false;
  queue_.push_back({at, p, round, std::vector<float>(values.begin(), values.end()), merged_seq});
  apply_ready();
  return true;
}

Expected<bool> IslandCore::adopt_frame(std::span<const std::byte> frame) {
  auto msg = decode_message(frame);
  if (!msg) return msg.error();
  const auto* f = std::get_if<FragmentMessage>(&*msg);
  if (!f) return Error{errc::unexpected_message, "a " + std::string(to_string(type_of(*msg))) + " message where a global fragment is expected"};
  WireContext ctx;
  for (int p = 0; p < plan_->count(); ++p) ctx.fragment_sizes.push_back(plan_->size(p));
  ctx.accept = FragmentKind::global_params;  // global_delta too
  ctx.islands = settings_.islands;           // bounds the merged_seq list
  if (auto st = check_fragment(f->header, f->data.count, ctx); !st) return st.error();
  std::vector<float> values(f->data.count);
  if (auto st = decode(EncodedView(f->data), std::span<float>(values)); !st) return st.error();
  const auto& h = f->header;
  const int p = static_cast<int>(h.index);
  if (h.kind == FragmentKind::global_delta) {
    // The newest fragment the island has: queued for adoption, else held.
    const auto i = static_cast<std::size_t>(p);
    const std::vector<float>* base = &global_[i];
    std::uint64_t newest = base_round_[i];
    for (const auto& q : queue_)
      if (q.p == p && q.round > newest) {
        base = &q.values;
        newest = q.round;
      }
    if (h.base_round <= newest) return false;  // nothing new (e.g. healed past it)
    if (h.from_round != newest)
      return Error{errc::missed_round, "global delta of fragment " + std::to_string(p) + " applies to round " +
                                           std::to_string(h.from_round) + ", the island holds round " + std::to_string(newest)};
    // Θ̂_p += decoded change, the same float sum as the syncer's (SyncerCore::frame_for).
    for (std::size_t j = 0; j < values.size(); ++j) values[j] = (*base)[j] + values[j];
  }
  const auto me = static_cast<std::size_t>(settings_.island);
  return adopt(p, h.base_round, values, me < h.merged_seq.size() ? h.merged_seq[me] : 0);
}

void IslandCore::settle() {
  for (auto& q : queue_) q.apply_at = std::min(q.apply_at, step_);
  apply_ready();
}

void IslandCore::apply_ready() {
  for (auto it = queue_.begin(); it != queue_.end();) {
    if (it->apply_at > step_) {
      ++it;
      continue;
    }
    const auto i = static_cast<std::size_t>(it->p);
    // Rebase only onto a fragment that cannot hold any of the island's unmerged progress: all
    // its sends are in the fragment it holds, so the change is other islands' alone. Carry only
    // from a commit that holds the island's last send (of this epoch), θ_p as sent at hand.
    Take how = Take::mix;
    if (settings_.adopt != AdoptRule::mix && sends_settled(it->p))
      how = Take::rebase;
    else if (settings_.adopt == AdoptRule::carry && it->merged_seq >> 32 == epoch_ &&
             it->merged_seq >= sent_seq_[i] && sent_theta_[i].size() == it->values.size())
      how = Take::carry;
    take(it->p, it->values, how);
    ++(how == Take::rebase ? rebases_ : how == Take::carry ? carries_ : mixes_);
    // Only the island's current epoch counts: a frame from before its last heal reports another.
    if (it->merged_seq >> 32 == epoch_) merged_seq_[i] = std::max(merged_seq_[i], it->merged_seq);
    if (sends_settled(it->p)) gave_up_[i] = false;  // the syncer answers again: a due merge is waited for
    global_[i] = std::move(it->values);
    base_round_[i] = it->round;
    it = queue_.erase(it);
  }
}

bool IslandCore::heal(const JoinReply& reply, bool keep_local) {
  // The values of each held fragment, found before anything changes: all or nothing.
  std::vector<const std::vector<float>*> held(reply.fragments.size(), nullptr);
  for (std::size_t k = 0; k < reply.fragments.size(); ++k) {
    const auto& h = reply.fragments[k].header;
    if (!h.held || h.index >= global_.size()) continue;
    const auto i = static_cast<std::size_t>(h.index);
    if (i < named_.size() && named_digest_[i] == h.held_digest) held[k] = &named_[i];
    else if (sha256(std::span<const float>(global_[i])) == h.held_digest) held[k] = &global_[i];
    else return false;
  }
  queue_.clear();
  std::vector<float> values;
  for (const auto& f : reply.fragments)
    if (const auto e = static_cast<std::uint32_t>(f.header.seq >> 32)) epoch_ = e;
  for (std::size_t k = 0; k < reply.fragments.size(); ++k) {
    const auto& f = reply.fragments[k];
    const int p = static_cast<int>(f.header.index);
    if (p < 0 || p >= plan_->count() || f.data.count != plan_->size(p)) continue;
    const auto i = static_cast<std::size_t>(p);
    if (f.header.held) {  // the syncer found its Θ_p to have the digest of values this island holds
      if (!held[k] || held[k]->size() != f.data.count) continue;
      values = *held[k];
    } else if (values.resize(f.data.count); !decode(EncodedView(f.data), std::span<float>(values))) {
      continue;
    }
    if (!keep_local) plan_->scatter(p, values, writable());
    const auto held_round = base_round_[i];
    if (keep_local && !f.header.held && f.header.base_round > held_round &&
        global_[i].size() == values.size() && sends_settled(p)) {
      // Commits this island missed (their broadcasts died with a syncer, or a delta did not
      // apply), none of which can hold its sends: other islands' progress alone, rebased onto
      // whatever the adopt rule (its unsent progress, after an outage, is many steps that a mix
      // would drop). Left as it was, its next outer gradient Θ_p − θ_p against the new round
      // would carry them back out of Θ. Where one may hold its last send, neither a rebase nor
      // a mix is right without knowing which: θ stays, as it did. So it does after restore(),
      // whose saved state keeps Θ_p but not its round: its sends are unknown until this heal.
      take(p, values, Take::rebase);
      ++rebases_;
    }
    global_[i] = values;
    base_round_[i] = f.header.base_round;
    if (!keep_local) tokens_[i] = steps_[i] = 0;
    // Keeping θ: the counters of a send the syncer withdrew come back, for the next send carries
    // that progress again. Only for a send θ holds (one made since the last heal, or by the
    // saved island restored), and never past the steps this island took, at most 2^31 tokens
    // each: a reply cannot inflate its weight without bound.
    const auto took = static_cast<std::uint64_t>(std::max(step_, 0L));
    if (keep_local && sent_seq_[i] != 0 && f.header.steps > 0) {
      if (steps_[i] <= took && f.header.steps <= took - steps_[i] &&
          within_tokens_per_step(f.header.tokens, f.header.steps, kMaxTokensPerStep)) {
        tokens_[i] += f.header.tokens;
        steps_[i] += f.header.steps;
      }
    } else if (keep_local && sent_seq_[i] != 0 && !sends_settled(p) && f.header.base_round <= held_round) {
      // The last send, never known merged, died with the syncer it went to: the one answering
      // neither holds it (it withdrew nothing) nor merged it (it has no round past the one this
      // island holds). θ carries its progress, and the next send its counters again (the
      // island's own, bounded when it sent them).
      tokens_[i] += sent_tokens_[i];
      steps_[i] += sent_steps_[i];
    }
    sent_at_[i] = -1;
    awaiting_[i] = false;
    // The reply starts a new epoch, and frames report only its sends (a restarted syncer may
    // even number it lower than the last). Nothing the island sent before can reach Θ later as
    // its own: a fresh heal drops its progress with θ (what it sent is other islands' news now),
    // and keeping θ it asked the syncer to drop its earlier sends (JoinRequest::keeps_local;
    // those to a dead syncer died with it). So the next commit can be rebased onto.
    sent_seq_[i] = 0;
    merged_seq_[i] = 0;
    sent_theta_[i].clear();
    gave_up_[i] = false;
    if (std::isnan(next_due_[i]))  // a time cadence starts at the first heal; later ones keep its phase
      next_due_[i] = now_ + (p == 0 ? settings_.sync_every_s : settings_.sync_every_s * p / plan_->count());
    ef_[i].reset();
  }
  return true;
}

std::vector<std::vector<std::byte>> IslandCore::holds() {
  std::vector<std::vector<std::byte>> out;
  out.reserve(global_.size());
  named_ = global_;
  named_digest_.clear();
  for (const auto& g : named_) {
    const auto d = named_digest_.emplace_back(sha256(std::span<const float>(g)));
    out.emplace_back(d.begin(), d.end());
  }
  return out;
}

IslandState IslandCore::state() const {
  IslandState s;
  s.island = settings_.island;
  s.params = *params_;
  s.adam_steps = opt_.steps_taken();
  s.adam_m.assign(opt_.m().begin(), opt_.m().end());
  s.adam_v.assign(opt_.v().begin(), opt_.v().end());
  s.step = step_;
  s.tokens_since = tokens_;
  s.steps_since = steps_;
  s.global.resize(params_->size());
  for (int p = 0; p < plan_->count(); ++p) plan_->scatter(p, global_[static_cast<std::size_t>(p)], s.global);
  return s;
}

Status IslandCore::restore(const IslandState& s) {
  const auto n = params_->size();
  const auto P = static_cast<std::size_t>(plan_->count());
  if (s.island != settings_.island)
    return Error{errc::checkpoint_mismatch, "the state of island " + std::to_string(s.island) + " given to island " +
                                                std::to_string(settings_.island)};
  if (s.params.size() != n || s.adam_m.size() != n || s.adam_v.size() != n)
    return Error{errc::checkpoint_mismatch, "island " + std::to_string(s.island) + "'s state holds " +
                                                std::to_string(s.params.size()) + " values, the model has " + std::to_string(n)};
  if (!s.global.empty() && s.global.size() != n)
    return Error{errc::checkpoint_mismatch, "island " + std::to_string(s.island) + "'s global fragments hold " +
                                                std::to_string(s.global.size()) + " values, the model has " + std::to_string(n)};
  if (s.adam_steps < 0 || s.step < s.adam_steps || (!s.tokens_since.empty() && s.tokens_since.size() != P) ||
      s.steps_since.size() != s.tokens_since.size())
    return Error{errc::checkpoint_mismatch, "island " + std::to_string(s.island) + "'s step counts do not fit this run"};
  writable() = s.params;
  opt_.restore(s.adam_steps, s.adam_m, s.adam_v);
  // The schedule's steps before AdamW's first: none for an island that never restarted.
  opt_.resume_schedule(s.step - s.adam_steps);
  step_ = s.step;
  if (!s.tokens_since.empty()) {
    tokens_ = s.tokens_since;
    steps_ = s.steps_since;
  }
  if (!s.global.empty())  // what its join names (holds): the syncer sends none it still has
    for (int p = 0; p < plan_->count(); ++p) plan_->gather<float>(p, s.global, global_[static_cast<std::size_t>(p)]);
  queue_.clear();
  // θ holds progress whose sends, made by the saved island, may still be merged: unknown (any
  // adoption mixes) until the heal that follows, which starts clean (the join keeps θ, so the
  // syncer withdraws those sends).
  sent_seq_.assign(sent_seq_.size(), kUnknownSends);
  for (auto& t : sent_theta_) t.clear();
  return {};
}

bool IslandCore::must_wait() const {
  for (std::size_t p = 0; p < awaiting_.size(); ++p)
    if (awaiting_[p] && sent_at_[p] + settings_.tau <= step_) return true;
  return false;
}

void IslandCore::step_took(double seconds) {
  if (!(seconds >= 0.0) || !std::isfinite(seconds)) return;
  step_time_ = std::isnan(step_time_) ? seconds : 0.8 * step_time_ + 0.2 * seconds;
}

double IslandCore::hold_until(double now) {
  double until = std::numeric_limits<double>::quiet_NaN();
  if (!(settings_.wait_steps > 0.0) || !(step_time_ > 0.0)) return until;
  for (std::size_t i = 0; i < sent_seq_.size(); ++i) {
    const auto seq = sent_seq_[i];
    // Only a send of this island's current epoch that it knows: after a restore the sends are
    // unknown (kUnknownSends), after a heal there are none.
    if (gave_up_[i] || seq == 0 || seq == kUnknownSends || sent_at_[i] < 0 || sent_at_[i] + settings_.tau > step_ ||
        sends_settled(static_cast<int>(i)))
      continue;
    if (wait_seq_[i] != seq) {
      wait_seq_[i] = seq;
      wait_since_[i] = now;
    }
    const double end = wait_since_[i] + settings_.wait_steps * step_time_;
    if (now >= end) {
      gave_up_[i] = true;  // until a merge of its sends comes (apply_ready) or a heal
      ++wait_timeouts_;
      continue;
    }
    if (!(until >= end)) until = end;
  }
  return until;
}

ProgressMessage IslandCore::progress() const {
  ProgressMessage m;
  m.island = settings_.island;
  m.local_step = static_cast<std::uint64_t>(step_);
  m.step_seconds = std::isnan(step_time_) ? 0.0 : step_time_;
  for (std::size_t p = 0; p < base_round_.size(); ++p)
    m.fragments.push_back({static_cast<std::uint32_t>(p), base_round_[p], tokens_[p], steps_[p]});
  return m;
}

}  // namespace diloco
