// `diloco run` in decoupled mode: spawns the supervision tree of chips, islands and the syncer
// (diloco::actors), prints one line per global round and a summary with the fault timeline.
#include "decoupled_run.hpp"
#include "report.hpp"
#include "watch.hpp"

#include <atomic>
#include <chrono>
#include <deque>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/exit_reason.hpp>
#include <caf/send.hpp>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>
#include <spdlog/fmt/ranges.h>

#include "diloco/actors/runtime.hpp"

namespace {

using Clock = std::chrono::steady_clock;

/// What the progress lines need from the event stream (filled on actor threads).
struct Tally {
  std::mutex mu;
  double loss_sum = 0.0;
  long loss_count = 0;
  std::vector<std::string> timeline;
  std::map<std::string, double> down;  // unit → when its fault was injected (time to heal)
  std::vector<std::pair<double, std::string>> faults;  // (seconds since start, what) for --metrics
  int dropped_shown = 0;
  Clock::time_point start = Clock::now();
  double since() const { return std::chrono::duration<double>(Clock::now() - start).count(); }
};

}  // namespace

/// `--init` / `--save`: a run's parameters as a checkpoint of one whole-model fragment, so any
/// mode can start from any other's result (e.g. a shared pretrained model).
namespace {
diloco::FragmentPlan whole_model_plan(const diloco::Model& m) {
  return diloco::FragmentPlan::make("strided", m.layout(), 1);
}
}  // namespace

std::vector<float> load_params(const diloco::RunConfig& cfg, const std::string& path) {
  auto m = diloco::make_model(cfg.model);
  const auto plan = whole_model_plan(*m);
  auto cp = diloco::load_checkpoint(path, m->layout(), plan, diloco::LoadOptions{false});
  if (!cp) throw std::runtime_error("--init " + path + ": " + cp.error().message());
  return std::move(cp->params);
}

void save_params(const diloco::RunConfig& cfg, const std::string& path, std::span<const float> params) {
  auto m = diloco::make_model(cfg.model);
  const auto plan = whole_model_plan(*m);
  diloco::Checkpoint cp;
  cp.params.assign(params.begin(), params.end());
  cp.momentum = {std::vector<float>(plan.size(0), 0.0f)};
  cp.rounds = {0};
  cp.metadata["saved_by"] = "diloco run --save (mode " + std::string(name_of(cfg.train.mode)) + ")";
  if (auto ok = diloco::save_checkpoint(path, m->layout(), plan, cp); !ok)
    throw std::runtime_error("--save " + path + ": " + ok.error().message());
  spdlog::info("saved the final parameters to {}", path);
}

