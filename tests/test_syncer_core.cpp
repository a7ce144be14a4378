// SyncerCore without actors: quorum, grace, staleness, snapshot/restore, lossy broadcasts,
// divergence, the end of a run across restarts, unusable state files, and lockstep equivalence
// of the two cores with the reference loops (the golden model).
#define BOOST_TEST_MODULE syncer_core
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <random>
#include <variant>

#include "core_fixtures.hpp"
#include "diloco/checkpoint.hpp"
#include "diloco/config.hpp"
#include "diloco/data.hpp"
#include "diloco/island_core.hpp"
#include "diloco/loops.hpp"
#include "diloco/syncer_core.hpp"

using namespace diloco;
using namespace diloco::testing;

namespace {

RunConfig golden_config(const std::string& mode, int P, int tau) {
  auto c = testing::lockstep_run(mode, P, tau);
  c.train.eval_windows = 4;
  c.inner.warmup_steps = 3;
  return c;
}

// Drives M IslandCores and one SyncerCore in lockstep, exactly as run_fragments orders things.
std::vector<float> lockstep(const RunConfig& cfg) {
  const int M = cfg.train.islands, P = cfg.train.mode == TrainMode::diloco ? 1 : cfg.fragments.count;
  const int tau = cfg.train.mode == TrainMode::diloco ? 0 : cfg.fragments.tau;
  const double alpha = cfg.train.mode == TrainMode::diloco ? 0.0 : cfg.fragments.effective_alpha();
  const Corpus corpus = Corpus::make(cfg.data);
  auto model = make_model(cfg.model);
  std::vector<float> theta(model->layout().size());
  model->init(theta, cfg.train.seed);
  const auto plan = FragmentPlan::make(cfg.fragments.plan, model->layout(), P);
  SyncerSettings ss;
  ss.islands = M;
  ss.quorum.min_islands = M;
  ss.quorum.grace = GraceRule::none;
  ss.merge.weighting = Weighting::uniform;
  ss.merge.rda = false;
  ss.outer = cfg.outer;
  SyncerCore syncer(plan, theta, ss);
  std::vector<std::unique_ptr<IslandCore>> isl;
  std::vector<std::unique_ptr<BatchSource>> data;
  for (int i = 0; i < M; ++i) {
    IslandSettings s{i, SyncSchedule{cfg.train.H, P}, tau, alpha, CodecParams{}, false};
    isl.push_back(std::make_unique<IslandCore>(model->layout(), plan, s, cfg.inner, theta));
    data.push_back(corpus.shard(i, M));
  }
  std::vector<float> grads(theta.size());
  Batch batch;
  for (long s = 1; s <= cfg.train.steps; ++s) {
    for (int i = 0; i < M; ++i) {
      data[static_cast<std::size_t>(i)]->next(cfg.train.batch, cfg.model.seq_len, batch);
      const double loss = model->loss_and_grad(isl[static_cast<std::size_t>(i)]->params(), batch, grads);
      ChipGradient g{grads, batch.num_targets(), loss};
      isl[static_cast<std::size_t>(i)]->apply_gradient(std::span<const ChipGradient>(&g, 1));
    }
    for (int p : isl[0]->due())
      for (auto& island : isl) BOOST_REQUIRE(syncer.receive(island->outer_gradient_frame(p).value(), double(s)));
    for (const auto& c : syncer.poll(static_cast<double>(s))) {
      BOOST_REQUIRE(c.merged == M);
      for (int i = 0; i < M; ++i)
        BOOST_REQUIRE(isl[static_cast<std::size_t>(i)]->adopt_frame(syncer.frame_for(c.fragment, i).value()).value());
    }
  }
  return std::vector<float>(syncer.params().begin(), syncer.params().end());
}

void check_golden(const RunConfig& cfg) {
  const auto ref = run_reference(cfg);
  const auto got = lockstep(cfg);
  BOOST_REQUIRE_EQUAL(ref.params.size(), got.size());
  double worst = 0.0, scale = 0.0;
  for (std::size_t j = 0; j < got.size(); ++j) {
    worst = std::max(worst, std::abs(double(got[j]) - double(ref.params[j])));
    scale = std::max(scale, std::abs(double(ref.params[j])));
  }
  BOOST_TEST_MESSAGE(name_of(cfg.train.mode) << " P=" << cfg.fragments.count << " tau=" << cfg.fragments.tau
                                    << ": max |runtime - reference| = " << worst << " (max |θ| " << scale << ")");
  BOOST_TEST(worst <= 1e-5 * std::max(1.0, scale));
}

}  // namespace

BOOST_AUTO_TEST_CASE(round_commits_only_with_quorum) {
  Tiny t;
  std::vector<float> init(4, 0.0f);
  SyncerCore s(t.plan, init, sgd_settings(3, 2));
  BOOST_REQUIRE(s.receive(delta_frame(0, 0, 1.0f), 0.0));
  BOOST_TEST(s.poll(0.0).empty());
  BOOST_TEST(s.poll(100.0).empty());  // no amount of waiting commits below K
  BOOST_TEST(s.round(0) == 0u);
  BOOST_TEST(s.next_deadline(100.0) == std::numeric_limits<double>::infinity());
  BOOST_REQUIRE(s.receive(delta_frame(1, 0, 3.0f), 1.0));
  const auto c = s.poll(1.0);
  BOOST_REQUIRE_EQUAL(c.size(), 1u);
  BOOST_TEST(c[0].merged == 2);
  BOOST_TEST(c[0].round == 1u);
  BOOST_TEST(s.params()[0] == -2.0f);  // Θ − mean δ with SGD lr 1
}

// grace = "steps": the window is grace_steps of the islands' inner steps as their progress
// reports time them, and an island that re-joins after 2 s away does not stretch it.
BOOST_AUTO_TEST_CASE(a_grace_window_in_steps_follows_the_reported_step_time_and_ignores_time_away) {
  Tiny t;
  std::vector<float> init(4, 0.0f);
  auto cfg = sgd_settings(3, 1, "steps");
  cfg.quorum.grace_steps = 30;
  SyncerCore s(t.plan, init, cfg);
  s.set_live_islands(3);
  for (int k = 0; k <= 10; ++k) s.heard(0, static_cast<std::uint64_t>(k), 0.01 * k);  // 10 ms a step
  BOOST_TEST(s.step_time() == 0.01, boost::test_tools::tolerance(1e-9));
  (void)s.join_reply(0, false);                         // island 0 restarted ...
  s.heard(0, 11, 2.11);                                 // ... and reports again 2 s later: a mark
  BOOST_TEST(s.step_time() == 0.01, boost::test_tools::tolerance(1e-9));
  BOOST_REQUIRE(s.receive(delta_frame(1, 0, 1.0f), 3.0));
  BOOST_TEST(s.poll(3.0).empty());  // quorum at 3.0, waiting 30 steps of 10 ms
  BOOST_TEST(s.next_deadline(3.0) == 3.3, boost::test_tools::tolerance(1e-9));
  BOOST_TEST(s.poll(3.29).empty());
  BOOST_TEST(s.poll(3.31).size() == 1u);
}

// An island that held its steps for a merge reports its own step time: the syncer takes it, not
// the time between its reports, so the waits do not stretch a window counted in steps.
BOOST_AUTO_TEST_CASE(a_reported_step_time_leaves_the_islands_waits_out_of_the_grace_window) {
  Tiny t;
  std::vector<float> init(4, 0.0f);
  auto cfg = sgd_settings(3, 1, "steps");
  cfg.quorum.grace_steps = 30;
  SyncerCore timed(t.plan, init, cfg), told(t.plan, init, cfg);
  // 10 steps of 10 ms, then a step after a wait of 90 ms: 100 ms between the last two reports.
  for (int k = 0; k <= 11; ++k) {
    const double at = k <= 10 ? 0.01 * k : 0.2;
    timed.heard(0, static_cast<std::uint64_t>(k), at);
    told.heard(0, static_cast<std::uint64_t>(k), at, 0.01);
  }
  BOOST_TEST(told.step_time() == 0.01, boost::test_tools::tolerance(1e-9));
  BOOST_TEST(timed.step_time() == 0.9 * 0.01 + 0.1 * 0.1, boost::test_tools::tolerance(1e-9));  // the wait as a step
  told.set_live_islands(3);
  BOOST_REQUIRE(told.receive(delta_frame(1, 0, 1.0f), 3.0));
  BOOST_TEST(told.poll(3.0).empty());
  BOOST_TEST(told.next_deadline(3.0) == 3.3, boost::test_tools::tolerance(1e-9));  // 30 steps of 10 ms
}

