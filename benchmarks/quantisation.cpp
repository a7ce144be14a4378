// quantisation: Decoupled DiLoCo on the actor runtime with outer gradients sent as fp32, bf16,
// int8, int4 and E3M0 (4-bit float, arXiv 2501.18512): eval loss of the global parameters and the
// bytes on the wire, each run with the same model, data, seeds and token budget, one after another.
#include <chrono>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/atom.hpp>
#include <caf/exit_reason.hpp>
#include <caf/send.hpp>

#include "diloco/memory.hpp"
#include "diloco/actors/protocol.hpp"
#include "diloco/actors/runtime.hpp"

namespace {

struct Result {
  std::string encoding;
  double eval_loss = 0.0;
  std::uint64_t bytes = 0;
  std::uint64_t commits = 0;
  double seconds = 0.0;
};

Result run(const diloco::RunConfig& cfg) {
  auto rt = std::make_shared<diloco::actors::Runtime>(cfg);
  caf::actor_system_config sc;
  diloco::actors::configure_runtime_system(sc, std::max(1u, std::thread::hardware_concurrency()));
  caf::actor_system sys(sc);
  const auto start = std::chrono::steady_clock::now();
  auto root = diloco::actors::spawn_runtime(sys, rt);
  while (rt->tally().islands_done < cfg.train.islands)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the last merges in flight
  Result r;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  caf::anon_send_exit(root, caf::exit_reason::user_shutdown);
  const auto global = rt->syncer.global().first;
  auto model = diloco::make_model(cfg.model);
  r.eval_loss = diloco::evaluate(*model, global, rt->corpus.eval_batches(cfg.train.batch, cfg.model.seq_len, 64));
  r.bytes = rt->tally().bytes_sent;
  r.commits = rt->tally().commits;
  r.encoding = cfg.fragments.encoding;
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  diloco::keep_large_buffers_in_heap();
  const long steps = argc > 1 ? std::stol(argv[1]) : 1500;
  std::vector<Result> results;
  for (const char* enc : {"fp32", "bf16", "int8", "int4", "e3m0"}) {
    auto cfg = diloco::parse_config(
        "", {"train.mode=\"decoupled\"", "model.n_embd=64", "model.n_layer=2", "model.n_head=2", "train.islands=3",
             "islands.chips=1", "train.steps=" + std::to_string(steps), "train.H=50", "fragments.count=3",
             "inner.lr=4e-3", "inner.warmup_steps=" + std::to_string(steps / 20),
             "inner.decay_steps=" + std::to_string(steps - steps / 20), "quorum.min_islands=3",
             "syncer.snapshot_every=0", std::string("fragments.encoding=\"") + enc + "\""},
        "quantisation");
    results.push_back(run(cfg));
    std::fprintf(stderr, "quantisation: %-5s eval loss %.4f, %.2f MB, %.0f s\n", enc, results.back().eval_loss,
                 results.back().bytes / 1e6, results.back().seconds);
  }
  const auto& fp32 = results.front();
  std::printf("quantisation: decoupled mode on actors, 3 islands x 1 chip, %ld steps, H=50, P=3, K=3, C=64 L=2, "
              "block 64, error feedback on\n",
              steps);
  std::printf("%-6s %10s %9s %12s %11s %8s\n", "enc", "eval_loss", "vs_fp32", "bytes", "fp32/bytes", "commits");
  for (const auto& r : results)
    std::printf("%-6s %10.4f %+8.2f%% %12llu %11.2f %8llu\n", r.encoding.c_str(), r.eval_loss,
                100.0 * (r.eval_loss / fp32.eval_loss - 1.0), static_cast<unsigned long long>(r.bytes),
                static_cast<double>(fp32.bytes) / static_cast<double>(r.bytes), static_cast<unsigned long long>(r.commits));
  double worst4 = 0.0;
  for (const auto& r : results)
    if (r.encoding == "int4" || r.encoding == "e3m0") worst4 = std::max(worst4, r.eval_loss / fp32.eval_loss - 1.0);
  std::printf("target (4-bit within 1%% of fp32 eval loss): %s (worst 4-bit %+.2f%%)\n", worst4 <= 0.01 ? "met" : "NOT met",
              100.0 * worst4);
  std::printf("{\"benchmark\":\"quantisation\",\"steps\":%ld,\"runs\":[", steps);
  for (std::size_t i = 0; i < results.size(); ++i)
    std::printf("%s{\"encoding\":\"%s\",\"eval_loss\":%.5f,\"bytes\":%llu,\"commits\":%llu,\"seconds\":%.1f}", i ? "," : "",
                results[i].encoding.c_str(), results[i].eval_loss, static_cast<unsigned long long>(results[i].bytes),
                static_cast<unsigned long long>(results[i].commits), results[i].seconds);
  std::printf("],\"worst_4bit_gap\":%.5f,\"target_met\":%s}\n", worst4, worst4 <= 0.01 ? "true" : "false");
  return 0;
}
