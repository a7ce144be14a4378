// parity: synchronous data parallel vs DiLoCo (H = 10, 50, 100) vs Streaming DiLoCo at equal
// tokens, M = 4 islands: eval loss of the global parameters and bytes that would cross the network.
// Every method gets the same learning-rate grid and is reported at its best, so no baseline is
// handicapped by a setting tuned for another; all start from the same (optionally pretrained) model.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "diloco/loops.hpp"

namespace {

struct Method {
  std::string name;
  std::vector<std::string> overrides;
};

struct Run {
  std::size_t method;
  double lr;
  diloco::RunSummary result;
};

void usage() {
  std::puts(
      "usage: parity [--steps N] [--pretrain N] [--islands M] [--lrs a,b,..] [--threads T] [--model small|default]\n"
      "  --steps N      inner steps per island (default 3000)\n"
      "  --pretrain N   steps of single-island training every method starts from (default 1000; DiLoCo\n"
      "                 is evaluated from a pretrained model, arXiv 2311.08105 §3)\n"
      "  --islands M    islands (default 4)\n"
      "  --lrs list     inner learning rates tried for every method (default 4e-3,8e-3,1.6e-2)\n"
      "  --threads T    runs side by side (default 2; each run is single-threaded)\n"
      "  --model small  C=64, L=2 (default); `default` is the built-in C=128, L=4");
}

std::vector<double> parse_list(const std::string& s) {
  std::vector<double> out;
  std::stringstream ss(s);
  for (std::string x; std::getline(ss, x, ',');) out.push_back(std::stod(x));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  long steps = 3000, pretrain = 1000;
  int islands = 4, threads = 2;
  std::string model = "small";
  std::vector<double> lrs{4e-3, 8e-3, 1.6e-2};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        usage();
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--steps") steps = std::stol(next());
    else if (a == "--pretrain") pretrain = std::stol(next());
    else if (a == "--islands") islands = std::stoi(next());
    else if (a == "--threads") threads = std::max(1, std::stoi(next()));
    else if (a == "--lrs") lrs = parse_list(next());
    else if (a == "--model") model = next();
    else {
      usage();
      return a == "--help" ? 0 : 2;
    }
  }
  if (model != "small" && model != "default") {
    usage();
    return 2;
  }

  std::vector<std::string> shape;
  if (model == "small") shape = {"model.n_embd=64", "model.n_layer=2", "model.n_head=2"};

  // The shared starting point: one island trained for `pretrain` steps.
  std::vector<float> start;
  if (pretrain > 0) {
    auto ov = shape;
    ov.insert(ov.end(), {"train.mode=\"ddp\"", "train.islands=1", "train.steps=" + std::to_string(pretrain),
                         "train.H=" + std::to_string(pretrain), "inner.lr=2e-3"});
    auto pre = diloco::run_reference(diloco::parse_config("", ov, "parity-pretrain"));
    std::fprintf(stderr, "parity: pretrained %ld steps, eval loss %.4f\n", pretrain, pre.final_eval_loss);
    start = std::move(pre.params);
  }

  // Shared by every method: same model, data, seeds, inner schedule and token budget.
  std::vector<std::string> base = shape;
  base.insert(base.end(), {"train.islands=" + std::to_string(islands), "train.steps=" + std::to_string(steps),
                           "inner.warmup_steps=" + std::to_string(steps / 20),
                           "inner.decay_steps=" + std::to_string(steps - steps / 20), "train.eval_windows=256"});
  const std::string P = model == "small" ? "3" : "4";  // one fragment per layer group
  const std::vector<Method> methods = {
      {"ddp", {"train.mode=\"ddp\"", "train.H=50"}},
      {"diloco H=10", {"train.mode=\"diloco\"", "train.H=10"}},
      {"diloco H=50", {"train.mode=\"diloco\"", "train.H=50"}},
      {"diloco H=100", {"train.mode=\"diloco\"", "train.H=100"}},
      {"streaming H=50 P=" + P + " tau=0", {"train.mode=\"streaming\"", "train.H=50", "fragments.count=" + P, "fragments.tau=0"}},
      {"streaming H=50 P=" + P + " tau=2", {"train.mode=\"streaming\"", "train.H=50", "fragments.count=" + P, "fragments.tau=2"}},
  };
  std::vector<Run> runs;
  for (std::size_t m = 0; m < methods.size(); ++m)
    for (double lr : lrs) runs.push_back({m, lr, {}});

