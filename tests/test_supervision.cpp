// Supervision policy: OTP restart types, strategies, intensity and back-off, with time passed in.
#define BOOST_TEST_MODULE supervision
#include <boost/test/unit_test.hpp>

#include "diloco/supervision.hpp"

using namespace diloco;
using V = std::vector<std::size_t>;

namespace {
std::vector<ChildSpec> three(Restart r = Restart::permanent) {
  return {{"syncer", r, 1.0}, {"island-0", r, 1.0}, {"island-1", r, 1.0}};
}
SupervisorFlags flags(Strategy s) {
  SupervisorFlags f;
  f.strategy = s;
  return f;
}
}  // namespace

BOOST_AUTO_TEST_CASE(one_for_one_restarts_only_the_crashed_child) {
  SupervisorPolicy p(flags(Strategy::one_for_one), three());
  auto d = p.on_exit(1, true, 0.0);
  BOOST_TEST(d.action == SupervisorDecision::restart);
  BOOST_TEST(d.stop.empty());
  BOOST_TEST(d.start == V{1}, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(one_for_all_stops_siblings_in_reverse_and_restarts_all_in_order) {
  SupervisorPolicy p(flags(Strategy::one_for_all), three());
  auto d = p.on_exit(1, true, 0.0);
  BOOST_TEST(d.stop == (V{2, 0}), boost::test_tools::per_element());
  BOOST_TEST(d.start == (V{0, 1, 2}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(rest_for_one_restarts_the_child_and_those_started_after_it) {
  SupervisorPolicy p(flags(Strategy::rest_for_one), three());
  auto d = p.on_exit(0, true, 0.0);
  BOOST_TEST(d.stop == (V{2, 1}), boost::test_tools::per_element());
  BOOST_TEST(d.start == (V{0, 1, 2}), boost::test_tools::per_element());
  d = p.on_exit(2, true, 10.0);
  BOOST_TEST(d.stop.empty());
  BOOST_TEST(d.start == V{2}, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(transient_child_is_restarted_only_after_an_abnormal_exit) {
  SupervisorPolicy p(flags(Strategy::one_for_one), three(Restart::transient));
  BOOST_TEST(p.on_exit(1, true, 0.0).action == SupervisorDecision::restart);
  auto d = p.on_exit(2, false, 1.0);
  BOOST_TEST(d.action == SupervisorDecision::ignore);
  BOOST_TEST(!p.active(2));
}

BOOST_AUTO_TEST_CASE(temporary_child_is_never_restarted_even_by_a_sibling) {
  std::vector<ChildSpec> c{{"a", Restart::permanent, 1}, {"probe", Restart::temporary, 1}, {"b", Restart::permanent, 1}};
  SupervisorPolicy p(flags(Strategy::one_for_all), c);
  auto d = p.on_exit(0, true, 0.0);
  BOOST_TEST(d.start == (V{0, 2}), boost::test_tools::per_element());
  BOOST_TEST(d.remove == V{1}, boost::test_tools::per_element());
  BOOST_TEST(!p.active(1));
  BOOST_TEST(p.shutdown_order() == (V{2, 0}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(intensity_exceeded_escalates_and_stops_every_child) {
  auto f = flags(Strategy::one_for_one);
  f.intensity = 2;
  f.period_s = 10.0;
  SupervisorPolicy p(f, three());
  BOOST_TEST(p.on_exit(1, true, 0.0).action == SupervisorDecision::restart);
  BOOST_TEST(p.on_exit(1, true, 1.0).action == SupervisorDecision::restart);
  auto d = p.on_exit(2, true, 2.0);  // third restart within 10 s
  BOOST_TEST(d.action == SupervisorDecision::escalate);
  BOOST_TEST(d.stop == (V{1, 0}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(restarts_outside_the_window_do_not_count) {
  auto f = flags(Strategy::one_for_one);
  f.intensity = 1;
  f.period_s = 5.0;
  SupervisorPolicy p(f, three());
  BOOST_TEST(p.on_exit(1, true, 0.0).action == SupervisorDecision::restart);
  BOOST_TEST(p.on_exit(1, true, 5.0).action == SupervisorDecision::restart);  // the first left the window
  BOOST_TEST(p.on_exit(1, true, 6.0).action == SupervisorDecision::escalate);
}

BOOST_AUTO_TEST_CASE(back_off_doubles_per_recent_restart_and_is_capped) {
  auto f = flags(Strategy::one_for_one);
  f.intensity = 100;
  f.period_s = 100.0;
  f.backoff_initial_s = 0.1;
  f.backoff_factor = 2.0;
  f.backoff_max_s = 0.5;
  SupervisorPolicy p(f, three());
  BOOST_TEST(p.on_exit(1, true, 0.0).delay_s == 0.1);
  BOOST_TEST(p.on_exit(1, true, 1.0).delay_s == 0.2);
  BOOST_TEST(p.on_exit(1, true, 2.0).delay_s == 0.4);
  BOOST_TEST(p.on_exit(1, true, 3.0).delay_s == 0.5);
  BOOST_TEST(p.on_exit(2, true, 4.0).delay_s == 0.1);  // per child
  BOOST_TEST(p.on_exit(1, true, 200.0).delay_s == 0.1);  // calm again after a quiet period
}

BOOST_AUTO_TEST_CASE(child_specs_are_validated_up_front) {
  std::vector<ChildSpec> dup{{"a", Restart::permanent, 1}, {"a", Restart::permanent, 1}};
  BOOST_CHECK_THROW(SupervisorPolicy(SupervisorFlags{}, dup), std::invalid_argument);
  auto f = SupervisorFlags{};
  f.period_s = 0;
  BOOST_TEST(validate(f, {}).front().find("supervision.period_s") == 0u);
  BOOST_CHECK_THROW(parse_strategy("one_for_some"), std::invalid_argument);
  BOOST_TEST(std::string(to_string(parse_restart("transient"))) == "transient");
}
