// The run's description and ledger (runtime.hpp), and the supervision tree that
// starts chips, islands and the syncer: root → syncer + island-i supervisors → island + chips.
#include "diloco/actors/runtime.hpp"

#include <algorithm>
#include <chrono>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>

#include "diloco/actors/chip.hpp"
#include "diloco/actors/ddp_replica.hpp"
#include "diloco/actors/island.hpp"
#include "diloco/actors/param_server.hpp"
#include "diloco/actors/syncer.hpp"
#include "detail.hpp"
#include "diloco/budget.hpp"

namespace diloco::actors {

namespace {

SupervisorFlags flags_of(const SupervisionConfig& c, Strategy strategy) {
  SupervisorFlags f;
  f.strategy = strategy;
  f.intensity = c.intensity;
  f.period_s = c.period_s;
  f.backoff_initial_s = c.backoff_initial_s;
  f.backoff_max_s = c.backoff_max_s;
  f.backoff_factor = c.backoff_factor;
  return f;
}

}  // namespace

void add_runtime_types(caf::actor_system_config& cfg) { cfg.add_message_type<WireFrame>("diloco.WireFrame"); }

void configure_runtime_system(caf::actor_system_config& cfg, std::size_t threads) {
  cfg.set("scheduler.max-threads", threads);
  cfg.set("scheduler.policy", caf::atom("sharing"));
  cfg.set("scheduler.max-throughput", static_cast<std::size_t>(64));
  add_runtime_types(cfg);
}

namespace {

/// The run's fault schedule: [chaos] draws plus the time-triggered [[faults]], by time.
std::vector<ChaosEvent> make_schedule(const RunConfig& cfg) {
  std::vector<ChaosEvent> ev;
  if (cfg.chaos.enabled) {
    // Drawn for the largest island; chips that a smaller island does not have are left out.
    ev = chaos_schedule(cfg.chaos, cfg.train.islands, cfg.islands.max_chips(), site_count(cfg));
    std::erase_if(ev, [&](const ChaosEvent& e) {
      return e.kind == ChaosEvent::kill_chip && e.chip >= cfg.islands.chips_of(e.island);
    });
  }
  for (const auto& f : cfg.faults) {
    if (f.at_s < 0.0) continue;
    ChaosEvent e;
    e.at_s = f.at_s;
    e.duration_s = f.duration_s;
    if (f.kill == FaultKind::chip) e.kind = ChaosEvent::kill_chip, e.island = f.island, e.chip = f.chip;
    else if (f.kill == FaultKind::island) e.kind = ChaosEvent::kill_island, e.island = f.island;
    else if (f.kill == FaultKind::syncer) e.kind = ChaosEvent::kill_syncer;
    else if (f.kill == FaultKind::straggle) e.kind = ChaosEvent::straggle, e.island = f.island, e.factor = f.factor;
    else e.kind = ChaosEvent::partition, e.site = site_index(cfg, f.site);
    ev.push_back(e);
  }
  std::stable_sort(ev.begin(), ev.end(), [](const ChaosEvent& a, const ChaosEvent& b) { return a.at_s < b.at_s; });
  return ev;
}

}  // namespace

// The end-of-run rule is libdiloco's (budget.hpp); these read the records it needs.
bool Runtime::budget_spent(long step) const { return diloco::budget_spent(budget, step, tally().tokens); }

bool Runtime::trained() const {
  // An island's own record, or what the syncer heard of it (a syncer-only process runs none).
  std::vector<long> steps;
  for (std::size_t i = 0; i < islands.size(); ++i)
    steps.push_back(std::max(islands[i].step.load(), syncer.heard_step[i].load()));
  return all_trained(budget, steps, tally().tokens);
}

bool Runtime::all_done() const {
  std::vector<bool> done, up;
  for (const auto& r : islands) {
    done.push_back(r.done.load());
    up.push_back(r.live.load() != 0);
  }
  return diloco::all_done(budget, done, up, tally().tokens);
}

Run::Run(RunConfig c)
    : cfg(std::move(c)), budget(RunBudget::of(cfg)), corpus(Corpus::make(cfg.data, cfg.model.vocab)), layout_model(make_model(cfg.model)),
      plan(FragmentPlan::make(cfg.fragments.plan, layout_model->layout(),
                              cfg.train.mode == TrainMode::diloco || cfg.train.mode == TrainMode::ddp ? 1 : cfg.fragments.count)),
      initial(layout_model->layout().size()), schedule(make_schedule(cfg)),
      resume_steps(static_cast<std::size_t>(cfg.train.islands), 0) {
  layout_model->init(initial, cfg.train.seed);
}

SyncerRecord::SyncerRecord(const Run& run)
    : finished(static_cast<std::size_t>(run.cfg.train.islands)), heard_step(static_cast<std::size_t>(run.cfg.train.islands)),
      global_(run.initial) {
  for (auto& f : finished) f = false;
  for (auto& s : heard_step) s = 0;
}

std::optional<Checkpoint> SyncerRecord::snapshot() const {
  std::lock_guard lk(mu_);
  return snapshot_;
}

void SyncerRecord::keep_snapshot(Checkpoint cp) {
  std::lock_guard lk(mu_);
  snapshot_ = std::move(cp);
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
}  // namespace

Ledger::Ledger(const Run& run, std::function<void(const Event&)> on_event)
    : islands(static_cast<std::size_t>(run.cfg.train.islands)), syncer(run), gateway(site_count(run.cfg)),
      goodput_(initial_goodput(run)), on_event_(std::move(on_event)) {
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
  }
  for (const auto& island : chips)
    for (const auto& c : island) t.live_chips += c.starts.load() - c.ends.load();
  t.bytes_sent += syncer.bytes_down.load();
  t.commits = syncer.commits.load();
  t.dropped_stale = syncer.dropped_stale.load();
  t.rejected += syncer.refused.load() + gateway.refused.load();
  for (const auto& r : gateway.relay_refused) t.rejected += r.load();
  return t;
}

