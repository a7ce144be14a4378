// One island's training state as plain code (no actors): parameters, AdamW, fragment plan and
// schedule, per-fragment counters since the last send, outer-gradient frames and adoption (τ, α).
#pragma once

#include <cstdint>
#include <deque>
#include <limits>
#include <memory>
#include <ranges>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "diloco/checkpoint.hpp"
#include "diloco/codec.hpp"
#include "diloco/expected.hpp"
#include "diloco/fragments.hpp"
#include "diloco/merge.hpp"
#include "diloco/model.hpp"
#include "diloco/optim.hpp"
#include "diloco/wire.hpp"

namespace diloco {

/// What one chip computed for one inner step: its gradient and how many target tokens it covers.
/// It views the gradient and owns nothing: the vector holding it must outlive the ChipGradient.
/// A temporary container would be gone before apply_gradient reads it, so building one from a
/// temporary (`ChipGradient{std::vector<float>(n), ...}`) does not compile.
struct ChipGradient {
  ChipGradient(std::span<const float> g, std::uint64_t t, double l) : grads(g), tokens(t), loss(l) {}
  template <class Owner>
    requires(!std::is_lvalue_reference_v<Owner> && !std::ranges::borrowed_range<Owner>)
  ChipGradient(Owner&&, std::uint64_t, double) = delete;  // the view would dangle

  std::span<const float> grads;  // model-sized
  std::uint64_t tokens = 0;
  double loss = 0.0;
};

/// The chips' gradients of one step combined by tokens: out = Σ_c tokens_c·g_c / Σ_c tokens_c
/// (a dead chip's share is simply missing; a chip without tokens adds nothing). Returns the
/// token-weighted loss and sets `tokens`; without tokens, NaN and `out` untouched. Throws
/// std::invalid_argument if sizes differ.
double combine_chips(std::span<const ChipGradient> chips, std::vector<float>& out, std::uint64_t& tokens);

/// Chip `chip`'s share of its island's batch: train.batch windows per island per step, split
/// among the island's `chips` chips in order, B/chips windows each and one more for each of the
/// first B mod chips (a share is empty when the island has more chips than windows). The
/// shares' gradients combined by tokens (combine_chips) are the gradient of the whole batch, so
/// an island trains the same tokens and takes the same step whatever its chip count.
Batch chip_share(const Batch& batch, int chip, int chips);

/// How an island syncs (Streaming / Decoupled DiLoCo, arXiv 2501.18512, 2604.21428).
struct IslandSettings {
  int island = 0;
  SyncSchedule schedule;          // H, P: fragment p is due at local steps ≡ p·H/P (mod H)
  int tau = 0;                    // adopt a merged fragment τ steps after sending it
  double alpha = 0.0;             // θ_local ← α·θ_local + (1−α)·Θ_p on adoption
  CodecParams codec;              // encoding of outer gradients on the wire
  bool error_feedback = true;     // carry the quantisation residual (lossy encodings only)
  /// > 0: a sync cadence in time instead of steps (train.sync_every_s). Fragment p falls due
  /// every this many seconds of the island's clock (set_time), on a fixed phase: first at its
  /// offset from the island's first heal (p·period/P, one period for p = 0), then one period
  /// after the time it was due, whenever it was sent (later heals keep the phase). It is sent
  /// only with a step trained since its last send and no merge of it still queued (τ), and, as
  /// in steps, one period later while its last send awaits its merge. Islands of any speed then
  /// send equally fresh contributions (a slow one after fewer steps). 0: every H steps.
  double sync_every_s = 0.0;
  /// mix: always the α mix. rebase: a merged fragment that adds only other islands' progress
  /// (all of this island's sends of it are in the fragment it holds) is added as a change,
  /// θ_p += Θ_p,new − Θ_p,held, keeping the island's unsent progress whole. carry: as rebase, and
  /// a merged fragment that holds the island's last send mixes the θ_p it sent and adds the
  /// progress made since (AdoptRule).
  AdoptRule adopt = AdoptRule::mix;
  /// The run's islands (0: not known): the syncer's frames list merged sends of at most as many.
  int islands = 0;
  /// > 0: a bounded wait (hold_until). When the last send of a fragment is τ steps old and its
  /// merge has not arrived, the next step waits for it, up to this many of the island's inner
  /// steps (its measured step time, step_took). Once a wait ran out, the fragment's merges are
  /// not waited for again until one that settles its sends arrives (or a heal), so a syncer or
  /// link that stopped answering costs at most one wait per fragment. 0: never wait.
  double wait_steps = 0.0;
};

/// Solves "what does one island know and do" without any mailbox: the actor shell feeds it
/// chip gradients and broadcasts and ships the frames it produces. Parameters live behind a
/// shared pointer that chips read without copying; a step writes them in place unless a
/// straggling reader still holds the old vector (then it copies once: copy on write).
class IslandCore {
public:
  IslandCore(const ParamLayout& layout, const FragmentPlan& plan, IslandSettings settings, AdamWConfig inner,
             std::span<const float> initial);

