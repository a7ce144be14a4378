// What a run is (run.hpp): the configuration and what follows from it.
#include "diloco/actors/run.hpp"

#include <algorithm>
#include <utility>

namespace diloco::actors {

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

Run::Run(RunConfig c, double resumed_at)
    : cfg(std::move(c)), budget(RunBudget::of(cfg)), corpus(Corpus::make(cfg.data, cfg.model.vocab)), layout_model(make_model(cfg.model)),
      plan(FragmentPlan::make(cfg.fragments.plan, layout_model->layout(),
                              cfg.train.mode == TrainMode::diloco || cfg.train.mode == TrainMode::ddp ? 1 : cfg.fragments.count)),
      initial(layout_model->layout().size()), schedule(resume_schedule(make_schedule(cfg), resumed_at)),
      resume_steps(static_cast<std::size_t>(cfg.train.islands), 0),
      resume_islands(static_cast<std::size_t>(cfg.train.islands)), resumed_at_s(resumed_at) {
  layout_model->init(initial, cfg.train.seed);
  // Every island must find a window of data before anything starts: a shard too short throws
  // here, naming the key, rather than in each island's actor, restarted until its supervisor
  // gives up.
  // (The synthetic language always has one: it writes its documents as they are read.)
  Batch probe;
  if (cfg.data.corpus != "synthetic")
    for (int i = 0; i < cfg.train.islands; ++i) corpus.shard(i, cfg.train.islands)->next(1, cfg.model.seq_len, probe);
}

void Run::resume_island(IslandState s) {
  if (s.island < 0 || s.island >= cfg.train.islands) return;
  const auto i = static_cast<std::size_t>(s.island);
  resume_steps[i] = s.step;
  resume_islands[i] = std::make_shared<const IslandState>(std::move(s));
}

}  // namespace diloco::actors
