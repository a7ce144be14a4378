// `diloco`: run a training job from a TOML configuration, or print the default configuration.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>

#include <CLI/CLI.hpp>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include "diloco/config.hpp"
#include "diloco/checkpoint.hpp"
#include "diloco/inspect.hpp"
#include "diloco/loops.hpp"
#include "diloco/memory.hpp"
#include "diloco/replay.hpp"

#include "decoupled_run.hpp"
#include "flagship_toml.hpp"
#include "report.hpp"
#include "plot_cmd.hpp"
#include "simulate_cmd.hpp"
#include "site_run.hpp"
#ifdef DILOCO_TORCH_MODULE_DIR
#include "torch_backend.hpp"
#endif

namespace {

/// --simulate: glibc's libm and OpenBLAS choose their code by CPU while the process loads, so the
/// process starts itself again once with diloco::replay_environment() set (replay.hpp); then the
/// models' products are pinned in this process. Returns an error message, or "" when pinned.
std::string pin_math_for_replay(char** argv) {
  if (!diloco::replay_environment_pinned()) {
    for (const auto& [key, value] : diloco::replay_environment(std::getenv("GLIBC_TUNABLES")))
      ::setenv(key.c_str(), value.c_str(), 1);
    std::fflush(nullptr);
    ::execv("/proc/self/exe", argv);
    return std::string("--simulate: cannot start again with the replay environment (/proc/self/exe): ") +
           std::strerror(errno);
  }
  diloco::pin_products_for_replay();
  return {};
}

/// Where logs go and how much of them: stderr by default (stdout holds only the reports).
struct LogFlags {
  std::string file;
  std::string level = "info";
  bool quiet = false;

  void add_to(CLI::App* cmd) {
    cmd->add_option("--log", file, "write the log to this file instead of stderr");
    cmd->add_option("--log-level", level, "trace, debug, info, warn, error or off")
        ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}))
        ->capture_default_str();
    cmd->add_flag("--quiet", quiet, "log only warnings and errors, and leave the per-round rows out of stdout");
  }
  /// Applies the flags; throws std::runtime_error naming --log when the file cannot be opened.
  void apply() const {
    if (!file.empty()) {
      std::shared_ptr<spdlog::logger> logger;
      try {
        logger = std::make_shared<spdlog::logger>("diloco", std::make_shared<spdlog::sinks::basic_file_sink_mt>(file));
      } catch (const spdlog::spdlog_ex& e) {
        throw std::runtime_error("--log " + file + ": " + e.what());
      }
      logger->flush_on(spdlog::level::info);
      spdlog::set_default_logger(logger);
    }
    auto lvl = spdlog::level::from_str(level);
    if (quiet && lvl < spdlog::level::warn) lvl = spdlog::level::warn;
    spdlog::set_level(lvl);
    set_quiet_rows(quiet);
  }
};


/// The machine's physical memory: what `run` and `check` let a configuration plan for.
std::uint64_t physical_memory() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return diloco::kDefaultMemoryLimit;
  return static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page);
}

