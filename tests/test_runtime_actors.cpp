// The Decoupled DiLoCo actor runtime on CAF's deterministic test coordinator: chips, islands and
// the syncer crash by injected faults and the run goes on (DESIGN.md §4). No sleeping.
#define BOOST_TEST_MODULE runtime_actors
#include <boost/test/unit_test.hpp>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/atom.hpp>
#include <caf/exit_reason.hpp>
#include <caf/mailbox_element.hpp>
#include <caf/message_view.hpp>
#include <caf/scheduled_actor.hpp>
#include <caf/send.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <tuple>

#include "diloco/actors/runtime.hpp"
#include "diloco/loops.hpp"
#include "diloco/syncer_core.hpp"
#include "coordinated.hpp"

using namespace diloco;
using namespace diloco::actors;

namespace {

RunConfig small_config(int islands, int chips, int K) {
  RunConfig c;
  c.model.kind = "mlp";
  c.model.seq_len = 8;
  c.model.n_embd = 8;
  c.model.hidden = 16;
  c.model.context = 2;
  c.data.eval_tokens = 4096;
  c.train.mode = TrainMode::decoupled;
  c.train.islands = islands;
  c.train.steps = 18;
  c.train.batch = 2;
  c.train.H = 3;
  c.train.eval_windows = 2;
  c.inner.lr = 3e-3f;
  c.inner.warmup_steps = 2;
  c.islands.chips = chips;
  c.quorum.min_islands = K;
  c.quorum.grace = GraceRule::none;
  c.supervision.backoff_initial_s = 0.0;
  c.supervision.backoff_max_s = 0.0;
  c.syncer.snapshot_every = 1;
  return c;
}

FaultSpec step_fault(const std::string& kill, int island, int chip, long at_step) {
  FaultSpec f;
  f.kill = *choice_of<FaultKind>(kill);
  f.island = island;
  f.chip = chip;
  f.at_step = at_step;
  return f;
}

struct World : diloco::testing::Coordinated {
  std::shared_ptr<Runtime> rt;
  std::vector<Event> events;
  std::vector<SupervisionEvent> sup;
  caf::actor root;

  std::function<void(const Event&)> hook;  // sees every event as it happens
  /// The run is meant to break an invariant (it diverges): the test checks which itself.
  bool breaks_invariants = false;

  /// `before` runs on the Runtime before anything is spawned; `what` says which units run.
  explicit World(RunConfig c, std::function<void(Runtime&)> before = {}, SpawnSet what = {}) {
    BOOST_REQUIRE(validate(c).empty());
    rt = std::make_shared<Runtime>(std::move(c), [this](const Event& e) {
      events.push_back(e);
      if (hook) hook(e);
    });
    if (before) before(*rt);
    root = spawn_runtime(*sys, rt, [this](const SupervisionEvent& e) { sup.push_back(e); }, std::move(what));
  }
  ~World() {
    // Every run is checked: it ends keeping every invariant (diloco/invariants.hpp).
    if (!breaks_invariants)
      for (const auto& v : violations()) BOOST_ERROR("invariant broken (" << to_string(v.kind) << "): " << v.what);
    caf::anon_send_exit(root, caf::exit_reason::user_shutdown);
    settle(false);
  }
  /// The invariants the run broke, judged at its end (now) the first time this is asked.
  std::vector<Violation> violations() {
    if (!ended) ended = end_of_run(*rt);
    return *ended;
  }
  std::optional<std::vector<Violation>> ended;
  // Runs messages and timers until every island finished its steps (or nothing is left).
  void settle(bool require_done = true) {
    if (!require_done) Coordinated::settle();
    else if (!settle_until_done(*rt)) BOOST_FAIL("the run did not finish");
  }
  int started(const std::string& supervisor, const std::string& child) const {
    int n = 0;
    for (const auto& e : sup) n += e.kind == SupervisionEvent::started && e.supervisor == supervisor && e.child == child;
    return n;
  }
  std::vector<Event> of(Event::Kind k) const {
    std::vector<Event> out;
    for (const auto& e : events)
      if (e.kind == k) out.push_back(e);
    return out;
  }
  std::size_t index_of(Event::Kind k, int island = -1) const {
    for (std::size_t j = 0; j < events.size(); ++j)
      if (events[j].kind == k && (island < 0 || events[j].island == island)) return j;
    return events.size();
  }
};

// Commits of each fragment carry strictly increasing rounds and at least K contributions
// (fewer only in the final sync, once an island trained its budget and left the quorum).
void check_commits(const World& w, std::size_t from = 0, std::size_t to = SIZE_MAX) {
  std::map<int, std::uint64_t> last;
  bool trained = false;
  for (std::size_t j = from; j < std::min(to, w.events.size()); ++j) {
    const auto& e = w.events[j];
    if (e.kind == Event::Kind::step && w.rt->budget_spent(e.step)) trained = true;
    if (e.kind != Event::Kind::commit) continue;
    BOOST_TEST((e.merged >= w.rt->cfg.quorum.min_islands || trained));
    BOOST_TEST(e.round > last[e.fragment]);
    last[e.fragment] = e.round;
  }
}

}  // namespace

BOOST_AUTO_TEST_CASE(runtime_without_faults_trains_and_commits_every_round) {
  World w(small_config(2, 2, 2));
  w.settle();
  const auto commits = w.of(Event::Kind::commit);
  BOOST_TEST(commits.size() == 6u);  // 18 steps / H = 3, both islands in every round
  for (const auto& c : commits) BOOST_TEST(c.merged == 2);
  check_commits(w);
  BOOST_TEST(w.of(Event::Kind::rejected).empty());
  BOOST_TEST(w.rt->syncer.round() == 6u);
  for (const auto& s : w.of(Event::Kind::step)) BOOST_TEST(s.chips == 2);
}

BOOST_AUTO_TEST_CASE(crashed_chip_restarts_only_that_chip) {
  auto c = small_config(2, 2, 2);
  c.faults.push_back(step_fault("chip", 0, 1, 4));
  World w(c);
  w.settle();
  BOOST_TEST(w.of(Event::Kind::fault).size() == 1u);
  BOOST_TEST(w.started("island-0", "chip-1") == 2);
  BOOST_TEST(w.started("island-0", "chip-0") == 1);
  BOOST_TEST(w.started("island-0", "island") == 1);
  BOOST_TEST(w.started("island-1", "island") == 1);
  BOOST_TEST(w.started("island-1", "chip-1") == 1);
  BOOST_TEST(w.started("root", "syncer") == 1);
  // Island 0 finished step 5 with the surviving chip, and later steps had both again.
  bool short_step = false, full_after = false;
  for (const auto& s : w.of(Event::Kind::step)) {
    if (s.island != 0) continue;
    if (s.step == 5) short_step = s.chips == 1;
    if (s.step > 5 && s.chips == 2) full_after = true;
  }
  BOOST_TEST(short_step);
  BOOST_TEST(full_after);
  BOOST_TEST(w.of(Event::Kind::commit).size() == 6u);  // nobody noticed at the syncer
  check_commits(w);
}

BOOST_AUTO_TEST_CASE(island_killed_is_restarted_and_heals_while_others_keep_merging) {
  auto c = small_config(3, 1, 1);
  c.faults.push_back(step_fault("island", 1, 0, 7));
  c.supervision.backoff_initial_s = 0.5;  // island 1 stays down while the others run
  c.supervision.backoff_max_s = 0.5;
  World w(c);
  w.settle();
  BOOST_TEST(w.started("island-1", "island") == 2);
  BOOST_TEST(w.started("island-0", "island") == 1);
  BOOST_TEST(w.started("island-2", "island") == 1);
  const auto fault = w.index_of(Event::Kind::fault);
  std::size_t heal = w.events.size();
  for (std::size_t j = fault; j < w.events.size(); ++j)
    if (w.events[j].kind == Event::Kind::heal && w.events[j].island == 1) {
      heal = j;
      break;
    }
  BOOST_REQUIRE(heal < w.events.size());
  BOOST_TEST(w.events[heal].incarnation == 2);  // second incarnation
  // While island 1 was down the others kept merging, without it.
  int merged_meanwhile = 0;
  std::uint64_t round_at_heal = 0;
  for (std::size_t j = fault; j < heal; ++j)
    if (w.events[j].kind == Event::Kind::commit) {
      ++merged_meanwhile;
      for (int i : w.events[j].islands) BOOST_TEST(i != 1);
      round_at_heal = w.events[j].round;
    }
  BOOST_TEST(merged_meanwhile >= 4);
  // It healed to the current global round and contributed again afterwards.
  BOOST_TEST(w.events[heal].round == round_at_heal);
  bool merged_again = false;
  for (std::size_t j = heal; j < w.events.size(); ++j)
    if (w.events[j].kind == Event::Kind::commit)
      for (int i : w.events[j].islands) merged_again = merged_again || i == 1;
  BOOST_TEST(merged_again);
  BOOST_TEST(w.of(Event::Kind::rejected).empty());
  // The three islands started from the run's parameters: their first heals sent no values (their
  // requests named what they held). The restarted island, back on them, was sent every fragment
  // that moved since: all of them.
  BOOST_TEST(w.rt->syncer.heals_held.load() == 3u * static_cast<unsigned>(c.fragments.count));
  check_commits(w);
}

