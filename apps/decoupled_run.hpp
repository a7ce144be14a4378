// `diloco run` for train.mode = "decoupled": the actor runtime in one process, with progress
// lines per global round and a fault/recovery timeline.
#pragma once

#include <span>
#include <string>

#include "diloco/config.hpp"

#include <vector>

/// Runs the actor runtime to completion; returns the process exit code. `initial` (optional)
/// replaces the seeded initial parameters; `save` (optional) receives the final ones; `http`
/// (optional, --http) serves metrics and the status page there (metrics.hpp); `state_dir`
/// (optional, --state) keeps the whole run's state there and resumes from it (run_state.hpp);
/// `simulate` (--simulate) runs it on CAF's deterministic test coordinator in virtual time;
/// `relays` (--relays) puts each site's islands behind a session with the syncer's gateway, as
/// the multi-process roles do, in this process and without sockets.
int run_decoupled(const diloco::RunConfig& cfg, const std::string& metrics, const std::string& config_label,
                  const std::vector<float>& initial = {}, const std::string& save = {},
                  const std::string& http = {}, const std::string& state_dir = {}, bool simulate = false,
                  bool relays = false);
/// `--save` / `--init`: parameters as a checkpoint of one whole-model fragment, so any mode can
/// start from any other's result (e.g. a shared pretrained model).
void save_params(const diloco::RunConfig& cfg, const std::string& path, std::span<const float> params);
std::vector<float> load_params(const diloco::RunConfig& cfg, const std::string& path);

/// `diloco demo supervision`: a built-in topology that loses a chip, an island and the syncer.
int run_demo_supervision();
