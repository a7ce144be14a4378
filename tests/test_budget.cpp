// The end of a run: when an island's budget is spent, when every island has trained, when the run
// is over (down islands under a shared tokens budget, the final sync's window), by hand-made cases.
#define BOOST_TEST_MODULE budget
#include <boost/test/unit_test.hpp>

#include <stdexcept>
#include <vector>

#include "diloco/budget.hpp"

using namespace diloco;

BOOST_AUTO_TEST_CASE(an_island_steps_budget_is_spent_at_each_islands_own_last_step) {
  const auto b = RunBudget::island_steps(100);
  BOOST_TEST(!budget_spent(b, 99, 1'000'000'000u));  // tokens do not count here
  BOOST_TEST(budget_spent(b, 100, 0u));
  BOOST_TEST(budget_spent(b, 101, 0u));  // a restarted island may resume past its budget
}

BOOST_AUTO_TEST_CASE(a_tokens_budget_is_shared_so_the_step_of_one_island_does_not_matter) {
  const auto b = RunBudget::total_tokens(4096);
  BOOST_TEST(!budget_spent(b, 1'000'000, 4095u));
  BOOST_TEST(budget_spent(b, 0, 4096u));
  BOOST_TEST(budget_spent(b, 3, 5000u));
}

BOOST_AUTO_TEST_CASE(a_run_has_not_trained_while_one_island_is_behind) {
  const auto b = RunBudget::island_steps(50);
  const std::vector<long> behind{50, 62, 49};
  const std::vector<long> all{50, 62, 50};
  BOOST_TEST(!all_trained(b, behind, 0u));
  BOOST_TEST(all_trained(b, all, 0u));
  BOOST_TEST(all_trained(b, std::vector<long>{}, 0u));  // no islands: nothing left to train
}

BOOST_AUTO_TEST_CASE(a_fast_island_may_spend_a_tokens_budget_for_a_slow_one) {
  const auto b = RunBudget::total_tokens(1000);
  const std::vector<long> steps{90, 10};  // island 1 is slow: far from any per-island count
  BOOST_TEST(!all_trained(b, steps, 999u));
  BOOST_TEST(all_trained(b, steps, 1000u));
}

BOOST_AUTO_TEST_CASE(a_run_is_done_when_every_island_is_done) {
  const auto b = RunBudget::island_steps(10);
  BOOST_TEST(!all_done(b, {true, false}, {true, true}, 0u));
  BOOST_TEST(all_done(b, {true, true}, {true, true}, 0u));
  BOOST_TEST(all_done(b, {true, true}, {false, false}, 0u));  // done islands may be down
}

BOOST_AUTO_TEST_CASE(an_island_steps_run_waits_for_a_down_island_that_has_not_finished) {
  // A down island comes back (its supervisor restarts it) and trains the rest of its steps.
  const auto b = RunBudget::island_steps(10);
  BOOST_TEST(!all_done(b, {true, false}, {true, false}, 1'000'000u));
}

BOOST_AUTO_TEST_CASE(a_spent_tokens_budget_ends_the_run_without_the_islands_that_are_down) {
  const auto b = RunBudget::total_tokens(1000);
  BOOST_TEST(all_done(b, {true, false}, {true, false}, 1000u));   // island 1 is down: nothing left for it
  BOOST_TEST(!all_done(b, {true, false}, {true, true}, 1000u));   // island 1 is up: it sends its last progress
  BOOST_TEST(!all_done(b, {true, false}, {true, false}, 999u));   // the budget is not spent yet
}

BOOST_AUTO_TEST_CASE(the_done_and_up_flags_must_name_the_same_islands) {
  BOOST_CHECK_THROW(all_done(RunBudget::island_steps(1), {true, true}, {true}, 0u), std::invalid_argument);
}

// train.batch is per island: an island's chips split its batch, so the chip counts do not matter.
BOOST_AUTO_TEST_CASE(the_config_budget_counts_the_tokens_of_every_island_whatever_its_chips) {
  RunConfig cfg;
  cfg.train.steps = 20;
  cfg.train.batch = 4;
  cfg.model.seq_len = 16;
  cfg.train.islands = 3;
  cfg.islands.chips = 2;
  cfg.islands.counts = {1};  // island 0 has one chip, islands 1 and 2 have two: 5 chips
  const auto steps = RunBudget::of(cfg);
  BOOST_TEST((steps.kind == Budget::island_steps));
  BOOST_TEST(steps.steps == 20);
  cfg.train.budget = Budget::total_tokens;
  const auto tokens = RunBudget::of(cfg);
  BOOST_TEST((tokens.kind == Budget::total_tokens));
  BOOST_TEST(tokens.tokens == 20u * 4u * 16u * 3u);
}

BOOST_AUTO_TEST_CASE(the_final_sync_waits_its_window_and_then_expires) {
  BOOST_TEST(!final_sync_expired(100.0, 130.0, 30.0));  // exactly the window: still waiting
  BOOST_TEST(final_sync_expired(100.0, 130.5, 30.0));
  BOOST_TEST(final_sync_expired(100.0, 100.001, 0.0));   // final_sync_s = 0: end at once
}
