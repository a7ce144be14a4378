// The rules of a process's front door to the network, as plain code: which connections that
// have not yet proven an identity may wait for their handshake, and which BASP bytes from a
// proven peer may reach CAF 0.17.6's parser (actors/door.cpp runs the sockets and TLS).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "diloco/expected.hpp"

namespace diloco {

/// "HOST:PORT" of a listener or a peer (port 0: any free port when listening).
struct Endpoint {
  std::string host;
  std::uint16_t port = 0;
};
/// Parses "HOST:PORT" or "[V6]:PORT". Throws std::invalid_argument naming what is wrong.
Endpoint parse_endpoint(const std::string& s);

/// Which end of a CAF BASP connection wrote a byte stream: the client dialled (a site), the
/// server published (the syncer).
enum class BaspSender { client, server };

/// The actors of this process a proven peer may address by id: the one it was published for
/// and those handed out to peers since (the syncer's gateway and its relays). Shared by the
/// actor that spawns them and the door's thread.
class PeerReceivers {
public:
  void add(std::uint64_t id);
  void remove(std::uint64_t id);
  bool contains(std::uint64_t id) const;
  std::size_t size() const;

private:
  mutable std::mutex m_;
  std::set<std::uint64_t> ids_;
};

/// What a peer's direct messages may hold: every element type in `types`, or the whole type
/// name one of `messages` (for CAF's own exchanges that hold an actor pointer).
///
/// With `receivers` set, a message passed by its element types must also go to one of those
/// actors, or by name (BASP's named-receiver flag) to one of `named` (the atom values of CAF's
/// own servers, "SpawnServ"): an actor id learnt from a message's sender (the syncer's, say) is
/// no door into this process. A whole message of `messages` answers CAF's own exchange and goes
/// to the helper actor the middleman spawned for it, whose id no one announces: any receiver.
struct PeerMessages {
  std::vector<std::string> types;
  std::vector<std::string> messages;
  std::shared_ptr<const PeerReceivers> receivers;
  std::vector<std::uint64_t> named;
  bool checked() const { return !types.empty() || !messages.empty(); }
};

/// Checks one direction of a BASP connection header by header before CAF sees it.
///
/// CAF 0.17.6 dereferences a null payload for a handshake header that announces no payload
/// (`basp::instance::handle`, e.g. operation 0 with payload length 0 and operation data 1): one
/// 32-byte frame kills the process. CAF's own `valid(header)` lets those through. This filter
/// accepts a header only when CAF can handle it: a known operation, the handshake that belongs
/// to the sender's side and only as its first frame, a payload wherever CAF will read one, the
/// zero fields CAF requires, and a payload no larger than `max_payload`. Streams may arrive in
/// any chunking.
///
/// A peer that passed the door's identity check still reaches CAF's mailboxes, and CAF 0.17.6
/// delivers whatever a message holds: an `exit_msg` with reason `kill` ends any actor for good
/// (no exit handler can trap it), an `error` or `down_msg` ends one without a handler for it, a
/// (link_atom, strong_actor_ptr) naming a local actor is cast to a proxy it is not, and a routed
/// message names its own source node, so it can pose as an actor of this very process. With
/// `peer` set, a direct message's payload is read up to its type name (CAF writes
/// "@<>+T1+T2..." before the elements) and passes only when it carries no forwarding stages and
/// its type name is allowed by `peer` and its receiver too (PeerMessages::receivers), and
/// routed messages are refused (a message to a named receiver, CAF's own servers, is checked
/// like any other: a new node's middleman asks the other's "SpawnServ" for its info). Without
/// it, payload bytes pass unread (CAF's deserializer bounds them).
class BaspFilter {
public:
  static constexpr std::size_t header_size = 32;
  /// Longest type name of a message read ("@<>+" and the element types joined by '+').
  static constexpr std::size_t max_type_name = 1024;
  BaspFilter(BaspSender sender, std::uint32_t max_payload, PeerMessages peer = {});

  /// The next bytes of the stream. The first bad header is an error that names it; after an
  /// error the connection must be closed (every later call fails the same way).
  Status feed(std::span<const std::byte> bytes);
  /// Complete headers accepted so far.
  std::uint64_t frames() const { return frames_; }

private:
  Status check(const std::array<std::byte, header_size>& h);
  /// The collected start of a direct message's payload: done (true), more bytes needed
  /// (false), or an error naming what the message carries.
  Expected<bool> check_message_start() const;

  BaspSender sender_;
  std::uint32_t max_payload_;
  PeerMessages peer_;                 // none: payloads pass unread
  std::vector<std::byte> start_;      // a direct message's payload up to its type name
  bool reading_start_ = false;        // the current payload's start is still being checked
  std::uint64_t receiver_ = 0;        // the current direct message's: an actor id or a name's atom value
  bool named_ = false;                // ... a name (BASP's named-receiver flag)
  std::array<std::byte, header_size> header_{};
  std::size_t have_ = 0;              // header bytes collected
  std::uint64_t payload_left_ = 0;    // payload bytes still to pass
  std::uint64_t frames_ = 0;
  std::optional<Error> failed_;
};

/// Bounds the connections that are still in their handshake (nothing proven yet), so that idle
/// or slow connections cannot lock legitimate peers out.
///
/// Every pending connection has a deadline (`handshake_s` after it arrived). At most
/// `per_address` wait from one address and `total` from all: a newcomer past either bound
/// evicts the oldest pending connection of its address (else the oldest overall), so a flood
/// of idle connections costs the flooder its own oldest ones and a legitimate peer that
/// completes its handshake promptly still gets in. Time is a parameter.
class DoorAdmission {
public:
  struct Limits {
    std::size_t per_address = 32;
    std::size_t total = 256;
    double handshake_s = 5.0;
  };
  explicit DoorAdmission(Limits limits);

