// The front door's rules: BASP header checks against CAF 0.17.6's parser, and the bounded wait
// of connections that have not proven an identity yet.
#include "diloco/door.hpp"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string_view>

#include "diloco/wire.hpp"

namespace diloco {

Endpoint parse_endpoint(const std::string& s) {
  const auto colon = s.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == s.size())
    throw std::invalid_argument("expected HOST:PORT (got \"" + s + "\")");
  Endpoint e;
  e.host = s.substr(0, colon);
  if (e.host.size() > 2 && e.host.front() == '[' && e.host.back() == ']') e.host = e.host.substr(1, e.host.size() - 2);
  const auto port = s.substr(colon + 1);
  if (port.find_first_not_of("0123456789") != std::string::npos || port.size() > 5 || std::stoul(port) > 65535)
    throw std::invalid_argument("bad port in \"" + s + "\"");
  e.port = static_cast<std::uint16_t>(std::stoul(port));
  return e;
}

// ---- BaspFilter ----

namespace {

// CAF 0.17's binary serializer writes integers in network byte order. Header layout:
// operation u8, padding u8 u8, flags u8, payload_len u32, operation_data u64,
// source_actor u64, dest_actor u64 (32 bytes).
std::uint64_t be(const std::array<std::byte, BaspFilter::header_size>& h, std::size_t at, std::size_t n) {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < n; ++i) v = (v << 8) | std::to_integer<std::uint64_t>(h[at + i]);
  return v;
}

enum : std::uint8_t { server_handshake = 0, client_handshake, direct_message, routed_message, monitor_message,
                      down_message, heartbeat };

const char* op_name(std::uint64_t op) {
  static const char* names[] = {"server_handshake", "client_handshake", "direct_message", "routed_message",
                                "monitor_message", "down_message", "heartbeat"};
  return op <= heartbeat ? names[op] : "unknown operation";
}

}  // namespace

BaspFilter::BaspFilter(BaspSender sender, std::uint32_t max_payload, PeerMessages peer)
    : sender_(sender), max_payload_(max_payload), peer_(std::move(peer)) {}

namespace {

/// CAF 0.17's binary deserializer reads a sequence's length as a varbyte: 7 bits a byte, low
/// bits first, the high bit set on every byte but the last (at most 5 bytes for 32 bits).
/// Returns false while `b` ends before the last byte.
bool read_varbyte(std::span<const std::byte> b, std::size_t& at, std::uint64_t& value, bool& too_long) {
  value = 0;
  too_long = false;
  for (int n = 0;; ++n) {
    if (n == 5) {
      too_long = true;
      return true;
    }
    if (at >= b.size()) return false;
    const auto byte = std::to_integer<std::uint64_t>(b[at++]);
    value |= (byte & 0x7f) << (7 * n);
    if (!(byte & 0x80)) return true;
  }
}

}  // namespace

Expected<bool> BaspFilter::check_message_start() const {
  // direct_message payload (caf/io/basp/remote_message_handler.hpp): the forwarding stages
  // (a sequence of actor handles), then the message: uint16 type number 0 (big-endian) and the
  // type name as a sequence of chars, then the elements.
  auto bad = [&](const std::string& why) {
    return Error{errc::malformed, "BASP message " + std::to_string(frames_) + " from a peer: " + why};
  };
  const std::span<const std::byte> b(start_);
  std::size_t at = 0;
  std::uint64_t stages = 0, name_len = 0;
  bool too_long = false;
  if (!read_varbyte(b, at, stages, too_long)) return false;
  if (too_long || stages != 0) return bad("forwarding stages (a peer addresses one actor of ours directly)");
  if (b.size() < at + 2) return false;
  if (b[at] != std::byte{0} || b[at + 1] != std::byte{0}) return bad("a message whose type number is not 0");
  at += 2;
  if (!read_varbyte(b, at, name_len, too_long)) return false;
  if (too_long || name_len > max_type_name)
    return bad("a type name longer than " + std::to_string(max_type_name) + " bytes");
  if (b.size() < at + name_len) return false;
  const std::string name(reinterpret_cast<const char*>(b.data() + at), static_cast<std::size_t>(name_len));
  constexpr std::string_view head = "@<>+";
  if (name.compare(0, head.size(), head) != 0) return bad("an empty message or one without a type name");
  if (std::find(peer_.messages.begin(), peer_.messages.end(), name) != peer_.messages.end()) return true;
  for (std::size_t from = head.size(); from <= name.size();) {
    const auto plus = std::min(name.find('+', from), name.size());
    const std::string type = name.substr(from, plus - from);
    if (std::find(peer_.types.begin(), peer_.types.end(), type) == peer_.types.end())
      return bad("an element of type '" + type + "', which no message of a peer carries (message " + name + ")");
    from = plus + 1;
  }
  if (!peer_.receivers) return true;
  if (named_) {
    if (std::find(peer_.named.begin(), peer_.named.end(), receiver_) == peer_.named.end())
      return bad("a message " + name + " to a named receiver (atom value " + std::to_string(receiver_) +
                 ") that is none of CAF's servers a peer asks");
  } else if (!peer_.receivers->contains(receiver_)) {
    return bad("a message " + name + " to actor " + std::to_string(receiver_) +
               ", which was never handed to a peer (a peer addresses the gateway and its relays only)");
  }
  return true;
}

