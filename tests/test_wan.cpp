// Emulated WAN links: bandwidth queue, latency and jitter, loss with retransmission, partitions.
#define BOOST_TEST_MODULE wan
#include <boost/test/unit_test.hpp>

#include "diloco/wan.hpp"

using namespace diloco;
namespace tt = boost::test_tools;

namespace {
LinkConfig mb_per_second(double latency = 0.1) {
  LinkConfig c;
  c.bandwidth_Bps = 1e6;
  c.latency_s = latency;
  return c;
}
}  // namespace

BOOST_AUTO_TEST_CASE(bandwidth_queue_serialises_messages_in_order) {
  WanLink link(mb_per_second());
  auto a = link.send(1'000'000, 0.0), b = link.send(1'000'000, 0.0), c = link.send(500'000, 5.0);
  BOOST_TEST(a.delivered_at == 1.1, tt::tolerance(1e-12));
  BOOST_TEST(b.delivered_at == 2.1, tt::tolerance(1e-12));  // waited for the first
  BOOST_TEST(c.delivered_at == 5.6, tt::tolerance(1e-12));  // idle link: no wait
  BOOST_TEST(link.bytes_carried() == 2'500'000u);
  BOOST_TEST(link.payload_bytes() == 2'500'000u);
  BOOST_TEST(link.messages() == 3u);
}

BOOST_AUTO_TEST_CASE(jitter_stays_in_bounds_and_never_reorders) {
  auto cfg = mb_per_second(0.1);
  cfg.jitter_s = 0.05;
  WanLink link(cfg);
  double last = 0.0;
  for (int i = 0; i < 200; ++i) {
    const double now = i * 0.01;
    auto d = link.send(1000, now);
    BOOST_TEST(d.delivered_at >= last);
    BOOST_TEST(d.delivered_at >= now + 0.001 + 0.05 - 1e-12);
    BOOST_TEST(d.delivered_at <= now + 0.001 + 0.15 + 1e-12);
    last = d.delivered_at;
  }
}

BOOST_AUTO_TEST_CASE(lost_transmissions_are_resent_after_the_timeout_and_counted) {
  auto cfg = mb_per_second(0.0);
  cfg.loss = 0.5;
  cfg.retransmit_timeout_s = 1.0;
  WanLink link(cfg);
  std::uint64_t resent = 0;
  for (int i = 0; i < 100; ++i) {
    auto d = link.send(1000, 0.0);
    BOOST_TEST(d.wire_bytes == 1000u * static_cast<std::uint64_t>(d.transmissions));
    resent += static_cast<std::uint64_t>(d.transmissions - 1);
  }
  BOOST_TEST(link.retransmissions() == resent);
  BOOST_TEST(resent > 50u);  // about one per message at 50% loss
  BOOST_TEST(resent < 200u);
  BOOST_TEST(link.bytes_carried() == link.payload_bytes() + 1000u * resent);
}

BOOST_AUTO_TEST_CASE(nothing_leaves_during_a_partition) {
  auto cfg = mb_per_second(0.1);
  cfg.partitions = {{1.0, 5.0}};
  WanLink link(cfg);
  BOOST_TEST(link.partitioned(2.0));
  BOOST_TEST(!link.partitioned(5.0));
  auto d = link.send(1'000'000, 2.0);
  BOOST_TEST(d.delivered_at == 6.1, tt::tolerance(1e-12));
  BOOST_TEST(d.transmissions == 1);
}

// A site process that started 2.5 s after the syncer's: the syncer's end of its link holds
// frames over the same window of time as the site's end, 2.5 s later on the syncer's clock.
BOOST_AUTO_TEST_CASE(a_partition_shifted_to_another_clock_holds_frames_over_the_shifted_window) {
  auto cfg = mb_per_second(0.1);
  cfg.partitions = {{1.0, 5.0}};
  WanLink link(cfg);
  link.shift_partitions(2.5);
  BOOST_TEST(!link.partitioned(2.0));
  BOOST_TEST(link.partitioned(3.5));
  BOOST_TEST(link.partitioned(7.0));
  BOOST_TEST(!link.partitioned(7.5));
  BOOST_TEST(link.send(1'000'000, 2.0).delivered_at == 3.1, tt::tolerance(1e-12));  // before the cut
  BOOST_TEST(link.send(1'000'000, 4.0).delivered_at == 8.6, tt::tolerance(1e-12));  // held until 7.5
  link.shift_partitions(-1.0);  // from where the config put them, not cumulative
  BOOST_TEST(link.partitioned(0.0));
  BOOST_TEST(!link.partitioned(4.0));
}

BOOST_AUTO_TEST_CASE(a_partition_cutting_a_transmission_resends_it_once_healed) {
  auto cfg = mb_per_second(0.0);
  cfg.partitions = {{0.5, 2.0}};
  WanLink link(cfg);
  auto d = link.send(1'000'000, 0.0);
  BOOST_TEST(d.transmissions == 2);
  BOOST_TEST(d.delivered_at == 3.0, tt::tolerance(1e-12));
  BOOST_TEST(d.wire_bytes == 1'500'000u);  // half went out before the cut, then all of it again
}

BOOST_AUTO_TEST_CASE(the_same_seed_replays_the_same_deliveries) {
  auto cfg = mb_per_second(0.05);
  cfg.jitter_s = 0.02;
  cfg.loss = 0.2;
  WanLink a(cfg), b(cfg);
  for (int i = 0; i < 50; ++i) {
    auto x = a.send(5000, i * 0.1), y = b.send(5000, i * 0.1);
    BOOST_TEST(x.delivered_at == y.delivered_at);
    BOOST_TEST(x.transmissions == y.transmissions);
  }
}

BOOST_AUTO_TEST_CASE(peak_utilisation_sees_a_burst) {
  WanLink link(mb_per_second(0.0));
  link.send(500'000, 0.0);   // busy 0.0-0.5
  link.send(100'000, 10.0);  // busy 10.0-10.1
  BOOST_TEST(link.peak_utilisation(1.0) == 0.5, tt::tolerance(1e-12));
  BOOST_TEST(link.peak_utilisation(0.25) == 1.0, tt::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE(bad_link_settings_name_the_key) {
  LinkConfig c;
  c.bandwidth_Bps = 0;
  c.loss = 1.0;
  c.partitions = {{3.0, 2.0}};
  auto e = validate(c, "links.us-west");
  BOOST_REQUIRE(e.size() == 3u);
  BOOST_TEST(e[0].find("links.us-west.bandwidth") == 0u);
  BOOST_TEST(e[1].find("links.us-west.loss") == 0u);
  BOOST_TEST(e[2].find("links.us-west.partitions") == 0u);
  BOOST_CHECK_THROW(WanLink{c}, std::invalid_argument);
}
