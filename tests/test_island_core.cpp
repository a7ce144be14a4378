// IslandCore without actors: token-weighted chip gradients, queued adoptions, healing from a
// JoinReply, lossy broadcasts added up exactly, refused global deltas, divergence reports, and
// the bounded wait for a due merge.
#define BOOST_TEST_MODULE island_core
#include <boost/test/unit_test.hpp>

#include <array>
#include <cmath>
#include <filesystem>
#include <limits>
#include <random>
#include <span>
#include <tuple>
#include <type_traits>
#include <variant>

#include <unistd.h>

#include "core_fixtures.hpp"
#include "diloco/checkpoint.hpp"
#include "diloco/invariants.hpp"
#include "diloco/island_core.hpp"
#include "diloco/syncer_core.hpp"

using namespace diloco;
using namespace diloco::testing;

namespace {

// Two tensors in layers 0 and 1: with P = 2 one fragment each (strided plan).
struct TwoFragments {
  ParamLayout layout;
  FragmentPlan plan;
  TwoFragments() : layout(make()), plan(FragmentPlan::strided(layout, 2)) {}
  static ParamLayout make() {
    ParamLayout l;
    l.add("a", {96}, 0, true);
    l.add("b", {160}, 1, true);
    return l;
  }
};

/// Island 1's outer gradient of 0.5 everywhere on fragment 0, committed at once (K = 1): fragment
/// 0 moves to its next round.
void commit_fragment_0(SyncerCore& s, const FragmentPlan& plan) {
  FragmentHeader h;
  h.island = 1;
  h.index = 0;
  h.tokens = h.steps = 8;
  BOOST_REQUIRE(s.receive(encode_fragment(h, CodecParams{}, std::vector<float>(plan.size(0), 0.5f)).value(), 0.0));
  BOOST_REQUIRE_EQUAL(s.poll(0.0).size(), 1u);
}

Frame global_delta_frame(int sender, std::uint64_t from, std::uint64_t to, std::size_t n, std::uint32_t p = 0) {
  FragmentHeader h;
  h.kind = FragmentKind::global_delta;
  h.island = sender;
  h.index = p;
  h.base_round = to;
  h.from_round = from;
  return encode_fragment(h, CodecParams{Encoding::int4, 64}, std::vector<float>(n, 0.01f)).value();
}

// 64 values with their initial parameters, and one chip's fixed gradient of 8 tokens per step.
struct OneChip {
  Tiny t{64};
  std::mt19937_64 g;
  const std::vector<float> init, grad;
  const ChipGradient chip;
  explicit OneChip(std::uint64_t seed) : g(seed), init(gaussian_vec(64, g, 0.1f)), grad(gaussian_vec(64, g, 1.0f)), chip{grad, 8, 1.0} {}
};

}  // namespace

BOOST_AUTO_TEST_CASE(settle_applies_queued_adoptions_at_once) {
  Tiny t;
  std::vector<float> init(4, 0.0f);
  IslandSettings is;
  is.schedule = SyncSchedule{4, 1};
  is.tau = 2;
  AdamWConfig inner;
  IslandCore island(t.layout, t.plan, is, inner, init);
  BOOST_REQUIRE(island.outer_gradient_frame(0));
  BOOST_TEST(island.awaiting(0));
  const std::vector<float> merged(4, 0.5f);
  BOOST_TEST(island.adopt(0, 1, merged));   // queued until step 0 + τ = 2
  BOOST_TEST(island.pending_adoptions() == 1u);
  BOOST_TEST(island.base_round(0) == 0u);
  BOOST_TEST(!island.awaiting(0));
  island.settle();                          // no step will come: apply it now
  BOOST_TEST(island.pending_adoptions() == 0u);
  BOOST_TEST(island.base_round(0) == 1u);
  BOOST_TEST(island.global(0)[0] == 0.5f);
}

// fragments.adopt = "rebase": a commit that holds none of the island's unmerged sends carries
// other islands' progress only, and the island adds it to its parameters, keeping its own
// unsent progress whole; a commit while its own send is outstanding is mixed (α) as before, and
// once a frame says the send is merged (merged_seq), the next commit is a rebase again. "mix"
// mixes every time. Island 1 is the other island; the syncer merges each arrival on its own.
BOOST_AUTO_TEST_CASE(rebase_keeps_unsent_progress_whole_and_mixes_while_a_send_is_outstanding) {
  OneChip f(5);
  auto& [t, g, init, grad, chip] = f;
  for (auto rule : {AdoptRule::mix, AdoptRule::rebase}) {
    BOOST_TEST_CONTEXT(name_of(rule)) {
      SyncerCore s(t.plan, init, sgd_settings(2, 1));
      IslandSettings is{0, SyncSchedule{4, 1}, 0, 0.5, CodecParams{}, true};
      is.adopt = rule;
      IslandCore a(t.layout, t.plan, is, AdamWConfig{}, init);
      a.heal(s.join_reply(0), false);
      auto step = [&] { a.apply_gradient(std::span<const ChipGradient>(&chip, 1)); };
      auto commit = [&](const Frame& f) {
        BOOST_REQUIRE(s.receive(f, 0.0));
        BOOST_REQUIRE_EQUAL(s.poll(0.0).size(), 1u);
      };
      auto other = [&] { commit(gaussian_frame(1, s.round(0), 64, g)); };
      // Adopts the frame due to island 0 and checks θ against a rebase or a mix of it.
      const SyncerCore* from = &s;  // the syncer whose Θ the frames carry
      auto adopt = [&](bool rebased, const Frame& frame) {
        const std::vector<float> before(a.params().begin(), a.params().end());
        const std::vector<float> held(a.global(0).begin(), a.global(0).end());
        BOOST_REQUIRE(a.adopt_frame(frame).value());
        const auto theta = from->params();
        double worst = 0.0;
        for (std::size_t j = 0; j < 64; ++j) {
          const double want = rebased ? before[j] + (theta[j] - held[j]) : 0.5 * before[j] + 0.5 * theta[j];
          worst = std::max(worst, std::abs(a.params()[j] - want));
        }
        BOOST_TEST(worst < 1e-6);
      };
      const bool rb = rule == AdoptRule::rebase;
      step();
      step();
      other();  // round 1: island 1's progress alone; island 0 has sent nothing
      BOOST_TEST(a.sends_settled(0));
      adopt(rb, s.frame_for(0, 0).value());
      step();
      const Frame mine = a.outer_gradient_frame(0).value();
      // Its first send of the epoch its join reply gave (1).
      BOOST_TEST(std::get<FragmentMessage>(decode_message(mine).value()).header.seq == ((std::uint64_t{1} << 32) | 1u));
      BOOST_TEST(!a.sends_settled(0));
      other();  // round 2 lacks island 0's send, which is still on its way: a mix
      adopt(false, s.frame_for(0, 0).value());
      BOOST_TEST(!a.sends_settled(0));
      commit(mine);  // round 3 merges it: a mix (it holds the island's own progress)
      const Frame third = s.frame_for(0, 0).value();
      const auto h = std::get<FragmentMessage>(decode_message(third).value()).header;
      BOOST_TEST(h.merged_seq == (std::vector<std::uint64_t>{(std::uint64_t{1} << 32) | 1u, 0}));
      adopt(false, third);
      BOOST_TEST(a.sends_settled(0));
      step();
      other();  // round 4: island 1's alone again
      adopt(rb, s.frame_for(0, 0).value());
      // A re-join that keeps θ while a send is on its way: the syncer refuses that send (its
      // progress goes out again from the new base), so no commit can hold it and the island
      // rebases at once.
      step();
      const Frame pending = a.outer_gradient_frame(0).value();
      BOOST_TEST(!a.sends_settled(0));
      a.heal(s.join_reply(0, /*keeps_local=*/true), true);
      BOOST_TEST(a.sends_settled(0));
      auto withdrawn = s.receive(pending, 0.0);
      BOOST_REQUIRE(!withdrawn);
      BOOST_TEST((withdrawn.error().code == errc::stale_round));
      other();  // round 5: island 1's alone
      adopt(rb, s.frame_for(0, 0).value());
      step();
      const Frame next = a.outer_gradient_frame(0).value();
      BOOST_TEST(std::get<FragmentMessage>(decode_message(next).value()).header.seq == ((std::uint64_t{2} << 32) | 3u));
      // The syncer restarts from its snapshot and numbers epochs from 1 again, lower than the
      // island's 2: what the island sent the dead syncer died with it, the heal starts clean,
      // and frames of the new epoch count: a commit of its own send is mixed, then it rebases.
      SyncerCore s2(t.plan, init, sgd_settings(2, 1));
      BOOST_REQUIRE(s2.restore(s.snapshot()));
      from = &s2;
      a.heal(s2.join_reply(0, true), true);
      BOOST_TEST(a.sends_settled(0));
      step();
      const Frame after = a.outer_gradient_frame(0).value();
      BOOST_TEST(std::get<FragmentMessage>(decode_message(after).value()).header.seq == ((std::uint64_t{1} << 32) | 4u));
      BOOST_REQUIRE(s2.receive(after, 0.0));
      BOOST_REQUIRE_EQUAL(s2.poll(0.0).size(), 1u);
      adopt(false, s2.frame_for(0, 0).value());
      BOOST_TEST(a.sends_settled(0));
      BOOST_REQUIRE(s2.receive(gaussian_frame(1, s2.round(0), 64, g), 0.0));
      BOOST_REQUIRE_EQUAL(s2.poll(0.0).size(), 1u);
      adopt(rb, s2.frame_for(0, 0).value());
      // An island restored from a saved state cannot know which of its saved sends are merged.
      IslandCore b(t.layout, t.plan, is, AdamWConfig{}, init);
      BOOST_TEST(b.sends_settled(0));
      BOOST_REQUIRE(b.restore(a.state()));
      BOOST_TEST(!b.sends_settled(0));
      BOOST_TEST(a.rebases() == (rb ? 4u : 0u));
      BOOST_TEST(a.mixes() == (rb ? 3u : 7u));
    }
  }
}