Status BaspFilter::check(const std::array<std::byte, header_size>& h) {
  const auto op = be(h, 0, 1);
  const auto flags = be(h, 3, 1);
  const auto len = be(h, 4, 4);
  const auto data = be(h, 8, 8);
  const auto src = be(h, 16, 8);
  const auto dst = be(h, 24, 8);
  const bool first = frames_ == 0;
  auto bad = [&](const std::string& why) {
    return Error{errc::malformed, "BASP header " + std::to_string(frames_ + 1) + " (" + op_name(op) + ", payload " +
                                      std::to_string(len) + " bytes): " + why};
  };
  if (op > heartbeat) return bad("operation " + std::to_string(op) + " is not a BASP operation");
  if (flags & ~std::uint64_t{0x03}) return bad("unknown flags " + std::to_string(flags));
  if (len > max_payload_) return bad("payload larger than " + std::to_string(max_payload_) + " bytes");
  // A handshake only from its own side, and that side's first frame is its handshake.
  const std::uint64_t own_handshake = sender_ == BaspSender::server ? server_handshake : client_handshake;
  const std::uint64_t other_handshake = sender_ == BaspSender::server ? client_handshake : server_handshake;
  if (op == other_handshake)
    return bad(std::string("a ") + (sender_ == BaspSender::server ? "server" : "client") + " never sends it");
  if (first && op != own_handshake) return bad("the first frame must be the handshake");
  // The client repeats its handshake once with select_connection set; more is never needed.
  if (!first && op == own_handshake && sender_ == BaspSender::server) return bad("a second server handshake");
  switch (op) {
    case server_handshake:
      if (len == 0 || data == 0) return bad("a server handshake carries a payload and the published port");
      break;
    case client_handshake:
      if (len == 0 || src != 0 || dst != 0) return bad("a client handshake carries a payload and no actor ids");
      break;
    case direct_message:
    case routed_message:
      if (len == 0 || dst == 0) return bad("a message needs a payload and a receiver");
      if (peer_.checked() && op == routed_message)
        return bad("a peer sends direct messages only (a routed one names its own source node and could pose as "
                   "an actor of this process)");
      break;
    case monitor_message:
      if (len == 0 || data != 0) return bad("a monitor message carries a payload and no operation data");
      break;
    case down_message:
      if (len == 0 || data != 0 || src == 0 || dst != 0) return bad("a down message carries a payload and its source");
      break;
    case heartbeat:
      if (len != 0 || data != 0 || src != 0 || dst != 0) return bad("a heartbeat is all zeros");
      break;
  }
  payload_left_ = len;
  reading_start_ = peer_.checked() && op == direct_message;
  receiver_ = dst;
  named_ = (flags & 0x01) != 0;
  start_.clear();
  ++frames_;
  return {};
}

