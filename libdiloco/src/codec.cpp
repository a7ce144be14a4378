// Fragment codecs: branch-free per-block loops over bit patterns so g++ vectorises them without
// -ffast-math (finiteness and max|x| are integer max-reductions over |x|'s bits).
#include "diloco/codec.hpp"

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <string>

namespace diloco {

namespace {

constexpr std::uint32_t kAbsMask = 0x7fffffffu;
constexpr std::uint32_t kInfBits = 0x7f800000u;
// Largest |q| a decoder can meet for each scaled encoding (int8 allows -128, int4 allows -8),
// so a scale ≤ FLT_MAX / qmax can never decode to infinity.
constexpr float kInt8QMax = 128.0f;
constexpr float kInt4QMax = 8.0f;
// Adding and subtracting 1.5·2^23 rounds |t| < 2^22 to the nearest integer (ties to even)
// in the default rounding mode; it vectorises where std::nearbyint may not.
constexpr float kRoundMagic = 12582912.0f;

inline std::uint32_t bits_of(float x) { return std::bit_cast<std::uint32_t>(x); }
inline float float_of(std::uint32_t u) { return std::bit_cast<float>(u); }

inline float load_f32(const std::uint8_t* p) {
  float x;
  std::memcpy(&x, p, 4);
  return x;
}

// max over i of |x_i|'s bit pattern: ≥ kInfBits iff some x_i is infinite or NaN, and otherwise
// the bit pattern of max |x_i| (non-negative floats order like their bits).
inline std::uint32_t max_abs_bits(const float* x, std::size_t n) {
  std::uint32_t m = 0;
  for (std::size_t i = 0; i < n; ++i) m = std::max(m, bits_of(x[i]) & kAbsMask);
  return m;
}

Error non_finite_input(std::size_t block) {
  return {errc::non_finite, "input block " + std::to_string(block) + " holds NaN or infinity"};
}

float clamp_scale(float s, float qmax) { return std::min(s, FLT_MAX / qmax); }

// ---- per-block kernels: x has n ≤ block values ----

void quantise_int8(const float* x, std::size_t n, float inv, std::int8_t* q) {
  for (std::size_t i = 0; i < n; ++i) {
    float t = std::clamp(x[i] * inv, -127.0f, 127.0f);
    t = (t + kRoundMagic) - kRoundMagic;
    q[i] = static_cast<std::int8_t>(static_cast<int>(t));
  }
}

inline int round_int4(float x, float inv) {
  float t = std::clamp(x * inv, -7.0f, 7.0f);
  t = (t + kRoundMagic) - kRoundMagic;
  return static_cast<int>(t);
}

void quantise_int4(const float* x, std::size_t n, float inv, std::uint8_t* out) {
  const std::size_t pairs = n / 2;
  for (std::size_t i = 0; i < pairs; ++i) {
    const int lo = round_int4(x[2 * i], inv);
    const int hi = round_int4(x[2 * i + 1], inv);
    out[i] = static_cast<std::uint8_t>((lo & 15) | ((hi & 15) << 4));
  }
  if (n % 2) out[pairs] = static_cast<std::uint8_t>(round_int4(x[n - 1], inv) & 15);
}

// E3M0 (Streaming DiLoCo, arXiv 2501.18512): code = sign<<3 | e, |x|/s ≈ 2^(e−7) for e ≥ 1,
// e = 0 is zero. With r = |x|/s in [0, 1] = 1.m·2^k, rounding to the nearest power of two is
// k + (top mantissa bit), i.e. e = E − 120 + top for biased exponent E; below 2^-7 (half of the
// smallest step 2^-6) is zero, and [2^-7, 1.5·2^-7) rounds up to 2^-6.
inline std::uint32_t e3m0_code(float x, float inv) {
  const std::uint32_t u = bits_of(x);
  const std::uint32_t sign = (u >> 31) << 3;
  const std::uint32_t r = bits_of(std::fabs(x) * inv);
  const std::int32_t E = static_cast<std::int32_t>(r >> 23);
  const std::int32_t top = static_cast<std::int32_t>((r >> 22) & 1u);
  std::int32_t e = std::max(E - 120 + top, 1);
  e = E >= 120 ? std::min(e, 7) : 0;
  return sign | static_cast<std::uint32_t>(e);
}

void quantise_e3m0(const float* x, std::size_t n, float inv, std::uint8_t* out) {
  const std::size_t pairs = n / 2;
  for (std::size_t i = 0; i < pairs; ++i)
    out[i] = static_cast<std::uint8_t>(e3m0_code(x[2 * i], inv) | (e3m0_code(x[2 * i + 1], inv) << 4));
  if (n % 2) out[pairs] = static_cast<std::uint8_t>(e3m0_code(x[n - 1], inv));
}

// s·2^(e−7) with sign for code c (bits only: multiply s by a constructed power of two).
inline float e3m0_value(std::uint32_t c, float s) {
  const std::uint32_t e = c & 7u;
  const std::uint32_t p = e ? ((e + 120u) << 23) | ((c >> 3) << 31) : ((c >> 3) << 31);
  return float_of(p) * s;  // e = 0 gives ±0·s = ±0
}

template <class Out>
void dequantise_int8(const std::uint8_t* q, std::size_t n, float s, Out* out) {
  for (std::size_t i = 0; i < n; ++i)
    out[i] = static_cast<Out>(static_cast<float>(static_cast<std::int8_t>(q[i])) * s);
}

template <class Out>
void dequantise_int4(const std::uint8_t* b, std::size_t n, float s, Out* out) {
  const std::size_t pairs = n / 2;
  for (std::size_t i = 0; i < pairs; ++i) {
    const auto v = static_cast<std::int8_t>(b[i]);
    const auto lo = static_cast<std::int8_t>(static_cast<std::int8_t>(v << 4) >> 4);
    const auto hi = static_cast<std::int8_t>(v >> 4);
    out[2 * i] = static_cast<Out>(static_cast<float>(lo) * s);
    out[2 * i + 1] = static_cast<Out>(static_cast<float>(hi) * s);
  }
  if (n % 2) {
    const auto lo = static_cast<std::int8_t>(static_cast<std::int8_t>(b[pairs] << 4) >> 4);
    out[n - 1] = static_cast<Out>(static_cast<float>(lo) * s);
  }
}

template <class Out>
void dequantise_e3m0(const std::uint8_t* b, std::size_t n, float s, Out* out) {
  const std::size_t pairs = n / 2;
  for (std::size_t i = 0; i < pairs; ++i) {
    out[2 * i] = static_cast<Out>(e3m0_value(b[i] & 15u, s));
    out[2 * i + 1] = static_cast<Out>(e3m0_value(b[i] >> 4, s));
  }
  if (n % 2) out[n - 1] = static_cast<Out>(e3m0_value(b[pairs] & 15u, s));
}

template <class Out>
Status decode_impl(const EncodedView& e, std::span<Out> out) {
  if (out.size() != e.count) {
    std::fill(out.begin(), out.end(), Out(0));
    return Error{errc::wrong_length, "output holds " + std::to_string(out.size()) + " values, fragment has " +
                                         std::to_string(e.count)};
  }
  if (auto st = validate(e); !st) {
    std::fill(out.begin(), out.end(), Out(0));
    return st;
  }
  const std::size_t n = e.count;
  const std::uint8_t* p = e.payload.data();
  Out* o = out.data();
  switch (e.params.encoding) {
    case Encoding::fp32: {
      // Fused copy + finiteness check, in chunks so a bad value is found without a second pass.
      std::uint32_t m = 0;
      for (std::size_t i = 0; i < n; ++i) {
        std::uint32_t u;
        std::memcpy(&u, p + 4 * i, 4);
        m = std::max(m, u & kAbsMask);
        o[i] = static_cast<Out>(float_of(u));
      }
      if (m >= kInfBits) {
        std::fill(out.begin(), out.end(), Out(0));
        return Error{errc::non_finite, "fp32 payload holds NaN or infinity"};
      }
      return {};
    }
    case Encoding::bf16: {
      std::uint32_t m = 0;
      for (std::size_t i = 0; i < n; ++i) {
        std::uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        const std::uint32_t u = static_cast<std::uint32_t>(h) << 16;
        m = std::max(m, u & kAbsMask);
        o[i] = static_cast<Out>(float_of(u));
      }
      if (m >= kInfBits) {
        std::fill(out.begin(), out.end(), Out(0));
        return Error{errc::non_finite, "bf16 payload holds NaN or infinity"};
      }
      return {};
    }
    case Encoding::int8:
    case Encoding::int4:
    case Encoding::e3m0: {
      // validate() bounded every scale, so no decoded value can be NaN or infinite.
      const std::size_t B = e.params.block_size;
      for (std::size_t b = 0, first = 0; first < n; ++b, first += B) {
        const std::size_t len = std::min(B, n - first);
        const float s = e.scales[b];
        if (e.params.encoding == Encoding::int8)
          dequantise_int8(p + first, len, s, o + first);
        else if (e.params.encoding == Encoding::int4)
          dequantise_int4(p + first / 2, len, s, o + first);
        else
          dequantise_e3m0(p + first / 2, len, s, o + first);
      }
      return {};
    }
  }
  return Error{errc::unknown_encoding, "unknown encoding"};
}

}  // namespace

std::string_view to_string(Encoding e) {
  switch (e) {
    case Encoding::fp32: return "fp32";
    case Encoding::bf16: return "bf16";
    case Encoding::int8: return "int8";
    case Encoding::int4: return "int4";
    case Encoding::e3m0: return "e3m0";
  }
  return "unknown";
}

std::optional<Encoding> parse_encoding(std::string_view name) {
  for (int i = 0; i < encoding_count; ++i)
    if (to_string(static_cast<Encoding>(i)) == name) return static_cast<Encoding>(i);
  return std::nullopt;
}

bool has_scales(Encoding e) { return e == Encoding::int8 || e == Encoding::int4 || e == Encoding::e3m0; }

std::size_t payload_bytes(Encoding e, std::size_t n) {
  switch (e) {
    case Encoding::fp32: return 4 * n;
    case Encoding::bf16: return 2 * n;
    case Encoding::int8: return n;
    case Encoding::int4:
    case Encoding::e3m0: return (n + 1) / 2;
  }
  return 0;
}

std::size_t scale_count(const CodecParams& p, std::size_t n) {
  if (!has_scales(p.encoding) || p.block_size == 0) return 0;
  return (n + p.block_size - 1) / p.block_size;
}

double bits_per_value(const CodecParams& p) {
  const double base = 8.0 * static_cast<double>(payload_bytes(p.encoding, 2)) / 2.0;
  return has_scales(p.encoding) ? base + 32.0 / p.block_size : base;
}

Status check(const CodecParams& p) {
  const auto e = static_cast<int>(p.encoding);
  if (e < 0 || e >= encoding_count)
    return Error{errc::unknown_encoding, "encoding id " + std::to_string(e) + " is not one of fp32, bf16, int8, int4, e3m0"};
  if (!has_scales(p.encoding)) return {};
  if (p.block_size == 0 || p.block_size > max_block_size)
    return Error{errc::bad_block_size, "block size " + std::to_string(p.block_size) + " for " +
                                           std::string(to_string(p.encoding)) + " is outside [1, " +
                                           std::to_string(max_block_size) + "]"};
  if (p.encoding != Encoding::int8 && p.block_size % 2)
    return Error{errc::bad_block_size, "block size " + std::to_string(p.block_size) + " for " +
                                           std::string(to_string(p.encoding)) + " must be even (two values per byte)"};
  return {};
}

Status validate(const EncodedView& e) {
  if (auto st = check(e.params); !st) return st;
  const std::size_t want_payload = payload_bytes(e.params.encoding, e.count);
  if (e.payload.size() != want_payload)
    return Error{errc::wrong_length, "payload has " + std::to_string(e.payload.size()) + " bytes, " +
                                         std::to_string(e.count) + " " + std::string(to_string(e.params.encoding)) +
                                         " values need " + std::to_string(want_payload)};
  const std::size_t want_scales = scale_count(e.params, e.count);
  if (e.scales.size() != want_scales)
    return Error{errc::wrong_length, "message has " + std::to_string(e.scales.size()) + " scales, " +
                                         std::to_string(e.count) + " values in blocks of " +
                                         std::to_string(e.params.block_size) + " need " + std::to_string(want_scales)};
  if (want_scales) {
    const float qmax = e.params.encoding == Encoding::int8 ? kInt8QMax : e.params.encoding == Encoding::int4 ? kInt4QMax : 1.0f;
    const float limit = FLT_MAX / qmax;
    for (std::size_t b = 0; b < e.scales.size(); ++b) {
      const float s = e.scales[b];
      if (!(s >= 0.0f && s <= limit))  // false for NaN too
        return Error{errc::non_finite, "scale " + std::to_string(b) + " is " + std::to_string(s) +
                                           " (must be finite, >= 0 and <= FLT_MAX/" + std::to_string(qmax) + ")"};
    }
  }
  return {};
}

Status encode_into(const CodecParams& p, std::span<const float> in, std::span<float> scales,
                   std::span<std::uint8_t> payload) {
  if (auto st = check(p); !st) return st;
  const std::size_t n = in.size();
  if (payload.size() != payload_bytes(p.encoding, n) || scales.size() != scale_count(p, n))
    return Error{errc::wrong_length, "encode buffers sized " + std::to_string(payload.size()) + "/" +
                                         std::to_string(scales.size()) + " for " + std::to_string(n) + " values"};
  const float* x = in.data();
  std::uint8_t* out = payload.data();
  switch (p.encoding) {
    case Encoding::fp32: {
      // Copy in L1-sized chunks, checking finiteness of each chunk as it is copied.
      constexpr std::size_t chunk = 4096;
      for (std::size_t first = 0; first < n; first += chunk) {
        const std::size_t len = std::min(chunk, n - first);
        if (max_abs_bits(x + first, len) >= kInfBits) return non_finite_input(first / chunk);
        std::memcpy(out + 4 * first, x + first, 4 * len);
      }
      return {};
    }
    case Encoding::bf16: {
      std::uint32_t m = 0;
      for (std::size_t i = 0; i < n; ++i) {
        const std::uint32_t u = bits_of(x[i]);
        m = std::max(m, u & kAbsMask);
        const std::uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;  // round to nearest even
        const auto h = static_cast<std::uint16_t>((r & 0x8000u) | std::min(r & 0x7fffu, 0x7f7fu));  // saturate
        std::memcpy(out + 2 * i, &h, 2);
      }
      if (m >= kInfBits) return Error{errc::non_finite, "input holds NaN or infinity"};
      return {};
    }
    case Encoding::int8:
    case Encoding::int4:
    case Encoding::e3m0: {
      const std::size_t B = p.block_size;
      for (std::size_t b = 0, first = 0; first < n; ++b, first += B) {
        const std::size_t len = std::min(B, n - first);
        const std::uint32_t m = max_abs_bits(x + first, len);
        if (m >= kInfBits) return non_finite_input(b);
        const float maxabs = float_of(m);
        float s;
        if (p.encoding == Encoding::int8)
          s = clamp_scale(maxabs / 127.0f, kInt8QMax);
        else if (p.encoding == Encoding::int4)
          s = clamp_scale(maxabs / 7.0f, kInt4QMax);
        else
          s = maxabs;
        // A block whose scale is subnormal encodes as zeros (1/s would overflow).
        const float inv = s >= FLT_MIN ? 1.0f / s : 0.0f;
        if (inv == 0.0f) s = 0.0f;
        scales[b] = s;
        if (p.encoding == Encoding::int8)
          quantise_int8(x + first, len, inv, reinterpret_cast<std::int8_t*>(out + first));
        else if (p.encoding == Encoding::int4)
          quantise_int4(x + first, len, inv, out + first / 2);
        else
          quantise_e3m0(x + first, len, inv, out + first / 2);
      }
      return {};
    }
  }
  return Error{errc::unknown_encoding, "unknown encoding"};
}

Expected<Encoded> encode(const CodecParams& p, std::span<const float> in) {
  if (auto st = check(p); !st) return st.error();
  Encoded e;
  e.params = p;
  e.count = in.size();
  e.scales.resize(scale_count(p, in.size()));
  e.payload.resize(payload_bytes(p.encoding, in.size()));
  if (auto st = encode_into(p, in, e.scales, e.payload); !st) return st.error();
  return e;
}

Status decode(const EncodedView& e, std::span<float> out) { return decode_impl(e, out); }
Status decode(const EncodedView& e, std::span<double> out) { return decode_impl(e, out); }

double relative_l2_error(std::span<const float> a, std::span<const float> b) {
  double num = 0, den = 0;
  const std::size_t n = std::min(a.size(), b.size());
  for (std::size_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(a[i]) - static_cast<double>(b[i]);
    num += d * d;
    den += static_cast<double>(a[i]) * a[i];
  }
  if (den == 0) return num == 0 ? 0.0 : INFINITY;
  return std::sqrt(num / den);
}

ErrorFeedbackEncoder::ErrorFeedbackEncoder(std::size_t size, CodecParams params)
    : params_(params), residual_(size, 0.0f), work_(size, 0.0f), sent_(size, 0.0f) {}

void ErrorFeedbackEncoder::reset() { std::fill(residual_.begin(), residual_.end(), 0.0f); }

Status ErrorFeedbackEncoder::encode_into(std::span<const float> x, std::span<float> scales,
                                         std::span<std::uint8_t> payload) {
  if (x.size() != residual_.size())
    return Error{errc::wrong_length, "error feedback for " + std::to_string(residual_.size()) + " values got " +
                                         std::to_string(x.size())};
  for (std::size_t i = 0; i < x.size(); ++i) work_[i] = x[i] + residual_[i];
  if (auto st = diloco::encode_into(params_, work_, scales, payload); !st) return st;
  // What the receiver will see; the difference is carried into the next send.
  if (auto st = decode(EncodedView(params_, x.size(), scales, payload), std::span<float>(sent_)); !st) return st;
  for (std::size_t i = 0; i < x.size(); ++i) residual_[i] = work_[i] - sent_[i];
  return {};
}

Expected<Encoded> ErrorFeedbackEncoder::encode(std::span<const float> x) {
  if (auto st = check(params_); !st) return st.error();
  Encoded e;
  e.params = params_;
  e.count = x.size();
  e.scales.resize(scale_count(params_, x.size()));
  e.payload.resize(payload_bytes(params_.encoding, x.size()));
  if (auto st = encode_into(x, e.scales, e.payload); !st) return st.error();
  return e;
}

}  // namespace diloco
