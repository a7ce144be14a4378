// `diloco plot`: a run's --metrics JSON lines drawn by gnuplot into one PNG: eval loss against
// time with the faults marked, goodput and live islands over time, bytes per link.
#pragma once

#include <memory>
#include <string>

#include <CLI/CLI.hpp>

namespace plotcmd {

/// Flags of `diloco plot`.
struct Flags {
  std::string metrics;  // the JSON lines of `diloco run --metrics`
  std::string out;      // the PNG to write
  std::string gnuplot = "gnuplot";
};

/// Adds the subcommand to `app`; the returned flags are filled when the command line is parsed.
std::unique_ptr<Flags> add_command(CLI::App& app);
/// Draws the plot; returns the exit status (errors name the file or flag).
int run(const Flags& f);

}  // namespace plotcmd
