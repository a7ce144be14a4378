// Merge policy: weights, staleness, RDA, and quorum + grace decisions for scripted arrivals.
#define BOOST_TEST_MODULE merge
#include <limits>
#include <boost/test/unit_test.hpp>

#include <cmath>

#include "diloco/merge.hpp"

using namespace diloco;

namespace {
std::vector<Segment> one_segment(std::size_t n, bool embedding = false) { return {Segment{0, 0, 0, n, embedding}}; }
double norm(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x * x;
  return std::sqrt(s);
}
}  // namespace

BOOST_AUTO_TEST_CASE(rda_of_M_orthogonal_vectors_of_norm_R_has_norm_R) {
  for (int M : {2, 4, 8}) {
    const double R = 3.0;
    std::vector<std::vector<double>> d(M, std::vector<double>(M, 0.0));
    std::vector<Contribution> c;
    for (int m = 0; m < M; ++m) {
      d[m][m] = (m % 2 ? -R : R);
      c.push_back({m, 0, 100, 10, d[m]});
    }
    MergeConfig cfg;
    cfg.rda = true;
    std::vector<double> out(M);
    auto st = merge(c, one_segment(M), cfg, 0, out);
    BOOST_TEST(st.merged == M);
    BOOST_TEST(norm(out) == R, boost::test_tools::tolerance(1e-12));
    // Plain averaging of the same vectors shrinks as 1/sqrt(M).
    cfg.rda = false;
    merge(c, one_segment(M), cfg, 0, out);
    BOOST_TEST(norm(out) == R / std::sqrt(M), boost::test_tools::tolerance(1e-12));
  }
}

BOOST_AUTO_TEST_CASE(rda_leaves_embedding_tensors_to_the_plain_mean) {
  std::vector<double> a{1.0, 0.0}, b{0.0, 1.0};
  std::vector<Contribution> c{{0, 0, 10, 1, a}, {1, 0, 10, 1, b}};
  MergeConfig cfg;
  std::vector<double> out(2);
  merge(c, one_segment(2, /*embedding=*/true), cfg, 0, out);
  BOOST_TEST(out[0] == 0.5);
  BOOST_TEST(out[1] == 0.5);
}

BOOST_AUTO_TEST_CASE(token_weighting_favours_more_and_faster_work) {
  // Island 0: 300 tokens in 3 steps (w = 300·100); island 1: 100 tokens in 2 steps (w = 100·50).
  std::vector<double> a{1.0}, b{0.0};
  std::vector<Contribution> c{{0, 0, 300, 3, a}, {1, 0, 100, 2, b}};
  BOOST_TEST(contribution_weight(c[0], Weighting::tokens) == 30000.0);
  BOOST_TEST(contribution_weight(c[1], Weighting::tokens) == 5000.0);
  MergeConfig cfg;
  cfg.rda = false;
  std::vector<double> out(1);
  merge(c, one_segment(1), cfg, 0, out);
  BOOST_TEST(out[0] == 30000.0 / 35000.0, boost::test_tools::tolerance(1e-12));
  cfg.weighting = Weighting::uniform;
  merge(c, one_segment(1), cfg, 0, out);
  BOOST_TEST(out[0] == 0.5);
}

