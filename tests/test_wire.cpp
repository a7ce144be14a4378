// Wire protocol: every message round-trips; a table of malformed frames is rejected, each with
// its reason and counted, and nothing from a rejected frame reaches a parameter.
#define BOOST_TEST_MODULE wire
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>

#include <capnp/message.h>
#include <capnp/serialize.h>

#include "diloco.capnp.h"  // tests build hostile frames field by field
#include "diloco/optim.hpp"
#include "diloco/limits.hpp"
#include "diloco/wire.hpp"

namespace diloco {  // printable in Boost.Test messages
inline std::ostream& operator<<(std::ostream& o, errc e) { return o << to_string(e); }
inline std::ostream& operator<<(std::ostream& o, Encoding e) { return o << to_string(e); }
}  // namespace diloco

using namespace diloco;
namespace schema = diloco::wire::schema;

namespace {

constexpr std::size_t kN = 1000;  // size of fragment 0 (fragment 1 has 500)

std::vector<float> gaussian(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> d(0.0f, 1e-3f);
  std::vector<float> x(n);
  for (auto& v : x) v = d(g);
  return x;
}

WireContext syncer_context() {
  WireContext c;
  c.fragment_sizes = {kN, 500};
  c.rounds = {10, 3};
  c.islands = 4;
  c.accept = FragmentKind::outer_gradient;
  c.max_staleness = 4;
  return c;
}

FragmentHeader good_header() {
  FragmentHeader h;
  h.kind = FragmentKind::outer_gradient;
  h.island = 2;
  h.index = 0;
  h.base_round = 9;
  h.tokens = 4096;
  h.steps = 8;
  return h;
}

Frame good_frame(Encoding enc = Encoding::fp32, FragmentHeader h = good_header(), std::size_t n = kN) {
  auto f = encode_fragment(h, CodecParams{enc, 64}, gaussian(n, 1));
  BOOST_TEST_REQUIRE(f.has_value());
  return *f;
}

Frame to_frame(capnp::MessageBuilder& b) {
  auto flat = capnp::messageToFlatArray(b);
  auto bytes = flat.asBytes();
  return Frame(reinterpret_cast<const std::byte*>(bytes.begin()), reinterpret_cast<const std::byte*>(bytes.end()));
}

// A fragment built field by field, then changed by `edit` before serialisation.
Frame crafted(const std::function<void(schema::Envelope::Builder, schema::Fragment::Builder)>& edit,
              Encoding enc = Encoding::fp32, std::size_t payload_trim = 0) {
  auto e = encode(CodecParams{enc, 64}, gaussian(kN, 1));
  BOOST_TEST_REQUIRE(e.has_value());
  capnp::MallocMessageBuilder b;
  auto env = b.initRoot<schema::Envelope>();
  env.setVersion(protocol_version);
  auto f = env.initFragment();
  const auto h = good_header();
  f.setKind(schema::FragmentKind::OUTER_GRADIENT);
  f.setIsland(h.island);
  f.setIndex(h.index);
  f.setBaseRound(h.base_round);
  f.setTokens(h.tokens);
  f.setSteps(h.steps);
  f.setEncoding(static_cast<schema::Encoding>(enc));
  f.setBlockSize(has_scales(enc) ? 64 : 0);
  f.setCount(kN);
  auto sl = f.initScales(static_cast<unsigned>(e->scales.size()));
  for (unsigned i = 0; i < e->scales.size(); ++i) sl.set(i, e->scales[i]);
  f.setPayload(kj::arrayPtr(reinterpret_cast<const kj::byte*>(e->payload.data()), e->payload.size() - payload_trim));
  edit(env, f);
  return to_frame(b);
}

void set_payload_value(schema::Fragment::Builder f, std::size_t byte_offset, const void* bits, std::size_t n) {
  auto p = f.getPayload();
  std::memcpy(p.begin() + byte_offset, bits, n);
}

struct BadFrame {
  std::string name;
  Frame frame;
  errc code;
  std::string reason_has;  // a piece of the reason that names the problem
};

std::vector<BadFrame> malformed_table() {
  std::vector<BadFrame> t;
  const Frame good = good_frame();
  auto cut = [&](std::size_t n) { return Frame(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(n)); };
  t.push_back({"empty", {}, errc::truncated, "shorter than a segment table"});
  t.push_back({"five_bytes", cut(5), errc::truncated, "shorter than a segment table"});
  t.push_back({"cut_in_half", cut(good.size() / 2 / 8 * 8), errc::truncated, "segment table announces"});
  t.push_back({"not_whole_words", cut(good.size() - 3), errc::truncated, "whole number of 8-byte words"});
  {
    Frame f = good;
    f.resize(f.size() + 8);
    t.push_back({"trailing_bytes", f, errc::malformed, "after its last segment"});
  }
  {
    Frame f(64, std::byte{0xA5});
    const std::uint32_t table[2] = {0, 7};
    std::memcpy(f.data(), table, 8);
    t.push_back({"garbage_body", f, errc::malformed, "not a valid message"});
  }
  {
    Frame f = good;
    const std::uint32_t nseg = 0xffffffffu;
    std::memcpy(f.data(), &nseg, 4);
    t.push_back({"absurd_segment_count", f, errc::malformed, "segments"});
  }
  {
    FragmentHeader h = good_header();
    t.push_back({"oversized_for_the_type", good_frame(Encoding::fp32, h, 4 * kN), errc::frame_too_large, "limit"});
  }
  t.push_back({"wrong_version", crafted([](auto env, auto) { env.setVersion(2); }), errc::unsupported_version,
               "protocol version 2"});
  t.push_back({"heartbeat_instead_of_fragment", encode_message(Heartbeat{1, 2, 3}), errc::unexpected_message,
               "a heartbeat message where fragments are expected"});
  t.push_back({"global_params_at_the_syncer", crafted([](auto, auto f) {
                 f.setKind(schema::FragmentKind::GLOBAL_PARAMS);
               }),
               errc::unexpected_message, "global_params"});
  t.push_back({"global_delta_at_the_syncer", crafted([](auto, auto f) {
                 f.setKind(schema::FragmentKind::GLOBAL_DELTA);
               }),
               errc::unexpected_message, "global_delta"});
  t.push_back({"unknown_encoding", crafted([](auto, auto f) { f.setEncoding(static_cast<schema::Encoding>(9)); }),
               errc::unknown_encoding, "encoding id 9"});
  t.push_back({"zero_block_size", crafted([](auto, auto f) { f.setBlockSize(0); }, Encoding::int4),
               errc::bad_block_size, "block size 0"});
  t.push_back({"block_size_on_fp32", crafted([](auto, auto f) { f.setBlockSize(64); }), errc::bad_block_size,
               "has no scales"});
  t.push_back({"count_not_the_fragment_size", crafted([](auto, auto f) { f.setCount(kN - 1); }),
               errc::wrong_length, "carries 999 values, it has 1000"});
  t.push_back({"payload_one_byte_short", crafted([](auto, auto) {}, Encoding::fp32, 1), errc::wrong_length, "payload has 3999 bytes"});
  t.push_back({"missing_scales", crafted([](auto, auto f) { f.initScales(3); }, Encoding::int8), errc::wrong_length,
               "has 3 scales"});
  t.push_back({"nan_value_fp32", crafted([](auto, auto f) {
                 const std::uint32_t nan = 0x7fc00001u;
                 set_payload_value(f, 4 * 777, &nan, 4);
               }),
               errc::non_finite, "NaN or infinity"});
  t.push_back({"inf_value_bf16", crafted([](auto, auto f) {
                 const std::uint16_t inf = 0xff80u;
                 set_payload_value(f, 2 * 5, &inf, 2);
               }, Encoding::bf16),
               errc::non_finite, "NaN or infinity"});
  t.push_back({"nan_scale_int8", crafted([](auto, auto f) {
                 f.getScales().set(2, std::numeric_limits<float>::quiet_NaN());
               }, Encoding::int8),
               errc::non_finite, "scale 2"});
  t.push_back({"overflowing_scale_e3m0", crafted([](auto, auto f) {
                 f.getScales().set(0, std::numeric_limits<float>::infinity());
               }, Encoding::e3m0),
               errc::non_finite, "scale 0"});
  t.push_back({"unknown_fragment", crafted([](auto, auto f) { f.setIndex(7); }), errc::unknown_fragment,
               "fragment 7 does not exist"});
  t.push_back({"unknown_sender", crafted([](auto, auto f) { f.setIsland(9); }), errc::unknown_sender, "sender 9"});
  t.push_back({"negative_sender", crafted([](auto, auto f) { f.setIsland(-5); }), errc::unknown_sender, "sender -5"});
  t.push_back({"future_round", crafted([](auto, auto f) { f.setBaseRound(11); }), errc::future_round,
               "based on round 11, the current round is 10"});
  t.push_back({"too_stale", crafted([](auto, auto f) { f.setBaseRound(5); }), errc::stale_round, "5 rounds behind"});
  t.push_back({"zero_steps", crafted([](auto, auto f) { f.setSteps(0); }), errc::bad_counters, "0 steps"});
  // Counters past what a saved state holds: they would wrap a sum or make the next restore fail.
  t.push_back({"absurd_tokens", crafted([](auto, auto f) { f.setTokens(~std::uint64_t{0}); }), errc::bad_counters,
               "at most 4611686018427387904 each"});
  t.push_back({"absurd_steps", crafted([](auto, auto f) { f.setSteps(std::uint64_t{1} << 63); }), errc::bad_counters,
               "9223372036854775808 steps"});
  // More tokens than steps × 2^31 (what any configuration's batch may hold) is no island's.
  t.push_back({"tokens_per_step", crafted([](auto, auto f) {
                 f.setSteps(3);
                 f.setTokens(3 * kMaxTokensPerStep + 1);
               }),
               errc::bad_counters, "6442450945 tokens in 3 steps, more than 2147483648 per step"});
  return t;
}

}  // namespace