  /// Read-only view shared with chips (no copy per step).
  std::shared_ptr<const std::vector<float>> shared_params() const { return params_; }
  std::span<const float> params() const { return *params_; }

  /// One AdamW inner step on the token-weighted mean of the chips' gradients (a dead chip's
  /// share is simply missing). Returns the token-weighted mean loss; with no tokens at all the
  /// step is skipped and NaN returned. Adoptions whose τ has elapsed are applied afterwards.
  /// A non-finite loss with tokens is divergence, not a missing answer: the step is not taken
  /// and health() says so (as it does for a non-finite gradient norm after a step).
  double apply_gradient(std::span<const ChipGradient> chips);

  /// Ok while the island's state is finite; otherwise errc::non_finite naming the island, the
  /// step and what was found (a NaN loss, a non-finite gradient, an outer gradient that holds
  /// NaN or infinity). A diverged island must stop: every further step or frame is worthless.
  const Status& health() const { return health_; }

  long step() const { return step_; }
  /// A restarted island continues the run's step count: the sync schedule's offsets stay
  /// aligned and the inner learning rate goes on from there (AdamW::resume_schedule).
  void resume_at(long step) {
    step_ = step;
    opt_.resume_schedule(step);
  }
  /// What a resumed run needs of this island: its parameters, AdamW's moments and step count,
  /// its local step (the sync schedule's and the learning rate's position) and per fragment the
  /// tokens and steps since its last send.
  IslandState state() const;
  /// Takes `s` back (a resumed run): the next step is the one the saved island would have taken,
  /// at the same learning rate. The global fragments come afterwards from the syncer's welcome
  /// (heal with keep_local), which re-bases them, so the progress since the last merge is sent
  /// again. Fails with checkpoint_mismatch when `s` is of another island, model or plan.
  Status restore(const IslandState& s);

  /// The island's clock (seconds; a parameter, so that the policy stays testable and simulated
  /// runs stay deterministic): what a time cadence (IslandSettings::sync_every_s) measures.
  void set_time(double now);
  /// Fragments due after the current local step, in index order.
  std::vector<int> due() const;
  /// Fragment p is due on its schedule (every H steps from its offset; after a heal, at the
  /// schedule's next step, or at the first step after one that passed over progress kept
  /// unsent: missed_point). Decoupled islands never
  /// wait, so the merge of their last contribution may not have reached them yet when the next
  /// one is due: sending then would repeat progress the syncer already merged (it refuses such a
  /// frame), so the send waits until the merge arrives (then it is due at once), or until 2H
  /// steps have passed since the last send (the merge may never come: a lost round). With a
  /// time cadence the same rule holds in seconds (sync_every_s, twice that while awaiting).
  bool due(int p) const;

  /// δ_p = Θ_p(base round) − θ_p quantised into a Cap'n Proto Fragment frame (wire.hpp), with
  /// the fragment's base round and its token/step counters since the last send (as the
  /// reference loops count them). Fails with non_finite if the local parameters diverged (and
  /// health() turns into that error). Records the send step for τ and restarts the counters.
  Expected<Frame> outer_gradient_frame(int p);

