// The wire protocol between sites as plain structs: encode messages to Cap'n Proto frames
// (schemas/diloco.capnp, private to the library) and decode + validate frames from the network.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "diloco/codec.hpp"
#include "diloco/digest.hpp"
#include "diloco/expected.hpp"
#include "diloco/limits.hpp"

namespace diloco {

/// Version every frame carries; frames with any other version are refused (unsupported_version).
inline constexpr std::uint16_t protocol_version = 1;
/// Sender id of the syncer in fragments and heartbeats (islands are 0, 1, ...).
inline constexpr int syncer_id = -1;

enum class FragmentKind : std::uint8_t {
  outer_gradient = 0,  // island → syncer: δ = Θ_p − θ_p, based on global round `base_round`
  global_params = 1,   // syncer → island: Θ_p as of round `base_round`
  gradient = 2,        // ddp, island → syncer: the island's gradient on the parameters of step `base_round`
  global_delta = 3,    // syncer → island: the quantised change from the Θ̂_p of `from_round` (what every
                       // island holds) to Θ_p of `base_round`; Θ̂_p += decoded values (lossy broadcasts)
};

/// Everything a fragment message says besides its values.
struct FragmentHeader {
  FragmentKind kind = FragmentKind::outer_gradient;
  int island = 0;                // sender (syncer_id for global_params and global_delta)
  std::uint32_t index = 0;       // fragment number in the FragmentPlan
  std::uint64_t base_round = 0;  // round the delta is based on / round of these params
  std::uint64_t tokens = 0;      // tokens trained since base_round (merge weight); global_params
                                 // in a JoinReply: those of the island's send it withdrew (0: none)
  std::uint64_t steps = 0;       // inner steps since base_round (JoinReply: as tokens)
  std::uint64_t from_round = 0;  // global_delta: the round the change applies to (0 for other kinds)
  /// outer_gradient: the sender's number for this send of fragment `index`, increasing over its
  /// sends (0: unnumbered): the epoch its last join reply gave in the high 32 bits, a count of
  /// its sends in the low. global_params in a JoinReply: that epoch (SyncerCore::join_reply).
  std::uint64_t seq = 0;
  /// global_params / global_delta: per island, the highest `seq` of its outer gradients of its
  /// current epoch (its last join reply) that the syncer is done with as of this round: merged
  /// into the fragment, or dropped (too stale, or repeating merged progress) and never to be
  /// merged (0: none). An island reads whether all its sends are settled (IslandCore::
  /// sends_settled: rebasing, the end of its final sync). At most WireLimits::max_islands entries.
  std::vector<std::uint64_t> merged_seq;
  /// global_params in a JoinReply: the island holds these values already (JoinRequest::holds
  /// named their SHA-256): no values are sent, `count` still says how many. Refused anywhere else.
  bool held = false;
  /// held: the SHA-256 the syncer matched (the island takes the values of that digest).
  Sha256 held_digest{};
};

struct FragmentMessage {
  FragmentHeader header;
  Encoded data;
};

/// Per-fragment counters an island reports every step (Decoupled DiLoCo, arXiv 2604.21428).
struct FragmentCounters {
  std::uint32_t index = 0;
  std::uint64_t base_round = 0;
  std::uint64_t tokens = 0;
  std::uint64_t steps = 0;
};

struct ProgressMessage {
  int island = 0;
  std::uint64_t local_step = 0;
  std::vector<FragmentCounters> fragments;
  /// The island trained its budget and sent all its progress: the syncer stops counting on
  /// further contributions from it (its quorum shrinks; SyncerCore::finish).
  bool finished = false;
  /// The island's state holds NaN or infinity (IslandCore::health): the run cannot go on. Sent
  /// once, so that a syncer in another process ends the run instead of waiting for the island.
  bool diverged = false;
  /// The island's own inner step time in seconds (IslandCore::step_time: a running average of
  /// its wall time per step on its chips, its waits for a merge and its sends left out), which the
  /// syncer's grace windows count in where it is shorter than the time between two reports
  /// (StepClock); 0 when not measured yet. Finite and in [0, kMaxRunSeconds] or refused.
  double step_seconds = 0.0;
};

/// A (re)started island asking for the current global fragments (heal).
struct JoinRequest {
  int island = 0;
  std::uint64_t incarnation = 0;  // bumps on every restart
  /// Keeps its parameters through the heal (a re-join, or restored from a saved state): its
  /// progress goes out again from the new base (SyncerCore::join_reply).
  bool keeps_local = false;
  /// A site process's run time (seconds since its start) when the request reaches the syncer's
  /// process: the syncer plays the partitions of the island's site on that site's clock (the
  /// relay's SiteLinks::align).
  /// 0: the same process, nothing to align. Finite and in [0, kMaxRunSeconds] or refused.
  double run_s = 0.0;
  /// Per fragment of the plan, in index order: the SHA-256 of the global fragment the island
  /// holds (IslandCore::holds), or an empty entry for none. The syncer marks a fragment whose Θ_p
  /// has that digest held and sends no values (SyncerCore::join_reply). Empty: send every one.
  /// At most WireLimits::max_fragments entries, each 0 or 32 bytes, or refused.
  std::vector<std::vector<std::byte>> holds;
};

/// The largest run time a join request may carry (about 31 years): beyond it the frame is absurd.
inline constexpr double kMaxRunSeconds = 1e9;

/// The syncer's answer: every global fragment with its round (kind global_params); those the
/// request named with the digest of their values come marked held, without values.
struct JoinReply {
  std::vector<FragmentMessage> fragments;
};

struct Heartbeat {
  int sender = 0;
  std::uint64_t sequence = 0;
  std::uint64_t sent_at_ns = 0;  // sender's clock, passed in by the caller
};

/// How a run ended (RunOver): finished is a success; stopped (divergence) and failed are not.
enum class RunOutcome : std::uint8_t { finished = 0, stopped, failed };
std::string_view to_string(RunOutcome e);

/// The syncer's word to a site that the run is over: pushed to the sites in session when it
/// ends, and the answer to a site proving itself afterwards. The site stops retrying and exits
/// (0 for finished, 1 otherwise) instead of taking a gone syncer for a restarting one.
struct RunOver {
  RunOutcome outcome = RunOutcome::finished;
  std::string reason;  // for the site's log; at most max_run_over_reason bytes
};
inline constexpr std::size_t max_run_over_reason = 400;

using Message = std::variant<FragmentMessage, ProgressMessage, JoinRequest, JoinReply, Heartbeat, RunOver>;
enum class MessageType : std::uint8_t { fragment = 0, progress, join_request, join_reply, heartbeat, run_over };
std::string_view to_string(MessageType t);
std::string_view to_string(FragmentKind k);
MessageType type_of(const Message& m);

/// One serialised message: Cap'n Proto flat-array bytes (segment table, then segments).
using Frame = std::vector<std::byte>;

/// Sizes the receiver is prepared for: they bound every frame before it is read.
struct WireLimits {
  std::size_t max_fragment_values = std::size_t{1} << 28;  // values in one fragment (1 GiB as fp32)
  std::size_t max_fragments = 4096;                        // P
  std::size_t max_model_values = std::size_t{1} << 30;     // sum over fragments (JoinReply)
  std::size_t max_islands = 1024;                          // entries of a fragment's merged_seq
};

/// Largest legitimate frame of a type under `limits`: frames above it are refused before any
/// byte of them is interpreted (frame_too_large), and it bounds the Cap'n Proto traversal.
std::size_t max_frame_bytes(MessageType t, const WireLimits& limits);

/// Serialises any message (values are copied from the Encoded payloads). `term`: the sending
/// syncer leader's term (a replicated syncer), 0 for everyone else.
Frame encode_message(const Message& m, std::uint64_t term = 0);
/// Quantises `values` straight into a new fragment frame (no intermediate payload copy).
Expected<Frame> encode_fragment(const FragmentHeader& h, const CodecParams& p, std::span<const float> values,
                                std::uint64_t term = 0);
/// Same, with error feedback: the quantisation residual is carried into `ef`'s next send.
Expected<Frame> encode_fragment(const FragmentHeader& h, ErrorFeedbackEncoder& ef, std::span<const float> values,
                                std::uint64_t term = 0);

/// The term a frame carries (its envelope only is read, as for the version): the sending syncer
/// leader's term, 0 from anyone else. A frame that is not even an envelope is refused as
/// decode_message would refuse it.
Expected<std::uint64_t> frame_term(std::span<const std::byte> frame);
/// A frame from a syncer, judged by its term against `newest`, the newest leader term the
/// receiver has seen: a frame of an older term comes from a deposed leader and is refused
/// (stale_term). Term 0 (no replicated syncer) is older than any leader's term.
Status admit_term(std::span<const std::byte> frame, std::uint64_t newest);

/// Structural decode of any frame: size and segment table before reading, per-type frame and
/// traversal limits, protocol version, encoding, lengths, finite values. Nothing about the
/// receiver's state is checked (see FragmentInbox). Payloads are copied into the result.
Expected<Message> decode_message(std::span<const std::byte> frame, const WireLimits& limits = {});

/// A frame a relay passes on from a site, and the island it speaks for.
struct SiteFrame {
  Message message;
  int island = -1;
};
/// The relay's check of a frame from a site (before the syncer sees it): it decodes, carries a
/// `want` message (unexpected_message otherwise) and speaks for one of the site's `islands`
/// (unknown_sender otherwise). Only join requests, progress and fragments speak for an island.
/// `site` names the site in the refusal.
Expected<SiteFrame> admit_site_frame(std::span<const std::byte> frame, MessageType want,
                                     std::span<const int> islands, std::string_view site,
                                     const WireLimits& limits = {});

/// What a receiver knows, to judge an incoming fragment against its run.
struct WireContext {
  std::vector<std::size_t> fragment_sizes;  // values per fragment (FragmentPlan::size(p))
  std::vector<std::uint64_t> rounds;        // receiver's current round per fragment
  int islands = 0;                          // known senders of outer gradients: 0..islands-1
  FragmentKind accept = FragmentKind::outer_gradient;
  std::uint64_t max_staleness = 4;          // outer gradients older than this many rounds are stale
  std::uint64_t max_tokens_per_step = kMaxTokensPerStep;  // an outer gradient's tokens / steps, at most
  WireLimits limits;
};

/// Checks a decoded fragment header against the receiver's state: kind, known fragment and
/// sender, count equal to the fragment size, round neither from the future nor too stale,
/// counters usable as merge weights. A receiver accepting global_params also takes
/// global_delta (both are the syncer's broadcast); whether it holds the delta's from_round is
/// its own business (IslandCore::adopt_frame).
Status check_fragment(const FragmentHeader& h, std::size_t count, const WireContext& ctx);

/// Receiving end for fragment frames: validates everything and decodes straight into the
/// caller's buffer, counting each rejection by code. A rejected frame writes nothing into the
/// buffer but zeros, so nothing from it can reach a parameter.
class FragmentInbox {
public:
  struct Received {
    FragmentHeader header;
    CodecParams params;
    std::size_t count = 0;        // values written to out[0, count)
    std::size_t frame_bytes = 0;  // bytes this message took on the wire
  };

  explicit FragmentInbox(WireContext ctx);
  /// `out` must hold at least the fragment's size; decoded values go to out[0, count).
  Expected<Received> receive(std::span<const std::byte> frame, std::span<float> out);
  Expected<Received> receive(std::span<const std::byte> frame, std::span<double> out);

  /// The receiver's round of fragment p moved on (after a merge or an adopted broadcast).
  void set_round(std::uint32_t p, std::uint64_t round);
  const WireContext& context() const { return ctx_; }
  const RejectCounts& rejected() const { return rejected_; }
  std::uint64_t accepted() const { return accepted_; }
  /// The header of the frame the last receive refused as stale_round (a known sender's
  /// well-formed frame, based on a round too old), else empty: what the syncer settles.
  const std::optional<FragmentHeader>& stale() const { return stale_; }

private:
  template <class Out>
  Expected<Received> receive_impl(std::span<const std::byte> frame, std::span<Out> out);

  WireContext ctx_;
  RejectCounts rejected_;
  std::uint64_t accepted_ = 0;
  std::vector<std::uint64_t> aligned_;  // copy of frames that arrive unaligned
  std::vector<float> scales_;
  std::optional<FragmentHeader> stale_;
};

}  // namespace diloco
