// Goodput simulator: no failures means full goodput, hand-computed scripted traces for every
// policy, determinism in the seed, and the Poisson trace and duration parsing it relies on.
#define BOOST_TEST_MODULE simulate
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <vector>

#include "diloco/sim/simulate.hpp"

using namespace diloco;
namespace tt = boost::test_tools;

namespace {

/// 8 chips in 4 slices of 2 (slices 0,1 → learner 0; slices 2,3 → learner 1), 1000 s, with
/// round numbers: detect 10, restart 50, reconfig 5, heal 20, checkpoint 100, round = 100 steps
/// of 1 s, no latency, K = 1, adaptive grace (τ = 5 → 5 s window after a lone arrival).
SimConfig tiny() {
  SimConfig c;
  c.chips = 8;
  c.slice_chips = 2;
  c.learners = 2;
  c.horizon_s = 1000;
  c.detect_s = 10;
  c.restart_s = 50;
  c.swap_s = 5;
  c.reconfig_s = 5;
  c.heal_s = 20;
  c.checkpoint_s = 100;
  c.step_s = 1;
  c.inner_steps = 100;
  c.sync_latency_s = 0;
  c.quorum = QuorumConfig{1, GraceRule::adaptive, 0.0, 1.0, 5};
  return c;
}

/// The scripted trace: learner 0 loses slice 0 at 140 and slice 1 at 415; learner 1 loses
/// slice 3 at 410 and slice 2 at 430.
const std::vector<Interruption> kScript{{140, 0}, {410, 3}, {415, 1}, {430, 2}};

}  // namespace

BOOST_AUTO_TEST_CASE(without_failures_every_policy_has_full_goodput) {
  SimConfig c;
  c.chips = 150e3;
  c.horizon_s = 30 * kDay;
  for (auto p : {Policy::data_parallel, Policy::elastic, Policy::decoupled}) {
    const auto r = simulate(p, c, {});
    BOOST_TEST_CONTEXT(policy_name(p)) {
      BOOST_TEST(r.goodput == 1.0, tt::tolerance(1e-9));
      BOOST_TEST(r.uptime == 1.0, tt::tolerance(1e-9));
      BOOST_TEST(r.interruptions == 0u);
    }
  }
  // Decoupled: every learner alive all the time, one round per H·step = 100 s: 25,920 sends,
  // the last one exactly at the horizon is not simulated (its work counts in the final sync).
  const auto d = simulate(Policy::decoupled, c, {});
  BOOST_TEST(d.mean_learners_alive == 8.0, tt::tolerance(1e-9));
  BOOST_TEST(d.rounds == 25919.0);
}

BOOST_AUTO_TEST_CASE(scripted_trace_data_parallel_stalls_everyone_and_rolls_back) {
  // Checkpoint every 100 s of progress; a failure stalls all for detect + restart = 60 s.
  //   [0,140)    run 140: checkpoints at 100, 40 lost at 140          → committed 100
  //   stall to 200; [200,410) run 210: +200 committed, 10 lost at 410  → committed 300
  //   stall to 470; 415 and 430 hit stalled (idle) chips: absorbed
  //   [470,1000) run 530: +500, and the final 30 is saved at the end → committed 830
  // goodput = 830·8 / (8·1000) = 0.83; uptime = (140 + 210 + 530) / 1000 = 0.88.
  const auto r = simulate(Policy::data_parallel, tiny(), kScript);
  BOOST_TEST(r.goodput == 0.83, tt::tolerance(1e-12));
  BOOST_TEST(r.uptime == 0.88, tt::tolerance(1e-12));
  BOOST_TEST(r.interruptions == 2u);
}