Status BaspFilter::feed(std::span<const std::byte> bytes) {
  if (failed_) return *failed_;
  while (!bytes.empty()) {
    if (payload_left_ > 0) {
      auto n = static_cast<std::size_t>(std::min<std::uint64_t>(payload_left_, bytes.size()));
      if (reading_start_) {  // one byte at a time into the start until its type name is read
        n = std::min<std::size_t>(n, 1);
        start_.push_back(bytes.front());
        auto done = check_message_start();
        if (done && !*done && payload_left_ == 1) done = Error{errc::malformed, "BASP message " + std::to_string(frames_) +
                                                                                    " from a peer ends before its type name"};
        if (!done) {
          failed_ = done.error();
          return *failed_;
        }
        reading_start_ = !*done;
      }
      payload_left_ -= n;
      bytes = bytes.subspan(n);
      continue;
    }
    const std::size_t n = std::min(header_size - have_, bytes.size());
    std::copy_n(bytes.begin(), n, header_.begin() + static_cast<std::ptrdiff_t>(have_));
    have_ += n;
    bytes = bytes.subspan(n);
    if (have_ < header_size) break;
    have_ = 0;
    if (auto ok = check(header_); !ok) {
      failed_ = ok.error();
      return ok;
    }
  }
  return {};
}

// ---- PeerReceivers ----

void PeerReceivers::add(std::uint64_t id) {
  std::lock_guard lock(m_);
  ids_.insert(id);
}

void PeerReceivers::remove(std::uint64_t id) {
  std::lock_guard lock(m_);
  ids_.erase(id);
}

bool PeerReceivers::contains(std::uint64_t id) const {
  std::lock_guard lock(m_);
  return ids_.count(id) > 0;
}

std::size_t PeerReceivers::size() const {
  std::lock_guard lock(m_);
  return ids_.size();
}

// ---- DoorAdmission ----

DoorAdmission::DoorAdmission(Limits limits) : limits_(limits) {
  limits_.per_address = std::max<std::size_t>(1, limits_.per_address);
  limits_.total = std::max<std::size_t>(1, limits_.total);
}

std::vector<std::uint64_t> DoorAdmission::admit(std::uint64_t id, const std::string& address, double now) {
  std::vector<std::uint64_t> evict;
  if (pending_from(address) >= limits_.per_address) {
    for (const auto& [k, e] : pending_)
      if (e.address == address) {
        evict.push_back(k);
        break;
      }
  } else if (pending_.size() >= limits_.total) {
    evict.push_back(pending_.begin()->first);
  }
  for (auto k : evict) settle(k);
  pending_[id] = Entry{address, now + limits_.handshake_s};
  ++per_address_[address];
  return evict;
}

void DoorAdmission::settle(std::uint64_t id) {
  auto it = pending_.find(id);
  if (it == pending_.end()) return;
  if (auto a = per_address_.find(it->second.address); a != per_address_.end() && --a->second == 0) per_address_.erase(a);
  pending_.erase(it);
}

std::vector<std::uint64_t> DoorAdmission::expired(double now) const {
  std::vector<std::uint64_t> out;
  for (const auto& [k, e] : pending_)
    if (e.deadline <= now) out.push_back(k);
  return out;
}

double DoorAdmission::next_deadline() const {
  double d = std::numeric_limits<double>::infinity();
  for (const auto& [k, e] : pending_) d = std::min(d, e.deadline);
  return d;
}

std::size_t DoorAdmission::pending_from(const std::string& address) const {
  auto it = per_address_.find(address);
  return it == per_address_.end() ? 0 : it->second;
}

std::uint32_t peer_payload_bound(std::size_t largest_fragment_values, std::size_t fragments) {
  // CAF's message header (type names, sender and receiver) and a hello's name and join ask
  // fit many times over in what is left beside the certificate.
  constexpr std::size_t envelope = 64 * 1024;
  WireLimits l;
  l.max_fragment_values = std::min(l.max_fragment_values, largest_fragment_values);
  l.max_fragments = std::min(l.max_fragments, std::max<std::size_t>(fragments, 1));
  const std::size_t bound = std::max({max_frame_bytes(MessageType::fragment, l), max_frame_bytes(MessageType::progress, l),
                                      kMaxCertificateBytes}) +
                            envelope;
  return static_cast<std::uint32_t>(std::min<std::size_t>(bound, std::uint32_t{1} << 31));
}

}  // namespace diloco