BOOST_AUTO_TEST_CASE(straggler_inside_grace_is_merged) {
  Tiny t;
  std::vector<float> init(4, 0.0f);
  auto cfg = sgd_settings(3, 2, "fixed");
  cfg.quorum.grace_s = 1.0;
  SyncerCore s(t.plan, init, cfg);
  BOOST_REQUIRE(s.receive(delta_frame(0, 0, 1.0f), 0.0));
  BOOST_REQUIRE(s.receive(delta_frame(1, 0, 1.0f), 0.2));
  BOOST_TEST(s.poll(0.3).empty());           // quorum reached at 0.2, grace runs to 1.2
  BOOST_TEST(s.next_deadline(0.3) == 1.2);
  BOOST_REQUIRE(s.receive(delta_frame(2, 0, 4.0f), 0.9));
  const auto c = s.poll(0.9);                // every live island is in: no need to wait longer
  BOOST_REQUIRE_EQUAL(c.size(), 1u);
  BOOST_TEST(c[0].merged == 3);
  BOOST_TEST(s.params()[0] == -2.0f);
}

BOOST_AUTO_TEST_CASE(quorum_without_straggler_commits_when_grace_ends) {
  Tiny t;
  std::vector<float> init(4, 0.0f);
  auto cfg = sgd_settings(3, 2, "fixed");
  cfg.quorum.grace_s = 1.0;
  SyncerCore s(t.plan, init, cfg);
  BOOST_REQUIRE(s.receive(delta_frame(0, 0, 1.0f), 0.0));
  BOOST_REQUIRE(s.receive(delta_frame(1, 0, 1.0f), 0.0));
  BOOST_TEST(s.poll(0.99).empty());
  BOOST_TEST(s.poll(1.0).size() == 1u);
  s.set_live_islands(2);  // island 2 died: a full house of the living commits at once
  BOOST_REQUIRE(s.receive(delta_frame(0, 1, 1.0f), 2.0));
  BOOST_REQUIRE(s.receive(delta_frame(1, 1, 1.0f), 2.0));
  BOOST_TEST(s.poll(2.0).size() == 1u);
  BOOST_TEST(s.round(0) == 2u);
}

// Three islands in a synchronous mode (SyncerSettings::lockstep), two fragments of 2 values.
struct Lockstep {
  FragmentPlan plan;
  std::vector<float> init = std::vector<float>(4, 0.0f);
  SyncerSettings cfg = sgd_settings(3, 3);
  Lockstep() : plan(FragmentPlan::strided(layout(), 2)) { cfg.lockstep = true; }
  static ParamLayout layout() {
    ParamLayout l;
    l.add("a", {2}, 0, true);
    l.add("b", {2}, 1, true);
    return l;
  }
};

// The synchronous modes: every round waits for every island, and each island waits for the
// merge of its last send. Islands whose sends came in different orders (after a restart or a
// re-join) each wait for another's round: one of those rounds commits without the rest.
BOOST_AUTO_TEST_CASE(lockstep_islands_waiting_on_each_others_rounds_are_unblocked) {
  Lockstep w;
  auto& [plan, init, cfg] = w;
  SyncerCore s(plan, init, cfg);
  for (int i = 0; i < 3; ++i) s.heard(i, 9, 0.0, 0.1), s.heard(i, 10, 0.1, 0.1);  // steps of 0.1 s
  BOOST_REQUIRE(s.receive(delta_frame(0, 0, 1.0f, 2, 0), 0.0));
  BOOST_REQUIRE(s.receive(delta_frame(1, 0, 1.0f, 2, 1), 0.5));
  BOOST_TEST(s.poll(5.0).empty());  // island 2 (training, or dead and coming back) has sent nothing
  BOOST_TEST(std::isinf(s.next_deadline(5.0)));
  BOOST_REQUIRE(s.receive(delta_frame(2, 0, 1.0f, 2, 1), 0.7));
  // All three wait now (0 for fragment 0, 1 and 2 for fragment 1), unless one is still within
  // its τ steps after a send: nothing commits until nothing was heard for 10 steps (1 s).
  BOOST_TEST(s.poll(1.5).empty());
  BOOST_TEST(s.next_deadline(1.5) == 1.7, boost::test_tools::tolerance(1e-9));
  s.heard(0, 11, 1.6, 0.1);  // island 0 stepped: it was not waiting yet
  BOOST_TEST(s.poll(1.7).empty());
  const auto c = s.poll(2.6);
  BOOST_REQUIRE_EQUAL(c.size(), 1u);
  BOOST_TEST(c[0].fragment == 1);  // the most contributions
  BOOST_TEST(c[0].unblocked);
  BOOST_TEST(c[0].contributions == 2);
  BOOST_TEST(c[0].live == 3);  // below the quorum, and said so
  BOOST_TEST(s.round(0) == 0u);
  BOOST_TEST(s.round(1) == 1u);
  BOOST_TEST(s.stats().unblocked == 1u);
  // Islands 1 and 2 go on and send fragment 0: that round has all three, as every round should.
  BOOST_REQUIRE(s.receive(delta_frame(1, 0, 1.0f, 2, 0), 1.0));
  BOOST_TEST(s.poll(1.0).empty());
  BOOST_REQUIRE(s.receive(delta_frame(2, 0, 1.0f, 2, 0), 1.0));
  const auto d = s.poll(1.0);
  BOOST_REQUIRE_EQUAL(d.size(), 1u);
  BOOST_TEST(!d[0].unblocked);
  BOOST_TEST(d[0].contributions == 3);
  // Without lockstep (decoupled islands never wait) nothing commits below the quorum.
  cfg.lockstep = false;
  SyncerCore plain(plan, init, cfg);
  BOOST_REQUIRE(plain.receive(delta_frame(0, 0, 1.0f, 2, 0), 0.0));
  BOOST_REQUIRE(plain.receive(delta_frame(1, 0, 1.0f, 2, 1), 0.5));
  BOOST_REQUIRE(plain.receive(delta_frame(2, 0, 1.0f, 2, 1), 0.7));
  BOOST_TEST(plain.poll(100.0).empty());
}

// A round of only finished islands' contributions unblocks nobody: the one of islands still
// training commits, though it is younger and no larger.
BOOST_AUTO_TEST_CASE(an_unblocked_round_is_one_of_islands_still_training) {
  Lockstep w;
  auto& [plan, init, cfg] = w;
  SyncerCore s(plan, init, cfg);
  BOOST_REQUIRE(s.receive(delta_frame(0, 0, 1.0f, 2, 1), 0.0));
  s.finish(0, true);
  BOOST_REQUIRE(s.receive(delta_frame(1, 0, 1.0f, 2, 0), 0.1));
  BOOST_TEST(s.poll(0.1).empty());  // island 2 still trains, with nothing pending
  BOOST_REQUIRE(s.receive(delta_frame(2, 0, 1.0f, 2, 1), 0.2));
  // Fragment 1: islands 0 (finished) and 2; fragment 0: island 1. Each of 1 and 2 waits on the
  // other's round; none heard since 0.2 (no step time known: at once).
  const auto c = s.poll(0.2);
  BOOST_REQUIRE_EQUAL(c.size(), 1u);
  BOOST_TEST(c[0].unblocked);
  BOOST_TEST(c[0].fragment == 0);  // island 1's, older than island 2's
}