BOOST_AUTO_TEST_CASE(scripted_trace_data_parallel_with_a_hot_spare_swaps_instead_of_restarting) {
  // One spare slice: a failure stalls detect + swap = 15 s while a spare is free; the failed slice
  // is repaired (detect + restart = 60 s) and becomes the spare.
  //   [0,140) 140: committed 100, lost 40; spare used, back at 200; stall to 155
  //   [155,410) 255: committed +200 = 300, lost 55; spare (back at 200) used, back at 470; to 425
  //   415 absorbed; [425,430) 5: lost 5; no free spare → restart: stall to 490
  //   [490,1000) 510: committed +500 = 800, final 10 saved → 810
  // goodput = 810·8 / ((8 + 2 spare chips)·1000) = 0.648.
  auto c = tiny();
  c.spare_slices = 1;
  const auto r = simulate(Policy::data_parallel, c, kScript);
  BOOST_TEST(r.goodput == 0.648, tt::tolerance(1e-12));
  BOOST_TEST(r.interruptions == 3u);
}

BOOST_AUTO_TEST_CASE(scripted_trace_elastic_dp_pauses_everyone_then_runs_smaller) {
  // Each membership change pauses all chips (detect + reconfig = 15 s on a failure, reconfig =
  // 5 s on a rejoin); the failed slice (2 chips) rejoins after detect + restart = 60 s.
  //   [0,140)    8 chips × 140 = 1120; s0 fails: pause to 155, back at 200
  //   [155,200)  6 × 45  =  270;  s0 rejoins: pause to 205
  //   [205,410)  8 × 205 = 1640;  s3 fails: pause to 425, back at 470; 415 (s1) absorbed
  //   [425,430)  6 × 5   =   30;  s2 fails: pause to 445, back at 490
  //   [445,470)  4 × 25  =  100;  s3 rejoins: pause to 475
  //   [475,490)  6 × 15  =   90;  s2 rejoins: pause to 495
  //   [495,1000) 8 × 505 = 4040
  // goodput = 7290 / 8000 = 0.91125; running 140+45+205+5+25+15+505 = 940 s → uptime 0.94.
  const auto r = simulate(Policy::elastic, tiny(), kScript);
  BOOST_TEST(r.goodput == 0.91125, tt::tolerance(1e-12));
  BOOST_TEST(r.uptime == 0.94, tt::tolerance(1e-12));
  BOOST_TEST(r.interruptions == 3u);
}

BOOST_AUTO_TEST_CASE(scripted_trace_decoupled_learner_stops_alone_and_rounds_go_on) {
  // Each learner (4 chips) is elastic inside: only it pauses.
  // Learner 0: [0,140) 4×140 = 560; s0 fails → pause to 155, back at 200
  //            [155,200) 2×45 = 90; rejoin pause to 205; [205,415) 4×210 = 840;
  //            s1 fails → pause to 430, back at 475; [430,475) 2×45 = 90; pause to 480;
  //            [480,1000) 4×520 = 2080                               → 3660
  // Learner 1: [0,410) 4×410 = 1640; s3 fails → pause to 425; [425,430) 2×5 = 10;
  //            s2 fails → pause to 445, no chips left until s3 rejoins at 470 (pause to 475);
  //            [475,490) 2×15 = 30; s2 rejoins (pause to 495); [495,1000) 4×505 = 2020 → 3700
  // All contributions are merged (no latency, so never stale): goodput = 7360/8000 = 0.92.
  // Rounds: learners send every 100 s of their own compute. L0 sends at 100, 220, 320, 435, 540,
  // 640, …, 940; L1 at 100, 200, 300, 400, 565, 665, …, 965. Both at 100 → one round; a lone
  // arrival with the other learner computing waits the 5 s grace; with the other paused
  // (200: L0 re-meshing; 435: L1 re-meshing) it merges at once. 1 + 16 lone rounds = 17.
  // Alive: L0 down 15+5+15+5 = 40 s, L1 down 15+15+25 (no chips)+5+5 = 65 s →
  // mean (2000 − 105)/1000 = 1.895; both down only in [415,425) → uptime 0.99.
  const auto r = simulate(Policy::decoupled, tiny(), kScript);
  BOOST_TEST(r.goodput == 0.92, tt::tolerance(1e-12));
  BOOST_TEST(r.rounds == 17.0);
  BOOST_TEST(r.mean_learners_alive == 1.895, tt::tolerance(1e-12));
  BOOST_TEST(r.uptime == 0.99, tt::tolerance(1e-12));
  BOOST_TEST(r.interruptions == 4u);
  BOOST_TEST(r.dropped_contributions == 0u);
}

