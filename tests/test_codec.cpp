// Fragment codecs: round trips with error bounds per encoding, E3M0 rounding, error feedback,
// and refusal of non-finite input and of scales that could overflow.
#define BOOST_TEST_MODULE codec
#include <boost/test/unit_test.hpp>

#include <bit>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "diloco/codec.hpp"

namespace diloco {  // printable in Boost.Test messages
inline std::ostream& operator<<(std::ostream& o, errc e) { return o << to_string(e); }
inline std::ostream& operator<<(std::ostream& o, Encoding e) { return o << to_string(e); }
}  // namespace diloco

using namespace diloco;

namespace {
std::vector<float> gaussian(std::size_t n, std::uint64_t seed, float sigma = 1e-3f) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> d(0.0f, sigma);
  std::vector<float> x(n);
  for (auto& v : x) v = d(g);
  return x;
}
std::vector<float> round_trip(const CodecParams& p, const std::vector<float>& x) {
  auto e = encode(p, x);
  BOOST_TEST_REQUIRE(e.has_value());
  std::vector<float> y(x.size(), -1.0f);
  auto st = decode(*e, std::span<float>(y));
  BOOST_TEST_REQUIRE(st.has_value());
  return y;
}
}  // namespace

BOOST_AUTO_TEST_CASE(every_encoding_round_trips_within_its_error_bound) {
  // 10001 values: odd, and not a multiple of the block, so the tail paths run too.
  const auto x = gaussian(10001, 7);
  struct Row {
    Encoding enc;
    double bound;
  };
  for (const Row r : {Row{Encoding::fp32, 0.0}, Row{Encoding::bf16, 0.003}, Row{Encoding::int8, 0.01},
                      Row{Encoding::int4, 0.15}, Row{Encoding::e3m0, 0.30}}) {
    const CodecParams p{r.enc, 64};
    const auto y = round_trip(p, x);
    const double err = relative_l2_error(x, y);
    BOOST_TEST_MESSAGE("relative L2 error " << to_string(r.enc) << " (block 64, Gaussian): " << err);
    BOOST_TEST_CONTEXT(to_string(r.enc)) {
      BOOST_TEST(err <= r.bound);
      if (r.enc == Encoding::fp32) BOOST_TEST(std::memcmp(x.data(), y.data(), 4 * x.size()) == 0);
    }
  }
}

BOOST_AUTO_TEST_CASE(payload_sizes_follow_the_encoding) {
  BOOST_TEST(payload_bytes(Encoding::fp32, 1001) == 4004u);
  BOOST_TEST(payload_bytes(Encoding::bf16, 1001) == 2002u);
  BOOST_TEST(payload_bytes(Encoding::int8, 1001) == 1001u);
  BOOST_TEST(payload_bytes(Encoding::int4, 1001) == 501u);
  BOOST_TEST(payload_bytes(Encoding::e3m0, 1001) == 501u);
  BOOST_TEST(scale_count({Encoding::int4, 64}, 1001) == 16u);
  BOOST_TEST(scale_count({Encoding::fp32, 64}, 1001) == 0u);
  BOOST_TEST(bits_per_value({Encoding::int4, 64}) == 4.5);
  BOOST_TEST(parse_encoding("e3m0").value() == Encoding::e3m0);
  BOOST_TEST(!parse_encoding("fp8").has_value());
}

BOOST_AUTO_TEST_CASE(e3m0_rounds_to_the_nearest_power_of_two_of_the_block_scale) {
  // Scale = max|x| = 1. Midpoints: 0.75 between 0.5 and 1; 2^-7 between 0 and 2^-6.
  const std::vector<float> x = {1.0f, 0.5f, 0.74f, 0.76f, -0.25f, 0.007f, 0.008f, 0.0f, -1.0f, 0.3f};
  const std::vector<float> want = {1.0f, 0.5f, 0.5f, 1.0f, -0.25f, 0.0f, 0.015625f, 0.0f, -1.0f, 0.25f};
  const auto y = round_trip({Encoding::e3m0, 10}, x);
  for (std::size_t i = 0; i < x.size(); ++i) BOOST_TEST(y[i] == want[i], "x=" << x[i]);
}