// ddp's parameter server killed mid-run comes back with its state (kept in memory) and every
// replica joins it again, whatever it was doing: before, a replica computing or awaiting the
// server's step when the directory still named the dead server waited for good.
BOOST_AUTO_TEST_CASE(ddp_server_killed_mid_run_is_joined_again_and_the_run_finishes) {
  auto c = small_config(2, 1, 2);
  c.train.mode = TrainMode::ddp;
  c.faults.push_back(step_fault("syncer", 0, 0, 7));
  World w(c);
  w.settle();
  BOOST_TEST(w.started("root", "syncer") == 2);
  BOOST_TEST(w.of(Event::Kind::restore).size() == 1u);
  for (int i = 0; i < 2; ++i) BOOST_TEST(w.rt->islands[static_cast<std::size_t>(i)].done.load());
  BOOST_TEST(w.rt->syncer.commits.load() == static_cast<std::uint64_t>(c.train.steps));  // every step, once
}

BOOST_AUTO_TEST_CASE(syncer_restarted_from_snapshot_and_islands_resend) {
  auto c = small_config(2, 1, 2);
  c.faults.push_back(step_fault("syncer", 0, 0, 7));
  World w(c);
  w.settle();
  BOOST_TEST(w.started("root", "syncer") == 2);
  BOOST_TEST(w.started("island-0", "island") == 1);  // islands kept running
  BOOST_TEST(w.started("island-1", "island") == 1);
  const auto fault = w.index_of(Event::Kind::fault);
  const auto restore = w.index_of(Event::Kind::restore);
  BOOST_REQUIRE(restore < w.events.size());
  BOOST_TEST(restore > fault);
  std::uint64_t before = 0;
  for (std::size_t j = 0; j < fault; ++j)
    if (w.events[j].kind == Event::Kind::commit) before = w.events[j].round;
  // No round lost beyond the snapshot interval (1 here: none at all).
  BOOST_TEST(w.events[restore].round + static_cast<std::uint64_t>(c.syncer.snapshot_every) >= before + 1);
  BOOST_TEST(w.events[restore].round >= before - 0);
  // Both islands re-joined the new syncer, kept their state and resent: rounds continue.
  int rejoins = 0;
  for (std::size_t j = restore; j < w.events.size(); ++j) rejoins += w.events[j].kind == Event::Kind::rejoin;
  BOOST_TEST(rejoins == 2);
  check_commits(w, restore);
  std::uint64_t last = 0;
  int after = 0;
  for (std::size_t j = restore; j < w.events.size(); ++j)
    if (w.events[j].kind == Event::Kind::commit) {
      ++after;
      last = w.events[j].round;
    }
  BOOST_TEST(after >= 2);
  BOOST_TEST(last > before);
  BOOST_TEST(w.of(Event::Kind::rejected).empty());
}

// The syncer is killed right after a commit, with no state file (snapshot_every = 0): the
// restarted syncer resumes from that commit, held in memory, with the same rounds and global
// parameters; no round is lost, none is applied twice, rounds only go up across the restart.
BOOST_AUTO_TEST_CASE(syncer_killed_right_after_a_commit_loses_no_round) {
  for (const char* outer : {"nesterov", "delayed_nesterov"}) {
    BOOST_TEST_CONTEXT("outer.kind " << outer) {
      auto c = small_config(2, 1, 2);
      c.fragments.count = 2;
      c.outer.kind = outer;
      c.syncer.snapshot_every = 0;
      World w(c);
      int commits = 0;
      std::vector<float> at_commit;           // global parameters as of the last commit
      std::map<int, std::uint64_t> rounds;    // per fragment: its round as of the last commit
      bool checked = false;
      w.hook = [&](const Event& e) {
        if (e.kind == Event::Kind::commit) {
          BOOST_TEST(e.round == rounds[e.fragment] + 1);  // monotonic, none lost, none repeated
          rounds[e.fragment] = e.round;
          at_commit = w.rt->syncer.global().first;
          if (++commits == 3) caf::anon_send_exit(w.rt->dir.syncer(), caf::exit_reason::kill);
        }
        if (e.kind == Event::Kind::restore) {
          std::uint64_t global = UINT64_MAX;
          for (auto& [p, r] : rounds) global = std::min(global, r);
          BOOST_TEST(e.round == global);
          BOOST_TEST(w.rt->syncer.global().first == at_commit);  // what the restarted syncer holds
          checked = true;
        }
      };
      w.settle();
      BOOST_TEST(w.started("root", "syncer") == 2);
      BOOST_TEST(checked);
      BOOST_TEST(commits > 3);  // and it committed on from there
      BOOST_TEST(w.of(Event::Kind::rejected).empty());
    }
  }
}

BOOST_AUTO_TEST_CASE(island_and_syncer_killed_together_both_come_back) {
  auto c = small_config(2, 1, 1);
  c.faults.push_back(step_fault("syncer", 1, 0, 5));  // island 1 kills the syncer, then itself
  c.faults.push_back(step_fault("island", 1, 0, 5));
  World w(c);
  w.settle();
  BOOST_TEST(w.started("root", "syncer") == 2);
  BOOST_TEST(w.started("island-1", "island") == 2);
  std::size_t heal = w.events.size();
  for (std::size_t j = w.index_of(Event::Kind::fault); j < w.events.size(); ++j)
    if (w.events[j].kind == Event::Kind::heal && w.events[j].island == 1) heal = j;
  BOOST_REQUIRE(heal < w.events.size());  // the second incarnation joined and healed
  BOOST_TEST(w.events[heal].incarnation == 2);
  check_commits(w, w.index_of(Event::Kind::restore));
}

namespace {

std::uint64_t fnv(std::uint64_t h, std::uint64_t x) {
  for (int b = 0; b < 8; ++b) h = (h ^ ((x >> (8 * b)) & 0xff)) * 1099511628211ull;
  return h;
}

// Hash of the event trace: same seed, same trace.
std::uint64_t trace_hash(const World& w) {
  std::uint64_t h = 1469598103934665603ull;
  for (const auto& e : w.events)
    for (auto x : {std::uint64_t(e.kind), std::uint64_t(e.island + 1), std::uint64_t(e.chip + 1), std::uint64_t(e.step),
                   e.round, std::uint64_t(e.fragment + 1), std::uint64_t(e.chips + e.merged + e.incarnation)})
      h = fnv(h, x);
  return h;
}

double eval_loss(const RunConfig& c, const std::vector<float>& params) {
  const auto corpus = Corpus::make(c.data);
  auto model = make_model(c.model);
  double s = 0.0;
  const auto batches = corpus.eval_batches(8, c.model.seq_len, 4);
  for (const auto& b : batches) s += model->loss(params, b);
  return s / static_cast<double>(batches.size());
}

RunConfig seeded_fault_config(std::uint64_t seed) {
  auto c = small_config(3, 2, 2);
  c.train.steps = 30;
  c.fragments.count = 2;
  c.fragments.tau = 1;
  c.train.seed = seed;
  c.data.seed = seed;
  c.syncer.snapshot_every = 2;
  c.merge.max_staleness = 8;
  std::uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  auto next = [&x](std::uint64_t n) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    return x % n;
  };
  const char* kinds[] = {"chip", "island", "syncer"};
  for (int k = 0; k < 3; ++k) {
    FaultSpec f;
    f.kill = *choice_of<FaultKind>(kinds[k]);  // one of each kind, random unit and moment
    f.island = static_cast<int>(next(3));
    f.chip = static_cast<int>(next(2));
    f.at_step = 2 + static_cast<long>(next(26));
    c.faults.push_back(f);
  }
  return c;
}

}  // namespace

