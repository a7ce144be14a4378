// The supervisor actor on CAF's deterministic test coordinator: crashes are restarted by
// strategy, intensity escalates to the parent, shutdown stops children in reverse order.
#define BOOST_TEST_MODULE supervisor_actor
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstdint>
#include <limits>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/atom.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/exit_reason.hpp>
#include <caf/scheduler/test_coordinator.hpp>
#include <caf/send.hpp>

#include "diloco/actors/supervisor.hpp"
#include "diloco/limits.hpp"

#include "../actors/detail.hpp"  // micros(): the ticks of every delayed send

using namespace diloco;
using namespace diloco::actors;

namespace {

// A child that answers ints, and finishes normally on "done".
caf::behavior worker(caf::event_based_actor* self) {
  return {[](int x) { return x; }, [self](const std::string& s) { if (s == "done") self->quit(); }};
}

// An injected crash, as a fault injector delivers it.
void crash(const caf::actor& a) { exit_signal(a, caf::make_error(caf::sec::runtime_error, "injected fault")); }

Child worker_child(std::string id, Restart r = Restart::permanent) {
  return {{std::move(id), r, 1.0}, [](caf::event_based_actor* sup) { return sup->spawn(worker); }};
}

struct Tree {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  caf::scheduler::test_coordinator* sched = nullptr;
  std::vector<SupervisionEvent> events;

  Tree() {
    cfg.set("scheduler.policy", caf::atom("testing"));
    sys = std::make_unique<caf::actor_system>(cfg);
    sched = &dynamic_cast<caf::scheduler::test_coordinator&>(sys->scheduler());
  }
  EventSink sink() {
    return [this](const SupervisionEvent& e) { events.push_back(e); };
  }
  // Runs every message and every timer (back-off delays) until the system is quiet.
  void settle() {
    for (int i = 0; i < 1000; ++i) {
      sched->run();
      if (!sched->has_pending_timeout()) return;
      sched->trigger_timeout();
    }
    BOOST_FAIL("the system did not settle");
  }
  caf::actor latest(const std::string& child) const {
    caf::actor a;
    for (const auto& e : events)
      if (e.kind == SupervisionEvent::started && e.child == child) a = e.handle;
    return a;
  }
  int count(SupervisionEvent::Kind k, const std::string& child, const std::string& sup = {}) const {
    int n = 0;
    for (const auto& e : events) n += e.kind == k && e.child == child && (sup.empty() || e.supervisor == sup);
    return n;
  }
};

SupervisorFlags flags(Strategy s, int intensity = 5) {
  SupervisorFlags f;
  f.strategy = s;
  f.intensity = intensity;
  f.period_s = 60.0;
  return f;
}

}  // namespace

BOOST_AUTO_TEST_CASE(crashed_child_restarts_only_that_child) {
  Tree t;
  auto root = spawn_supervisor(*t.sys, "island-0", flags(Strategy::one_for_one),
                               {worker_child("chip-0"), worker_child("chip-1"), worker_child("chip-2")}, t.sink());
  t.settle();
  const auto before0 = t.latest("chip-0"), before1 = t.latest("chip-1"), before2 = t.latest("chip-2");
  BOOST_REQUIRE(before1);
  crash(before1);
  t.settle();
  BOOST_TEST(t.count(SupervisionEvent::exited, "chip-1") == 1);
  BOOST_TEST(t.count(SupervisionEvent::restarting, "chip-1") == 1);
  BOOST_TEST(t.count(SupervisionEvent::started, "chip-1") == 2);
  BOOST_TEST((t.latest("chip-1") != before1));
  BOOST_TEST((t.latest("chip-0") == before0));
  BOOST_TEST((t.latest("chip-2") == before2));
  caf::anon_send_exit(root, caf::exit_reason::user_shutdown);
  t.settle();
}

BOOST_AUTO_TEST_CASE(one_for_all_restarts_every_child_after_one_crash) {
  Tree t;
  auto root = spawn_supervisor(*t.sys, "island-0", flags(Strategy::one_for_all),
                               {worker_child("island"), worker_child("chip-0"), worker_child("chip-1")}, t.sink());
  t.settle();
  crash(t.latest("chip-0"));
  t.settle();
  for (auto id : {"island", "chip-0", "chip-1"}) BOOST_TEST(t.count(SupervisionEvent::started, id) == 2);
  BOOST_TEST(t.count(SupervisionEvent::stopped, "island") == 1);
  BOOST_TEST(t.count(SupervisionEvent::stopped, "chip-1") == 1);
  caf::anon_send_exit(root, caf::exit_reason::user_shutdown);
  t.settle();
}

