// Joining mid-run (join_pool.hpp, config.hpp): which open islands a joiner gets, the lease that
// keeps them for a lost one, and the configuration that opens them.
#define BOOST_TEST_MODULE join_pool
#include <boost/test/unit_test.hpp>

#include <string>
#include <vector>

#include "diloco/config.hpp"
#include "diloco/join_pool.hpp"
#include "diloco/params.hpp"

using namespace diloco;

namespace {
const auto none_spent = [](int) { return false; };
}

BOOST_AUTO_TEST_CASE(a_joiner_gets_the_first_free_open_islands_and_a_second_the_next) {
  JoinPool pool({4, 2, 3}, 10.0);
  BOOST_TEST(pool.vacant(2));
  BOOST_TEST(!pool.vacant(0));  // not open: a configured site's
  auto a = pool.ask("j1", 2, {}, none_spent);
  BOOST_TEST(a.refused.empty());
  BOOST_TEST(a.islands == (std::vector<int>{2, 3}));
  BOOST_TEST(!a.back);
  BOOST_TEST(!pool.vacant(2));
  auto b = pool.ask("j2", 2, {}, none_spent);
  BOOST_TEST(b.islands.empty());
  BOOST_TEST(b.refused == "it asks for 2 islands and 1 of the run's 3 open islands are free");
  auto c = pool.ask("j2", 1, {}, none_spent);
  BOOST_TEST(c.islands == (std::vector<int>{4}));
  BOOST_TEST(pool.live() == 2);
}

BOOST_AUTO_TEST_CASE(a_live_name_is_busy_and_an_island_that_trained_its_budget_is_given_to_nobody) {
  JoinPool pool({1, 2}, 10.0);
  BOOST_TEST(pool.ask("j", 1, {}, [](int i) { return i == 1; }).islands == (std::vector<int>{2}));
  auto again = pool.ask("j", 1, {}, none_spent);
  BOOST_TEST(again.islands.empty());
  BOOST_TEST(again.refused.empty());
  BOOST_TEST(again.busy == "joiner 'j' already has a live session");
  BOOST_TEST(pool.ask("k", 1, {}, [](int) { return true; }).refused ==
             "it asks for 1 islands and 0 of the run's 2 open islands are free");
}

BOOST_AUTO_TEST_CASE(a_lost_joiner_keeps_its_islands_for_its_lease_and_gets_them_back) {
  JoinPool pool({1, 2}, 10.0);
  pool.ask("j", 1, {}, none_spent);
  BOOST_TEST(!pool.lost("j", false, 100.0));  // lost, not left: kept
  BOOST_TEST(*pool.next_expiry() == 110.0);
  BOOST_TEST(pool.expire(109.9).empty());
  BOOST_TEST(!pool.vacant(1));
  BOOST_TEST(pool.ask("k", 2, {}, none_spent).refused == "it asks for 2 islands and 1 of the run's 2 open islands are free");
  auto back = pool.ask("j", 1, {}, none_spent);
  BOOST_TEST(back.back);
  BOOST_TEST(back.islands == (std::vector<int>{1}));
  // Lost again, and this time the lease runs out: the island is open for the next joiner.
  pool.lost("j", false, 200.0);
  BOOST_TEST(pool.expire(210.0) == (std::vector<std::string>{"j"}));
  BOOST_TEST(pool.vacant(1));
  BOOST_TEST(!pool.next_expiry());
  BOOST_TEST(pool.ask("k", 1, {}, none_spent).islands == (std::vector<int>{1}));
}

BOOST_AUTO_TEST_CASE(a_joiner_that_left_frees_its_islands_at_once) {
  JoinPool pool({1}, 10.0);
  pool.ask("j", 1, {}, none_spent);
  BOOST_TEST(pool.lost("j", true, 5.0));
  BOOST_TEST(pool.vacant(1));
  BOOST_TEST(pool.held_by("j").empty());
  BOOST_TEST(pool.ask("k", 1, {}, none_spent).islands == (std::vector<int>{1}));
}

BOOST_AUTO_TEST_CASE(a_joiner_whose_lease_ran_out_gets_exactly_the_islands_it_trains_or_nothing) {
  JoinPool pool({1, 2, 3}, 1.0);
  pool.ask("j", 1, {}, none_spent);  // island 1
  pool.lost("j", false, 0.0);
  pool.expire(2.0);
  // Its process trains island 1 still, and asks for it back: free, so it is its own again.
  BOOST_TEST(pool.ask("j", 1, {1}, none_spent).islands == (std::vector<int>{1}));
  pool.lost("j", false, 3.0);
  pool.expire(5.0);
  pool.ask("k", 1, {}, none_spent);  // k takes island 1 meanwhile
  BOOST_TEST(pool.ask("j", 1, {1}, none_spent).refused ==
             "the islands it trained were given to another joiner after its lease ran out");
}

