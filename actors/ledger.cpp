// The ledger (ledger.hpp): the records, their sum, the meter's copy of goodput, events and stop.
#include "diloco/actors/ledger.hpp"

#include <algorithm>

#include "diloco/syncer_core.hpp"

namespace diloco::actors {

void IslandRecord::keep_state(std::shared_ptr<const IslandState> s) {
  std::lock_guard lock(state_mu_);
  state_ = std::move(s);
}

std::shared_ptr<const IslandState> IslandRecord::kept_state() const {
  std::lock_guard lock(state_mu_);
  return state_;
}

SyncerRecord::SyncerRecord(const Run& run)
    : finished(static_cast<std::size_t>(run.cfg.train.islands)), heard_step(static_cast<std::size_t>(run.cfg.train.islands)),
      global_(run.initial) {
  for (auto& f : finished) f = false;
  for (auto& s : heard_step) s = 0;
}

std::shared_ptr<const Checkpoint> SyncerRecord::snapshot() const {
  std::lock_guard lk(mu_);
  return snapshot_;
}

std::uint64_t SyncerRecord::keep_snapshot(std::shared_ptr<const Checkpoint> cp) {
  std::lock_guard lk(mu_);
  snapshot_.swap(cp);  // the old one goes with `cp`, after the lock is released
  return ++generation_;
}

SyncerRecord::Held SyncerRecord::held() const {
  std::lock_guard lk(mu_);
  return {snapshot_, generation_, snapshot_ ? global_round_of(snapshot_->rounds) : 0};
}

void SyncerRecord::publish(std::span<const float> params, std::uint64_t round, bool new_round) {
  std::lock_guard lk(mu_);
  global_.assign(params.begin(), params.end());
  if (new_round && round > round_) {
    new_rounds_.emplace_back(round, global_);
    if (new_rounds_.size() > max_new_rounds) new_rounds_.pop_front();
  }
  round_ = std::max(round_, round);
}

std::pair<std::vector<float>, std::uint64_t> SyncerRecord::global() const {
  std::lock_guard lk(mu_);
  return {global_, round_};
}

std::uint64_t SyncerRecord::round() const {
  std::lock_guard lk(mu_);
  return round_;
}

std::deque<std::pair<std::uint64_t, std::vector<float>>> SyncerRecord::take_new_rounds() {
  std::deque<std::pair<std::uint64_t, std::vector<float>>> out;
  std::lock_guard lk(mu_);
  out.swap(new_rounds_);
  return out;
}

namespace {
GoodputMeter initial_goodput(const Run& run) {
  const auto& cfg = run.cfg;
  GoodputMeter g(cfg.train.islands, cfg.islands.chips, run.P(),
                 run.ddp() || run.synchronous() ? cfg.train.islands : cfg.quorum.min_islands, cfg.chaos.downtime_gap_s, 0.0);
  g.set_total_chips(cfg.islands.total_chips(cfg.train.islands));
  return g;
}

InvariantSettings invariant_settings(const Run& run) {
  const auto& cfg = run.cfg;
  InvariantSettings s;
  s.islands = cfg.train.islands;
  s.fragments = run.P();
  s.quorum = run.ddp() || run.synchronous() ? cfg.train.islands : cfg.quorum.min_islands;
  for (int i = 0; i < cfg.train.islands; ++i) s.chips.push_back(cfg.islands.chips_of(i));
  // A killed unit comes back after its repair time, a restart back-off, and a join's round trip
  // or its island's next step: half a minute past the longest back-off is plenty, and a unit
  // still gone by then was lost (its supervisor gave up).
  s.repair_allowance_s = cfg.supervision.backoff_max_s + 30.0;
  return s;
}
}  // namespace

Ledger::Ledger(const Run& run, std::function<void(const Event&)> on_event)
    : islands(static_cast<std::size_t>(run.cfg.train.islands)), syncer(run), gateway(site_count(run.cfg), run.cfg.train.islands),
      goodput_(initial_goodput(run)), invariants_(invariant_settings(run)), on_event_(std::move(on_event)) {
  for (int i = 0; i < run.cfg.train.islands; ++i) chips.emplace_back(static_cast<std::size_t>(run.cfg.islands.chips_of(i)));
}

Tally Ledger::tally() const {
  Tally t;
  for (const auto& r : islands) {
    t.tokens += r.tokens.load();
    t.bytes_sent += r.bytes_up.load();
    t.live_islands += r.live.load() != 0 ? 1 : 0;
    t.islands_done += r.done.load() ? 1 : 0;
    t.rejected += r.refused.load();
    t.rebased += r.rebased.load();
    t.mixed += r.mixed.load();
    t.carried += r.carried.load();
    t.waits += r.waits.load();
    t.wait_timeouts += r.wait_timeouts.load();
    t.waited_s += static_cast<double>(r.waited_us.load()) * 1e-6;
  }
  for (const auto& island : chips)
    for (const auto& c : island) t.live_chips += c.starts.load() - c.ends.load();
  t.bytes_sent += syncer.bytes_down.load();
  t.commits = syncer.commits.load();
  t.dropped_stale = syncer.dropped_stale.load();
  t.superseded = syncer.superseded.load();
  t.clipped = syncer.clipped.load();
  t.unblocked = syncer.unblocked.load();
  t.held = syncer.heals_held.load();
  t.rejected += syncer.refused.load() + gateway.refused.load() + gateway.connector_refused.load();
  for (const auto& r : gateway.relay_refused) t.relay_refused += r.load();
  for (const auto& r : gateway.relayed) t.relayed += r.load();
  t.rejected += t.relay_refused;
  return t;
}


GoodputMeter::Report Ledger::goodput_report(double now) const {
  std::lock_guard lk(goodput_mu_);
  return goodput_.report(now - t0.load());
}

void Ledger::publish_goodput(const GoodputMeter& m) {
  std::lock_guard lk(goodput_mu_);
  goodput_ = m;
}

GoodputMeter Ledger::goodput_copy() const {
  std::lock_guard lk(goodput_mu_);
  return goodput_;
}

void Ledger::emit(const Event& e) {
  std::lock_guard lk(ev_mu_);
  invariants_.on(e);
  if (on_event_) on_event_(e);
}

void Ledger::check_end(double now, RunPart part) {
  const auto report = goodput_report(now);
  std::lock_guard lk(ev_mu_);
  if (part == RunPart::whole_run) invariants_.goodput(report, now);
  invariants_.end(now, part != RunPart::site, part != RunPart::syncer);
}

std::vector<Violation> Ledger::violations() const {
  std::lock_guard lk(ev_mu_);
  return invariants_.violations();
}

void Ledger::stop(const std::string& why) {
  std::lock_guard lk(stop_mu_);
  if (!stop_reason_) stop_reason_ = why;
}

std::optional<std::string> Ledger::stopped() const {
  std::lock_guard lk(stop_mu_);
  return stop_reason_;
}

}  // namespace diloco::actors
