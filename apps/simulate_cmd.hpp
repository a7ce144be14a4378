// `diloco simulate`: goodput of data parallel, elastic data parallel and decoupled learners under
// chip interruptions (the model is libdiloco/include/diloco/sim/simulate.hpp, its parameters
// docs/simulator.md): flags parsed and checked up front, tables or one JSON object out.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "diloco/sim/simulate.hpp"

namespace simcmd {

/// Flags of `diloco simulate` as typed by the user (durations and counts take suffixes).
struct Flags {
  diloco::SimConfig cfg;
  std::string chips = "1.2M", mtbi = "1y", horizon = "1y", detect, restart, swap, reconfig, heal, checkpoint, step,
              sync_latency, grace_window, series, grace;
  std::string policy = "all";
  std::vector<std::string> sweep_chips;
  std::vector<int> sweep_learners;
  bool sweep = false, json = false;
};

/// Adds the subcommand to `app`; the returned flags are filled when the command line is parsed.
std::unique_ptr<Flags> add_command(CLI::App& app);
/// Runs the simulation the flags describe; returns the exit status.
int run(Flags& f);

}  // namespace simcmd