// fragments.adopt = "carry": a commit that holds the island's last send mixes the parameters
// the island sent, θ ← α·θ_sent + (1−α)·Θ + (θ − θ_sent), so the steps it trained while the send
// was on its way stay whole; a commit of other islands' progress alone is a rebase, and one that
// lacks a send still on its way (or comes after a heal or a restore) a mix.
BOOST_AUTO_TEST_CASE(carry_mixes_the_sent_parameters_and_keeps_the_progress_since_whole) {
  OneChip f(9);
  auto& [t, g, init, grad, chip] = f;
  SyncerCore s(t.plan, init, sgd_settings(2, 1));
  IslandSettings is{0, SyncSchedule{4, 1}, 0, 0.25, CodecParams{}, true};
  is.adopt = AdoptRule::carry;
  IslandCore a(t.layout, t.plan, is, AdamWConfig{}, init);
  a.heal(s.join_reply(0), false);
  auto step = [&] { a.apply_gradient(std::span<const ChipGradient>(&chip, 1)); };
  auto params = [&] { return std::vector<float>(a.params().begin(), a.params().end()); };
  auto commit = [&](const Frame& fr) {
    BOOST_REQUIRE(s.receive(fr, 0.0));
    BOOST_REQUIRE_EQUAL(s.poll(0.0).size(), 1u);
    BOOST_REQUIRE(a.adopt_frame(s.frame_for(0, 0).value()).value());  // τ = 0: applied at once
  };
  auto worst = [&](auto&& want) {
    double w = 0.0;
    for (std::size_t j = 0; j < 64; ++j) w = std::max(w, std::abs(double{a.params()[j]} - double(want(j))));
    return w;
  };
  step();
  step();
  const auto sent = params();
  const Frame mine = a.outer_gradient_frame(0).value();
  step();
  step();  // trained while the send is on its way
  const auto now = params();
  commit(mine);
  const auto theta = s.params();
  BOOST_TEST(worst([&](std::size_t j) { return 0.25 * sent[j] + 0.75 * theta[j] + (now[j] - sent[j]); }) < 1e-6);
  // The plain mix would have kept only a quarter of those two steps.
  BOOST_TEST(worst([&](std::size_t j) { return 0.25 * now[j] + 0.75 * theta[j]; }) > 1e-5);
  BOOST_TEST(a.carries() == 1u);
  BOOST_TEST(a.sends_settled(0));
  // Island 1's progress alone: a rebase.
  step();
  auto before = params();
  std::vector<float> held(a.global(0).begin(), a.global(0).end());
  commit(gaussian_frame(1, s.round(0), 64, g));
  auto theta2 = s.params();
  BOOST_TEST(worst([&](std::size_t j) { return before[j] + (theta2[j] - held[j]); }) < 1e-6);
  BOOST_TEST(a.rebases() == 1u);
  // A commit that lacks the send on its way: a mix.
  const Frame second = a.outer_gradient_frame(0).value();
  step();
  before = params();
  commit(gaussian_frame(1, s.round(0), 64, g));
  theta2 = s.params();
  BOOST_TEST(worst([&](std::size_t j) { return 0.25 * before[j] + 0.75 * theta2[j]; }) < 1e-6);
  BOOST_TEST(a.mixes() == 1u);
  // A restored island cannot tell which of its saved sends are merged: the commit of its send
  // is mixed, as is every commit until its heal.
  IslandCore b(t.layout, t.plan, is, AdamWConfig{}, init);
  BOOST_REQUIRE(b.restore(a.state()));
  BOOST_REQUIRE(s.receive(second, 0.0));
  BOOST_REQUIRE_EQUAL(s.poll(0.0).size(), 1u);
  BOOST_REQUIRE(b.adopt_frame(s.frame_for(0, 0).value()).value());
  BOOST_TEST(b.carries() == 0u);
  BOOST_TEST(b.mixes() == 1u);
  BOOST_TEST(a.carries() == 1u);
}

BOOST_AUTO_TEST_CASE(a_send_withdrawn_at_a_rejoin_gives_its_counters_back_to_the_next_one) {
  OneChip f(3);
  auto& [t, g, init, grad, chip] = f;
  SyncerCore s(t.plan, init, sgd_settings(2, 2));  // K = 2: island 0's send waits
  IslandCore a(t.layout, t.plan, IslandSettings{0, SyncSchedule{4, 1}, 0, 0.0, CodecParams{}, true}, AdamWConfig{}, init);
  a.heal(s.join_reply(0), false);
  auto step = [&] { a.apply_gradient(std::span<const ChipGradient>(&chip, 1)); };
  step();
  step();
  BOOST_REQUIRE(s.receive(a.outer_gradient_frame(0).value(), 0.0));  // 16 tokens in 2 steps, pending
  step();
  BOOST_TEST(a.tokens_since(0) == 8u);
  // Re-joining keeping θ: the syncer withdraws the pending send, whose progress θ still holds
  // and the next send carries again, so it weighs all three steps.
  a.heal(s.join_reply(0, true), true);
  BOOST_TEST(s.pending(0) == 0);
  BOOST_TEST(a.tokens_since(0) == 24u);
  BOOST_TEST(a.steps_since(0) == 3u);
  // With no send since that heal, a reply's counters are none of this island's sends.
  auto absurd = s.join_reply(0, true);
  absurd.fragments[0].header.steps = 1, absurd.fragments[0].header.tokens = 8;
  a.heal(absurd, true);
  BOOST_TEST(a.steps_since(0) == 3u);
  // After a send, a reply claiming more steps than the island took gives nothing back.
  (void)a.outer_gradient_frame(0).value();
  absurd.fragments[0].header.steps = 4, absurd.fragments[0].header.tokens = 32;
  a.heal(absurd, true);
  BOOST_TEST(a.steps_since(0) == 0u);
}