int run(const std::string& path, std::vector<std::string> overrides, std::optional<std::uint64_t> seed,
        std::uint64_t memory_limit, const RunFlags& flags) {
  const std::string &metrics = flags.metrics, &http = flags.http, &state = flags.state;
  if (seed) {
    overrides.push_back("train.seed=" + std::to_string(*seed));
    overrides.push_back("data.seed=" + std::to_string(*seed));
  }
  // Without a CONFIG: the flagship job (configs/flagship.toml, compiled in).
  diloco::RunConfig cfg = path.empty() ? diloco::parse_config(kFlagshipToml, overrides, "flagship", memory_limit)
                                       : diloco::load_config(path, overrides, memory_limit);
  const std::string label = path.empty() ? "the built-in flagship job (configs/flagship.toml)" : path;
  const auto initial = flags.init.empty() ? std::vector<float>{} : load_params(cfg, flags.init);
  if (cfg.train.mode == diloco::TrainMode::decoupled || flags.actors || flags.simulate || flags.relays)
    return run_decoupled(cfg, label, flags, initial);
  if (!state.empty())
    throw std::invalid_argument("--state: the reference loop of mode " + std::string(diloco::name_of(cfg.train.mode)) +
                                " does not resume; add --actors to run it on the actor runtime");
  if (!http.empty())
    throw std::invalid_argument("--http: the reference loop of mode " + std::string(diloco::name_of(cfg.train.mode)) +
                                " has no actors to watch; add --actors to run it on the actor runtime");
  if (cfg.chaos.enabled || !cfg.faults.empty() || cfg.wan.enabled || !cfg.sites.empty())
    spdlog::warn("the reference loop ignores [chaos], [[faults]], [wan] and [[sites]]: add --actors to run {} on the "
                 "actor runtime with them", diloco::name_of(cfg.train.mode));
  JsonLines jsonl;
  if (!metrics.empty()) jsonl.open(metrics);
  const auto corpus_line = diloco::Corpus::make(cfg.data, cfg.model.vocab).describe();
  spdlog::info("config: {}", label);
  spdlog::info("data: {}", corpus_line);
  spdlog::info("mode {}: {} islands x {} steps, batch {}x{}, H={}, model {} L={} C={}", diloco::name_of(cfg.train.mode),
               cfg.train.islands, cfg.train.steps, cfg.train.batch, cfg.model.seq_len, cfg.train.H,
               cfg.model.kind, cfg.model.n_layer, cfg.model.n_embd);
  if (!quiet_rows())
    std::printf("%6s %7s %11s %10s %12s %12s %9s\n", "round", "step", "train_loss", "eval_loss", "tokens", "MB_on_wire",
                "tok/s");
  std::fflush(stdout);
  auto summary = diloco::run_reference(cfg, [&](const diloco::RoundReport& r) {
    if (!quiet_rows())
      std::printf("%6ld %7ld %11.4f %10.4f %12llu %12.2f %9.0f\n", r.round, r.step, r.train_loss, r.eval_loss,
                static_cast<unsigned long long>(r.tokens), r.bytes / 1e6, r.tokens / std::max(r.seconds, 1e-9));
    std::fflush(stdout);
    jsonl.write(Json{{"round", r.round},
                     {"step", r.step},
                     {"train_loss", r.train_loss},
                     {"eval_loss", r.eval_loss},
                     {"tokens", r.tokens},
                     {"bytes", r.bytes},
                     {"seconds", r.seconds}});
  }, initial);
  if (summary.diverged) {
    // NaN parameters are no result: nothing is saved and the run fails, naming where it diverged.
    spdlog::error("run stopped: {} (eval loss {:.4f} at that point)", summary.diverged->reason, summary.final_eval_loss);
    return 1;
  }
  if (!flags.save.empty()) save_params(cfg, flags.save, summary.params);
  jsonl.write(Json{{"summary", true},
                   {"mode", diloco::name_of(cfg.train.mode)},
                   {"final_eval_loss", summary.final_eval_loss},
                   {"final_eval_std_error", summary.final_eval_std_error},
                   {"seconds", summary.seconds},
                   {"tokens", summary.tokens},
                   {"bytes", summary.bytes}});
  std::printf("done: %s, final eval loss %.4f ± %.4f nats/token", std::string(diloco::name_of(cfg.train.mode)).c_str(),
              summary.final_eval_loss, summary.final_eval_std_error);
  if (summary.entropy_floor)
    std::printf(" (entropy floor %.4f, unigram entropy %.4f; %.1f%% of the way from unigram to floor)",
                *summary.entropy_floor, summary.unigram_entropy,
                100.0 * (summary.unigram_entropy - summary.final_eval_loss) /
                    (summary.unigram_entropy - *summary.entropy_floor));
  std::printf(", %.1f s, %.2f MB would cross the network\n", summary.seconds, summary.bytes / 1e6);
  return 0;
}

}  // namespace


namespace {

/// `diloco tokenize ...` is `diloco-tokenize tokenize ...`, the program installed beside this one
/// (apps/tokenize_main.cpp says why it is apart). Returns only if it cannot be started.
int run_tokenizer(char** argv) {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  const auto beside = self.parent_path() / "diloco-tokenize";
  execv(beside.c_str(), argv);
  execvp("diloco-tokenize", argv);
  std::fprintf(stderr, "diloco tokenize: cannot start diloco-tokenize (looked beside %s and on PATH): %s\n",
               self.c_str(), std::strerror(errno));
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::string(argv[1]) == "tokenize") return run_tokenizer(argv);
#ifdef DILOCO_TORCH_MODULE_DIR
  diloco::app::register_torchscript_on_demand();  // model.kind = "torchscript", libtorch loaded on first use
#endif
  diloco::keep_large_buffers_in_heap();
  // One line at a time, also into a pipe or a file: a log followed live (tail -f, a supervisor)
  // shows each event when it happens, not when a buffer fills.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  // Logs go to stderr, so that stdout holds only what a command reports (the round table).
  spdlog::set_default_logger(spdlog::stderr_color_mt("diloco"));
  CLI::App app{"diloco: fault-tolerant, low-communication distributed training"};
  app.require_subcommand(1);

