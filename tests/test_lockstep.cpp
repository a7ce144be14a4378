// train.batch is per island: an island's chips split its batch, so the actor runtime with several
// chips per island trains the tokens of the reference loops and takes their steps (the golden
// model), on CAF's deterministic test coordinator. No sleeping.
#define BOOST_TEST_MODULE lockstep
#include <boost/test/unit_test.hpp>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/atom.hpp>
#include <caf/exit_reason.hpp>
#include <caf/send.hpp>

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "diloco/actors/chip_pool.hpp"
#include "diloco/actors/runtime.hpp"
#include "diloco/data.hpp"
#include "diloco/island_core.hpp"
#include "diloco/loops.hpp"
#include "coordinated.hpp"
#include "core_fixtures.hpp"

using namespace diloco;
using namespace diloco::actors;

namespace {

RunConfig lockstep_config(const std::string& mode, int chips, int P, int tau) {
  auto c = diloco::testing::lockstep_run(mode, P, tau);
  c.train.eval_windows = 2;
  c.inner.warmup_steps = 2;
  c.islands.chips = chips;
  c.quorum.min_islands = 2;
  c.quorum.grace = GraceRule::none;
  c.supervision.backoff_initial_s = 0.0;
  c.supervision.backoff_max_s = 0.0;
  return c;
}

/// The runtime on the test coordinator, run until every island is done.
struct Run {
  diloco::testing::Coordinated co;
  std::shared_ptr<Runtime> rt;
  std::vector<Event> events;
  caf::actor root;

  explicit Run(RunConfig c) {
    BOOST_REQUIRE(validate(c).empty());
    rt = std::make_shared<Runtime>(std::move(c), [this](const Event& e) { events.push_back(e); });
    root = spawn_runtime(*co.sys, rt);
    co.settle_until_done(*rt);
    BOOST_REQUIRE_MESSAGE(rt->tally().islands_done == rt->cfg.train.islands, "the run did not finish");
    for (const auto& v : co.end_of_run(*rt)) BOOST_ERROR("invariant broken (" << to_string(v.kind) << "): " << v.what);
  }
  ~Run() {
    caf::anon_send_exit(root, caf::exit_reason::user_shutdown);
    co.sched->run();
  }
  std::vector<float> global() {
    return rt->syncer.global().first;
  }
};

/// The synchronous modes on the actors with `chips` chips per island (`counts`: per island)
/// against the reference loop: same global parameters, same tokens, every chip in every step.
void check_matches_reference(const std::string& mode, int chips, int P, int tau, std::vector<int> counts = {},
                             int batch = 4) {
  auto c = lockstep_config(mode, chips, P, tau);
  c.islands.counts = std::move(counts);
  c.train.batch = batch;
  const auto ref = run_reference(c);
  Run run(c);
  const auto got = run.global();
  BOOST_REQUIRE_EQUAL(got.size(), ref.params.size());
  double worst = 0.0;
  for (std::size_t j = 0; j < got.size(); ++j) worst = std::max(worst, std::abs(double(got[j]) - double(ref.params[j])));
  BOOST_TEST_MESSAGE(mode << " P=" << P << " tau=" << tau << ", chips " << c.islands.chips_of(0) << "+"
                          << c.islands.chips_of(1) << ", batch " << batch << " on actors: max |actors - reference| = "
                          << worst);
  BOOST_TEST(worst <= 1e-5);
  BOOST_TEST(run.rt->syncer.round() == static_cast<std::uint64_t>(c.train.steps / c.train.H));
  // The islands trained train.batch windows a step between them, as the reference loop does.
  BOOST_TEST(run.rt->tally().tokens == ref.tokens);
  BOOST_TEST(ref.tokens == std::uint64_t(c.train.islands) * c.train.steps * c.train.batch * c.model.seq_len);
  int steps = 0;
  for (const auto& e : run.events)
    if (e.kind == Event::Kind::step) {
      ++steps;
      BOOST_TEST(e.chips == c.islands.chips_of(e.island));
    }
  BOOST_TEST(steps == c.train.islands * c.train.steps);
}

Batch random_batch(int B, int T, std::uint64_t seed) {
  const auto corpus = Corpus::make(DataConfig{});
  auto shard = corpus.shard(static_cast<int>(seed % 3), 3);
  Batch b;
  for (std::uint64_t k = 0; k <= seed; ++k) shard->next(B, T, b);
  return b;
}

}  // namespace

// ---- the split itself ----