// A send to a syncer that died before merging it (a killed leader): the one the island re-joins
// neither holds it nor merged it, so its counters come back and the next send weighs its steps
// (before, its tokens were trained but never counted merged). A syncer past the island's round
// may have merged it: nothing comes back then.
BOOST_AUTO_TEST_CASE(a_send_lost_with_its_syncer_gives_its_counters_back_at_the_rejoin) {
  OneChip f(3);
  auto& [t, g, init, grad, chip] = f;
  const IslandSettings settings{0, SyncSchedule{4, 1}, 0, 0.0, CodecParams{}, true};
  SyncerCore dead(t.plan, init, sgd_settings(2, 1));
  IslandCore a(t.layout, t.plan, settings, AdamWConfig{}, init);
  a.heal(dead.join_reply(0), false);
  auto step = [&] { a.apply_gradient(std::span<const ChipGradient>(&chip, 1)); };
  step();
  step();
  (void)a.outer_gradient_frame(0).value();  // 16 tokens in 2 steps, lost with `dead`
  step();
  BOOST_TEST(a.tokens_since(0) == 8u);
  SyncerCore next(t.plan, init, sgd_settings(2, 1));  // a successor at the island's round
  a.heal(next.join_reply(0, true), true);
  BOOST_TEST(a.tokens_since(0) == 24u);
  BOOST_TEST(a.steps_since(0) == 3u);
  // Sent again; the syncer it re-joins next committed another island's send past its round.
  (void)a.outer_gradient_frame(0).value();
  IslandCore b(t.layout, t.plan, IslandSettings{1, SyncSchedule{4, 1}, 0, 0.0, CodecParams{}, true}, AdamWConfig{}, init);
  b.heal(next.join_reply(1), false);
  b.apply_gradient(std::span<const ChipGradient>(&chip, 1));
  BOOST_REQUIRE(next.receive(b.outer_gradient_frame(0).value(), 0.0));
  BOOST_REQUIRE_EQUAL(next.poll(0.0).size(), 1u);
  a.heal(next.join_reply(0, true), true);
  BOOST_TEST(a.steps_since(0) == 0u);
}

// A re-join onto a round past the island's whose commits may hold its own send (sent, never
// known merged: the frame died with the link) cannot tell a rebase from a mix: θ stays, as does a
// restored island's (its saved state keeps Θ_p, not the round it held). One onto the round it
// holds leaves θ alone too.
BOOST_AUTO_TEST_CASE(a_rejoin_past_an_unsettled_send_or_after_a_restore_keeps_theta) {
  OneChip f(7);
  auto& [t, g, init, grad, chip] = f;
  SyncerCore s(t.plan, init, sgd_settings(2, 1));
  const IslandSettings is{0, SyncSchedule{4, 1}, 0, 0.5, CodecParams{}, true};  // any adopt rule: the heal's is its own
  IslandCore a(t.layout, t.plan, is, AdamWConfig{}, init);
  a.heal(s.join_reply(0), false);
  auto step = [&] { a.apply_gradient(std::span<const ChipGradient>(&chip, 1)); };
  auto unchanged_by = [&](auto&& heal) {
    const std::vector<float> before(a.params().begin(), a.params().end());
    heal();
    for (std::size_t j = 0; j < 64; ++j) BOOST_TEST(a.params()[j] == before[j]);
    BOOST_TEST(a.rebases() + a.mixes() + a.carries() == 0u);
  };
  step();
  step();
  BOOST_REQUIRE(s.receive(a.outer_gradient_frame(0).value(), 0.0));
  BOOST_REQUIRE_EQUAL(s.poll(0.0).size(), 1u);  // round 1 holds it; its frame never reaches a
  step();
  BOOST_TEST(!a.sends_settled(0));
  unchanged_by([&] { a.heal(s.join_reply(0, true), true); });
  BOOST_TEST(a.base_round(0) == 1u);
  // Again at the round it holds: nothing missed.
  step();
  unchanged_by([&] { a.heal(s.join_reply(0, true), true); });
  // Restored from a saved state (rounds unknown) while the syncer moved on without it.
  BOOST_REQUIRE(s.receive(gaussian_frame(1, s.round(0), 64, g), 0.0));
  BOOST_REQUIRE_EQUAL(s.poll(0.0).size(), 1u);
  const auto saved = a.state();
  IslandCore b(t.layout, t.plan, is, AdamWConfig{}, init);
  BOOST_REQUIRE(b.restore(saved));
  const std::vector<float> kept(b.params().begin(), b.params().end());
  b.heal(s.join_reply(0, true), true);
  for (std::size_t j = 0; j < 64; ++j) BOOST_TEST(b.params()[j] == kept[j]);
  BOOST_TEST(b.base_round(0) == 2u);
}

// A re-join under way at a scheduled step skips that send (nothing goes out while a join is
// under way). The synchronous modes' rounds wait for every island's contribution, so the skipped
// one goes at the first step after the re-join, not a whole period later; the schedule's own
// steps stay due, and a fresh heal (its progress dropped) has nothing to catch up.
BOOST_AUTO_TEST_CASE(a_send_skipped_by_a_rejoin_goes_at_the_next_step) {
  OneChip f(3);
  auto& [t, g, init, grad, chip] = f;
  SyncerCore syncer(t.plan, init, sgd_settings(2, 1));
  IslandCore a(t.layout, t.plan, IslandSettings{0, SyncSchedule{4, 1}, 0, 0.0, CodecParams{}, true}, AdamWConfig{}, init);
  a.heal(syncer.join_reply(0), false);
  auto step = [&] { a.apply_gradient(std::span<const ChipGradient>(&chip, 1)); };
  for (int k = 0; k < 4; ++k) step();
  BOOST_TEST(a.due(0));  // step 4: the schedule's
  auto send_merged = [&] {
    BOOST_REQUIRE(syncer.receive(a.outer_gradient_frame(0).value(), 0.0));
    BOOST_REQUIRE_EQUAL(syncer.poll(0.0).size(), 1u);
    BOOST_REQUIRE(a.adopt_frame(syncer.frame_for(0, 0).value()).value());  // merged: settled
  };
  send_merged();
  for (int k = 0; k < 3; ++k) step();
  BOOST_TEST(!a.due(0));  // step 7
  step();
  BOOST_TEST(a.due(0));  // step 8, not sent: the island was re-joining a restarted syncer
  // Its snapshot holds the merge; the island keeps its progress.
  a.heal(syncer.join_reply(0, true), true);
  step();  // step 9
  BOOST_TEST(a.steps_since(0) == 5u);
  BOOST_TEST(a.due(0));
  send_merged();
  // That send belongs to step 8: the next falls on the schedule again, at step 12, not 13.
  step();
  BOOST_TEST(!a.due(0));
  step();
  BOOST_TEST(!a.due(0));
  step();
  BOOST_TEST(a.step() == 12);
  BOOST_TEST(a.due(0));
  // A keep-local re-join with nothing skipped: due on the schedule only.
  send_merged();
  a.heal(syncer.join_reply(0, true), true);
  step();
  BOOST_TEST(!a.due(0));  // step 13
  // A fresh heal past a scheduled step: no progress kept, nothing to catch up.
  step(), step(), step();  // step 16: due, not sent
  a.heal(syncer.join_reply(0), false);
  step();
  BOOST_TEST(a.step() == 17);
  BOOST_TEST(!a.due(0));
}