BOOST_AUTO_TEST_CASE(late_contribution_is_discounted_next_round) {
  Tiny t;
  std::vector<float> init(4, 0.0f);
  auto cfg = sgd_settings(3, 2);
  cfg.merge.staleness_discount = 0.5;
  cfg.merge.max_staleness = 1;
  SyncerCore s(t.plan, init, cfg);
  BOOST_REQUIRE(s.receive(delta_frame(0, 0, 1.0f), 0.0));
  BOOST_REQUIRE(s.receive(delta_frame(1, 0, 1.0f), 0.0));
  BOOST_REQUIRE_EQUAL(s.poll(0.0).size(), 1u);  // round 1 = −1
  BOOST_REQUIRE(s.receive(delta_frame(2, 0, 4.0f), 0.5));  // based on round 0: one round late
  BOOST_TEST(s.poll(0.5).empty());              // one contribution is not a quorum
  BOOST_REQUIRE(s.receive(delta_frame(0, 1, 1.0f), 1.0));
  const auto c = s.poll(1.0);
  BOOST_REQUIRE_EQUAL(c.size(), 1u);
  BOOST_TEST(c[0].merged == 2);
  // Δ = (1·1 + 0.5·4) / 1.5 = 2 → Θ = −1 − 2 = −3
  BOOST_TEST(s.params()[0] == -3.0f);
  // Past max staleness (round 2 now, based on 0): dropped and counted, nothing kept.
  auto r = s.receive(delta_frame(2, 0, 4.0f), 2.0);
  BOOST_REQUIRE(!r);
  BOOST_TEST((r.error().code == errc::stale_round));
  BOOST_TEST(s.pending(0) == 0);
  BOOST_TEST(s.stats().dropped_stale == 1u);
  BOOST_TEST(s.stats().rejected[errc::stale_round] == 1u);
  // A frame from the future is refused too.
  auto f = s.receive(delta_frame(1, 7, 1.0f), 2.0);
  BOOST_REQUIRE(!f);
  BOOST_TEST((f.error().code == errc::future_round));
}

BOOST_AUTO_TEST_CASE(partial_merges_add_up_to_one_outer_step_per_period) {
  Tiny t;
  std::vector<float> init(4, 0.0f);
  auto cfg = sgd_settings(4, 1);
  cfg.merge.partial_scale = true;
  SyncerCore s(t.plan, init, cfg);
  s.set_live_islands(4);
  // Four islands' outer gradients (all 1) arrive one by one; K = 1 commits each alone.
  for (int i = 0; i < 4; ++i) {
    BOOST_REQUIRE(s.receive(delta_frame(i, s.round(0), 1.0f), 0.1 * i));
    BOOST_REQUIRE_EQUAL(s.poll(0.1 * i).size(), 1u);
  }
  // Each applied 1/4 of its δ: together one step of the average (FedAvg, lr 1), not four.
  BOOST_TEST(s.params()[0] == -1.0f);
  // A full house is applied whole.
  for (int i = 0; i < 4; ++i) BOOST_REQUIRE(s.receive(delta_frame(i, s.round(0), 1.0f), 1.0));
  BOOST_REQUIRE_EQUAL(s.poll(1.0).size(), 1u);
  BOOST_TEST(s.params()[0] == -2.0f);
}

BOOST_AUTO_TEST_CASE(finished_islands_leave_the_quorum_so_the_last_contributions_commit) {
  Tiny t;
  std::vector<float> init(4, 0.0f);
  auto cfg = sgd_settings(3, 2);
  cfg.merge.partial_scale = true;
  SyncerCore s(t.plan, init, cfg);
  s.set_live_islands(3);
  // Island 1 sent its last contribution and finished: with islands 0 and 2 still training the
  // round still wants K = 2.
  BOOST_REQUIRE(s.receive(delta_frame(1, 0, 3.0f), 0.0));
  s.finish(1, true);
  BOOST_TEST(s.poll(0.0).empty());
  // Island 2 finishes with nothing pending: island 1's contribution and island 0 are all the
  // round can still get, so K = 2 is still reachable and it waits.
  s.finish(2, true);
  BOOST_TEST(s.poll(1.0).empty());
  // Island 0 finishes too: nobody else will send, the lone contribution commits below K, and
  // it moves the parameters by its share of the three islands (1/3), not a full step.
  s.finish(0, true);
  const auto c = s.poll(2.0);
  BOOST_REQUIRE_EQUAL(c.size(), 1u);
  BOOST_TEST(c[0].merged == 1);
  BOOST_TEST(s.params()[0] == -1.0f, boost::test_tools::tolerance(1e-6f));
  // A re-joining island is training again: K = 2 holds once more.
  s.finish(0, false);
  s.finish(2, false);
  BOOST_REQUIRE(s.receive(delta_frame(0, 1, 1.0f), 3.0));
  BOOST_TEST(s.poll(3.0).empty());
}

BOOST_AUTO_TEST_CASE(round_commits_when_the_quorum_shrinks_under_its_arrivals) {
  Tiny t;
  std::vector<float> init(4, 0.0f);
  SyncerCore s(t.plan, init, sgd_settings(3, 2));
  s.set_live_islands(3);
  s.finish(2, true);  // island 2 finished, nothing of it pending
  BOOST_REQUIRE(s.receive(delta_frame(0, 0, 1.0f), 0.0));
  BOOST_TEST(s.poll(0.0).empty());  // islands 0 and 1 still train: K = 2
  s.set_live_islands(2);            // island 1 died: island 0 is the only one left to send
  BOOST_TEST(s.poll(0.5).size() == 1u);
  BOOST_TEST(s.round(0) == 1u);
}

BOOST_AUTO_TEST_CASE(last_contributions_of_finished_islands_do_not_coast_on_the_momentum) {
  Tiny t;
  std::vector<float> init(4, 0.0f);
  auto cfg = sgd_settings(2, 2);
  cfg.outer.kind = "nesterov";
  cfg.outer.lr = 0.5f;
  cfg.outer.momentum = 0.9f;
  SyncerCore s(t.plan, init, cfg);
  s.set_live_islands(2);
  BOOST_REQUIRE(s.receive(delta_frame(0, 0, 1.0f), 0.0));
  BOOST_REQUIRE(s.receive(delta_frame(1, 0, 1.0f), 0.0));
  BOOST_REQUIRE_EQUAL(s.poll(0.0).size(), 1u);
  BOOST_TEST(s.params()[0] == -0.95f, boost::test_tools::tolerance(1e-6f));  // m = 1; θ −= 0.5·(1 + 0.9·1)
  // Both islands send their last progress and finish: that merge is the rest of a period,
  // applied as θ −= lr·Δ (a Nesterov step would coast on m once more: −1.545).
  BOOST_REQUIRE(s.receive(delta_frame(0, 1, 0.2f), 1.0));
  s.finish(0, true);
  BOOST_TEST(s.poll(1.0).empty());  // island 1 is still training
  BOOST_REQUIRE(s.receive(delta_frame(1, 1, 0.2f), 1.1));
  s.finish(1, true);
  BOOST_REQUIRE_EQUAL(s.poll(1.1).size(), 1u);
  BOOST_TEST(s.params()[0] == -1.05f, boost::test_tools::tolerance(1e-6f));
}

BOOST_AUTO_TEST_CASE(contribution_repeating_merged_progress_is_not_applied_twice) {
  Tiny t;
  std::vector<float> init(4, 0.0f);
  SyncerCore s(t.plan, init, sgd_settings(2, 2));
  BOOST_REQUIRE(s.receive(delta_frame(0, 0, 1.0f), 0.0));
  BOOST_REQUIRE(s.receive(delta_frame(1, 0, 1.0f), 0.0));
  BOOST_REQUIRE_EQUAL(s.poll(0.0).size(), 1u);
  // Island 0 sends again before the broadcast of round 1 reached it: its δ still holds the
  // progress just merged. Refused; island 1's later one (based on round 1) is fine.
  auto again = s.receive(delta_frame(0, 0, 2.0f), 0.5);
  BOOST_REQUIRE(!again);
  BOOST_TEST((again.error().code == errc::stale_round));
  BOOST_TEST(s.stats().overlapping == 1u);
  BOOST_TEST(s.stats().rejected[errc::stale_round] == 1u);  // refused, and counted as refusals are
  BOOST_TEST(s.stats().accepted == 2u);
  BOOST_TEST(s.pending(0) == 0);
  BOOST_REQUIRE(s.receive(delta_frame(1, 1, 1.0f), 0.5));
  BOOST_REQUIRE(s.receive(delta_frame(0, 1, 1.0f), 0.6));
  BOOST_TEST(s.poll(0.6).size() == 1u);
  BOOST_TEST(s.params()[0] == -2.0f);
}

