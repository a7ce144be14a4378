// Names of the error codes shared by the wire protocol and checkpoints.
#include "diloco/expected.hpp"

namespace diloco {

std::string_view to_string(errc e) {
  switch (e) {
    case errc::truncated: return "truncated";
    case errc::frame_too_large: return "frame_too_large";
    case errc::malformed: return "malformed";
    case errc::unsupported_version: return "unsupported_version";
    case errc::unexpected_message: return "unexpected_message";
    case errc::unknown_encoding: return "unknown_encoding";
    case errc::bad_block_size: return "bad_block_size";
    case errc::wrong_length: return "wrong_length";
    case errc::non_finite: return "non_finite";
    case errc::unknown_fragment: return "unknown_fragment";
    case errc::unknown_sender: return "unknown_sender";
    case errc::future_round: return "future_round";
    case errc::stale_round: return "stale_round";
    case errc::bad_counters: return "bad_counters";
    case errc::io_error: return "io_error";
    case errc::corrupt_checkpoint: return "corrupt_checkpoint";
    case errc::checkpoint_mismatch: return "checkpoint_mismatch";
    case errc::missed_round: return "missed_round";
    case errc::stale_term: return "stale_term";
    case errc::out_of_bounds: return "out_of_bounds";
  }
  return "unknown_error";
}

}  // namespace diloco
