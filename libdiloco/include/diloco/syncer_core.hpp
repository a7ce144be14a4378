// The syncer (outer optimizer) as plain code: validates incoming outer-gradient frames, keeps
// per-fragment rounds, decides commits by quorum + grace (time passed in), merges and snapshots.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "diloco/checkpoint.hpp"
#include "diloco/digest.hpp"
#include "diloco/expected.hpp"
#include "diloco/fragments.hpp"
#include "diloco/merge.hpp"
#include "diloco/optim.hpp"
#include "diloco/wire.hpp"

namespace diloco {

/// The global round of per-fragment rounds: their minimum (every fragment merged at least that
/// often); 0 for none. SyncerCore::global_round, and the round of a kept snapshot.
std::uint64_t global_round_of(std::span<const std::uint64_t> rounds);

/// Settings of the syncer (Decoupled DiLoCo, arXiv 2604.21428).
struct SyncerSettings {
  int islands = 1;               // known senders 0..islands-1
  MergeConfig merge;
  QuorumConfig quorum;
  OuterConfig outer;
  CodecParams broadcast;         // fp32: broadcasts Θ_p exactly (global_params); lossy: the quantised
                                 // change of the island's Θ̂_p (global_delta, error feedback by construction)
  BroadcastTo broadcast_to = BroadcastTo::all;  // who is due a frame after a commit (due())
  long snapshot_every = 0;       // global rounds between snapshots on disk (0: never; snapshot_due)
  std::uint64_t term = 0;        // a replicated syncer's leader: its term, carried by every frame it
                                 // encodes (sites refuse older terms); 0 otherwise
  std::uint64_t max_tokens_per_step = kMaxTokensPerStep;  // the most tokens an island's step counts
                                 // (the run's batch): outer gradients claiming more are refused
  /// The synchronous modes (DiLoCo, Streaming DiLoCo): each round waits for every live island,
  /// and each island waits for the merge of its last contribution (τ steps after sending it).
  /// After restarts and re-joins, islands may send their fragments in different orders, and each
  /// then waits for a round that another reaches only after its own: when every island of the
  /// run that has not finished has a contribution waiting, no round can commit, and nothing was
  /// heard for 10 of the islands' steps, the round with the most contributions of islands still
  /// training (the oldest of them) commits without the rest (Commit::unblocked). An island that
  /// died and sent nothing is waited for, as before: it comes back.
  bool lockstep = false;
  /// The inner steps one outer gradient covers on the islands' schedule (train.H; 0: unknown, as
  /// with a time cadence). A contribution covering k > 1.5 periods (an island's catch-up after an
  /// outage, the counters of a lost send given back, a send made while its last was not yet
  /// merged) enters the merge that feeds the momentum cut to one period's share, 1/k; what the
  /// cut leaves moves Θ without the momentum (OuterOptimizer::flush). Otherwise k periods of
  /// drift, several islands' in a row after a failover, filled the momentum as k rounds would
  /// and carried Θ on past them. Not with delayed_nesterov (it takes contributions in 1/delay
  /// at a time already).
  long period_steps = 0;
};

/// What one commit of one fragment did.
struct Commit {
  int fragment = 0;
  std::uint64_t round = 0;       // the new round of the fragment
  int merged = 0;                // contributions in the average
  int dropped_stale = 0;         // contributions past max staleness at merge time
  int contributions = 0;         // contributions the quorum counted (merged + dropped_stale)
  int live = 0;                  // islands the round expected: live, and finished ones with a contribution
  bool flush = false;            // only finished islands' last contributions: a final flush, not an outer step
  double excess = 0.0;           // share of the merge past one period of its contributions
                                 // (SyncerSettings::period_steps): applied without the momentum
  bool unblocked = false;        // lockstep: committed below the quorum, its missing islands waiting on other rounds
  std::uint64_t tokens = 0;      // tokens of the merged contributions
  std::vector<int> islands;      // who was merged
  std::vector<int> staleness;    // per merged island: rounds its contribution was behind the fragment
  std::vector<std::uint64_t> frames;  // per merged island: the digest of the frame it came in (frame_digest)
  std::vector<int> clipped;      // merged islands whose outer gradient was scaled down to the
                                 // fragment's norm bound (NormClip: far larger than the others')
  double at = 0.0;
  bool finite = true;            // false: Θ_p holds NaN or infinity after it (the run diverged; health())
};

/// Counters of everything the syncer did, for reports and tests.
struct SyncerStats {
  std::uint64_t accepted = 0;    // frames accepted
  std::uint64_t superseded = 0;  // a newer frame of the same island replaced a pending one
  std::uint64_t overlapping = 0; // based on a round the island already had a contribution merged
                                 // from: it repeats merged progress, so it is dropped (counted in
                                 // dropped_stale too)
  std::uint64_t commits = 0;
  std::uint64_t merged = 0;
  std::uint64_t dropped_stale = 0;   // stale_round rejections + staleness drops in merges +
                                     // pending sends withdrawn at a join that kept θ
  std::uint64_t merged_tokens = 0;   // Σ over commits of merged tokens
  std::uint64_t withdrawn = 0;       // outer gradients of an island that re-joined keeping its
                                     // parameters, sent before that join (pending here, or still on
                                     // their way): it sends that progress again from the new base,
                                     // so they are dropped (counted in dropped_stale too)
  std::uint64_t excess = 0;          // commits with progress past one period of their contributions
                                     // (SyncerSettings::period_steps), applied without the momentum
  std::uint64_t clipped = 0;         // merged outer gradients scaled down to their fragment's norm
                                     // bound (merge.clip_ratio × the median of the islands' last ones)
  std::uint64_t unblocked = 0;       // lockstep commits without islands waiting on other rounds
  std::uint64_t bytes_in = 0;
  RejectCounts rejected;             // every refusal by code (stale_round included)
};

/// Solves "when and how is a fragment merged" with no mailbox: the actor shell passes frames
/// and the time; SyncerCore answers with commits and the next moment it must be asked again.
/// Per fragment: a round that only goes up and commits only with ≥ K contributions; pending
/// contributions (one per island, the newest wins); token-weighted merge + RDA (merge.hpp);
/// late contributions discounted by staleness or dropped; an OuterOptimizer each.
class SyncerCore {
public:
  SyncerCore(const FragmentPlan& plan, std::span<const float> initial, SyncerSettings settings);