  /// Connection `id` (ids only grow) from `address` arrived at `now`: it is pending; returns
  /// the pending connections to close to make room for it, oldest first.
  std::vector<std::uint64_t> admit(std::uint64_t id, const std::string& address, double now);
  /// The connection finished its handshake or closed: it no longer counts.
  void settle(std::uint64_t id);
  /// Pending connections whose deadline has passed at `now`.
  std::vector<std::uint64_t> expired(double now) const;
  /// The earliest deadline of a pending connection (infinity when none waits).
  double next_deadline() const;
  std::size_t pending() const { return pending_.size(); }
  std::size_t pending_from(const std::string& address) const;
  const Limits& limits() const { return limits_; }

private:
  struct Entry {
    std::string address;
    double deadline;
  };
  Limits limits_;
  std::map<std::uint64_t, Entry> pending_;  // by id: oldest first
  std::map<std::string, std::size_t> per_address_;
};

/// The largest certificate a peer may present in its hello: 64 KiB of PEM (a chain of a few
/// certificates is under 8 KiB). One larger is refused before it is kept for the proof.
inline constexpr std::size_t kMaxCertificateBytes = 64 * 1024;

/// The longest BASP payload a site or a follower replica has reason to send a syncer: an
/// outer-gradient frame of the run's largest fragment (`largest_fragment_values`, at its
/// largest encoding, max_frame_bytes), a progress report of its `fragments`, or a hello with
/// its certificate, plus CAF's message header. A longer payload closes the connection before
/// CAF buffers a byte of it.
std::uint32_t peer_payload_bound(std::size_t largest_fragment_values, std::size_t fragments);

/// Challenges handed out and not yet answered, at most `capacity`: a newcomer past it drops
/// the oldest. (The smallest key would do for a bound, but a peer choosing its keys could then
/// push everyone else's challenges out while keeping its own.) A key asking again replaces its
/// challenge and counts as new.
template <class Key, class Value>
class ChallengeTable {
public:
  explicit ChallengeTable(std::size_t capacity) : capacity_(capacity) {}

  void put(const Key& key, Value value) {
    map_.erase(key);
    if (capacity_ == 0) return;
    if (map_.size() >= capacity_) {
      auto oldest = map_.begin();
      for (auto it = map_.begin(); it != map_.end(); ++it)
        if (it->second.seq < oldest->second.seq) oldest = it;
      map_.erase(oldest);
    }
    map_.emplace(key, Entry{next_++, std::move(value)});
  }
  /// The challenge `key` was given, taken out of the table (nothing: none, or dropped).
  std::optional<Value> take(const Key& key) {
    auto it = map_.find(key);
    if (it == map_.end()) return std::nullopt;
    std::optional<Value> v{std::move(it->second.value)};
    map_.erase(it);
    return v;
  }
  std::size_t size() const { return map_.size(); }

private:
  struct Entry {
    std::uint64_t seq;
    Value value;
  };
  std::size_t capacity_;
  std::uint64_t next_ = 0;
  std::map<Key, Entry> map_;
};

/// Spaces out the join requests one site's relay hands the syncer, per island. Each join is
/// answered with the whole model in fp32, so a proven site asking again and again would have the
/// syncer encode and send Θ without end (and flip its islands between finished and training,
/// writing the state file each time). The first join of an island passes at once; one arriving
/// within `interval_s` of the last that passed is held until that interval is over, and a join
/// arriving while one is held takes its place (the newest is what the site wants). Nothing is
/// dropped: an honest island asks one join at a time and waits for its welcome, so it waits here
/// only when it re-joins within the interval, and then not longer than it. `Join` is what the
/// caller forwards (the request and who sent it); time is passed in.
template <class Join>
class JoinThrottle {
public:
  explicit JoinThrottle(double interval_s) : interval_(interval_s) {}

  /// What became of an arriving join: it passes now (`pass`), or it is held and release() is due
  /// at `wake` (neither when a join of the island was held already: this one took its place and
  /// passes at that one's moment).
  struct Arrival {
    std::optional<Join> pass;
    std::optional<double> wake;
  };
  Arrival arrive(int island, double now, Join join) {
    auto& s = slots_[island];
    Arrival a;
    if (s.held) {
      s.held = std::move(join);
    } else if (!s.ever || now >= s.passed + interval_) {
      s.passed = now;
      s.ever = true;
      a.pass = std::move(join);
    } else {
      s.held = std::move(join);
      a.wake = s.passed + interval_;
    }
    return a;
  }
  /// The moment of `island`'s held join came: the join, which passes now (nothing if none was held).
  std::optional<Join> release(int island, double now) {
    auto it = slots_.find(island);
    if (it == slots_.end() || !it->second.held) return std::nullopt;
    std::optional<Join> j = std::move(it->second.held);
    it->second.held.reset();
    it->second.passed = now;
    return j;
  }
  /// Islands with a join held.
  std::size_t waiting() const {
    std::size_t n = 0;
    for (const auto& [island, s] : slots_) n += s.held ? 1 : 0;
    return n;
  }

private:
  struct Slot {
    double passed = 0.0;  // when its last join passed
    bool ever = false;    // one passed at all
    std::optional<Join> held;
  };
  double interval_;
  std::map<int, Slot> slots_;
};

}  // namespace diloco
