// runtime_overhead: wall time per inner step of the actor runtime against the reference loop
// doing the same math (same config, mode diloco, one chip per island) in the same run, on the
// same number of threads; plus the runtime on every core to show what the actors buy.
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/atom.hpp>
#include <caf/exit_reason.hpp>
#include <caf/send.hpp>

#include "diloco/memory.hpp"
#include "diloco/actors/protocol.hpp"
#include "diloco/actors/runtime.hpp"
#include "diloco/loops.hpp"

namespace {

using Clock = std::chrono::steady_clock;

// Runs the actor runtime to completion on `threads` scheduler threads; returns wall seconds.
double run_actors(const diloco::RunConfig& cfg, std::size_t threads) {
  auto rt = std::make_shared<diloco::actors::Runtime>(cfg);
  caf::actor_system_config sc;
  diloco::actors::configure_runtime_system(sc, threads);
  caf::actor_system sys(sc);
  const auto start = Clock::now();
  auto root = diloco::actors::spawn_runtime(sys, rt);
  while (rt->tally().islands_done < cfg.train.islands)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const double secs = std::chrono::duration<double>(Clock::now() - start).count();
  caf::anon_send_exit(root, caf::exit_reason::user_shutdown);
  return secs;
}

}  // namespace

int main(int argc, char** argv) {
  diloco::keep_large_buffers_in_heap();
  long steps = argc > 1 ? std::stol(argv[1]) : 200;
  const int islands = 2;
  const auto cores = std::max(1u, std::thread::hardware_concurrency());
  auto cfg = diloco::parse_config("", {"train.mode=\"diloco\"", "train.islands=" + std::to_string(islands),
                                       "train.steps=" + std::to_string(steps), "train.H=50", "train.eval_windows=8",
                                       "islands.chips=1"},
                                  "runtime_overhead");
  // Warm-up (page faults, allocator), not timed.
  {
    auto w = cfg;
    w.train.steps = 10;
    w.train.H = 10;
    diloco::run_reference(w);
  }
  const double ref = diloco::run_reference(cfg).seconds;
  const double act1 = run_actors(cfg, 1);
  const double actn = run_actors(cfg, cores);
  const double per_step_ref = ref / (steps * islands), per_step_act = act1 / (steps * islands);
  const double overhead = act1 / ref - 1.0;
  std::printf("runtime_overhead: default model, mode diloco, %d islands x 1 chip, %ld inner steps each, H=50\n",
              islands, steps);
  std::printf("%-34s %10s %14s\n", "", "wall s", "ms/inner step");
  std::printf("%-34s %10.2f %14.2f\n", "reference loop (1 thread)", ref, 1e3 * per_step_ref);
  std::printf("%-34s %10.2f %14.2f\n", "actor runtime (1 scheduler thread)", act1, 1e3 * per_step_act);
  std::printf("%-34s %10.2f %14.2f\n", ("actor runtime (" + std::to_string(cores) + " threads)").c_str(), actn,
              1e3 * actn / (steps * islands));
  std::printf("overhead on one thread: %+.2f%% (target <= 5%%): %s; speed-up on %u threads: %.2fx\n", 100.0 * overhead,
              overhead <= 0.05 ? "met" : "NOT met", cores, ref / actn);
  std::printf("{\"benchmark\":\"runtime_overhead\",\"islands\":%d,\"steps\":%ld,\"reference_s\":%.4f,\"actors_1thread_s\":%.4f,"
              "\"actors_%uthreads_s\":%.4f,\"overhead\":%.5f,\"speedup\":%.3f,\"target_met\":%s}\n",
              islands, steps, ref, act1, cores, actn, overhead, ref / actn, overhead <= 0.05 ? "true" : "false");
  return 0;
}