// 20 seeds, each killing a random chip, a random island and the syncer at random steps of a
// short run; checked after every event: rounds up by one per commit (across the syncer's restart), every
// commit with ≥ K contributions, global parameters finite, loss below its start, and the same
// seed gives the same event trace (hash printed).
BOOST_AUTO_TEST_CASE(seeded_fault_runs_keep_every_invariant) {
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    BOOST_TEST_CONTEXT("seed " << seed) {
      const auto cfg = seeded_fault_config(seed);
      std::uint64_t hash = 0;
      for (int rep = 0; rep < 2; ++rep) {
        World w(cfg);
        w.settle();
        BOOST_TEST(w.of(Event::Kind::fault).size() == 3u);
        // Rounds go up by one per commit across the syncer's restart: it resumes from its last
        // commit (held in memory), so no round is lost and none applied twice.
        std::map<int, std::uint64_t> last;
        bool trained = false;  // an island trained its budget: the final sync may commit below K
        for (const auto& e : w.events) {
          if (e.kind == Event::Kind::step && e.step >= cfg.train.steps) trained = true;
          if (e.kind != Event::Kind::commit) continue;
          BOOST_TEST((e.merged >= cfg.quorum.min_islands || trained));
          BOOST_TEST(e.round == last[e.fragment] + 1);
          last[e.fragment] = e.round;
        }
        BOOST_TEST(w.of(Event::Kind::rejected).empty());
        const auto global = w.rt->syncer.global().first;
        bool finite = true;
        for (float v : global) finite = finite && std::isfinite(v);
        BOOST_TEST(finite);
        BOOST_TEST(w.rt->syncer.round() > 0u);
        BOOST_TEST(eval_loss(cfg, global) < eval_loss(cfg, w.rt->initial));
        const auto h = trace_hash(w);
        if (rep == 0) hash = h;
        else BOOST_TEST(h == hash);
        if (rep == 1) BOOST_TEST_MESSAGE("seed " << seed << ": " << w.events.size() << " events, trace hash " << std::hex << h);
      }
    }
  }
}

namespace {

// The synchronous modes on the actors against the reference loops (same model, data, seeds).
void check_matches_reference(const std::string& mode, int P, int tau) {
  auto c = small_config(2, 1, 2);
  c.train.mode = *choice_of<TrainMode>(mode);
  c.train.steps = 24;
  c.train.H = 6;
  c.train.batch = 4;
  c.fragments.count = P;
  c.fragments.tau = tau;
  c.quorum.tau = tau;
  const auto ref = run_reference(c);
  World w(c);
  w.settle();
  const auto got = w.rt->syncer.global().first;
  BOOST_REQUIRE_EQUAL(got.size(), ref.params.size());
  double worst = 0.0;
  for (std::size_t j = 0; j < got.size(); ++j) worst = std::max(worst, std::abs(double(got[j]) - double(ref.params[j])));
  BOOST_TEST_MESSAGE(mode << " P=" << P << " tau=" << tau << " on actors: max |actors - reference| = " << worst);
  BOOST_TEST(worst <= 1e-5);
  BOOST_TEST(w.rt->syncer.round() == static_cast<std::uint64_t>(c.train.steps / c.train.H));
}

}  // namespace

BOOST_AUTO_TEST_CASE(diloco_mode_on_actors_matches_reference_loop) { check_matches_reference("diloco", 1, 0); }
BOOST_AUTO_TEST_CASE(streaming_mode_on_actors_matches_reference_loop) { check_matches_reference("streaming", 2, 0); }
BOOST_AUTO_TEST_CASE(streaming_with_overlap_on_actors_matches_reference_loop) {
  check_matches_reference("streaming", 2, 2);
}

BOOST_AUTO_TEST_CASE(frames_cross_emulated_wan_links_and_rounds_still_commit) {
  auto c = small_config(2, 1, 2);
  c.wan.enabled = true;
  c.wan.bandwidth_mbps = 1.0;  // 125 kB/s: a frame of a few kB takes tens of ms
  c.wan.latency_ms = 50.0;
  c.wan.jitter_ms = 10.0;
  c.wan.loss = 0.1;
  World w(c);
  w.settle();
  w.settle(false);  // the islands are done; let the frames still on the links arrive
  const auto commits = w.of(Event::Kind::commit);
  BOOST_REQUIRE(!commits.empty());
  check_commits(w);
  BOOST_TEST(w.rt->syncer.round() > 0u);
  // Every frame went through a link (progress reports too, and resent losses count again).
  const auto links = w.rt->links.totals();
  BOOST_TEST(links.bytes > w.rt->tally().bytes_sent);
  // The first merge waited at least for a fragment to cross (latency) and come back.
  BOOST_TEST(commits.front().at >= 0.04);
  BOOST_TEST_MESSAGE("link bytes " << links.bytes << ", frame bytes " << w.rt->tally().bytes_sent
                                   << ", retransmissions " << links.retransmissions << ", last commit at "
                                   << commits.back().at << " s");
}

// With K = 1 each contribution commits on its own. Sent to every island, each commit crosses
// every down link; sent to its contributors (fragments.broadcast_to), one frame per
// contribution carries every commit since the island's last, so a down link carries about what
// its up link does. Frames that fall due while a link is busy wait for it and coalesce.
BOOST_AUTO_TEST_CASE(frames_to_contributors_keep_the_down_links_near_the_up_links) {
  std::map<std::string, std::pair<double, double>> carried;  // up, down bytes over all links
  for (const char* to : {"all", "contributors"}) {
    auto c = small_config(3, 1, 1);
    c.train.steps = 24;
    c.fragments.broadcast_to = *choice_of<BroadcastTo>(to);
    c.fragments.encoding = c.fragments.broadcast_encoding = "int8";
    c.wan.enabled = true;
    c.wan.bandwidth_mbps = 10.0;  // a frame of the model takes a few ms: links are busy at times
    c.wan.latency_ms = 20.0;
    c.islands.speed = {1.0, 0.8, 0.6};  // contributions arrive one by one
    c.islands.chip_flops = 1e7;
    World w(c, [](Runtime& rt) { rt.simulated = true; });
    w.settle();
    w.settle(false);
    check_commits(w);
    BOOST_TEST(w.of(Event::Kind::commit).size() >= 12u);
    // No island missed a frame of its stream (it would re-join), no contribution went stale.
    BOOST_TEST(w.of(Event::Kind::rejected).empty());
    BOOST_TEST(w.of(Event::Kind::rejoin).empty());
    BOOST_TEST(w.of(Event::Kind::dropped).empty());
    BOOST_TEST(w.rt->syncer.heals_held.load() == 3u * static_cast<unsigned>(c.fragments.count));  // no heal sent values
    auto& [up, down] = carried[to];
    for (const auto& l : w.rt->links.report()) up += static_cast<double>(l.up_bytes), down += static_cast<double>(l.down_bytes);
    BOOST_TEST_MESSAGE("broadcast_to = " << to << ": " << w.of(Event::Kind::commit).size() << " commits, up " << up
                                         << " B, down " << down << " B");
  }
  BOOST_TEST(carried["contributors"].second < 0.6 * carried["all"].second);
  // At most one frame down per contribution up: the three heals carried no values (the islands
  // held the run's start), so the down links carry no more than the up links.
  BOOST_TEST(carried["contributors"].second < 1.1 * carried["contributors"].first);
}

// A frame falls due at a commit but leaves once the island's down link is free: on a link fast
// enough every commit reaches every island in a frame of its own; on a slow one the commits that
// fall due while it is busy leave as one frame, and the islands hold the same rounds in the end.
BOOST_AUTO_TEST_CASE(frames_that_fall_due_while_a_link_is_busy_leave_as_one) {
  auto run = [](double mbps) {
    auto c = small_config(3, 1, 1);
    c.train.steps = 24;
    c.fragments.encoding = c.fragments.broadcast_encoding = "int8";
    c.wan.enabled = true;
    c.wan.bandwidth_mbps = mbps;
    c.wan.latency_ms = 20.0;
    c.islands.speed = {1.0, 0.8, 0.6};
    c.islands.chip_flops = 1e7;
    World w(c, [](Runtime& rt) { rt.simulated = true; });
    w.settle();
    w.settle(false);
    check_commits(w);
    BOOST_TEST(w.of(Event::Kind::rejoin).empty());  // no island missed a frame of its stream
    std::uint64_t down = 0;
    for (const auto& l : w.rt->links.report()) down += l.down_messages;
    const auto commits = w.of(Event::Kind::commit).size();
    BOOST_TEST_MESSAGE(mbps << " Mbit/s: " << commits << " commits, " << down << " frames down, "
                            << w.of(Event::Kind::join).size() << " joins, " << w.rt->syncer.bytes_down.load() << " B");
    return std::make_pair(commits, down);
  };
  const auto [fast_commits, fast_down] = run(1000.0);
  // A frame per commit and island, and 3 heals (the last commits find islands that finished gone).
  BOOST_TEST(fast_down + 3 >= 3 * fast_commits);
  const auto [slow_commits, slow_down] = run(0.2);
  BOOST_TEST(slow_commits > 0u);
  BOOST_TEST(slow_down < 3 * slow_commits);  // heals included: frames carried several commits
  BOOST_TEST(static_cast<double>(slow_down) / slow_commits < static_cast<double>(fast_down) / fast_commits);
}

BOOST_AUTO_TEST_CASE(ddp_mode_on_actors_matches_reference_loop) { check_matches_reference("ddp", 1, 0); }

