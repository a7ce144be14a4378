// Which site a peer speaks for, proven at the application layer: CAF 0.17's TLS layer checks
// that a peer's certificate chains to the run's CA but does not tell actors whose it is, so a
// site signs the syncer's random challenge with the key of its certificate (CN = site name).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace diloco::actors {

using Bytes = std::vector<std::uint8_t>;

/// `n` bytes from OpenSSL's CSPRNG: the syncer's challenge.
Bytes random_nonce(std::size_t n = 32);

/// What a site signs: a fixed context, the site name and the nonce, so that a signature can
/// answer only this challenge for this site.
Bytes challenge_message(const std::string& site, const Bytes& nonce);

/// A whole file as bytes; empty with `err` set when it cannot be read.
Bytes read_bytes(const std::string& path, std::string* err);

/// Signs `msg` with the private key in `key_file` (PEM); empty with `err` set on failure.
Bytes sign_with_key(const std::string& key_file, const Bytes& msg, std::string* err);

/// Checks a site's proof: `cert_pem` chains to the CA in `ca_file`, is valid now, has
/// CN == `site`, and `sig` is its key's signature of `msg`. Returns "" when all hold, else why not.
std::string verify_site_proof(const std::string& ca_file, const Bytes& cert_pem, const std::string& site,
                              const Bytes& msg, const Bytes& sig);

}  // namespace diloco::actors