BOOST_AUTO_TEST_CASE(quorum_of_two_makes_each_round_wait_for_both_learners) {
  // Learner 0 loses slice 0 at 150 (pause to 165, 2 chips until 210, pause to 215): its sends
  // move from 200, 300, … to 220, 320, …, 920; learner 1 keeps sending at 200, 300, …, 900.
  // K = 2: round 1 at 100 (both), then each round waits for L0's arrival: 220, 320, …, 920 →
  // 1 + 8 = 9 rounds. K = 1: every lone arrival merges after the 5 s grace → 1 + 8 + 8 = 17.
  // Either way nothing is lost: (4·150 + 2·45 + 4·785 + 4·1000) / 8000 = 0.97875.
  // Uptime with K = 2: L0 is not computing for 15 + 5 s → 0.98.
  auto c = tiny();
  const std::vector<Interruption> trace{{150, 0}};
  c.quorum.min_islands = 2;
  const auto k2 = simulate(Policy::decoupled, c, trace);
  BOOST_TEST(k2.rounds == 9.0);
  BOOST_TEST(k2.goodput == 0.97875, tt::tolerance(1e-12));
  BOOST_TEST(k2.uptime == 0.98, tt::tolerance(1e-12));
  c.quorum.min_islands = 1;
  const auto k1 = simulate(Policy::decoupled, c, trace);
  BOOST_TEST(k1.rounds == 17.0);
  BOOST_TEST(k1.goodput == 0.97875, tt::tolerance(1e-12));
  BOOST_TEST(k1.uptime == 1.0, tt::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE(scripted_trace_decoupled_restarted_learner_heals_and_loses_unsent_work) {
  // learner_recovery = restart: the learner is down detect + restart + heal = 80 s and loses the
  // work it had not sent yet.
  // L0: sends 400 at 100; 140 fails with 40 s × 4 = 160 unsent → lost; back at 220;
  //     sends 400 at 320; 415 fails with 95 × 4 = 380 unsent → lost; back at 495;
  //     sends 5 × 400 (595 … 995) and 5 s × 4 = 20 at the end          → good 2820
  // L1: sends 4 × 400 (100 … 400); 410 fails, 40 lost; back at 490 (430 absorbed: it is down);
  //     sends 5 × 400 (590 … 990) and 10 × 4 = 40 at the end           → good 3640
  // goodput = (2820 + 3640) / 8000 = 0.8075.
  auto c = tiny();
  c.learner_recovery = "restart";
  const auto r = simulate(Policy::decoupled, c, kScript);
  BOOST_TEST(r.goodput == 0.8075, tt::tolerance(1e-12));
  BOOST_TEST(r.interruptions == 3u);
}

BOOST_AUTO_TEST_CASE(time_series_tracks_cumulative_goodput_on_the_scripted_trace) {
  // A point every 250 s: work done by then and not (yet) lost, over provisioned chip-time.
  // DP: at 250, committed 100 + 50 s since the restart at 200 → 150·8 / (8·250) = 0.6; at 500,
  // 300 + 30 → 0.66; at 750, 300 + 280 → 0.7733; at 1000, 830 → 0.83 (the final goodput).
  // Elastic: at 250, 1120 + 270 + 8·(250 − 205) = 1750 → 1750 / 2000 = 0.875.
  // Decoupled: at 250, L0 560 + 90 + 4·45 and L1 4·250 → 1830 / 2000 = 0.915; at 1000, 0.92.
  auto c = tiny();
  c.series_every_s = 250;
  const auto dp = simulate(Policy::data_parallel, c, kScript);
  BOOST_REQUIRE(dp.series.size() == 4u);
  BOOST_TEST(dp.series[0].goodput == 0.6, tt::tolerance(1e-12));
  BOOST_TEST(dp.series[1].goodput == 0.66, tt::tolerance(1e-12));
  BOOST_TEST(dp.series[2].goodput == 580.0 / 750.0, tt::tolerance(1e-12));
  BOOST_TEST(dp.series[3].goodput == dp.goodput, tt::tolerance(1e-12));
  const auto el = simulate(Policy::elastic, c, kScript);
  BOOST_REQUIRE(el.series.size() == 4u);
  BOOST_TEST(el.series[0].goodput == 0.875, tt::tolerance(1e-12));
  BOOST_TEST(el.series[3].goodput == el.goodput, tt::tolerance(1e-12));
  const auto dc = simulate(Policy::decoupled, c, kScript);
  BOOST_REQUIRE(dc.series.size() == 4u);
  BOOST_TEST(dc.series[0].goodput == 0.915, tt::tolerance(1e-12));
  BOOST_TEST(dc.series[0].learners_alive == 2.0);
  BOOST_TEST(dc.series[3].goodput == dc.goodput, tt::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE(contributions_older_than_max_staleness_are_dropped) {
  // Latency 30 s, max_staleness 0. Learner 1 loses slice 2 at 50 (pause to 65, 2 chips until
  // the slice rejoins at 110, pause to 115), so it reaches 100 s of compute at 120 instead of
  // 100. L0 sends at 100 (based on round 0), arrives at 130 and, the grace window being
  // max(0, 5·1 − (0 + 30)) = 0, commits round 0 at once. L1 sent at 120 based on round 0 and
  // arrives at 150 when round 1 is open: staleness 1 > 0 → dropped. The phase shift persists,
  // so every later L1 contribution is one round stale too.
  auto c = tiny();
  c.sync_latency_s = 30;
  c.merge.max_staleness = 0;
  const std::vector<Interruption> trace{{50, 2}};
  const auto r = simulate(Policy::decoupled, c, trace);
  BOOST_TEST(r.dropped_contributions > 0u);
  BOOST_TEST(r.goodput < 1.0);
  c.merge.max_staleness = 100;  // the same trace loses nothing to staleness when it is allowed
  const auto ok = simulate(Policy::decoupled, c, trace);
  BOOST_TEST(ok.dropped_contributions == 0u);
  BOOST_TEST(ok.goodput > r.goodput);
}

BOOST_AUTO_TEST_CASE(same_seed_gives_the_same_numbers_and_another_seed_does_not) {
  SimConfig c;
  c.chips = 50e3;
  c.horizon_s = 60 * kDay;
  c.seed = 7;
  const auto a = simulate_all(c);
  const auto b = simulate_all(c);
  BOOST_REQUIRE(a.size() == 3u);
  for (std::size_t k = 0; k < a.size(); ++k) {
    BOOST_TEST(a[k].goodput == b[k].goodput);
    BOOST_TEST(a[k].uptime == b[k].uptime);
    BOOST_TEST(a[k].rounds == b[k].rounds);
    BOOST_TEST(a[k].interruptions == b[k].interruptions);
  }
  c.seed = 8;
  const auto other = simulate_all(c);
  BOOST_TEST(other[0].goodput != a[0].goodput);
}

BOOST_AUTO_TEST_CASE(poisson_trace_has_chips_over_mtbi_events_spread_over_slices) {
  SimConfig c;
  c.chips = 100e3;
  c.slice_chips = 1000;  // 100 slices
  c.horizon_s = kYear / 10;
  const auto tr = poisson_trace(c);
  const double expected = c.chips * c.horizon_s / c.mtbi_s;  // 10,000
  BOOST_TEST(std::abs(static_cast<double>(tr.size()) - expected) < 5 * std::sqrt(expected));
  std::vector<int> per(100, 0);
  for (std::size_t k = 0; k < tr.size(); ++k) {
    BOOST_REQUIRE(tr[k].slice < 100u);
    if (k) BOOST_REQUIRE(tr[k].t >= tr[k - 1].t);
    ++per[tr[k].slice];
  }
  for (int n : per) BOOST_TEST(std::abs(n - 100) < 50);  // 100 ± 5σ
}

BOOST_AUTO_TEST_CASE(data_parallel_matches_the_renewal_formula_on_a_poisson_trace) {
  // Up times are exponential with rate λ = chips/mtbi, each followed by a stall X = detect +
  // restart (interruptions of idle chips are absorbed): goodput = 1 / (1 + λX) with no rollback.
  SimConfig c;
  c.chips = 20e3;
  c.checkpoint_s = 0;
  const double lx = c.chips / c.mtbi_s * (c.detect_s + c.restart_s);
  const auto r = simulate(Policy::data_parallel, c, poisson_trace(c));
  BOOST_TEST(r.goodput == 1.0 / (1.0 + lx), tt::tolerance(2e-3));
}

BOOST_AUTO_TEST_CASE(decoupled_beats_elastic_beats_data_parallel_at_scale) {
  SimConfig c;
  c.chips = 150e3;
  c.horizon_s = 30 * kDay;
  const auto r = simulate_all(c);
  BOOST_TEST(r[2].goodput > r[1].goodput);
  BOOST_TEST(r[1].goodput > r[0].goodput);
  BOOST_TEST(r[2].uptime > 0.999);  // K = 1 of 8: the global model practically never stops
}

BOOST_AUTO_TEST_CASE(durations_and_counts_parse_with_suffixes) {
  BOOST_TEST(parse_duration("90") == 90.0);
  BOOST_TEST(parse_duration("30s") == 30.0);
  BOOST_TEST(parse_duration("10m") == 600.0);
  BOOST_TEST(parse_duration("1.5h") == 5400.0);
  BOOST_TEST(parse_duration("2d") == 172800.0);
  BOOST_TEST(parse_duration("1y") == kYear);
  BOOST_CHECK_THROW(parse_duration("10x"), std::invalid_argument);
  BOOST_CHECK_THROW(parse_duration("-1s"), std::invalid_argument);
  BOOST_CHECK_THROW(parse_duration(""), std::invalid_argument);
  BOOST_TEST(parse_count("1.2e6") == 1.2e6);
  BOOST_TEST(parse_count("150k") == 150e3);
  BOOST_TEST(parse_count("2.4M") == 2.4e6);
  BOOST_CHECK_THROW(parse_count("3q"), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(invalid_configuration_names_the_flag) {
  SimConfig c;
  c.learners = 0;
  c.learner_recovery = "reboot";
  const auto e = validate(c);
  BOOST_TEST(e.size() >= 2u);
  BOOST_CHECK_THROW(simulate(Policy::elastic, c, {}), std::invalid_argument);
  BOOST_TEST(validate(SimConfig{}).empty());
}

BOOST_AUTO_TEST_CASE(a_horizon_or_failure_rate_that_implies_too_many_events_is_refused_naming_the_flag) {
  auto first = [](const SimConfig& c) {
    const auto e = validate(c);
    return e.empty() ? std::string("(valid)") : e.front();
  };
  SimConfig c;
  c.horizon_s = 1e9 * kYear;  // --horizon 1e9y: about 1.2e15 interruptions
  BOOST_TEST(first(c).rfind("--horizon: --chips × --horizon / --mtbi means about 1.2e+15 interruptions", 0) == 0u, first(c));
  BOOST_CHECK_THROW(poisson_trace(c), std::invalid_argument);  // refused before any allocation
  SimConfig d;
  d.chips = 2.4e6;
  d.mtbi_s = kMinute;  // --chips 2.4M --mtbi 1m
  BOOST_TEST(first(d).rfind("--mtbi: ", 0) == 0u, first(d));
  BOOST_TEST(first(d).find("1.26e+12 interruptions, 18.4 TiB of trace") != std::string::npos, first(d));
  SimConfig s;
  s.step_s = 1e-9;  // a learner round every 100 ns over a year
  BOOST_TEST(first(s).rfind("--step: ", 0) == 0u, first(s));
  SimConfig t;
  t.slice_chips = 1;
  t.chips = 1e12;
  t.mtbi_s = 1e9 * kYear;
  BOOST_TEST(first(t).rfind("--slice: 1e+12 slices of 1 chips need", 0) == 0u, first(t));
  SimConfig u;
  u.restart_s = 1e300;
  BOOST_TEST(first(u) == "--restart: must be a finite duration in [0, 1000y]");
  SimConfig m;
  m.learners = 2147483647;
  BOOST_TEST(first(m).rfind("--learners: must be in [1, 65536]", 0) == 0u, first(m));
}