namespace {

// ddp / diloco on links with latency: every step (ddp) or round (diloco) waits for the links,
// so the test coordinator's clock moves and faults at a time land inside the run.
RunConfig timed_config(const std::string& mode) {
  auto c = small_config(2, 2, 2);
  c.train.mode = *choice_of<TrainMode>(mode);
  c.train.steps = 24;
  c.wan.enabled = true;
  c.wan.bandwidth_mbps = 1000.0;
  c.wan.latency_ms = 10.0;  // a ddp step takes >= 20 ms, a diloco round too
  return c;
}

FaultSpec timed_fault(const std::string& kill, double at_s, double duration_s, int island = 1) {
  FaultSpec f;
  f.kill = *choice_of<FaultKind>(kill);
  f.island = island;
  f.at_step = 0;
  f.at_s = at_s;
  f.duration_s = duration_s;
  return f;
}

double since_start(const World& w, const Event& e) { return e.at - w.rt->t0.load(); }

}  // namespace

BOOST_AUTO_TEST_CASE(ddp_stalls_while_a_killed_island_is_under_repair) {
  auto c = timed_config("ddp");
  c.faults.push_back(timed_fault("island", 0.1, 0.25));
  World w(c);
  w.settle();
  const auto faults = w.of(Event::Kind::fault);
  BOOST_REQUIRE_EQUAL(faults.size(), 1u);
  const double at = since_start(w, faults[0]);
  BOOST_TEST(at >= 0.1);
  BOOST_TEST(at < 0.12);
  // No step of the synchronous run commits while island 1 is down; it does once it is back.
  int during = 0, after = 0;
  for (const auto& e : w.of(Event::Kind::commit)) {
    const double t = since_start(w, e);
    during += t > at + 0.03 && t < at + 0.25;  // (the step in flight at the kill may still land)
    after += t >= at + 0.25;
  }
  BOOST_TEST(during == 0);
  BOOST_TEST(after > 0);
  BOOST_TEST(w.rt->syncer.round() == 8u);  // 24 steps / H = 3: every step was taken
  BOOST_TEST(w.started("island-1", "island") == 2);
}

BOOST_AUTO_TEST_CASE(a_partitioned_site_holds_its_frames_until_the_link_heals) {
  auto c = timed_config("diloco");
  auto f = timed_fault("partition", 0.05, 0.3);
  c.faults.push_back(f);
  c.faults.back().site = "island-0";
  World w(c);
  w.settle();
  w.settle(false);  // the last round's frames are still on the links
  // Synchronous rounds need island 0's outer gradient: nothing commits inside the window.
  const auto commits = w.of(Event::Kind::commit);
  BOOST_REQUIRE(!commits.empty());
  bool inside = false, after = false;
  for (const auto& e : commits) {
    const double t = since_start(w, e);
    inside = inside || (t > 0.05 + 0.03 && t < 0.35);
    after = after || t >= 0.35;
  }
  BOOST_TEST(!inside);
  BOOST_TEST(after);
  BOOST_TEST(w.rt->syncer.round() == 8u);
  check_commits(w);
}

BOOST_AUTO_TEST_CASE(chaos_schedule_replays_the_same_trace_for_the_same_seed) {
  auto run = [](std::uint64_t seed) {
    auto c = timed_config("diloco");
    c.train.steps = 30;
    c.chaos.enabled = true;
    c.chaos.seed = seed;
    c.chaos.chip_mtbf_s = 0.4;
    c.chaos.island_mtbf_s = 1.0;
    c.chaos.repair_s = 0.05;
    c.chaos.straggler_mtbf_s = 0.5;
    c.chaos.horizon_s = 2.0;
    World w(c);
    w.settle();
    w.settle(false);
    check_commits(w);
    BOOST_TEST(w.rt->syncer.round() == 10u);
    const auto g = w.rt->syncer.global().first;
    for (float x : g) BOOST_REQUIRE(std::isfinite(x));
    return std::make_tuple(schedule_hash(w.rt->schedule), trace_hash(w), w.of(Event::Kind::fault).size());
  };
  const auto a = run(7), b = run(7), other = run(8);
  BOOST_TEST(std::get<2>(a) > 0u);
  BOOST_TEST(std::get<0>(a) == std::get<0>(b));
  BOOST_TEST(std::get<1>(a) == std::get<1>(b));
  BOOST_TEST(std::get<0>(a) != std::get<0>(other));
  BOOST_TEST_MESSAGE("chaos seed 7: " << std::get<2>(a) << " faults, schedule " << std::hex << std::get<0>(a)
                                      << ", trace " << std::get<1>(a));
}

BOOST_AUTO_TEST_CASE(total_token_budget_ends_the_run_when_the_islands_together_trained_it) {
  auto c = small_config(3, 1, 2);
  c.train.budget = Budget::total_tokens;
  World w(c);
  w.settle();
  const std::uint64_t budget = 3ull * c.train.steps * c.train.batch * c.model.seq_len;
  BOOST_TEST(w.rt->tally().tokens >= budget);
  // At most one step of each island beyond the budget.
  BOOST_TEST(w.rt->tally().tokens < budget + 3ull * c.train.batch * c.model.seq_len);
  check_commits(w);
}

// 19 steps with H = 3 and two fragments: at the end each island holds progress it never sent.
// The final sync sends it and the last rounds commit (below K if need be: every island left the
// quorum); without it that progress never reaches the global model.
BOOST_AUTO_TEST_CASE(final_sync_merges_the_progress_left_at_the_end) {
  std::map<double, int> merged;  // contributions merged in all commits
  for (const double final_sync_s : {30.0, 0.0}) {
    BOOST_TEST_CONTEXT("train.final_sync_s " << final_sync_s) {
      auto c = small_config(3, 1, 3);
      c.train.steps = 19;
      c.fragments.count = 2;
      c.train.final_sync_s = final_sync_s;
      World w(c);
      w.settle();
      check_commits(w);
      BOOST_TEST(w.rt->all_done());
      for (const auto& e : w.of(Event::Kind::commit)) merged[final_sync_s] += e.merged;
    }
  }
  // Fragment 0 was last due at step 18: its step 19 reaches the global model only with the
  // final sync, from all three islands.
  BOOST_TEST(merged[30.0] >= merged[0.0] + 3);
}

// The syncer dies one step before the end and is under repair while the islands finish: they
// wind down without a syncer, keep asking to join, and send their last progress to its successor.
BOOST_AUTO_TEST_CASE(islands_that_finish_while_the_syncer_is_down_sync_with_its_successor) {
  auto c = small_config(2, 1, 2);
  c.train.steps = 19;
  auto f = step_fault("syncer", 0, 0, 18);
  f.duration_s = 1.0;
  c.faults.push_back(f);
  World w(c);
  w.settle();
  BOOST_TEST(w.rt->all_done());
  BOOST_TEST(w.of(Event::Kind::fault).size() == 1u);
  // Both islands re-joined the restarted syncer and their last progress was merged there.
  const auto restored = w.index_of(Event::Kind::restore);
  BOOST_REQUIRE(restored < w.events.size());
  int commits_after = 0;
  for (std::size_t j = restored; j < w.events.size(); ++j) commits_after += w.events[j].kind == Event::Kind::commit;
  BOOST_TEST(commits_after >= 1);
}

// An island told to leave (drain_atom: what `diloco site` sends its islands on SIGTERM) stops
// stepping, hands over its unsent progress, which is merged, and is done. The syncer counts it as
// finished, so rounds that waited for every island (K = all) go on without it to the end.
BOOST_AUTO_TEST_CASE(an_island_told_to_leave_hands_over_its_progress_and_the_others_train_on) {
  auto c = small_config(3, 1, 3);
  c.train.steps = 30;
  World w(c);
  bool told = false;
  w.hook = [&](const Event& e) {
    if (told || e.kind != Event::Kind::step || e.island != 1 || e.step != 7) return;
    told = true;
    caf::anon_send(w.rt->dir.island(1), drain_atom::value);
  };
  w.settle();
  BOOST_TEST(w.rt->all_done());
  const auto leaves = w.of(Event::Kind::leave);
  BOOST_REQUIRE_EQUAL(leaves.size(), 1u);
  const auto& leave = leaves.front();
  BOOST_TEST(leave.island == 1);
  BOOST_TEST(leave.step == 8);   // the step in flight when told is finished, no other is begun
  BOOST_TEST(leave.unsent == 1); // steps 7 and 8 were not sent yet (H = 3)
  long last_step = 0;
  for (const auto& e : w.of(Event::Kind::step))
    if (e.island == 1) last_step = std::max(last_step, e.step);
  BOOST_TEST(last_step == leave.step);
  // Its hand-over was merged after it began to leave.
  bool merged = false;
  for (std::size_t j = w.index_of(Event::Kind::leave, 1); j < w.events.size(); ++j) {
    const auto& e = w.events[j];
    if (e.kind == Event::Kind::commit && std::find(e.islands.begin(), e.islands.end(), 1) != e.islands.end())
      merged = true;
  }
  BOOST_TEST(merged);
  BOOST_TEST(w.rt->syncer.finished[1].load());
  BOOST_TEST(w.rt->syncer.heard_step[1].load() == leave.step);
  // The others trained their whole budget, merging without island 1 once it left.
  for (int i : {0, 2}) BOOST_TEST(w.rt->islands[static_cast<std::size_t>(i)].step.load() == 30);
  int without = 0;
  for (std::size_t j = w.index_of(Event::Kind::leave, 1); j < w.events.size(); ++j) {
    const auto& e = w.events[j];
    without += e.kind == Event::Kind::commit && std::find(e.islands.begin(), e.islands.end(), 1) == e.islands.end();
  }
  BOOST_TEST(without >= 5);
}