  /// Validates and stores an outer-gradient frame arriving at `now` (seconds). Refusals come
  /// back as errors and are counted by code; nothing from them is kept. A frame based on a
  /// round from which the same island already had a contribution merged is refused as
  /// stale_round: its δ repeats progress the global parameters already hold (the island sent
  /// again before the broadcast reached it), and merging it would apply that progress twice.
  Expected<FragmentHeader> receive(std::span<const std::byte> frame, double now);
  /// Commits every fragment whose quorum + grace rule says so (decide(), merge.hpp).
  std::vector<Commit> poll(double now);
  /// When poll must run again for a waiting grace window (infinity when nothing waits).
  double next_deadline(double now) const;

  /// Islands currently alive (the grace rule stops waiting once every live island is in).
  void set_live_islands(int n);
  /// Island `island` trained its budget and sent all it has (`finished` progress): no round
  /// waits for it any more. Per fragment the round then expects the live islands still training
  /// plus the finished ones with a pending contribution, and its quorum is min(K, that number),
  /// so the last contributions of a run commit even below K (at the next poll()). Finished
  /// islands must be among the live islands (set_live_islands), also once they went away; one
  /// that joins again is training until it says otherwise (`false`).
  void finish(int island, bool finished);
  /// The merge + broadcast time estimate of the adaptive grace window (t_sync).
  void set_sync_time(double t_sync);
  /// Island `island` reported its local step `step` (Progress) at `now` (seconds). The last step
  /// heard of per island and who finished are part of the snapshot, so that a restarted syncer
  /// still knows which islands are done (and can end the run) and where a restarted site's
  /// islands were. The reports also time the islands' inner steps (StepClock) for the grace
  /// windows ("steps" and adaptive); a join (join_reply) restarts an island's timing. Where a
  /// report carries the island's own step time (`step_seconds` > 0, ProgressMessage) the clock
  /// takes it when shorter than the time between the reports, which also holds the island's
  /// waits for a merge: those are not inner steps.
  void heard(int island, std::uint64_t step, double now, double step_seconds = 0.0);
  /// Seconds per inner step as the progress reports tell it (0 until one was measured).
  double step_time() const { return clock_.t_step(); }
  std::uint64_t last_step(int island) const;
  bool finished(int island) const;

