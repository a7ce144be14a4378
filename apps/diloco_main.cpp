// `diloco`: run a training job from a TOML configuration, or print the default configuration.
#include <cstdio>
#include <fstream>
#include <iostream>

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include "diloco/config.hpp"
#include "diloco/loops.hpp"

namespace {

std::string json_number(double x) {
  if (!std::isfinite(x)) return "null";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", x);
  return buf;
}

int run(const std::string& path, std::vector<std::string> overrides, const std::string& metrics,
        std::optional<std::uint64_t> seed) {
  if (seed) {
    overrides.push_back("train.seed=" + std::to_string(*seed));
    overrides.push_back("data.seed=" + std::to_string(*seed));
  }
  diloco::RunConfig cfg = path.empty() ? diloco::parse_config("", overrides, "defaults")
                                       : diloco::load_config(path, overrides);
  std::ofstream jsonl;
  if (!metrics.empty()) {
    jsonl.open(metrics);
    if (!jsonl) throw std::runtime_error("--metrics: cannot open '" + metrics + "' for writing");
  }
  const auto corpus_line = diloco::Corpus::make(cfg.data).describe();
  spdlog::info("config: {}", path.empty() ? "built-in defaults" : path);
  spdlog::info("data: {}", corpus_line);
  spdlog::info("mode {}: {} islands x {} steps, batch {}x{}, H={}, model {} L={} C={}", cfg.train.mode,
               cfg.train.islands, cfg.train.steps, cfg.train.batch, cfg.model.seq_len, cfg.train.H,
               cfg.model.kind, cfg.model.n_layer, cfg.model.n_embd);
  std::printf("%6s %7s %11s %10s %12s %12s %9s\n", "round", "step", "train_loss", "eval_loss", "tokens",
              "MB_on_wire", "tok/s");
  std::fflush(stdout);
  auto summary = diloco::run_reference(cfg, [&](const diloco::RoundReport& r) {
    std::printf("%6ld %7ld %11.4f %10.4f %12llu %12.2f %9.0f\n", r.round, r.step, r.train_loss, r.eval_loss,
                static_cast<unsigned long long>(r.tokens), r.bytes / 1e6, r.tokens / std::max(r.seconds, 1e-9));
    std::fflush(stdout);
    if (jsonl) {
      jsonl << "{\"round\":" << r.round << ",\"step\":" << r.step << ",\"train_loss\":" << json_number(r.train_loss)
            << ",\"eval_loss\":" << json_number(r.eval_loss) << ",\"tokens\":" << r.tokens
            << ",\"bytes\":" << json_number(r.bytes) << ",\"seconds\":" << json_number(r.seconds) << "}\n";
      jsonl.flush();
    }
  });
  std::printf("done: %s, final eval loss %.4f nats/token", cfg.train.mode.c_str(), summary.final_eval_loss);
  if (summary.entropy_floor)
    std::printf(" (entropy floor %.4f, unigram entropy %.4f; %.1f%% of the way from unigram to floor)",
                *summary.entropy_floor, summary.unigram_entropy,
                100.0 * (summary.unigram_entropy - summary.final_eval_loss) /
                    (summary.unigram_entropy - *summary.entropy_floor));
  std::printf(", %.1f s, %.2f MB would cross the network\n", summary.seconds, summary.bytes / 1e6);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"diloco: fault-tolerant, low-communication distributed training"};
  app.require_subcommand(1);

  auto* run_cmd = app.add_subcommand("run", "train with the configuration's mode and report every round");
  std::string path, metrics;
  std::vector<std::string> overrides;
  std::optional<std::uint64_t> seed;
  run_cmd->add_option("config", path, "TOML configuration (built-in defaults when omitted)")->check(CLI::ExistingFile);
  run_cmd->add_option("--set", overrides, "override a key, e.g. --set train.H=10 (repeatable)");
  run_cmd->add_option("--metrics", metrics, "write one JSON object per round to this file");
  run_cmd->add_option("--seed", seed, "seed for both the model initialisation and the data");

  app.add_subcommand("config", "print the default configuration with every key documented");

  auto* check_cmd = app.add_subcommand("check", "validate configuration files and report every problem");
  std::vector<std::string> check_paths;
  check_cmd->add_option("configs", check_paths, "TOML configurations")->required()->check(CLI::ExistingFile);

  CLI11_PARSE(app, argc, argv);
  try {
    if (app.got_subcommand("config")) {
      std::cout << diloco::default_config_toml();
      return 0;
    }
    if (app.got_subcommand("check")) {
      int bad = 0;
      for (const auto& p : check_paths) {
        try {
          const auto cfg = diloco::load_config(p);
          std::printf("%s: ok (mode %s, %d islands, model %s)\n", p.c_str(), cfg.train.mode.c_str(),
                      cfg.train.islands, cfg.model.kind.c_str());
        } catch (const diloco::ConfigError& e) {
          std::printf("%s: %s\n", p.c_str(), e.what());
          ++bad;
        }
      }
      return bad ? 2 : 0;
    }
    return run(path, overrides, metrics, seed);
  } catch (const diloco::ConfigError& e) {
    spdlog::error("{}", e.what());
    return 2;
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    return 1;
  }
}