BOOST_AUTO_TEST_CASE(a_joiner_keeps_an_island_that_trained_its_budget_when_it_asks_for_it_again) {
  JoinPool pool({1, 2}, 1.0);
  pool.ask("j", 2, {}, none_spent);
  pool.lost("j", false, 0.0);
  pool.expire(5.0);
  auto a = pool.ask("j", 2, {1, 2}, [](int i) { return i == 1; });  // island 1 is done, island 2 is not
  BOOST_TEST(a.refused.empty());
  BOOST_TEST(a.islands == (std::vector<int>{1, 2}));
}

BOOST_AUTO_TEST_CASE(islands_reserved_at_a_syncer_start_wait_for_the_joiner_that_trains_them) {
  JoinPool pool({1, 2, 3}, 10.0);
  pool.reserve({2, 3}, 10.0);
  BOOST_TEST(!pool.vacant(2));
  BOOST_TEST(pool.vacant(1));
  BOOST_TEST(*pool.next_expiry() == 10.0);
  // A newcomer gets only the free one; the joiner of island 3 names it and gets it back.
  auto wait = pool.ask("new", 2, {}, none_spent);  // enough once the reservations run out: for now only
  BOOST_TEST(wait.refused.empty());
  BOOST_TEST(wait.busy == "2 of the open islands it needs are kept for the joiners that trained them (until their lease runs out)");
  BOOST_TEST(pool.ask("big", 4, {}, none_spent).refused == "it asks for 4 islands and 1 of the run's 3 open islands are free");
  BOOST_TEST(pool.ask("j", 1, {3}, none_spent).islands == (std::vector<int>{3}));
  // Island 2's joiner does not come back in time: it is open for anyone.
  BOOST_TEST(pool.expire(10.0) == (std::vector<std::string>{"the joiner of island 2"}));
  BOOST_TEST(pool.vacant(2));
  BOOST_TEST(pool.ask("new", 2, {}, none_spent).islands == (std::vector<int>{1, 2}));
}

BOOST_AUTO_TEST_CASE(a_run_without_open_islands_takes_no_joiners) {
  JoinPool pool({}, 1.0);
  BOOST_TEST(pool.ask("j", 1, {}, none_spent).refused == "this run takes no joiners (net.allow_join)");
}

namespace {
std::vector<std::string> errors_of(const std::string& toml) {
  try {
    parse_config(toml);
  } catch (const ConfigError& e) {
    return e.problems();
  }
  return {};
}
bool has(const std::vector<std::string>& v, const std::string& s) {
  for (const auto& x : v)
    if (x.find(s) != std::string::npos) return true;
  return false;
}
}  // namespace

BOOST_AUTO_TEST_CASE(islands_left_out_of_sites_are_open_only_with_allow_join) {
  const std::string sites = "[train]\nislands = 3\n[[sites]]\nname = \"a\"\nislands = [0]\n";
  const auto closed = errors_of(sites);
  BOOST_TEST(has(closed, "sites: island 1 belongs to no site (set net.allow_join = true to leave it open for joiners)"));
  BOOST_TEST(errors_of(sites + "[net]\nallow_join = true\n").empty());
  const auto cfg = parse_config(sites + "[net]\nallow_join = true\n");
  BOOST_TEST(open_islands(cfg) == (std::vector<int>{1, 2}));
  BOOST_TEST(has(errors_of("[train]\nislands = 1\n[net]\nallow_join = true\n[[sites]]\nname = \"a\"\nislands = [0]\n"),
                 "net.allow_join: every island belongs to a [[sites]] entry"));
  BOOST_TEST(has(errors_of("[train]\nislands = 2\n[net]\nallow_join = true\n"), "net.allow_join: needs [[sites]]"));
  BOOST_TEST(has(errors_of(sites + "[net]\nallow_join = true\njoin_lease_ms = -1.0\n"), "net.join_lease_ms: must be ≥ 0"));
}

BOOST_AUTO_TEST_CASE(a_layout_signature_tells_models_apart_by_names_and_shapes) {
  ParamLayout a, b, c;
  a.add("w", {4, 8}, 0, true);
  b.add("w", {8, 4}, 0, true);  // the same size, another shape
  c.add("v", {4, 8}, 0, true);  // the same shape, another name
  BOOST_TEST(layout_signature(a) != layout_signature(b));
  BOOST_TEST(layout_signature(a) != layout_signature(c));
  BOOST_TEST(layout_signature(a).rfind("1 tensors, 32 parameters, layout 0x", 0) == 0);
  ParamLayout a2;
  a2.add("w", {4, 8}, 1, false);  // layer and decay are not the identity of the exchanged tensors
  BOOST_TEST(layout_signature(a) == layout_signature(a2));
}
