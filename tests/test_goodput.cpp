// Goodput: the meter counts useful, lost and in-flight chip-seconds and global downtime by
// hand-computed cases.
#define BOOST_TEST_MODULE goodput
#include <boost/test/unit_test.hpp>

#include "diloco/goodput.hpp"

using namespace diloco;
namespace tt = boost::test_tools;

BOOST_AUTO_TEST_CASE(chip_seconds_become_useful_only_when_merged) {
  GoodputMeter m(1, 2, 1, 1, 0.0, 0.0);
  m.step(0, 2, 1.5);  // 3 chip-seconds
  BOOST_TEST(m.report(2.0).useful_chip_s == 0.0);
  BOOST_TEST(m.report(2.0).in_flight_chip_s == 3.0, tt::tolerance(1e-12));
  m.sent(0, 0);
  BOOST_TEST(m.report(2.0).useful_chip_s == 0.0);
  BOOST_TEST(m.report(2.0).in_flight_chip_s == 3.0, tt::tolerance(1e-12));
  m.merged(0, 0);
  auto r = m.report(2.0);
  BOOST_TEST(r.useful_chip_s == 3.0, tt::tolerance(1e-12));
  BOOST_TEST(r.in_flight_chip_s == 0.0);
  BOOST_TEST(r.provisioned_chip_s == 4.0, tt::tolerance(1e-12));
  BOOST_TEST(r.goodput == 0.75, tt::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE(contributions_merge_oldest_first_and_dropped_ones_are_lost_as_stale) {
  GoodputMeter m(1, 1, 1, 1, 0.0, 0.0);
  m.step(0, 1, 1.0);
  m.sent(0, 0);       // 1 chip-second in flight
  m.step(0, 1, 2.0);
  m.sent(0, 0);       // then 2
  m.dropped(0, 0);    // the older one was too stale
  m.merged(0, 0);
  auto r = m.report(3.0);
  BOOST_TEST(r.lost_stale_chip_s == 1.0, tt::tolerance(1e-12));
  BOOST_TEST(r.useful_chip_s == 2.0, tt::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE(a_lost_island_loses_its_unsent_work_but_in_flight_work_may_still_merge) {
  // 2 islands × 2 chips, P = 2 fragments, 10 s of wall time: 40 chip-seconds provisioned.
  GoodputMeter m(2, 2, 2, 1, 0.0, 0.0);
  for (int i = 0; i < 3; ++i) m.step(0, 2, 1.0);  // 6 chip-s: 3 per fragment
  m.sent(0, 0);                                   // fragment 0's 3 in flight
  m.step(0, 1, 1.0);                              // one chip left: 0.5 per fragment
  m.island_lost(0);                               // unsent: 0.5 (fragment 0) + 3.5 (fragment 1)
  m.merged(0, 0);                                 // its in-flight contribution still lands
  for (int i = 0; i < 2; ++i) m.step(1, 2, 1.5);  // 6 chip-s: 3 per fragment
  m.sent(1, 0);
  m.sent(1, 1);
  m.merged(1, 1);
  m.dropped(1, 0);
  auto r = m.report(10.0);
  BOOST_TEST(r.provisioned_chip_s == 40.0, tt::tolerance(1e-12));
  BOOST_TEST(r.useful_chip_s == 6.0, tt::tolerance(1e-12));
  BOOST_TEST(r.lost_failure_chip_s == 4.0, tt::tolerance(1e-12));
  BOOST_TEST(r.lost_stale_chip_s == 3.0, tt::tolerance(1e-12));
  BOOST_TEST(r.in_flight_chip_s == 0.0);
  BOOST_TEST(r.goodput == 0.15, tt::tolerance(1e-12));
  BOOST_TEST(r.elapsed_s == 10.0, tt::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE(downtime_counts_only_past_the_expected_gap_and_while_a_quorum_is_alive) {
  // 3 islands, K = 2, a round every 5 s is normal; the run starts at t = 100.
  GoodputMeter m(3, 1, 1, 2, 5.0, 100.0);
  m.commit(103.0);                        // stretch 100-103: within the allowance
  m.commit(115.0);                        // 103-115: 12 s, 7 beyond the allowance
  BOOST_TEST(m.report(115.0).global_downtime_s == 7.0, tt::tolerance(1e-12));
  m.alive(2, 116.0);                      // still a quorum: the stretch goes on
  m.alive(1, 118.0);                      // 115-118 closes: 3 s, within the allowance
  BOOST_TEST(m.report(125.0).global_downtime_s == 7.0, tt::tolerance(1e-12));  // no quorum: not downtime
  m.alive(3, 130.0);                      // a new stretch, with its own allowance
  BOOST_TEST(m.report(132.0).global_downtime_s == 7.0, tt::tolerance(1e-12));
  m.commit(133.0);                        // 130-133: 0
  BOOST_TEST(m.report(145.0).global_downtime_s == 14.0, tt::tolerance(1e-12));  // open stretch 133-145: 7
  m.alive(0, 150.0);                      // 133-150 closes: 12
  m.commit(160.0);                        // a round from in-flight work while nobody is alive: nothing
  BOOST_TEST(m.report(200.0).global_downtime_s == 19.0, tt::tolerance(1e-12));
  BOOST_TEST(m.report(200.0).elapsed_s == 100.0, tt::tolerance(1e-12));
}
