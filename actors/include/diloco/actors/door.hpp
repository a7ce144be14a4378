// A process's front door to the network: TLS and identity checked by our own code before any
// byte reaches CAF's BASP parser, which then only ever talks to loopback.
//
// CAF 0.17.6 parses BASP headers as soon as a connection opens (libcaf_openssl: as soon as TLS
// completes, whoever the peer is), and one malformed header crashes the process. So CAF never
// faces the network: the syncer publishes on loopback behind a door that accepts the public
// connections, and a site's CAF dials its own door on loopback, which dials the syncer.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "diloco/door.hpp"

namespace diloco::actors {

/// One party's TLS material (PEM files): the run's CA, this party's certificate and key.
struct DoorTls {
  std::string ca, cert, key;
};

/// How a door is set up.
struct DoorOptions {
  /// syncer: accepts peers on `listen` and forwards each proven one to CAF at `forward`
  /// (loopback). site: accepts its own CAF on `listen` (loopback) and dials the syncer at
  /// `forward` for each connection.
  enum class Role { syncer, site } role = Role::syncer;
  Endpoint listen;
  Endpoint forward;
  /// Mutual TLS 1.3 with this material; none = --insecure (plain TCP: no identity, no
  /// secrecy; the BASP checks and admission bounds still apply).
  std::optional<DoorTls> tls;
  /// The identities a peer's certificate may carry. syncer: the roster's site names (the
  /// certificate's CN). site: the syncer's name (the certificate's subjectAltName, else CN,
  /// checked by OpenSSL's host-name verification).
  std::vector<std::string> peers;
  /// syncer role, net.allow_join: a certificate of the CA with any other CN is let through too
  /// (a joining site; the gateway checks its name, its proof and the open islands).
  bool any_peer = false;
  /// site role, a replicated syncer: the replicas to dial instead of `forward`, each with the
  /// name its certificate must carry. A connection goes to the replica the last one reached; one
  /// that cannot connect, or whose TLS handshake fails, moves the door on to the next (only the
  /// leader listens, so the door finds it).
  struct Target {
    Endpoint at;
    std::string name;
  };
  std::vector<Target> targets;
  /// Connections still in their handshake (syncer role): per address, in all, and how long.
  DoorAdmission::Limits admission;
  /// Proven connections one peer identity may hold at once (further ones are refused).
  std::size_t sessions_per_peer = 4;
  /// The largest BASP payload a peer may announce.
  std::uint32_t max_payload = std::uint32_t{1} << 31;
  /// syncer role: what a peer's messages may hold (CAF's portable type names); a message with
  /// anything else (an exit or down message, an error, an actor pointer, ...) or a routed
  /// message closes the connection (diloco::BaspFilter). None: payloads pass unread.
  PeerMessages peer_messages;
  /// A line for the process's timeline (refusals are summarised, not one line per flood).
  std::function<void(const std::string&)> log;
};

/// What a door has done so far.
struct DoorStats {
  std::uint64_t accepted = 0;         // connections that passed TLS and the identity check
  std::uint64_t refused = 0;          // failed handshakes, unknown identities, refused sessions
  std::uint64_t evicted = 0;          // pending connections closed to make room, or timed out
  std::uint64_t bad_frames = 0;       // connections closed for a BASP header CAF cannot take
  std::uint64_t bytes_sent = 0;       // on the network side, TLS records included
  std::uint64_t bytes_received = 0;
};

/// A running door: one thread, non-blocking sockets, poll(). Stops and closes every
/// connection when destroyed.
class Door {
public:
  /// Binds `listen` and starts the thread. Throws std::runtime_error naming the address or the
  /// TLS file that is unusable.
  static std::unique_ptr<Door> open(DoorOptions o);
  ~Door();
  Door(const Door&) = delete;
  Door& operator=(const Door&) = delete;

  /// The port `listen` is bound to (useful with port 0).
  std::uint16_t port() const;
  DoorStats stats() const;

  struct Impl;

private:
  explicit Door(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace diloco::actors
