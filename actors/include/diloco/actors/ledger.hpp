// What happens in a run, and what the apps read (the "ledger" room): one record per writer (each
// island, each chip, the syncer, the gateway), the goodput the meter publishes, the events and
// why the run stopped. No field has two writers; what one unit learns of another it learns by
// message.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "diloco/actors/run.hpp"
#include "diloco/checkpoint.hpp"
#include "diloco/ddp.hpp"
#include "diloco/events.hpp"
#include "diloco/goodput.hpp"
#include "diloco/invariants.hpp"

namespace diloco::actors {

/// What island i records, written by island i alone (its live incarnation; a dead incarnation's
/// clean-up clears only its own join, never its successor's).
struct IslandRecord {
  std::atomic<long> step{0};                // last finished step (a restarted island resumes here)
  std::atomic<std::uint64_t> tokens{0};     // tokens trained
  std::atomic<std::uint64_t> bytes_up{0};   // frame bytes sent to the syncer
  std::atomic<std::uint64_t> refused{0};    // frames from the syncer it refused
  std::atomic<std::uint64_t> rebased{0};    // adoptions applied as a rebase (fragments.adopt)
  std::atomic<std::uint64_t> mixed{0};      // adoptions applied as an α mix
  std::atomic<std::uint64_t> carried{0};    // applied as a mix of the sent θ carrying the progress since
  std::atomic<std::uint64_t> waits{0};      // holds of a step for a due merge (fragments.wait_steps)
  std::atomic<std::uint64_t> waited_us{0};  // ... their time in all, microseconds
  std::atomic<std::uint64_t> wait_timeouts{0};  // ... of which ran out before the merge came
  std::atomic<int> incarnation{0};          // starts so far
  /// The incarnation that is joined and not dead (0: none): alive means joined.
  std::atomic<int> live{0};
  /// Trained its budget and, with the final sync (decoupled), its last contributions merged.
  std::atomic<bool> done{false};

  /// The island's own state as of its last send (a run with a state directory): written by the
  /// island, read by the syncer when it writes its state file. Null until the first send.
  void keep_state(std::shared_ptr<const IslandState> s);
  std::shared_ptr<const IslandState> kept_state() const;

private:
  mutable std::mutex state_mu_;
  std::shared_ptr<const IslandState> state_;
};

/// What chip c of island i records, written by that chip alone: its starts and ends (alive
/// while more starts than ends, whatever order a restart's start and clean-up run in).
struct ChipRecord {
  std::atomic<int> starts{0};
  std::atomic<int> ends{0};
};

/// What the syncer records (or the ddp parameter server in its place: the same unit), written by
/// it alone and read by the apps and the gateway.
struct SyncerRecord {
  explicit SyncerRecord(const Run& run);

  std::atomic<int> starts{0};
  std::atomic<std::uint64_t> commits{0};
  std::atomic<std::uint64_t> bytes_down{0};     // frame bytes sent to islands
  std::atomic<std::uint64_t> dropped_stale{0};  // outer gradients too stale or repeating merged progress
  std::atomic<std::uint64_t> refused{0};        // frames refused (malformed, unknown sender, ...)
  std::atomic<std::uint64_t> superseded{0};     // sends replaced, before a commit, by a newer one of the
                                                // same island (it sent again while the first waited)
  std::atomic<std::uint64_t> heals_held{0};     // fragments of join replies sent without values: the
                                                // island held them already (SyncerCore::held_sent)
  std::atomic<std::uint64_t> clipped{0};        // merged outer gradients scaled down to their fragment's
                                                // norm bound (merge.clip_ratio; SyncerStats::clipped)
  std::atomic<std::uint64_t> unblocked{0};      // synchronous rounds committed without islands waiting on
                                                // other rounds (SyncerSettings::lockstep)
  /// Tokens of the contributions merged into the global model since the run began (kept in the
  /// snapshot, so across syncer restarts and leaders): with the tokens the islands trained, the
  /// goodput of a run across processes.
  std::atomic<std::uint64_t> merged_tokens{0};
  /// Per island: its Progress.finished was heard (and it has not re-joined since): in a
  /// syncer-only process, what tells the run is over.
  std::vector<std::atomic<bool>> finished;
  /// Per island: the last step heard of, what a restarted site process is told to resume from.
  std::vector<std::atomic<long>> heard_step;

