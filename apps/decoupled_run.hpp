// `diloco run` for train.mode = "decoupled": the actor runtime in one process, with progress
// lines per global round and a fault/recovery timeline.
#pragma once

#include <span>
#include <string>

#include "diloco/config.hpp"

#include <vector>

/// What `diloco run`'s flags add to a configuration.
struct RunFlags {
  std::string metrics;    // --metrics: one JSON object per round and event to this file
  std::string init;       // --init: start from the parameters of this checkpoint
  std::string save;       // --save: the final global parameters to this checkpoint
  std::string http;       // --http: serve metrics and the status page there (metrics.hpp)
  std::string state;      // --state: keep the whole run's state there and resume from it (run_state.hpp)
  bool actors = false;    // --actors: ddp / diloco / streaming on the actor runtime too
  bool simulate = false;  // --simulate: CAF's deterministic test coordinator, in virtual time
  bool relays = false;    // --relays: each site's islands behind a session with the syncer's gateway,
                          // as the multi-process roles have them, in this process and without sockets
};

/// Runs the actor runtime to completion; returns the process exit code. `config_label` names the
/// configuration in the report; `initial` (optional: the parameters of flags.init, loaded)
/// replaces the seeded initial parameters.
int run_decoupled(const diloco::RunConfig& cfg, const std::string& config_label, const RunFlags& flags = {},
                  const std::vector<float>& initial = {});
/// `--save` / `--init`: parameters as a checkpoint of one whole-model fragment, so any mode can
/// start from any other's result (e.g. a shared pretrained model).
void save_params(const diloco::RunConfig& cfg, const std::string& path, std::span<const float> params);
std::vector<float> load_params(const diloco::RunConfig& cfg, const std::string& path);

/// `diloco demo supervision`: a built-in topology that loses a chip, an island and the syncer.
int run_demo_supervision();
