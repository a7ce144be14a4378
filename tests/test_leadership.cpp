// Leadership of a replicated syncer: the lease hold that stops a cut-off leader before etcd can
// elect another, the term fence, what a majority holds, and the etcd client against a real etcd
// (started on loopback by the etcd ctest fixture; its URL is in the file DILOCO_ETCD_FILE).
#define BOOST_TEST_MODULE leadership
#include <boost/test/unit_test.hpp>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "diloco/leadership.hpp"

using namespace diloco;

BOOST_AUTO_TEST_CASE(a_leader_stops_acting_half_a_lease_after_its_last_renewal_was_sent) {
  LeaseHold h(6.0);
  BOOST_TEST(!h.valid(0.0));  // nothing renewed yet
  h.renewed(10.0);
  BOOST_TEST(h.valid(10.0));
  BOOST_TEST(h.valid(12.9));
  BOOST_TEST(!h.valid(13.0));  // etcd could expire the lease at 16.0 at the earliest
  h.renewed(9.0);              // an older renewal answered late moves nothing back
  BOOST_TEST(!h.valid(13.0));
  h.renewed(12.5);
  BOOST_TEST(h.valid(15.4));
  BOOST_TEST(h.keepalive_period() == 1.0);
}

BOOST_AUTO_TEST_CASE(the_term_fence_refuses_only_older_terms) {
  TermFence f;
  BOOST_TEST(f.admit(0));  // an unreplicated syncer's sessions carry term 0
  BOOST_TEST(f.admit(7));
  BOOST_TEST(f.admit(7));  // the same leader again (a reconnect)
  BOOST_TEST(!f.admit(5)); // a deposed leader
  BOOST_TEST(f.newest() == 7u);
  BOOST_TEST(f.admit(12));
  BOOST_TEST(!f.admit(7));
}

BOOST_AUTO_TEST_CASE(a_majority_round_is_held_by_more_than_half_of_the_replicas) {
  BOOST_TEST(majority_round(10, {}, 1) == 10u);        // alone: itself
  BOOST_TEST(majority_round(10, {}, 3) == 0u);         // no follower heard of
  BOOST_TEST(majority_round(10, {8}, 3) == 8u);        // leader 10 and one follower at 8
  BOOST_TEST(majority_round(10, {8, 9}, 3) == 9u);
  BOOST_TEST(majority_round(10, {12, 3}, 3) == 10u);   // a follower never holds more than the leader
  BOOST_TEST(majority_round(10, {9}, 2) == 9u);        // two replicas: both
  BOOST_TEST(majority_round(10, {4, 6, 8, 9}, 5) == 8u);
}

BOOST_AUTO_TEST_CASE(an_elected_replica_behind_a_live_one_names_it) {
  BOOST_TEST(commits_held({3, 4, 4}) == 11u);
  const std::vector<std::pair<std::string, std::string>> held{{"syncer-a", "14"}, {"syncer-b", "15"}, {"syncer-c", "x"}};
  BOOST_TEST(!newer_replica(15, held, "syncer-b").has_value());  // it holds the most
  BOOST_TEST(*newer_replica(14, held, "syncer-a") == "syncer-b");
  BOOST_TEST(*newer_replica(3, held, "syncer-c") == "syncer-b");  // the most up-to-date, not the first
  BOOST_TEST(!newer_replica(16, held, "syncer-c").has_value());
  BOOST_TEST(!newer_replica(0, {{"syncer-a", "99999999999999999999999"}}, "syncer-b").has_value());  // not a count
}

BOOST_AUTO_TEST_CASE(base64_round_trips_every_length_and_refuses_bad_text) {
  std::mt19937 rng(3);
  for (std::size_t n = 0; n < 40; ++n) {
    std::string s(n, '\0');
    for (auto& c : s) c = static_cast<char>(rng());
    auto back = base64_decode(base64_encode(s));
    BOOST_REQUIRE(back.has_value());
    BOOST_TEST(*back == s);
  }
  BOOST_TEST(base64_encode("syncer-a") == "c3luY2VyLWE=");
  BOOST_TEST(!base64_decode("abc").has_value());
  BOOST_TEST(!base64_decode("ab!d").has_value());
  BOOST_TEST(!base64_decode("a=bc").has_value());
}