BOOST_AUTO_TEST_CASE(fragment_frames_round_trip_in_every_encoding) {
  const auto x = gaussian(kN, 1);
  for (auto enc : {Encoding::fp32, Encoding::bf16, Encoding::int8, Encoding::int4, Encoding::e3m0}) {
    FragmentInbox inbox(syncer_context());
    auto frame = encode_fragment(good_header(), CodecParams{enc, 64}, x);
    BOOST_TEST_REQUIRE(frame.has_value());
    std::vector<float> out(kN);
    auto r = inbox.receive(*frame, out);
    BOOST_TEST_CONTEXT(to_string(enc)) {
      BOOST_TEST_REQUIRE(r.has_value());
      BOOST_TEST(r->header.island == 2);
      BOOST_TEST(r->header.base_round == 9u);
      BOOST_TEST(r->header.tokens == 4096u);
      BOOST_TEST(r->header.steps == 8u);
      BOOST_TEST(r->count == kN);
      BOOST_TEST((r->params.encoding == enc));
      BOOST_TEST(r->frame_bytes == frame->size());
      // The wire adds nothing to the codec's own error.
      auto direct = encode(CodecParams{enc, 64}, x);
      std::vector<float> want(kN);
      BOOST_TEST_REQUIRE(decode(*direct, std::span<float>(want)).has_value());
      BOOST_TEST(std::memcmp(want.data(), out.data(), 4 * kN) == 0);
      BOOST_TEST(inbox.accepted() == 1u);
      BOOST_TEST(inbox.rejected().total() == 0u);
      // Decoding straight into double for the merge path gives the same values.
      std::vector<double> outd(kN);
      BOOST_TEST_REQUIRE(inbox.receive(*frame, outd).has_value());
      for (std::size_t i = 0; i < kN; ++i) BOOST_TEST(outd[i] == static_cast<double>(out[i]));
    }
  }
}