  /// Ok while the global parameters are finite. A commit that leaves NaN or infinity in Θ_p
  /// (the outer step diverged, e.g. an absurd outer learning rate) or a merged fragment that
  /// cannot be encoded for its broadcast turns it into errc::non_finite naming the fragment and
  /// round: from then on the syncer's state is useless, nothing of it may be broadcast or
  /// snapshot, and the run must end (a restart would only resume the same settings).
  const Status& health() const { return health_; }

  std::uint64_t round(int p) const { return rounds_[static_cast<std::size_t>(p)]; }
  /// The global round: min over fragments (every fragment merged at least that often).
  std::uint64_t global_round() const;
  int pending(int p) const { return static_cast<int>(pending_[static_cast<std::size_t>(p)].size()); }
  std::span<const float> params() const { return params_; }
  const SyncerStats& stats() const;
  /// stats().superseded alone, without rebuilding the refusal counts (read per received frame).
  std::uint64_t superseded() const { return stats_.superseded; }
  const SyncerSettings& settings() const { return settings_; }

  /// The islands due a frame of fragment p (settings().broadcast_to): after a commit, every
  /// island, or the islands whose contribution it counted and any that fell merge.max_staleness
  /// rounds behind; an island stays due until frame_for() or join_reply() gives it the
  /// fragment. One frame carries every commit since the island's last.
  std::vector<int> due(int p) const;
  bool is_due(int p, int island) const;
  /// The frame that brings island `island` from what it was last sent of fragment p to Θ_p now,
  /// and marks it sent (no longer due). fp32: Θ_p as global_params with the current round.
  /// Lossy: the quantised Θ_p − Θ̂ as global_delta from the round the island holds, where Θ̂ is
  /// what that island reconstructs; Θ̂ moves only by what it decodes, so the residual stays in
  /// the next frame (error feedback). Frames of one island must reach it in the order made. A
  /// fragment that cannot be encoded (Θ diverged) turns health() into errc::non_finite. Lossy:
  /// refused (stale_round) when the island already holds the current round.
  Expected<Frame> frame_for(int p, int island);
  /// Θ̂_p of island `island`: the fragment it reconstructs from its frames (with fp32, Θ_p as it
  /// is now), and the round it was last sent.
  std::vector<float> held(int p, int island) const;
  std::uint64_t held_round(int p, int island) const;
  /// Every Θ_p with its round, in fp32, for island `island` (re)joining: the heal is exact, and
  /// the island's Θ̂ and round restart from it (nothing is due to it any more). The reply starts
  /// a new epoch of the island's sends (FragmentHeader::seq). An island that `keeps_local`
  /// (JoinRequest::keeps_local) sends its progress again from the new base: its pending outer
  /// gradients are dropped, and until its next join only sends of the new epoch are taken
  /// (older ones still on their way are refused as stale_round), else that progress would be
  /// merged twice. A fresh island dropped its parameters: what it sent before stays valid.
  /// A withdrawn send's tokens and steps go back in the reply's fragment (FragmentHeader::tokens,
  /// steps), for the island's next send to weigh what it carries; `withdrawn`, when given,
  /// receives the fragments whose pending send was dropped.
  /// `holds` (JoinRequest::holds): a fragment whose Θ_p has the SHA-256 the island named is sent
  /// marked held, without its values (held_sent() counts them).
  JoinReply join_reply(int island, bool keeps_local = false, std::vector<int>* withdrawn = nullptr,
                       std::span<const std::vector<std::byte>> holds = {});
  /// Fragments join replies marked held (the island held Θ_p already), since the start.
  std::uint64_t held_sent() const { return held_sent_; }
  /// Fragments join_reply() hashed to match a request's holds: once per fragment and round.
  std::uint64_t fragments_hashed() const { return hashed_; }
  /// The copies of Θ̂_p the syncer keeps for its islands (lossy frames; 0 with fp32): 1 while
  /// every island was sent the same frames since the same start.
  std::size_t reconstructions(int p) const;

