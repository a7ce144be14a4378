// Joining mid-run (net.allow_join): which open islands a joining site gets, how long a lost one
// keeps them, and when they are free again. Plain code with time as a parameter; the syncer
// process's gateway (actors/gateway.cpp) asks it and says the answers on the wire.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace diloco {

/// The run's open islands (open_islands(cfg)) and the joiners holding some. An island is a part
/// of the data too (an island reads its own shard, from the step it is at): whoever takes an
/// island goes on with its steps and its data where the one before stopped, so "leasing a data
/// part" and "taking an island" are one act.
class JoinPool {
public:
  /// `lease_s`: how long a joiner lost without leaving keeps its islands.
  JoinPool(std::vector<int> open, double lease_s);

  /// What a joiner asking for islands is told.
  struct Answer {
    std::vector<int> islands;   // granted (sorted); empty when refused
    bool back = false;          // the islands it held before its session was lost (within its lease)
    std::string refused;        // refused for good: it will not be taken by asking again
    std::string busy;           // refused for now: its name has a live session, or the islands it
                                // needs are kept for a joiner that may come back (it may ask again)
  };
  /// `name` asks for `want` islands; `held`: the islands its process trains already (non-empty
  /// when a joiner whose lease ran out asks again: it gets exactly those or nothing). `spent(i)`:
  /// island i has trained its whole budget (it is given to nobody). Grants mark the joiner live.
  Answer ask(const std::string& name, int want, const std::vector<int>& held, const std::function<bool(int)>& spent);
  /// `name`'s session ended at `now`: `left` (its islands finished: it said goodbye) frees its
  /// islands at once; otherwise they wait for it until now + lease. Returns whether freed.
  bool lost(const std::string& name, bool left, double now);
  /// Frees the islands of every lost joiner whose lease ran out by `now`, and the reservations
  /// that ran out; returns who held them (a reservation: "the joiner of island N").
  std::vector<std::string> expire(double now);
  /// At a syncer's (re)start, which does not know who held its open islands: `islands` (open
  /// ones that trained and have not finished) wait until `until` for the joiner that trains them,
  /// which names them when it asks again (`held`); nobody else gets them before.
  void reserve(const std::vector<int>& islands, double until);

  /// Nobody holds island `i` (it is open and free, or not open at all: false).
  bool vacant(int i) const;
  /// The islands `name` holds (empty: none).
  std::vector<int> held_by(const std::string& name) const;
  /// The earliest time a lease runs out (none: no lost joiner).
  std::optional<double> next_expiry() const;
  const std::vector<int>& open() const { return open_; }
  int live() const;

private:
  struct Claim {
    std::vector<int> islands;
    bool live = false;
    double expires = 0.0;
  };
  std::vector<int> open_;
  double lease_s_;
  std::map<std::string, Claim> claims_;
  std::map<int, std::string> holder_;  // island → the joiner holding it
  std::map<int, double> reserved_;     // island → until when it waits for its unknown joiner
};

}  // namespace diloco