BOOST_AUTO_TEST_CASE(int4_uses_seven_levels_each_side_of_zero) {
  const std::vector<float> x = {7.0f, -7.0f, 3.4f, -3.6f, 0.4f, 1.0f};
  const std::vector<float> want = {7.0f, -7.0f, 3.0f, -4.0f, 0.0f, 1.0f};
  const auto y = round_trip({Encoding::int4, 6}, x);
  for (std::size_t i = 0; i < x.size(); ++i) BOOST_TEST(y[i] == want[i], "x=" << x[i]);
}

BOOST_AUTO_TEST_CASE(bf16_rounds_to_nearest_even_and_saturates_instead_of_overflowing) {
  const float one_plus_half_ulp = std::bit_cast<float>(0x3f808000u);  // exactly between two bf16 values
  const std::vector<float> x = {1.0f, one_plus_half_ulp, FLT_MAX, -FLT_MAX};
  const auto y = round_trip({Encoding::bf16, 0}, x);
  BOOST_TEST(y[0] == 1.0f);
  BOOST_TEST(std::bit_cast<std::uint32_t>(y[1]) == 0x3f800000u);  // ties to even
  BOOST_TEST(std::isfinite(y[2]));
  BOOST_TEST(std::isfinite(y[3]));
  BOOST_TEST(y[3] < 0.0f);
}

BOOST_AUTO_TEST_CASE(zero_and_subnormal_blocks_encode_as_zeros) {
  std::vector<float> x(128, 0.0f);
  for (std::size_t i = 64; i < 128; ++i) x[i] = 1e-44f;  // subnormal: scale would be too small to invert
  for (auto enc : {Encoding::int8, Encoding::int4, Encoding::e3m0}) {
    const auto y = round_trip({enc, 64}, x);
    for (float v : y) BOOST_TEST(v == 0.0f);
  }
}

