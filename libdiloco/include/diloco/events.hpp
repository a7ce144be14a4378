// What happens in a run, as typed values: the one vocabulary of the runtime's actors, the apps'
// reports and the tests. Each kind has a named constructor that says what it carries, and every
// field means one thing whatever the kind.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "diloco/config.hpp"

namespace diloco {

/// Something that happened in a run, stamped with the actor clock (seconds).
struct Event {
  enum class Kind {
    step,            // an island took an inner step
    commit,          // the syncer merged a round of a fragment (ddp: one server step)
    join,            // an island joined the syncer
    heal,            // a (re)started island adopted the global fragments
    rejoin,          // an island re-joined a restarted syncer, keeping its own state
    restore,         // the syncer (re)started from a snapshot or from the initial parameters
    snapshot,        // the syncer wrote a snapshot
    fault,           // an injected fault fired
    rejected,        // a frame was refused (malformed, unknown sender, ...)
    dropped,         // a contribution came too late (stale) and was dropped
    done,            // an island finished (budget trained, last contributions merged)
    leave,           // an island leaves gracefully (its site was asked to): it stops stepping and hands over its unsent progress
    diverged,        // an island's or the syncer's state holds NaN or infinity: the run stops
    unusable_state,  // the syncer's state file cannot be resumed from: the run stops
  };

  Kind kind = Kind::step;
  double at = 0.0;                 // actor-clock seconds
  int island = -1;                 // the island concerned, if any
  int chip = -1;                   // fault: the chip killed, if any
  long step = 0;                   // the island's local step
  std::uint64_t round = 0;         // commit: the new round; join/heal/rejoin: the island's base; restore/snapshot: global
  std::uint64_t held_round = 0;    // rejoin: the base round the island held before (a restarted syncer may hold less)
  int fragment = -1;               // commit, diverged: the fragment concerned
  int chips = 0;                   // step: chips that answered
  int merged = 0;                  // commit: contributions merged
  int contributions = 0;           // commit: contributions the quorum counted (merged or dropped as stale)
  int live = 0;                    // commit: islands the round expected (live, and finished ones with a contribution)
  bool flush = false;              // commit: a final flush (only finished islands' last contributions)
  bool unblocked = false;          // commit: below the quorum, its missing islands waiting on other rounds (SyncerSettings::lockstep)
  bool finite = true;              // commit: the global fragment holds no NaN or infinity after it
  int incarnation = 0;             // heal: the island's start count (1 = first start)
  int unsent = 0;                  // leave: fragments whose unsent progress the island hands over
  double loss = std::numeric_limits<double>::quiet_NaN();  // step: training loss
  FaultKind fault = FaultKind::chip;  // fault: what was done
  std::vector<int> islands;        // commit: who was merged
  std::vector<int> staleness;      // commit: per merged island, rounds its contribution was behind
  std::vector<std::uint64_t> frames;  // commit: per merged island, the digest of the frame merged (frame_digest)
  std::vector<std::uint64_t> rounds;  // restore: per fragment, the round restored (empty: `round` for all)
  std::uint64_t digest = 0;        // rejected: the refused outer-gradient frame's digest (0: none); heal: the island's fragments'
  std::uint64_t global_digest = 0; // heal: the digest of the global fragments it was given (0: not checked)
  double duration_s = 0.0;         // fault: repair time of a kill, or how long a slow-down or partition lasts
  std::string detail;              // a human-readable reason or description
  std::string reason;              // rejected: the kind of refusal in one word (an errc name, "unexpected_message", "session")

  static Event stepped(double at, int island, long step, int chips, double loss);
  static Event committed(double at, std::uint64_t round, int fragment, int merged, std::vector<int> islands,
                         std::vector<int> staleness = {});
  static Event joined(double at, int island, std::uint64_t round);
  /// A (re)started island adopted the global fragments (heal), or re-joined a restarted syncer
  /// keeping its own state (rejoin).
  static Event healed(double at, int island, int incarnation, std::uint64_t round, long step, bool rejoin);
  static Event restored(double at, std::uint64_t round, std::string how);
  static Event snapshot_taken(double at, std::uint64_t round);
  static Event fault_fired(double at, FaultKind what, int island, int chip, long step, std::string description,
                           double duration_s = 0.0);
  static Event refused(double at, std::string why, std::string reason = "other");
  static Event dropped_late(double at, std::string why);
  static Event island_done(double at, int island, long step);
  static Event leaving(double at, int island, long step, int unsent);
  static Event diverged_state(double at, int island, int fragment, long step, std::string why);
  static Event unusable(double at, std::string why);
};

/// Stable name of a kind ("commit").
const char* to_string(Event::Kind k);

}  // namespace diloco
