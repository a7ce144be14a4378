// Cap'n Proto framing of the wire protocol. The generated schema code stays in this file:
// every kj::Exception is caught here and returned as an errc value.
#include "diloco/wire.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <kj/exception.h>

#include "diloco.capnp.h"
#include "diloco/limits.hpp"

namespace diloco {

namespace schema = wire::schema;
static_assert(std::endian::native == std::endian::little, "frames are built and read in place");
static_assert(schema::PROTOCOL_VERSION == protocol_version, "schemas/diloco.capnp and wire.hpp disagree");

namespace {

constexpr std::size_t kMaxSegments = 512;
constexpr std::size_t kSmallMessageBytes = 512;   // any message's fixed part, with room to grow
constexpr std::uint64_t kPeekTraversalWords = 64; // enough for the envelope of any version

std::string num(std::uint64_t x) { return std::to_string(x); }
std::string secs(double x) {  // %g: a tiny negative time reads as such, not as "-0.000000"
  char b[32];
  std::snprintf(b, sizeof b, "%g", x);
  return b;
}
// A time `what` (seconds) in island `island`'s `message`: finite and in [0, kMaxRunSeconds], or
// the refusal. The reason is only written for a refusal (progress is decoded every step).
std::optional<Error> refuse_seconds(double x, const char* message, std::int64_t island, const char* what) {
  const bool finite = std::isfinite(x);
  if (finite && x >= 0.0 && x <= kMaxRunSeconds) return std::nullopt;
  std::string why = std::string(message) + " of island " + std::to_string(island) + " carries " + what + " " + secs(x);
  if (!finite) return Error{errc::non_finite, std::move(why)};
  return Error{errc::out_of_bounds, why + " s, outside [0, " + num(static_cast<std::uint64_t>(kMaxRunSeconds)) + "]"};
}

// A MessageBuilder whose first segment is the tail of the output frame, so a message that fits
// its size estimate is built in place: the frame is the 8-byte segment table plus that segment.
class FrameBuilder final : public capnp::MessageBuilder {
public:
  explicit FrameBuilder(std::size_t words) : frame_(8 + 8 * words), capacity_(words) {}

  kj::ArrayPtr<capnp::word> allocateSegment(unsigned minimumSize) override {
    if (!first_used_ && minimumSize <= capacity_) {
      first_used_ = true;
      return {reinterpret_cast<capnp::word*>(frame_.data() + 8), capacity_};
    }
    extra_.emplace_back(std::max<std::size_t>(minimumSize, 1024), 0);  // zeroed, as capnp requires
    return {reinterpret_cast<capnp::word*>(extra_.back().data()), extra_.back().size()};
  }