BOOST_AUTO_TEST_CASE(an_island_rejoining_with_its_parameters_has_its_earlier_sends_withdrawn) {
  Tiny t;
  std::vector<float> init(4, 0.0f);
  SyncerCore s(t.plan, init, sgd_settings(2, 2));  // K = 2: island 0's send waits for island 1's
  const auto e0 = s.join_reply(0).fragments[0].header.seq;
  const auto e1 = s.join_reply(1).fragments[0].header.seq;
  BOOST_REQUIRE(s.receive(delta_frame(0, 0, 1.0f, 4, 0, e0 | 1), 0.0));
  BOOST_REQUIRE_EQUAL(s.pending(0), 1);
  // Island 0 missed a broadcast and re-joins keeping θ: its next δ, from the new base, holds
  // that progress again. Its pending send goes, and one of its old epoch still on its way too.
  std::vector<int> withdrawn;
  const auto reply = s.join_reply(0, /*keeps_local=*/true, &withdrawn);
  const auto again = reply.fragments[0].header.seq;
  BOOST_TEST(again == (std::uint64_t{2} << 32));
  BOOST_TEST(withdrawn == std::vector<int>{0});
  // The withdrawn send's counters go back with the reply: the island's next send carries it.
  BOOST_TEST(reply.fragments[0].header.tokens == 100u);
  BOOST_TEST(reply.fragments[0].header.steps == 10u);
  BOOST_TEST(s.pending(0) == 0);
  BOOST_TEST(s.stats().withdrawn == 1u);
  auto late = s.receive(delta_frame(0, 0, 1.0f, 4, 0, e0 | 2), 0.1);
  BOOST_REQUIRE(!late);
  BOOST_TEST((late.error().code == errc::stale_round));
  BOOST_TEST(late.error().message().find("re-joined keeping its parameters") != std::string::npos);
  BOOST_TEST(s.stats().withdrawn == 2u);
  BOOST_TEST(s.stats().dropped_stale == 2u);
  BOOST_TEST(s.stats().rejected[errc::stale_round] == 1u);  // the late one; the pending one was accepted
  BOOST_TEST(s.stats().accepted == 1u);
  BOOST_TEST(s.poll(0.1).empty());
  BOOST_REQUIRE(s.receive(delta_frame(1, 0, 1.0f, 4, 0, e1 | 1), 0.2));
  BOOST_TEST(s.poll(0.2).empty());  // the quorum waits for island 0 again
  BOOST_REQUIRE(s.receive(delta_frame(0, 0, 3.0f, 4, 0, again | 1), 0.3));
  BOOST_REQUIRE_EQUAL(s.poll(0.3).size(), 1u);
  BOOST_TEST(s.params()[0] == -2.0f);  // (3 + 1) / 2: island 0's progress once
  // A fresh island dropped its parameters: what it sent before its join stays valid.
  BOOST_REQUIRE(s.receive(delta_frame(1, 1, 1.0f, 4, 0, e1 | 2), 0.4));
  const auto fresh_reply = s.join_reply(1);
  const auto fresh = fresh_reply.fragments[0].header.seq;
  BOOST_TEST(fresh_reply.fragments[0].header.tokens == 0u);
  BOOST_TEST(s.pending(0) == 1);
  // ... also when the new life re-joins keeping its parameters: that send is its earlier life's.
  BOOST_TEST(s.join_reply(1, true).fragments[0].header.tokens == 0u);
  BOOST_TEST(s.pending(0) == 1);
  BOOST_REQUIRE(s.receive(delta_frame(0, 1, 1.0f, 4, 0, again | 2), 0.5));
  BOOST_REQUIRE_EQUAL(s.poll(0.5).size(), 1u);
  BOOST_TEST(s.params()[0] == -3.0f);
  BOOST_TEST(fresh == (std::uint64_t{2} << 32));
  BOOST_TEST(s.stats().withdrawn == 2u);
}

BOOST_AUTO_TEST_CASE(frames_report_a_send_dropped_for_good_as_settled) {
  Tiny t;
  std::vector<float> init(4, 0.0f);
  SyncerCore s(t.plan, init, sgd_settings(2, 1));
  const auto e0 = s.join_reply(0).fragments[0].header.seq;
  const auto e1 = s.join_reply(1).fragments[0].header.seq;
  BOOST_REQUIRE(s.receive(delta_frame(0, 0, 1.0f, 4, 0, e0 | 1), 0.0));
  BOOST_REQUIRE_EQUAL(s.poll(0.0).size(), 1u);
  // Island 0's second send, from round 0 again, repeats merged progress: refused, never to be
  // merged, so the next frame reports it settled (the island is done waiting for it).
  BOOST_REQUIRE(!s.receive(delta_frame(0, 0, 1.0f, 4, 0, e0 | 2), 0.1));
  BOOST_REQUIRE(s.receive(delta_frame(1, 1, 1.0f, 4, 0, e1 | 1), 0.2));
  BOOST_REQUIRE_EQUAL(s.poll(0.2).size(), 1u);
  const auto h = std::get<FragmentMessage>(decode_message(s.frame_for(0, 0).value()).value()).header;
  BOOST_TEST(h.merged_seq == (std::vector<std::uint64_t>{e0 | 2, e1 | 1}));
}

BOOST_AUTO_TEST_CASE(newer_frame_of_an_island_supersedes_its_pending_one) {
  Tiny t;
  std::vector<float> init(4, 0.0f);
  SyncerCore s(t.plan, init, sgd_settings(3, 2));
  BOOST_REQUIRE(s.receive(delta_frame(0, 0, 1.0f), 0.0));
  BOOST_REQUIRE(s.receive(delta_frame(0, 0, 5.0f), 1.0));
  BOOST_TEST(s.pending(0) == 1);
  BOOST_TEST(s.poll(1.0).empty());  // the same island twice is still one contribution
  BOOST_REQUIRE(s.receive(delta_frame(1, 0, 1.0f), 1.0));
  BOOST_REQUIRE_EQUAL(s.poll(1.0).size(), 1u);
  BOOST_TEST(s.params()[0] == -3.0f);
  BOOST_TEST(s.stats().superseded == 1u);
  BOOST_TEST(s.superseded() == 1u);
}

BOOST_AUTO_TEST_CASE(syncer_restored_from_snapshot_continues_rounds) {
  Tiny t;
  std::vector<float> init(4, 0.5f);
  auto cfg = sgd_settings(2, 2);
  cfg.outer.kind = "nesterov";
  cfg.outer.lr = 0.7f;
  cfg.outer.momentum = 0.9f;
  cfg.snapshot_every = 2;
  SyncerCore s(t.plan, init, cfg);
  auto round = [](SyncerCore& x, std::uint64_t r, float v) {
    BOOST_REQUIRE(x.receive(delta_frame(0, r, v), 0.0));
    BOOST_REQUIRE(x.receive(delta_frame(1, r, v), 0.0));
    BOOST_REQUIRE_EQUAL(x.poll(0.0).size(), 1u);
  };
  round(s, 0, 0.1f);
  BOOST_TEST(!s.snapshot_due());
  round(s, 1, 0.2f);
  BOOST_REQUIRE(s.snapshot_due());
  const auto path = (std::filesystem::temp_directory_path() / "diloco_test_syncer_snapshot.safetensors").string();
  BOOST_REQUIRE(save_checkpoint(path, t.layout, t.plan, s.snapshot()));
  s.mark_snapshot();
  BOOST_TEST(!s.snapshot_due());
  auto cp = load_checkpoint(path, t.layout, t.plan);
  BOOST_REQUIRE(cp);
  std::vector<float> other(4, 0.0f);
  SyncerCore restored(t.plan, other, cfg);
  BOOST_REQUIRE(restored.restore(*cp));
  BOOST_TEST(restored.round(0) == 2u);
  // The tokens merged so far come back too: a run's goodput spans restarts and leaders.
  BOOST_TEST(s.stats().merged_tokens > 0u);
  BOOST_TEST(restored.stats().merged_tokens == s.stats().merged_tokens);
  // The same next round on both: identical parameters (momentum came back too).
  round(s, 2, 0.3f);
  round(restored, 2, 0.3f);
  BOOST_TEST(restored.round(0) == 3u);
  BOOST_TEST(restored.stats().merged_tokens == s.stats().merged_tokens);
  for (int j = 0; j < 4; ++j) BOOST_TEST(restored.params()[j] == s.params()[j]);
  std::filesystem::remove(path);
}