Runtime::Runtime(RunConfig c, std::function<void(const Event&)> on_event)
    : Run(std::move(c)), Ledger(*this, std::move(on_event)), dir(cfg.train.islands, cfg.islands.max_chips()),
      windows(cfg.train.islands, cfg.islands.max_chips(), cfg.faults.size()), links(cfg, schedule) {}

double Runtime::speed(int island, double now) const {
  return cfg.islands.speed_of(island) * windows.slowdown(island, now);
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
  if (on_event_) on_event_(e);
}

void Ledger::stop(const std::string& why) {
  std::lock_guard lk(stop_mu_);
  if (!stop_reason_) stop_reason_ = why;
}

std::optional<std::string> Ledger::stopped() const {
  std::lock_guard lk(stop_mu_);
  return stop_reason_;
}

caf::actor spawn_runtime(caf::actor_system& sys, std::shared_ptr<Runtime> rt, EventSink sink, SpawnSet what) {
  const auto& c = rt->cfg;
  rt->t0 = detail::now_s(sys.clock());
  rt->meter = spawn_meter(sys, rt);
  // A unit under repair (faults.hpp) is started by its supervisor but registers itself only when
  // the repair is over; until then the others find its dead predecessor and carry on without it.
  // train.mode "ddp" runs its own protocol: the parameter server in the syncer's place and a ddp
  // replica in each island's.
  std::vector<Child> root_children;
  if (what.syncer)
    root_children.push_back(Child{ChildSpec{"syncer", Restart::permanent, 1.0}, [rt](caf::event_based_actor* sup) {
                                    auto a = rt->ddp() ? spawn_param_server(sup, rt) : spawn_syncer(sup, rt);
                                    if (detail::now_s(sup) >= rt->windows.syncer_back()) rt->dir.set_syncer(a);
                                    return a;
                                  }});
  for (int i = 0; i < c.train.islands; ++i) {
    if (!what.all_islands && std::find(what.islands.begin(), what.islands.end(), i) == what.islands.end()) continue;
    std::vector<Child> kids;
    kids.push_back(Child{ChildSpec{"island", Restart::permanent, 1.0}, [rt, i](caf::event_based_actor* sup) {
                           auto a = rt->ddp() ? spawn_ddp_replica(sup, rt, i) : spawn_island(sup, rt, i);
                           rt->dir.set_island(i, a);
                           return a;
                         }});
    for (int ch = 0; ch < c.islands.chips_of(i); ++ch)
      kids.push_back(Child{ChildSpec{"chip-" + std::to_string(ch), Restart::permanent, 1.0},
                           [rt, i, ch](caf::event_based_actor* sup) {
                             auto a = spawn_chip(sup, rt, i, ch);
                             if (detail::now_s(sup) >= rt->windows.chip_back(i, ch))
                               rt->dir.set_chip(i, ch, a);
                             return a;
                           }});
    const std::string name = "island-" + std::to_string(i);
    root_children.push_back(Child{ChildSpec{name, Restart::permanent, 5.0},
                             supervisor_child(name, flags_of(c.supervision, parse_strategy(c.supervision.strategy)),
                                              std::move(kids), sink)});
  }
  auto root = spawn_supervisor(sys, "root", flags_of(c.supervision, Strategy::one_for_one), std::move(root_children),
                               std::move(sink));
  meter_watch(rt->meter, root);
  if (!rt->schedule.empty()) spawn_fault_driver(sys, rt, std::move(what), root);
  return root;
}

}  // namespace diloco::actors
