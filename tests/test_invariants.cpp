// The run's invariants checker (invariants.hpp) on event sequences written by hand: each
// invariant holds on a sequence that keeps it, and a sequence that breaks it is caught, naming it.
#define BOOST_TEST_MODULE invariants
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "diloco/codec.hpp"
#include "diloco/invariants.hpp"
#include "diloco/model.hpp"

using namespace diloco;
using Kind = Violation::Kind;

namespace {

// 3 islands of 2 chips, 2 fragments, K = 2; a killed unit may take 1 s past its repair time.
InvariantSettings settings() {
  InvariantSettings s;
  s.islands = 3;
  s.fragments = 2;
  s.quorum = 2;
  s.chips = {2, 2, 2};
  s.repair_allowance_s = 1.0;
  return s;
}

Event commit(double at, int fragment, std::uint64_t round, int contributions, int live, bool flush = false) {
  std::vector<int> who;
  for (int i = 0; i < contributions; ++i) who.push_back(i);
  auto e = Event::committed(at, round, fragment, contributions, who);
  e.contributions = contributions, e.live = live, e.flush = flush;
  return e;
}

Event restore(double at, std::vector<std::uint64_t> rounds) {
  auto e = Event::restored(at, rounds.empty() ? 0 : *std::min_element(rounds.begin(), rounds.end()), "from the last snapshot");
  e.rounds = std::move(rounds);
  return e;
}

Event heal(double at, int island, std::uint64_t mine, std::uint64_t global) {
  auto e = Event::healed(at, island, 2, 3, 10, false);
  e.digest = mine, e.global_digest = global;
  return e;
}

Event fault(double at, FaultKind k, int island, int chip, double duration_s) {
  return Event::fault_fired(at, k, island, chip, 5, "kill " + std::string(name_of(k)), duration_s);
}

// Only violations of kind `k`, exactly `n` of them.
void only(const Invariants& inv, Kind k, std::size_t n) {
  BOOST_TEST(inv.count(k) == n);
  BOOST_TEST(inv.violations().size() == n);
  for (const auto& v : inv.violations()) {
    BOOST_TEST_MESSAGE(to_string(v.kind) << " at " << v.at << ": " << v.what);
    BOOST_TEST(!v.what.empty());
  }
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_clean_run_keeps_every_invariant) {
  Invariants inv(settings());
  for (int i = 0; i < 3; ++i) inv.on(heal(0.0, i, 42, 42));
  for (std::uint64_t r = 1; r <= 3; ++r)
    for (int p = 0; p < 2; ++p) inv.on(commit(r, p, r, 3, 3));
  inv.on(Event::stepped(3.5, 0, 9, 2, 1.0));
  GoodputMeter::Report g;
  g.provisioned_chip_s = 60.0, g.useful_chip_s = 30.0, g.lost_failure_chip_s = 5.0, g.lost_stale_chip_s = 2.0;
  g.in_flight_chip_s = 3.0, g.stepped_chip_s = 40.0;
  inv.goodput(g, 10.0);
  inv.end(10.0);
  BOOST_TEST(inv.ok());
}

BOOST_AUTO_TEST_CASE(a_round_that_does_not_go_up_is_caught) {
  Invariants inv(settings());
  inv.on(commit(1.0, 0, 1, 2, 3));
  inv.on(commit(2.0, 0, 2, 2, 3));
  inv.on(commit(2.0, 1, 1, 2, 3));  // another fragment has its own rounds
  BOOST_TEST(inv.ok());
  inv.on(commit(3.0, 0, 2, 2, 3));  // round 2 again
  only(inv, Kind::rounds, 1);
  BOOST_TEST(inv.violations()[0].at == 3.0);
}

BOOST_AUTO_TEST_CASE(a_syncer_restored_at_its_last_commit_goes_on_from_there) {
  Invariants inv(settings());
  inv.on(commit(1.0, 0, 1, 2, 3));
  inv.on(commit(1.0, 1, 1, 2, 3));
  inv.on(commit(2.0, 0, 2, 2, 3));
  inv.on(fault(2.5, FaultKind::syncer, -1, -1, 0.0));
  inv.on(restore(2.6, {2, 1}));  // a new life from the last commit
  inv.on(commit(3.0, 0, 3, 2, 3));
  inv.on(commit(3.0, 1, 2, 2, 3));
  inv.end(10.0);
  BOOST_TEST(inv.ok());
}

BOOST_AUTO_TEST_CASE(a_restore_past_the_last_commit_is_caught) {
  Invariants inv(settings());
  inv.on(commit(1.0, 0, 1, 2, 3));
  inv.on(commit(1.0, 1, 1, 2, 3));
  inv.on(restore(2.0, {1, 5}));  // fragment 1 never reached round 5
  only(inv, Kind::rounds, 1);
}

BOOST_AUTO_TEST_CASE(a_restored_syncer_that_repeats_a_round_of_its_new_life_is_caught) {
  Invariants inv(settings());
  inv.on(commit(1.0, 0, 1, 2, 3));
  inv.on(commit(2.0, 0, 2, 2, 3));
  inv.on(restore(3.0, {1, 0}));  // an older snapshot: allowed, rounds start over from it
  inv.on(commit(4.0, 0, 2, 2, 3));
  BOOST_TEST(inv.ok());
  inv.on(commit(5.0, 0, 2, 2, 3));  // but within this life they only go up
  only(inv, Kind::rounds, 1);
}

BOOST_AUTO_TEST_CASE(a_first_restore_of_a_process_sets_where_rounds_start) {
  Invariants inv(settings());
  inv.on(restore(0.0, {7, 6}));  // a syncer process resumed from its state file
  inv.on(commit(1.0, 1, 7, 2, 3));
  BOOST_TEST(inv.ok());
}

BOOST_AUTO_TEST_CASE(a_commit_below_the_quorum_is_caught_unless_it_is_a_final_flush) {
  Invariants inv(settings());
  inv.on(commit(1.0, 0, 1, 2, 3));  // K = 2
  inv.on(commit(2.0, 0, 2, 1, 1));  // one island left alive: min(K, live) = 1
  inv.on(commit(3.0, 0, 3, 1, 3, /*flush=*/true));
  BOOST_TEST(inv.ok());
  inv.on(commit(4.0, 0, 4, 1, 3));
  only(inv, Kind::quorum, 1);
}

BOOST_AUTO_TEST_CASE(a_merged_frame_that_was_refused_is_caught) {
  Invariants inv(settings());
  const std::vector<std::byte> good(16, std::byte{1}), bad(16, std::byte{2});
  auto refused = Event::refused(1.0, "syncer: fragment 0 of island 1: non-finite values", "non_finite");
  refused.digest = frame_digest(bad);
  inv.on(refused);
  auto c = commit(2.0, 0, 1, 2, 3);
  c.frames = {frame_digest(good), frame_digest(good)};
  inv.on(c);
  BOOST_TEST(inv.ok());
  c = commit(3.0, 0, 2, 2, 3);
  c.frames = {frame_digest(good), frame_digest(bad)};
  inv.on(c);
  only(inv, Kind::refused_frame, 1);
  BOOST_TEST(inv.violations()[0].what.find("island 1") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(frame_digests_tell_frames_apart_and_are_never_zero) {
  std::vector<std::byte> a(64, std::byte{0}), b = a;
  b[63] = std::byte{1};
  BOOST_TEST(frame_digest(a) != frame_digest(b));
  BOOST_TEST(frame_digest(a) == frame_digest(std::vector<std::byte>(64, std::byte{0})));
  BOOST_TEST(frame_digest({}) != 0u);
}

BOOST_AUTO_TEST_CASE(a_healed_island_that_differs_from_the_global_fragments_is_caught) {
  Invariants inv(settings());
  inv.on(heal(1.0, 0, 7, 7));
  auto rejoin = Event::healed(1.5, 1, 1, 0, 4, true);  // keeps its own progress: not compared
  rejoin.digest = 1, rejoin.global_digest = 2;
  inv.on(rejoin);
  BOOST_TEST(inv.ok());
  inv.on(heal(2.0, 1, 7, 8));
  only(inv, Kind::heal, 1);
}

BOOST_AUTO_TEST_CASE(heal_digests_match_exactly_when_the_island_holds_the_reply) {
  ModelConfig mc;
  mc.kind = "mlp";
  mc.seq_len = 8, mc.n_embd = 8, mc.hidden = 16, mc.context = 2;
  auto model = make_model(mc);
  const auto plan = FragmentPlan::make("strided", model->layout(), 2);
  std::vector<float> global(model->layout().size());
  for (std::size_t j = 0; j < global.size(); ++j) global[j] = 0.01f * static_cast<float>(j % 97);
  JoinReply reply;
  for (int p = 0; p < plan.count(); ++p) {
    FragmentMessage m;
    m.header.index = static_cast<std::uint32_t>(p);
    std::vector<float> v(plan.size(p));
    plan.gather<float>(p, global, v);
    m.data = encode(CodecParams{}, v).value();
    reply.fragments.push_back(std::move(m));
  }
  auto d = heal_digests(plan, global, reply);
  BOOST_TEST(d.island == d.global);
  auto off = global;
  off.back() = std::nextafter(off.back(), 1e9f);  // one value one ulp away
  d = heal_digests(plan, off, reply);
  BOOST_TEST(d.island != d.global);
  reply.fragments.pop_back();  // a fragment the island was never given
  d = heal_digests(plan, global, reply);
  BOOST_TEST(d.island != d.global);
}

BOOST_AUTO_TEST_CASE(non_finite_global_fragments_and_diverged_units_are_caught) {
  Invariants inv(settings());
  auto c = commit(1.0, 0, 1, 2, 3);
  c.finite = false;
  inv.on(c);
  inv.on(Event::diverged_state(2.0, 1, -1, 12, "island 1 diverged: loss is nan"));
  only(inv, Kind::non_finite, 2);
  BOOST_TEST(inv.violations()[1].what.find("island 1") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(goodput_that_does_not_add_up_is_caught) {
  GoodputMeter::Report g;
  g.provisioned_chip_s = 60.0, g.useful_chip_s = 30.0, g.lost_failure_chip_s = 5.0, g.stepped_chip_s = 40.0;
  {
    Invariants inv(settings());
    inv.goodput(g, 10.0);  // 5 chip-seconds of steps went nowhere
    only(inv, Kind::goodput, 1);
  }
  {
    Invariants inv(settings());
    auto more = g;
    more.in_flight_chip_s = 5.0, more.provisioned_chip_s = 39.0;  // adds up, but more than provisioned
    inv.goodput(more, 10.0);
    only(inv, Kind::goodput, 1);
  }
  {
    Invariants inv(settings());
    auto nan = g;
    nan.in_flight_chip_s = 5.0, nan.useful_chip_s = std::numeric_limits<double>::quiet_NaN();
    inv.goodput(nan, 10.0);
    BOOST_TEST(inv.count(Kind::goodput) >= 1u);
  }
}

BOOST_AUTO_TEST_CASE(the_meters_own_figures_add_up) {
  GoodputMeter m(2, 2, 2, 1, 1.0, 0.0);
  m.step(0, 2, 1.0);
  m.step(1, 1, 2.0);
  m.sent(0, 0);
  m.sent(1, 1);
  m.merged(0, 0);
  m.dropped(1, 1);
  m.island_lost(1);
  m.step(0, 2, 0.5);
  Invariants inv(settings());
  inv.goodput(m.report(5.0), 5.0);
  BOOST_TEST(inv.ok());
  BOOST_TEST(m.report(5.0).stepped_chip_s == 5.0);
}

BOOST_AUTO_TEST_CASE(every_kill_repaired_or_cut_short_by_the_end_keeps_the_repair_invariant) {
  Invariants inv(settings());
  inv.on(fault(1.0, FaultKind::chip, 0, 1, 0.5));
  inv.on(Event::stepped(1.2, 0, 6, 1, 1.0));  // the chip still down
  inv.on(Event::stepped(2.0, 0, 7, 2, 1.0));  // back: all chips stepped
  inv.on(fault(3.0, FaultKind::island, 1, -1, 1.0));
  inv.on(heal(4.5, 1, 9, 9));
  inv.on(fault(5.0, FaultKind::syncer, -1, -1, 0.0));
  inv.on(restore(5.1, {0, 0}));
  inv.on(fault(6.0, FaultKind::straggle, 2, -1, 100.0));  // a slow-down ends by the clock
  inv.on(fault(7.0, FaultKind::island, 2, -1, 0.0));
  inv.on(Event::island_done(7.5, 2, 18));  // island 2's run ended before it came back
  inv.on(fault(8.0, FaultKind::chip, 0, 0, 5.0));  // the run ends before this repair is due
  inv.end(9.0);
  BOOST_TEST(inv.ok());
}

BOOST_AUTO_TEST_CASE(a_kill_never_repaired_while_the_run_went_on_is_caught) {
  Invariants inv(settings());
  inv.on(fault(1.0, FaultKind::island, 1, -1, 2.0));
  inv.on(fault(1.0, FaultKind::chip, 0, 1, 0.0));
  inv.on(Event::stepped(1.5, 0, 6, 1, 1.0));  // island 0 steps on without chip 1, forever
  inv.on(fault(2.0, FaultKind::syncer, -1, -1, 0.0));
  inv.end(10.0);  // due back by 4, 2 and 3 s
  only(inv, Kind::unrepaired, 3);
  BOOST_TEST(inv.violations()[0].what.find("kill island") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_process_holding_part_of_the_run_judges_only_the_repairs_it_sees) {
  // A site fires a step-triggered syncer kill but never sees the syncer's restore (that is in
  // the syncer's process); the syncer's process never sees a chip's or an island's return.
  auto unrepaired = [](bool syncer, bool islands) {
    Invariants inv(settings());
    inv.on(fault(1.0, FaultKind::island, 1, -1, 2.0));
    inv.on(fault(2.0, FaultKind::syncer, -1, -1, 0.0));
    inv.end(10.0, syncer, islands);
    return inv.count(Kind::unrepaired);
  };
  BOOST_TEST(unrepaired(true, true) == 2u);   // the whole run
  BOOST_TEST(unrepaired(false, true) == 1u);  // a site: the island's kill only
  BOOST_TEST(unrepaired(true, false) == 1u);  // the syncer: its own kill only
}