BOOST_AUTO_TEST_CASE(syncer_with_delayed_nesterov_resumes_its_pending_contributions) {
  Tiny t;
  std::vector<float> init(4, 0.5f);
  auto cfg = sgd_settings(2, 2);
  cfg.outer.kind = "delayed_nesterov";
  cfg.outer.lr = 0.7f;
  cfg.outer.momentum = 0.9f;
  cfg.outer.delay = 2;
  SyncerCore s(t.plan, init, cfg);
  auto round = [](SyncerCore& x, std::uint64_t r, float v) {
    BOOST_REQUIRE(x.receive(delta_frame(0, r, v), 0.0));
    BOOST_REQUIRE(x.receive(delta_frame(1, r, v), 0.0));
    BOOST_REQUIRE_EQUAL(x.poll(0.0).size(), 1u);
  };
  round(s, 0, 0.1f);
  round(s, 1, 0.2f);
  round(s, 2, 0.3f);  // one contribution now waits for the next momentum step
  const auto path = (std::filesystem::temp_directory_path() / "diloco_test_syncer_dn.safetensors").string();
  BOOST_REQUIRE(save_checkpoint(path, t.layout, t.plan, s.snapshot()));
  auto cp = load_checkpoint(path, t.layout, t.plan);
  BOOST_REQUIRE(cp);
  BOOST_REQUIRE_EQUAL(cp->outer_pending.size(), 1u);
  std::vector<float> other(4, 0.0f);
  SyncerCore restored(t.plan, other, cfg);
  BOOST_REQUIRE(restored.restore(*cp));
  round(s, 3, 0.4f);  // the momentum step uses the pending sum: only equal if it was restored
  round(restored, 3, 0.4f);
  for (int j = 0; j < 4; ++j) BOOST_TEST(restored.params()[j] == s.params()[j]);
  std::filesystem::remove(path);
}

// ---- the cores in lockstep reproduce the reference loops (the golden model) ----

BOOST_AUTO_TEST_CASE(lockstep_cores_reproduce_reference_diloco) { check_golden(golden_config("diloco", 1, 0)); }

BOOST_AUTO_TEST_CASE(lockstep_cores_reproduce_reference_streaming) { check_golden(golden_config("streaming", 2, 0)); }

BOOST_AUTO_TEST_CASE(lockstep_cores_reproduce_reference_streaming_with_overlap) {
  check_golden(golden_config("streaming", 2, 2));
}

// ---- lossy broadcasts: the syncer sends the quantised change of Θ̂, islands add it up ----

BOOST_AUTO_TEST_CASE(broadcast_residual_stays_bounded_over_fifty_rounds) {
  Tiny t(256);
  for (auto enc : {Encoding::bf16, Encoding::int8, Encoding::int4, Encoding::e3m0}) {
    BOOST_TEST_CONTEXT(to_string(enc)) {
      std::mt19937_64 g(11);
      SyncerCore s(t.plan, std::vector<float>(256, 0.0f), lossy_settings(2, enc));
      std::vector<double> residual;
      double largest_step = 0.0;
      std::vector<float> before(256), after(256);
      for (std::uint64_t r = 0; r < 50; ++r) {
        t.plan.gather<float>(0, s.params(), before);
        for (int i = 0; i < 2; ++i) {
          FragmentHeader h;
          h.island = i;
          h.base_round = r;
          h.tokens = 100;
          h.steps = 10;
          BOOST_REQUIRE(s.receive(encode_fragment(h, CodecParams{}, gaussian_vec(256, g, 1e-2f)).value(), 0.0));
        }
        BOOST_REQUIRE_EQUAL(s.poll(0.0).size(), 1u);
        BOOST_REQUIRE(s.frame_for(0, 0));
        t.plan.gather<float>(0, s.params(), after);
        const auto held = s.held(0, 0);
        double step = 0.0, res = 0.0;
        for (std::size_t j = 0; j < 256; ++j) {
          step = std::max(step, std::abs(double(after[j]) - before[j]));
          res = std::max(res, std::abs(double(after[j]) - held[j]));
        }
        largest_step = std::max(largest_step, step);
        residual.push_back(res);
      }
      const double early = *std::max_element(residual.begin(), residual.begin() + 10);
      const double late = *std::max_element(residual.end() - 10, residual.end());
      BOOST_TEST_MESSAGE(to_string(enc) << ": max |Θ − Θ̂| rounds 1-10 " << early << ", rounds 41-50 " << late
                                        << ", largest step " << largest_step);
      // Error feedback: what one broadcast leaves out goes into the next, so the gap stays at the
      // quantisation error of one step instead of growing as the rounds add up.
      BOOST_TEST(late <= 2.0 * early);
      BOOST_TEST(late <= largest_step);
    }
  }
}

BOOST_AUTO_TEST_CASE(fp32_broadcast_sends_the_global_parameters_as_before) {
  Tiny t(128);
  std::mt19937_64 g(5);
  const auto init = gaussian_vec(128, g, 0.1f);
  SyncerCore exact(t.plan, init, lossy_settings(2, Encoding::fp32));
  SyncerCore lossy(t.plan, init, lossy_settings(2, Encoding::int4));
  for (std::uint64_t r = 0; r < 5; ++r) {
    for (int i = 0; i < 2; ++i) {
      FragmentHeader h;
      h.island = i;
      h.base_round = r;
      h.tokens = 100;
      h.steps = 10;
      const auto f = encode_fragment(h, CodecParams{}, gaussian_vec(128, g, 1e-2f)).value();
      BOOST_REQUIRE(exact.receive(f, 0.0));
      BOOST_REQUIRE(lossy.receive(f, 0.0));
    }
    BOOST_REQUIRE_EQUAL(exact.poll(0.0).size(), 1u);
    BOOST_REQUIRE_EQUAL(lossy.poll(0.0).size(), 1u);
  }
  // The broadcast encoding never changes Θ itself.
  BOOST_TEST(same_bits(exact.params(), lossy.params()));
  auto msg = decode_message(exact.frame_for(0, 0).value());
  BOOST_REQUIRE(msg);
  const auto& f = std::get<FragmentMessage>(*msg);
  BOOST_TEST((f.header.kind == FragmentKind::global_params));
  BOOST_TEST(f.header.base_round == 5u);
  BOOST_TEST((f.data.params.encoding == Encoding::fp32));
  std::vector<float> got(128);
  BOOST_REQUIRE(decode(EncodedView(f.data), std::span<float>(got)));
  BOOST_TEST(same_bits(got, exact.params()));
  BOOST_TEST(same_bits(exact.held(0, 0), exact.params()));
}

// ---- coalesced frames: with broadcast_to = contributors an island hears of the commits that
// counted its contribution, in one frame carrying every commit since its last ----