// Joining mid-run (net.allow_join, `diloco site --join`): an island that nobody ran starts while
// the others train, as a joining site's islands do in their own process. It heals to the global
// round reached, contributes, and the quorum widens to it; the run waits for its budget.
BOOST_AUTO_TEST_CASE(an_island_that_joins_mid_run_heals_contributes_and_widens_the_quorum) {
  auto c = small_config(3, 1, 2);
  c.train.steps = 30;
  SpawnSet first;
  first.all_islands = false;
  first.islands = {0, 1};
  World w(c, {}, first);
  // One message at a time (settle runs every message before it looks), until island 0 is at step 10.
  for (int n = 0; n < 1000000 && w.rt->islands[0].step.load() < 10; ++n)
    if (!w.sched->try_run_once()) {
      if (!w.sched->has_pending_timeout()) break;
      w.sched->trigger_timeout();
    }
  BOOST_REQUIRE(w.rt->islands[0].step.load() >= 10);
  const auto reached = w.rt->syncer.global().second;
  BOOST_REQUIRE(reached >= 2u);
  const auto joined_at = w.events.size();
  for (std::size_t j = 0; j < joined_at; ++j)
    if (w.events[j].kind == Event::Kind::commit) BOOST_TEST(w.events[j].live == 2);  // two members
  SpawnSet later;
  later.syncer = false;
  later.all_islands = false;
  later.islands = {2};
  auto joiner = spawn_runtime(*w.sys, w.rt, {}, later);
  w.settle();
  BOOST_TEST(w.rt->all_done());
  std::optional<Event> heal;
  for (std::size_t j = joined_at; j < w.events.size() && !heal; ++j)
    if (w.events[j].kind == Event::Kind::heal && w.events[j].island == 2) heal = w.events[j];
  BOOST_REQUIRE(heal);
  BOOST_TEST(heal->round >= reached);  // the global parameters of the round reached, not the initial ones
  BOOST_TEST(heal->step == 0);
  int with_joiner = 0, wider = 0;
  for (std::size_t j = joined_at; j < w.events.size(); ++j) {
    const auto& e = w.events[j];
    if (e.kind != Event::Kind::commit) continue;
    with_joiner += std::find(e.islands.begin(), e.islands.end(), 2) != e.islands.end();
    wider += e.live == 3;
  }
  BOOST_TEST(with_joiner >= 3);
  BOOST_TEST(wider >= 3);  // a merge's share n/L counts it once it is a member
  BOOST_TEST(w.rt->islands[2].step.load() == 30);
  caf::anon_send_exit(joiner, caf::exit_reason::user_shutdown);
}

BOOST_AUTO_TEST_CASE(islands_of_different_sizes_step_with_all_their_chips) {
  auto c = small_config(2, 1, 2);
  c.islands.counts = {1, 3};
  World w(c);
  w.settle();
  for (const auto& s : w.of(Event::Kind::step)) BOOST_TEST(s.chips == (s.island == 0 ? 1 : 3));
  BOOST_TEST(w.started("island-1", "chip-2") == 1);
  BOOST_TEST(w.started("island-0", "chip-1") == 0);
  BOOST_TEST(w.rt->goodput_report(w.rt->t0.load() + 1.0).provisioned_chip_s == 4.0);  // 1 + 3 chips for 1 s
  check_commits(w);
}

// ---- runs that cannot go on end, with the reason; they never wait forever ----

namespace {
std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
void write_all(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}
}  // namespace

BOOST_AUTO_TEST_CASE(diverging_decoupled_run_stops_naming_the_island_instead_of_hanging) {
  auto c = small_config(2, 1, 2);
  // AdamW moves every trained parameter by about its lr whatever the gradient, so after the first step the
  // forward multiplies parameters near 1e30 and the loss overflows float on any CPU. (An outer lr of 1e30
  // did not: the syncer's clipping kept the loss near 1e33 on some CPUs, and that run ended undiverged.)
  c.inner.lr = 1e30f;
  c.inner.grad_clip = 0.0f;
  c.inner.warmup_steps = 0;
  c.train.final_sync_s = 30.0;
  World w(c);
  w.breaks_invariants = true;
  w.settle(false);
  const auto why = w.rt->stopped();
  BOOST_REQUIRE(why.has_value());
  BOOST_TEST_MESSAGE(*why);
  BOOST_TEST(why->find("diverged") != std::string::npos);
  // The invariants checker caught it too: NaN or infinity in a parameter, and nothing else.
  const auto broken = w.violations();
  BOOST_TEST(!broken.empty());
  for (const auto& v : broken) BOOST_CHECK_MESSAGE(v.kind == Violation::Kind::non_finite, v.what);
  const auto diverged = w.of(Event::Kind::diverged);
  BOOST_REQUIRE(!diverged.empty());
  BOOST_TEST((diverged[0].island >= 0 || diverged[0].fragment >= 0));  // who it was
  BOOST_TEST(diverged[0].detail == *why);
  // Nothing was restarted into the same state: the run is simply over.
  BOOST_TEST(w.started("root", "syncer") == 1);
  BOOST_TEST(w.started("island-0", "island") == 1);
  BOOST_TEST(w.started("island-1", "island") == 1);
}

BOOST_AUTO_TEST_CASE(corrupt_syncer_state_file_stops_the_run_and_is_left_as_it_was) {
  const auto path = (std::filesystem::temp_directory_path() / "diloco_test_corrupt_syncer.safetensors").string();
  write_all(path, "garbage, not a checkpoint");
  auto c = small_config(2, 1, 2);
  c.syncer.checkpoint = path;
  World w(c);
  w.settle(false);
  const auto why = w.rt->stopped();
  BOOST_REQUIRE(why.has_value());
  BOOST_TEST_MESSAGE(*why);
  BOOST_TEST(why->find("unusable syncer state file") != std::string::npos);
  BOOST_TEST(why->find(path) != std::string::npos);
  BOOST_TEST(w.of(Event::Kind::unusable_state).size() == 1u);
  BOOST_TEST(w.of(Event::Kind::commit).empty());  // no round was started over
  BOOST_TEST(read_all(path) == "garbage, not a checkpoint");
  BOOST_TEST(w.started("root", "syncer") == 1);
  std::filesystem::remove(path);
}

BOOST_AUTO_TEST_CASE(state_file_corrupt_at_a_syncer_restart_stops_the_run_without_a_restart_loop) {
  const auto path = (std::filesystem::temp_directory_path() / "diloco_test_corrupt_at_restart.safetensors").string();
  std::filesystem::remove(path);
  auto c = small_config(2, 1, 2);
  c.syncer.checkpoint = path;
  c.faults.push_back(step_fault("syncer", 0, 0, 7));
  World w(c);
  // The file goes bad just before the syncer is killed: its restart finds it so.
  w.hook = [&](const Event& e) {
    if (e.kind == Event::Kind::fault) write_all(path, "truncated");
  };
  w.settle(false);
  const auto why = w.rt->stopped();
  BOOST_REQUIRE(why.has_value());
  BOOST_TEST_MESSAGE(*why);
  BOOST_TEST(why->find("unusable syncer state file") != std::string::npos);
  BOOST_TEST(w.started("root", "syncer") == 2);  // one restart, then the run stopped
  BOOST_TEST(read_all(path) == "truncated");     // not overwritten by a later snapshot
  std::filesystem::remove(path);
}

