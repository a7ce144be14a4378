// The apps' one report writer: what a run on the actors shows a person (the fault timeline, the
// per-round table, the summary, each process's event lines) on stdout, and the same as JSON
// lines for --metrics, every object built with nlohmann::json (keys in the order written; a
// number that is not finite becomes null).
#pragma once

#include <chrono>
#include <functional>
#include <cstdint>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "diloco/config.hpp"
#include "diloco/events.hpp"
#include "diloco/goodput.hpp"
#include "diloco/model.hpp"

namespace diloco::actors {
struct Runtime;
enum class RunPart : int;
}

using Json = nlohmann::ordered_json;

/// --quiet: the per-round rows are left out of stdout (the summary stays; --metrics is written
/// in full). Set once by main before anything runs.
void set_quiet_rows(bool quiet);
bool quiet_rows();

/// Timestamped lines on stdout from any thread ("   12.34s  what happened").
class Timeline {
public:
  void line(const std::string& s);
  /// Seconds since this timeline began.
  double since() const;

private:
  std::mutex mu_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

/// One JSON object per line (--metrics). Closed (writes nothing) until open() succeeds.
class JsonLines {
public:
  /// Opens `path` for writing (`append`: after what is there, as a restarted syncer does).
  /// Throws std::runtime_error naming the flag and the file when it cannot be opened.
  void open(const std::string& path, bool append = false);
  explicit operator bool() const { return out_.is_open(); }
  void write(const Json& object);

private:
  std::ofstream out_;
};

/// The story of a run on the actors in one process, told by its events (fed from any thread):
/// faults, units healed with the time each took, syncer restores, refusals and the first late
/// drops; and the mean training loss of the steps since the last round was shown.
class FaultTimeline {
public:
  explicit FaultTimeline(diloco::IslandsConfig islands) : islands_(std::move(islands)) {}
  void on(const diloco::Event& e);
  /// Times count from now on (the run starts).
  void restart_clock();
  /// A simulated run: times are read from its virtual clock (seconds) instead of the wall's.
  void use_clock(std::function<double()> now);
  /// Mean training loss of the steps since the last call (NaN: none).
  double take_train_loss();
  /// Prints "timeline (N events):" and every line.
  void print() const;
  /// Every fault as (seconds since the start, what), for --metrics.
  std::vector<std::pair<double, std::string>> faults() const;
  /// When the last inner step of any island was taken (seconds since the start): the training
  /// part of the run, before the final sync's wait.
  double last_step_s() const;

private:
  double since() const;
  std::string healed(const std::string& unit, double t);
  mutable std::mutex mu_;
  diloco::IslandsConfig islands_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::function<double()> clock_;  // set: the virtual clock
  double clock_start_ = 0.0;
  double loss_sum_ = 0.0;
  long loss_count_ = 0;
  double last_step_ = 0.0;
  std::vector<std::string> lines_;
  std::map<std::string, double> down_;  // unit → when its fault was injected (time to heal)
  std::vector<std::pair<double, std::string>> faults_;
  int dropped_shown_ = 0;
};

/// The per-round table of `diloco run` on the actors: a header, then one row per global round
/// read off the runtime's ledger (and a JSON line each).
class RoundTable {
public:
  RoundTable(const diloco::actors::Runtime& rt, JsonLines& jsonl) : rt_(rt), jsonl_(jsonl) {}
  void header() const;
  /// Round `round` with its training loss, eval loss, at actor-clock second `now` and
  /// `seconds` since the start.
  void row(std::uint64_t round, double train_loss, double eval_loss, double now, double seconds) const;

private:
  const diloco::actors::Runtime& rt_;
  JsonLines& jsonl_;
};

/// Share of the run's budget trained so far, in [0, 1] (train.budget: every island's steps, or
/// the islands' tokens together).
double run_progress(const diloco::actors::Runtime& rt);

/// The figures of a finished run that are not in its ledger.
struct RunEnd {
  std::uint64_t rounds = 0;
  diloco::EvalResult eval;
  double seconds = 0.0;
  diloco::GoodputMeter::Report goodput;
  std::size_t violations = 0;  // broken invariants (diloco/invariants.hpp)
};

/// Faults the run was set to inject: the [chaos] schedule and every [[faults]] table.
std::size_t faults_scheduled(const diloco::actors::Runtime& rt);

/// Ends the run's invariants check at actor-clock second `at` for the part of the run this
/// process holds (Ledger::check_end), logs every violation and returns their count.
std::size_t check_invariants(diloco::actors::Runtime& rt, double at, diloco::actors::RunPart part);

/// The summary line of the invariants: "all kept (what this part checks)" or the count of
/// violations.
void print_invariants(std::size_t violations, diloco::actors::RunPart part);

/// The summary of `diloco run` on the actors: the final line, goodput, the links per site, and
/// the summary JSON line with the faults.
void print_summary(const diloco::actors::Runtime& rt, const RunEnd& end, const FaultTimeline& timeline, JsonLines& jsonl);

/// The log lines that open `diloco run` on the actors: the config, the data, the topology and
/// the fault schedule.
void log_start(const diloco::actors::Runtime& rt, const std::string& config_label, unsigned threads);

/// What the syncer process (`diloco syncer`) and a site process (`diloco site`) print of an
/// event, if anything.
std::optional<std::string> syncer_line(const diloco::Event& e);
std::optional<std::string> site_line(const diloco::Event& e, long every_steps);
