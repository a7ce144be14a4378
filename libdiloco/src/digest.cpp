// SHA-256 of parameter values (digest.hpp), on OpenSSL's EVP interface.
#include "diloco/digest.hpp"

#include <openssl/evp.h>

#include <stdexcept>

namespace diloco {

Sha256 sha256(std::span<const std::byte> bytes) {
  Sha256 out{};
  unsigned int n = 0;
  if (EVP_Digest(bytes.data(), bytes.size(), reinterpret_cast<unsigned char*>(out.data()), &n, EVP_sha256(), nullptr) != 1 ||
      n != out.size())
    throw std::runtime_error("SHA-256 failed (OpenSSL EVP_Digest)");
  return out;
}

Sha256 sha256(std::span<const float> values) { return sha256(std::as_bytes(values)); }

}  // namespace diloco