BOOST_AUTO_TEST_CASE(non_finite_input_is_refused_by_the_encoder) {
  for (auto enc : {Encoding::fp32, Encoding::bf16, Encoding::int8, Encoding::int4, Encoding::e3m0}) {
    for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                      -std::numeric_limits<float>::infinity()}) {
      auto x = gaussian(300, 3);
      x[257] = bad;
      auto e = encode({enc, 64}, x);
      BOOST_TEST_CONTEXT(to_string(enc) << " " << bad) {
        BOOST_TEST_REQUIRE(!e.has_value());
        BOOST_TEST(e.error().code == errc::non_finite);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(scales_that_are_nan_negative_or_could_overflow_are_rejected_and_output_zeroed) {
  const auto x = gaussian(128, 5);
  auto e = encode({Encoding::int8, 64}, x);
  BOOST_TEST_REQUIRE(e.has_value());
  for (float s : {std::numeric_limits<float>::quiet_NaN(), -1.0f, FLT_MAX, std::numeric_limits<float>::infinity()}) {
    Encoded bad = *e;
    bad.scales[1] = s;
    std::vector<float> out(128, 42.0f);
    auto st = decode(bad, std::span<float>(out));
    BOOST_TEST_REQUIRE(!st.has_value());
    BOOST_TEST(st.error().code == errc::non_finite);
    BOOST_TEST(st.error().reason.find("scale 1") != std::string::npos);
    for (float v : out) BOOST_TEST(v == 0.0f);
  }
}

BOOST_AUTO_TEST_CASE(non_finite_payload_values_are_rejected_and_output_zeroed) {
  const auto x = gaussian(100, 9);
  for (auto enc : {Encoding::fp32, Encoding::bf16}) {
    auto e = encode({enc, 0}, x);
    BOOST_TEST_REQUIRE(e.has_value());
    // NaN / inf bit patterns in value 50
    if (enc == Encoding::fp32) {
      const std::uint32_t nan = 0x7fc00000u;
      std::memcpy(e->payload.data() + 4 * 50, &nan, 4);
    } else {
      const std::uint16_t inf = 0x7f80u;
      std::memcpy(e->payload.data() + 2 * 50, &inf, 2);
    }
    std::vector<double> out(100, 42.0);
    auto st = decode(*e, std::span<double>(out));
    BOOST_TEST_REQUIRE(!st.has_value());
    BOOST_TEST(st.error().code == errc::non_finite);
    for (double v : out) BOOST_TEST(v == 0.0);
  }
}

BOOST_AUTO_TEST_CASE(wrong_lengths_and_block_sizes_are_rejected_with_their_reason) {
  const auto x = gaussian(130, 11);
  auto e = encode({Encoding::int4, 64}, x);
  BOOST_TEST_REQUIRE(e.has_value());
  std::vector<float> out(130);
  {
    Encoded bad = *e;
    bad.payload.pop_back();
    auto st = decode(bad, std::span<float>(out));
    BOOST_TEST_REQUIRE(!st.has_value());
    BOOST_TEST(st.error().code == errc::wrong_length);
    BOOST_TEST(st.error().reason.find("payload has 64 bytes") != std::string::npos);
  }
  {
    Encoded bad = *e;
    bad.scales.pop_back();
    auto st = decode(bad, std::span<float>(out));
    BOOST_TEST_REQUIRE(!st.has_value());
    BOOST_TEST(st.error().code == errc::wrong_length);
  }
  {
    auto st = decode(*e, std::span<float>(out).first(129));
    BOOST_TEST_REQUIRE(!st.has_value());
    BOOST_TEST(st.error().code == errc::wrong_length);
  }
  for (std::uint32_t b : {0u, 3u, max_block_size + 2}) {
    auto bad = encode({Encoding::int4, b}, x);
    BOOST_TEST_REQUIRE(!bad.has_value());
    BOOST_TEST(bad.error().code == errc::bad_block_size);
  }
}

BOOST_AUTO_TEST_CASE(decoding_to_double_gives_the_same_values_as_to_float) {
  const auto x = gaussian(1000, 13);
  for (auto enc : {Encoding::fp32, Encoding::bf16, Encoding::int8, Encoding::int4, Encoding::e3m0}) {
    auto e = encode({enc, 32}, x);
    BOOST_TEST_REQUIRE(e.has_value());
    std::vector<float> f(x.size());
    std::vector<double> d(x.size());
    BOOST_TEST_REQUIRE(decode(*e, std::span<float>(f)).has_value());
    BOOST_TEST_REQUIRE(decode(*e, std::span<double>(d)).has_value());
    for (std::size_t i = 0; i < x.size(); ++i) BOOST_TEST(static_cast<double>(f[i]) == d[i]);
  }
}

BOOST_AUTO_TEST_CASE(error_feedback_makes_repeated_sends_sum_to_the_true_total) {
  // Sending the same outer gradient K times: without feedback the bias of each rounding adds up;
  // with feedback the sum of what was received stays within one quantisation step of K·x.
  const std::size_t n = 4096;
  const int K = 50;
  const auto x = gaussian(n, 17);
  for (auto enc : {Encoding::int4, Encoding::e3m0}) {
    ErrorFeedbackEncoder ef(n, {enc, 64});
    std::vector<float> sum_ef(n, 0.0f), sum_plain(n, 0.0f), y(n), truth(n);
    for (int k = 0; k < K; ++k) {
      auto e = ef.encode(x);
      BOOST_TEST_REQUIRE(e.has_value());
      BOOST_TEST_REQUIRE(decode(*e, std::span<float>(y)).has_value());
      for (std::size_t i = 0; i < n; ++i) sum_ef[i] += y[i];
      const auto p = round_trip({enc, 64}, x);
      for (std::size_t i = 0; i < n; ++i) sum_plain[i] += p[i];
    }
    for (std::size_t i = 0; i < n; ++i) truth[i] = K * x[i];
    const double err_ef = relative_l2_error(truth, sum_ef);
    const double err_plain = relative_l2_error(truth, sum_plain);
    BOOST_TEST_MESSAGE(to_string(enc) << ": error of the sum of " << K << " sends, feedback " << err_ef << ", plain " << err_plain);
    BOOST_TEST_CONTEXT(to_string(enc)) {
      BOOST_TEST(err_ef < err_plain / 10);
      BOOST_TEST(err_ef < 0.02);
    }
    ef.reset();
    for (float r : ef.residual()) BOOST_TEST(r == 0.0f);
  }
}

BOOST_AUTO_TEST_CASE(error_feedback_keeps_its_residual_when_the_input_is_refused) {
  ErrorFeedbackEncoder ef(128, {Encoding::int4, 64});
  const auto x = gaussian(128, 19);
  BOOST_TEST_REQUIRE(ef.encode(x).has_value());
  const std::vector<float> before(ef.residual().begin(), ef.residual().end());
  auto bad = x;
  bad[3] = std::numeric_limits<float>::infinity();
  auto e = ef.encode(bad);
  BOOST_TEST_REQUIRE(!e.has_value());
  BOOST_TEST(e.error().code == errc::non_finite);
  BOOST_TEST(std::memcmp(before.data(), ef.residual().data(), 4 * before.size()) == 0);
}
