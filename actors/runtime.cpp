// The runtime's shared context (directory, counters, snapshot) and the supervision tree that
// starts chips, islands and the syncer: root → syncer + island-i supervisors → island + chips.
#include "diloco/actors/runtime.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>

#include "diloco/actors/chip.hpp"
#include "diloco/actors/island.hpp"
#include "diloco/actors/syncer.hpp"

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
  cfg.set("scheduler.max-throughput", static_cast<std::size_t>(1));
  add_runtime_types(cfg);
}

const char* to_string(RuntimeEvent::Kind k) {
  switch (k) {
    case RuntimeEvent::step: return "step";
    case RuntimeEvent::commit: return "commit";
    case RuntimeEvent::join: return "join";
    case RuntimeEvent::heal: return "heal";
    case RuntimeEvent::rejoin: return "rejoin";
    case RuntimeEvent::restore: return "restore";
    case RuntimeEvent::snapshot: return "snapshot";
    case RuntimeEvent::fault: return "fault";
    case RuntimeEvent::rejected: return "rejected";
    case RuntimeEvent::dropped: return "dropped";
    case RuntimeEvent::done: return "done";
  }
  return "?";
}

Directory::Directory(int islands, int chips)
    : islands_(static_cast<std::size_t>(islands)),
      chips_(static_cast<std::size_t>(islands), std::vector<caf::actor>(static_cast<std::size_t>(chips))) {}
void Directory::set_syncer(caf::actor a) {
  std::lock_guard lk(mu_);
  syncer_ = std::move(a);
}
caf::actor Directory::syncer() const {
  std::lock_guard lk(mu_);
  return syncer_;
}
void Directory::set_island(int i, caf::actor a) {
  std::lock_guard lk(mu_);
  islands_.at(static_cast<std::size_t>(i)) = std::move(a);
}
caf::actor Directory::island(int i) const {
  std::lock_guard lk(mu_);
  return islands_.at(static_cast<std::size_t>(i));
}
void Directory::set_chip(int i, int c, caf::actor a) {
  std::lock_guard lk(mu_);
  chips_.at(static_cast<std::size_t>(i)).at(static_cast<std::size_t>(c)) = std::move(a);
}
caf::actor Directory::chip(int i, int c) const {
  std::lock_guard lk(mu_);
  return chips_.at(static_cast<std::size_t>(i)).at(static_cast<std::size_t>(c));
}

Runtime::Runtime(RunConfig c, std::function<void(const RuntimeEvent&)> on_event)
    : cfg(std::move(c)), corpus(Corpus::make(cfg.data)), layout_model(make_model(cfg.model)),
      plan(FragmentPlan::make(cfg.fragments.plan, layout_model->layout(),
                              cfg.train.mode == "diloco" ? 1 : cfg.fragments.count)),
      initial(layout_model->layout().size()), dir(cfg.train.islands, cfg.islands.chips),
      island_steps(static_cast<std::size_t>(cfg.train.islands)),
      incarnations(static_cast<std::size_t>(cfg.train.islands)), fault_fired(cfg.faults.size()),
      on_event_(std::move(on_event)) {
  layout_model->init(initial, cfg.train.seed);
  global = initial;
  for (auto& s : island_steps) s = 0;
  for (auto& n : incarnations) n = 0;
  for (auto& f : fault_fired) f = false;
  if (cfg.wan.enabled)
    for (int i = 0; i < cfg.train.islands; ++i)
      links.push_back(std::make_unique<Links>(link_config(cfg, i, true), link_config(cfg, i, false)));
}

double Runtime::link_delay(int island, bool up, std::size_t bytes, double now) {
  if (links.empty() || island < 0 || static_cast<std::size_t>(island) >= links.size()) return 0.0;
  auto& l = *links[static_cast<std::size_t>(island)];
  std::lock_guard lk(l.mu);
  return (up ? l.up : l.down).send(bytes, now).delivered_at - now;
}

Runtime::LinkTotals Runtime::link_totals() {
  LinkTotals t;
  for (auto& l : links) {
    std::lock_guard lk(l->mu);
    t.bytes += l->up.bytes_carried() + l->down.bytes_carried();
    t.retransmissions += l->up.retransmissions() + l->down.retransmissions();
  }
  return t;
}

void Runtime::emit(const RuntimeEvent& e) {
  std::lock_guard lk(ev_mu_);
  if (on_event_) on_event_(e);
}

caf::actor spawn_runtime(caf::actor_system& sys, std::shared_ptr<Runtime> rt, EventSink sink) {
  const auto& c = rt->cfg;
  std::vector<Child> root_children;
  root_children.push_back(Child{ChildSpec{"syncer", Restart::permanent, 1.0}, [rt](caf::event_based_actor* sup) {
                                  auto a = spawn_syncer(sup, rt);
                                  rt->dir.set_syncer(a);
                                  return a;
                                }});
  for (int i = 0; i < c.train.islands; ++i) {
    std::vector<Child> kids;
    kids.push_back(Child{ChildSpec{"island", Restart::permanent, 1.0}, [rt, i](caf::event_based_actor* sup) {
                           auto a = spawn_island(sup, rt, i);
                           rt->dir.set_island(i, a);
                           return a;
                         }});
    for (int ch = 0; ch < c.islands.chips; ++ch)
      kids.push_back(Child{ChildSpec{"chip-" + std::to_string(ch), Restart::permanent, 1.0},
                           [rt, i, ch](caf::event_based_actor* sup) {
                             auto a = spawn_chip(sup, rt, i, ch);
                             rt->dir.set_chip(i, ch, a);
                             return a;
                           }});
    const std::string name = "island-" + std::to_string(i);
    root_children.push_back(Child{ChildSpec{name, Restart::permanent, 5.0},
                             supervisor_child(name, flags_of(c.supervision, parse_strategy(c.supervision.strategy)),
                                              std::move(kids), sink)});
  }
  return spawn_supervisor(sys, "root", flags_of(c.supervision, Strategy::one_for_one), std::move(root_children),
                          std::move(sink));
}

}  // namespace diloco::actors