BOOST_AUTO_TEST_CASE(contributors_get_one_frame_with_every_commit_since_their_last) {
  for (auto enc : {Encoding::fp32, Encoding::int4}) {
    BOOST_TEST_CONTEXT(to_string(enc)) {
      Tiny t(128);
      std::mt19937_64 g(21);
      const auto init = gaussian_vec(128, g, 0.1f);
      auto settings = lossy_settings(3, enc);
      settings.quorum.min_islands = 1;  // K = 1: each arrival commits on its own
      settings.broadcast_to = BroadcastTo::contributors;
      SyncerCore s(t.plan, init, settings);
      const IslandSettings is{0, SyncSchedule{4, 1}, 0, 0.0, CodecParams{}, true};
      IslandCore island1(t.layout, t.plan, is, AdamWConfig{}, init);
      auto contribute = [&](int island, std::uint64_t base) {
        BOOST_REQUIRE(s.receive(gaussian_frame(island, base, 128, g), 0.0));
        BOOST_REQUIRE_EQUAL(s.poll(0.0).size(), 1u);
      };
      contribute(0, 0);  // round 1: only island 0 is due
      BOOST_TEST(s.due(0) == std::vector<int>{0});
      BOOST_REQUIRE(s.frame_for(0, 0));
      BOOST_TEST(s.due(0).empty());
      contribute(2, 0);  // round 2: island 2
      contribute(0, 1);  // round 3: island 0 again (it held round 1)
      BOOST_TEST(s.due(0) == (std::vector<int>{0, 2}));
      contribute(1, 0);  // round 4: island 1, which holds round 0
      BOOST_TEST(s.due(0) == (std::vector<int>{0, 1, 2}));
      // Island 1 gets rounds 1-4 in one frame, from the round it holds.
      const auto frame = s.frame_for(0, 1).value();
      auto msg = decode_message(frame);
      BOOST_REQUIRE(msg);
      const auto& h = std::get<FragmentMessage>(*msg).header;
      BOOST_TEST(h.base_round == 4u);
      if (enc == Encoding::int4) BOOST_TEST(h.from_round == 0u);
      BOOST_REQUIRE(island1.adopt_frame(frame).value());
      BOOST_TEST(island1.base_round(0) == 4u);
      BOOST_TEST(same_bits(island1.global(0), s.held(0, 1)));
      if (enc == Encoding::fp32) BOOST_TEST(same_bits(island1.global(0), s.params()));
      // int4: Θ̂ of island 1 is within one quantisation step of Θ, not a sum of four errors.
      else BOOST_TEST(relative_l2_error(s.params(), s.held(0, 1)) < 0.05);
      BOOST_TEST(s.held_round(0, 1) == 4u);
      BOOST_TEST(s.held_round(0, 0) == 1u);  // island 0's frame of round 3 is still due
      BOOST_TEST(s.is_due(0, 0));
      BOOST_TEST(!s.is_due(0, 1));
      // A (re)join gives an island everything exactly: nothing more is due to it.
      (void)s.join_reply(0);
      BOOST_TEST(!s.is_due(0, 0));
      BOOST_TEST(s.held_round(0, 0) == 4u);
      BOOST_TEST(same_bits(s.held(0, 0), s.params()));
      BOOST_TEST(!s.frame_for(0, 3));  // not an island of the run
    }
  }
}

// An island whose contributions never reach a commit (each one too stale) would never be sent
// a frame by its contributions alone: it is sent one once it falls max_staleness rounds behind.
BOOST_AUTO_TEST_CASE(contributors_mode_sends_to_an_island_falling_max_staleness_behind) {
  Tiny t(128);
  std::mt19937_64 g(23);
  const auto init = gaussian_vec(128, g, 0.1f);
  auto settings = lossy_settings(2, Encoding::int4);
  settings.quorum.min_islands = 1;
  settings.broadcast_to = BroadcastTo::contributors;
  settings.merge.max_staleness = 3;
  SyncerCore s(t.plan, init, settings);
  for (std::uint64_t r = 0; r < 3; ++r) {
    BOOST_TEST(!s.is_due(0, 1));
    BOOST_REQUIRE(s.receive(gaussian_frame(0, r, 128, g), 0.0));
    BOOST_REQUIRE_EQUAL(s.poll(0.0).size(), 1u);
    BOOST_REQUIRE(s.frame_for(0, 0));
  }
  BOOST_TEST(s.is_due(0, 1));  // 3 rounds behind: its next contribution would be refused
  const auto frame = s.frame_for(0, 1);
  BOOST_REQUIRE(frame);
  BOOST_TEST(s.held_round(0, 1) == 3u);
  auto again = s.frame_for(0, 1);  // nothing new: refused rather than a frame the island ignores
  BOOST_REQUIRE(!again);
  BOOST_TEST((again.error().code == errc::stale_round));
}

BOOST_AUTO_TEST_CASE(restored_lossy_syncer_heals_islands_onto_its_parameters) {
  Tiny t(128);
  std::mt19937_64 g(9);
  const auto init = gaussian_vec(128, g, 0.1f);
  SyncerCore s(t.plan, init, lossy_settings(2, Encoding::int4));
  for (std::uint64_t r = 0; r < 3; ++r) {
    for (int i = 0; i < 2; ++i) {
      FragmentHeader h;
      h.island = i;
      h.base_round = r;
      h.tokens = 100;
      h.steps = 10;
      BOOST_REQUIRE(s.receive(encode_fragment(h, CodecParams{}, gaussian_vec(128, g, 1e-2f)).value(), 0.0));
    }
    BOOST_REQUIRE_EQUAL(s.poll(0.0).size(), 1u);
  }
  BOOST_REQUIRE(s.frame_for(0, 0));
  BOOST_TEST(!same_bits(s.held(0, 0), s.params()));
  SyncerCore restored(t.plan, init, lossy_settings(2, Encoding::int4));
  BOOST_REQUIRE(restored.restore(s.snapshot()));
  BOOST_TEST(same_bits(restored.held(0, 0), s.params()));  // Θ̂ = Θ after a restore
  BOOST_TEST(restored.held_round(0, 0) == 3u);
  BOOST_TEST(!restored.is_due(0, 0));  // nothing until a commit: islands re-join and heal
  IslandCore a(t.layout, t.plan, IslandSettings{0, SyncSchedule{4, 1}, 0, 0.0, CodecParams{}, true}, AdamWConfig{}, init);
  auto reply = decode_message(encode_message(restored.join_reply(0)));
  BOOST_REQUIRE(reply);
  a.heal(std::get<JoinReply>(*reply), /*keep_local=*/true);
  BOOST_TEST(same_bits(a.global(0), s.params()));
  BOOST_TEST(a.base_round(0) == 3u);
}

// ---- divergence: a NaN is reported as such, never taken for a missing answer ----

BOOST_AUTO_TEST_CASE(syncer_commit_that_overflows_is_reported_and_never_snapshot) {
  for (auto enc : {Encoding::fp32, Encoding::int8}) {
    Tiny t;
    std::vector<float> init(4, 0.0f);
    auto cfg = sgd_settings(2, 2);
    cfg.broadcast = CodecParams{enc, enc == Encoding::fp32 ? 0u : 4u};
    cfg.snapshot_every = 1;
    cfg.outer.lr = 3e37f;  // an absurd outer learning rate: the outer step diverges, not the islands
    SyncerCore s(t.plan, init, cfg);
    // δ = −10 twice: θ = 3e38, then 6e38 = infinity in float.
    for (std::uint64_t r = 0; r < 2; ++r) {
      BOOST_REQUIRE(s.receive(delta_frame(0, r, -10.0f), 0.0));
      BOOST_REQUIRE(s.receive(delta_frame(1, r, -10.0f), 0.0));
      const auto c = s.poll(0.0);
      BOOST_REQUIRE_EQUAL(c.size(), 1u);
      BOOST_TEST(c[0].finite == (r == 0));
      if (r == 0) {
        BOOST_TEST(s.snapshot_due());
        s.mark_snapshot();
      }
    }
    BOOST_REQUIRE(!s.health());
    BOOST_TEST((s.health().error().code == errc::non_finite));
    BOOST_TEST(s.health().error().reason.find("global fragment 0 holds NaN or infinity after round 2") !=
               std::string::npos);
    BOOST_TEST(!s.snapshot_due());  // a diverged state never replaces the last good snapshot
    BOOST_TEST(!s.frame_for(0, 0));  // and nothing of it can be sent
  }
}