BOOST_AUTO_TEST_CASE(stale_contributions_are_discounted_then_dropped) {
  MergeConfig cfg;
  cfg.max_staleness = 2;
  cfg.staleness_discount = 0.5;
  BOOST_TEST(*staleness_factor(cfg, 10, 10) == 1.0);
  BOOST_TEST(*staleness_factor(cfg, 10, 9) == 0.5);
  BOOST_TEST(*staleness_factor(cfg, 10, 8) == 0.25);
  BOOST_TEST(!staleness_factor(cfg, 10, 7));
  BOOST_TEST(!staleness_factor(cfg, 10, 11));  // from the future: never applied
  std::vector<double> fresh{1.0}, old{-1.0}, ancient{100.0};
  std::vector<Contribution> c{{0, 10, 10, 1, fresh}, {1, 9, 10, 1, old}, {2, 3, 10, 1, ancient}};
  cfg.rda = false;
  cfg.weighting = Weighting::uniform;
  std::vector<double> out(1);
  auto st = merge(c, one_segment(1), cfg, 10, out);
  BOOST_TEST(st.merged == 2);
  BOOST_TEST(st.dropped_stale == 1);
  BOOST_TEST(out[0] == (1.0 - 0.5) / 1.5, boost::test_tools::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE(absolute_staleness_scales_a_lone_stale_contribution_down) {
  MergeConfig cfg;
  cfg.max_staleness = 4;
  cfg.staleness_discount = 0.5;
  cfg.weighting = Weighting::uniform;
  std::vector<double> old{2.0, -4.0}, fresh{1.0, 1.0};
  std::vector<double> out(2);
  for (const bool rda : {false, true}) {
    cfg.rda = rda;
    // Alone and 2 rounds stale: relative takes it whole, absolute takes a quarter.
    const std::vector<Contribution> lone{{0, 8, 10, 1, old}};
    cfg.staleness_scale = StalenessScale::relative;
    merge(lone, one_segment(2), cfg, 10, out);
    BOOST_TEST(out[0] == old[0], boost::test_tools::tolerance(1e-12));
    BOOST_TEST(out[1] == old[1], boost::test_tools::tolerance(1e-12));
    cfg.staleness_scale = StalenessScale::absolute;
    auto st = merge(lone, one_segment(2), cfg, 10, out);
    BOOST_TEST(st.total_weight == 0.25);
    BOOST_TEST(st.fresh_weight == 1.0);
    BOOST_TEST(out[0] == 0.5, boost::test_tools::tolerance(1e-12));
    BOOST_TEST(out[1] == -1.0, boost::test_tools::tolerance(1e-12));
  }
  // With a fresh one beside it: relative (w 1 and 0.25) mean, then × (1.25 / 2) when absolute.
  cfg.rda = false;
  const std::vector<Contribution> both{{0, 8, 10, 1, old}, {1, 10, 10, 1, fresh}};
  cfg.staleness_scale = StalenessScale::relative;
  merge(both, one_segment(2), cfg, 10, out);
  const double r0 = (0.25 * 2.0 + 1.0) / 1.25, r1 = (0.25 * -4.0 + 1.0) / 1.25;
  BOOST_TEST(out[0] == r0, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(out[1] == r1, boost::test_tools::tolerance(1e-12));
  cfg.staleness_scale = StalenessScale::absolute;
  merge(both, one_segment(2), cfg, 10, out);
  BOOST_TEST(out[0] == r0 * 1.25 / 2.0, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(out[1] == r1 * 1.25 / 2.0, boost::test_tools::tolerance(1e-12));
  // Fresh contributions are not scaled.
  const std::vector<Contribution> new_one{{1, 10, 10, 1, fresh}};
  merge(new_one, one_segment(2), cfg, 10, out);
  BOOST_TEST(out == fresh, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(nothing_merged_gives_zeros) {
  std::vector<double> d{5.0};
  std::vector<Contribution> c{{0, 0, 10, 1, d}};
  MergeConfig cfg;
  std::vector<double> out{9.0};
  auto st = merge(c, one_segment(1), cfg, 100, out);
  BOOST_TEST(st.merged == 0);
  BOOST_TEST(out[0] == 0.0);
}

// Scripted arrivals for one fragment's round: K = 2 of 4 live islands, adaptive grace.
BOOST_AUTO_TEST_CASE(quorum_then_adaptive_grace_for_scripted_arrivals) {
  QuorumConfig q;
  q.min_islands = 2;
  q.grace = GraceRule::adaptive;
  q.gamma = 1.0;
  q.tau = 5;
  RoundState s;
  s.opened_at = 100.0;
  s.live_islands = 4;
  s.t_step = 1.0;
  s.t_sync = 0.5;
  // t = 101: first arrival, no quorum: wait with no deadline.
  s.arrivals = 1;
  auto d = decide(q, s, 101.0);
  BOOST_TEST(!d.merge);
  BOOST_TEST(std::isinf(d.recheck_at));
  // t = 102: quorum. Grace = 1·max(0, 5·1 − (2 + 0.5)) = 2.5 s: wait until 104.5.
  s.arrivals = 2;
  s.quorum_at = 102.0;
  BOOST_TEST(grace_window(q, s) == 2.5);
  d = decide(q, s, 102.0);
  BOOST_TEST(!d.merge);
  BOOST_TEST(d.recheck_at == 104.5);
  // t = 103: a third arrives; still inside the window.
  s.arrivals = 3;
  BOOST_TEST(!decide(q, s, 103.0).merge);
  // t = 104.5: the window closes: merge with three.
  BOOST_TEST(decide(q, s, 104.5).merge);
}

BOOST_AUTO_TEST_CASE(all_live_islands_in_merges_at_once) {
  QuorumConfig q;
  q.min_islands = 1;
  q.tau = 5;
  RoundState s;
  s.live_islands = 2;
  s.arrivals = 2;
  s.quorum_at = 0.0;
  s.t_step = 10.0;
  BOOST_TEST(decide(q, s, 0.0).merge);
}

BOOST_AUTO_TEST_CASE(a_slow_quorum_leaves_no_grace) {
  QuorumConfig q;
  q.min_islands = 1;
  q.tau = 2;
  RoundState s;
  s.opened_at = 0.0;
  s.quorum_at = 5.0;  // quorum took longer than τ·t_step = 2
  s.arrivals = 1;
  s.live_islands = 3;
  s.t_step = 1.0;
  BOOST_TEST(grace_window(q, s) == 0.0);
  BOOST_TEST(decide(q, s, 5.0).merge);
  q.grace = GraceRule::fixed;
  q.grace_s = 1.0;
  BOOST_TEST(!decide(q, s, 5.5).merge);
  BOOST_TEST(decide(q, s, 6.0).merge);
  q.grace = GraceRule::none;
  BOOST_TEST(decide(q, s, 5.0).merge);
}

// A window in steps waits for the same share of training on any machine: 30 steps of 10 ms on a
// quiet one, 30 of 20 ms on a busy one.
BOOST_AUTO_TEST_CASE(a_grace_in_steps_follows_the_measured_step) {
  QuorumConfig q;
  q.min_islands = 1;
  q.grace = GraceRule::steps;
  q.grace_steps = 30;
  RoundState s;
  s.opened_at = 0.0;
  s.quorum_at = 1.0;
  s.arrivals = 1;
  s.live_islands = 4;
  s.t_step = 0.010;
  BOOST_TEST(grace_window(q, s) == 0.3, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(!decide(q, s, 1.29).merge);
  BOOST_TEST(decide(q, s, 1.3 + 1e-9).merge);
  s.t_step = 0.020;
  BOOST_TEST(grace_window(q, s) == 0.6, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(!decide(q, s, 1.5).merge);
  BOOST_TEST(decide(q, s, 1.6 + 1e-9).merge);
  // Every live island in: no wait, whatever the window.
  s.arrivals = 4;
  BOOST_TEST(decide(q, s, 1.0).merge);
  // Before any step time is known the window is empty: the quorum commits at once.
  s.arrivals = 1;
  s.t_step = 0.0;
  BOOST_TEST(decide(q, s, 1.0).merge);
  q.grace_steps = -1;
  BOOST_TEST(!validate(q).empty());
}

BOOST_AUTO_TEST_CASE(norm_clip_bounds_by_the_median_of_the_islands_last_norms) {
  NormClip clip(10.0, 7.0);
  BOOST_TEST(clip.bound() == 7.0);       // the start's bound until 3 islands have a norm
  clip.record(0, 1.0);
  clip.record(1, 3.0);
  BOOST_TEST(clip.bound() == 7.0);
  clip.record(2, 2.0);
  BOOST_TEST(clip.bound() == 20.0);      // 10 × median(1, 3, 2)
  // One island sending again and again holds one slot: it cannot fill the median with its own.
  for (int k = 0; k < 100; ++k) clip.record(3, 1e6);
  BOOST_TEST(clip.bound() == 30.0);      // 10 × the upper median of (1, 2, 3, 1e6)
  // An island's slot follows its last norm.
  clip.record(0, 5.0);
  clip.record(1, 5.0);
  BOOST_TEST(clip.bound() == 50.0);      // (2, 5, 5, 1e6)
  clip.restart(4.0);
  BOOST_TEST(clip.bound() == 4.0);
  // Contributions of zeros are not recorded: they would drive the bound to 0.
  for (int i = 0; i < 20; ++i) clip.record(i, 0.0);
  BOOST_TEST(clip.bound() == 4.0);
  for (int i = 0; i < 3; ++i) clip.record(i, 1.0);
  BOOST_TEST(clip.bound() == 10.0);
}

BOOST_AUTO_TEST_CASE(norm_clip_with_ratio_zero_never_bounds) {
  NormClip off(0.0, 7.0);
  for (int i = 0; i < 20; ++i) off.record(i, 1.0);
  BOOST_TEST(std::isinf(off.bound()));
  MergeConfig cfg;
  cfg.clip_ratio = 0.5;
  BOOST_TEST(validate(cfg).size() == 1u);
  cfg.clip_ratio = 0.0;
  BOOST_TEST(validate(cfg).empty());
}

BOOST_AUTO_TEST_CASE(step_clock_counts_seconds_per_step_and_not_the_time_an_island_was_away) {
  StepClock clock;
  BOOST_TEST(clock.t_step() == 0.0);
  clock.heard(0, 10, 1.00);
  BOOST_TEST(clock.t_step() == 0.0);  // one report marks where the island is
  clock.heard(0, 11, 1.02);
  BOOST_TEST(clock.t_step() == 0.02, boost::test_tools::tolerance(1e-12));
  // Reports that skip steps count per step: 5 steps in 0.1 s is 0.02 s each.
  clock.heard(0, 16, 1.12);
  BOOST_TEST(clock.t_step() == 0.02, boost::test_tools::tolerance(1e-12));
  // Another island's steps enter the same average (weight 0.1 to the newest).
  clock.heard(1, 3, 1.00);
  clock.heard(1, 4, 1.07);
  BOOST_TEST(clock.t_step() == 0.9 * 0.02 + 0.1 * 0.07, boost::test_tools::tolerance(1e-12));
  const double before = clock.t_step();
  // Island 0 is killed at step 16, restarts from its checkpoint at step 12 and joins 2 s later:
  // neither the 2 s nor the steps it went back count.
  clock.forget(0);
  clock.heard(0, 13, 3.20);
  BOOST_TEST(clock.t_step() == before);
  clock.heard(0, 12, 3.22);  // went back without a join (a resumed island): a mark only
  BOOST_TEST(clock.t_step() == before);
  clock.heard(0, 12, 3.30);  // stood still: a mark only
  BOOST_TEST(clock.t_step() == before);
  clock.heard(0, 13, 3.32);
  BOOST_TEST(clock.t_step() == 0.9 * before + 0.1 * 0.02, boost::test_tools::tolerance(1e-12));
  // Without the join the time away would have counted: a 2 s sample.
  StepClock naive;
  naive.heard(0, 16, 1.12);
  naive.heard(0, 17, 3.20);
  BOOST_TEST(naive.t_step() > 2.0);
}

// An island's own measure of its step leaves out its waits for a merge, which the time between
// its reports holds; it only ever shortens that time, so an absurd measure moves nothing.
BOOST_AUTO_TEST_CASE(step_clock_takes_an_islands_own_measure_only_where_it_is_shorter) {
  StepClock clock;
  clock.heard(0, 10, 1.00, 0.01);  // a first report marks, measure or not
  BOOST_TEST(clock.t_step() == 0.0);
  clock.heard(0, 11, 1.10, 0.01);  // 100 ms between the reports, 90 of them waiting for a merge
  BOOST_TEST(clock.t_step() == 0.01, boost::test_tools::tolerance(1e-12));
  clock.heard(0, 12, 1.12, 0.5);  // a measure longer than the reports show: the reports' 20 ms
  BOOST_TEST(clock.t_step() == 0.9 * 0.01 + 0.1 * 0.02, boost::test_tools::tolerance(1e-12));
  const double before = clock.t_step();
  clock.heard(0, 13, 1.13, 1e9);  // an absurd one moves it no further than the reports do
  BOOST_TEST(clock.t_step() == 0.9 * before + 0.1 * 0.01, boost::test_tools::tolerance(1e-12));
  const double after = clock.t_step();
  for (double bad : {std::numeric_limits<double>::quiet_NaN(), -1.0, 0.0}) {  // no measure: the reports
    StepClock c = clock;
    c.heard(0, 14, 1.15, bad);
    BOOST_TEST(c.t_step() == 0.9 * after + 0.1 * 0.02, boost::test_tools::tolerance(1e-12));
  }
  clock.heard(0, 14, 1.15, 0.02);  // stood still or after a join, a measure is a mark as well
  clock.forget(0);
  clock.heard(0, 20, 5.0, 0.01);
  clock.heard(0, 20, 5.1, 0.01);
  BOOST_TEST(clock.t_step() == 0.9 * after + 0.1 * 0.02, boost::test_tools::tolerance(1e-12));
}