// Every frame on the paths into the syncer (join, progress) and into an island (welcome,
// broadcast: the server's parameters in ddp) that does not decode, or decodes to another
// message than its path carries, is counted and reported; none is dropped in silence, and the
// run is not disturbed.
BOOST_AUTO_TEST_CASE(undecodable_frames_on_every_path_are_counted_and_reported) {
  for (const std::string mode : {"decoupled", "ddp"}) {
    BOOST_TEST_CONTEXT("train.mode " << mode) {
      auto c = small_config(2, 1, 2);
      c.train.mode = *choice_of<TrainMode>(mode);
      World w(c);
      w.settle();
      w.settle(false);
      BOOST_REQUIRE(w.of(Event::Kind::rejected).empty());
      BOOST_REQUIRE(w.rt->tally().rejected == 0u);
      WireFrame garbage{{0xde, 0xad, 0xbe, 0xef, 0x00, 0x01, 0x02}};
      const auto beat = encode_message(Heartbeat{0, 1, 2});  // decodes, but no path here carries it
      WireFrame wrong;
      for (auto b : beat) wrong.bytes.push_back(static_cast<std::uint8_t>(b));
      const auto syncer = w.rt->dir.syncer();
      const auto island = w.rt->dir.island(1);
      for (const auto& f : {garbage, wrong}) {
        caf::anon_send(syncer, join_atom::value, f);
        caf::anon_send(syncer, progress_atom::value, f);
        caf::anon_send(island, welcome_atom::value, f);
        caf::anon_send(island, global_atom::value, f);
      }
      w.sched->run();
      const auto refused = w.of(Event::Kind::rejected);
      BOOST_TEST(refused.size() == 8u);
      BOOST_TEST(w.rt->tally().rejected == 8u);
      const std::string broadcast = mode == "ddp" ? "island 1: parameters: " : "island 1: broadcast: ";
      for (const auto& path : {std::string("syncer: join request: "), std::string("syncer: progress: "),
                               std::string("island 1: welcome: "), broadcast}) {
        int n = 0;
        for (const auto& e : refused) n += e.detail.rfind(path, 0) == 0;
        BOOST_TEST(n == 2, path << "refused " << n << " times");
      }
      for (const auto& e : refused) BOOST_TEST_MESSAGE(e.detail);
      BOOST_TEST(!w.rt->stopped().has_value());
      BOOST_TEST(w.rt->all_done());
      BOOST_TEST(w.started("root", "syncer") == 1);
      BOOST_TEST(w.started("island-1", "island") == 1);
    }
  }
}

// A joining island (or ddp replica) whose welcome is refused asks again a moment later and joins
// with the next welcome: the reply to the request it stood for will never come, and nothing else
// would make it ask. Here island 0 joins through a unit that answers its first request with a
// frame that does not decode, then routes it to the syncer.
BOOST_AUTO_TEST_CASE(a_joining_island_asks_again_after_a_refused_welcome) {
  for (const std::string mode : {"decoupled", "ddp"}) {
    BOOST_TEST_CONTEXT("train.mode " << mode) {
      auto c = small_config(2, 1, 2);
      c.train.mode = *choice_of<TrainMode>(mode);
      World w(c);
      int asked = 0;
      auto rt = w.rt;
      auto gate = w.sys->spawn([rt, &asked](caf::event_based_actor* self) -> caf::behavior {
        return {[=, &asked](join_atom, const WireFrame&) {
          ++asked;
          self->send(caf::actor_cast<caf::actor>(self->current_sender()), welcome_atom::value,
                     WireFrame{{0xde, 0xad, 0xbe, 0xef}});
          rt->dir.set_route({0}, rt->dir.syncer());  // the next request goes to the syncer
        }};
      });
      w.rt->dir.set_route({0}, gate);  // before anything ran: island 0's first request goes here
      w.settle();
      BOOST_TEST(asked == 1);
      int refused = 0;
      for (const auto& e : w.of(Event::Kind::rejected)) refused += e.detail.rfind("island 0: welcome: ", 0) == 0;
      BOOST_TEST(refused == 1);
      BOOST_TEST(w.rt->all_done());  // island 0 asked again, joined and trained its budget
      BOOST_TEST(w.rt->islands[0].done.load());
      BOOST_TEST(w.started("island-0", "island") == 1);  // not by a restart
      caf::anon_send_exit(gate, caf::exit_reason::user_shutdown);
    }
  }
}

// A training island that re-joins a restarted syncer and whose welcome is refused asks again a
// moment later: otherwise it went on sending its progress to the unit it asked, and the syncer,
// which never heard it join, never merged it again. Here island 0 re-joins through a unit that
// answers its first request with a frame that does not decode and hands everything else to the
// syncer of the moment, as its sender sent it.
BOOST_AUTO_TEST_CASE(a_training_island_asks_again_after_a_refused_welcome) {
  for (const std::string mode : {"decoupled", "ddp"}) {
  BOOST_TEST_CONTEXT("train.mode " << mode) {
  auto c = small_config(2, 1, 2);
  c.train.mode = *choice_of<TrainMode>(mode);
  c.syncer.snapshot_every = 0;  // the restarted syncer resumes from its last commit, in memory
  int asked = 0, commits = 0;   // before the World: its end still runs the gate's messages
  World w(c);
  auto rt = w.rt;
  auto gate = w.sys->spawn([rt, &asked](caf::event_based_actor* self) -> caf::behavior {
    self->set_default_handler([rt](caf::scheduled_actor* s, caf::message_view& x) -> caf::result<caf::message> {
      rt->dir.syncer()->enqueue(caf::make_mailbox_element(s->current_sender(), caf::make_message_id(), {},
                                                          x.move_content_to_message()),
                                s->context());
      return caf::delegated<caf::message>{};
    });
    return {[=, &asked](join_atom a, const WireFrame& f) {
      if (asked++ > 0) self->delegate(rt->dir.syncer(), a, f);
      else self->send(caf::actor_cast<caf::actor>(self->current_sender()), welcome_atom::value, WireFrame{{0xde, 0xad, 0xbe, 0xef}});
    }};
  });
  w.hook = [&](const Event& e) {
    if (e.kind == Event::Kind::commit && ++commits == 2) {
      w.rt->dir.set_route({0}, gate);  // island 0's re-join goes there
      caf::anon_send_exit(w.rt->dir.syncer(), caf::exit_reason::kill);
    }
  };
  w.settle();
  BOOST_TEST(w.started("root", "syncer") == 2);
  BOOST_TEST(asked == 2);  // the refused welcome's request, and the one a moment later
  const auto refusal = std::find_if(w.events.begin(), w.events.end(), [](const Event& e) {
    return e.kind == Event::Kind::rejected && e.detail.rfind("island 0: welcome: ", 0) == 0;
  });
  BOOST_REQUIRE(refusal != w.events.end());
  const bool healed_after = std::any_of(refusal, w.events.end(), [](const Event& e) {
    return e.kind == Event::Kind::rejoin && e.island == 0;
  });
  BOOST_TEST(healed_after);  // it re-joined the restarted syncer
  BOOST_TEST(w.rt->islands[0].done.load());
  caf::anon_send_exit(gate, caf::exit_reason::user_shutdown);
  }
  }
}

BOOST_AUTO_TEST_CASE(syncer_restarted_after_islands_finished_restores_who_finished_and_their_steps) {
  auto c = small_config(2, 1, 2);
  World w(
      c,
      [](Runtime& rt) {
        // The snapshot of a syncer that heard island 0 at step 12 and island 1 finish at 18.
        SyncerSettings s;
        s.islands = 2;
        s.outer = rt.cfg.outer;
        s.snapshot_every = 1;
        SyncerCore before(rt.plan, rt.initial, s);
        before.heard(0, 12, 1.0);
        before.heard(1, 18, 1.0);
        before.finish(1, true);
        rt.syncer.keep_snapshot(std::make_shared<const Checkpoint>(before.snapshot()));
      },
      SpawnSet{true, false, {}});  // the syncer alone, as in `diloco syncer`
  w.settle(false);
  BOOST_TEST(!w.rt->stopped().has_value());
  BOOST_TEST(w.of(Event::Kind::restore).size() == 1u);
  BOOST_TEST(w.rt->syncer.finished[1].load());
  BOOST_TEST(!w.rt->syncer.finished[0].load());
  BOOST_TEST(w.rt->syncer.heard_step[0].load() == 12);  // what a restarted site is told
  BOOST_TEST(w.rt->syncer.heard_step[1].load() == 18);
}

// A replicated syncer's leader (Run::hold_until_replicated): a commit's broadcast waits until the
// gateway says a majority of the replicas holds it (replicated_atom), so no island hears of a
// round a failover could lose; released, it goes out and the run trains on to the end.
BOOST_AUTO_TEST_CASE(a_replicated_leader_broadcasts_a_commit_only_once_a_majority_holds_it) {
  World w(small_config(2, 1, 2), [](Runtime& rt) { rt.hold_until_replicated = true; });
  // Stands for the gateway: it sends from this process's node, as the gateway does.
  auto gateway = w.sys->spawn([](caf::event_based_actor* self) -> caf::behavior {
    return {[=](replicated_atom a, std::uint64_t generation, const caf::actor& to) { self->send(to, a, generation); }};
  });
  std::vector<std::uint64_t> down_at_commit;  // bytes broadcast so far, at each commit
  w.hook = [&](const Event& e) {
    if (e.kind == Event::Kind::commit) down_at_commit.push_back(w.rt->syncer.bytes_down.load());
  };
  w.Coordinated::settle([&] { return !down_at_commit.empty(); });
  BOOST_REQUIRE(!down_at_commit.empty());
  const auto down = w.rt->syncer.bytes_down.load();
  BOOST_TEST(down == down_at_commit.front());  // committed, kept, not broadcast
  w.sched->run(50);  // the run goes on a while
  BOOST_TEST(w.rt->syncer.bytes_down.load() == down);  // still held while nobody holds it
  const auto generation = w.rt->syncer.held().generation;
  BOOST_TEST(generation >= 1u);
  caf::anon_send(gateway, replicated_atom::value, generation - 1, w.rt->dir.syncer());  // an older one: not enough
  w.sched->run(4);
  BOOST_TEST(w.rt->syncer.bytes_down.load() == down);
  caf::anon_send(gateway, replicated_atom::value, generation, w.rt->dir.syncer());
  w.sched->run(4);
  BOOST_TEST(w.rt->syncer.bytes_down.load() > down);  // a majority holds it: it went out
  // From here on every commit is released as soon as it is kept; the run ends with every round.
  w.hook = [&](const Event& e) {
    if (e.kind == Event::Kind::commit)
      caf::anon_send(gateway, replicated_atom::value, w.rt->syncer.held().generation, w.rt->dir.syncer());
  };
  // A frame claiming to come from elsewhere cannot release anything: anonymous sends are ignored.
  caf::anon_send(w.rt->dir.syncer(), replicated_atom::value, std::uint64_t{1000});
  // ... and what was committed before that hook was in place is released now.
  caf::anon_send(gateway, replicated_atom::value, w.rt->syncer.held().generation, w.rt->dir.syncer());
  w.settle();
  check_commits(w);
  const auto commits = w.of(Event::Kind::commit);
  // The islands trained on meanwhile (their repeats of the merged progress dropped as stale), took
  // the released round, and the run ended with every later commit released as it came.
  BOOST_TEST(commits.size() >= 2u);
  BOOST_TEST(w.rt->syncer.round() == commits.back().round);
  caf::anon_send_exit(gateway, caf::exit_reason::user_shutdown);
}