BOOST_AUTO_TEST_CASE(an_outer_gradient_far_beyond_the_parameters_is_refused_counted_and_never_merged) {
  Tiny t;
  std::vector<float> init(4, 0.0f);
  SyncerCore s(t.plan, init, sgd_settings(2, 1));
  // Finite, but 3e38 would overflow Θ at the outer step and end the run for everyone.
  auto r = s.receive(delta_frame(1, 0, -3e38f), 0.0);
  BOOST_REQUIRE(!r);
  BOOST_TEST((r.error().code == errc::out_of_bounds));
  BOOST_TEST_MESSAGE(r.error().message());
  BOOST_TEST(r.error().reason.find("island 1's fragment 0 based on round 0: outer gradient of RMS 3e+38, more than 100") !=
             std::string::npos);
  BOOST_TEST(s.stats().rejected[errc::out_of_bounds] == 1u);
  BOOST_TEST(s.stats().accepted == 0u);
  BOOST_TEST(s.poll(0.0).empty());  // nothing pending
  // The bound: 100 × max(RMS(Θ), 1). At Θ = 0, RMS 100 passes and 101 does not.
  BOOST_TEST(!s.receive(delta_frame(0, 0, 101.0f), 0.0));
  BOOST_REQUIRE(s.receive(delta_frame(0, 0, -100.0f), 0.0));
  const auto c = s.poll(0.0);
  BOOST_REQUIRE_EQUAL(c.size(), 1u);
  BOOST_TEST(c[0].islands == std::vector<int>{0});
  BOOST_TEST(s.params()[0] == 100.0f);
  BOOST_TEST(s.health().has_value());
  // With Θ at RMS 100 the bound is 100 × 100: the same island's next step of 5000 is taken.
  BOOST_REQUIRE(s.receive(delta_frame(0, 1, 5000.0f), 0.0));
  BOOST_TEST(s.poll(0.0).size() == 1u);
  BOOST_TEST(s.stats().rejected[errc::out_of_bounds] == 2u);
  BOOST_TEST(s.stats().accepted == 2u);
}

// ---- the end of a run survives a syncer restart ----

BOOST_AUTO_TEST_CASE(syncer_restarted_after_islands_finished_still_knows_who_finished_and_their_steps) {
  Tiny t;
  std::vector<float> init(4, 0.0f);
  auto cfg = sgd_settings(3, 2);
  cfg.snapshot_every = 100;  // rounds alone would not snapshot for a long time
  SyncerCore s(t.plan, init, cfg);
  s.set_live_islands(3);
  s.heard(0, 40, 1.0);
  s.heard(1, 60, 1.0);
  s.heard(1, 50, 2.0);  // the last step heard of only goes up
  s.heard(7, 10, 2.0);  // not an island of the run: ignored
  BOOST_TEST(!s.snapshot_due());
  s.finish(1, true);
  BOOST_TEST(s.snapshot_due());  // who finished must not be lost with the process
  const auto path = (std::filesystem::temp_directory_path() / "diloco_test_syncer_finished.safetensors").string();
  BOOST_REQUIRE(save_checkpoint(path, t.layout, t.plan, s.snapshot()));
  s.mark_snapshot();
  BOOST_TEST(!s.snapshot_due());
  auto cp = load_syncer_state(path, t.layout, t.plan, 3);
  BOOST_REQUIRE(cp);
  BOOST_REQUIRE(cp->has_value());
  SyncerCore restarted(t.plan, init, cfg);
  BOOST_REQUIRE(restarted.restore(**cp));
  BOOST_TEST(restarted.finished(1));
  BOOST_TEST(!restarted.finished(0));
  BOOST_TEST(restarted.last_step(0) == 40u);
  BOOST_TEST(restarted.last_step(1) == 60u);
  BOOST_TEST(restarted.last_step(2) == 0u);
  // Island 1 is gone for good: the restarted syncer does not wait for it. Islands 0 and 2
  // finish with one last contribution, which commits below K = 2.
  restarted.set_live_islands(3);
  BOOST_REQUIRE(restarted.receive(delta_frame(0, 0, 1.0f), 0.0));
  restarted.finish(0, true);
  restarted.finish(2, true);
  BOOST_TEST(restarted.poll(0.0).size() == 1u);
  std::filesystem::remove(path);
}

// ---- an unusable syncer state file is refused, or moved aside; never started over silently ----

BOOST_AUTO_TEST_CASE(corrupt_syncer_state_file_is_refused_naming_the_file_and_the_problem) {
  Tiny t;
  const auto dir = std::filesystem::temp_directory_path() / "diloco_test_corrupt_state";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const auto path = (dir / "syncer.safetensors").string();
  // No file: a fresh start.
  auto none = load_syncer_state(path, t.layout, t.plan, 2);
  BOOST_REQUIRE(none);
  BOOST_TEST(!none->has_value());
  {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    BOOST_REQUIRE(f);
    std::fputs("not a checkpoint at all", f);
    std::fclose(f);
  }
  auto bad = load_syncer_state(path, t.layout, t.plan, 2);
  BOOST_REQUIRE(!bad);
  BOOST_TEST((bad.error().code == errc::corrupt_checkpoint));
  BOOST_TEST(bad.error().reason.find(path) != std::string::npos);
  // Moved aside, never overwritten: .corrupt-1, then .corrupt-2 for the next one.
  auto moved = move_aside(path);
  BOOST_REQUIRE(moved);
  BOOST_TEST(*moved == path + ".corrupt-1");
  BOOST_TEST(!std::filesystem::exists(path));
  std::filesystem::copy_file(*moved, path);
  auto again = move_aside(path);
  BOOST_REQUIRE(again);
  BOOST_TEST(*again == path + ".corrupt-2");
  BOOST_TEST(std::filesystem::exists(*moved));
  std::filesystem::remove_all(dir);
}

BOOST_AUTO_TEST_CASE(syncer_metadata_that_is_not_a_number_is_refused_and_restores_nothing) {
  Tiny t;
  std::vector<float> init(4, 0.0f);
  SyncerCore s(t.plan, init, sgd_settings(2, 2));
  BOOST_REQUIRE(s.receive(delta_frame(0, 0, 1.0f), 0.0));
  BOOST_REQUIRE(s.receive(delta_frame(1, 0, 1.0f), 0.0));
  BOOST_REQUIRE_EQUAL(s.poll(0.0).size(), 1u);
  auto cp = s.snapshot();
  for (const auto& [key, value] : std::vector<std::pair<std::string, std::string>>{
           {"syncer.island_finished.1", "yes"}, {"syncer.island_step.0", "-3"}, {"syncer.outer_steps.0", "12abc"}}) {
    auto bad = cp;
    bad.metadata[key] = value;
    SyncerCore fresh(t.plan, init, sgd_settings(2, 2));
    auto st = fresh.restore(bad);
    BOOST_REQUIRE(!st);
    BOOST_TEST((st.error().code == errc::corrupt_checkpoint));
    BOOST_TEST(st.error().reason.find(key) != std::string::npos);
    BOOST_TEST(fresh.round(0) == 0u);  // nothing was restored
    BOOST_TEST(fresh.params()[0] == 0.0f);
  }
  // A checkpoint of another plan is a mismatch, not an exception.
  Tiny other(8);
  std::vector<float> init8(8, 0.0f);
  SyncerCore wrong(other.plan, init8, sgd_settings(2, 2));
  auto st = wrong.restore(cp);
  BOOST_REQUIRE(!st);
  BOOST_TEST((st.error().code == errc::checkpoint_mismatch));
}

// ---- a proven peer that sends the largest outer gradient it may, every round ----

