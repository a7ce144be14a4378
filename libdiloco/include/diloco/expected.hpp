// Errors as values: the `errc` codes of the wire protocol and checkpoints, and a small
// expected-like result type (C++20 has no std::expected) so no exception crosses the API.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace diloco {

/// Why a frame, payload or checkpoint was refused. Each rejection carries one of these plus a
/// human-readable reason, and receivers count rejections per code.
enum class errc : std::uint8_t {
  truncated = 0,        // fewer bytes than the frame / segment table / header says
  frame_too_large,      // larger than any legitimate message of its type
  malformed,            // not a valid Cap'n Proto message (or traversal limit exceeded)
  unsupported_version,  // protocol or checkpoint format version we do not speak
  unexpected_message,   // a valid message of a type the receiver does not accept here
  unknown_encoding,     // encoding id outside the known set
  bad_block_size,       // block size zero, too large, or set where none is used
  wrong_length,         // count / payload / scales length inconsistent with fragment and encoding
  non_finite,           // NaN or infinity in a value or a scale (or a scale that could overflow)
  unknown_fragment,     // fragment index outside the run's plan
  unknown_sender,       // island id not known to the receiver
  future_round,         // based on a round the receiver has not reached
  stale_round,          // older than the receiver accepts
  bad_counters,         // tokens / steps that cannot weight a contribution
  io_error,             // the file system refused (open, write, fsync, rename)
  corrupt_checkpoint,   // a checkpoint file that is not valid safetensors / diloco metadata
  checkpoint_mismatch,  // a valid checkpoint of a different model or fragment plan
  missed_round,         // a global delta from a round the island does not hold: it must heal (re-join)
  stale_term,           // a frame of a syncer leader's term older than the newest the receiver saw
  out_of_bounds,        // finite values far beyond what the run can produce (an outer gradient
                        // that would overflow the global parameters)
};
inline constexpr std::size_t errc_count = static_cast<std::size_t>(errc::out_of_bounds) + 1;

/// Stable snake_case name of a code ("future_round").
std::string_view to_string(errc e);

/// A refusal: what kind, and a reason that names the offending field and values.
struct Error {
  errc code = errc::malformed;
  std::string reason;
  /// "code: reason"
  std::string message() const { return std::string(to_string(code)) + ": " + reason; }
};

/// Thrown only by Expected::value() on a caller bug (reading a value that is an error).
class BadExpectedAccess : public std::logic_error {
public:
  explicit BadExpectedAccess(const Error& e) : std::logic_error("diloco::Expected holds " + e.message()) {}
};

/// A T or an Error; the result type of every decoder and checkpoint function.
template <class T>
class [[nodiscard]] Expected {
public:
  Expected(T value) : v_(std::in_place_index<0>, std::move(value)) {}
  Expected(Error e) : v_(std::in_place_index<1>, std::move(e)) {}

  bool has_value() const { return v_.index() == 0; }
  explicit operator bool() const { return has_value(); }
  T& value() & { check(); return std::get<0>(v_); }
  const T& value() const& { check(); return std::get<0>(v_); }
  T&& value() && { check(); return std::get<0>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  /// The error; only valid when !has_value().
  const Error& error() const { return std::get<1>(v_); }

private:
  void check() const {
    if (!has_value()) throw BadExpectedAccess(std::get<1>(v_));
  }
  std::variant<T, Error> v_;
};

/// Success or an Error.
template <>
class [[nodiscard]] Expected<void> {
public:
  Expected() = default;
  Expected(Error e) : e_(std::move(e)) {}
  bool has_value() const { return !e_; }
  explicit operator bool() const { return has_value(); }
  void value() const {
    if (e_) throw BadExpectedAccess(*e_);
  }
  const Error& error() const { return *e_; }

private:
  std::optional<Error> e_;
};

using Status = Expected<void>;

/// Rejections counted per code, so a receiver can report what it refused and why.
struct RejectCounts {
  std::array<std::uint64_t, errc_count> by_code{};
  void add(errc e) { ++by_code[static_cast<std::size_t>(e)]; }
  std::uint64_t operator[](errc e) const { return by_code[static_cast<std::size_t>(e)]; }
  std::uint64_t total() const {
    std::uint64_t s = 0;
    for (auto n : by_code) s += n;
    return s;
  }
};

}  // namespace diloco
