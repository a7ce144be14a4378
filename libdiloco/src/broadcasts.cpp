// Broadcasts: per island and fragment, what it holds and waits for, coalesced frames when its
// link is free (broadcasts.hpp).
#include "diloco/broadcasts.hpp"

#include <algorithm>
#include <string>

#include "diloco/syncer_core.hpp"

namespace diloco {

namespace {
// A link counts as free this close before its transmission ends: timers come in whole
// microseconds (rounded down), and a tick a fraction early must not re-arm itself forever.
constexpr double kSlack = 1e-6;
}  // namespace

Broadcasts::Broadcasts(const FragmentPlan& plan, int islands, CodecParams encoding)
    : plan_(&plan), encoding_(encoding), islands_(static_cast<std::size_t>(std::max(islands, 0))) {
  const auto P = static_cast<std::size_t>(plan.count());
  for (auto& s : islands_) {
    s.waiting.assign(P, false);
    s.round.assign(P, 0);
    s.held.resize(P);
  }
}

void Broadcasts::joined(int island, const SyncerCore& core) {
  if (island < 0 || static_cast<std::size_t>(island) >= islands_.size()) return;
  auto& s = islands_[static_cast<std::size_t>(island)];
  s.joined = true;
  s.free_at = 0.0;
  for (int p = 0; p < plan_->count(); ++p) {
    const auto k = static_cast<std::size_t>(p);
    s.waiting[k] = false;
    s.round[k] = core.held_round(p);
    if (lossy()) s.held[k] = core.held(p);
  }
}

void Broadcasts::left(int island) {
  if (island < 0 || static_cast<std::size_t>(island) >= islands_.size()) return;
  auto& s = islands_[static_cast<std::size_t>(island)];
  s.joined = false;
  std::fill(s.waiting.begin(), s.waiting.end(), false);
}

void Broadcasts::asked(int island, int p) {
  if (island < 0 || static_cast<std::size_t>(island) >= islands_.size() || p < 0 || p >= plan_->count()) return;
  islands_[static_cast<std::size_t>(island)].waiting[static_cast<std::size_t>(p)] = true;
}

void Broadcasts::busy_until(int island, double t) {
  if (island < 0 || static_cast<std::size_t>(island) >= islands_.size()) return;
  auto& s = islands_[static_cast<std::size_t>(island)];
  s.free_at = std::max(s.free_at, t);
}

Expected<std::vector<BroadcastSend>> Broadcasts::due(const SyncerCore& core, double now) {
  std::vector<BroadcastSend> out;
  for (std::size_t i = 0; i < islands_.size(); ++i) {
    auto& s = islands_[i];
    if (!s.joined || s.free_at > now + kSlack) continue;
    for (int p = 0; p < plan_->count(); ++p) {
      const auto k = static_cast<std::size_t>(p);
      const std::uint64_t round = core.round(p);
      if (!s.waiting[k] || round <= s.round[k]) continue;
      BroadcastSend b{static_cast<int>(i), p, s.round[k], round, {}};
      if (!lossy()) {
        // Θ_p itself: every commit since the island's round is in it.
        auto f = core.global_frame(p);
        if (!f) return f.error();
        b.frame = std::move(*f);
      } else {
        // d = Θ_p − Θ̂_{p,i}: every commit since the island's round plus what its earlier frames
        // left out; Θ̂_{p,i} moves by exactly what the island decodes (IslandCore::adopt_frame).
        auto& hat = s.held[k];
        theta_.resize(hat.size());
        plan_->gather<float>(p, core.params(), theta_);
        delta_.resize(hat.size());
        for (std::size_t j = 0; j < hat.size(); ++j) delta_[j] = theta_[j] - hat[j];
        auto enc = encode(encoding_, delta_);
        sent_.resize(hat.size());
        Status st = enc ? decode(*enc, std::span<float>(sent_)) : Status(enc.error());
        if (!st)
          return Error{errc::non_finite, "fragment " + std::to_string(p) + " of round " + std::to_string(round) +
                                             " cannot be encoded for island " + std::to_string(i) + ": " + st.error().message()};
        for (std::size_t j = 0; j < hat.size(); ++j) hat[j] += sent_[j];
        FragmentHeader h;
        h.kind = FragmentKind::global_delta;
        h.island = syncer_id;
        h.index = static_cast<std::uint32_t>(p);
        h.base_round = round;
        h.from_round = s.round[k];
        b.frame = encode_message(FragmentMessage{h, std::move(*enc)});
      }
      s.round[k] = round;
      s.waiting[k] = false;
      out.push_back(std::move(b));
    }
  }
  return out;
}

double Broadcasts::next_deadline(double now) const {
  double t = std::numeric_limits<double>::infinity();
  for (const auto& s : islands_)
    if (s.joined && s.free_at > now + kSlack && std::find(s.waiting.begin(), s.waiting.end(), true) != s.waiting.end()) t = std::min(t, s.free_at);
  return t;
}

bool Broadcasts::waiting(int island, int p) const {
  return island_(island).waiting.at(static_cast<std::size_t>(p));
}

std::uint64_t Broadcasts::held_round(int island, int p) const {
  return island_(island).round.at(static_cast<std::size_t>(p));
}

std::span<const float> Broadcasts::held(int island, int p) const {
  return island_(island).held.at(static_cast<std::size_t>(p));
}

}  // namespace diloco