namespace {

// One hostile island of four sends, every round, an outer gradient just under the ratio bound
// (merge.max_delta_ratio × max(RMS(Θ), 1)), all in one direction; three honest ones send small
// noise. With `alone` = 0 the four are merged together (K = 4); otherwise K = 1, and each round
// the hostile island sends `alone` times, each merged on its own, then each honest one once.
// Returns what the syncer holds after `rounds` rounds (or the first that left Θ non-finite).
struct HostileRun {
  SyncerStats stats;
  Status health;
  double rms = 0.0;
  int rounds = 0;
  bool honest_clipped = false;
};

HostileRun run_with_a_hostile_island(double clip_ratio, int rounds, int alone = 0) {
  Tiny t(64);
  std::vector<float> init(64, 0.1f);
  auto cfg = sgd_settings(4, alone > 0 ? 1 : 4);
  cfg.merge = MergeConfig{};  // the defaults: token weights, RDA, partial scale, the bounds
  cfg.merge.clip_ratio = clip_ratio;
  cfg.outer.kind = "nesterov";
  cfg.outer.lr = 0.7f;
  cfg.outer.momentum = 0.9f;
  SyncerCore s(t.plan, init, cfg);
  std::mt19937 gen(7);
  std::normal_distribution<float> noise(0.0f, 0.01f);
  HostileRun out;
  auto rms_of = [](std::span<const float> v) {
    double s2 = 0;
    for (float x : v) s2 += double(x) * x;
    return std::sqrt(s2 / double(v.size()));
  };
  auto send = [&](int island, double now) {
    const double bound = cfg.merge.max_delta_ratio * std::max(rms_of(s.params()), 1.0);
    FragmentHeader h;
    h.island = island;
    h.base_round = s.round(0);
    h.tokens = 100;
    h.steps = 10;
    std::vector<float> v(64);
    // At most the largest float: past it the bound allows what no frame can carry.
    for (auto& x : v) x = island == 3 ? static_cast<float>(std::max(-0.99 * bound, -3e38)) : noise(gen);
    BOOST_REQUIRE(s.receive(encode_fragment(h, CodecParams{}, v).value(), now));
  };
  auto commit = [&](double now) {
    const auto c = s.poll(now);
    BOOST_REQUIRE_EQUAL(c.size(), 1u);
    for (int island : c[0].clipped) out.honest_clipped = out.honest_clipped || island != 3;
  };
  for (int r = 0; r < rounds && s.health(); ++r) {
    if (alone == 0) {
      for (int island = 0; island < 4; ++island) send(island, r);
      commit(r);
    } else {
      for (int k = 0; k < alone + 3 && s.health(); ++k) {
        send(k < alone ? 3 : k - alone, r);
        commit(r);
      }
    }
    out.rounds = r + 1;
  }
  out.stats = s.stats();
  out.health = s.health();
  out.rms = rms_of(s.params());
  return out;
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_peer_sending_the_largest_outer_gradient_every_round_cannot_make_the_syncer_diverge) {
  // Unclipped, the hostile island multiplies Θ by up to ~100 a round: Θ overflows and the run
  // ends for everyone within tens of rounds. This is what the clip prevents.
  const auto unclipped = run_with_a_hostile_island(0.0, 300);
  BOOST_TEST_MESSAGE("unclipped: non-finite after " << unclipped.rounds << " rounds");
  BOOST_TEST(!unclipped.health);
  BOOST_TEST(unclipped.rounds < 60);
  // Clipped to 100 × the median of the islands' last norms (the default), Θ drifts by a bounded
  // step a round once 3 islands have a norm (after the first round here).
  const auto clipped = run_with_a_hostile_island(MergeConfig{}.clip_ratio, 300);
  BOOST_TEST_MESSAGE("clipped: RMS(Θ) " << clipped.rms << " after " << clipped.rounds << " rounds, "
                                        << clipped.stats.clipped << " outer gradients clipped");
  BOOST_TEST(clipped.health.has_value());
  BOOST_TEST(clipped.rounds == 300);
  BOOST_TEST(clipped.rms < 1e5);  // 300 rounds on: far from the 3e38 that ends the unclipped run
  BOOST_TEST(!clipped.honest_clipped);  // only the hostile island's sends
  BOOST_TEST(clipped.stats.clipped == 299u);
  BOOST_TEST(clipped.stats.merged == 1200u);
}

BOOST_AUTO_TEST_CASE(a_peer_merged_alone_again_and_again_cannot_fill_the_median_with_its_own_norms) {
  // K = 1: every arrival commits on its own, and the hostile island sends 5 times a round for
  // each send of an honest one, starting before them. Its norms take one slot of four in the
  // median, however often; before the others first send, the start's bound holds it.
  const auto unclipped = run_with_a_hostile_island(0.0, 300, 5);
  BOOST_TEST_MESSAGE("unclipped, alone: non-finite after " << unclipped.rounds << " rounds");
  BOOST_TEST(!unclipped.health);
  const auto clipped = run_with_a_hostile_island(MergeConfig{}.clip_ratio, 300, 5);
  BOOST_TEST_MESSAGE("clipped, alone: RMS(Θ) " << clipped.rms << " after " << clipped.rounds << " rounds, "
                                               << clipped.stats.clipped << " outer gradients clipped");
  BOOST_TEST(clipped.health.has_value());
  BOOST_TEST(clipped.rounds == 300);
  BOOST_TEST(clipped.rms < 1e5);
  BOOST_TEST(!clipped.honest_clipped);
  BOOST_TEST(clipped.stats.merged == 2400u);
}

// A contribution covering k > 1.5 periods of the islands' schedule (a catch-up after an outage)
// feeds the outer momentum with one period's share of it (1/k); the rest moves Θ without it, so a
// row of such catch-ups after a failover does not carry Θ on past them. Up to 1.5 periods: a plain
// step. In a merge of several, each is cut to its period; delayed Nesterov is left as it is.
BOOST_AUTO_TEST_CASE(progress_past_one_period_moves_theta_without_feeding_the_momentum) {
  Tiny t;
  const std::vector<float> init(4, 0.0f);
  auto settings = sgd_settings(2, 1);
  settings.outer.kind = "nesterov";
  settings.outer.lr = 0.5f;
  settings.outer.momentum = 0.9f;
  auto frame = [](int island, std::uint64_t base, std::uint64_t steps) {
    FragmentHeader h;
    h.island = island;
    h.base_round = base;
    h.tokens = 10 * steps;
    h.steps = steps;
    return encode_fragment(h, CodecParams{}, std::vector<float>(4, 0.3f)).value();
  };
  for (long period : {0L, 10L}) {
    BOOST_TEST_CONTEXT("period_steps " << period) {
      settings.period_steps = period;
      SyncerCore s(t.plan, init, settings);
      BOOST_REQUIRE(s.receive(frame(0, 0, 30), 0.0));  // three periods of 10 steps
      const auto c = s.poll(0.0);
      BOOST_REQUIRE_EQUAL(c.size(), 1u);
      const double core = period > 0 ? 0.1 : 0.3, rest = 0.3 - core;  // of δ = 0.3
      BOOST_TEST(c[0].excess == rest / 0.3, boost::test_tools::tolerance(1e-9));
      const auto cp = s.snapshot();
      for (int j = 0; j < 4; ++j) {
        BOOST_TEST(cp.momentum[0][j] == core, boost::test_tools::tolerance(1e-6));
        BOOST_TEST(s.params()[j] == -0.5 * (core + 0.9 * core) - 0.5 * rest, boost::test_tools::tolerance(1e-6));
      }
      BOOST_TEST(s.stats().excess == (period > 0 ? 1u : 0u));
      // Up to 1.5 periods: all of it a step, into the momentum.
      BOOST_REQUIRE(s.receive(frame(1, 1, 15), 0.0));
      const auto d = s.poll(0.0);
      BOOST_REQUIRE_EQUAL(d.size(), 1u);
      BOOST_TEST(d[0].excess == 0.0);
      for (int j = 0; j < 4; ++j) BOOST_TEST(s.snapshot().momentum[0][j] == 0.9 * core + 0.3, boost::test_tools::tolerance(1e-6));
    }
  }
  // Several in one commit: each is cut to its period before the merge that feeds the momentum.
  settings.period_steps = 10;
  settings.quorum.min_islands = 2;
  SyncerCore both(t.plan, init, settings);
  BOOST_REQUIRE(both.receive(frame(0, 0, 30), 0.0));
  BOOST_REQUIRE(both.receive(frame(1, 0, 10), 0.0));
  const auto c = both.poll(0.0);
  BOOST_REQUIRE_EQUAL(c.size(), 1u);
  BOOST_TEST(c[0].excess == (2.0 / 3.0) / 2.0, boost::test_tools::tolerance(1e-9));
  for (int j = 0; j < 4; ++j) {
    BOOST_TEST(both.snapshot().momentum[0][j] == 0.2, boost::test_tools::tolerance(1e-6));  // mean of 0.1 and 0.3
    BOOST_TEST(both.params()[j] == -0.5 * (0.2 + 0.9 * 0.2) - 0.5 * 0.1, boost::test_tools::tolerance(1e-6));
  }
  // Delayed Nesterov takes contributions in 1/delay at a time already: no cut.
  settings.outer.kind = "delayed_nesterov";
  settings.quorum.min_islands = 1;
  SyncerCore delayed(t.plan, init, settings);
  BOOST_REQUIRE(delayed.receive(frame(0, 0, 30), 0.0));
  const auto e = delayed.poll(0.0);
  BOOST_REQUIRE_EQUAL(e.size(), 1u);
  BOOST_TEST(e[0].excess == 0.0);
}
