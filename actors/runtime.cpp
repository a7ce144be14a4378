// The Runtime (runtime.hpp): the end-of-run rule over the ledger's records, and the supervision
// tree that starts chips, islands and the syncer: root → syncer + island-i supervisors → island +
// chips, with the meter and the fault driver beside it.
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


// The end-of-run rule is libdiloco's (budget.hpp); these read the records it needs.
bool Runtime::budget_spent(long step) const { return diloco::budget_spent(budget, step, tally().tokens); }

bool Runtime::trained() const {
  // An island's own record, or what the syncer heard of it (a syncer-only process runs none).
  // An open island no joiner holds is not waited for.
  std::vector<long> steps;
  for (std::size_t i = 0; i < islands.size(); ++i)
    if (!gateway.vacant[i].load()) steps.push_back(std::max(islands[i].step.load(), syncer.heard_step[i].load()));
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

Runtime::Runtime(RunConfig c, std::function<void(const Event&)> on_event, double resumed_at)
    : Run(std::move(c), resumed_at), Ledger(*this, std::move(on_event)), dir(cfg.train.islands, cfg.islands.max_chips()),
      windows(cfg.train.islands, cfg.islands.max_chips(), cfg.faults.size()), links(cfg, schedule) {}

double Runtime::speed(int island, double now) const {
  return cfg.islands.speed_of(island) * windows.slowdown(island, now);
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