BOOST_AUTO_TEST_CASE(rest_for_one_restarts_the_crashed_child_and_those_started_after_it) {
  Tree t;
  auto root = spawn_supervisor(*t.sys, "island-0", flags(Strategy::rest_for_one),
                               {worker_child("island"), worker_child("chip-0"), worker_child("chip-1")}, t.sink());
  t.settle();
  crash(t.latest("chip-0"));
  t.settle();
  BOOST_TEST(t.count(SupervisionEvent::started, "island") == 1);  // started before chip-0: untouched
  BOOST_TEST(t.count(SupervisionEvent::started, "chip-0") == 2);
  BOOST_TEST(t.count(SupervisionEvent::started, "chip-1") == 2);  // started after it: restarted too
  BOOST_TEST(t.count(SupervisionEvent::stopped, "chip-1") == 1);
  BOOST_TEST(t.count(SupervisionEvent::stopped, "island") == 0);
  caf::anon_send_exit(root, caf::exit_reason::user_shutdown);
  t.settle();
}

BOOST_AUTO_TEST_CASE(transient_child_that_finishes_normally_is_not_restarted) {
  Tree t;
  auto root = spawn_supervisor(*t.sys, "sup", flags(Strategy::one_for_one),
                               {worker_child("job", Restart::transient)}, t.sink());
  t.settle();
  caf::anon_send(t.latest("job"), std::string("done"));
  t.settle();
  BOOST_TEST(t.count(SupervisionEvent::started, "job") == 1);
  BOOST_TEST(t.count(SupervisionEvent::removed, "job") == 1);
  caf::anon_send_exit(root, caf::exit_reason::user_shutdown);
  t.settle();
}

BOOST_AUTO_TEST_CASE(island_supervisor_past_its_intensity_fails_and_root_restarts_it) {
  Tree t;
  auto island = supervisor_child("island-0", flags(Strategy::one_for_one, /*intensity=*/1), {worker_child("chip-0")},
                                 t.sink());
  auto root = spawn_supervisor(*t.sys, "root", flags(Strategy::one_for_one),
                               {worker_child("syncer"), Child{{"island-0", Restart::permanent, 5.0}, island}}, t.sink());
  t.settle();
  const auto syncer = t.latest("syncer");
  crash(t.latest("chip-0"));  // restart 1: allowed
  t.settle();
  crash(t.latest("chip-0"));  // restart 2: over the intensity
  t.settle();
  int escalations = 0;
  for (const auto& e : t.events) escalations += e.kind == SupervisionEvent::escalated && e.supervisor == "island-0";
  BOOST_TEST(escalations == 1);
  BOOST_TEST(t.count(SupervisionEvent::exited, "island-0", "root") == 1);
  BOOST_TEST(t.count(SupervisionEvent::started, "island-0", "root") == 2);
  BOOST_TEST(t.count(SupervisionEvent::started, "chip-0") == 3);  // first, restart, fresh tree
  BOOST_TEST((t.latest("syncer") == syncer));                     // nobody else stopped
  caf::anon_send_exit(root, caf::exit_reason::user_shutdown);
  t.settle();
}

BOOST_AUTO_TEST_CASE(a_killed_child_is_restarted_without_taking_its_supervisor_down) {
  Tree t;
  auto root = spawn_supervisor(*t.sys, "island-0", flags(Strategy::one_for_one), {worker_child("chip-0")}, t.sink());
  t.settle();
  caf::anon_send_exit(t.latest("chip-0"), caf::exit_reason::kill);  // untrappable
  t.settle();
  BOOST_TEST(t.count(SupervisionEvent::started, "chip-0") == 2);
  caf::anon_send_exit(root, caf::exit_reason::user_shutdown);
  t.settle();
}

BOOST_AUTO_TEST_CASE(shutdown_stops_children_in_reverse_start_order) {
  Tree t;
  auto root = spawn_supervisor(*t.sys, "root", flags(Strategy::one_for_one),
                               {worker_child("a"), worker_child("b"), worker_child("c")}, t.sink());
  t.settle();
  caf::anon_send_exit(root, caf::exit_reason::user_shutdown);
  t.settle();
  std::vector<std::string> order;
  for (const auto& e : t.events)
    if (e.kind == SupervisionEvent::stopped) order.push_back(e.child);
  BOOST_TEST(order == (std::vector<std::string>{"c", "b", "a"}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(a_delay_of_any_double_becomes_a_valid_timer) {
  using diloco::actors::detail::micros;
  BOOST_TEST(micros(0.05).count() == 50000);
  BOOST_TEST(micros(-1.0).count() == 0);
  BOOST_TEST(micros(std::nan("")).count() == 0);
  // 1e300 s overflowed int64 (undefined; in practice a negative delay that fired at once).
  const auto longest = micros(1e300).count();
  BOOST_TEST(longest == micros(std::numeric_limits<double>::infinity()).count());
  BOOST_TEST(longest > micros(diloco::kMaxDurationS).count());
  BOOST_TEST(longest < std::numeric_limits<std::int64_t>::max() / 2000);  // now + delay fits the clock's ns
}
