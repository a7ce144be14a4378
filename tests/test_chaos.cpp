// Chaos: the seeded fault schedule replays exactly and has the configured rates (the goodput
// meter is tested in test_goodput.cpp).
#define BOOST_TEST_MODULE chaos
#include <boost/test/unit_test.hpp>

#include <map>
#include <utility>

#include "diloco/chaos.hpp"

using namespace diloco;
namespace tt = boost::test_tools;

namespace {
ChaosConfig every_kind(std::uint64_t seed = 7) {
  ChaosConfig c;
  c.enabled = true;
  c.seed = seed;
  c.chip_mtbf_s = 60.0;
  c.island_mtbf_s = 120.0;
  c.syncer_mtbf_s = 200.0;
  c.repair_s = 5.0;
  c.straggler_mtbf_s = 90.0;
  c.partition_mtbf_s = 150.0;
  c.horizon_s = 1000.0;
  return c;
}

int count(const std::vector<ChaosEvent>& s, ChaosEvent::Kind k) {
  int n = 0;
  for (const auto& e : s) n += e.kind == k;
  return n;
}
}  // namespace

BOOST_AUTO_TEST_CASE(the_same_seed_and_topology_replay_the_same_schedule) {
  auto a = chaos_schedule(every_kind(), 4, 2, 3), b = chaos_schedule(every_kind(), 4, 2, 3);
  BOOST_REQUIRE(!a.empty());
  BOOST_REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) BOOST_TEST(a[i].describe() == b[i].describe());
  BOOST_TEST(schedule_hash(a) == schedule_hash(b));
  for (auto k : {ChaosEvent::kill_chip, ChaosEvent::kill_island, ChaosEvent::kill_syncer, ChaosEvent::straggle,
                 ChaosEvent::partition})
    BOOST_TEST(count(a, k) > 0, to_string(k));
}

BOOST_AUTO_TEST_CASE(a_different_seed_gives_a_different_schedule) {
  auto a = chaos_schedule(every_kind(7), 4, 2, 3), b = chaos_schedule(every_kind(8), 4, 2, 3);
  BOOST_TEST(schedule_hash(a) != schedule_hash(b));
}

BOOST_AUTO_TEST_CASE(adding_a_chip_leaves_the_other_chips_faults_alone) {
  // Streams are per (seed, kind, unit): the topology grows without reshuffling the rest.
  ChaosConfig c;
  c.enabled = true;
  c.chip_mtbf_s = 50.0;
  auto chips_of_0_0 = [](const std::vector<ChaosEvent>& s) {
    std::vector<double> t;
    for (const auto& e : s)
      if (e.kind == ChaosEvent::kill_chip && e.island == 0 && e.chip == 0) t.push_back(e.at_s);
    return t;
  };
  BOOST_TEST(chips_of_0_0(chaos_schedule(c, 2, 2, 0)) == chips_of_0_0(chaos_schedule(c, 3, 4, 0)));
}

BOOST_AUTO_TEST_CASE(the_schedule_is_sorted_and_ends_at_the_horizon) {
  auto s = chaos_schedule(every_kind(), 4, 2, 3);
  for (std::size_t i = 0; i < s.size(); ++i) {
    BOOST_TEST(s[i].at_s > 0.0);
    BOOST_TEST(s[i].at_s <= 1000.0);
    if (i > 0) BOOST_TEST(s[i - 1].at_s <= s[i].at_s);
    if (s[i].kind == ChaosEvent::partition) {
      BOOST_TEST(s[i].site >= 0);
      BOOST_TEST(s[i].site < 3);
    }
  }
}

BOOST_AUTO_TEST_CASE(kills_come_at_the_configured_rate_over_a_long_horizon) {
  // 64 chips, MTBF 100 s of up time, repair 1 s: each chip fails 1/(100 + 1) per second, so
  // about 63,366 kills in 10^5 s (Poisson spread ±0.4%).
  ChaosConfig c;
  c.enabled = true;
  c.chip_mtbf_s = 100.0;
  c.repair_s = 1.0;
  c.horizon_s = 1e5;
  auto s = chaos_schedule(c, 8, 8, 0);
  const double expected = 64 * 1e5 / 101.0;
  BOOST_TEST(static_cast<double>(count(s, ChaosEvent::kill_chip)) == expected, tt::tolerance(0.02));
  BOOST_TEST(count(s, ChaosEvent::kill_chip) == static_cast<int>(s.size()));
}