BOOST_AUTO_TEST_CASE(chip_shares_cover_the_island_batch_in_order) {
  const Batch b = random_batch(5, 8, 1);
  for (int chips = 1; chips <= 7; ++chips) {
    BOOST_TEST_CONTEXT(chips << " chips") {
      std::vector<std::uint32_t> joined;
      std::vector<int> sizes;
      for (int c = 0; c < chips; ++c) {
        const Batch s = chip_share(b, c, chips);
        BOOST_TEST(s.T == b.T);
        BOOST_TEST(s.tokens.size() == static_cast<std::size_t>(s.B) * (s.T + 1));
        sizes.push_back(s.B);
        joined.insert(joined.end(), s.tokens.begin(), s.tokens.end());
      }
      BOOST_TEST(joined == b.tokens);
      // As even as can be, the larger shares first.
      BOOST_TEST(*std::max_element(sizes.begin(), sizes.end()) - *std::min_element(sizes.begin(), sizes.end()) <= 1);
      BOOST_TEST(std::is_sorted(sizes.rbegin(), sizes.rend()));
    }
  }
  BOOST_CHECK_THROW(chip_share(b, 2, 2), std::invalid_argument);
}

// The island's step views its chips' replies (gradients_of): the replies must outlive the views,
// so a temporary vector of replies is refused at compile time.
template <class Results>
concept viewable_replies = requires(Results&& r) { diloco::actors::gradients_of(std::forward<Results>(r)); };
static_assert(viewable_replies<const std::vector<diloco::actors::ChipResult>&>);
static_assert(!viewable_replies<std::vector<diloco::actors::ChipResult>>);

// Uneven shares (5 windows on 2, 3 or 4 chips) and empty ones (on 7 chips) combined by tokens
// give the gradient and loss of the whole batch.
BOOST_AUTO_TEST_CASE(an_uneven_split_combined_by_tokens_is_the_gradient_of_the_whole_batch) {
  ModelConfig mc;
  mc.kind = "mlp";
  mc.seq_len = 8;
  mc.n_embd = 8;
  mc.hidden = 16;
  mc.context = 2;
  auto model = make_model(mc);
  std::vector<float> params(model->layout().size());
  model->init(params, 3);
  const Batch b = random_batch(5, mc.seq_len, 2);
  std::vector<float> whole(params.size());
  const double whole_loss = model->loss_and_grad(params, b, whole);
  for (int chips : {2, 3, 4, 7}) {
    BOOST_TEST_CONTEXT(chips << " chips") {
      std::vector<std::vector<float>> grads(static_cast<std::size_t>(chips), std::vector<float>(params.size()));
      std::vector<ChipGradient> g;
      for (int c = 0; c < chips; ++c) {
        const Batch s = chip_share(b, c, chips);
        auto& out = grads[static_cast<std::size_t>(c)];
        const double loss = s.B > 0 ? model->loss_and_grad(params, s, out) : 0.0;
        g.push_back({out, s.num_targets(), loss});
      }
      std::vector<float> combined;
      std::uint64_t tokens = 0;
      const double loss = combine_chips(g, combined, tokens);
      BOOST_TEST(tokens == b.num_targets());
      BOOST_TEST(std::abs(loss - whole_loss) <= 1e-5 * std::abs(whole_loss));
      double worst = 0.0, scale = 0.0;
      for (std::size_t j = 0; j < whole.size(); ++j) {
        worst = std::max(worst, std::abs(double(combined[j]) - double(whole[j])));
        scale = std::max(scale, std::abs(double(whole[j])));
      }
      BOOST_TEST(worst <= 1e-6 * scale);
    }
  }
}

// ---- the actors with several chips per island against the reference loops ----

BOOST_AUTO_TEST_CASE(diloco_with_two_chips_per_island_on_actors_matches_reference_loop) {
  check_matches_reference("diloco", 2, 1, 0);
}
BOOST_AUTO_TEST_CASE(streaming_with_two_chips_per_island_on_actors_matches_reference_loop) {
  check_matches_reference("streaming", 2, 2, 0);
}
BOOST_AUTO_TEST_CASE(streaming_with_overlap_and_two_chips_per_island_on_actors_matches_reference_loop) {
  check_matches_reference("streaming", 2, 2, 2);
}
BOOST_AUTO_TEST_CASE(ddp_with_two_chips_per_island_on_actors_matches_reference_loop) {
  check_matches_reference("ddp", 2, 1, 0);
}
// Island 0 has one chip, island 1 three: 4 windows split 2 + 1 + 1, weighted by tokens.
BOOST_AUTO_TEST_CASE(islands_of_different_sizes_with_an_uneven_split_match_reference_loop) {
  check_matches_reference("diloco", 3, 1, 0, {1, 3});
}
// 2 windows on 3 chips: one chip's share is empty, and it still answers every step.
BOOST_AUTO_TEST_CASE(more_chips_than_windows_still_match_reference_loop) {
  check_matches_reference("streaming", 3, 2, 0, {}, 2);
}