  /// The syncer's committed state as of its latest commit (or change of who finished): an
  /// immutable snapshot published by a pointer swap, so a syncer restarted in this process
  /// resumes from its last commit and loses no round. Null before the first one.
  std::shared_ptr<const Checkpoint> snapshot() const;
  /// Returns the snapshot's generation (how many were kept so far, this one included).
  std::uint64_t keep_snapshot(std::shared_ptr<const Checkpoint> cp);
  /// The snapshot with how many were kept so far (its generation; 0: none) and the global
  /// round when it was kept: what a follower replica is sent.
  struct Held {
    std::shared_ptr<const Checkpoint> snapshot;
    std::uint64_t generation = 0;
    std::uint64_t round = 0;
  };
  Held held() const;
  /// New global parameters (`new_round`: a round the app has not seen yet).
  void publish(std::span<const float> params, std::uint64_t round, bool new_round);
  /// The newest global parameters and their round.
  std::pair<std::vector<float>, std::uint64_t> global() const;
  std::uint64_t round() const;
  /// Every new global round since the last call, oldest first (at most max_new_rounds: a reader
  /// that never reads costs little memory).
  std::deque<std::pair<std::uint64_t, std::vector<float>>> take_new_rounds();
  static constexpr std::size_t max_new_rounds = 64;

  /// ddp: the parameter server's state, kept across its restarts in this process (as a
  /// torchrun job keeps its replicas' state in memory); null until the first server starts.
  std::shared_ptr<DdpServer> ddp_server;

private:
  mutable std::mutex mu_;
  std::shared_ptr<const Checkpoint> snapshot_;
  std::uint64_t generation_ = 0;
  std::vector<float> global_;
  std::uint64_t round_ = 0;
  std::deque<std::pair<std::uint64_t, std::vector<float>>> new_rounds_;
};

/// Frames a process's gateway (sessions it refused), its connectors and each site's relay refused, and which
/// sites the gateway told that the run is over: each field written by its own kind of actor.
struct GatewayRecord {
  /// Sessions are numbered by site: the configuration's `sites`, then one number per island for
  /// the joiners (a joiner's number is the config's count plus its first island).
  GatewayRecord(int sites, int islands)
      : relay_refused(static_cast<std::size_t>(sites + islands)), relayed(static_cast<std::size_t>(sites + islands)),
        told_over(static_cast<std::size_t>(sites + islands)),
        vacant(static_cast<std::size_t>(islands)), told_island(static_cast<std::size_t>(islands)) {
    for (auto& v : vacant) v = false;
    for (auto& t : told_island) t = false;
  }
  std::atomic<std::uint64_t> refused{0};  // the gateway's: sessions it refused
  /// The site side's: sessions and frames from the syncer that this process's connectors refused
  /// (a deposed leader's term, a malformed run-over word). Apart from `refused`, so that a run
  /// with both ends in one process (`--relays`) counts each end's refusals on its own.
  std::atomic<std::uint64_t> connector_refused{0};
  std::vector<std::atomic<std::uint64_t>> relay_refused;  // per session number
  std::vector<std::atomic<std::uint64_t>> relayed;        // per session number: frames passed on to the syncer
  std::atomic<std::uint64_t> sessions{0};                 // sessions handed out (a relay each)
  std::atomic<std::uint64_t> run_over_sent{0};  // RunOver frames: pushed to a session or answered to a late site
  std::vector<std::atomic<bool>> told_over;     // per session number: told that the run is over
  /// Per island, in a syncer process with net.allow_join: an open island that no joiner holds
  /// (none came yet, it left, or its lease ran out). A vacant island holds nobody up: the run's
  /// end and the final sync count the others (Runtime::trained, the syncer app's rules).
  std::vector<std::atomic<bool>> vacant;
  /// Per island held by a joiner: its joiner was told that the run is over (every_site_told).
  std::vector<std::atomic<bool>> told_island;
  /// A replicated syncer's leader: followers in session, and the newest global round that a
  /// majority of the replicas holds (the leader's own included).
  std::atomic<int> followers{0};
  std::atomic<std::uint64_t> majority_round{0};
  std::atomic<std::uint64_t> majority_generation{0};  // the snapshot generation a majority holds
};

/// The ledger's figures at one moment, summed over the records (what progress lines print).
struct Tally {
  std::uint64_t tokens = 0;         // tokens trained by all islands
  std::uint64_t bytes_sent = 0;     // frame bytes islands → syncer and syncer → islands
  int live_islands = 0;
  int live_chips = 0;
  int islands_done = 0;
  std::uint64_t dropped_stale = 0;
  std::uint64_t superseded = 0;     // sends replaced by a newer one of the same island before a commit
  std::uint64_t held = 0;           // join-reply fragments not sent: the island held them already
  std::uint64_t clipped = 0;        // merged outer gradients scaled down to their fragment's norm bound
  std::uint64_t unblocked = 0;      // synchronous rounds committed without islands waiting on other rounds
  std::uint64_t rejected = 0;       // every refused frame: the islands', the syncer's, the gateway's, the relays'
  std::uint64_t relay_refused = 0;  // ... of which the relays refused
  std::uint64_t relayed = 0;        // frames the relays passed on to the syncer
  std::uint64_t commits = 0;
  std::uint64_t rebased = 0, mixed = 0, carried = 0;  // the islands' adoptions, by how they were applied
  std::uint64_t waits = 0, wait_timeouts = 0;  // the islands' holds for a due merge, and those that ran out
  double waited_s = 0.0;                       // ... their time in all
};

/// What happens in a run, and what the apps read: one record per writer (each island, each chip,
/// the syncer, the gateway), the goodput the meter publishes, the events and why the run stopped.
/// No field has two writers; what one unit learns of another it learns by message.
/// Which part of a run this process holds: all of it (`diloco run`), the syncer (`diloco
/// syncer`) or some islands (`diloco site`).
enum class RunPart : int { whole_run, syncer, site };

struct Ledger {
  Ledger(const Run& run, std::function<void(const Event&)> on_event);