  /// The state a restart needs: global params, outer momentum, rounds (checkpoint.hpp), and in
  /// the metadata the outer optimizers' step counts and each island's last step and finished flag.
  Checkpoint snapshot() const;
  /// True when snapshot_every global rounds passed since the last mark_snapshot(), or an
  /// island finished (or trained again) since: the end of the run must survive a restart.
  /// Never while health() is an error.
  bool snapshot_due() const;
  void mark_snapshot() {
    snapshot_round_ = global_round();
    snapshot_finish_changes_ = finish_changes_;
  }
  /// Restores from a checkpoint of the same plan; pending contributions are dropped (the
  /// islands resend) and Θ̂ = Θ (islands re-join and heal from it). Refuses, changing nothing,
  /// a checkpoint of another plan (checkpoint_mismatch) or whose syncer metadata is not what
  /// snapshot() writes (corrupt_checkpoint). Islands' entries beyond the run's are ignored; a
  /// checkpoint without them (an older one) restores no finished island.
  Status restore(const Checkpoint& cp);

private:
  struct Pending {
    FragmentHeader header;
    std::vector<double> delta;
    double at = 0.0;
    std::uint64_t digest = 0;  // of the frame (frame_digest): the invariants match merges against refusals
  };
  Commit commit(int p, double now);
  /// The share of contribution `m` that stands for one period (SyncerSettings::period_steps):
  /// period/steps where it covers more than 1.5 periods, else 1 (and always 1 with
  /// delayed_nesterov or no period).
  double core_share(const Contribution& m) const;
  /// The weighted share of a merge of `contribs` into `round` past one period of each:
  /// Σ w·(1 − core_share) over Σ w (what Commit::excess reports).
  double excess_share(std::span<const Contribution> contribs, std::uint64_t round) const;
  /// lockstep: the fragment whose round commits to unblock islands waiting on each other's
  /// rounds (SyncerSettings::lockstep), or -1 when some island still training has nothing
  /// pending; `at`: when it may (kLockstepQuietSteps of the islands' step time after the
  /// last frame or progress heard).
  int blocked_round(double& at) const;
  static constexpr double kLockstepQuietSteps = 10.0;
  double active_at_ = 0.0;  // the last frame or progress heard (receive, heard)
  std::vector<FragmentCounters> withdraw(int island);  // drops the island's pending outer gradients (join_reply)
  /// The round state and quorum fragment p is decided by: as stored, or shrunk for islands
  /// that finished (finish()).
  RoundState effective(int p, QuorumConfig& q) const;
  void open_round(int p, double now);
  bool lossy() const { return settings_.broadcast.encoding != Encoding::fp32; }
  /// What island i was last sent of fragment p (sent_[p][i]), -1 when i is not an island of the run.
  struct Sent {
    std::uint64_t round = 0;     // the round it holds from the syncer
    bool due = false;            // a commit it has not heard of is due to it
    // Lossy broadcasts only: Θ̂_p as it reconstructs it. Islands sent the same frames from the
    // same start share one (with frames to all and no heal since, every island: one copy).
    std::shared_ptr<const std::vector<float>> hat;
  };
  /// Per fragment, the last frame made: from which Θ̂ (lossy) to which round, and the Θ̂ it
  /// leads to. The next island asking from the same Θ̂ for the same round gets the same frame:
  /// one encode per commit, not one per island.
  struct LastFrame {
    bool valid = false;
    std::shared_ptr<const std::vector<float>> from, to;
    std::uint64_t round = 0;
    Frame frame;
  };
  Sent* sent(int p, int island);
  /// Θ_p as a new shared vector (a fresh Θ̂ for every island at once).
  std::shared_ptr<const std::vector<float>> gathered(int p) const;
  const Sent* sent(int p, int island) const;

