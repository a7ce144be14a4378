// `diloco run` for train.mode = "decoupled": the actor runtime in one process, with progress
// lines per global round and a fault/recovery timeline.
#pragma once

#include <string>

#include "diloco/config.hpp"

/// Runs the actor runtime to completion; returns the process exit code.
int run_decoupled(const diloco::RunConfig& cfg, const std::string& metrics, const std::string& config_label);

/// `diloco demo supervision`: a built-in topology that loses a chip, an island and the syncer.
int run_demo_supervision();