  /// A merged global fragment of `round` arrived (now = the current local step). Rounds not
  /// newer than the one held or queued are ignored (returns false). Applied at max(now,
  /// sent + τ): at once when due, else queued until apply_gradient reaches that step (a newer
  /// round replaces a queued older one). Applying re-bases the fragment.
  /// `merged_seq`: the highest seq of this island's sends of p that the syncer settled, merged
  /// or dropped (its FragmentHeader::merged_seq entry for it; 0: none, or not known).
  bool adopt(int p, std::uint64_t round, std::span<const float> values, std::uint64_t merged_seq = 0);
  /// Whether the syncer settled every send of fragment p as of the fragment the island holds:
  /// merged into it, or dropped for good. A newer fragment then carries other islands'
  /// progress only (fragments.adopt = "rebase"), and a winding-down island's last
  /// contributions are in (its final sync is over).
  bool sends_settled(int p) const {
    return merged_seq_[static_cast<std::size_t>(p)] >= sent_seq_[static_cast<std::size_t>(p)];
  }
  /// Adoptions applied as a rebase / as an α mix / as a mix of the sent θ_p carrying the
  /// progress since (AdoptRule::carry) since the start.
  std::uint64_t rebases() const { return rebases_; }
  std::uint64_t mixes() const { return mixes_; }
  std::uint64_t carries() const { return carries_; }
  /// Decodes and checks a broadcast from the syncer, then adopt()s it. Returns whether it was
  /// taken (false: not newer than what the island holds). A global_delta is added to the
  /// fragment the island holds (or has queued) of its from_round; if the island holds another
  /// round it missed a broadcast and fails with errc::missed_round: it must re-join (heal).
  Expected<bool> adopt_frame(std::span<const std::byte> frame);
  /// Heals from the syncer's current fragments: a fresh island (keep_local = false) takes them
  /// as its parameters; a running island re-joining a restarted syncer (keep_local = true)
  /// keeps its parameters and re-bases (Θ_p and base round), so its progress is resent. Where
  /// the syncer is past the round it holds (commits whose broadcasts it missed) and none of its
  /// sends can be in them, θ_p takes them as a rebase, whatever the adopt rule; where one may
  /// hold its last send, or the island was restored (its saved state keeps Θ_p, not its round),
  /// θ stays.
  /// A fragment the reply marks held (FragmentHeader::held) takes the values of the digest the
  /// syncer matched: those the island's last request named (holds()), whatever it adopted since,
  /// or else its global fragment now. Returns false, changing nothing, when it holds neither (a
  /// reply to an earlier request): the island must ask again.
  bool heal(const JoinReply& reply, bool keep_local);
  /// For a join request (JoinRequest::holds): the SHA-256 of each global fragment the island
  /// holds now (global(p): the run's start, or its saved state's, until its first heal, then the
  /// last it adopted). The
  /// values are kept until the reply, for the island may adopt a queued merge meanwhile.
  std::vector<std::vector<std::byte>> holds();
  /// The values the last holds() named, per fragment (heal_digests checks a held heal against
  /// them); drop_named() frees them once the heal is checked.
  const std::vector<std::vector<float>>& named() const { return named_; }
  void drop_named() { named_ = {}, named_digest_ = {}; }

  /// Applies every queued adoption now, whatever its τ: an island that trained its budget takes
  /// no further step to wait for, and its last outer gradients must be relative to the newest
  /// rounds it holds (the syncer refuses progress it already merged).
  void settle();
  /// After a re-join, the restarted syncer may lack fragment p's last contribution (it resumed
  /// from before it). With nothing trained since that send, a resend would carry no tokens and
  /// be refused: when the fragment still differs from the new base, the last send's counters are
  /// taken back so that the resend weighs what it carries. Returns whether there is anything to
  /// send (false: no progress since, and the new base already equals the island's fragment).
  bool take_back_last_send(int p);
  /// A contribution of fragment p was sent and no newer round has arrived since.
  bool awaiting(int p) const { return awaiting_[static_cast<std::size_t>(p)]; }

  /// Synchronous modes (DiLoCo / Streaming DiLoCo as in the reference loops): true while the
  /// next step may not start because a fragment sent at step s has no newer global round yet
  /// and s + τ ≤ the current step (the reference adopts it at the end of step s + τ).
  bool must_wait() const;

  /// The time a step of the island's chips took (seconds): an average of the last few steps
  /// times the bounded wait (IslandSettings::wait_steps).
  void step_took(double seconds);
  /// The island's measured step time (NaN before its first step).
  double step_time() const { return step_time_; }
  /// Decoupled with IslandSettings::wait_steps > 0, at time `now` before a step: until when the
  /// island holds that step for a merge it is due to adopt. Such a merge holds the island's last
  /// send of a fragment, sent at least τ steps ago and not yet known merged (sends_settled). The
  /// wait for a send starts the first time it is asked about and lasts wait_steps × step_time();
  /// once past, the fragment holds nothing until a merge settles its sends (or a heal). NaN: step
  /// now.
  double hold_until(double now);
  /// Waits that ran out (a fragment's, each time hold_until gave up on it) since the start.
  std::uint64_t wait_timeouts() const { return wait_timeouts_; }

