// The run's invariants (invariants.hpp): digests of frames and heals, and the checker.
#include "diloco/invariants.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>

#include "diloco/codec.hpp"
#include "diloco/hash.hpp"

namespace diloco {

namespace {

std::uint64_t fnv(std::uint64_t h, const void* data, std::size_t n) {
  return fnv1a(h, std::span<const std::byte>(static_cast<const std::byte*>(data), n));
}

std::uint64_t nonzero(std::uint64_t h) { return h == 0 ? 1 : h; }

std::string str(std::uint64_t v) { return std::to_string(v); }
std::string str(int v) { return std::to_string(v); }
std::string str(double v) {
  char b[64];
  std::snprintf(b, sizeof b, "%.6g", v);
  return b;
}

std::string faults_name(const Event& f) {
  return f.detail.empty() ? "a fault (" + std::string(name_of(f.fault)) + " of island " + str(f.island) + ")" : f.detail;
}

}  // namespace

std::uint64_t frame_digest(std::span<const std::byte> frame) { return nonzero(fnv1a(kFnvBasis, frame)); }

HealDigests heal_digests(const FragmentPlan& plan, std::span<const float> params, const JoinReply& reply,
                         const std::vector<std::vector<float>>* named) {
  std::uint64_t island = kFnvBasis, global = kFnvBasis;
  std::vector<float> mine, theirs;
  for (int p = 0; p < plan.count(); ++p) {
    const auto n = plan.size(p);
    mine.resize(n);
    plan.gather<float>(p, params, mine);
    island = fnv(island, mine.data(), n * sizeof(float));
    const auto it = std::find_if(reply.fragments.begin(), reply.fragments.end(),
                                 [p](const FragmentMessage& f) { return f.header.index == static_cast<std::uint32_t>(p); });
    if (it != reply.fragments.end() && it->header.held) {
      // No values came: the syncer's Θ_p had the SHA-256 of the values the island named
      // (SyncerCore::join_reply), so those are the global fragment it must hold now.
      const auto i = static_cast<std::size_t>(p);
      if (named && i < named->size() && (*named)[i].size() == n) global = fnv(global, (*named)[i].data(), n * sizeof(float));
      else global = fnv(global, "missing", 7);
      continue;
    }
    theirs.resize(n);
    if (it == reply.fragments.end() || it->data.count != n || !decode(EncodedView(it->data), std::span<float>(theirs))) {
      global = fnv(global, "missing", 7);  // the island cannot hold what it was not given
      continue;
    }
    global = fnv(global, theirs.data(), n * sizeof(float));
  }
  return {nonzero(island), nonzero(global)};
}

const char* to_string(Violation::Kind k) {
  switch (k) {
    case Violation::Kind::rounds: return "rounds";
    case Violation::Kind::quorum: return "quorum";
    case Violation::Kind::refused_frame: return "refused_frame";
    case Violation::Kind::heal: return "heal";
    case Violation::Kind::non_finite: return "non_finite";
    case Violation::Kind::goodput: return "goodput";
    case Violation::Kind::unrepaired: return "unrepaired";
  }
  return "?";
}

Invariants::Invariants(InvariantSettings settings)
    : s_(std::move(settings)), round_(static_cast<std::size_t>(std::max(s_.fragments, 1)), 0),
      committed_(round_.size(), 0), done_(static_cast<std::size_t>(std::max(s_.islands, 0)), false) {}

void Invariants::violate(Violation::Kind k, double at, std::string what) {
  violations_.push_back(Violation{k, at, std::move(what)});
}

std::size_t Invariants::count(Violation::Kind k) const {
  return static_cast<std::size_t>(
      std::count_if(violations_.begin(), violations_.end(), [k](const Violation& v) { return v.kind == k; }));
}

void Invariants::repaired(FaultKind kind, int island, double at) {
  std::erase_if(faults_, [&](const Outstanding& o) {
    return o.fault.fault == kind && (kind == FaultKind::syncer || o.fault.island == island) && at >= o.fault.at;
  });
}

void Invariants::on(const Event& e) {
  const double t = e.at;
  const auto island_ok = [this](int i) { return i >= 0 && static_cast<std::size_t>(i) < done_.size(); };
  switch (e.kind) {
    case Event::Kind::commit: {
      history_ = true;
      const auto p = static_cast<std::size_t>(e.fragment);
      if (e.fragment < 0 || p >= round_.size()) {
        violate(Violation::Kind::rounds, t, "a commit of fragment " + str(e.fragment) + ", which the run does not have");
        break;
      }
      if (e.round <= round_[p])
        violate(Violation::Kind::rounds, t,
                "fragment " + str(e.fragment) + " committed round " + str(e.round) + " after round " + str(round_[p]) +
                    " in the same syncer life: rounds only go up");
      round_[p] = std::max(round_[p], e.round);
      committed_[p] = std::max(committed_[p], e.round);
      const int need = std::min(s_.quorum, e.live);
      if (!e.flush && !e.unblocked && e.contributions < need)
        violate(Violation::Kind::quorum, t,
                "fragment " + str(e.fragment) + " committed round " + str(e.round) + " with " + str(e.contributions) +
                    " contribution(s), below min(K = " + str(s_.quorum) + ", live = " + str(e.live) + ") = " + str(need) +
                    ", and it is no final flush nor a round unblocked");
      for (std::size_t j = 0; j < e.frames.size(); ++j)
        if (auto it = refused_.find(e.frames[j]); it != refused_.end())
          violate(Violation::Kind::refused_frame, t,
                  "fragment " + str(e.fragment) + "'s round " + str(e.round) + " merged island " +
                      str(j < e.islands.size() ? e.islands[j] : -1) + "'s frame that was refused before (" + it->second + ")");
      if (!e.finite)
        violate(Violation::Kind::non_finite, t,
                "global fragment " + str(e.fragment) + " holds NaN or infinity after round " + str(e.round));
      break;
    }
    case Event::Kind::restore: {
      for (std::size_t p = 0; p < round_.size(); ++p) {
        const auto r = p < e.rounds.size() ? e.rounds[p] : e.round;
        if (history_ && r > committed_[p])
          violate(Violation::Kind::rounds, t,
                  "the syncer restored fragment " + str(static_cast<int>(p)) + " at round " + str(r) + ", past its last commit (round " +
                      str(committed_[p]) + ")");
        round_[p] = r;  // a new life starts here
        committed_[p] = std::max(committed_[p], r);
      }
      history_ = true;
      repaired(FaultKind::syncer, -1, t);
      break;
    }
    case Event::Kind::rejected:
      if (e.digest != 0) refused_.emplace(e.digest, e.detail);
      break;
    case Event::Kind::heal:
      if (e.global_digest != 0 && e.digest != e.global_digest)
        violate(Violation::Kind::heal, t,
                "island " + str(e.island) + " healed (start " + str(e.incarnation) +
                    ") holding fragments that differ from the global ones it was given");
      [[fallthrough]];
    case Event::Kind::rejoin:
      if (island_ok(e.island)) done_[static_cast<std::size_t>(e.island)] = false;
      repaired(FaultKind::island, e.island, t);
      break;
    case Event::Kind::step:
      if (island_ok(e.island) && static_cast<std::size_t>(e.island) < s_.chips.size() &&
          e.chips >= s_.chips[static_cast<std::size_t>(e.island)])
        repaired(FaultKind::chip, e.island, t);
      break;
    case Event::Kind::done:
    case Event::Kind::leave:
      // The island's run is over: its unrepaired faults were cut short by the end.
      if (island_ok(e.island)) done_[static_cast<std::size_t>(e.island)] = true;
      for (auto& o : faults_)
        if (o.fault.fault != FaultKind::syncer && o.fault.island == e.island) o.island_done = true;
      break;
    case Event::Kind::fault:
      // A fault of an island that already finished is cut short by its end from the start.
      faults_.push_back(Outstanding{e, e.fault != FaultKind::syncer && island_ok(e.island) &&
                                           done_[static_cast<std::size_t>(e.island)]});
      break;
    case Event::Kind::diverged:
      violate(Violation::Kind::non_finite, t,
              e.island >= 0 ? "island " + str(e.island) + "'s state holds NaN or infinity: " + e.detail
                            : "the syncer's state holds NaN or infinity: " + e.detail);
      break;
    case Event::Kind::join:
    case Event::Kind::snapshot:
    case Event::Kind::dropped:
    case Event::Kind::unusable_state: break;
  }
}

void Invariants::goodput(const GoodputMeter::Report& r, double at) {
  const double parts = r.useful_chip_s + r.lost_failure_chip_s + r.lost_stale_chip_s + r.in_flight_chip_s;
  const auto tol = [](double x) { return 1e-9 + 1e-6 * std::abs(x); };
  for (const auto& [name, v] : {std::pair{"useful", r.useful_chip_s}, std::pair{"lost to failures", r.lost_failure_chip_s},
                                std::pair{"lost as stale", r.lost_stale_chip_s}, std::pair{"in flight", r.in_flight_chip_s},
                                std::pair{"provisioned", r.provisioned_chip_s}})
    if (!std::isfinite(v) || v < -tol(v))
      violate(Violation::Kind::goodput, at, std::string("goodput: ") + name + " chip-seconds are " + str(v));
  if (!(std::abs(parts - r.stepped_chip_s) <= tol(r.stepped_chip_s)))
    violate(Violation::Kind::goodput, at,
            "goodput's chip-seconds do not add up: useful " + str(r.useful_chip_s) + " + lost to failures " +
                str(r.lost_failure_chip_s) + " + lost as stale " + str(r.lost_stale_chip_s) + " + in flight " +
                str(r.in_flight_chip_s) + " = " + str(parts) + ", the steps took " + str(r.stepped_chip_s));
  if (!(r.stepped_chip_s <= r.provisioned_chip_s + tol(r.provisioned_chip_s)))
    violate(Violation::Kind::goodput, at,
            "goodput: the steps took " + str(r.stepped_chip_s) + " chip-seconds, more than the " + str(r.provisioned_chip_s) +
                " provisioned");
}

void Invariants::end(double at, bool syncer, bool islands) {
  for (const auto& o : faults_) {
    const auto& f = o.fault;
    if (f.fault == FaultKind::straggle || f.fault == FaultKind::partition) continue;  // over by the clock
    if (!(f.fault == FaultKind::syncer ? syncer : islands)) continue;               // repaired in another process
    if (o.island_done) continue;                                                    // its island's run ended first
    const double due = f.at + std::max(0.0, f.duration_s) + s_.repair_allowance_s;
    if (at > due)
      violate(Violation::Kind::unrepaired, at,
              faults_name(f) + " was never repaired: its unit was due back within " + str(due - f.at) +
                  " s, and the run went on " + str(at - f.at) + " s after the fault");
  }
  faults_.clear();
}

}  // namespace diloco