  const FragmentPlan* plan_;
  SyncerSettings settings_;
  std::vector<float> params_;
  std::vector<OuterOptimizer> outer_;
  std::vector<std::uint64_t> rounds_;
  std::vector<std::vector<Pending>> pending_;
  std::vector<NormClip> clips_;  // [p]: the norm bound of merged outer gradients (not in snapshots:
                                 // a restored syncer starts again from clip_start)
  /// The clip's bound before 3 islands have a norm: the ratio bound at Θ_p as it is now (at the
  /// start or a restore), as an L2 norm.
  double clip_start(int p) const;
  std::vector<std::vector<std::uint64_t>> merged_base_;  // [p][island]: 1 + base round last merged (0: none)
  std::vector<std::vector<std::uint64_t>> merged_seq_;   // [p][island]: the highest seq merged or dropped (frames carry it)
  void settle(int p, const FragmentHeader& h);  // h's send is merged or dropped: merged_seq_ of its epoch
  std::vector<std::uint32_t> epochs_;  // [island]: the epoch its last join_reply gave (the high half of its seqs)
  std::vector<std::uint32_t> fresh_epoch_;  // [island]: the epoch of its last fresh join: sends from before are
                                            // an earlier life's (its θ dropped them), valid whatever follows;
                                            // below epochs_: its last join kept its parameters
  // h's send is of its island's life since its last fresh join (withdrawn when it re-joins keeping θ)
  bool this_life(const FragmentHeader& h) const;
  // The SHA-256 of Θ_p now (`theta`: its values, gathered by the caller), hashed once per round.
  const Sha256& digest_at_round(int p, std::span<const float> theta);
  std::vector<RoundState> state_;
  std::vector<bool> finished_;   // [island]: finished training (finish())
  int finished_count_ = 0;
  std::uint64_t finish_changes_ = 0, snapshot_finish_changes_ = 0;
  std::vector<std::uint64_t> last_step_;  // [island]: last local step heard of (heard())
  std::uint64_t held_sent_ = 0;           // join_reply() fragments marked held
  // [p]: the SHA-256 of Θ_p at `round` (join_reply() matches a request's holds against it). Θ_p
  // changes only with its round (a commit) or a restore, which forgets them all: one hash per
  // fragment and round, however many islands join.
  struct RoundDigest {
    bool known = false;
    std::uint64_t round = 0;
    Sha256 digest{};
  };
  std::vector<RoundDigest> digests_;
  std::uint64_t hashed_ = 0;  // fragments hashed by join_reply() (digests_ misses)
  StepClock clock_;                       // the islands' inner step time (heard(), join_reply())
  Status health_;
  FragmentInbox inbox_;
  RejectCounts refused_;         // frames the inbox accepted and receive() refused (out_of_bounds,
                                 // stale_round for withdrawn and overlapping sends)
  mutable SyncerStats stats_;
  std::uint64_t dropped_in_merge_ = 0;
  std::uint64_t snapshot_round_ = 0;
  std::vector<double> rx_, merged_, excess_;
  std::vector<float> theta_;
  std::vector<std::vector<Sent>> sent_;  // [p][island]
  std::vector<LastFrame> last_frame_;    // [p]
  std::vector<float> delta_, decoded_;
};

/// A syncer's state file (syncer.checkpoint) read for a (re)start: nullopt when there is none;
/// otherwise the checkpoint, or an error naming the file and what is wrong with it (unreadable,
/// not a diloco checkpoint, another model or fragment plan, NaN, syncer metadata that is not
/// what SyncerCore::snapshot writes). A syncer never starts over such a file silently: it
/// refuses to start, or, asked to start fresh, moves the file aside first (move_aside).
Expected<std::optional<Checkpoint>> load_syncer_state(const std::string& path, const ParamLayout& layout,
                                                      const FragmentPlan& plan, int islands);
/// The islands of a syncer state file that trained (a step heard of) and have not finished:
/// those a restarted syncer still counts on (a joiner's among them wait for it, JoinPool::reserve).
std::vector<int> islands_in_progress(const Checkpoint& cp, int islands);
/// Renames `path` to `path`.corrupt-N, N = 1, 2, ... the first name not taken, and returns it
/// (io_error when the rename fails): an unusable state file is kept for inspection, never
/// overwritten by the next snapshot.
Expected<std::string> move_aside(const std::string& path);

}  // namespace diloco