  Frame finish() {
    auto segs = getSegmentsForOutput();
    if (segs.size() == 1 && reinterpret_cast<const std::byte*>(segs[0].begin()) == frame_.data() + 8) {
      const std::uint32_t table[2] = {0, static_cast<std::uint32_t>(segs[0].size())};
      std::memcpy(frame_.data(), table, 8);
      frame_.resize(8 + 8 * segs[0].size());
      return std::move(frame_);
    }
    auto flat = capnp::messageToFlatArray(segs);  // estimate too small: fall back to a copy
    auto bytes = flat.asBytes();
    return Frame(reinterpret_cast<const std::byte*>(bytes.begin()), reinterpret_cast<const std::byte*>(bytes.end()));
  }

private:
  Frame frame_;
  std::size_t capacity_;
  bool first_used_ = false;
  std::vector<std::vector<std::uint64_t>> extra_;
};

std::size_t words_for(std::size_t bytes) { return (bytes + 7) / 8; }
std::size_t fragment_words(std::size_t scales, std::size_t payload, std::size_t merged_seq = 0) {
  return 48 + words_for(4 * scales) + words_for(payload) + merged_seq;
}
std::size_t fragment_words(const FragmentMessage& f) {
  return fragment_words(f.data.scales.size(), f.data.payload.size(), f.header.merged_seq.size());
}

void fill_header(schema::Fragment::Builder f, const FragmentHeader& h, const CodecParams& p, std::size_t count) {
  f.setKind(static_cast<schema::FragmentKind>(h.kind));
  f.setIsland(h.island);
  f.setIndex(h.index);
  f.setBaseRound(h.base_round);
  f.setTokens(h.tokens);
  f.setSteps(h.steps);
  f.setFromRound(h.from_round);
  f.setSeq(h.seq);
  f.setHeld(h.held);
  if (h.held) f.setHeldDigest(kj::arrayPtr(reinterpret_cast<const kj::byte*>(h.held_digest.data()), h.held_digest.size()));
  if (!h.merged_seq.empty()) {
    auto ms = f.initMergedSeq(static_cast<unsigned>(h.merged_seq.size()));
    for (unsigned i = 0; i < h.merged_seq.size(); ++i) ms.set(i, h.merged_seq[i]);
  }
  f.setEncoding(static_cast<schema::Encoding>(p.encoding));
  f.setBlockSize(has_scales(p.encoding) ? p.block_size : 0);
  f.setCount(count);
}

void fill_fragment(schema::Fragment::Builder f, const FragmentMessage& m) {
  fill_header(f, m.header, m.data.params, m.data.count);
  auto sl = f.initScales(static_cast<unsigned>(m.data.scales.size()));
  for (unsigned i = 0; i < m.data.scales.size(); ++i) sl.set(i, m.data.scales[i]);
  f.setPayload(kj::arrayPtr(reinterpret_cast<const kj::byte*>(m.data.payload.data()), m.data.payload.size()));
}

template <class EncodeFn>
Expected<Frame> build_fragment(const FragmentHeader& h, const CodecParams& p, std::size_t n, std::uint64_t term,
                               EncodeFn&& encode_fn) {
  if (auto st = check(p); !st) return st.error();
  const std::size_t ns = scale_count(p, n);
  const std::size_t pb = payload_bytes(p.encoding, n);
  FrameBuilder b(fragment_words(ns, pb, h.merged_seq.size()));
  auto env = b.initRoot<schema::Envelope>();
  env.setVersion(protocol_version);
  env.setTerm(term);
  auto f = env.initFragment();
  fill_header(f, h, p, n);
  auto sl = f.initScales(static_cast<unsigned>(ns));
  auto data = f.initPayload(pb);
  std::vector<float> scales(ns);
  if (auto st = encode_fn(std::span<float>(scales), std::span<std::uint8_t>(data.begin(), data.size())); !st)
    return st.error();
  for (unsigned i = 0; i < ns; ++i) sl.set(i, scales[i]);
  return b.finish();
}

// ---- reading ----

struct Words {
  kj::ArrayPtr<const capnp::word> words;
};

// Everything that can be checked before Cap'n Proto reads a byte: size, alignment, the segment
// table against the frame length. Copies unaligned frames into `scratch`.
Expected<Words> frame_words(std::span<const std::byte> frame, std::size_t max_bytes, std::vector<std::uint64_t>& scratch) {
  const std::size_t n = frame.size();
  if (n < 8) return Error{errc::truncated, "frame of " + num(n) + " bytes is shorter than a segment table (8 bytes)"};
  if (n % 8) return Error{errc::truncated, "frame of " + num(n) + " bytes is not a whole number of 8-byte words"};
  if (n > max_bytes)
    return Error{errc::frame_too_large, "frame of " + num(n) + " bytes exceeds the " + num(max_bytes) + "-byte limit"};
  auto u32 = [&](std::size_t i) {
    std::uint32_t v;
    std::memcpy(&v, frame.data() + 4 * i, 4);
    return v;
  };
  const std::uint64_t nseg = std::uint64_t{u32(0)} + 1;
  if (nseg > kMaxSegments) return Error{errc::malformed, "segment table announces " + num(nseg) + " segments (max " + num(kMaxSegments) + ")"};
  const std::size_t table = 8 * ((nseg + 2) / 2);
  if (n < table) return Error{errc::truncated, "frame of " + num(n) + " bytes is shorter than its " + num(table) + "-byte segment table"};
  std::uint64_t words = 0;
  for (std::size_t i = 0; i < nseg; ++i) words += u32(1 + i);
  const std::uint64_t body = n - table;
  if (words * 8 > body)
    return Error{errc::truncated, "segment table announces " + num(words * 8) + " bytes of segments, frame carries " + num(body)};
  if (words * 8 < body)
    return Error{errc::malformed, "frame carries " + num(body - words * 8) + " bytes after its last segment"};
  if (reinterpret_cast<std::uintptr_t>(frame.data()) % alignof(capnp::word) == 0)
    return Words{{reinterpret_cast<const capnp::word*>(frame.data()), n / 8}};
  scratch.resize(n / 8);
  std::memcpy(scratch.data(), frame.data(), n);
  return Words{{reinterpret_cast<const capnp::word*>(scratch.data()), n / 8}};
}

Error kj_error(const kj::Exception& e) {
  return {errc::malformed, "not a valid message: " + std::string(e.getDescription().cStr())};
}

struct Peek {
  std::uint16_t version = 0;
  MessageType type = MessageType::fragment;
  std::uint64_t term = 0;
};

// Reads only the envelope (version and union tag) with a tiny traversal limit.
Expected<Peek> peek(Words w) {
  try {
    capnp::ReaderOptions o;
    o.traversalLimitInWords = kPeekTraversalWords;
    o.nestingLimit = 4;
    capnp::FlatArrayMessageReader r(w.words, o);
    auto env = r.getRoot<schema::Envelope>();
    Peek p;
    p.version = env.getVersion();
    if (p.version != protocol_version)
      return Error{errc::unsupported_version, "protocol version " + num(p.version) + ", this build speaks " + num(protocol_version)};
    const auto which = static_cast<unsigned>(env.which());
    if (which > static_cast<unsigned>(MessageType::run_over))
      return Error{errc::unexpected_message, "unknown message type " + num(which)};
    // The union's members are declared in MessageType order.
    p.type = static_cast<MessageType>(which);
    p.term = env.getTerm();
    return p;
  } catch (const kj::Exception& e) {
    return kj_error(e);
  }
}

capnp::ReaderOptions full_options(Words w) {
  capnp::ReaderOptions o;
  // A legitimate message reads each of its words once; the frame already passed the type's
  // size bound, so its own length is what this message can legitimately need.
  o.traversalLimitInWords = w.words.size() + 8;
  o.nestingLimit = 8;
  return o;
}

// Header, codec params and count of a fragment, with the structural checks that need no state.
struct RawFragment {
  FragmentHeader header;
  CodecParams params;
  std::size_t count = 0;
};

Expected<RawFragment> read_header(schema::Fragment::Reader f, const WireLimits& limits) {
  const std::size_t max_values = limits.max_fragment_values;
  RawFragment r;
  const auto kind = static_cast<unsigned>(f.getKind());
  if (kind > static_cast<unsigned>(FragmentKind::global_delta))
    return Error{errc::malformed, "unknown fragment kind " + num(kind)};
  r.header.kind = static_cast<FragmentKind>(kind);
  r.header.island = f.getIsland();
  r.header.index = f.getIndex();
  r.header.base_round = f.getBaseRound();
  r.header.tokens = f.getTokens();
  r.header.steps = f.getSteps();
  r.header.from_round = f.getFromRound();
  r.header.seq = f.getSeq();
  r.header.held = f.getHeld();
  if (r.header.tokens > kMaxCounter || r.header.steps > kMaxCounter || r.header.base_round > kMaxCounter ||
      r.header.from_round > kMaxCounter)
    return Error{errc::bad_counters, "fragment " + num(r.header.index) + " counts " + num(r.header.tokens) + " tokens, " +
                                         num(r.header.steps) + " steps, rounds " + num(r.header.from_round) + " to " +
                                         num(r.header.base_round) + " (at most " + num(kMaxCounter) + " each)"};
  if (f.hasMergedSeq()) {
    auto ms = f.getMergedSeq();
    if (ms.size() > limits.max_islands)
      return Error{errc::malformed, "merged_seq lists " + num(ms.size()) + " islands (max " + num(limits.max_islands) + ")"};
    r.header.merged_seq.reserve(ms.size());
    for (auto x : ms) r.header.merged_seq.push_back(x);
  }
  const auto enc = static_cast<unsigned>(f.getEncoding());
  if (enc >= static_cast<unsigned>(encoding_count))
    return Error{errc::unknown_encoding, "encoding id " + num(enc) + " is not one of fp32, bf16, int8, int4, e3m0"};
  r.params.encoding = static_cast<Encoding>(enc);
  r.params.block_size = f.getBlockSize();
  if (!has_scales(r.params.encoding) && r.params.block_size != 0)
    return Error{errc::bad_block_size, "block size " + num(r.params.block_size) + " set for " +
                                           std::string(to_string(r.params.encoding)) + ", which has no scales"};
  if (auto st = check(r.params); !st) return st.error();
  const std::uint64_t count = f.getCount();
  if (count > max_values)
    return Error{errc::wrong_length, "fragment of " + num(count) + " values exceeds the limit of " + num(max_values)};
  r.count = static_cast<std::size_t>(count);
  return r;
}

// Copies the scales after checking their number (so a hostile count cannot make us allocate).
Status read_scales(schema::Fragment::Reader f, const RawFragment& r, std::vector<float>& out) {
  auto sl = f.getScales();
  const std::size_t want = scale_count(r.params, r.count);
  if (sl.size() != want)
    return Error{errc::wrong_length, "message has " + num(sl.size()) + " scales, " + num(r.count) + " values in blocks of " +
                                         num(r.params.block_size) + " need " + num(want)};
  out.resize(want);
  for (unsigned i = 0; i < want; ++i) out[i] = sl[i];
  return {};
}

std::span<const std::uint8_t> payload_of(schema::Fragment::Reader f) {
  auto d = f.getPayload();
  return {reinterpret_cast<const std::uint8_t*>(d.begin()), d.size()};
}

Expected<FragmentMessage> read_fragment_message(schema::Fragment::Reader f, const WireLimits& limits) {
  auto raw = read_header(f, limits);
  if (!raw) return raw.error();
  FragmentMessage m;
  m.header = raw->header;
  m.data.params = raw->params;
  m.data.count = raw->count;
  if (auto st = read_scales(f, *raw, m.data.scales); !st) return st.error();
  auto payload = payload_of(f);
  const auto digest = f.getHeldDigest();
  if (m.header.held) {  // the island's own values stand for these: nothing to read or check
    if (m.header.kind != FragmentKind::global_params || m.data.params.encoding != Encoding::fp32 || !payload.empty() ||
        digest.size() != m.header.held_digest.size())
      return Error{errc::malformed, "fragment " + num(m.header.index) + " is marked held but is a " +
                                        std::string(to_string(m.header.kind)) + " in " +
                                        std::string(to_string(m.data.params.encoding)) + " with " + num(payload.size()) +
                                        " payload bytes and a digest of " + num(digest.size()) +
                                        " (held: global_params, fp32, no payload, a 32-byte SHA-256)"};
    std::memcpy(m.header.held_digest.data(), digest.begin(), digest.size());
    return m;
  }
  if (digest.size() != 0)
    return Error{errc::malformed, "fragment " + num(m.header.index) + " carries a held digest but is not marked held"};
  EncodedView view(m.data.params, m.data.count, m.data.scales, payload);
  if (auto st = validate(view); !st) return st.error();
  if (!has_scales(m.data.params.encoding)) {  // scaled encodings are finite by validate()
    std::vector<float> tmp(m.data.count);
    if (auto st = decode(view, std::span<float>(tmp)); !st) return st.error();
  }
  m.data.payload.assign(payload.begin(), payload.end());
  return m;
}

Expected<Message> read_message(const schema::Envelope::Reader& env, MessageType type, const WireLimits& limits) {
  switch (type) {
    case MessageType::fragment: {
      auto m = read_fragment_message(env.getFragment(), limits);
      if (!m) return m.error();
      if (m->header.held)
        return Error{errc::malformed, "fragment " + num(m->header.index) + " is marked held outside a join reply"};
      return Message(std::move(*m));
    }
    case MessageType::progress: {
      auto p = env.getProgress();
      ProgressMessage m;
      m.island = p.getIsland();
      m.local_step = p.getLocalStep();
      m.finished = p.getFinished();
      m.diverged = p.getDiverged();
      m.step_seconds = p.getStepSeconds();
      if (auto bad = refuse_seconds(m.step_seconds, "progress", m.island, "step time"))
        return *bad;
      auto list = p.getFragments();
      if (list.size() > limits.max_fragments)
        return Error{errc::wrong_length, "progress reports " + num(list.size()) + " fragments, limit " + num(limits.max_fragments)};
      for (auto c : list) m.fragments.push_back({c.getIndex(), c.getBaseRound(), c.getTokens(), c.getSteps()});
      bool absurd = m.local_step > kMaxCounter;
      for (const auto& c : m.fragments) absurd |= c.base_round > kMaxCounter || c.tokens > kMaxCounter || c.steps > kMaxCounter;
      if (absurd)
        return Error{errc::bad_counters, "progress of island " + std::to_string(m.island) + " at step " + num(m.local_step) +
                                             " counts more than " + num(kMaxCounter) + " steps, tokens or rounds"};
      return Message(std::move(m));
    }
    case MessageType::join_request: {
      auto j = env.getJoinRequest();
      const double run_s = j.getRunSeconds();
      if (auto bad = refuse_seconds(run_s, "join request", j.getIsland(), "run time"))
        return *bad;
      JoinRequest m{j.getIsland(), j.getIncarnation(), j.getKeepsLocal(), run_s, {}};
      auto holds = j.getHolds();
      if (holds.size() > limits.max_fragments)
        return Error{errc::wrong_length, "join request of island " + std::to_string(m.island) + " names " +
                                             num(holds.size()) + " held fragments, limit " + num(limits.max_fragments)};
      m.holds.reserve(holds.size());
      for (auto d : holds) {
        if (d.size() != 0 && d.size() != std::tuple_size_v<Sha256>)
          return Error{errc::malformed, "join request of island " + std::to_string(m.island) + ": held fragment " +
                                            num(m.holds.size()) + " has a digest of " + num(d.size()) +
                                            " bytes (SHA-256: 32, or 0 for none)"};
        const auto* b = reinterpret_cast<const std::byte*>(d.begin());
        m.holds.emplace_back(b, b + d.size());
      }
      return Message(std::move(m));
    }
    case MessageType::join_reply: {
      auto list = env.getJoinReply().getFragments();
      if (list.size() > limits.max_fragments)
        return Error{errc::wrong_length, "join reply carries " + num(list.size()) + " fragments, limit " + num(limits.max_fragments)};
      JoinReply m;
      std::size_t total = 0;
      for (auto f : list) {
        auto fm = read_fragment_message(f, limits);
        if (!fm) return Error{fm.error().code, "join reply fragment " + num(m.fragments.size()) + ": " + fm.error().reason};
        if (fm->header.kind != FragmentKind::global_params)
          return Error{errc::unexpected_message, "join reply fragment " + num(m.fragments.size()) + " is a " +
                                                     std::string(to_string(fm->header.kind)) + ", not global_params"};
        total += fm->data.count;
        if (total > limits.max_model_values)
          return Error{errc::wrong_length, "join reply exceeds " + num(limits.max_model_values) + " values"};
        m.fragments.push_back(std::move(*fm));
      }
      return Message(std::move(m));
    }
    case MessageType::heartbeat: {
      auto h = env.getHeartbeat();
      return Message(Heartbeat{h.getSender(), h.getSequence(), h.getSentAtNanos()});
    }
    case MessageType::run_over: {
      auto o = env.getRunOver();
      const auto outcome = static_cast<unsigned>(o.getOutcome());
      if (outcome > static_cast<unsigned>(RunOutcome::failed)) return Error{errc::malformed, "unknown run outcome " + num(outcome)};
      auto why = o.getReason();
      if (why.size() > max_run_over_reason)
        return Error{errc::wrong_length, "run-over reason of " + num(why.size()) + " bytes, limit " + num(max_run_over_reason)};
      return Message(RunOver{static_cast<RunOutcome>(outcome), std::string(why.cStr(), why.size())});
    }
  }
  return Error{errc::unexpected_message, "unknown message type"};
}

std::size_t overall_max_bytes(const WireLimits& l) {
  std::size_t m = 0;
  for (int t = 0; t <= static_cast<int>(MessageType::run_over); ++t) m = std::max(m, max_frame_bytes(static_cast<MessageType>(t), l));
  return m;
}

}  // namespace

std::string_view to_string(MessageType t) {
  switch (t) {
    case MessageType::fragment: return "fragment";
    case MessageType::progress: return "progress";
    case MessageType::join_request: return "join_request";
    case MessageType::join_reply: return "join_reply";
    case MessageType::heartbeat: return "heartbeat";
    case MessageType::run_over: return "run_over";
  }
  return "unknown";
}

std::string_view to_string(RunOutcome e) {
  switch (e) {
    case RunOutcome::finished: return "finished";
    case RunOutcome::stopped: return "stopped";
    case RunOutcome::failed: return "failed";
  }
  return "?";
}

std::string_view to_string(FragmentKind k) {
  switch (k) {
    case FragmentKind::outer_gradient: return "outer_gradient";
    case FragmentKind::global_params: return "global_params";
    case FragmentKind::gradient: return "gradient";
    case FragmentKind::global_delta: return "global_delta";
  }
  return "?";
}

MessageType type_of(const Message& m) { return static_cast<MessageType>(m.index()); }

std::size_t max_frame_bytes(MessageType t, const WireLimits& l) {
  // Worst case per value is int8 with one scale per value: 1 + 4 bytes.
  switch (t) {
    case MessageType::fragment: return kSmallMessageBytes + 5 * l.max_fragment_values + 8 * l.max_islands;
    case MessageType::progress: return kSmallMessageBytes + 40 * l.max_fragments;
    case MessageType::join_request: return kSmallMessageBytes + 48 * l.max_fragments;  // a digest: 32 bytes + a pointer
    case MessageType::heartbeat: return kSmallMessageBytes;
    case MessageType::run_over: return kSmallMessageBytes + max_run_over_reason;
    case MessageType::join_reply: return kSmallMessageBytes * (1 + l.max_fragments) + 5 * l.max_model_values;
  }
  return kSmallMessageBytes;
}

Frame encode_message(const Message& m, std::uint64_t term) {
  std::size_t words = kSmallMessageBytes / 8;
  if (auto* f = std::get_if<FragmentMessage>(&m)) words += fragment_words(*f);
  if (auto* p = std::get_if<ProgressMessage>(&m)) words += 5 * p->fragments.size();
  if (std::holds_alternative<RunOver>(m)) words += max_run_over_reason / 8 + 1;
  if (auto* j = std::get_if<JoinRequest>(&m)) words += 5 * j->holds.size();
  if (auto* j = std::get_if<JoinReply>(&m))
    for (const auto& f : j->fragments) words += fragment_words(f);
  FrameBuilder b(words);
  auto env = b.initRoot<schema::Envelope>();
  env.setVersion(protocol_version);
  env.setTerm(term);
  std::visit(
      [&](const auto& msg) {
        using T = std::decay_t<decltype(msg)>;
        if constexpr (std::is_same_v<T, FragmentMessage>) {
          fill_fragment(env.initFragment(), msg);
        } else if constexpr (std::is_same_v<T, ProgressMessage>) {
          auto p = env.initProgress();
          p.setIsland(msg.island);
          p.setLocalStep(msg.local_step);
          p.setFinished(msg.finished);
          p.setDiverged(msg.diverged);
          p.setStepSeconds(msg.step_seconds);
          auto list = p.initFragments(static_cast<unsigned>(msg.fragments.size()));
          for (unsigned i = 0; i < msg.fragments.size(); ++i) {
            list[i].setIndex(msg.fragments[i].index);
            list[i].setBaseRound(msg.fragments[i].base_round);
            list[i].setTokens(msg.fragments[i].tokens);
            list[i].setSteps(msg.fragments[i].steps);
          }
        } else if constexpr (std::is_same_v<T, JoinRequest>) {
          auto j = env.initJoinRequest();
          j.setIsland(msg.island);
          j.setIncarnation(msg.incarnation);
          j.setKeepsLocal(msg.keeps_local);
          j.setRunSeconds(msg.run_s);
          if (!msg.holds.empty()) {
            auto list = j.initHolds(static_cast<unsigned>(msg.holds.size()));
            for (unsigned i = 0; i < msg.holds.size(); ++i)
              list.set(i, kj::arrayPtr(reinterpret_cast<const kj::byte*>(msg.holds[i].data()), msg.holds[i].size()));
          }
        } else if constexpr (std::is_same_v<T, JoinReply>) {
          auto list = env.initJoinReply().initFragments(static_cast<unsigned>(msg.fragments.size()));
          for (unsigned i = 0; i < msg.fragments.size(); ++i) fill_fragment(list[i], msg.fragments[i]);
        } else if constexpr (std::is_same_v<T, Heartbeat>) {
          auto h = env.initHeartbeat();
          h.setSender(msg.sender);
          h.setSequence(msg.sequence);
          h.setSentAtNanos(msg.sent_at_ns);
        } else {
          auto o = env.initRunOver();
          o.setOutcome(static_cast<schema::RunOutcome>(msg.outcome));
          // Cut to the limit a receiver holds it to (at a UTF-8 boundary).
          std::size_t n = std::min(msg.reason.size(), max_run_over_reason);
          while (n > 0 && n < msg.reason.size() && (static_cast<unsigned char>(msg.reason[n]) & 0xC0) == 0x80) --n;
          o.setReason(kj::StringPtr(msg.reason.substr(0, n).c_str()));
        }
      },
      m);
  return b.finish();
}

Expected<Frame> encode_fragment(const FragmentHeader& h, const CodecParams& p, std::span<const float> values,
                                std::uint64_t term) {
  return build_fragment(h, p, values.size(), term, [&](std::span<float> scales, std::span<std::uint8_t> payload) {
    return encode_into(p, values, scales, payload);
  });
}

Expected<Frame> encode_fragment(const FragmentHeader& h, ErrorFeedbackEncoder& ef, std::span<const float> values,
                                std::uint64_t term) {
  return build_fragment(h, ef.params(), values.size(), term, [&](std::span<float> scales, std::span<std::uint8_t> payload) {
    return ef.encode_into(values, scales, payload);
  });
}

Expected<std::uint64_t> frame_term(std::span<const std::byte> frame) {
  std::vector<std::uint64_t> scratch;
  auto w = frame_words(frame, overall_max_bytes(WireLimits{}), scratch);
  if (!w) return w.error();
  auto p = peek(*w);
  if (!p) return p.error();
  return p->term;
}

Status admit_term(std::span<const std::byte> frame, std::uint64_t newest) {
  auto t = frame_term(frame);
  if (!t) return t.error();
  if (*t < newest)
    return Error{errc::stale_term, "frame of term " + num(*t) + " from a deposed syncer leader (the newest term is " +
                                       num(newest) + ")"};
  return {};
}

Expected<Message> decode_message(std::span<const std::byte> frame, const WireLimits& limits) {
  std::vector<std::uint64_t> scratch;
  auto w = frame_words(frame, overall_max_bytes(limits), scratch);
  if (!w) return w.error();
  auto p = peek(*w);
  if (!p) return p.error();
  const std::size_t bound = max_frame_bytes(p->type, limits);
  if (frame.size() > bound)
    return Error{errc::frame_too_large, std::string(to_string(p->type)) + " frame of " + num(frame.size()) +
                                            " bytes exceeds the " + num(bound) + "-byte limit of its type"};
  try {
    capnp::FlatArrayMessageReader r(w->words, full_options(*w));
    return read_message(r.getRoot<schema::Envelope>(), p->type, limits);
  } catch (const kj::Exception& e) {
    return kj_error(e);
  }
}

Expected<SiteFrame> admit_site_frame(std::span<const std::byte> frame, MessageType want,
                                     std::span<const int> islands, std::string_view site,
                                     const WireLimits& limits) {
  auto msg = decode_message(frame, limits);
  if (!msg) return msg.error();
  if (type_of(*msg) != want)
    return Error{errc::unexpected_message, "unexpected " + std::string(to_string(type_of(*msg))) + " message"};
  int island = -1;
  if (auto* j = std::get_if<JoinRequest>(&*msg)) island = j->island;
  else if (auto* p = std::get_if<ProgressMessage>(&*msg)) island = p->island;
  else if (auto* f = std::get_if<FragmentMessage>(&*msg)) island = f->header.island;
  if (std::find(islands.begin(), islands.end(), island) == islands.end())
    return Error{errc::unknown_sender, "island " + std::to_string(island) + " does not belong to site " + std::string(site)};
  return SiteFrame{std::move(*msg), island};
}

Status check_fragment(const FragmentHeader& h, std::size_t count, const WireContext& ctx) {
  // A lossy broadcast arrives as a global_delta where a full global_params could.
  const bool broadcast = h.kind == FragmentKind::global_params || h.kind == FragmentKind::global_delta;
  if (h.kind != ctx.accept && !(broadcast && ctx.accept == FragmentKind::global_params))
    return Error{errc::unexpected_message, "a " + std::string(to_string(h.kind)) + " fragment where " +
                                               std::string(to_string(ctx.accept)) + " fragments are accepted"};
  if (h.index >= ctx.fragment_sizes.size())
    return Error{errc::unknown_fragment, "fragment " + num(h.index) + " does not exist (the plan has " +
                                             num(ctx.fragment_sizes.size()) + ")"};
  const bool from_island = !broadcast;
  if (from_island ? (h.island < 0 || h.island >= ctx.islands) : h.island != syncer_id)
    return Error{errc::unknown_sender, "sender " + std::to_string(h.island) + " is not " +
                                           (from_island
                                                ? "a known island (0.." + std::to_string(ctx.islands - 1) + ")"
                                                : std::string("the syncer (-1)"))};
  const std::size_t want = ctx.fragment_sizes[h.index];
  if (count != want)
    return Error{errc::wrong_length, "fragment " + num(h.index) + " carries " + num(count) + " values, it has " + num(want)};
  // Only the syncer's fragments say which islands' sends they merged, one entry per island.
  if (!h.merged_seq.empty() && from_island)
    return Error{errc::malformed, "island " + std::to_string(h.island) + "'s fragment " + num(h.index) + " lists merged sends of " +
                                      num(h.merged_seq.size()) + " islands; only the syncer's do"};
  if (ctx.islands > 0 && h.merged_seq.size() > static_cast<std::size_t>(ctx.islands))
    return Error{errc::malformed, "global fragment " + num(h.index) + " lists merged sends of " + num(h.merged_seq.size()) +
                                      " islands, the run has " + std::to_string(ctx.islands)};
  const std::uint64_t round = h.index < ctx.rounds.size() ? ctx.rounds[h.index] : 0;
  if (h.kind == FragmentKind::outer_gradient) {
    if (h.base_round > round)
      return Error{errc::future_round, "fragment " + num(h.index) + " is based on round " + num(h.base_round) +
                                           ", the current round is " + num(round)};
    if (round - h.base_round > ctx.max_staleness)
      return Error{errc::stale_round, "fragment " + num(h.index) + " is based on round " + num(h.base_round) + ", " +
                                          num(round - h.base_round) + " rounds behind (max " + num(ctx.max_staleness) + ")"};
    if (h.steps == 0 || h.tokens == 0)
      return Error{errc::bad_counters, "outer gradient covers " + num(h.tokens) + " tokens in " + num(h.steps) +
                                           " steps; both must be positive"};
    if (!within_tokens_per_step(h.tokens, h.steps, ctx.max_tokens_per_step))
      return Error{errc::bad_counters, "outer gradient covers " + num(h.tokens) + " tokens in " + num(h.steps) +
                                           " steps, more than " + num(ctx.max_tokens_per_step) + " per step"};
  } else if (h.kind == FragmentKind::gradient) {
    // ddp is synchronous: a gradient belongs to exactly the current step. Its counters are
    // judged first: a late gradient is dropped as late, and one with wrong counters is refused,
    // whatever its step.
    if (h.steps != 1 || h.tokens == 0)
      return Error{errc::bad_counters, "a gradient covers one step and some tokens (got " + num(h.steps) + " steps, " +
                                           num(h.tokens) + " tokens)"};
    if (h.base_round > round)
      return Error{errc::future_round, "gradient of step " + num(h.base_round) + ", the current step is " + num(round)};
    if (h.base_round < round)
      return Error{errc::stale_round, "gradient of step " + num(h.base_round) + ", the current step is " + num(round)};
  } else if (h.base_round < round) {
    return Error{errc::stale_round, "global fragment " + num(h.index) + " of round " + num(h.base_round) +
                                        " is older than the held round " + num(round)};
  } else if (h.kind == FragmentKind::global_delta && h.from_round >= h.base_round) {
    return Error{errc::malformed, "global delta of fragment " + num(h.index) + " goes from round " + num(h.from_round) +
                                      " to round " + num(h.base_round) + "; rounds only go up"};
  }
  return {};
}

FragmentInbox::FragmentInbox(WireContext ctx) : ctx_(std::move(ctx)) {
  // The largest fragment this run has bounds every frame and traversal.
  std::size_t largest = 0;
  for (auto s : ctx_.fragment_sizes) largest = std::max(largest, s);
  ctx_.limits.max_fragment_values = std::min(ctx_.limits.max_fragment_values, largest);
  if (ctx_.rounds.size() < ctx_.fragment_sizes.size()) ctx_.rounds.resize(ctx_.fragment_sizes.size(), 0);
}

void FragmentInbox::set_round(std::uint32_t p, std::uint64_t round) {
  if (p < ctx_.rounds.size()) ctx_.rounds[p] = round;
}

template <class Out>
Expected<FragmentInbox::Received> FragmentInbox::receive_impl(std::span<const std::byte> frame, std::span<Out> out) {
  auto fail = [&](const Error& e) -> Expected<Received> {
    rejected_.add(e.code);
    return e;
  };
  stale_.reset();
  auto w = frame_words(frame, max_frame_bytes(MessageType::fragment, ctx_.limits), aligned_);
  if (!w) return fail(w.error());
  auto p = peek(*w);
  if (!p) return fail(p.error());
  if (p->type != MessageType::fragment)
    return fail(Error{errc::unexpected_message, "a " + std::string(to_string(p->type)) + " message where fragments are expected"});
  try {
    capnp::FlatArrayMessageReader r(w->words, full_options(*w));
    auto f = r.getRoot<schema::Envelope>().getFragment();
    auto raw = read_header(f, ctx_.limits);
    if (!raw) return fail(raw.error());
    if (auto st = check_fragment(raw->header, raw->count, ctx_); !st) {
      if (st.error().code == errc::stale_round) stale_ = raw->header;
      return fail(st.error());
    }
    if (out.size() < raw->count)
      return fail(Error{errc::wrong_length, "receive buffer holds " + num(out.size()) + " values, fragment has " + num(raw->count)});
    if (auto st = read_scales(f, *raw, scales_); !st) return fail(st.error());
    EncodedView view(raw->params, raw->count, scales_, payload_of(f));
    if (auto st = decode(view, out.first(raw->count)); !st) return fail(st.error());
    ++accepted_;
    return Received{raw->header, raw->params, raw->count, frame.size()};
  } catch (const kj::Exception& e) {
    return fail(kj_error(e));
  }
}

Expected<FragmentInbox::Received> FragmentInbox::receive(std::span<const std::byte> frame, std::span<float> out) {
  return receive_impl(frame, out);
}
Expected<FragmentInbox::Received> FragmentInbox::receive(std::span<const std::byte> frame, std::span<double> out) {
  return receive_impl(frame, out);
}

}  // namespace diloco