BOOST_AUTO_TEST_CASE(no_unit_is_killed_again_while_under_repair) {
  auto c = every_kind();
  c.chip_mtbf_s = 5.0;  // shorter than the repair: a naive Poisson stream would hit down units
  c.island_mtbf_s = 20.0;
  c.repair_s = 8.0;
  c.horizon_s = 5000.0;
  auto s = chaos_schedule(c, 3, 4, 2);
  std::map<std::pair<int, int>, double> chip_back;  // (island, chip) → when it is back
  std::map<int, double> island_back;
  double syncer_back = 0.0;
  int chip_kills = 0;
  for (const auto& e : s) {
    if (e.kind == ChaosEvent::kill_chip) {
      ++chip_kills;
      double& back = chip_back[std::make_pair(e.island, e.chip)];
      BOOST_TEST(e.at_s >= back);
      BOOST_TEST(e.at_s >= island_back[e.island]);  // a killed island's chips are down with it
      back = e.at_s + e.duration_s;
    } else if (e.kind == ChaosEvent::kill_island) {
      BOOST_TEST(e.at_s >= island_back[e.island]);
      island_back[e.island] = e.at_s + e.duration_s;
    } else if (e.kind == ChaosEvent::kill_syncer) {
      BOOST_TEST(e.at_s >= syncer_back);
      syncer_back = e.at_s + e.duration_s;
    } else if (e.kind == ChaosEvent::straggle) {
      BOOST_TEST(e.at_s >= island_back[e.island]);
    }
  }
  BOOST_TEST(chip_kills > 100);
}

BOOST_AUTO_TEST_CASE(disabled_kinds_produce_nothing) {
  ChaosConfig c;
  c.enabled = true;
  c.island_mtbf_s = 30.0;  // only island kills
  auto s = chaos_schedule(c, 4, 4, 4);
  BOOST_TEST(!s.empty());
  BOOST_TEST(count(s, ChaosEvent::kill_island) == static_cast<int>(s.size()));
  auto off = every_kind();
  off.enabled = false;
  BOOST_TEST(chaos_schedule(off, 4, 4, 4).empty());
  BOOST_TEST(chaos_schedule(ChaosConfig{.enabled = true}, 4, 4, 4).empty());
}

BOOST_AUTO_TEST_CASE(events_describe_themselves_in_one_line) {
  ChaosEvent e;
  e.kind = ChaosEvent::kill_chip;
  e.at_s = 12.5;
  e.island = 1;
  e.chip = 0;
  e.duration_s = 1.0;
  BOOST_TEST(e.describe() == "12.500s kill chip 1.0 (repair 1.0 s)");
  e.kind = ChaosEvent::partition;
  e.site = 2;
  e.duration_s = 2.0;
  BOOST_TEST(e.describe() == "12.500s partition site 2 (2.0 s)");
  e.kind = ChaosEvent::straggle;
  e.factor = 0.5;
  e.duration_s = 0.25;
  BOOST_TEST(e.describe() == "12.500s straggle island 1 (speed 0.50 for 0.25 s)");
  BOOST_TEST(std::string(to_string(ChaosEvent::kill_syncer)) == "kill_syncer");
}

BOOST_AUTO_TEST_CASE(bad_chaos_settings_name_the_key) {
  ChaosConfig c;
  c.chip_mtbf_s = -1.0;
  c.repair_s = -0.5;
  c.straggler_factor = 1.5;
  c.horizon_s = 0.0;
  auto e = validate(c);
  BOOST_REQUIRE(e.size() == 4u);
  BOOST_TEST(e[0].find("chaos.chip_mtbf_s: ") == 0u);
  BOOST_TEST(e[1].find("chaos.repair_s: ") == 0u);
  BOOST_TEST(e[2].find("chaos.straggler_factor: ") == 0u);
  BOOST_TEST(e[3].find("chaos.horizon_s: ") == 0u);
  c = ChaosConfig{};
  c.straggler_factor = 0.0;
  BOOST_TEST(validate(c).size() == 1u);
  BOOST_TEST(validate(ChaosConfig{}).empty());
  BOOST_CHECK_THROW(chaos_schedule(ChaosConfig{.enabled = true, .repair_s = -1.0}, 1, 1, 1), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(a_resumed_run_goes_on_with_the_rest_of_its_schedule) {
  ChaosEvent kill, slow, late;
  kill.kind = ChaosEvent::kill_chip;
  kill.at_s = 3.0;
  kill.duration_s = 1.0;
  slow.kind = ChaosEvent::straggle;
  slow.at_s = 8.0;
  slow.duration_s = 6.0;
  slow.factor = 0.5;
  late.kind = ChaosEvent::kill_island;
  late.at_s = 12.5;
  late.duration_s = 2.0;
  const auto left = resume_schedule({kill, slow, late}, 10.0);
  // The kill before the resume is over; the straggle under way goes on for its last 4 s from 0;
  // the later kill comes 10 s earlier on the resumed run's clock.
  BOOST_REQUIRE(left.size() == 2u);
  BOOST_TEST(left[0].kind == ChaosEvent::straggle);
  BOOST_TEST(left[0].at_s == 0.0);
  BOOST_TEST(left[0].duration_s == 4.0, tt::tolerance(1e-12));
  BOOST_TEST(left[0].factor == 0.5);
  BOOST_TEST(left[1].kind == ChaosEvent::kill_island);
  BOOST_TEST(left[1].at_s == 2.5, tt::tolerance(1e-12));
  BOOST_TEST(left[1].duration_s == 2.0);
  // Nothing trained yet: the schedule as it was.
  const auto same = resume_schedule({kill, slow, late}, 0.0);
  BOOST_TEST(schedule_hash(same) == schedule_hash({kill, slow, late}));
  // A straggle over before the resume is dropped.
  BOOST_TEST(resume_schedule({slow}, 14.0).empty());
}