BOOST_AUTO_TEST_CASE(every_message_type_round_trips_through_decode_message) {
  auto enc = encode(CodecParams{Encoding::int4, 32}, gaussian(100, 4));
  BOOST_TEST_REQUIRE(enc.has_value());
  FragmentMessage fm{FragmentHeader{FragmentKind::global_params, syncer_id, 1, 77, 0, 0}, *enc};
  const std::vector<Message> msgs = {
      Message(fm),
      Message(ProgressMessage{3, 12345, {{0, 5, 100, 2}, {1, 6, 200, 4}}, true, true}),
      Message(JoinRequest{2, 9, true}),
      Message(JoinReply{{fm, fm}}),
      Message(Heartbeat{-1, 42, 1'000'000'007}),
      Message(RunOver{RunOutcome::stopped, "island 2 reported that it diverged at step 7"}),
  };
  for (const auto& m : msgs) {
    const Frame f = encode_message(m);
    auto d = decode_message(f);
    BOOST_TEST_CONTEXT(to_string(type_of(m))) {
      BOOST_TEST_REQUIRE(d.has_value());
      BOOST_TEST((type_of(*d) == type_of(m)));
    }
  }
  auto check_fragment_msg = [&](const FragmentMessage& got) {
    BOOST_TEST((got.header.kind == FragmentKind::global_params));
    BOOST_TEST(got.header.island == syncer_id);
    BOOST_TEST(got.header.index == 1u);
    BOOST_TEST(got.header.base_round == 77u);
    BOOST_TEST((got.data.params.encoding == Encoding::int4));
    BOOST_TEST(got.data.params.block_size == 32u);
    BOOST_TEST(got.data.count == 100u);
    BOOST_TEST(got.data.scales == enc->scales);
    BOOST_TEST(got.data.payload == enc->payload);
  };
  check_fragment_msg(std::get<FragmentMessage>(*decode_message(encode_message(msgs[0]))));
  auto p = std::get<ProgressMessage>(*decode_message(encode_message(msgs[1])));
  BOOST_TEST(p.island == 3);
  BOOST_TEST(p.local_step == 12345u);
  BOOST_TEST(p.finished);
  BOOST_TEST(p.diverged);
  BOOST_TEST_REQUIRE(p.fragments.size() == 2u);
  BOOST_TEST(p.fragments[1].index == 1u);
  BOOST_TEST(p.fragments[1].base_round == 6u);
  BOOST_TEST(p.fragments[1].tokens == 200u);
  BOOST_TEST(p.fragments[1].steps == 4u);
  auto j = std::get<JoinRequest>(*decode_message(encode_message(msgs[2])));
  BOOST_TEST(j.island == 2);
  BOOST_TEST(j.incarnation == 9u);
  BOOST_TEST(j.keeps_local);
  BOOST_TEST(!std::get<JoinRequest>(*decode_message(encode_message(JoinRequest{2, 9}))).keeps_local);
  BOOST_TEST(j.run_s == 0.0);
  BOOST_TEST(std::get<JoinRequest>(*decode_message(encode_message(JoinRequest{2, 9, false, 12.25}))).run_s == 12.25);
  auto r = std::get<JoinReply>(*decode_message(encode_message(msgs[3])));
  BOOST_TEST_REQUIRE(r.fragments.size() == 2u);
  for (const auto& f : r.fragments) check_fragment_msg(f);
  auto h = std::get<Heartbeat>(*decode_message(encode_message(msgs[4])));
  BOOST_TEST(h.sender == -1);
  BOOST_TEST(h.sequence == 42u);
  BOOST_TEST(h.sent_at_ns == 1'000'000'007u);
  auto o = std::get<RunOver>(*decode_message(encode_message(msgs[5])));
  BOOST_TEST((o.outcome == RunOutcome::stopped));
  BOOST_TEST(o.reason == "island 2 reported that it diverged at step 7");
}

// A replicated syncer's leader stamps its term on every frame; a receiver that has seen a newer
// term refuses the frame (stale_term) without reading more than its envelope.
BOOST_AUTO_TEST_CASE(frames_carry_the_leaders_term_and_older_terms_are_refused) {
  const Frame beat = encode_message(Heartbeat{-1, 1, 2}, 9);
  auto t = frame_term(beat);
  BOOST_TEST_REQUIRE(t.has_value());
  BOOST_TEST(*t == 9u);
  BOOST_TEST(decode_message(beat).has_value());  // the term changes nothing else
  const Frame plain = encode_message(Heartbeat{-1, 1, 2});
  BOOST_TEST(*frame_term(plain) == 0u);  // islands' frames and a lone syncer's carry no term
  FragmentHeader h{FragmentKind::global_params, syncer_id, 0, 5, 0, 0};
  auto frag = encode_fragment(h, CodecParams{}, gaussian(64, 3), 12);
  BOOST_TEST_REQUIRE(frag.has_value());
  BOOST_TEST(*frame_term(*frag) == 12u);
  ErrorFeedbackEncoder ef(64, CodecParams{Encoding::int8, 32});
  auto lossy = encode_fragment(h, ef, gaussian(64, 4), 13);
  BOOST_TEST_REQUIRE(lossy.has_value());
  BOOST_TEST(*frame_term(*lossy) == 13u);
  BOOST_TEST(admit_term(beat, 0).has_value());
  BOOST_TEST(admit_term(beat, 9).has_value());  // the newest term itself
  auto old = admit_term(beat, 10);
  BOOST_TEST_REQUIRE(!old.has_value());
  BOOST_TEST((old.error().code == errc::stale_term));
  BOOST_TEST(old.error().reason.find("term 9") != std::string::npos);
  BOOST_TEST(old.error().reason.find("newest term is 10") != std::string::npos);
  BOOST_TEST((admit_term(plain, 1).error().code == errc::stale_term));  // no term is older than any leader's
  const Frame garbage(12, std::byte{0x5a});
  auto bad = admit_term(garbage, 3);
  BOOST_TEST_REQUIRE(!bad.has_value());
  BOOST_TEST((bad.error().code != errc::stale_term));  // refused as its decode would refuse it
}

BOOST_AUTO_TEST_CASE(a_run_over_reason_is_cut_to_its_limit_when_sent) {
  // Two-byte characters: the cut falls on a character boundary, never inside one.
  std::string why = "x";  // the limit falls inside a character: the cut goes back to its start
  while (why.size() < 2 * max_run_over_reason) why += "\xc3\xa9";
  auto o = decode_message(encode_message(RunOver{RunOutcome::finished, why}));
  BOOST_TEST_REQUIRE(o.has_value());
  const auto& got = std::get<RunOver>(*o).reason;
  BOOST_TEST(got.size() == max_run_over_reason - 1);
  BOOST_TEST(why.compare(0, got.size(), got) == 0);
}

BOOST_AUTO_TEST_CASE(malformed_frames_are_rejected_with_their_reason_and_counted) {
  FragmentInbox inbox(syncer_context());
  const auto table = malformed_table();
  RejectCounts want;
  for (const auto& row : table) {
    std::vector<float> out(kN, 123.0f);
    auto r = inbox.receive(row.frame, out);
    BOOST_TEST_CONTEXT(row.name) {
      BOOST_TEST_REQUIRE(!r.has_value());
      BOOST_TEST(to_string(r.error().code) == to_string(row.code));
      BOOST_TEST(r.error().reason.find(row.reason_has) != std::string::npos, "reason: " << r.error().reason);
      BOOST_TEST_MESSAGE(row.name << " -> " << r.error().message());
      // Nothing decoded survives: the buffer is untouched or zeroed.
      bool clean = true;
      for (float v : out) clean = clean && (v == 123.0f || v == 0.0f);
      BOOST_TEST(clean);
    }
    want.add(row.code);
  }
  BOOST_TEST(inbox.accepted() == 0u);
  BOOST_TEST(inbox.rejected().total() == table.size());
  for (std::size_t c = 0; c < errc_count; ++c) BOOST_TEST(inbox.rejected().by_code[c] == want.by_code[c]);
}

BOOST_AUTO_TEST_CASE(tokens_up_to_the_runs_batch_per_step_are_accepted_however_many_the_steps) {
  auto ctx = syncer_context();
  ctx.max_tokens_per_step = 1000;  // a run whose island steps count at most 1000 tokens
  FragmentInbox run(ctx);
  std::vector<float> out(kN);
  BOOST_TEST(run.receive(crafted([](auto, auto f) {
                           f.setSteps(4);
                           f.setTokens(4000);
                         }),
                         out).has_value());
  auto more = run.receive(crafted([](auto, auto f) {
                            f.setSteps(4);
                            f.setTokens(4001);  // one token more than four steps can count: outweighs the rest
                          }),
                          out);
  BOOST_REQUIRE(!more);
  BOOST_TEST((more.error().code == errc::bad_counters));
  BOOST_TEST(more.error().reason.find("4001 tokens in 4 steps, more than 1000 per step") != std::string::npos);
  FragmentInbox inbox(syncer_context());
  // 2^31 tokens per step exactly, and 2^62 steps of one token each (steps × 2^31 would wrap).
  BOOST_TEST(inbox.receive(crafted([](auto, auto f) {
                             f.setSteps(3);
                             f.setTokens(3 * kMaxTokensPerStep);
                           }),
                           out).has_value());
  BOOST_TEST(inbox.receive(crafted([](auto, auto f) {
                             f.setSteps(kMaxCounter);
                             f.setTokens(kMaxCounter);
                           }),
                           out).has_value());
}

BOOST_AUTO_TEST_CASE(nothing_in_a_rejected_fragment_reaches_the_global_parameters) {
  // A syncer loop in miniature: receive into a scratch buffer, step the outer optimizer only on success.
  FragmentInbox inbox(syncer_context());
  std::vector<float> theta = gaussian(kN, 2);
  const std::vector<float> before = theta;
  OuterOptimizer outer(kN, OuterConfig{});
  std::vector<double> delta(kN);
  for (const auto& row : malformed_table()) {
    if (inbox.receive(row.frame, delta)) outer.step(theta, delta);
  }
  BOOST_TEST(std::memcmp(theta.data(), before.data(), 4 * kN) == 0);
  BOOST_TEST(inbox.accepted() == 0u);
  // And a good frame does get through.
  auto ok = inbox.receive(good_frame(), delta);
  BOOST_TEST_REQUIRE(ok.has_value());
  outer.step(theta, delta);
  BOOST_TEST(std::memcmp(theta.data(), before.data(), 4 * kN) != 0);
}

BOOST_AUTO_TEST_CASE(decode_message_rejects_structural_problems_without_any_run_state) {
  struct Row {
    const char* name;
    Frame frame;
    errc code;
  };
  const Frame good = good_frame();
  std::vector<Row> rows = {
      {"truncated", Frame(good.begin(), good.begin() + 64), errc::truncated},
      {"wrong_version", crafted([](auto env, auto) { env.setVersion(0); }), errc::unsupported_version},
      {"nan_value", crafted([](auto, auto f) {
         const std::uint32_t nan = 0x7f800001u;
         set_payload_value(f, 0, &nan, 4);
       }),
       errc::non_finite},
      {"unknown_encoding", crafted([](auto, auto f) { f.setEncoding(static_cast<schema::Encoding>(5)); }),
       errc::unknown_encoding},
  };
  WireLimits small;
  small.max_fragment_values = 100;
  small.max_islands = 0;  // no merged_seq room either: the frame bound is the values' alone
  rows.push_back({"oversized_for_limits", good, errc::frame_too_large});
  for (const auto& r : rows) {
    auto d = decode_message(r.frame, std::string(r.name) == "oversized_for_limits" ? small : WireLimits{});
    BOOST_TEST_CONTEXT(r.name) {
      BOOST_TEST_REQUIRE(!d.has_value());
      BOOST_TEST(to_string(d.error().code) == to_string(r.code));
    }
  }
  // Structure is fine, state is not judged: an unknown fragment index decodes.
  BOOST_TEST(decode_message(crafted([](auto, auto f) { f.setIndex(99); })).has_value());
}

BOOST_AUTO_TEST_CASE(progress_with_an_absurd_step_or_counter_is_refused_and_sums_saturate) {
  // A step of 2^63 would be kept by the syncer and written to its snapshot, which no restore
  // (nor a follower replica) could read back: the run could not resume.
  ProgressMessage p{1, std::uint64_t{1} << 63, {}};
  auto d = decode_message(encode_message(Message(p)));
  BOOST_TEST_REQUIRE(!d.has_value());
  BOOST_TEST(to_string(d.error().code) == to_string(errc::bad_counters));
  BOOST_TEST_MESSAGE(d.error().message());
  ProgressMessage q{1, 20, {FragmentCounters{0, 3, ~std::uint64_t{0}, 20}}};
  BOOST_TEST(!decode_message(encode_message(Message(q))).has_value());
  ProgressMessage fine{1, kMaxCounter, {FragmentCounters{0, 3, kMaxCounter, kMaxCounter}}};
  BOOST_TEST(decode_message(encode_message(Message(fine))).has_value());
  BOOST_TEST(add_counters(kMaxCounter - 1, 5) == kMaxCounter);
  BOOST_TEST(add_counters(kMaxCounter, kMaxCounter) == kMaxCounter);
  BOOST_TEST(add_counters(2, 3) == 5u);
}

// A join request's run time moves the syncer's partitions of the island's site: NaN, infinity,
// a negative time or one past kMaxRunSeconds would move them nowhere sensible.
BOOST_AUTO_TEST_CASE(a_join_request_with_an_absurd_run_time_is_refused) {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  for (double bad : {nan, inf, -inf}) {
    auto d = decode_message(encode_message(JoinRequest{1, 0, false, bad}));
    BOOST_TEST_REQUIRE(!d.has_value());
    BOOST_TEST(to_string(d.error().code) == to_string(errc::non_finite));
  }
  for (double bad : {-0.5, 2 * kMaxRunSeconds}) {
    auto d = decode_message(encode_message(JoinRequest{1, 0, false, bad}));
    BOOST_TEST_REQUIRE(!d.has_value());
    BOOST_TEST(to_string(d.error().code) == to_string(errc::out_of_bounds));
    BOOST_TEST_MESSAGE(d.error().message());
  }
  BOOST_TEST(decode_message(encode_message(JoinRequest{1, 0, false, kMaxRunSeconds})).has_value());
}

// A join request names the SHA-256 of each global fragment the island holds, and a join reply
// may mark a fragment held (no values: the island has them). Digests of another length, more
// entries than fragments allowed, and a held mark anywhere but a bare global_params of a reply
// are refused.
BOOST_AUTO_TEST_CASE(held_fragments_round_trip_and_malformed_ones_are_refused) {
  const auto d = sha256(std::span<const float>(gaussian(100, 5)));
  JoinRequest jr{1, 3, false, 0.0, {std::vector<std::byte>(d.begin(), d.end()), {}}};
  auto j = decode_message(encode_message(jr));
  BOOST_TEST_REQUIRE(j.has_value());
  const auto& got = std::get<JoinRequest>(*j);
  BOOST_TEST_REQUIRE(got.holds.size() == 2u);
  BOOST_TEST((got.holds[0] == jr.holds[0]));
  BOOST_TEST(got.holds[1].empty());

  JoinRequest short_digest = jr;
  short_digest.holds[0].pop_back();
  auto bad = decode_message(encode_message(short_digest));
  BOOST_TEST_REQUIRE(!bad.has_value());
  BOOST_TEST(to_string(bad.error().code) == to_string(errc::malformed));
  BOOST_TEST_MESSAGE(bad.error().message());
  WireLimits few;
  few.max_fragments = 1;
  bad = decode_message(encode_message(jr), few);
  BOOST_TEST_REQUIRE(!bad.has_value());
  BOOST_TEST(to_string(bad.error().code) == to_string(errc::wrong_length));

  FragmentMessage held;
  held.header.kind = FragmentKind::global_params;
  held.header.island = syncer_id;
  held.header.index = 1;
  held.header.base_round = 4;
  held.header.held = true;
  held.header.held_digest = d;
  held.data.count = 100;
  auto r = decode_message(encode_message(JoinReply{{held}}));
  BOOST_TEST_REQUIRE(r.has_value());
  const auto& f = std::get<JoinReply>(*r).fragments.at(0);
  BOOST_TEST(f.header.held);
  BOOST_TEST((f.header.held_digest == d));
  BOOST_TEST(f.data.count == 100u);
  BOOST_TEST(f.data.payload.empty());

  bad = decode_message(encode_message(held));  // a held mark outside a join reply
  BOOST_TEST_REQUIRE(!bad.has_value());
  BOOST_TEST(to_string(bad.error().code) == to_string(errc::malformed));
  auto with_values = held;  // held, yet carrying values
  with_values.data = *encode(CodecParams{}, gaussian(100, 6));
  bad = decode_message(encode_message(JoinReply{{with_values}}));
  BOOST_TEST_REQUIRE(!bad.has_value());
  BOOST_TEST(to_string(bad.error().code) == to_string(errc::malformed));
  BOOST_TEST_MESSAGE(bad.error().message());
  {  // held, without the digest the syncer matched
    capnp::MallocMessageBuilder b;
    auto env = b.initRoot<schema::Envelope>();
    env.setVersion(protocol_version);
    auto fr = env.initJoinReply().initFragments(1)[0];
    fr.setKind(schema::FragmentKind::GLOBAL_PARAMS);
    fr.setIsland(syncer_id);
    fr.setCount(100);
    fr.setHeld(true);
    auto words = capnp::messageToFlatArray(b);
    auto bytes = words.asBytes();
    bad = decode_message(std::span<const std::byte>(reinterpret_cast<const std::byte*>(bytes.begin()), bytes.size()));
    BOOST_TEST_REQUIRE(!bad.has_value());
    BOOST_TEST(to_string(bad.error().code) == to_string(errc::malformed));
    fr.setHeld(false);  // a digest on a fragment that carries its values
    fr.setHeldDigest(kj::arrayPtr(reinterpret_cast<const kj::byte*>(d.data()), d.size()));
    words = capnp::messageToFlatArray(b);
    bytes = words.asBytes();
    bad = decode_message(std::span<const std::byte>(reinterpret_cast<const std::byte*>(bytes.begin()), bytes.size()));
    BOOST_TEST_REQUIRE(!bad.has_value());
    BOOST_TEST(bad.error().message().find("held digest") != std::string::npos);
  }
  auto delta = held;  // only global_params may be held
  delta.header.kind = FragmentKind::global_delta;
  bad = decode_message(encode_message(JoinReply{{delta}}));
  BOOST_TEST_REQUIRE(!bad.has_value());
}

// A report's step time sizes the syncer's grace windows (StepClock): NaN, infinity, a negative
// time or one past kMaxRunSeconds would make them nothing or for ever.
BOOST_AUTO_TEST_CASE(progress_with_an_absurd_step_time_is_refused) {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  auto with = [](double s) {
    ProgressMessage p{1, 20, {}};
    p.step_seconds = s;
    return decode_message(encode_message(Message(p)));
  };
  for (double bad : {nan, inf, -inf}) {
    auto d = with(bad);
    BOOST_TEST_REQUIRE(!d.has_value());
    BOOST_TEST(to_string(d.error().code) == to_string(errc::non_finite));
  }
  for (double bad : {-0.001, 2 * kMaxRunSeconds}) {
    auto d = with(bad);
    BOOST_TEST_REQUIRE(!d.has_value());
    BOOST_TEST(to_string(d.error().code) == to_string(errc::out_of_bounds));
    BOOST_TEST_MESSAGE(d.error().message());
  }
  auto fine = with(0.0125);
  BOOST_TEST_REQUIRE(fine.has_value());
  BOOST_TEST(std::get<ProgressMessage>(*fine).step_seconds == 0.0125);
  BOOST_TEST(with(kMaxRunSeconds).has_value());  // the bound itself decodes (the clock caps it)
  BOOST_TEST(with(0.0).has_value());             // not measured yet
}

BOOST_AUTO_TEST_CASE(progress_with_more_fragments_than_the_limit_is_refused) {
  ProgressMessage p{1, 2, std::vector<FragmentCounters>(50)};
  WireLimits l;
  l.max_fragments = 10;
  auto d = decode_message(encode_message(Message(p)), l);
  BOOST_TEST_REQUIRE(!d.has_value());
  BOOST_TEST((d.error().code == errc::frame_too_large || d.error().code == errc::wrong_length));
}

BOOST_AUTO_TEST_CASE(unaligned_frames_are_read_from_a_copy) {
  const Frame f = good_frame(Encoding::int8);
  std::vector<std::byte> shifted(f.size() + 1);
  std::memcpy(shifted.data() + 1, f.data(), f.size());
  FragmentInbox inbox(syncer_context());
  std::vector<float> out(kN);
  auto r = inbox.receive(std::span<const std::byte>(shifted).subspan(1), out);
  BOOST_TEST_REQUIRE(r.has_value());
  BOOST_TEST(r->count == kN);
}

BOOST_AUTO_TEST_CASE(islands_accept_newer_global_fragments_from_the_syncer_only) {
  WireContext c = syncer_context();
  c.accept = FragmentKind::global_params;
  FragmentInbox inbox(c);
  std::vector<float> out(kN);
  FragmentHeader h{FragmentKind::global_params, syncer_id, 0, 11, 0, 0};
  BOOST_TEST(inbox.receive(good_frame(Encoding::fp32, h), out).has_value());
  h.base_round = 9;  // older than the island's round 10
  auto stale = inbox.receive(good_frame(Encoding::fp32, h), out);
  BOOST_TEST_REQUIRE(!stale.has_value());
  BOOST_TEST((stale.error().code == errc::stale_round));
  h.base_round = 12;
  h.island = 1;  // an island posing as the syncer
  auto spoof = inbox.receive(good_frame(Encoding::fp32, h), out);
  BOOST_TEST_REQUIRE(!spoof.has_value());
  BOOST_TEST((spoof.error().code == errc::unknown_sender));
  inbox.set_round(0, 20);
  h.island = syncer_id;
  BOOST_TEST(!inbox.receive(good_frame(Encoding::fp32, h), out).has_value());
  BOOST_TEST(inbox.rejected().total() == 3u);
}

// A send's number and the syncer's list of merged sends (fragments.adopt = "rebase") round-trip;
// only the syncer's fragments carry the list, at most one entry per island of the run and
// never more than the limit.
BOOST_AUTO_TEST_CASE(send_numbers_and_merged_send_lists_round_trip_and_are_bounded) {
  FragmentHeader send = good_header();
  send.seq = (std::uint64_t{3} << 32) | 7u;
  auto back = decode_message(good_frame(Encoding::fp32, send));
  BOOST_TEST_REQUIRE(back.has_value());
  BOOST_TEST(std::get<FragmentMessage>(*back).header.seq == send.seq);

  FragmentHeader global{FragmentKind::global_params, syncer_id, 0, 11, 0, 0};
  global.merged_seq = {5, 0, (std::uint64_t{1} << 32) | 2u, 9};
  const Frame gf = good_frame(Encoding::fp32, global);
  auto gback = decode_message(gf);
  BOOST_TEST_REQUIRE(gback.has_value());
  BOOST_TEST(std::get<FragmentMessage>(*gback).header.merged_seq == global.merged_seq);
  WireContext island = syncer_context();
  island.accept = FragmentKind::global_params;
  std::vector<float> out(kN);
  BOOST_TEST(FragmentInbox(island).receive(gf, out).has_value());  // 4 entries, 4 islands

  WireContext three = island;
  three.islands = 3;  // one entry more than the run has islands
  auto more = FragmentInbox(three).receive(gf, out);
  BOOST_TEST_REQUIRE(!more.has_value());
  BOOST_TEST((more.error().code == errc::malformed));
  WireLimits two;
  two.max_islands = 2;  // over the decoder's limit: refused before the list is read
  auto over = decode_message(gf, two);
  BOOST_TEST_REQUIRE(!over.has_value());
  BOOST_TEST((over.error().code == errc::malformed));

  FragmentHeader posing = good_header();
  posing.merged_seq = {1};  // an island's outer gradient claiming what the syncer merged
  auto refused = FragmentInbox(syncer_context()).receive(good_frame(Encoding::fp32, posing), out);
  BOOST_TEST_REQUIRE(!refused.has_value());
  BOOST_TEST((refused.error().code == errc::malformed));
}

BOOST_AUTO_TEST_CASE(framing_overhead_of_a_one_mebibyte_fragment_is_below_one_percent) {
  const std::size_t n = (1u << 20) / 4;
  const auto x = gaussian(n, 3);
  for (auto enc : {Encoding::fp32, Encoding::bf16, Encoding::int8, Encoding::int4, Encoding::e3m0}) {
    const CodecParams p{enc, 64};
    auto f = encode_fragment(good_header(), p, x);
    BOOST_TEST_REQUIRE(f.has_value());
    const double codec_bytes = payload_bytes(enc, n) + 4.0 * scale_count(p, n);
    const double overhead = (f->size() - codec_bytes) / codec_bytes;
    BOOST_TEST_MESSAGE(to_string(enc) << ": frame " << f->size() << " bytes, codec " << codec_bytes << ", overhead "
                                      << 100 * overhead << "%");
    BOOST_TEST(overhead >= 0.0);
    BOOST_TEST(overhead < 0.01);
  }
}

BOOST_AUTO_TEST_CASE(error_feedback_frames_carry_the_residual_to_the_next_send) {
  const auto x = gaussian(kN, 8);
  ErrorFeedbackEncoder ef(kN, CodecParams{Encoding::e3m0, 64});
  FragmentInbox inbox(syncer_context());
  std::vector<float> got(kN), sum(kN, 0.0f), truth(kN);
  for (int k = 0; k < 20; ++k) {
    auto f = encode_fragment(good_header(), ef, x);
    BOOST_TEST_REQUIRE(f.has_value());
    BOOST_TEST_REQUIRE(inbox.receive(*f, got).has_value());
    for (std::size_t i = 0; i < kN; ++i) sum[i] += got[i];
  }
  for (std::size_t i = 0; i < kN; ++i) truth[i] = 20 * x[i];
  BOOST_TEST(relative_l2_error(truth, sum) < 0.03);
}

BOOST_AUTO_TEST_CASE(islands_accept_global_deltas_from_the_syncer_only_and_of_the_right_length) {
  WireContext c = syncer_context();
  c.accept = FragmentKind::global_params;  // an island: takes both kinds of broadcast
  FragmentInbox inbox(c);
  std::vector<float> out(kN);
  FragmentHeader h{FragmentKind::global_delta, syncer_id, 0, 11, 0, 0, 10};
  const auto x = gaussian(kN, 6);
  auto good = encode_fragment(h, CodecParams{Encoding::int4, 64}, x);
  BOOST_TEST_REQUIRE(good.has_value());
  auto r = inbox.receive(*good, out);
  BOOST_TEST_REQUIRE(r.has_value());
  BOOST_TEST((r->header.kind == FragmentKind::global_delta));
  BOOST_TEST(r->header.from_round == 10u);
  BOOST_TEST(r->header.base_round == 11u);
  // from_round survives decode_message too (inspect, IslandCore::adopt_frame read it there).
  auto m = decode_message(*good);
  BOOST_TEST_REQUIRE(m.has_value());
  BOOST_TEST(std::get<FragmentMessage>(*m).header.from_round == 10u);
  auto refused = [&](FragmentHeader bad, std::size_t n, errc code) {
    auto f = encode_fragment(bad, CodecParams{Encoding::int4, 64}, gaussian(n, 6));
    BOOST_TEST_REQUIRE(f.has_value());
    std::vector<float> buf(kN, 123.0f);
    auto got = inbox.receive(*f, buf);
    BOOST_TEST_REQUIRE(!got.has_value());
    BOOST_TEST(to_string(got.error().code) == to_string(code));
    for (float v : buf) BOOST_TEST((v == 123.0f || v == 0.0f));
  };
  FragmentHeader spoof = h;
  spoof.island = 1;  // an island posing as the syncer
  refused(spoof, kN, errc::unknown_sender);
  refused(h, kN - 1, errc::wrong_length);
  FragmentHeader backwards = h;
  backwards.from_round = 11;  // rounds only go up
  refused(backwards, kN, errc::malformed);
  BOOST_TEST(inbox.rejected().total() == 3u);
  // A JoinReply carries full fragments only: a delta cannot be healed from.
  FragmentMessage fm{h, *encode(CodecParams{Encoding::int4, 64}, x)};
  auto jr = decode_message(encode_message(JoinReply{{fm}}));
  BOOST_TEST_REQUIRE(!jr.has_value());
  BOOST_TEST(to_string(jr.error().code) == to_string(errc::unexpected_message));
}
