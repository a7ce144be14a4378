// SHA-256 of parameter values: names a fragment's values across processes where equality must
// hold for real (an island that holds the syncer's Θ_p need not be sent it: JoinRequest::holds).
// Unlike the FNV-1a digests of hash.hpp, which name values for logs and invariants, a collision
// here would leave an island on other parameters, so the hash is a cryptographic one.
#pragma once

#include <array>
#include <cstddef>
#include <span>

namespace diloco {

using Sha256 = std::array<std::byte, 32>;

/// The SHA-256 of `bytes`.
Sha256 sha256(std::span<const std::byte> bytes);
/// The SHA-256 of the values' bytes in memory (IEEE binary32, the machine's byte order: every
/// platform the wire runs on is little-endian, as the fp32 encoding is).
Sha256 sha256(std::span<const float> values);

}  // namespace diloco