int run_decoupled(const diloco::RunConfig& cfg, const std::string& metrics, const std::string& config_label,
                  const std::vector<float>& initial, const std::string& save) {
  using namespace diloco;
  using namespace diloco::actors;
  JsonLines jsonl;
  if (!metrics.empty()) jsonl.open(metrics);
  auto tally = std::make_shared<Tally>();
  auto rt = std::make_shared<Runtime>(cfg, [tally, islands = cfg.islands](const Event& e) {
    std::lock_guard lk(tally->mu);
    const double t = tally->since();
    // Time to heal: from the injected fault to the unit working again.
    auto healed = [&](const std::string& unit) -> std::string {
      auto it = tally->down.find(unit);
      if (it == tally->down.end()) return {};
      const double d = t - it->second;
      tally->down.erase(it);
      char buf[64];
      std::snprintf(buf, sizeof buf, " [%s healed in %.3f s]", unit.c_str(), d);
      return buf;
    };
    if (e.kind == Event::Kind::step) {
      if (std::isfinite(e.loss)) tally->loss_sum += e.loss, ++tally->loss_count;
      const int chips = islands.chips_of(e.island);
      if (e.chips == chips) {
        for (int c = 0; c < chips; ++c) {
          auto note = healed("chip " + std::to_string(e.island) + "." + std::to_string(c));
          if (!note.empty()) {
            char line[160];
            std::snprintf(line, sizeof line, "%8.2fs  island %d steps with all %d chips again at step %ld%s", t,
                          e.island, chips, e.step, note.c_str());
            tally->timeline.emplace_back(line);
          }
        }
      }
      return;
    }
    char line[320];
    switch (e.kind) {
      case Event::Kind::fault:
        std::snprintf(line, sizeof line, "%8.2fs  %s", t, e.detail.c_str());
        tally->faults.emplace_back(t, e.detail);
        if (e.fault == FaultKind::chip) tally->down["chip " + std::to_string(e.island) + "." + std::to_string(e.chip)] = t;
        else if (e.fault == FaultKind::island) tally->down["island " + std::to_string(e.island)] = t;
        else if (e.fault == FaultKind::syncer) tally->down["syncer"] = t;
        break;
      case Event::Kind::heal:
        if (e.incarnation <= 1) return;  // the first start of every island is not news
        std::snprintf(line, sizeof line, "%8.2fs  island %d (incarnation %d) healed to round %llu at step %ld%s", t,
                      e.island, e.incarnation, static_cast<unsigned long long>(e.round), e.step,
                      healed("island " + std::to_string(e.island)).c_str());
        break;
      case Event::Kind::rejoin:
        std::snprintf(line, sizeof line, "%8.2fs  island %d re-joined the syncer (base round %llu) at step %ld", t,
                      e.island, static_cast<unsigned long long>(e.round), e.step);
        break;
      case Event::Kind::restore:
        std::snprintf(line, sizeof line, "%8.2fs  syncer restarted (%s) at global round %llu%s", t, e.detail.c_str(),
                      static_cast<unsigned long long>(e.round), healed("syncer").c_str());
        break;
      case Event::Kind::rejected:
        std::snprintf(line, sizeof line, "%8.2fs  refused a frame: %s", t, e.detail.c_str());
        break;
      case Event::Kind::diverged:
      case Event::Kind::unusable_state:
        std::snprintf(line, sizeof line, "%8.2fs  %s", t, e.detail.c_str());
        break;
      case Event::Kind::dropped:
        // Late contributions are normal in small numbers; the first few are shown, all counted.
        if (++tally->dropped_shown > 10) return;
        std::snprintf(line, sizeof line, "%8.2fs  syncer dropped a late contribution: %s%s", t, e.detail.c_str(),
                      tally->dropped_shown == 10 ? " (further drops are only counted)" : "");
        break;
      default: return;
    }
    tally->timeline.emplace_back(line);
  });
  if (!initial.empty()) {
    if (initial.size() != rt->initial.size()) throw std::runtime_error("--init: the checkpoint is for another model");
    rt->initial = initial;
    rt->global = initial;
  }
  const Corpus& corpus = rt->corpus;
  auto model = make_model(cfg.model);
  const auto eval = corpus.eval_windows(cfg.model.seq_len, cfg.train.eval_windows);
  const auto round_eval = corpus.progress_windows(cfg.model.seq_len, cfg.train.round_eval_windows);
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());

  spdlog::info("config: {}", config_label.empty() ? "built-in defaults" : config_label);
  spdlog::info("data: {}", corpus.describe());
  std::string speeds;
  for (int i = 0; i < cfg.train.islands; ++i) speeds += fmt::format("{}{:.2f}", i ? "," : "", cfg.islands.speed_of(i));
  spdlog::info("mode {} (actor runtime{}): {} islands x {} chips (speed {}; <1 is emulated by delayed chip "
               "replies), {} steps, H={}, P={}, K={}, grace {}, encoding {}, {} scheduler threads",
               name_of(cfg.train.mode), rt->synchronous() ? ", synchronous rounds" : "", cfg.train.islands,
               cfg.islands.counts.empty() ? std::to_string(cfg.islands.chips) : fmt::format("[{}]", fmt::join(cfg.islands.counts, ",")),
               speeds, cfg.train.steps, cfg.train.H, rt->P(),
               rt->synchronous() ? cfg.train.islands : cfg.quorum.min_islands, name_of(cfg.quorum.grace), cfg.fragments.encoding, cores);

  caf::actor_system_config sc;
  configure_runtime_system(sc, static_cast<std::size_t>(cores));
  caf::actor_system sys(sc);
  const auto start = Clock::now();
  {
    std::lock_guard lk(tally->mu);
    tally->start = start;  // timeline, fault marks and progress lines share one origin
  }
  auto root = spawn_runtime(sys, rt);
  auto actor_now = [&sys] { return std::chrono::duration<double>(sys.clock().now().time_since_epoch()).count(); };
  if (!rt->schedule.empty()) {
    spdlog::info("fault schedule: {} events (hash {:016x}){}", rt->schedule.size(), schedule_hash(rt->schedule),
                 cfg.chaos.enabled ? fmt::format(", chaos seed {}", cfg.chaos.seed) : std::string());
    for (std::size_t k = 0; k < rt->schedule.size() && k < 8; ++k) spdlog::info("  {}", rt->schedule[k].describe());
    if (rt->schedule.size() > 8) spdlog::info("  ... and {} more", rt->schedule.size() - 8);
  }
  // If the tree gives up (restart intensity exceeded at the root), stop waiting for islands.
  auto tree_failed = std::make_shared<std::atomic<bool>>(false);
  auto tree_reason = std::make_shared<std::string>();
  root->attach_functor([tree_failed, tree_reason, &sys](const caf::error& reason) {
    if (reason) *tree_reason = sys.render(reason);
    tree_failed->store(true);
  });

  std::printf("%6s %11s %10s %9s %8s %6s %7s %12s %8s\n", "round", "train_loss", "eval_loss", "tok/s", "islands",
              "chips", "quorum", "MB_on_wire", "goodput");
  std::fflush(stdout);
  std::uint64_t printed = 0;
  double last_eval = std::nan("");
  auto report = [&](std::uint64_t round, const std::vector<float>& global) {
    double train = std::nan("");
    {
      std::lock_guard lk(tally->mu);
      if (tally->loss_count) train = tally->loss_sum / static_cast<double>(tally->loss_count);
      tally->loss_sum = 0.0;
      tally->loss_count = 0;
    }
    last_eval = evaluate(*model, global, round_eval);
    const double secs = std::chrono::duration<double>(Clock::now() - start).count();
    const auto tokens = rt->counters.tokens.load();
    const auto gp = rt->goodput_report(actor_now());
    const double goodput = gp.goodput;
    std::printf("%6llu %11.4f %10.4f %9.0f %8d %6d %7d %12.3f %7.1f%%\n", static_cast<unsigned long long>(round), train,
                last_eval, tokens / std::max(secs, 1e-9), rt->counters.live_islands.load(),
                rt->counters.live_chips.load(), rt->synchronous() ? cfg.train.islands : cfg.quorum.min_islands, rt->counters.bytes_sent.load() / 1e6,
                100.0 * goodput);
    std::fflush(stdout);
    jsonl.write(Json{{"round", round},
                    {"train_loss", train},
                    {"eval_loss", last_eval},
                    {"tokens", tokens},
                    {"bytes", rt->counters.bytes_sent.load()},
                    {"goodput", goodput},
                    {"useful_chip_s", gp.useful_chip_s},
                    {"provisioned_chip_s", gp.provisioned_chip_s},
                    {"downtime_s", gp.global_downtime_s},
                    {"live_islands", rt->counters.live_islands.load()},
                    {"seconds", secs}});
  };
  // The main thread only watches: it evaluates the global parameters when a global round lands.
  double finished_at = 0.0;
  WatchRules rules;
  rules.done = [&] { return rt->all_done(); };
  rules.trained = [&] { return rt->trained(); };
  if (rt->final_sync()) rules.final_sync_s = cfg.train.final_sync_s;
  rules.linger_s = 0.3;  // the syncer merges the last contributions in flight
  rules.failed = [&] { return tree_failed->load(); };
  rules.stopped = [&] { return rt->stopped(); };
  rules.on_end = [&] { finished_at = actor_now(); };  // chips are provisioned until the last island is done
  const auto end = watch(rules, [&] {
    std::deque<std::pair<std::uint64_t, std::vector<float>>> rounds;
    {
      std::lock_guard lk(rt->global_mu);
      rounds.swap(rt->new_rounds);
    }
    for (const auto& [round, global] : rounds) {
      report(round, global);
      printed = round;
    }
  });
  switch (end.how) {
    case WatchEnd::How::tree_failed:
      spdlog::error("the supervision tree stopped: {}", tree_reason->empty() ? "normal" : *tree_reason);
      return 1;
    case WatchEnd::How::stopped: {
      // A diverged island or syncer, or an unusable syncer state file: nothing to wait for.
      caf::anon_send_exit(root, caf::exit_reason::user_shutdown);
      std::printf("timeline (%zu events):\n", tally->timeline.size());
      {
        std::lock_guard lk(tally->mu);
        for (const auto& l : tally->timeline) std::printf("  %s\n", l.c_str());
      }
      std::fflush(stdout);
      spdlog::error("run stopped: {}", end.why);
      return 1;
    }
    case WatchEnd::How::final_sync_expired: {
      int waiting = 0;
      for (const auto& d : rt->island_done) waiting += d.load() ? 0 : 1;
      spdlog::warn("final sync: the last contributions of {} island(s) not merged after {} s (train.final_sync_s); "
                   "ending without them",
                   waiting, cfg.train.final_sync_s);
      break;
    }
    case WatchEnd::How::done: break;
  }
  const double secs = std::chrono::duration<double>(Clock::now() - start).count();
  // Provisioned until the last island finished; merges of the last contributions (the moments
  // waited above) still count as useful.
  const auto gp = rt->goodput_report(finished_at);
  caf::anon_send_exit(root, caf::exit_reason::user_shutdown);
  std::vector<float> final_params;
  {
    std::lock_guard lk(rt->global_mu);
    final_params = rt->global;
  }
  const auto final_measured = evaluate_with_error(*model, final_params, eval);
  const double final_eval = final_measured.loss;
  if (!save.empty()) save_params(cfg, save, final_params);
  std::printf("timeline (%zu events):\n", tally->timeline.size());
  for (const auto& l : tally->timeline) std::printf("  %s\n", l.c_str());
  const auto tokens = rt->counters.tokens.load();
  std::printf("done: %s on actors, %llu global rounds, final eval loss %.4f ± %.4f nats/token", std::string(name_of(cfg.train.mode)).c_str(),
              static_cast<unsigned long long>(printed),
              final_eval, final_measured.std_error);
  if (auto floor = corpus.entropy_floor())
    std::printf(" (entropy floor %.4f, unigram entropy %.4f)", *floor, corpus.unigram_entropy());
  std::printf(", %llu tokens in %.1f s (%.0f tok/s), %.2f MB on the wire",
              static_cast<unsigned long long>(tokens), secs, tokens / std::max(secs, 1e-9),
              rt->counters.bytes_sent.load() / 1e6);
  std::printf("; %llu fragment commits, %llu late contributions dropped, %llu frames refused\n",
              static_cast<unsigned long long>(rt->counters.commits.load()),
              static_cast<unsigned long long>(rt->counters.dropped_stale.load()),
              static_cast<unsigned long long>(rt->counters.rejected.load()));
  std::printf("goodput %.1f%%: %.1f of %.1f chip-seconds reached the global model (lost: %.1f to failures, %.1f to "
              "stale drops, %.1f undecided at the end; the rest waiting or down); global downtime %.2f s\n",
              100.0 * gp.goodput, gp.useful_chip_s, gp.provisioned_chip_s, gp.lost_failure_chip_s, gp.lost_stale_chip_s,
              gp.in_flight_chip_s, gp.global_downtime_s);
  if (jsonl) {
    {
      std::lock_guard lk(tally->mu);
      for (const auto& [t, what] : tally->faults) jsonl.write(Json{{"fault", what}, {"seconds", t}});
    }
    // Per site link: bytes each way and the busiest second (peak bandwidth in use).
    auto links = Json::array();
    for (const auto& l : rt->links.report())
      links.push_back(Json{{"site", l.site},
                           {"up_bytes", l.up_bytes},
                           {"down_bytes", l.down_bytes},
                           {"up_peak_mbps", l.up_peak * l.bandwidth_Bps * 8e-6},
                           {"down_peak_mbps", l.down_peak * l.bandwidth_Bps * 8e-6},
                           {"bandwidth_mbps", l.bandwidth_Bps * 8e-6}});
    jsonl.write(Json{{"summary", true},
                  {"mode", name_of(cfg.train.mode)},
                  {"final_eval_loss", final_eval},
                  {"final_eval_std_error", final_measured.std_error},
                  {"seconds", secs},
                  {"tokens", tokens},
                  {"bytes", rt->counters.bytes_sent.load()},
                  {"goodput", gp.goodput},
                  {"useful_chip_s", gp.useful_chip_s},
                  {"provisioned_chip_s", gp.provisioned_chip_s},
                  {"downtime_s", gp.global_downtime_s},
                  {"faults", rt->schedule.size()},
                  {"schedule_hash", fmt::format("{:016x}", schedule_hash(rt->schedule))},
                  {"rounds", printed},
                  {"commits", rt->counters.commits.load()},
                  {"dropped_stale", rt->counters.dropped_stale.load()},
                  {"links", std::move(links)}});
  }
  if (!rt->links.empty()) {
    const auto links = rt->links.totals();
    std::printf("links (emulated%s): %.2f MB carried incl. progress reports, %llu retransmissions\n",
                cfg.wan.enabled ? "" : ", ideal but for partitions", links.bytes / 1e6,
                static_cast<unsigned long long>(links.retransmissions));
    for (const auto& l : rt->links.report())
      std::printf("  %-12s %8.1f Mbit/s  up %10.3f MB (peak %5.1f%%)  down %10.3f MB (peak %5.1f%%)\n", l.site.c_str(),
                  l.bandwidth_Bps * 8e-6, l.up_bytes / 1e6, 100.0 * l.up_peak, l.down_bytes / 1e6, 100.0 * l.down_peak);
  }
  return 0;
}

