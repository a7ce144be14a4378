// Goodput and global downtime as plain code: how much of the provisioned chip time became
// progress the syncer merged, and how long the run had a quorum alive but committed nothing.
// Time is passed in (seconds, any origin); nothing here reads a clock.
#pragma once

#include <deque>
#include <vector>

namespace diloco {

/// Goodput and global downtime, fed by the runtime as things happen.
///
/// Provisioned chip-seconds: every chip of every island over the wall time of the run, alive or
/// not. Useful chip-seconds: the chip time of inner steps whose outer gradients the syncer
/// merged into the global model; each step's time is split evenly over the P fragments, and a
/// fragment's share becomes useful when the contribution that carries it is merged. Everything
/// else is lost: steps of an island that died before sending them, contributions dropped as
/// stale, and chips waiting or down. (In ddp mode one "fragment", sent and merged every step.)
///
/// Global downtime: time during which at least K islands were alive but no global round
/// committed, counted beyond an allowance of `expected_gap_s` (a round every so often is normal):
/// Σ max(0, length − expected_gap_s) over the stretches with ≥ K alive and no commit. A stretch
/// starts at a commit or when K islands are alive again, and ends at a commit or when fewer than K
/// are alive. Every island counts as alive at `start_s`.
class GoodputMeter {
public:
  GoodputMeter(int islands, int chips_per_island, int fragments, int quorum_k, double expected_gap_s, double start_s);
  /// Island `island` finished an inner step that kept `chips` chips busy for `seconds`.
  void step(int island, int chips, double seconds);
  /// Island `island` sent its outer gradient for `fragment`: the work since its last send of that
  /// fragment is now in flight.
  void sent(int island, int fragment);
  /// The syncer merged (or dropped) the oldest in-flight contribution of (island, fragment).
  void merged(int island, int fragment);
  void dropped(int island, int fragment);
  /// The island died: its unsent work is lost (in-flight contributions may still merge).
  void island_lost(int island);
  /// A global round committed at `now`.
  void commit(double now);
  /// The number of live islands changed at `now`.
  void alive(int islands_alive, double now);

  struct Report {
    double provisioned_chip_s = 0.0;
    double useful_chip_s = 0.0;
    double lost_failure_chip_s = 0.0;   // unsent work of islands that died
    double lost_stale_chip_s = 0.0;     // dropped contributions
    double in_flight_chip_s = 0.0;      // sent or not yet sent, not decided at `now`
    double stepped_chip_s = 0.0;        // chip time of every step: useful + lost + in flight (the rest
                                        // of provisioned is chips waiting or down)
    double goodput = 0.0;               // useful / provisioned
    double global_downtime_s = 0.0;
    double elapsed_s = 0.0;
  };
  /// Islands of different sizes: the chips provisioned in all (default islands × chips_per_island).
  void set_total_chips(int n) { total_chips_ = n; }
  /// The figures as of `now` (downtime includes the current stretch).
  Report report(double now) const;

private:
  double take_oldest(int island, int fragment);
  void close_stretch(double now);
  int islands_, chips_, fragments_, k_;
  int total_chips_ = -1;
  double expected_gap_s_, start_s_;
  std::vector<std::vector<double>> unsent_;                   // [island][fragment] chip-seconds
  std::vector<std::vector<std::deque<double>>> in_flight_;    // [island][fragment] FIFO
  double useful_ = 0.0, lost_failure_ = 0.0, lost_stale_ = 0.0, stepped_ = 0.0;
  int alive_ = 0;
  double stretch_from_ = 0.0, downtime_ = 0.0;  // current stretch with ≥ K alive; closed ones
};

}  // namespace diloco
