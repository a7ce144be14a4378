// Human-readable description of a wire frame or a checkpoint file (what `diloco inspect` prints).
#pragma once

#include <cstddef>
#include <span>
#include <string>

#include "diloco/expected.hpp"

namespace diloco {

/// Recognises a safetensors checkpoint (8-byte length, then '{') or a Cap'n Proto frame and
/// describes it: message type, header fields, encoding, sizes and value statistics; or the
/// checkpoint's metadata, tensors, fragment rounds and island states. Errors say why the bytes
/// are neither.
Expected<std::string> describe_file(std::span<const std::byte> bytes);

}  // namespace diloco