  auto* run_cmd = app.add_subcommand("run", "train with the configuration's mode and report every round");
  LogFlags log;
  std::string path;
  std::vector<std::string> overrides;
  std::optional<std::uint64_t> seed;
  run_cmd->add_option("config", path, "TOML configuration (the built-in flagship job, configs/flagship.toml, when omitted)")->check(CLI::ExistingFile);
  run_cmd->add_option("--set", overrides, "override a key, e.g. --set train.H=10 (repeatable)");
  RunFlags flags;
  run_cmd->add_option("--metrics", flags.metrics, "write one JSON object per round to this file");
  run_cmd->add_option("--seed", seed, "seed for both the model initialisation and the data");
  run_cmd->add_option("--init", flags.init, "start from the parameters in this checkpoint (one written by --save)")
      ->check(CLI::ExistingFile);
  run_cmd->add_option("--save", flags.save, "write the final global parameters to this checkpoint (safetensors)");
  run_cmd->add_option("--state", flags.state,
                      "keep the whole run's state in this directory and resume from it when it holds one (the same "
                      "config only; decoupled, or --actors)");
  run_cmd->add_flag("--simulate", flags.simulate,
                    "run the actor runtime on CAF's deterministic test coordinator in virtual time: a step takes the "
                    "model's FLOPs over islands.chip_flops; the same seed and config give the same run, bit for bit");
  run_cmd->add_flag("--relays", flags.relays,
                    "decoupled: each site's islands ([[sites]]; without them, each island) reach the syncer through "
                    "a session as across processes (hello, gateway, a relay checking every frame, heartbeats, "
                    "reconnects), in this process without sockets; with --simulate, in virtual time");
  run_cmd->add_option("--http", flags.http,
                      "serve Prometheus metrics (/metrics) and a live status page (/) on [HOST:]PORT (a bare port: "
                      "loopback; actor modes)");
  run_cmd->add_flag("--actors", flags.actors,
                    "run ddp / diloco / streaming on the actor runtime (synchronous, with faults, chaos and WAN links) "
                    "instead of the reference loop");

  app.add_subcommand("config", "print the default configuration with every key documented");

  auto* check_cmd = app.add_subcommand("check", "validate configuration files and report every problem");
  std::vector<std::string> check_paths;
  check_cmd->add_option("configs", check_paths, "TOML configurations")->required()->check(CLI::ExistingFile);

  auto sim_flags = simcmd::add_command(app);
  app.add_subcommand("tokenize", "encode text files with a SentencePiece model into llm.c token shards "
                                 "(data.corpus = \"tokens\"); see diloco tokenize --help")
      ->allow_extras();
  auto plot_flags = plotcmd::add_command(app);

  auto* inspect_cmd = app.add_subcommand("inspect", "print what a wire frame (fragment, progress, join, heartbeat) or a checkpoint holds");
  std::vector<std::string> inspect_paths;
  inspect_cmd->add_option("files", inspect_paths, "frame or .safetensors checkpoint files")->required()->check(CLI::ExistingFile);

  auto* demo_cmd = app.add_subcommand("demo", "built-in demonstrations of the actor runtime");
  std::string demo_name = "supervision";
  demo_cmd->add_option("name", demo_name, "which demo: supervision (kill a chip, an island, the syncer)")
      ->check(CLI::IsMember({"supervision"}));

