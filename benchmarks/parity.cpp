// parity: synchronous data parallel vs DiLoCo (H = 10, 50, 100) vs Streaming DiLoCo at equal
// tokens, M = 4 islands: eval loss of the global parameters and bytes that would cross the network.
#include <algorithm>
#include <cmath>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "diloco/loops.hpp"

namespace {

struct Variant {
  std::string name;
  std::vector<std::string> overrides;
  diloco::RunSummary result;
};

void usage() {
  std::puts("usage: parity [--steps N] [--islands M] [--threads T] [--small]\n"
            "  --steps N    inner steps per island (default 1000)\n"
            "  --islands M  islands (default 4)\n"
            "  --threads T  variants run side by side (default 2; each variant is single-threaded)\n"
            "  --small      C=64, L=2 model instead of the default C=128, L=4");
}

}  // namespace

int main(int argc, char** argv) {
  long steps = 1000;
  int islands = 4, threads = 2;
  bool small = false;
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
    else if (a == "--islands") islands = std::stoi(next());
    else if (a == "--threads") threads = std::max(1, std::stoi(next()));
    else if (a == "--small") small = true;
    else {
      usage();
      return a == "--help" ? 0 : 2;
    }
  }

  // Shared by every variant: same model, data, seeds, inner schedule and token budget.
  std::vector<std::string> base = {
      "train.islands=" + std::to_string(islands), "train.steps=" + std::to_string(steps),
      "inner.warmup_steps=" + std::to_string(steps / 20),
      "inner.decay_steps=" + std::to_string(steps - steps / 20), "train.eval_batches=32"};
  if (small) base.insert(base.end(), {"model.n_embd=64", "model.n_layer=2", "model.n_head=2"});
  std::vector<Variant> variants = {
      {"ddp", {"train.mode=\"ddp\"", "train.H=50"}, {}},
      // DDP steps on an M-times larger batch; users of it scale the lr up (square-root rule).
      {"ddp lr x sqrt(M)", {"train.mode=\"ddp\"", "train.H=50", "inner.lr=" + std::to_string(diloco::AdamWConfig{}.lr * std::sqrt(islands))}, {}},
      {"diloco H=10", {"train.mode=\"diloco\"", "train.H=10"}, {}},
      {"diloco H=50", {"train.mode=\"diloco\"", "train.H=50"}, {}},
      {"diloco H=100", {"train.mode=\"diloco\"", "train.H=100"}, {}},
      {"streaming H=50 P=" + std::string(small ? "3" : "4") + " tau=0",
       {"train.mode=\"streaming\"", "train.H=50", small ? "fragments.count=3" : "fragments.count=4", "fragments.tau=0"}, {}},
      {"streaming H=50 P=" + std::string(small ? "3" : "4") + " tau=2",
       {"train.mode=\"streaming\"", "train.H=50", small ? "fragments.count=3" : "fragments.count=4", "fragments.tau=2"}, {}},
  };

  std::atomic<std::size_t> next{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&] {
      for (std::size_t i; (i = next++) < variants.size();) {
        auto ov = base;
        ov.insert(ov.end(), variants[i].overrides.begin(), variants[i].overrides.end());
        variants[i].result = diloco::run_reference(diloco::parse_config("", ov, "parity"));
        std::fprintf(stderr, "parity: %-24s eval loss %.4f in %.0f s\n", variants[i].name.c_str(),
                     variants[i].result.final_eval_loss, variants[i].result.seconds);
      }
    });
  for (auto& t : pool) t.join();

  // The baseline is the better of the two DDP set-ups.
  const auto& ddp = variants[0].result.final_eval_loss <= variants[1].result.final_eval_loss ? variants[0].result
                                                                                               : variants[1].result;
  std::printf("\nparity: M=%d islands, %ld inner steps each, %llu training tokens per variant, model %s\n", islands,
              steps, static_cast<unsigned long long>(ddp.tokens), small ? "C=64 L=2" : "C=128 L=4");
  if (ddp.entropy_floor)
    std::printf("corpus: entropy floor %.4f nats/token, unigram entropy %.4f\n", *ddp.entropy_floor,
                ddp.unigram_entropy);
  std::printf("%-26s %10s %12s %14s %12s %8s\n", "variant", "eval_loss", "vs_ddp", "bytes", "ddp/bytes", "seconds");
  for (const auto& v : variants) {
    const auto& r = v.result;
    std::printf("%-26s %10.4f %+11.2f%% %14.4g %12.1f %8.1f\n", v.name.c_str(), r.final_eval_loss,
                100.0 * (r.final_eval_loss / ddp.final_eval_loss - 1.0), r.bytes, ddp.bytes / r.bytes, r.seconds);
  }
  const auto& h50 = variants[3].result;
  const double gap = h50.final_eval_loss / ddp.final_eval_loss - 1.0;
  const double fewer = ddp.bytes / h50.bytes;
  const bool met = gap <= 0.03 && fewer >= 50.0;
  std::printf("baseline: the better DDP (%s)\n", &ddp == &variants[0].result ? "same lr" : "lr x sqrt(M)");
  std::printf("target (DiLoCo H=50 within 3%% of DDP eval loss with >= 50x fewer bytes): %s (%+.2f%%, %.1fx)\n",
              met ? "met" : "NOT met", 100.0 * gap, fewer);

  std::printf("{\"benchmark\":\"parity\",\"islands\":%d,\"steps\":%ld,\"tokens\":%llu,\"model\":\"%s\",", islands, steps,
              static_cast<unsigned long long>(ddp.tokens), small ? "C64L2" : "C128L4");
  if (ddp.entropy_floor) std::printf("\"entropy_floor\":%.5f,", *ddp.entropy_floor);
  std::printf("\"variants\":[");
  for (std::size_t i = 0; i < variants.size(); ++i) {
    const auto& r = variants[i].result;
    std::printf("%s{\"name\":\"%s\",\"eval_loss\":%.5f,\"bytes\":%.6g,\"bytes_ratio_vs_ddp\":%.3f,\"seconds\":%.1f}",
                i ? "," : "", variants[i].name.c_str(), r.final_eval_loss, r.bytes, ddp.bytes / r.bytes, r.seconds);
  }
  std::printf("],\"diloco_h50_loss_gap\":%.5f,\"diloco_h50_bytes_ratio\":%.3f,\"target_met\":%s}\n", gap, fewer,
              met ? "true" : "false");
  return 0;
}
