// AdamW, its schedule and clipping, and the outer optimizers against hand-computed values.
#define BOOST_TEST_MODULE optim
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <vector>

#include "diloco/optim.hpp"

using namespace diloco;

namespace {
ParamLayout two_tensors() {
  ParamLayout l;
  l.add("w", {2}, 0, /*decay=*/true);
  l.add("b", {1}, 0, /*decay=*/false);
  return l;
}
}  // namespace

BOOST_AUTO_TEST_CASE(adamw_two_steps_match_hand_computed_values) {
  auto layout = two_tensors();
  AdamWConfig c;
  c.lr = 0.1f;
  c.warmup_steps = 0;
  c.grad_clip = 0.0f;
  c.weight_decay = 0.1f;
  AdamW opt(layout, c);
  std::vector<float> p{1.0f, -2.0f, 3.0f};
  std::vector<float> g{0.5f, -0.1f, 0.2f};
  opt.step(p, g);
  // Step 1: mhat = g, vhat = g², so the update is lr·sign(g); decay lr·wd·p on "w" only.
  BOOST_TEST(p[0] == 1.0f - 0.1f - 0.01f, boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(p[1] == -2.0f + 0.1f + 0.02f, boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(p[2] == 3.0f - 0.1f, boost::test_tools::tolerance(1e-6f));
  g = {1.0f, 0.3f, 0.2f};
  opt.step(p, g);
  // Step 2 for w[0]: m = 0.9·0.05 + 0.1·1 = 0.145, v = 0.95·0.0125 + 0.05·1 = 0.061875,
  // mhat = 0.145/0.19, vhat = 0.061875/0.0975.
  const double ratio = (0.145 / 0.19) / (std::sqrt(0.061875 / 0.0975) + 1e-8);
  BOOST_TEST(p[0] == 0.89 - 0.1 * ratio - 0.01 * 0.89, boost::test_tools::tolerance(1e-5));
  BOOST_TEST(opt.steps_taken() == 2);
}

BOOST_AUTO_TEST_CASE(warmup_is_linear_then_cosine_reaches_the_floor) {
  AdamWConfig c;
  c.lr = 1.0f;
  c.warmup_steps = 10;
  c.decay_steps = 100;
  c.min_lr_ratio = 0.1f;
  BOOST_TEST(learning_rate(c, 1) == 0.1f, boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(learning_rate(c, 10) == 1.0f, boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(learning_rate(c, 60) == 0.55f, boost::test_tools::tolerance(1e-5f));  // half way: mid cosine
  BOOST_TEST(learning_rate(c, 110) == 0.1f, boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(learning_rate(c, 500) == 0.1f, boost::test_tools::tolerance(1e-6f));
  c.decay_steps = 0;
  BOOST_TEST(learning_rate(c, 500) == 1.0f);
}

// A restarted island (step 60 of the run) must not start the schedule over at its peak: the
// rate follows the schedule from step 61 on, ramped up over warmup_steps for the new moments.
BOOST_AUTO_TEST_CASE(resumed_schedule_goes_on_from_the_step_with_a_fresh_warmup) {
  auto layout = two_tensors();
  AdamWConfig c;
  c.lr = 1.0f;
  c.warmup_steps = 10;
  c.decay_steps = 100;
  AdamW fresh(layout, c);
  BOOST_TEST(fresh.next_lr() == learning_rate(c, 1));
  AdamW resumed(layout, c);
  resumed.resume_schedule(60);
  BOOST_TEST(resumed.next_lr() == learning_rate(c, 61) / 10.0f, boost::test_tools::tolerance(1e-6f));
  std::vector<float> p{1.0f, -2.0f, 3.0f}, g{0.5f, -0.1f, 0.2f};
  for (int k = 0; k < 9; ++k) {
    auto gk = g;
    resumed.step(p, gk);
  }
  BOOST_TEST(resumed.next_lr() == learning_rate(c, 70), boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(resumed.next_lr() < 0.6f);  // past mid-cosine, not back at the peak of 1
}

BOOST_AUTO_TEST_CASE(clipping_scales_the_gradient_to_the_global_norm) {
  auto layout = two_tensors();
  AdamWConfig c;
  c.grad_clip = 1.0f;
  c.warmup_steps = 0;
  AdamW opt(layout, c);
  std::vector<float> p{0, 0, 0}, g{3.0f, 0.0f, 4.0f};
  const float norm = opt.step(p, g);
  BOOST_TEST(norm == 5.0f, boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(g[0] == 0.6f, boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(g[2] == 0.8f, boost::test_tools::tolerance(1e-6f));
}

BOOST_AUTO_TEST_CASE(the_global_norm_sums_every_element_whatever_the_length) {
  // global_norm adds eight lanes and then a tail: every length around the lane width, and one
  // large enough for the lanes to matter, against a plain sum in long double.
  for (std::size_t n : {0u, 1u, 7u, 8u, 9u, 15u, 16u, 17u, 1003u}) {
    std::vector<float> g(n);
    long double ref = 0.0L;
    for (std::size_t i = 0; i < n; ++i) {
      g[i] = static_cast<float>((i % 7) + 1) * (i % 2 ? -0.25f : 0.5f);
      ref += static_cast<long double>(g[i]) * g[i];
    }
    BOOST_TEST(global_norm(g) == static_cast<double>(std::sqrt(ref)), boost::test_tools::tolerance(1e-12));
  }
}

BOOST_AUTO_TEST_CASE(nesterov_two_steps_match_hand_computed_values) {
  OuterOptimizer opt(1, OuterConfig{});  // lr 0.7, momentum 0.9
  std::vector<float> theta{1.0f};
  std::vector<double> d{0.5};
  opt.step(theta, d);  // m = 0.5; θ = 1 − 0.7(0.5 + 0.45)
  BOOST_TEST(theta[0] == 0.335f, boost::test_tools::tolerance(1e-6f));
  d = {0.2};
  opt.step(theta, d);  // m = 0.65; θ = 0.335 − 0.7(0.2 + 0.585)
  BOOST_TEST(theta[0] == -0.2145f, boost::test_tools::tolerance(1e-5f));
}

BOOST_AUTO_TEST_CASE(sgd_lr1_momentum0_lands_exactly_on_the_mean) {
  OuterConfig c;
  c.kind = "sgd";
  c.lr = 1.0f;
  c.momentum = 0.0f;
  OuterOptimizer opt(3, c);
  std::vector<float> theta{0.1f, -3.0e-4f, 7.0f};
  const std::vector<float> local{0.0999f, 2.0e-5f, -1.0f};
  std::vector<double> d(3);
  for (int i = 0; i < 3; ++i) d[i] = static_cast<double>(theta[i]) - local[i];
  opt.step(theta, d);
  for (int i = 0; i < 3; ++i) BOOST_TEST(theta[i] == local[i]);
}

BOOST_AUTO_TEST_CASE(delayed_nesterov_defers_the_momentum_step) {
  OuterConfig c;
  c.kind = "delayed_nesterov";
  c.delay = 2;
  OuterOptimizer opt(1, c);
  std::vector<float> theta{1.0f};
  std::vector<double> d{0.4};
  opt.step(theta, d);
  BOOST_TEST(theta[0] == 1.0f);  // eager share 0: nothing moves until `delay` contributions
  d = {0.6};
  opt.step(theta, d);  // mean 0.5: m = 0.5; θ = 1 − 0.7(0.9·0.5 + 0.5)
  BOOST_TEST(theta[0] == 1.0f - 0.7f * 0.95f, boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(opt.momentum()[0] == 0.5f, boost::test_tools::tolerance(1e-6f));
}

BOOST_AUTO_TEST_CASE(delayed_nesterov_eager_share_moves_at_once_and_totals_match) {
  OuterConfig c;
  c.kind = "delayed_nesterov";
  c.delay = 2;
  c.eager = 0.5f;
  OuterOptimizer opt(1, c);
  std::vector<float> theta{1.0f};
  std::vector<double> d{0.4};
  opt.step(theta, d);
  BOOST_TEST(theta[0] == 1.0f - 0.7f * 0.5f * 0.4f, boost::test_tools::tolerance(1e-6f));
  d = {0.6};
  opt.step(theta, d);  // the same total as without the eager share
  BOOST_TEST(theta[0] == 1.0f - 0.7f * 0.95f, boost::test_tools::tolerance(1e-6f));
}

BOOST_AUTO_TEST_CASE(bad_optimizer_settings_name_the_key) {
  OuterConfig c;
  c.kind = "adam";
  auto e = validate(c);
  BOOST_REQUIRE(!e.empty());
  BOOST_TEST(e.front().find("outer.kind") == 0u);
  AdamWConfig a;
  a.beta2 = 1.5f;
  e = validate(a);
  BOOST_REQUIRE(e.size() == 1u);
  BOOST_TEST(e.front().find("inner.beta2") == 0u);
}

BOOST_AUTO_TEST_CASE(restored_outer_optimizer_continues_identically) {
  OuterConfig c;
  c.kind = "delayed_nesterov";
  c.delay = 3;
  OuterOptimizer a(2, c);
  std::vector<float> ta{1.0f, 2.0f};
  std::vector<double> d{0.1, -0.2};
  for (int i = 0; i < 4; ++i) a.step(ta, d);  // one momentum step, one contribution pending
  OuterOptimizer b(2, c);
  b.restore(a.steps_taken(), a.momentum(), a.pending_sum(), a.pending_count());
  std::vector<float> tb = ta;
  for (int i = 0; i < 2; ++i) {
    a.step(ta, d);
    b.step(tb, d);
  }
  BOOST_TEST(ta == tb, boost::test_tools::per_element());
  BOOST_CHECK_THROW(b.restore(0, std::vector<float>(3)), std::invalid_argument);
}