// A site that has heard of leader term 9 (its connector admitted a session of that term) refuses
// broadcasts and welcomes of an older term: they come from a deposed leader. Each is counted and
// reported, nothing of it is taken, and the run goes on; the current leader's frames are taken.
BOOST_AUTO_TEST_CASE(islands_refuse_the_frames_of_a_deposed_leaders_term) {
  World w(small_config(2, 1, 2), [](Runtime& rt) {
    rt.leader_term = 9;  // this process's syncer leads under term 9 and stamps its frames
    rt.newest_term = 9;
  });
  w.settle();
  w.settle(false);
  BOOST_REQUIRE(w.of(Event::Kind::rejected).empty());  // every frame of the leader's term was taken
  auto frames_of_term = [&](std::uint64_t term) {
    SyncerSettings s;
    s.islands = 2;
    s.outer = w.rt->cfg.outer;
    s.term = term;
    SyncerCore core(w.rt->plan, w.rt->initial, s);
    auto broadcast = core.frame_for(0, 1);
    BOOST_REQUIRE(broadcast.has_value());
    auto wire = [](const Frame& f) {
      WireFrame out;
      for (auto b : f) out.bytes.push_back(static_cast<std::uint8_t>(b));
      return out;
    };
    return std::make_pair(wire(*broadcast), wire(encode_message(core.join_reply(1), term)));
  };
  const auto island = w.rt->dir.island(1);
  const auto heals = [&] { return w.of(Event::Kind::heal).size() + w.of(Event::Kind::rejoin).size(); };
  const auto healed_before = heals();
  const auto [stale_broadcast, stale_welcome] = frames_of_term(7);
  caf::anon_send(island, global_atom::value, stale_broadcast);
  caf::anon_send(island, welcome_atom::value, stale_welcome);
  w.sched->run();
  const auto refused = w.of(Event::Kind::rejected);
  BOOST_REQUIRE(refused.size() == 2u);
  for (const auto& e : refused) {
    BOOST_TEST(e.detail.find("stale_term: frame of term 7 from a deposed syncer leader (the newest term is 9)") !=
               std::string::npos, e.detail);
    BOOST_TEST(e.reason == "stale_term");
  }
  BOOST_TEST(w.rt->islands[1].refused.load() == 2u);
  BOOST_TEST(heals() == healed_before);  // the stale welcome healed nobody
  // The same frames under the current term are taken (the welcome heals island 1 once more).
  const auto [broadcast, welcome] = frames_of_term(9);
  caf::anon_send(island, global_atom::value, broadcast);
  caf::anon_send(island, welcome_atom::value, welcome);
  w.sched->run();
  BOOST_TEST(w.of(Event::Kind::rejected).size() == 2u);
  BOOST_TEST(heals() == healed_before + 1);
  BOOST_TEST(!w.rt->stopped().has_value());
}

// A replicated leader lost at each point of a commit: before a majority holds it, once a majority
// holds it but before its broadcast went out, and after the broadcast. The new leader (a newer
// term) resumes from what the majority holds, as an elected follower does. No round an island
// heard of is lost, none is applied twice (each fragment's rounds go on from the restored one by
// one), and the restored state is exactly the majority's.
BOOST_AUTO_TEST_CASE(a_leader_lost_at_any_point_of_a_commit_loses_no_round_islands_heard_of) {
  enum class Point { before_replication, replicated_not_broadcast, after_broadcast };
  const std::pair<Point, const char*> points[] = {{Point::before_replication, "before replication"},
                                                  {Point::replicated_not_broadcast, "replicated, not broadcast"},
                                                  {Point::after_broadcast, "after the broadcast"}};
  for (const auto& [point, name] : points) {
    BOOST_TEST_CONTEXT("leader lost " << name) {
      auto c = small_config(2, 1, 2);
      c.fragments.count = 2;
      c.syncer.snapshot_every = 0;  // the replicas' copies are the only ones
      World w(c, [](Runtime& rt) {
        rt.hold_until_replicated = true;
        rt.leader_term = 5;
        rt.newest_term = 5;
      });
      auto gateway = w.sys->spawn([](caf::event_based_actor* self) -> caf::behavior {
        return {[=](replicated_atom a, std::uint64_t generation, const caf::actor& to) { self->send(to, a, generation); }};
      });
      std::shared_ptr<const Checkpoint> majority;  // what a majority of the replicas holds
      auto replicate = [&] {
        auto h = w.rt->syncer.held();
        majority = h.snapshot;
        return h.generation;
      };
      auto release = [&](std::uint64_t g) { caf::anon_send(gateway, replicated_atom::value, g, w.rt->dir.syncer()); };
      std::map<int, std::uint64_t> rounds;  // per fragment: the round of its last commit under the living leader
      std::map<int, std::uint64_t> at_loss;  // per fragment: the leader's rounds when it was lost
      std::vector<float> majority_params;
      int commits = 0;
      bool lost = false, restored = false;
      std::uint64_t down_at_loss = 0;  // bytes broadcast when the commit at the loss was made
      std::uint64_t heard_most = 0;  // the newest round of fragment 0 an island re-joined holding
      // The successor, elected under a newer term, starts from what the majority holds.
      auto fail_over = [&] {
        BOOST_REQUIRE(majority);
        w.rt->syncer.keep_snapshot(majority);
        w.rt->leader_term = 6;
        majority_params = majority->params;
        caf::anon_send_exit(w.rt->dir.syncer(), caf::exit_reason::kill);
      };
      w.hook = [&](const Event& e) {
        if (e.kind == Event::Kind::commit && !lost) {
          BOOST_TEST(e.round == rounds[e.fragment] + 1);  // monotonic, none repeated
          rounds[e.fragment] = e.round;
          // The leader is lost at the second commit of fragment 0 (whose round a re-joining island reports).
          if (e.fragment != 0 || ++commits < 2) return release(replicate());
          lost = true;
          at_loss = rounds;
          down_at_loss = w.rt->syncer.bytes_down.load();
          if (point != Point::before_replication) {
            const auto g = replicate();
            if (point == Point::after_broadcast) return release(g);  // lost once the broadcast is out (below)
          }
          fail_over();
        } else if (e.kind == Event::Kind::restore && lost && !restored) {
          restored = true;
          BOOST_TEST(w.rt->syncer.global().first == majority_params);  // exactly the majority's state
          BOOST_TEST_REQUIRE(e.rounds.size() == 2u);
          for (int p = 0; p < 2; ++p) rounds[p] = e.rounds[static_cast<std::size_t>(p)];
          if (point == Point::before_replication) BOOST_TEST(rounds != at_loss);  // the commit nobody held is gone ...
          else BOOST_TEST((rounds == at_loss));                                  // ... a held one is not
        } else if (e.kind == Event::Kind::commit && restored) {
          BOOST_TEST(e.round == rounds[e.fragment] + 1);  // from the restored round on, one by one
          rounds[e.fragment] = e.round;
          release(replicate());
        } else if (e.kind == Event::Kind::rejoin && restored) {
          BOOST_TEST(e.held_round <= rounds[0]);  // the island had heard of nothing the successor lacks
          heard_most = std::max(heard_most, e.held_round);
        }
      };
      w.Coordinated::settle([&] { return lost; });
      BOOST_REQUIRE(lost);
      if (point == Point::after_broadcast) {
        w.Coordinated::settle([&] { return w.rt->syncer.bytes_down.load() > down_at_loss; });
        BOOST_REQUIRE(w.rt->syncer.bytes_down.load() > down_at_loss);  // the commit went out to the islands
        w.sched->run(10);  // ... and reached them
        fail_over();
      }
      w.Coordinated::settle([&] { return restored; });
      BOOST_REQUIRE(restored);
      release(replicate());  // the successor's followers hold what it resumed from
      w.settle();
      BOOST_TEST(w.started("root", "syncer") == 2);
      BOOST_TEST(w.of(Event::Kind::rejoin).size() >= 2u);
      // Islands re-joined holding the lost leader's last commit exactly when it had reached them.
      if (point == Point::after_broadcast) BOOST_TEST(heard_most == at_loss[0]);
      else BOOST_TEST(heard_most < at_loss[0]);
      BOOST_TEST(w.of(Event::Kind::rejected).empty());
      BOOST_TEST(!w.rt->stopped().has_value());
      caf::anon_send_exit(gateway, caf::exit_reason::user_shutdown);
    }
  }
}

