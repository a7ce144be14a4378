// Fragment codecs: how outer gradients and global fragments are stored for transit (fp32, bf16,
// int8 / int4 with per-block scales, E3M0 4-bit float), and error feedback for the lossy ones.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "diloco/expected.hpp"

namespace diloco {

/// Wire encoding of a fragment's values. Streaming DiLoCo (arXiv 2501.18512) sends outer
/// gradients in 4 bits at no measurable quality cost; the merge accumulates in fp32/fp64.
enum class Encoding : std::uint8_t {
  fp32 = 0,  // exact
  bf16 = 1,  // upper 16 bits of binary32, round to nearest even (saturating, never inf)
  int8 = 2,  // q = round(x / s), s = max|x| / 127 per block
  int4 = 3,  // q = round(x / s) in [-7, 7], s = max|x| / 7 per block, two values per byte
  e3m0 = 4,  // sign + 3-bit exponent, no mantissa: |x| ≈ s·2^(e−7), e in 1..7 (0 is zero),
             // s = max|x| per block; rounds to the nearest representable magnitude
};
inline constexpr int encoding_count = 5;

std::string_view to_string(Encoding e);
/// "fp32", "bf16", "int8", "int4", "e3m0"; nothing for anything else.
std::optional<Encoding> parse_encoding(std::string_view name);

/// Encoding plus block size (values per scale; ignored by fp32 and bf16).
struct CodecParams {
  Encoding encoding = Encoding::fp32;
  std::uint32_t block_size = 64;
};
inline constexpr std::uint32_t max_block_size = 1u << 20;

/// True for encodings that carry per-block scales (int8, int4, e3m0).
bool has_scales(Encoding e);
/// Payload bytes for n values: 4n, 2n, n, or ceil(n/2).
std::size_t payload_bytes(Encoding e, std::size_t n);
/// Number of per-block scales for n values: ceil(n / block) for scaled encodings, else 0.
std::size_t scale_count(const CodecParams& p, std::size_t n);
/// Bits per value including scales (e.g. int4 with block 64: 4.5).
double bits_per_value(const CodecParams& p);
/// Checks the block size for the encoding (errc::bad_block_size).
Status check(const CodecParams& p);

/// An encoded fragment that owns its bytes.
struct Encoded {
  CodecParams params;
  std::size_t count = 0;
  std::vector<float> scales;
  std::vector<std::uint8_t> payload;
};

/// An encoded fragment in someone else's memory (e.g. inside a received frame).
struct EncodedView {
  CodecParams params;
  std::size_t count = 0;
  std::span<const float> scales;
  std::span<const std::uint8_t> payload;
  EncodedView() = default;
  EncodedView(const CodecParams& p, std::size_t n, std::span<const float> s, std::span<const std::uint8_t> b)
      : params(p), count(n), scales(s), payload(b) {}
  EncodedView(const Encoded& e) : params(e.params), count(e.count), scales(e.scales), payload(e.payload) {}
};

/// Quantises `in` into caller storage sized by scale_count / payload_bytes. Refuses non-finite
/// input (errc::non_finite): an island never sends NaN. Allocates nothing.
Status encode_into(const CodecParams& p, std::span<const float> in, std::span<float> scales,
                   std::span<std::uint8_t> payload);
/// Allocating convenience form of encode_into.
Expected<Encoded> encode(const CodecParams& p, std::span<const float> in);

/// Checks an encoded fragment without decoding it: params, lengths against `count`, scales
/// finite, non-negative and small enough that no decoded value can overflow.
Status validate(const EncodedView& e);

/// Validates and decodes into `out` (out.size() must equal e.count, else errc::wrong_length).
/// Every decoded value is finite or the call fails with errc::non_finite; on any failure `out`
/// is zero-filled, so nothing from a rejected payload survives in it.
Status decode(const EncodedView& e, std::span<float> out);
/// Same, widening to double for the merge path (merge.hpp takes std::span<const double>).
Status decode(const EncodedView& e, std::span<double> out);

/// Relative L2 error ‖a − b‖ / ‖a‖ (0 when both are zero).
double relative_l2_error(std::span<const float> reference, std::span<const float> approx);

/// Error feedback for lossy encodings: each send encodes x + r, and the quantisation residual
/// r ← (x + r) − decode(sent) is carried into the next send of the same fragment, so no part of
/// an outer gradient is lost for good, only delayed.
class ErrorFeedbackEncoder {
public:
  ErrorFeedbackEncoder(std::size_t size, CodecParams params);
  /// Encodes `x` (size() values) with the carried residual into caller storage and updates the
  /// residual. On error the residual is unchanged.
  Status encode_into(std::span<const float> x, std::span<float> scales, std::span<std::uint8_t> payload);
  Expected<Encoded> encode(std::span<const float> x);
  std::span<const float> residual() const { return residual_; }
  void reset();
  std::size_t size() const { return residual_.size(); }
  const CodecParams& params() const { return params_; }

private:
  CodecParams params_;
  std::vector<float> residual_;
  std::vector<float> work_;  // x + residual
  std::vector<float> sent_;  // decode(what was sent)
};

}  // namespace diloco
