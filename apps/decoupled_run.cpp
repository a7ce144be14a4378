// `diloco run` in decoupled mode: spawns the supervision tree of chips, islands and the syncer
// (diloco::actors), prints one line per global round and a summary with the fault timeline.
#include "decoupled_run.hpp"
#include "metrics.hpp"
#include "report.hpp"
#include "watch.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <numeric>
#include <optional>
#include <thread>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/exit_reason.hpp>
#include <caf/scheduler/test_coordinator.hpp>
#include <caf/send.hpp>
#include <spdlog/spdlog.h>

#include "diloco/actors/remote.hpp"
#include "diloco/actors/runtime.hpp"
#include "diloco/run_state.hpp"
#include "diloco/syncer_core.hpp"

namespace {
using Clock = std::chrono::steady_clock;
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

namespace {

/// `--state DIR`: opens the run's state directory (refusing one of another configuration), points
/// the syncer's state file into it, and reads how far a run to resume had gone.
struct StateDir {
  std::optional<diloco::RunStateDir> dir;
  diloco::RunProgress progress;
};

StateDir open_state(diloco::RunConfig& cfg, const std::string& path, bool has_init) {
  StateDir s;
  if (path.empty()) return s;
  if (cfg.train.mode == diloco::TrainMode::ddp)
    throw std::invalid_argument("--state: train.mode \"ddp\" keeps its parameter server's state in memory only; "
                                "a state directory resumes the decoupled, diloco and streaming modes");
  if (cfg.syncer.snapshot_every < 1)
    throw std::invalid_argument("--state: syncer.snapshot_every is 0, so no state would ever be written; set it to "
                                "the number of global rounds between writes (1: every round)");
  auto d = diloco::open_run_state(path, cfg);
  if (!d) throw std::runtime_error("--state " + path + ": " + d.error().message());
  if (d->resuming && has_init)
    throw std::invalid_argument("--init with --state " + path + ", which holds a run to resume: use one or the other");
  cfg.syncer.checkpoint = d->state_path();
  if (d->resuming) {
    auto bytes = diloco::read_file(d->state_path());
    auto file = bytes ? diloco::read_safetensors(*bytes) : diloco::Expected<diloco::SafetensorsFile>(bytes.error());
    auto progress = file ? diloco::run_progress_of(file->metadata, cfg.train.islands)
                         : diloco::Expected<diloco::RunProgress>(file.error());
    if (!progress) throw std::runtime_error("--state " + path + ": " + d->state_path() + ": " + progress.error().message());
    s.progress = std::move(*progress);
  }
  s.dir = std::move(*d);
  return s;
}

/// A resumed run: each island's saved state and tokens go to the runtime before the tree is
/// spawned (the syncer reads its own part of the file when it starts). Returns the saved global
/// parameters and their round, for the line that says where the run resumes.
std::pair<std::vector<float>, std::uint64_t> resume_islands(diloco::actors::Runtime& rt, const StateDir& s) {
  auto cp = diloco::load_checkpoint(s.dir->state_path(), rt.layout_model->layout(), rt.plan);
  if (!cp) throw std::runtime_error("--state " + s.dir->dir + ": " + cp.error().message());
  for (auto& is : cp->islands) rt.resume_island(std::move(is));
  for (std::size_t i = 0; i < s.progress.tokens.size(); ++i) rt.islands[i].tokens = s.progress.tokens[i];
  const std::uint64_t round = diloco::global_round_of(cp->rounds);
  return {std::move(cp->params), round};
}

}  // namespace

int run_decoupled(const diloco::RunConfig& run_cfg, const std::string& config_label, const RunFlags& flags,
                  const std::vector<float>& initial) {
  using namespace diloco;
  using namespace diloco::actors;
  const std::string &metrics = flags.metrics, &save = flags.save, &http = flags.http, &state_dir = flags.state;
  const bool simulate = flags.simulate, relays = flags.relays;
  RunConfig cfg = run_cfg;
  if (simulate && !http.empty())
    throw std::invalid_argument("--http with --simulate: the status page follows a run in wall time, a simulated run has none");
  if (relays && cfg.train.mode != TrainMode::decoupled)
    throw std::invalid_argument("--relays: sites reach a decoupled run's syncer through sessions; train.mode is " +
                                std::string(name_of(cfg.train.mode)));
  if (relays && (cfg.net.allow_join || !cfg.syncers.empty()))
    throw std::invalid_argument("--relays: the sites of the configuration only (no net.allow_join, no [[syncers]])");
  const auto state = open_state(cfg, state_dir, !initial.empty());
  const auto http_at = http.empty() ? std::optional<HttpAddress>() : HttpAddress::parse(http);
  JsonLines jsonl;
  if (!metrics.empty()) jsonl.open(metrics);
  auto timeline = std::make_shared<FaultTimeline>(cfg.islands);
  // --http: the monitor hears the events too; set before the tree is spawned, kept alive by the
  // runtime's event callback as long as an actor may emit.
  auto monitor = std::make_shared<std::shared_ptr<Monitor>>();
  auto rt = std::make_shared<Runtime>(cfg, [timeline, monitor](const Event& e) {
    timeline->on(e);
    if (*monitor) (*monitor)->on(e);
  }, state.progress.elapsed_s);
  rt->keep_island_states = state.dir.has_value();
  rt->simulated = simulate;
  if (!initial.empty()) {
    if (initial.size() != rt->initial.size()) throw std::runtime_error("--init: the checkpoint is for another model");
    rt->initial = initial;
    rt->syncer.publish(initial, 0, false);
  }
  auto model = make_model(cfg.model);
  const auto eval = rt->corpus.eval_windows(cfg.model.seq_len, cfg.train.eval_windows);
  const auto round_eval = rt->corpus.progress_windows(cfg.model.seq_len, cfg.train.round_eval_windows);
  const unsigned threads = scheduler_threads(cfg);
  log_start(*rt, config_label, threads);
  std::uint64_t resumed_round = 0;
  if (state.dir && state.dir->resuming) {
    const auto [global, round] = resume_islands(*rt, state);
    resumed_round = round;
    std::string steps;
    for (int i = 0; i < cfg.train.islands; ++i) {
      const auto& is = rt->resume_islands[static_cast<std::size_t>(i)];
      steps += (i ? ", " : "") + (is ? std::to_string(is->step) : std::string("-"));
    }
    std::printf("resuming %s at global round %llu after %.1f s: islands at steps [%s], eval loss %.4f\n",
                state.dir->dir.c_str(), static_cast<unsigned long long>(round), state.progress.elapsed_s, steps.c_str(),
                evaluate(*model, global, round_eval));
    std::fflush(stdout);
  } else if (state.dir) {
    spdlog::info("run state: {} (written with the syncer's state file, every syncer.snapshot_every = {} rounds)",
                 state.dir->dir, cfg.syncer.snapshot_every);
  }

  caf::actor_system_config sc;
  configure_runtime_system(sc, static_cast<std::size_t>(threads));
  // --simulate: CAF's deterministic test coordinator runs every actor on this thread, one message
  // at a time in a fixed order, and its clock moves only when the next timer fires.
  if (simulate) sc.set("scheduler.policy", caf::atom("testing"));
  caf::actor_system sys(sc);
  if (simulate) sys.await_actors_before_shutdown(false);  // nothing runs their last messages once the watch ends
  auto* sched = simulate ? &dynamic_cast<caf::scheduler::test_coordinator&>(sys.scheduler()) : nullptr;
  auto actor_now = [&sys] { return actor_seconds(sys); };
  std::vector<int> all(static_cast<std::size_t>(cfg.train.islands));
  std::iota(all.begin(), all.end(), 0);
  // Stops serving before the actor system goes.
  auto server = serve_http(http_at, *rt, "run", std::move(all), actor_now, *monitor);
  const auto start = Clock::now();
  const double virtual_start = actor_now();
  if (simulate) timeline->use_clock(actor_now);
  timeline->restart_clock();  // timeline, fault marks and progress lines share one origin
  // --relays: every site's islands reach the syncer through a session as across processes (the
  // connector's hello and proof, the gateway, a relay checking each frame, heartbeats, join
  // spacing, reconnects after a syncer restart); only the door and its sockets are left out. No
  // island joins the syncer directly, not even before its site's first session: routed, with no
  // relay yet, before the tree spawns.
  std::vector<ConnectorOptions> sites;
  for (int s = 0; relays && s < site_count(cfg); ++s) {
    ConnectorOptions co;
    co.site = site_name(cfg, s);
    co.tls = false;  // no door: the gateway takes the site at its word (GatewayOptions::ca_file empty)
    co.syncer_label = "the gateway in this process";
    co.route = islands_of_site(cfg, s);
    co.log = [name = co.site](const std::string& line) { spdlog::info("{}: {}", name, line); };
    rt->dir.set_route(co.route, caf::actor{});
    sites.push_back(std::move(co));
  }
  auto root = spawn_runtime(sys, rt, supervision_sink(*monitor));
  std::vector<caf::actor> session_actors;
  if (relays) {
    GatewayOptions g;
    g.log = [](const std::string& s) { spdlog::info("{}", s); };
    auto gateway = spawn_gateway(sys, rt, g);
    session_actors.push_back(gateway);
    for (auto& co : sites) {
      co.gateway = gateway;
      session_actors.push_back(spawn_connector(sys, rt, std::move(co)));
    }
  }
  auto end_sessions = [&session_actors] {
    for (const auto& a : session_actors) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  };
  // A resumed run's seconds go on from where it stopped (tok/s, the ETA and the summary are of
  // the whole run); a simulated run's are virtual.
  auto seconds = [&, before = state.progress.elapsed_s] {
    return before + (simulate ? actor_now() - virtual_start : std::chrono::duration<double>(Clock::now() - start).count());
  };
  WatchClock clock;
  if (sched) {
    clock.now = actor_now;
    // Messages that keep making messages without the clock ever moving would spin for ever:
    // a run stuck that way stops, saying so (in wall time such a loop spins until a timer fires).
    clock.advance = [sched, &actor_now, still = std::uint64_t{0}, at = -1.0]() mutable {
      constexpr std::size_t batch = 100000;
      if (const auto ran = sched->run(batch); ran > 0) {
        const double t = actor_now();
        still = t == at ? still + ran : 0;
        at = t;
        if (still >= 100 * batch)
          throw std::runtime_error("--simulate: the run is stuck: " + std::to_string(still) +
                                   " messages at virtual time " + std::to_string(t) + " s without the clock moving");
        return true;
      }
      return sched->has_pending_timeout() && sched->trigger_timeout();
    };
  }
  // If the tree gives up (restart intensity exceeded at the root), stop waiting for islands.
  auto tree_failed = std::make_shared<std::atomic<bool>>(false);
  auto tree_reason = std::make_shared<std::string>();
  root->attach_functor([tree_failed, tree_reason, &sys](const caf::error& reason) {
    if (reason) *tree_reason = sys.render(reason);
    tree_failed->store(true);
  });

  // The main thread only watches: it evaluates the global parameters when a global round lands.
  RoundTable table(*rt, jsonl);
  table.header();
  std::uint64_t printed = resumed_round;  // the last global round reported
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
    for (const auto& [round, global] : rt->syncer.take_new_rounds()) {
      const double train_loss = timeline->take_train_loss(), eval_loss = evaluate(*model, global, round_eval);
      table.row(round, train_loss, eval_loss, actor_now(), seconds());
      if (*monitor) (*monitor)->on_round(round, train_loss, eval_loss);
      printed = round;
    }
    if (*monitor) (*monitor)->sample();
  }, clock);
  switch (end.how) {
    case WatchEnd::How::tree_failed:
      spdlog::error("the supervision tree stopped: {}", tree_reason->empty() ? "normal" : *tree_reason);
      end_sessions();
      return 1;
    case WatchEnd::How::stopped:
      // A diverged island or syncer, or an unusable syncer state file: nothing to wait for.
      caf::anon_send_exit(root, caf::exit_reason::user_shutdown);
      end_sessions();
      timeline->print();
      spdlog::error("run stopped: {}", end.why);
      return 1;
    case WatchEnd::How::final_sync_expired:
      spdlog::warn("final sync: the last contributions of {} island(s) not merged after {} s (train.final_sync_s); "
                   "ending without them",
                   cfg.train.islands - rt->tally().islands_done, cfg.train.final_sync_s);
      break;
    case WatchEnd::How::done: break;
  }
  RunEnd summary;
  summary.seconds = seconds();
  // Provisioned until the last island finished; merges of the last contributions (the moments
  // waited above) still count as useful.
  summary.goodput = rt->goodput_report(finished_at);
  caf::anon_send_exit(root, caf::exit_reason::user_shutdown);
  end_sessions();
  // Every run is checked (diloco/invariants.hpp): a broken invariant is logged and fails the run.
  summary.violations = check_invariants(*rt, finished_at, RunPart::whole_run);
  const auto final_params = rt->syncer.global().first;
  summary.eval = evaluate_with_error(*model, final_params, eval);
  summary.rounds = printed;
  if (!save.empty()) save_params(cfg, save, final_params);
  print_summary(*rt, summary, *timeline, jsonl);
  if (relays) {
    const auto t = rt->tally();
    std::printf("relays: %llu sessions for %d sites, %llu frames relayed to the syncer, %llu refused by relays, %llu "
                "sessions refused\n",
                static_cast<unsigned long long>(rt->gateway.sessions.load()), site_count(cfg),
                static_cast<unsigned long long>(t.relayed), static_cast<unsigned long long>(t.relay_refused),
                static_cast<unsigned long long>(rt->gateway.refused.load()));
    std::fflush(stdout);
  }
  if (simulate) {
    std::printf("simulated: %.1f s of virtual time in %.1f s; final parameters hash %016llx (the same seed, config and "
                "binary give the same on any machine)\n",
                summary.seconds, std::chrono::duration<double>(Clock::now() - start).count(),
                static_cast<unsigned long long>(params_hash(final_params)));
    std::fflush(stdout);
  }
  return summary.violations == 0 ? 0 : 1;
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
  return run_decoupled(cfg, "built-in demo topology");
}