namespace {

/// The error's message, or "" (Boost evaluates a check's message even when the check passes).
template <class E>
std::string why(const E& e) {
  return e ? std::string() : e.error().message();
}

std::string etcd_endpoint() {
  const char* file = std::getenv("DILOCO_ETCD_FILE");
  BOOST_REQUIRE_MESSAGE(file, "DILOCO_ETCD_FILE is not set (ctest's etcd fixture sets it)");
  std::ifstream in(file);
  std::string url;
  in >> url;
  BOOST_REQUIRE_MESSAGE(!url.empty(), std::string("no etcd endpoint in ") + file);
  return url;
}

}  // namespace

BOOST_AUTO_TEST_CASE(etcd_elects_one_leader_and_the_next_when_its_lease_ends) {
  Etcd etcd(etcd_endpoint());
  const std::string election = "test-election-" + std::to_string(std::random_device{}());
  auto none = etcd.leader(election);
  BOOST_REQUIRE_MESSAGE(none, why(none));
  BOOST_TEST(!none->has_value());

  auto a = etcd.grant(2.0), b = etcd.grant(2.0);
  BOOST_REQUIRE(a);
  BOOST_REQUIRE(b);
  auto won = etcd.campaign(election, *a, "syncer-a");
  BOOST_REQUIRE_MESSAGE(won, why(won));
  BOOST_TEST(won->term > 0u);
  auto leader = etcd.leader(election);
  BOOST_REQUIRE(leader);
  BOOST_REQUIRE(leader->has_value());
  BOOST_TEST((*leader)->value == "syncer-a");
  BOOST_TEST((*leader)->term == won->term);

  // b campaigns on a thread: it leads only once a's lease is gone (revoked here, or expired).
  std::atomic<bool> b_won{false};
  std::uint64_t b_term = 0;
  std::thread t([&] {
    Etcd other(etcd_endpoint());
    auto r = other.campaign(election, *b, "syncer-b");
    if (r) b_term = r->term, b_won = true;
  });
  for (int i = 0; i < 10; ++i) {  // a renews; b keeps waiting
    auto ttl = etcd.keepalive(*a);
    BOOST_REQUIRE_MESSAGE(ttl, why(ttl));
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    BOOST_TEST(!b_won.load());
    auto kb = etcd.keepalive(*b);
    BOOST_REQUIRE(kb);
  }
  BOOST_REQUIRE(etcd.revoke(*a));
  for (int i = 0; i < 100 && !b_won.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  t.join();
  BOOST_REQUIRE(b_won.load());
  BOOST_TEST(b_term > won->term);  // terms only grow: a's sessions are fenced off
  auto now = etcd.leader(election);
  BOOST_REQUIRE(now);
  BOOST_REQUIRE(now->has_value());
  BOOST_TEST((*now)->value == "syncer-b");
  auto gone = etcd.keepalive(*a);
  BOOST_TEST(!gone);  // a revoked lease cannot be renewed
  BOOST_REQUIRE(etcd.revoke(*b));
}

BOOST_AUTO_TEST_CASE(keys_put_under_a_lease_are_listed_and_go_with_it) {
  Etcd etcd(etcd_endpoint());
  const std::string prefix = "test-held-" + std::to_string(std::random_device{}()) + "/";
  auto lease = etcd.grant(5.0);
  BOOST_REQUIRE(lease);
  BOOST_REQUIRE(etcd.put(prefix + "syncer-b", "17", *lease));
  BOOST_REQUIRE(etcd.put(prefix + "syncer-a", "12"));
  BOOST_REQUIRE(etcd.put(prefix.substr(0, prefix.size() - 1) + "0", "outside"));  // past the prefix
  auto got = etcd.list(prefix);
  BOOST_REQUIRE_MESSAGE(got, why(got));
  BOOST_REQUIRE(got->size() == 2u);
  BOOST_TEST((*got)[0].first == prefix + "syncer-a");
  BOOST_TEST((*got)[1].second == "17");
  BOOST_REQUIRE(etcd.revoke(*lease));
  auto after = etcd.list(prefix);
  BOOST_REQUIRE(after);
  BOOST_REQUIRE(after->size() == 1u);  // syncer-b's key went with its lease
  BOOST_TEST((*after)[0].first == prefix + "syncer-a");
}

// An elected replica behind another resigns; the other is elected next and must still see the
// resigned one's count (its lease and key live on), else each would find nobody beside it and
// resign in turn for ever.
BOOST_AUTO_TEST_CASE(a_resigned_candidate_keeps_its_count_visible_and_the_next_is_elected) {
  Etcd etcd(etcd_endpoint());
  const std::string election = "test-resign-" + std::to_string(std::random_device{}());
  const std::string held = election + ".held/";
  auto a = etcd.grant(5.0), b = etcd.grant(5.0);
  BOOST_REQUIRE(a);
  BOOST_REQUIRE(b);
  BOOST_REQUIRE(etcd.put(held + "syncer-a", "12", *a));
  BOOST_REQUIRE(etcd.put(held + "syncer-b", "17", *b));
  auto won_a = etcd.campaign(election, *a, "syncer-a");
  BOOST_REQUIRE_MESSAGE(won_a, why(won_a));
  std::atomic<bool> b_won{false};
  std::optional<Etcd::Leader> b_lead;
  std::thread t([&] {
    Etcd other(etcd_endpoint());
    auto r = other.campaign(election, *b, "syncer-b");
    if (r) b_lead = *r, b_won = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  BOOST_TEST(!b_won.load());
  // a sees b ahead of it and resigns.
  auto seen_by_a = etcd.list(held);
  BOOST_REQUIRE(seen_by_a);
  std::vector<std::pair<std::string, std::string>> others_a;
  for (auto& [k, v] : *seen_by_a)
    if (k != held + "syncer-a") others_a.emplace_back(k.substr(held.size()), v);
  auto ahead = newer_replica(12, others_a, "syncer-a");
  BOOST_REQUIRE(ahead.has_value());
  BOOST_TEST(*ahead == "syncer-b");
  BOOST_REQUIRE(etcd.resign(*won_a));
  for (int i = 0; i < 100 && !b_won.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  t.join();
  BOOST_REQUIRE(b_won.load());
  BOOST_TEST(b_lead->term > won_a->term);
  // b, elected, sees a's count still there (a's lease was kept) and nobody newer: it leads.
  auto seen_by_b = etcd.list(held);
  BOOST_REQUIRE(seen_by_b);
  BOOST_REQUIRE(seen_by_b->size() == 2u);
  std::vector<std::pair<std::string, std::string>> others_b;
  for (auto& [k, v] : *seen_by_b)
    if (k != held + "syncer-b") others_b.emplace_back(k.substr(held.size()), v);
  BOOST_TEST(!newer_replica(17, others_b, "syncer-b").has_value());
  // a campaigns again under the same lease: it waits behind b.
  std::atomic<bool> a_again{false};
  std::thread t2([&] {
    Etcd other(etcd_endpoint());
    if (other.campaign(election, *a, "syncer-a")) a_again = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  BOOST_TEST(!a_again.load());
  BOOST_REQUIRE(etcd.revoke(*b));
  for (int i = 0; i < 100 && !a_again.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  t2.join();
  BOOST_TEST(a_again.load());
  BOOST_REQUIRE(etcd.revoke(*a));
}

BOOST_AUTO_TEST_CASE(a_campaign_is_cancelled_and_an_unreachable_etcd_is_named) {
  Etcd etcd(etcd_endpoint());
  const std::string election = "test-cancel-" + std::to_string(std::random_device{}());
  auto a = etcd.grant(5.0), b = etcd.grant(5.0);
  BOOST_REQUIRE(a);
  BOOST_REQUIRE(b);
  BOOST_REQUIRE(etcd.campaign(election, *a, "first"));
  std::atomic<bool> cancel{false};
  std::thread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    cancel = true;
  });
  const auto t0 = std::chrono::steady_clock::now();
  auto r = etcd.campaign(election, *b, "second", &cancel);
  stopper.join();
  BOOST_TEST(!r);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  BOOST_TEST(took < 3.0);
  BOOST_REQUIRE(etcd.revoke(*a));
  BOOST_REQUIRE(etcd.revoke(*b));

  Etcd nowhere("http://127.0.0.1:1", 1.0);
  auto lease = nowhere.grant(2.0);
  BOOST_REQUIRE(!lease);
  BOOST_TEST(lease.error().reason.find("127.0.0.1:1") != std::string::npos);
}