  std::vector<IslandRecord> islands;
  std::vector<std::vector<ChipRecord>> chips;  // [island][chip]
  SyncerRecord syncer;
  GatewayRecord gateway;
  /// Actor-clock second at which the run started: written once by spawn_runtime before any unit
  /// starts; chaos event times, link partitions and goodput are relative to it.
  std::atomic<double> t0{0.0};

  Tally tally() const;
  /// Goodput and global downtime as of actor-clock second `now`, from the meter's last copy.
  GoodputMeter::Report goodput_report(double now) const;
  /// The meter's copy of its state (meter.hpp): written by the meter alone, after each fact.
  void publish_goodput(const GoodputMeter& m);
  GoodputMeter goodput_copy() const;

  /// Reports `e`: the run's invariants checker sees it first (invariants.hpp), then the app.
  void emit(const Event& e);
  /// The run ended at actor-clock second `now`: the invariants checker takes the goodput figures
  /// as of then (only for the whole run: a syncer or site process holds part of the run's
  /// chip-seconds) and judges the faults still unrepaired whose repair this part sees (a
  /// syncer's restore happens in the syncer's process, a chip's or island's return in its
  /// site's; a step-triggered syncer kill fires in the site of its island). Call it once, when
  /// the run is over.
  void check_end(double now, RunPart part = RunPart::whole_run);
  /// Every broken invariant so far, in the order found (empty: the run kept them all).
  std::vector<Violation> violations() const;
  /// The run cannot go on and must end with an error: an island or the syncer diverged, or the
  /// syncer's state file is unusable. Not a crash: a restarted unit would meet the same state
  /// (or the same settings) again, and its supervisor would restart it forever. Written once:
  /// the first reason is kept; the app ends the run with it and a non-zero exit.
  void stop(const std::string& why);
  /// Why the run was stopped, if it was.
  std::optional<std::string> stopped() const;

private:
  mutable std::mutex goodput_mu_;
  GoodputMeter goodput_;
  mutable std::mutex stop_mu_;
  std::optional<std::string> stop_reason_;
  mutable std::mutex ev_mu_;
  Invariants invariants_;  // fed by emit(), under ev_mu_
  std::function<void(const Event&)> on_event_;
};

}  // namespace diloco::actors