// fragments.wait_steps on simulated time: an island holds its next step for a merge that is due
// (its send τ steps old) until the merge arrives, at most wait_steps of its own step time. With a
// wait long enough for the links, a run across them adopts every merge after the step a run
// without links does, and commits the same rounds (to float rounding: the same run twice in one
// process differs by as much), in more time. Without the wait the merges come steps later and
// the run is another.
BOOST_AUTO_TEST_CASE(a_bounded_wait_makes_a_run_across_links_adopt_at_the_steps_of_one_without) {
  struct Seen {
    std::vector<std::vector<float>> globals;  // after each commit
    double last_step_at = 0.0;
    Tally tally;
  };
  auto run = [](bool wan, double wait) {
    auto c = small_config(2, 1, 2);
    c.train.steps = 32;
    c.train.H = 8;
    c.fragments.tau = 1;
    c.fragments.alpha = 0.25;
    c.fragments.adopt = AdoptRule::carry;
    c.fragments.wait_steps = wait;
    c.wan.enabled = wan;
    c.wan.bandwidth_mbps = 100.0;
    c.wan.latency_ms = 60.0;  // a merge comes back about three steps after the send
    c.islands.chip_flops = 1e7;
    Seen seen;
    World w(c, [](Runtime& rt) { rt.simulated = true; });
    w.hook = [&](const Event& e) {
      if (e.kind == Event::Kind::commit) seen.globals.push_back(w.rt->syncer.global().first);
    };
    w.settle();
    w.settle(false);
    check_commits(w);
    BOOST_TEST(w.rt->syncer.round() == 4u);  // 32 steps / H = 8, both islands in every commit
    BOOST_TEST(w.of(Event::Kind::rejoin).empty());
    seen.last_step_at = w.of(Event::Kind::step).back().at;
    seen.tally = w.rt->tally();
    return seen;
  };
  const auto local = run(false, 0.0);
  const auto waited = run(true, 1000.0);
  const auto on = run(true, 0.0);
  auto apart = [](const std::vector<float>& a, const std::vector<float>& b) {
    double m = 0.0;
    for (std::size_t k = 0; k < a.size(); ++k) m = std::max(m, std::abs(double{a[k]} - double{b[k]}));
    return m;
  };
  BOOST_REQUIRE_EQUAL(local.globals.size(), 4u);
  BOOST_REQUIRE_EQUAL(waited.globals.size(), 4u);
  BOOST_REQUIRE_EQUAL(on.globals.size(), 4u);
  for (std::size_t r = 0; r < 4; ++r) {
    BOOST_TEST_MESSAGE("round " << r + 1 << ": waiting " << apart(waited.globals[r], local.globals[r])
                                << " from the run without links, not waiting " << apart(on.globals[r], local.globals[r]));
    BOOST_TEST(apart(waited.globals[r], local.globals[r]) < 1e-5);
  }
  BOOST_TEST(apart(on.globals[3], local.globals[3]) > 1e-3);
  BOOST_TEST_MESSAGE("last step at " << local.last_step_at << " s without links, " << waited.last_step_at
                                     << " s across them waiting, " << on.last_step_at << " s not waiting");
  BOOST_TEST(waited.last_step_at > on.last_step_at + 0.1);   // the waits took time
  BOOST_TEST(on.last_step_at < local.last_step_at + 0.2);    // never waiting: only the first join's trip
  // The waits are counted: one per island and commit but the last (it comes after the budget).
  BOOST_TEST(waited.tally.waits == 6u);
  BOOST_TEST(waited.tally.wait_timeouts == 0u);
  BOOST_TEST(waited.tally.waited_s > 0.1);
  BOOST_TEST(on.tally.waits == 0u);
}

// A link cut for longer than the wait: the islands wait out one hold each for the merge that
// cannot come, then train on without waiting again until the syncer answers (a merge of their
// sends), and the run finishes with every step taken.
BOOST_AUTO_TEST_CASE(a_wait_that_runs_out_lets_the_island_train_through_a_cut_link) {
  auto c = small_config(2, 1, 2);
  c.train.steps = 48;
  c.train.H = 8;
  c.fragments.tau = 1;
  c.fragments.adopt = AdoptRule::carry;
  c.fragments.wait_steps = 5;  // a fraction of the cut
  c.wan.enabled = true;
  c.wan.bandwidth_mbps = 100.0;
  c.wan.latency_ms = 10.0;
  c.islands.chip_flops = 1e7;
  c.faults.push_back(timed_fault("partition", 0.4, 0.9));
  c.faults.back().site = "island-0";
  World w(c, [](Runtime& rt) { rt.simulated = true; });
  w.settle();
  w.settle(false);
  check_commits(w);
  const auto t = w.rt->tally();
  BOOST_TEST_MESSAGE(t.waits << " waits, " << t.waited_s << " s, " << t.wait_timeouts << " ran out");
  // Island 0 cannot get its merge, and island 1's commits need island 0 (K = 2): each runs
  // out once, then steps on through the cut.
  BOOST_TEST(t.wait_timeouts >= 1u);
  BOOST_TEST(t.wait_timeouts <= 2u);
  std::array<int, 2> inside{};
  for (const auto& e : w.of(Event::Kind::step)) {
    const double at = since_start(w, e);
    if (at > 0.4 + 0.3 && at < 0.4 + 0.9) ++inside[static_cast<std::size_t>(e.island)];
  }
  BOOST_TEST(inside[0] >= 5);  // 0.6 s of the cut: it did not wait through it
  BOOST_TEST(inside[1] >= 5);
  BOOST_TEST(w.rt->islands[0].step.load() == 48);
  BOOST_TEST(w.rt->islands[1].step.load() == 48);
}

// train.sync_every_s on simulated time (a step's time is the model's FLOPs over the chip's
// FLOP/s and the island's speed): with H = 4 steps each island sends once per 4 of its own
// steps, so the island at half speed sends half as often in time; with a period of 4 fast steps
// it sends every 2 of its steps, as often in time as the fast one (twice as many sends over its
// twice-as-long run of the same 48 steps).
BOOST_AUTO_TEST_CASE(a_time_cadence_lets_a_slow_island_send_as_often_as_a_fast_one) {
  auto run = [](double sync_every_s, double* step_s) {
    auto c = small_config(2, 1, 1);
    c.train.steps = 48;
    c.train.H = 4;
    c.islands.speed = {1.0, 0.5};
    c.train.sync_every_s = sync_every_s;
    World w(c, [](Runtime& rt) { rt.simulated = true; });
    w.settle();
    std::array<int, 2> merged{};
    for (const auto& e : w.of(Event::Kind::commit))
      for (int i : e.islands) ++merged[static_cast<std::size_t>(i)];
    std::vector<double> fast;
    for (const auto& e : w.of(Event::Kind::step))
      if (e.island == 0) fast.push_back(e.at);
    if (step_s) *step_s = (fast.back() - fast.front()) / static_cast<double>(fast.size() - 1);
    BOOST_TEST(w.of(Event::Kind::dropped).empty());
    return merged;
  };
  double step_s = 0.0;
  const auto by_steps = run(0.0, &step_s);
  BOOST_TEST_MESSAGE("every 4 steps: islands sent " << by_steps[0] << " and " << by_steps[1] << "; a fast step " << step_s << " s");
  BOOST_TEST(std::abs(by_steps[0] - by_steps[1]) <= 2);  // 48 steps / 4 each
  BOOST_REQUIRE(step_s > 0.0);
  const auto by_time = run(4.0 * step_s * 0.999, nullptr);  // just under 4 steps: no ulp decides
  BOOST_TEST_MESSAGE("every " << 4.0 * step_s << " s: islands sent " << by_time[0] << " and " << by_time[1]);
  BOOST_TEST(std::abs(by_time[0] - by_steps[0]) <= 2);  // the fast island's cadence is unchanged
  BOOST_TEST(by_time[1] >= 2 * by_time[0] - 3);         // the slow one sends every 2 of its steps
}