  std::uint64_t base_round(int p) const { return base_round_[static_cast<std::size_t>(p)]; }
  /// Θ_p of the base round: the global fragment the island holds (syncer's Θ̂_p).
  std::span<const float> global(int p) const { return global_[static_cast<std::size_t>(p)]; }
  std::uint64_t tokens_since(int p) const { return tokens_[static_cast<std::size_t>(p)]; }
  std::uint64_t steps_since(int p) const { return steps_[static_cast<std::size_t>(p)]; }
  std::uint64_t tokens_total() const { return tokens_total_; }
  std::size_t pending_adoptions() const { return queue_.size(); }
  /// Per-fragment base rounds and counters as the progress message reports them.
  ProgressMessage progress() const;
  const IslandSettings& settings() const { return settings_; }
  const FragmentPlan& plan() const { return *plan_; }

private:
  /// Step schedule, no send since the last heal: the schedule's last point of fragment p when it
  /// passed (before this step) over progress still unsent, else -1.
  long missed_point(int p) const;
  std::vector<float>& writable();  // copy on write if a chip still reads the current vector
  // Adopts `values` as fragment p: θ_p ← α·θ_p + (1−α)·Θ_new (mix), θ_p + Θ_new − Θ_held
  // (rebase: the change is other islands' progress alone), or α·θ_sent + (1−α)·Θ_new + θ_p −
  // θ_sent (carry: the commit holds the island's last send).
  enum class Take { mix, rebase, carry };
  void take(int p, std::span<const float> values, Take how);
  void apply_ready();
  void diverged(const std::string& what);

  const ParamLayout* layout_;
  const FragmentPlan* plan_;
  IslandSettings settings_;
  AdamW opt_;
  std::shared_ptr<std::vector<float>> params_;
  std::vector<float> grad_;
  long step_ = 0;
  std::uint64_t tokens_total_ = 0;
  std::vector<std::vector<float>> global_;   // Θ_p of the base round
  std::vector<std::vector<float>> named_;    // per fragment: the values the last holds() named
  std::vector<Sha256> named_digest_;         // and their SHA-256
  std::vector<std::uint64_t> base_round_, tokens_, steps_;
  std::vector<std::uint64_t> sent_tokens_, sent_steps_;  // the counters of the last send per fragment
  std::vector<long> sent_at_;                // local step of the last send per fragment (-1: never)
  std::vector<std::uint64_t> sent_seq_;      // seq of the last send per fragment (0: none since the
                                             // last heal; UINT64_MAX: unknown, a send may be pending)
  std::vector<std::uint64_t> merged_seq_;    // the highest own seq of the current epoch known merged
  std::uint32_t epoch_ = 0;                  // the high half of the next seq: from the last join reply
  std::uint32_t sends_ = 0;                  // sends so far: the low half of the next seq (2^32
                                             // sends would wrap it: far beyond any run's)
  std::uint64_t rebases_ = 0, mixes_ = 0, carries_ = 0;
  std::vector<std::vector<float>> sent_theta_;  // AdoptRule::carry: θ_p at its last send (empty: none)
  std::vector<bool> awaiting_;               // sent, and no newer round received since
  double now_ = 0.0;                         // the island's clock (set_time)
  double step_time_ = std::numeric_limits<double>::quiet_NaN();  // step_took's average
  std::vector<std::uint64_t> wait_seq_;      // hold_until: the send whose wait started (0: none)
  std::vector<double> wait_since_;           // ... and when it started
  std::vector<bool> gave_up_;                // a wait ran out: no more until a merge of the sends comes
  std::uint64_t wait_timeouts_ = 0;
  std::vector<double> next_due_;             // time cadence: when each fragment falls due next (NaN: before the first heal)
  std::vector<ErrorFeedbackEncoder> ef_;
  struct Adoption {
    long apply_at;
    int p;
    std::uint64_t round;
    std::vector<float> values;
    std::uint64_t merged_seq = 0;  // the highest of this island's sends the fragment merged
  };
  std::deque<Adoption> queue_;
  std::vector<float> work_;
  Status health_;
};

}  // namespace diloco