BOOST_AUTO_TEST_CASE(chip_gradients_are_weighted_by_tokens_and_readers_keep_their_copy) {
  Tiny t(2);
  std::vector<float> init(2, 1.0f);
  AdamWConfig sgdish;
  sgdish.warmup_steps = 0;
  sgdish.weight_decay = 0.0f;
  sgdish.grad_clip = 0.0f;
  IslandCore a(t.layout, t.plan, IslandSettings{0, SyncSchedule{4, 1}, 0, 0.0, CodecParams{}, true}, sgdish, init);
  IslandCore b(t.layout, t.plan, IslandSettings{0, SyncSchedule{4, 1}, 0, 0.0, CodecParams{}, true}, sgdish, init);
  std::vector<float> g1{1.0f, 1.0f}, g2{-1.0f, 3.0f}, mean{0.5f, 1.5f};  // (3·g1 + 1·g2) / 4
  const auto held = a.shared_params();
  ChipGradient two[] = {{g1, 30, 1.0}, {g2, 10, 2.0}};
  const double loss = a.apply_gradient(two);
  ChipGradient one{mean, 40, 1.25};
  b.apply_gradient(std::span<const ChipGradient>(&one, 1));
  BOOST_TEST(loss == 1.25, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(a.params()[0] == b.params()[0]);
  BOOST_TEST(a.params()[1] == b.params()[1]);
  BOOST_TEST((*held)[0] == 1.0f);  // a chip still reading the old parameters saw no change
  BOOST_TEST(a.tokens_since(0) == 40u);
  // No chip answered: no step.
  BOOST_TEST(std::isnan(a.apply_gradient({})));
  BOOST_TEST(a.step() == 1);
}

// A ChipGradient views a gradient it does not own. Built from a temporary vector, the view was
// gone by the time apply_gradient copied it (AddressSanitizer: heap-use-after-free): views of
// living vectors and spans are taken, temporary containers do not compile.
static_assert(std::is_constructible_v<ChipGradient, const std::vector<float>&, std::uint64_t, double>);
static_assert(std::is_constructible_v<ChipGradient, std::vector<float>&, std::uint64_t, double>);
static_assert(std::is_constructible_v<ChipGradient, std::span<const float>, std::uint64_t, double>);
static_assert(!std::is_constructible_v<ChipGradient, std::vector<float>, std::uint64_t, double>);
static_assert(!std::is_constructible_v<ChipGradient, std::vector<float>&&, std::uint64_t, double>);
static_assert(!std::is_constructible_v<ChipGradient, std::array<float, 4>, std::uint64_t, double>);

BOOST_AUTO_TEST_CASE(island_heals_from_join_reply) {
  Tiny t;
  std::vector<float> init(4, 0.0f);
  SyncerCore s(t.plan, init, sgd_settings(2, 2));
  for (std::uint64_t r = 0; r < 3; ++r) {
    BOOST_REQUIRE(s.receive(delta_frame(0, r, 1.0f), 0.0));
    BOOST_REQUIRE(s.receive(delta_frame(1, r, 1.0f), 0.0));
    BOOST_REQUIRE_EQUAL(s.poll(0.0).size(), 1u);
  }
  // A JoinReply crosses the wire as a frame: encode and decode it as the island would.
  auto msg = decode_message(encode_message(s.join_reply(0)));
  BOOST_REQUIRE(msg);
  const auto& reply = std::get<JoinReply>(*msg);
  std::vector<float> fresh(4, 9.0f);
  IslandCore fresh_island(t.layout, t.plan, IslandSettings{0, SyncSchedule{4, 1}, 0, 0.0, CodecParams{}, true}, AdamWConfig{}, fresh);
  fresh_island.heal(reply, /*keep_local=*/false);
  BOOST_TEST(fresh_island.base_round(0) == 3u);
  for (int j = 0; j < 4; ++j) BOOST_TEST(fresh_island.params()[j] == -3.0f);
  // A running island re-joining keeps its progress and re-bases: it trained from the syncer's
  // round 0 and missed rounds 1-3 (their broadcasts lost), which θ takes as a broadcast would,
  // a rebase (it sent nothing); its δ carries its progress alone.
  // The default rule, "mix" at α = 0, would take Θ outright at a broadcast: the heal rebases.
  IslandCore running(t.layout, t.plan, IslandSettings{1, SyncSchedule{4, 1}, 0, 0.0, CodecParams{}, true}, AdamWConfig{}, init);
  const std::vector<float> ones(4, 1.0f), zeros(4, 0.0f);  // outlive the spans the gradients hold
  ChipGradient some{ones, 8, 1.0}, none{zeros, 8, 0.0};
  running.apply_gradient(std::span<const ChipGradient>(&some, 1));
  running.apply_gradient(std::span<const ChipGradient>(&some, 1));
  const std::vector<float> before(running.params().begin(), running.params().end());
  BOOST_TEST(before[0] != 0.0f);
  running.heal(reply, /*keep_local=*/true);
  for (int j = 0; j < 4; ++j) BOOST_TEST(std::abs(running.params()[j] - (before[j] - 3.0f)) < 1e-6f);
  BOOST_TEST(running.base_round(0) == 3u);
  BOOST_TEST(running.rebases() == 1u);
  for (int j = 0; j < 4; ++j)  // Θ_p − θ_p, what it would send now: its progress, not Θ's rounds undone
    BOOST_TEST(std::abs(running.global(0)[j] - running.params()[j] + before[j]) < 1e-6f);
  for (int k = 0; k < 2; ++k) running.apply_gradient(std::span<const ChipGradient>(&none, 1));
  BOOST_REQUIRE(running.due(0));
  auto frame = running.outer_gradient_frame(0).value();
  auto r = s.receive(frame, 1.0);  // based on the syncer's current round: accepted
  BOOST_REQUIRE(r);
  BOOST_TEST(r->base_round == 3u);
  BOOST_TEST(r->tokens == 32u);
}

// An island started from the run's parameters names their digests in its join request, and the
// syncer sends none of the fragments it holds already; a fragment that moved since comes whole.
// A fresh island of another start gets every fragment.
BOOST_AUTO_TEST_CASE(a_join_request_naming_held_fragments_gets_only_those_that_moved) {
  TwoFragments t;
  std::mt19937_64 g(11);
  const auto init = gaussian_vec(t.layout.size(), g, 0.1f);
  SyncerCore s(t.plan, init, sgd_settings(2, 1));
  const IslandSettings is{0, SyncSchedule{4, 2}, 0, 0.0, CodecParams{}, true};
  IslandCore same(t.layout, t.plan, is, AdamWConfig{}, init);
  auto msg = decode_message(encode_message(s.join_reply(0, false, nullptr, same.holds())));
  BOOST_REQUIRE(msg);
  const auto& reply = std::get<JoinReply>(*msg);
  BOOST_REQUIRE_EQUAL(reply.fragments.size(), 2u);
  for (const auto& f : reply.fragments) {
    BOOST_TEST(f.header.held);
    BOOST_TEST(f.data.payload.empty());
  }
  BOOST_TEST(encode_message(reply).size() < 512u);  // the model itself did not cross
  BOOST_TEST(s.held_sent() == 2u);
  same.heal(reply, false);
  BOOST_TEST((std::vector<float>(same.params().begin(), same.params().end()) == init));
  const auto d = heal_digests(t.plan, same.params(), reply, &same.named());
  BOOST_TEST(d.island == d.global);  // the invariants' heal check holds
  BOOST_TEST(heal_digests(t.plan, same.params(), reply).island != heal_digests(t.plan, same.params(), reply).global);

  // Fragment 0 moves (a commit of island 1); the island holding round 0 gets fragment 0 whole.
  commit_fragment_0(s, t.plan);
  IslandCore later(t.layout, t.plan, is, AdamWConfig{}, init);
  auto again = std::get<JoinReply>(*decode_message(encode_message(s.join_reply(0, false, nullptr, later.holds()))));
  BOOST_TEST(!again.fragments[0].header.held);
  BOOST_TEST(again.fragments[0].header.base_round == 1u);
  BOOST_TEST(again.fragments[1].header.held);
  later.heal(again, false);
  BOOST_TEST(later.base_round(0) == 1u);
  BOOST_TEST(later.params()[0] != init[0]);  // took the moved fragment (tensor a: fragment 0)
  std::vector<float> theirs(t.plan.size(0)), mine(t.plan.size(0));
  t.plan.gather<float>(0, s.params(), theirs);
  t.plan.gather<float>(0, later.params(), mine);
  BOOST_TEST((mine == theirs));
  BOOST_TEST(s.held_sent() == 3u);

  // The island adopts a merge between its request and the reply: the held fragment is the one it
  // named (round 0, which the syncer matched), not the one it adopted meanwhile.
  {
    SyncerCore fresh(t.plan, init, sgd_settings(2, 1));
    IslandCore racing(t.layout, t.plan, is, AdamWConfig{}, init);
    const auto named = racing.holds();
    BOOST_REQUIRE(racing.adopt(0, 5, std::vector<float>(t.plan.size(0), 0.25f)));
    racing.settle();
    BOOST_REQUIRE(racing.global(0)[0] == 0.25f);
    const auto late = fresh.join_reply(0, false, nullptr, named);
    BOOST_REQUIRE(late.fragments[0].header.held);
    racing.heal(late, false);
    std::vector<float> start(t.plan.size(0)), now(t.plan.size(0));
    t.plan.gather<float>(0, init, start);
    t.plan.gather<float>(0, racing.params(), now);
    BOOST_TEST((now == start));
    BOOST_TEST((std::vector<float>(racing.global(0).begin(), racing.global(0).end()) == start));
    BOOST_TEST(racing.base_round(0) == 0u);
    const auto rd = heal_digests(t.plan, racing.params(), late, &racing.named());
    BOOST_TEST(rd.island == rd.global);
  }

  // An island restored from its saved state names the global fragments it held then: a syncer
  // still at those rounds sends none of them, one past them sends what moved.
  {
    IslandCore saved(t.layout, t.plan, is, AdamWConfig{}, init);
    BOOST_REQUIRE(saved.adopt(0, 1, std::span<const float>(theirs)));
    saved.settle();
    const auto state = saved.state();
    IslandCore restored(t.layout, t.plan, is, AdamWConfig{}, init);
    BOOST_REQUIRE(restored.restore(state));
    auto r = s.join_reply(0, true, nullptr, restored.holds());  // s: fragment 0 at round 1 (theirs)
    BOOST_TEST(r.fragments[0].header.held);
    BOOST_TEST(r.fragments[1].header.held);
    IslandState before = state;
    before.global.clear();  // a state file from before global fragments were saved: the run's start
    IslandCore old(t.layout, t.plan, is, AdamWConfig{}, init);
    BOOST_REQUIRE(old.restore(before));
    r = s.join_reply(0, true, nullptr, old.holds());
    BOOST_TEST(!r.fragments[0].header.held);
    BOOST_TEST(r.fragments[1].header.held);
  }

  // A reply to an earlier request, which named values the island no longer holds (it adopted a
  // merge and asked again since): refused, nothing changes, the island asks again.
  {
    SyncerCore fresh(t.plan, init, sgd_settings(2, 1));
    IslandCore asked_twice(t.layout, t.plan, is, AdamWConfig{}, init);
    const auto first = asked_twice.holds();
    BOOST_REQUIRE(asked_twice.adopt(0, 5, std::vector<float>(t.plan.size(0), 0.25f)));
    asked_twice.settle();
    (void)asked_twice.holds();
    const auto stale = fresh.join_reply(0, false, nullptr, first);
    BOOST_REQUIRE(stale.fragments[0].header.held);
    BOOST_TEST(!asked_twice.heal(stale, false));
    BOOST_TEST(asked_twice.global(0)[0] == 0.25f);
    BOOST_TEST(asked_twice.base_round(0) == 5u);
  }

  // Another start: nothing matches, every fragment comes whole.
  auto other = init;
  for (auto& x : other) x += 1.0f;
  IslandCore stranger(t.layout, t.plan, is, AdamWConfig{}, other);
  auto whole = s.join_reply(0, false, nullptr, stranger.holds());
  for (const auto& f : whole.fragments) BOOST_TEST(!f.header.held);
  BOOST_TEST(s.held_sent() == 6u);  // none more
}

// The syncer hashes Θ_p once per round however many islands join naming what they hold: a commit
// rehashes its fragment, and a restore forgets every digest (its Θ may differ at a round hashed).
BOOST_AUTO_TEST_CASE(join_replies_hash_each_fragment_once_per_round) {
  TwoFragments t;
  std::mt19937_64 g(12);
  const auto init = gaussian_vec(t.layout.size(), g, 0.1f);
  const IslandSettings is{0, SyncSchedule{4, 2}, 0, 0.0, CodecParams{}, true};
  const auto holds = IslandCore(t.layout, t.plan, is, AdamWConfig{}, init).holds();
  SyncerCore s(t.plan, init, sgd_settings(2, 1));
  (void)s.join_reply(0, false, nullptr, {});  // a request naming nothing: nothing to match
  BOOST_TEST(s.fragments_hashed() == 0u);
  for (int k = 0; k < 4; ++k) {
    const auto r = s.join_reply(k % 2, false, nullptr, holds);
    BOOST_TEST((r.fragments[0].header.held && r.fragments[1].header.held));
  }
  BOOST_TEST(s.fragments_hashed() == 2u);  // four joins, one hash per fragment
  commit_fragment_0(s, t.plan);
  auto r = s.join_reply(1, false, nullptr, holds);
  BOOST_TEST(!r.fragments[0].header.held);
  BOOST_TEST(r.fragments[1].header.held);
  BOOST_TEST(s.fragments_hashed() == 3u);  // fragment 0 at its new round
  (void)s.join_reply(0, false, nullptr, holds);
  BOOST_TEST(s.fragments_hashed() == 3u);

  // Restored from a syncer at the same rounds whose Θ is another: fragment 1 (round 0 in both)
  // must not match the digest of the values it had before.
  auto other = init;
  for (auto& x : other) x += 1.0f;
  SyncerCore elsewhere(t.plan, other, sgd_settings(2, 1));
  commit_fragment_0(elsewhere, t.plan);
  BOOST_REQUIRE(s.restore(elsewhere.snapshot()).has_value());
  r = s.join_reply(0, false, nullptr, holds);
  BOOST_TEST(!r.fragments[0].header.held);
  BOOST_TEST(!r.fragments[1].header.held);
  BOOST_TEST(s.fragments_hashed() == 5u);
}

// ---- lossy broadcasts: the syncer sends the quantised change of Θ̂, islands add it up ----

BOOST_AUTO_TEST_CASE(int4_broadcast_islands_hold_exactly_the_syncers_reconstruction) {
  TwoFragments w;
  std::mt19937_64 g(7);
  const auto init = gaussian_vec(w.layout.size(), g, 0.1f);
  SyncerCore syncer(w.plan, init, lossy_settings(2, Encoding::int4));
  AdamWConfig inner;
  inner.lr = 1e-2f;
  inner.warmup_steps = 0;
  std::vector<std::unique_ptr<IslandCore>> isl;
  for (int i = 0; i < 2; ++i)
    isl.push_back(std::make_unique<IslandCore>(
        w.layout, w.plan, IslandSettings{i, SyncSchedule{4, 2}, 0, 0.0, CodecParams{Encoding::int4, 64}, true}, inner, init));
  int commits = 0;
  for (long s = 1; s <= 40; ++s) {
    for (auto& island : isl) {
      const auto grads = gaussian_vec(w.layout.size(), g, 1.0f);
      ChipGradient c{grads, 64, 1.0};
      island->apply_gradient(std::span<const ChipGradient>(&c, 1));
    }
    for (int p : isl[0]->due())
      for (auto& island : isl) BOOST_REQUIRE(syncer.receive(island->outer_gradient_frame(p).value(), double(s)));
    for (const auto& c : syncer.poll(static_cast<double>(s))) {
      ++commits;
      for (int i = 0; i < 2; ++i) {
        BOOST_REQUIRE(syncer.is_due(c.fragment, i));
        const auto frame = syncer.frame_for(c.fragment, i).value();
        BOOST_TEST(!syncer.is_due(c.fragment, i));
        auto msg = decode_message(frame);
        BOOST_REQUIRE(msg);
        const auto& [h, data] = std::get<FragmentMessage>(*msg);
        BOOST_TEST((h.kind == FragmentKind::global_delta));
        BOOST_TEST(h.from_round + 1 == h.base_round);
        // int4 with block 64: 4.5 bits per value instead of 32.
        BOOST_TEST(8 * (data.payload.size() + 4 * data.scales.size()) <= 4.5 * w.plan.size(c.fragment) + 32);
        auto& island = isl[static_cast<std::size_t>(i)];
        BOOST_REQUIRE(island->adopt_frame(frame).value());
        BOOST_TEST(same_bits(island->global(c.fragment), syncer.held(c.fragment, i)));
        BOOST_TEST(island->base_round(c.fragment) == syncer.held_round(c.fragment, i));
        BOOST_TEST(syncer.held_round(c.fragment, i) == syncer.round(c.fragment));
      }
      // Both islands were sent the same changes from the same start: they hold the same Θ̂,
      // and the syncer keeps it once (one encode per commit, not one per island).
      BOOST_TEST(same_bits(syncer.held(c.fragment, 0), syncer.held(c.fragment, 1)));
      BOOST_TEST(syncer.reconstructions(c.fragment) == 1u);
    }
  }
  BOOST_TEST(commits == 20);
  // Θ̂ is an approximation of Θ, not Θ itself.
  std::vector<float> theta(w.plan.size(1));
  w.plan.gather<float>(1, syncer.params(), theta);
  const double err = relative_l2_error(theta, syncer.held(1, 0));
  BOOST_TEST_MESSAGE("int4 broadcast: ‖Θ − Θ̂‖/‖Θ‖ = " << err);
  BOOST_TEST(err > 0.0);
  BOOST_TEST(err < 0.05);
}

BOOST_AUTO_TEST_CASE(island_that_missed_a_delta_asks_to_heal_and_its_frames_go_on_from_the_heal) {
  Tiny t(128);
  std::mt19937_64 g(3);
  const auto init = gaussian_vec(128, g, 0.1f);
  SyncerCore s(t.plan, init, lossy_settings(2, Encoding::int4));
  const IslandSettings is{0, SyncSchedule{4, 1}, 0, 0.0, CodecParams{}, true};
  IslandCore a(t.layout, t.plan, is, AdamWConfig{}, init), b(t.layout, t.plan, is, AdamWConfig{}, init);
  // One commit of both islands' contributions; returns the frames made for a and b.
  auto round = [&](std::uint64_t r) {
    for (int i = 0; i < 2; ++i) BOOST_REQUIRE(s.receive(gaussian_frame(i, r, 128, g), 0.0));
    BOOST_REQUIRE_EQUAL(s.poll(0.0).size(), 1u);
    return std::make_pair(s.frame_for(0, 0).value(), s.frame_for(0, 1).value());
  };
  const auto f1 = round(0);
  BOOST_TEST(f1.first == f1.second);  // both at the same Θ̂: the same frame
  BOOST_TEST(a.adopt_frame(f1.first).value());
  BOOST_TEST(b.adopt_frame(f1.second).value());
  BOOST_TEST(!b.adopt_frame(f1.second).value());  // the same delta twice: nothing new, ignored
  const auto f2 = round(1);
  BOOST_TEST(a.adopt_frame(f2.first).value());    // b's frame of round 2 is lost
  const auto f3 = round(2);
  BOOST_TEST(a.adopt_frame(f3.first).value());
  auto missed = b.adopt_frame(f3.second);
  BOOST_REQUIRE(!missed);
  BOOST_TEST((missed.error().code == errc::missed_round));
  BOOST_TEST(b.base_round(0) == 1u);        // nothing of the delta was applied
  // The actor shell re-joins: the JoinReply carries Θ exactly, in fp32, and b's frames go on from it.
  auto msg = decode_message(encode_message(s.join_reply(1)));
  BOOST_REQUIRE(msg);
  b.heal(std::get<JoinReply>(*msg), /*keep_local=*/true);
  BOOST_TEST(b.base_round(0) == 3u);
  std::vector<float> theta(128);
  t.plan.gather<float>(0, s.params(), theta);
  BOOST_TEST(same_bits(b.global(0), theta));
  BOOST_TEST(same_bits(s.held(0, 1), theta));
  BOOST_TEST(s.reconstructions(0) == 2u);  // a's Θ̂ and b's exact heal
  const auto f4 = round(3);
  BOOST_TEST(a.adopt_frame(f4.first).value());
  BOOST_TEST(b.adopt_frame(f4.second).value());
  BOOST_TEST(same_bits(a.global(0), s.held(0, 0)));
  BOOST_TEST(same_bits(b.global(0), s.held(0, 1)));
}

BOOST_AUTO_TEST_CASE(island_refuses_a_global_delta_from_an_island_or_of_the_wrong_length) {
  Tiny t(128);
  std::vector<float> init(128, 0.0f);
  IslandCore a(t.layout, t.plan, IslandSettings{0, SyncSchedule{4, 1}, 0, 0.0, CodecParams{}, true}, AdamWConfig{}, init);
  auto spoof = a.adopt_frame(global_delta_frame(1, 0, 1, 128));
  BOOST_REQUIRE(!spoof);
  BOOST_TEST((spoof.error().code == errc::unknown_sender));
  auto short_one = a.adopt_frame(global_delta_frame(syncer_id, 0, 1, 127));
  BOOST_REQUIRE(!short_one);
  BOOST_TEST((short_one.error().code == errc::wrong_length));
  auto backwards = a.adopt_frame(global_delta_frame(syncer_id, 1, 1, 128));
  BOOST_REQUIRE(!backwards);
  BOOST_TEST((backwards.error().code == errc::malformed));
  BOOST_TEST(a.base_round(0) == 0u);
  for (float x : a.params()) BOOST_TEST(x == 0.0f);
  BOOST_TEST(a.adopt_frame(global_delta_frame(syncer_id, 0, 1, 128)).value());
  BOOST_TEST(a.global(0)[0] == 0.01f, boost::test_tools::tolerance(1e-6f));
  // An island that knows the run's island count refuses a list of merged sends longer than it.
  IslandSettings two{0, SyncSchedule{4, 1}, 0, 0.0, CodecParams{}, true};
  two.islands = 2;
  IslandCore b(t.layout, t.plan, two, AdamWConfig{}, init);
  FragmentHeader h;
  h.kind = FragmentKind::global_params;
  h.island = syncer_id;
  h.base_round = 1;
  h.merged_seq = {1, 2, 3};
  auto too_long = b.adopt_frame(encode_fragment(h, CodecParams{}, init).value());
  BOOST_REQUIRE(!too_long);
  BOOST_TEST((too_long.error().code == errc::malformed));
  BOOST_TEST(too_long.error().message().find("the run has 2") != std::string::npos);
  h.merged_seq.pop_back();
  BOOST_TEST(b.adopt_frame(encode_fragment(h, CodecParams{}, init).value()).value());
}

// ---- divergence: a NaN is reported as such, never taken for a missing answer ----

BOOST_AUTO_TEST_CASE(island_with_a_nan_loss_reports_divergence_instead_of_no_answer) {
  Tiny t;
  std::vector<float> init(4, 0.0f), grad(4, 0.0f);
  IslandCore island(t.layout, t.plan, IslandSettings{2, SyncSchedule{4, 1}, 0, 0.0, CodecParams{}, true}, AdamWConfig{},
                    init);
  ChipGradient ok{grad, 8, 1.0};
  island.apply_gradient(std::span<const ChipGradient>(&ok, 1));
  BOOST_REQUIRE(island.health());
  // The chip answered, with a NaN loss: that is divergence, and the step is not taken.
  ChipGradient nan{grad, 8, std::nan("")};
  BOOST_TEST(std::isnan(island.apply_gradient(std::span<const ChipGradient>(&nan, 1))));
  BOOST_TEST(island.step() == 1);
  BOOST_REQUIRE(!island.health());
  BOOST_TEST((island.health().error().code == errc::non_finite));
  BOOST_TEST(island.health().error().reason.find("island 2 diverged") != std::string::npos);
  BOOST_TEST(island.health().error().reason.find("at step 2") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(island_whose_outer_gradient_holds_infinity_reports_divergence_naming_the_fragment) {
  Tiny t;
  std::vector<float> init(4, 0.0f);
  IslandCore island(t.layout, t.plan, IslandSettings{1, SyncSchedule{4, 1}, 0, 0.0, CodecParams{}, true}, AdamWConfig{},
                    init);
  const std::vector<float> huge(4, std::numeric_limits<float>::infinity());
  BOOST_REQUIRE(island.adopt(0, 1, huge));  // Θ_0 = inf: δ = Θ − θ cannot be sent
  auto frame = island.outer_gradient_frame(0);
  BOOST_REQUIRE(!frame);
  BOOST_TEST((frame.error().code == errc::non_finite));
  BOOST_REQUIRE(!island.health());
  BOOST_TEST(island.health().error().reason.find("island 1 diverged: the outer gradient of fragment 0") !=
             std::string::npos);
}

// A run resumed from its state file: an island restored from the state saved after step 7 (through
// save_checkpoint and load_checkpoint) takes steps 8..13 exactly as the island that never
// stopped (same parameters to the bit: same AdamW moments, same learning rate in the warm-up),
// and counts the same progress since its last send; also for an island that had restarted once
// (its moments younger than its step). Another island's state is refused.
BOOST_AUTO_TEST_CASE(an_island_restored_from_its_saved_state_takes_the_same_steps_as_one_that_never_stopped) {
  TwoFragments t;
  std::vector<float> init(t.layout.size());
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (auto& x : init) x = nd(rng);
  std::vector<std::vector<float>> grads(13, std::vector<float>(t.layout.size()));
  for (auto& g : grads)
    for (auto& x : g) x = nd(rng);
  AdamWConfig inner;
  inner.warmup_steps = 10;
  const IslandSettings is{1, SyncSchedule{4, 2}, 0, 0.0, CodecParams{}, true};
  auto step = [&](IslandCore& island, int k) {
    ChipGradient g{grads[static_cast<std::size_t>(k)], 100 + static_cast<std::uint64_t>(k), 2.0};
    island.apply_gradient(std::span<const ChipGradient>(&g, 1));
  };
  for (const long restarted_at : {0L, 3L}) {
    BOOST_TEST_CONTEXT("island restarted at step " << restarted_at) {
      IslandCore whole(t.layout, t.plan, is, inner, init), first(t.layout, t.plan, is, inner, init);
      whole.resume_at(restarted_at);
      first.resume_at(restarted_at);
      for (int k = 0; k < 7; ++k) step(whole, k), step(first, k);
      BOOST_REQUIRE(whole.outer_gradient_frame(0));  // fragment 0 sent: its counters start over
      BOOST_REQUIRE(first.outer_gradient_frame(0));
      Checkpoint cp;
      cp.params = init;
      for (int p = 0; p < t.plan.count(); ++p) cp.momentum.emplace_back(t.plan.size(p), 0.0f);
      cp.rounds.assign(static_cast<std::size_t>(t.plan.count()), 0);
      cp.islands.push_back(first.state());
      const auto path = (std::filesystem::temp_directory_path() / ("diloco-island-state-" + std::to_string(::getpid()))).string();
      BOOST_REQUIRE(save_checkpoint(path, t.layout, t.plan, cp));
      auto back = load_checkpoint(path, t.layout, t.plan);
      std::filesystem::remove(path);
      BOOST_REQUIRE(back);
      BOOST_REQUIRE(back->islands.size() == 1u);
      BOOST_TEST(back->islands[0].step == restarted_at + 7);
      IslandCore resumed(t.layout, t.plan, is, inner, init);
      BOOST_REQUIRE(resumed.restore(back->islands[0]));
      for (int k = 7; k < 13; ++k) step(whole, k), step(resumed, k);
      BOOST_TEST(resumed.step() == whole.step());
      BOOST_TEST((std::vector<float>(resumed.params().begin(), resumed.params().end()) ==
                  std::vector<float>(whole.params().begin(), whole.params().end())));
      for (int p = 0; p < t.plan.count(); ++p) {
        BOOST_TEST(resumed.tokens_since(p) == whole.tokens_since(p));
        BOOST_TEST(resumed.steps_since(p) == whole.steps_since(p));
      }
      IslandSettings other = is;
      other.island = 2;
      IslandCore stranger(t.layout, t.plan, other, inner, init);
      auto refused = stranger.restore(back->islands[0]);
      BOOST_REQUIRE(!refused);
      BOOST_TEST((refused.error().code == errc::checkpoint_mismatch));
    }
  }
}

// train.sync_every_s: fragments fall due by the island's clock, not its step count. A slow
// island (one step per 0.25 s) and a fast one (one per 0.125 s) both send fragment 0 once a
// period (1 s) of their own time has passed: the fast one after 8 steps, the slow one after 4. Fragment
// 1's first send comes at its offset (P = 2: half a period); nothing is due before a step, and
// while a send awaits its merge the next one waits for two periods.
BOOST_AUTO_TEST_CASE(a_time_cadence_makes_islands_of_any_speed_sync_after_the_same_time) {
  TwoFragments t;
  std::vector<float> init(t.layout.size(), 0.0f);
  IslandSettings s{0, SyncSchedule{50, 2}, 0, 0.0, CodecParams{}, true};
  s.sync_every_s = 1.0;
  const std::vector<float> zeros(t.layout.size(), 0.0f);
  ChipGradient none{zeros, 8, 0.0};
  auto steps_until_due = [&](double step_s, int p, IslandCore& core, double& clock) {
    for (int k = 1; k < 100; ++k) {
      core.apply_gradient(std::span<const ChipGradient>(&none, 1));
      clock += step_s;
      core.set_time(clock);
      if (core.due(p)) return k;
    }
    return -1;
  };
  for (const auto& [step_s, first0, first1] : {std::tuple{0.125, 8, 4}, std::tuple{0.25, 4, 2}}) {
    BOOST_TEST_CONTEXT("a step every " << step_s << " s") {
      IslandCore core(t.layout, t.plan, s, AdamWConfig{}, init);
      double clock = 100.0;  // the island's clock need not start at 0
      core.set_time(clock);
      core.heal(SyncerCore(t.plan, init, SyncerSettings{}).join_reply(0), false);
      BOOST_TEST(core.due().empty());  // no step yet
      {
        IslandCore twin(t.layout, t.plan, s, AdamWConfig{}, init);
        double c2 = 100.0;
        twin.set_time(c2);
        twin.heal(SyncerCore(t.plan, init, SyncerSettings{}).join_reply(0), false);
        BOOST_TEST(steps_until_due(step_s, 1, twin, c2) == first1);  // fragment 1 at its offset
      }
      BOOST_TEST(steps_until_due(step_s, 0, core, clock) == first0);
      BOOST_REQUIRE(core.outer_gradient_frame(0).has_value());
      BOOST_TEST(!core.due(0));  // just sent
      // Awaiting its merge: due again after two periods, not one.
      const int awaiting = steps_until_due(step_s, 0, core, clock);
      BOOST_TEST(awaiting == 2 * first0);
      BOOST_REQUIRE(core.outer_gradient_frame(0).has_value());
      // A heal (a re-join) half a period later keeps the phase: due half a period after it.
      for (int k = 0; k < first0 / 2; ++k) {
        core.apply_gradient(std::span<const ChipGradient>(&none, 1));
        clock += step_s;
      }
      core.set_time(clock);
      core.heal(SyncerCore(t.plan, init, SyncerSettings{}).join_reply(0), true);
      BOOST_TEST(!core.due(0));
      BOOST_TEST(steps_until_due(step_s, 0, core, clock) == first0 / 2);
    }
  }
  // A merge still queued for τ steps holds the next send back, whatever the clock says.
  {
    IslandSettings with_tau = s;
    with_tau.tau = 3;
    IslandCore core(t.layout, t.plan, with_tau, AdamWConfig{}, init);
    double clock = 0.0;
    core.set_time(clock);
    core.heal(SyncerCore(t.plan, init, SyncerSettings{}).join_reply(0), false);
    BOOST_TEST(steps_until_due(0.5, 0, core, clock) == 2);
    BOOST_REQUIRE(core.outer_gradient_frame(0).has_value());
    const std::vector<float> merged(t.plan.size(0), 0.0f);
    BOOST_REQUIRE(core.adopt(0, 1, merged));  // arrives at once, applied at sent + τ
    core.apply_gradient(std::span<const ChipGradient>(&none, 1));
    clock += 5.0;  // far past the period
    core.set_time(clock);
    BOOST_TEST(!core.due(0));  // one step after the send: the merge still waits
    core.apply_gradient(std::span<const ChipGradient>(&none, 1));
    core.apply_gradient(std::span<const ChipGradient>(&none, 1));  // sent + τ: applied
    BOOST_TEST(core.due(0));
  }
  // A step cadence is untouched by the clock.
  IslandSettings by_steps{0, SyncSchedule{4, 2}, 0, 0.0, CodecParams{}, true};
  IslandCore core(t.layout, t.plan, by_steps, AdamWConfig{}, init);
  double clock = 0.0;
  BOOST_TEST(steps_until_due(1000.0, 0, core, clock) == 4);
}

BOOST_AUTO_TEST_CASE(a_bounded_wait_holds_the_next_step_for_a_due_merge_until_it_arrives_or_the_wait_runs_out) {
  OneChip f(11);
  auto& [t, g, init, grad, chip] = f;
  SyncerCore s(t.plan, init, sgd_settings(2, 1));
  IslandSettings is{0, SyncSchedule{4, 1}, 1, 0.25, CodecParams{}, true};
  is.adopt = AdoptRule::carry;
  is.wait_steps = 3.0;
  IslandCore a(t.layout, t.plan, is, AdamWConfig{}, init);
  a.heal(s.join_reply(0), false);
  auto step = [&] { a.apply_gradient(std::span<const ChipGradient>(&chip, 1)); };
  auto commit = [&](const Frame& fr) {
    BOOST_REQUIRE(s.receive(fr, 0.0));
    BOOST_REQUIRE_EQUAL(s.poll(0.0).size(), 1u);
    BOOST_REQUIRE(a.adopt_frame(s.frame_for(0, 0).value()).value());
  };
  step();
  const Frame mine = a.outer_gradient_frame(0).value();  // sent at step 1: its merge is due at 2
  BOOST_TEST(std::isnan(a.hold_until(1.0)));  // no step time measured yet: never holds
  BOOST_TEST(a.progress().step_seconds == 0.0);  // nor any reported to the syncer
  a.step_took(std::numeric_limits<double>::quiet_NaN());  // ignored
  a.step_took(0.01);
  BOOST_TEST(a.step_time() == 0.01);
  BOOST_TEST(a.progress().step_seconds == 0.01);  // the syncer's grace windows count in it
  BOOST_TEST(std::isnan(a.hold_until(1.0)));  // step 1: not due before step 1 + τ
  step();
  BOOST_TEST(a.hold_until(1.0) == 1.0 + 3 * 0.01);  // due and missing: three steps of 10 ms
  BOOST_TEST(a.hold_until(1.02) == 1.0 + 3 * 0.01);  // the wait counts from its first asking
  // Another island's commit does not hold this island's send: still waiting.
  commit(gaussian_frame(1, s.round(0), 64, g));
  BOOST_TEST(!a.sends_settled(0));
  BOOST_TEST(a.hold_until(1.025) == 1.0 + 3 * 0.01);
  BOOST_TEST(std::isnan(a.hold_until(1.03)));  // ran out: the island goes on
  step();
  BOOST_TEST(std::isnan(a.hold_until(1.5)));  // and never waits for that send again
  // Nor for the next one while the syncer has not answered: a syncer or link that stopped
  // answering costs one wait, not one per send.
  const Frame third = a.outer_gradient_frame(0).value();
  step();
  step();
  BOOST_TEST(std::isnan(a.hold_until(1.6)));
  commit(mine);  // arrives late, merged all the same; the send after it is still out
  BOOST_TEST(!a.sends_settled(0));
  BOOST_TEST(std::isnan(a.hold_until(1.7)));
  commit(third);  // the syncer answers: the next due merge is waited for again
  BOOST_TEST(a.sends_settled(0));
  BOOST_TEST(std::isnan(a.hold_until(2.0)));
  // The next send: its merge arrives during the wait and ends it.
  const Frame second = a.outer_gradient_frame(0).value();
  step();
  BOOST_TEST(a.hold_until(2.0) == 2.0 + 3 * 0.01);
  commit(second);
  BOOST_TEST(std::isnan(a.hold_until(2.01)));
  // wait_steps = 0 (the default): an island never holds.
  is.wait_steps = 0.0;
  IslandCore b(t.layout, t.plan, is, AdamWConfig{}, init);
  b.heal(s.join_reply(0), false);
  b.step_took(0.01);
  b.apply_gradient(std::span<const ChipGradient>(&chip, 1));
  BOOST_REQUIRE(b.outer_gradient_frame(0));
  b.apply_gradient(std::span<const ChipGradient>(&chip, 1));
  b.apply_gradient(std::span<const ChipGradient>(&chip, 1));
  BOOST_TEST(std::isnan(b.hold_until(3.0)));
}