  // Across processes (README "Across sites"): the syncer alone, or one site's islands.
  NetFlags net;
  std::vector<std::string> net_overrides;
  auto* syncer_cmd = app.add_subcommand("syncer", "run only the syncer and publish it for the sites (mutual TLS)");
  auto* site_cmd = app.add_subcommand("site", "run one site's islands and chips, connected to the syncer");
  for (auto* c : {syncer_cmd, site_cmd}) {
    c->add_option("config", net.config, "TOML topology ([[sites]], [net]); the same file at every process")
        ->required()->check(CLI::ExistingFile);
    c->add_option("--certs", net.certs, "directory from scripts/make-certs.sh (default: net.certs)");
    c->add_flag("--insecure", net.insecure, "no TLS and no identity check (prints a warning; trusted networks only)");
    c->add_option("--set", net_overrides, "override a key, e.g. --set train.steps=100 (repeatable)");
    c->add_option("--http", net.http,
                  "serve Prometheus metrics (/metrics) and a live status page (/) on [HOST:]PORT (a bare port: loopback)");
  }
  syncer_cmd->add_option("--listen", net.endpoint, "HOST:PORT to listen on (default: net.listen, loopback; port 0: any)");
  syncer_cmd->add_option("--state", net.state,
                         "state directory (default diloco-state): the run's manifest and the syncer's state file "
                         "(syncer.safetensors) when syncer.checkpoint is \"\"; one of another configuration is refused");
  syncer_cmd->add_option("--replica", net.replica,
                         "run as this replica of a replicated syncer ([[syncers]]): follow the leader elected "
                         "through etcd (net.etcd), lead when elected; state directory default diloco-state/NAME");
  syncer_cmd->add_option("--metrics", net.metrics, "append one JSON object per commit and round to this file");
  syncer_cmd->add_flag("--fresh", net.fresh,
                       "start from round 0 when the state file is unusable, moving it aside to FILE.corrupt-N "
                       "(without it such a file is refused)");
  site_cmd->add_option("--site", net.site, "this process's site name (a [[sites]] name; with --join, its certificate's CN)")->required();
  auto* join_flag = site_cmd->add_flag(
      "--join", net.join, "a site that is not in the configuration joins the running run, taking open islands (net.allow_join)");
  site_cmd->add_option("--islands", net.join_islands, "with --join: how many islands this site brings")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024))
      ->needs(join_flag);
  site_cmd->add_option("--chips", net.chips, "with --join: chips per island of this site (default: the configuration's)")
      ->check(CLI::Range(1, 256))
      ->needs(join_flag);
  site_cmd->add_option("--connect", net.endpoint, "HOST:PORT of the syncer (default: net.listen)");
  site_cmd->add_option("--state", net.state,
                       "keep this site's islands' own states in this directory (sites/NAME.safetensors) and resume "
                       "them from it when started again (the same configuration only)");
  site_cmd->add_option("--max-attempts", net.max_attempts, "give up after this many failed attempts in a row (0: never, while the run may still be going; a site the syncer told that the run is over exits)")
      ->capture_default_str();

  for (auto* c : {run_cmd, syncer_cmd, site_cmd, demo_cmd}) log.add_to(c);

  CLI11_PARSE(app, argc, argv);
  if (flags.simulate && app.got_subcommand("run")) {
    if (const auto error = pin_math_for_replay(argv); !error.empty()) {
      spdlog::error("{}", error);
      return 1;
    }
  }
  const std::uint64_t memory = physical_memory();  // the bound of every size a configuration implies
  try {
    log.apply();
    if (app.got_subcommand("simulate")) return simcmd::run(*sim_flags);
    if (app.got_subcommand("plot")) return plotcmd::run(*plot_flags);
    if (app.got_subcommand("syncer")) {
      auto cfg = diloco::load_config(net.config, net_overrides);
      if (!net.replica.empty()) return run_replica_process(cfg, net);
      if (!cfg.syncers.empty())
        throw diloco::ConfigError({"syncers: this configuration has a replicated syncer ([[syncers]]): start each "
                                   "replica with `diloco syncer CONFIG --replica NAME`"});
      return run_syncer_process(std::move(cfg), net);
    }
    if (app.got_subcommand("site")) return run_site_process(diloco::load_config(net.config, net_overrides), net);
    if (app.got_subcommand("demo")) return run_demo_supervision();
    if (app.got_subcommand("inspect")) {
      int bad = 0;
      for (const auto& p : inspect_paths) {
        auto bytes = diloco::read_file(p);
        auto text = bytes ? diloco::describe_file(*bytes) : diloco::Expected<std::string>(bytes.error());
        if (text) {
          std::printf("%s: %s", p.c_str(), text->c_str());
        } else {
          std::printf("%s: refused: %s\n", p.c_str(), text.error().message().c_str());
          ++bad;
        }
      }
      return bad ? 2 : 0;
    }
    if (app.got_subcommand("config")) {
      std::cout << diloco::default_config_toml();
      return 0;
    }
    if (app.got_subcommand("check")) {
      int bad = 0;
      for (const auto& p : check_paths) {
        try {
          const auto cfg = diloco::load_config(p, {}, memory);
          std::printf("%s: ok (mode %s, %d islands, model %s)\n", p.c_str(), std::string(diloco::name_of(cfg.train.mode)).c_str(),
                      cfg.train.islands, cfg.model.kind.c_str());
        } catch (const diloco::ConfigError& e) {
          std::printf("%s: %s\n", p.c_str(), e.what());
          ++bad;
        }
      }
      return bad ? 2 : 0;
    }
    return run(path, overrides, seed, memory, flags);
  } catch (const diloco::ConfigError& e) {
    spdlog::error("{}", e.what());
    return 2;
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    return 1;
  }
}