  std::atomic<std::size_t> next{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&] {
      for (std::size_t i; (i = next++) < runs.size();) {
        auto ov = base;
        const auto& m = methods[runs[i].method];
        ov.insert(ov.end(), m.overrides.begin(), m.overrides.end());
        char lr[32];
        std::snprintf(lr, sizeof lr, "inner.lr=%g", runs[i].lr);
        ov.push_back(lr);
        runs[i].result = diloco::run_reference(diloco::parse_config("", ov, "parity"), {}, start);
        std::fprintf(stderr, "parity: %-26s lr %-7g eval loss %.4f in %.0f s\n", m.name.c_str(), runs[i].lr,
                     runs[i].result.final_eval_loss, runs[i].result.seconds);
      }
    });
  for (auto& t : pool) t.join();

  // Best learning rate per method.
  std::vector<const Run*> best(methods.size(), nullptr);
  for (const auto& r : runs)
    if (!best[r.method] || r.result.final_eval_loss < best[r.method]->result.final_eval_loss) best[r.method] = &r;
  const auto& ddp = best[0]->result;

  std::printf("\nparity: M=%d islands, %ld inner steps each from a model pretrained %ld steps, %llu training tokens "
              "per run, model %s, inner lr grid",
              islands, steps, pretrain, static_cast<unsigned long long>(ddp.tokens),
              model == "small" ? "C=64 L=2" : "C=128 L=4");
  for (double lr : lrs) std::printf(" %g", lr);
  std::printf("\n");
  if (ddp.entropy_floor)
    std::printf("corpus: entropy floor %.4f nats/token, unigram entropy %.4f\n", *ddp.entropy_floor, ddp.unigram_entropy);
  std::printf("%-28s %8s %10s %10s %13s %10s\n", "method (best lr)", "lr", "eval_loss", "vs_ddp", "bytes", "ddp/bytes");
  for (std::size_t m = 0; m < methods.size(); ++m) {
    const auto& r = best[m]->result;
    std::printf("%-28s %8g %10.4f %+9.2f%% %13.4g %10.1f\n", methods[m].name.c_str(), best[m]->lr, r.final_eval_loss,
                100.0 * (r.final_eval_loss / ddp.final_eval_loss - 1.0), r.bytes, ddp.bytes / r.bytes);
  }
  std::printf("\nall runs (eval loss):\n%-28s", "method \\ lr");
  for (double lr : lrs) std::printf(" %9g", lr);
  std::printf("\n");
  for (std::size_t m = 0; m < methods.size(); ++m) {
    std::printf("%-28s", methods[m].name.c_str());
    for (const auto& r : runs)
      if (r.method == m) std::printf(" %9.4f", r.result.final_eval_loss);
    std::printf("\n");
  }
  const auto& h50 = best[2]->result;
  const double gap = h50.final_eval_loss / ddp.final_eval_loss - 1.0;
  const double fewer = ddp.bytes / h50.bytes;
  const bool met = gap <= 0.03 && fewer >= 50.0;
  std::printf("target (DiLoCo H=50 within 3%% of DDP eval loss with >= 50x fewer bytes): %s (%+.2f%%, %.1fx)\n",
              met ? "met" : "NOT met", 100.0 * gap, fewer);

  std::printf("{\"benchmark\":\"parity\",\"islands\":%d,\"steps\":%ld,\"pretrain\":%ld,\"tokens\":%llu,\"model\":\"%s\",",
              islands, steps, pretrain, static_cast<unsigned long long>(ddp.tokens), model.c_str());
  if (ddp.entropy_floor) std::printf("\"entropy_floor\":%.5f,", *ddp.entropy_floor);
  std::printf("\"best\":[");
  for (std::size_t m = 0; m < methods.size(); ++m) {
    const auto& r = best[m]->result;
    std::printf("%s{\"method\":\"%s\",\"lr\":%g,\"eval_loss\":%.5f,\"bytes\":%.6g,\"bytes_ratio_vs_ddp\":%.3f}",
                m ? "," : "", methods[m].name.c_str(), best[m]->lr, r.final_eval_loss, r.bytes, ddp.bytes / r.bytes);
  }
  std::printf("],\"runs\":[");
  for (std::size_t i = 0; i < runs.size(); ++i)
    std::printf("%s{\"method\":\"%s\",\"lr\":%g,\"eval_loss\":%.5f,\"seconds\":%.1f}", i ? "," : "",
                methods[runs[i].method].name.c_str(), runs[i].lr, runs[i].result.final_eval_loss,
                runs[i].result.seconds);
  std::printf("],\"diloco_h50_loss_gap\":%.5f,\"diloco_h50_bytes_ratio\":%.3f,\"target_met\":%s}\n", gap, fewer,
              met ? "true" : "false");
  return 0;
}