int run_demo_supervision() {
  // The built-in topology: 3 islands x 2 chips (one island at 55% speed), 2 fragments, K = 2.
  const char* topology = R"(
[model]
n_layer = 2
n_embd = 32
n_head = 2
seq_len = 32
[train]
mode = "decoupled"
islands = 3
steps = 240
H = 20
[inner]
lr = 3e-3
warmup_steps = 20
[fragments]
count = 2
tau = 2
encoding = "int8"
[quorum]
min_islands = 2
[islands]
chips = 2
speed = [1.0, 1.0, 0.55]
[syncer]
snapshot_every = 2
[[faults]]
kill = "chip"
island = 0
chip = 1
at_step = 40
[[faults]]
kill = "island"
island = 1
at_step = 100
[[faults]]
kill = "syncer"
island = 0
at_step = 160
)";
  const auto cfg = diloco::parse_config(topology, {}, "demo");
  std::printf("diloco demo supervision: 3 islands x 2 chips train Decoupled DiLoCo under a supervision tree\n"
              "(root -> syncer + island-i supervisors -> island + chips). Island 2 emulates older hardware\n"
              "at 55%% speed. At island 0's step 40 chip 0.1 is killed, at island 1's step 100 island 1 is\n"
              "killed, at island 0's step 160 the syncer is killed. Watch the rounds go on.\n\n");
  return run_decoupled(cfg, {}, "built-in demo topology");
}
