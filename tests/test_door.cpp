// The front door's rules: BASP headers CAF 0.17.6 cannot take are refused before CAF sees them,
// and idle connections cannot lock a legitimate peer out.
#define BOOST_TEST_MODULE door
#include <boost/test/unit_test.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "diloco/door.hpp"
#include "diloco/wire.hpp"

using namespace diloco;

namespace {

using Bytes = std::vector<std::byte>;

void put_be(Bytes& b, std::uint64_t v, int n) {
  for (int i = n - 1; i >= 0; --i) b.push_back(static_cast<std::byte>((v >> (8 * i)) & 0xff));
}

/// A BASP header as CAF 0.17 writes it (network byte order), then `payload` bytes.
Bytes frame(std::uint8_t op, std::uint32_t len, std::uint64_t data = 0, std::uint64_t src = 0, std::uint64_t dst = 0,
            std::uint8_t flags = 0) {
  Bytes b{static_cast<std::byte>(op), std::byte{0}, std::byte{0}, static_cast<std::byte>(flags)};
  put_be(b, len, 4);
  put_be(b, data, 8);
  put_be(b, src, 8);
  put_be(b, dst, 8);
  b.resize(b.size() + len, std::byte{0x5a});
  return b;
}

Bytes cat(std::initializer_list<Bytes> parts) {
  Bytes out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

Bytes hex(const std::string& h) {
  Bytes b;
  for (std::size_t i = 0; i + 1 < h.size(); i += 2) b.push_back(static_cast<std::byte>(std::stoi(h.substr(i, 2), nullptr, 16)));
  return b;
}

constexpr std::uint32_t max_payload = 1 << 20;

bool ok_(const Status& s) { return s.has_value(); }

}  // namespace

BOOST_AUTO_TEST_CASE(the_32_byte_frame_that_crashes_caf_is_refused_from_a_client) {
  // Operation 0 (server handshake), payload length 0, operation data 1: a null payload in
  // caf::io::basp::instance::handle.
  BaspFilter f(BaspSender::client, max_payload);
  auto ok = f.feed(hex("0000000000000000000000000000000100000000000000000000000000000000"));
  BOOST_REQUIRE(!ok);
  BOOST_TEST(ok.error().reason.find("server_handshake") != std::string::npos);
  BOOST_TEST(ok.error().reason.find("a client never sends it") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_rogue_server_cannot_send_a_handshake_without_payload) {
  BaspFilter f(BaspSender::server, max_payload);
  auto ok = f.feed(frame(0, 0, 1));
  BOOST_REQUIRE(!ok);
  BOOST_TEST(ok.error().reason.find("carries a payload") != std::string::npos);
  // Same for a client handshake without payload from a client.
  BaspFilter c(BaspSender::client, max_payload);
  BOOST_TEST(!ok_(c.feed(frame(1, 0))));
}

BOOST_AUTO_TEST_CASE(a_well_formed_client_stream_passes_in_any_chunking) {
  const Bytes stream = cat({frame(1, 40), frame(1, 40, 0, 0, 0, 0x02), frame(2, 100, 0, 7, 9), frame(6, 0),
                            frame(4, 24), frame(5, 30, 0, 11, 0), frame(3, 60, 0, 1, 2)});
  for (std::size_t piece : {std::size_t{1}, std::size_t{7}, std::size_t{32}, std::size_t{33}, stream.size()}) {
    BaspFilter f(BaspSender::client, max_payload);
    for (std::size_t at = 0; at < stream.size(); at += piece) {
      const auto n = std::min(piece, stream.size() - at);
      BOOST_REQUIRE(ok_(f.feed(std::span<const std::byte>(stream).subspan(at, n))));
    }
    BOOST_TEST(f.frames() == 7u);
  }
}

BOOST_AUTO_TEST_CASE(a_server_stream_starts_with_its_handshake_once) {
  BaspFilter f(BaspSender::server, max_payload);
  BOOST_TEST(ok_(f.feed(cat({frame(0, 50, 7700), frame(6, 0), frame(2, 10, 0, 1, 2)}))));
  BOOST_TEST(!ok_(f.feed(frame(0, 50, 7700))));  // a second server handshake
  BaspFilter g(BaspSender::server, max_payload);
  BOOST_TEST(!ok_(g.feed(frame(6, 0))));  // no handshake first
}

BOOST_AUTO_TEST_CASE(headers_caf_would_misread_are_refused) {
  auto refused = [](Bytes first_then) {
    BaspFilter f(BaspSender::client, max_payload);
    BOOST_REQUIRE(ok_(f.feed(frame(1, 40))));
    return !ok_(f.feed(first_then));
  };
  BOOST_TEST(refused(frame(7, 0)));                      // unknown operation
  BOOST_TEST(refused(frame(2, 10, 0, 1, 2, 0x80)));      // unknown flag
  BOOST_TEST(refused(frame(2, 0, 0, 1, 2)));             // message without payload
  BOOST_TEST(refused(frame(2, 10, 0, 1, 0)));            // message without receiver
  BOOST_TEST(refused(frame(4, 10, 5)));                  // monitor with operation data
  BOOST_TEST(refused(frame(5, 10, 0, 0, 0)));            // down message without source
  BOOST_TEST(refused(frame(6, 0, 1)));                   // heartbeat that is not all zeros
  Bytes big = frame(2, 0, 0, 1, 2);
  big[4] = std::byte{0x7f};                              // payload length 2^31-ish, no body needed
  BOOST_TEST(refused(big));
}

namespace {

/// A direct message's payload as CAF 0.17.6 writes it: no forwarding stages, type number 0, the
/// type name ("@<>+" and the element types), then `body` bytes standing for the elements.
Bytes message_payload(const std::string& type_name, std::size_t body = 16, std::uint8_t stages = 0) {
  Bytes p{static_cast<std::byte>(stages), std::byte{0}, std::byte{0}};
  std::size_t n = type_name.size();
  do {  // varbyte length
    std::uint8_t low = n & 0x7f;
    n >>= 7;
    p.push_back(static_cast<std::byte>(low | (n ? 0x80 : 0)));
  } while (n);
  for (char c : type_name) p.push_back(static_cast<std::byte>(c));
  p.resize(p.size() + body, std::byte{0x5a});
  return p;
}

/// A direct message (operation 2) from actor 7 to actor `to` (9) carrying `payload`.
Bytes direct(const Bytes& payload, std::uint8_t flags = 0, std::uint64_t to = 9) {
  Bytes f = frame(2, static_cast<std::uint32_t>(payload.size()), 0, 7, to, flags);
  std::copy(payload.begin(), payload.end(), f.end() - static_cast<std::ptrdiff_t>(payload.size()));
  return f;
}

const PeerMessages peer_types = {{"@atom", "@str", "@u64", "diloco.WireFrame", "diloco.JoinAsk"},
                                 {"@<>+@atom+@str+@strong_actor_ptr+@str"}};

/// Whether a client stream, after its handshake, is refused for `then` (fed in one piece and
/// byte by byte: the verdict must not depend on the chunking); the reason in `why`.
bool peer_refused(const Bytes& then, std::string* why = nullptr, const PeerMessages& rules = peer_types) {
  bool verdict = false;
  for (std::size_t piece : {then.size(), std::size_t{1}}) {
    BaspFilter f(BaspSender::client, max_payload, rules);
    BOOST_REQUIRE(ok_(f.feed(frame(1, 40))));
    Status last;
    for (std::size_t at = 0; at < then.size() && last; at += piece)
      last = f.feed(std::span<const std::byte>(then).subspan(at, std::min(piece, then.size() - at)));
    if (piece == then.size()) {
      verdict = !last;
      if (why && !last) *why = last.error().reason;
    } else {
      BOOST_TEST(!last == verdict, "byte by byte the verdict differs");
    }
  }
  return verdict;
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_proven_peer_cannot_kill_an_actor_or_pose_as_this_process) {
  // What our sites send passes, in any chunking, also several messages in one read.
  BOOST_TEST(!peer_refused(direct(message_payload("@<>+@atom+diloco.WireFrame"))));
  BOOST_TEST(!peer_refused(direct(message_payload("@<>+@atom+@str+diloco.WireFrame", 300))));
  BOOST_TEST(!peer_refused(cat({direct(message_payload("@<>+@atom+diloco.JoinAsk")), frame(6, 0),
                                direct(message_payload("@<>+@atom+@u64+@u64", 16))})));
  // An exit message with reason kill ends any actor (no handler traps it); an error or a down
  // message ends one without a handler; a link message naming a local actor is cast to a
  // proxy; a nested message or an actor handle is nothing a site sends.
  std::string why;
  BOOST_TEST(peer_refused(direct(message_payload("@<>+@exit")), &why));
  BOOST_TEST_MESSAGE(why);
  BOOST_TEST(why.find("an element of type '@exit'") != std::string::npos);
  for (const char* evil : {"@<>+@error", "@<>+@down", "@<>+@atom+@strong_actor_ptr", "@<>+@atom+@str+@message",
                           "@<>+@atom+@actor", "@<>+@group_down", "@<>+@open_stream_msg", "@<>+@atom+@exit"})
    BOOST_TEST(peer_refused(direct(message_payload(evil))), evil);
  // The empty message, a name without CAF's head, forwarding stages, a type number, a name too
  // long, and a payload that ends before its name is read.
  BOOST_TEST(peer_refused(direct(message_payload("@<>"))));
  BOOST_TEST(peer_refused(direct(message_payload("@atom+diloco.WireFrame"))));
  BOOST_TEST(peer_refused(direct(message_payload("@<>+@atom+diloco.WireFrame", 16, 1))));
  Bytes numbered = message_payload("@<>+@atom");
  numbered[2] = std::byte{1};
  BOOST_TEST(peer_refused(direct(numbered)));
  BOOST_TEST(peer_refused(direct(message_payload("@<>+" + std::string(BaspFilter::max_type_name, 'x')))));
  Bytes cut = message_payload("@<>+@atom+diloco.WireFrame", 0);
  cut.resize(cut.size() - 4);
  BOOST_TEST(peer_refused(direct(cut), &why));
  BOOST_TEST(why.find("ends before its type name") != std::string::npos);
  // A routed message names its own source node (it could pose as an actor of this process).
  BOOST_TEST(peer_refused(frame(3, 60, 0, 1, 2), &why));
  BOOST_TEST(why.find("direct messages only") != std::string::npos);
  // CAF's own servers (named receivers) are asked as a new node connects: (sys, get, "info")
  // to "SpawnServ" passes; a spawn request holding a nested message does not.
  BOOST_TEST(!peer_refused(direct(message_payload("@<>+@atom+@atom+@str"), 0x01)));
  BOOST_TEST(peer_refused(direct(message_payload("@<>+@atom+@str+@message+@strset"), 0x01)));
  // SpawnServ's answer holds an actor pointer and passes as a whole message; the same pointer
  // beside an atom alone is CAF's link request, and does not.
  BOOST_TEST(!peer_refused(direct(message_payload("@<>+@atom+@str+@strong_actor_ptr+@str"))));
  // Without peer types payloads pass unread, as a site's door reads the syncer.
  BaspFilter site(BaspSender::client, max_payload);
  BOOST_TEST(ok_(site.feed(cat({frame(1, 40), direct(message_payload("@<>+@exit")), frame(3, 60, 0, 1, 2)}))));
}

BOOST_AUTO_TEST_CASE(a_proven_peer_addresses_only_the_actors_handed_to_it) {
  // The gateway (9) and a relay (12) were handed out; the syncer (5) is an id a site learns as
  // the sender of what it tells the site's islands, and writing to it straight would skip the
  // relay's check of the frame's island.
  auto receivers = std::make_shared<PeerReceivers>();
  receivers->add(9);
  receivers->add(12);
  constexpr std::uint64_t spawn_serv = 0x1234;  // the atom value of CAF's "SpawnServ" (the actors layer's)
  PeerMessages rules = peer_types;
  rules.receivers = receivers;
  rules.named = {spawn_serv};
  const auto fragment = message_payload("@<>+@atom+diloco.WireFrame", 64);
  std::string why;
  BOOST_TEST(!peer_refused(direct(fragment, 0, 9), nullptr, rules));
  BOOST_TEST(!peer_refused(cat({direct(fragment, 0, 12), frame(6, 0), direct(fragment, 0, 9)}), nullptr, rules));
  BOOST_TEST(peer_refused(direct(fragment, 0, 5), &why, rules));
  BOOST_TEST_MESSAGE(why);
  BOOST_TEST(why.find("to actor 5, which was never handed to a peer") != std::string::npos);
  // Allowed first, then the syncer in the same stream: the connection ends at the second.
  BOOST_TEST(peer_refused(cat({direct(fragment, 0, 9), direct(fragment, 0, 5)}), nullptr, rules));
  // A relay that ended is no receiver any more.
  receivers->remove(12);
  BOOST_TEST(peer_refused(direct(fragment, 0, 12), nullptr, rules));
  // By name: CAF's "SpawnServ" only (the flag turns the receiver field into an atom value).
  BOOST_TEST(!peer_refused(direct(message_payload("@<>+@atom+@atom+@str"), 0x01, spawn_serv), nullptr, rules));
  BOOST_TEST(peer_refused(direct(message_payload("@<>+@atom+@atom+@str"), 0x01, 0x9999), &why, rules));
  BOOST_TEST(why.find("named receiver") != std::string::npos);
  // SpawnServ's answer goes to the helper the middleman spawned for the exchange: any receiver.
  BOOST_TEST(!peer_refused(direct(message_payload("@<>+@atom+@str+@strong_actor_ptr+@str"), 0, 77), nullptr, rules));
  // What a message may hold is checked before whom it is for.
  BOOST_TEST(peer_refused(direct(message_payload("@<>+@exit"), 0, 9), &why, rules));
  BOOST_TEST(why.find("'@exit'") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(unanswered_challenges_are_bounded_oldest_first_whatever_the_keys) {
  ChallengeTable<int, std::string> t(3);
  t.put(50, "fifty");
  t.put(10, "ten");
  t.put(90, "ninety");
  t.put(5, "five");  // the oldest (50) goes, not the smallest key (5, 10)
  BOOST_TEST(t.size() == 3u);
  BOOST_TEST(!t.take(50));
  BOOST_TEST(t.take(10).value() == "ten");
  BOOST_TEST(!t.take(10));  // a challenge answers one proof
  // Asking again replaces the challenge and makes it the newest.
  t.put(90, "ninety again");
  t.put(1, "one");
  t.put(2, "two");  // 5 is now the oldest
  BOOST_TEST(!t.take(5));
  BOOST_TEST(t.take(90).value() == "ninety again");
  // A flood of new keys never keeps more than the bound.
  for (int k = 100; k < 1100; ++k) t.put(k, "flood");
  BOOST_TEST(t.size() == 3u);
  BOOST_TEST(t.take(1099).has_value());
}

BOOST_AUTO_TEST_CASE(a_site_asking_to_join_again_and_again_is_answered_once_an_interval) {
  JoinThrottle<std::string> t(1.0);
  // The first join of an island passes at once, and so does another island's.
  auto a = t.arrive(2, 10.0, "2 first");
  BOOST_TEST(a.pass.value() == "2 first");
  BOOST_TEST(!a.wake);
  BOOST_TEST(t.arrive(3, 10.1, "3 first").pass.value() == "3 first");
  // Again within the interval: it is held until the interval is over ...
  a = t.arrive(2, 10.2, "2 again");
  BOOST_TEST(!a.pass);
  BOOST_TEST(a.wake.value() == 11.0);
  BOOST_TEST(t.waiting() == 1u);
  // ... and a burst while it is held only replaces it: no more moments to wait for, and the
  // newest is what passes.
  for (int k = 0; k < 1000; ++k) {
    const auto b = t.arrive(2, 10.3 + k * 1e-4, "2 burst " + std::to_string(k));
    BOOST_TEST((!b.pass && !b.wake));
  }
  BOOST_TEST(t.waiting() == 1u);
  BOOST_TEST(t.release(2, 11.0).value() == "2 burst 999");
  BOOST_TEST(!t.release(2, 11.0));  // one was held, one passed
  BOOST_TEST(t.waiting() == 0u);
  // The interval counts from the join that passed last.
  BOOST_TEST(t.arrive(2, 11.5, "2 later").wake.value() == 12.0);
  BOOST_TEST(t.release(2, 12.0).value() == "2 later");
  BOOST_TEST(t.arrive(2, 13.0, "2 after").pass.value() == "2 after");
  // Nothing is held for a release that never was asked for.
  BOOST_TEST(!t.release(7, 20.0));
  // Interval 0: every join passes at once.
  JoinThrottle<int> off(0.0);
  for (int k = 0; k < 3; ++k) BOOST_TEST(off.arrive(1, 5.0, k).pass.value() == k);
}

BOOST_AUTO_TEST_CASE(a_peers_payload_is_bounded_by_the_runs_largest_fragment_frame) {
  // Fits the largest fragment's frame at its largest encoding, and a hello's certificate.
  const std::size_t largest = 1 << 20;
  WireLimits l;
  l.max_fragment_values = largest;
  const auto bound = peer_payload_bound(largest, 2);
  BOOST_TEST(bound >= max_frame_bytes(MessageType::fragment, l));
  BOOST_TEST(bound < max_frame_bytes(MessageType::fragment, l) + 128 * 1024);
  BOOST_TEST(peer_payload_bound(4, 2) > kMaxCertificateBytes);
  BOOST_TEST(peer_payload_bound(4, 2) < 256u * 1024);
  // A progress report of many fragments fits too.
  WireLimits many;
  many.max_fragments = 4096;
  BOOST_TEST(peer_payload_bound(4, 4096) >= max_frame_bytes(MessageType::progress, many));
  // Past what a frame may carry at all, the door's own bound.
  BOOST_TEST(peer_payload_bound(std::size_t{1} << 40, 2) <= (std::uint32_t{1} << 31));
  // A payload over the bound closes the connection at its header.
  const auto small = peer_payload_bound(4, 2);
  BaspFilter f(BaspSender::client, small);
  BOOST_REQUIRE(ok_(f.feed(cat({frame(1, 40), frame(2, small, 0, 7, 9)}))));
  auto over = f.feed(frame(2, small + 1, 0, 7, 9));
  BOOST_REQUIRE(!over);
  BOOST_TEST(over.error().reason.find("payload larger than " + std::to_string(small)) != std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_refused_stream_stays_refused) {
  BaspFilter f(BaspSender::client, max_payload);
  BOOST_REQUIRE(!ok_(f.feed(frame(7, 0))));
  BOOST_TEST(!ok_(f.feed(frame(1, 40))));
}

BOOST_AUTO_TEST_CASE(a_flood_of_idle_connections_evicts_its_own_oldest_and_lets_a_newcomer_wait) {
  DoorAdmission a({4, 8, 5.0});
  std::vector<std::uint64_t> evicted;
  for (std::uint64_t id = 1; id <= 1000; ++id) {
    auto out = a.admit(id, "10.0.0.66", 0.001 * static_cast<double>(id));
    evicted.insert(evicted.end(), out.begin(), out.end());
  }
  BOOST_TEST(a.pending() == 4u);
  BOOST_TEST(evicted.size() == 996u);
  BOOST_TEST(evicted.front() == 1u);
  // A site from another address is admitted without evicting anyone of its own.
  BOOST_TEST(a.admit(2000, "10.0.0.7", 1.0).empty());
  BOOST_TEST(a.pending_from("10.0.0.7") == 1u);
  // A newcomer from the flooding address costs the flooder its oldest, not the site.
  auto out = a.admit(2001, "10.0.0.66", 1.0);
  BOOST_REQUIRE(out.size() == 1u);
  BOOST_TEST(out.front() == 997u);
  BOOST_TEST(a.pending_from("10.0.0.7") == 1u);
}

BOOST_AUTO_TEST_CASE(many_addresses_are_bounded_in_total_oldest_first) {
  DoorAdmission a({4, 3, 5.0});
  BOOST_TEST(a.admit(1, "a", 0.0).empty());
  BOOST_TEST(a.admit(2, "b", 0.0).empty());
  BOOST_TEST(a.admit(3, "c", 0.0).empty());
  auto out = a.admit(4, "d", 0.0);
  BOOST_REQUIRE(out.size() == 1u);
  BOOST_TEST(out.front() == 1u);
  BOOST_TEST(a.pending() == 3u);
}

BOOST_AUTO_TEST_CASE(a_handshake_that_does_not_finish_in_time_expires) {
  DoorAdmission a({32, 256, 2.0});
  (void)a.admit(1, "a", 10.0);
  (void)a.admit(2, "a", 11.0);
  BOOST_TEST(a.next_deadline() == 12.0);
  BOOST_TEST(a.expired(11.9).empty());
  BOOST_TEST(a.expired(12.0) == std::vector<std::uint64_t>{1});
  a.settle(1);
  a.settle(1);  // twice is harmless
  BOOST_TEST(a.expired(20.0) == std::vector<std::uint64_t>{2});
  a.settle(2);
  BOOST_TEST(a.pending() == 0u);
  BOOST_TEST(a.pending_from("a") == 0u);
}

BOOST_AUTO_TEST_CASE(endpoints_parse_or_name_the_problem) {
  auto e = parse_endpoint("[::1]:7700");
  BOOST_TEST(e.host == "::1");
  BOOST_TEST(e.port == 7700);
  BOOST_CHECK_THROW(parse_endpoint("host"), std::invalid_argument);
  BOOST_CHECK_THROW(parse_endpoint("host:70000"), std::invalid_argument);
}
