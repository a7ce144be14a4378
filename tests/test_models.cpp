// The built-in models: layouts, deterministic init, gradients against finite differences,
// float/double agreement, that gradient descent actually learns, and the eval loss with its error.
#define BOOST_TEST_MODULE models
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "bigram_model.hpp"
#include "diloco/config.hpp"
#include "diloco/gpt.hpp"
#include "diloco/loops.hpp"
#include "diloco/model_registry.hpp"
#include "diloco/mlp.hpp"
#include "diloco/model.hpp"
#include "diloco/params.hpp"
#include "diloco/rng.hpp"

using namespace diloco;

namespace {

ModelConfig tiny_gpt() {
  ModelConfig c;
  c.kind = "gpt";
  c.n_embd = 16;
  c.n_layer = 2;
  c.n_head = 2;
  c.seq_len = 10;  // > T below, so unused wpe rows are checked too
  return c;
}

ModelConfig tiny_mlp() {
  ModelConfig c;
  c.kind = "mlp";
  c.n_embd = 8;
  c.context = 3;
  c.hidden = 16;
  return c;
}

Batch random_batch(int B, int T, std::uint64_t seed) {
  Batch b;
  b.B = B;
  b.T = T;
  b.tokens.resize(static_cast<std::size_t>(B) * (T + 1));
  Rng rng(seed);
  for (auto& t : b.tokens) t = static_cast<std::uint8_t>(rng.below(256));
  return b;
}

/// B windows of a repeated sentence at different offsets: easy to memorise.
Batch text_batch(int B, int T) {
  const std::string text = "the quick brown fox jumps over the lazy dog. ";
  Batch b;
  b.B = B;
  b.T = T;
  for (int i = 0; i < B; ++i)
    for (int t = 0; t <= T; ++t)
      b.tokens.push_back(static_cast<std::uint8_t>(text[(i * 7 + t) % text.size()]));
  return b;
}

/// Moves every parameter off its init (biases and LayerNorm gains included) so that no
/// gradient is trivially zero or symmetric.
void perturb(std::vector<double>& p, std::uint64_t seed, double scale) {
  Rng rng(seed);
  for (auto& x : p) x += scale * rng.normal();
}

/// Compares analytic gradients of `net` with central differences on up to `per_tensor`
/// elements of every tensor; returns the largest relative error over all tensors.
template <class Net>
double gradient_check(Net& net, std::vector<double>& params, const Batch& batch, int per_tensor) {
  std::vector<double> grads(params.size());
  net.loss_and_grad(params, batch, grads);
  const double eps = 1e-5;
  double worst = 0.0;
  const auto& layout = net.layout();
  for (std::size_t ti = 0; ti < layout.tensors().size(); ++ti) {
    const TensorSpec& t = layout[ti];
    const std::size_t step = std::max<std::size_t>(1, t.size / per_tensor);
    double max_rel = 0.0, max_abs_grad = 0.0;
    for (std::size_t k = (ti * 7) % step; k < t.size; k += step) {
      const std::size_t i = t.offset + k;
      const double saved = params[i];
      params[i] = saved + eps;
      const double up = net.loss(params, batch);
      params[i] = saved - eps;
      const double down = net.loss(params, batch);
      params[i] = saved;
      const double numeric = (up - down) / (2 * eps);
      const double analytic = grads[i];
      // Floor on the denominator: tiny gradients (the key bias's is exactly 0, since softmax
      // ignores a per-row constant) are held to an absolute error of 1e-9 instead.
      const double denom = std::max(std::abs(numeric) + std::abs(analytic), 1e-4);
      max_rel = std::max(max_rel, std::abs(numeric - analytic) / denom);
      max_abs_grad = std::max(max_abs_grad, std::abs(analytic));
    }
    BOOST_TEST_MESSAGE(t.name << ": max rel err " << max_rel << " (max |grad| " << max_abs_grad
                              << ")");
    BOOST_TEST(max_rel < 1e-5, t.name << " gradient mismatch: " << max_rel);
    worst = std::max(worst, max_rel);
  }
  return worst;
}

template <class Net>
double descend(Net& net, std::vector<float>& params, const Batch& batch, int steps, float lr) {
  std::vector<float> grads(params.size());
  for (int s = 0; s < steps; ++s) {
    net.loss_and_grad(params, batch, grads);
    for (std::size_t i = 0; i < params.size(); ++i) params[i] -= lr * grads[i];
  }
  return net.loss(params, batch);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(layouts)

BOOST_AUTO_TEST_CASE(param_layout_assigns_running_offsets_and_finds_names) {
  ParamLayout l;
  BOOST_TEST(l.max_layer() == -1);
  BOOST_TEST(l.add("a", {2, 3}, -1, true, true) == 0u);
  BOOST_TEST(l.add("b", {4}, 0, false) == 1u);
  BOOST_TEST(l.add("c", {5}, 3, false) == 2u);
  BOOST_TEST(l.size() == 15u);
  BOOST_TEST(l[1].offset == 6u);
  BOOST_TEST(l[2].offset == 10u);
  BOOST_TEST(l.index_of("c") == 2u);
  BOOST_TEST(l.max_layer() == 3);
  BOOST_CHECK_THROW(l.index_of("nope"), std::out_of_range);
  std::vector<float> flat(l.size());
  BOOST_TEST(l.view(std::span<float>(flat), 2).size() == 5u);
}

BOOST_AUTO_TEST_CASE(gpt_layout_names_layers_and_flags_every_tensor) {
  Gpt<float> net(tiny_gpt());
  const auto& l = net.layout();
  const int C = 16;
  BOOST_TEST(l.tensors().size() == 2u + 12u * 2u + 2u);
  BOOST_TEST(l[l.index_of("wte")].embedding);
  BOOST_TEST(l[l.index_of("wte")].decay);
  BOOST_TEST(l[l.index_of("wte")].layer == -1);
  BOOST_TEST(l[l.index_of("wpe")].size == 10u * C);
  BOOST_TEST(l[l.index_of("h.1.attn.qkv.w")].layer == 1);
  BOOST_TEST(l[l.index_of("h.1.attn.qkv.w")].size == 3u * C * C);
  BOOST_TEST(l[l.index_of("h.0.mlp.proj.w")].decay);
  BOOST_TEST(!l[l.index_of("h.0.mlp.proj.b")].decay);
  BOOST_TEST(!l[l.index_of("h.0.ln1.w")].decay);
  BOOST_TEST(!l[l.index_of("h.0.ln1.w")].embedding);
  BOOST_TEST(l[l.index_of("lnf.b")].layer == 2);
  BOOST_TEST(l.max_layer() == 2);
  // 12·L·C² + 13·L·C (biases, norms) + 2C (lnf) + (V + T)·C
  BOOST_TEST(l.size() == 12u * 2 * C * C + 13u * 2 * C + 2u * C + (256u + 10u) * C);
}

BOOST_AUTO_TEST_CASE(mlp_layout_has_embedding_and_two_layers) {
  Mlp<float> net(tiny_mlp());
  const auto& l = net.layout();
  BOOST_TEST(l[l.index_of("emb")].embedding);
  BOOST_TEST(l[l.index_of("fc1.w")].layer == 0);
  BOOST_TEST(l[l.index_of("fc1.w")].size == 16u * 3 * 8);
  BOOST_TEST(l[l.index_of("fc2.b")].layer == 1);
  BOOST_TEST(!l[l.index_of("fc2.b")].decay);
  BOOST_TEST(l.max_layer() == 1);
}

BOOST_AUTO_TEST_CASE(bad_configs_are_rejected_naming_the_key) {
  auto message_of = [](ModelConfig c) -> std::string {
    try {
      make_model(c);
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "";
  };
  ModelConfig c;
  c.kind = "x";
  BOOST_TEST(message_of(c).find("model.kind") != std::string::npos);
  c = ModelConfig{};
  c.n_head = 3;
  BOOST_TEST(message_of(c).find("model.n_embd") != std::string::npos);
  c = ModelConfig{};
  c.n_layer = 0;
  BOOST_TEST(message_of(c).find("model.n_layer") != std::string::npos);
  c = tiny_mlp();
  c.context = 0;
  BOOST_TEST(message_of(c).find("model.context") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(batch_longer_than_seq_len_is_rejected) {
  auto m = make_model(tiny_gpt());
  std::vector<float> p(m->layout().size());
  m->init(p, 1);
  BOOST_CHECK_THROW(m->loss(p, random_batch(1, 11, 1)), std::invalid_argument);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(init)

BOOST_AUTO_TEST_CASE(same_seed_same_params_other_seed_other_params) {
  for (const ModelConfig& cfg : {ModelConfig{}, tiny_mlp()}) {
    auto m = make_model(cfg);
    std::vector<float> a(m->layout().size()), b(a.size()), c(a.size());
    m->init(a, 42);
    m->init(b, 42);
    m->init(c, 43);
    BOOST_TEST(a == b);
    BOOST_TEST(a != c);
  }
}

BOOST_AUTO_TEST_CASE(gpt_init_follows_gpt2_scheme) {
  ModelConfig cfg;  // C=128, L=4
  Gpt<double> net(cfg);
  std::vector<double> p(net.layout().size());
  net.init(p, 7);
  auto stddev = [&](const std::string& name) {
    auto v = net.layout().view(std::span<double>(p), net.layout().index_of(name));
    double s = 0;
    for (double x : v) s += x * x;
    return std::sqrt(s / v.size());
  };
  BOOST_TEST(stddev("wte") == 0.02, boost::test_tools::tolerance(0.05));
  BOOST_TEST(stddev("h.0.attn.qkv.w") == 0.02, boost::test_tools::tolerance(0.05));
  BOOST_TEST(stddev("h.3.mlp.proj.w") == 0.02 / std::sqrt(8.0), boost::test_tools::tolerance(0.05));
  BOOST_TEST(stddev("h.2.ln2.w") == 1.0);
  BOOST_TEST(stddev("h.2.mlp.fc.b") == 0.0);
}

BOOST_AUTO_TEST_CASE(initial_gpt_loss_is_near_uniform) {
  auto m = make_model(ModelConfig{});
  std::vector<float> p(m->layout().size());
  m->init(p, 3);
  const float loss = m->loss(p, random_batch(4, 64, 5));
  BOOST_TEST_MESSAGE("initial GPT loss " << loss << " vs ln 256 = " << std::log(256.0));
  BOOST_TEST(std::abs(loss - std::log(256.0)) < 0.1);
}

BOOST_AUTO_TEST_CASE(initial_mlp_loss_is_near_uniform) {
  auto m = make_model(tiny_mlp());
  std::vector<float> p(m->layout().size());
  m->init(p, 3);
  BOOST_TEST(std::abs(m->loss(p, random_batch(4, 16, 5)) - std::log(256.0)) < 0.1);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(gradients)

BOOST_AUTO_TEST_CASE(gpt_gradients_match_finite_differences_for_every_tensor) {
  ModelConfig cfg = tiny_gpt();
  cfg.init_std = 0.3f;  // sharp attention, so the softmax paths carry real gradient
  Gpt<double> net(cfg);
  std::vector<double> p(net.layout().size());
  net.init(p, 11);
  perturb(p, 12, 0.1);
  const double worst = gradient_check(net, p, random_batch(2, 8, 13), 20);
  BOOST_TEST_MESSAGE("GPT worst relative error " << worst);
}

BOOST_AUTO_TEST_CASE(gpt_gradients_match_for_odd_sizes_and_full_context) {
  ModelConfig cfg = tiny_gpt();
  cfg.n_embd = 12;  // head size 4, nothing a multiple of a SIMD width
  cfg.n_head = 3;
  cfg.n_layer = 1;
  cfg.seq_len = 5;
  cfg.init_std = 0.3f;
  Gpt<double> net(cfg);
  std::vector<double> p(net.layout().size());
  net.init(p, 14);
  perturb(p, 15, 0.1);
  const double worst = gradient_check(net, p, random_batch(3, 5, 16), 10);
  BOOST_TEST_MESSAGE("GPT (C=12, NH=3) worst relative error " << worst);
}

BOOST_AUTO_TEST_CASE(gpt_gradients_overwrite_whatever_the_buffer_held) {
  // The Model contract: loss_and_grad overwrites grads, so a buffer left with NaN (or a previous
  // step's values) changes nothing.
  Gpt<float> net(tiny_gpt());
  std::vector<float> p(net.layout().size());
  net.init(p, 31);
  const auto batch = random_batch(2, 8, 32);
  std::vector<float> clean(p.size(), 0.0f), dirty(p.size(), std::numeric_limits<float>::quiet_NaN());
  const float a = net.loss_and_grad(p, batch, clean);
  const float b = net.loss_and_grad(p, batch, dirty);
  BOOST_TEST(a == b);
  BOOST_TEST(std::all_of(dirty.begin(), dirty.end(), [](float x) { return std::isfinite(x); }));
  BOOST_TEST(clean == dirty, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(mlp_gradients_match_finite_differences_for_every_tensor) {
  ModelConfig cfg = tiny_mlp();
  cfg.init_std = 0.3f;
  Mlp<double> net(cfg);
  std::vector<double> p(net.layout().size());
  net.init(p, 21);
  perturb(p, 22, 0.1);
  const double worst = gradient_check(net, p, random_batch(3, 5, 23), 20);
  BOOST_TEST_MESSAGE("MLP worst relative error " << worst);
}

BOOST_AUTO_TEST_CASE(float_and_double_models_agree) {
  ModelConfig cfg = tiny_gpt();
  cfg.init_std = 0.1f;
  Gpt<double> gd(cfg);
  Gpt<float> gf(cfg);
  std::vector<double> pd(gd.layout().size()), grad_d(pd.size());
  gd.init(pd, 31);
  std::vector<float> pf(pd.begin(), pd.end()), grad_f(pf.size());
  const Batch batch = random_batch(3, 10, 32);
  const double ld = gd.loss_and_grad(pd, batch, grad_d);
  const float lf = gf.loss_and_grad(pf, batch, grad_f);
  BOOST_TEST(lf == ld, boost::test_tools::tolerance(1e-5));
  double num = 0, den = 0;
  for (std::size_t i = 0; i < pd.size(); ++i) {
    num += (grad_f[i] - grad_d[i]) * (grad_f[i] - grad_d[i]);
    den += grad_d[i] * grad_d[i];
  }
  BOOST_TEST(std::sqrt(num / den) < 1e-4);

  Mlp<double> md(tiny_mlp());
  Mlp<float> mf(tiny_mlp());
  std::vector<double> qd(md.layout().size());
  md.init(qd, 33);
  std::vector<float> qf(qd.begin(), qd.end());
  BOOST_TEST(mf.loss(qf, batch) == md.loss(qd, batch), boost::test_tools::tolerance(1e-5));
}

BOOST_AUTO_TEST_CASE(workspace_reuse_across_batch_shapes_changes_nothing) {
  Gpt<float> reused(tiny_gpt());
  std::vector<float> p(reused.layout().size());
  reused.init(p, 41);
  const Batch small = random_batch(2, 5, 42), big = random_batch(4, 10, 43);
  std::vector<float> g1(p.size()), g2(p.size());
  reused.loss_and_grad(p, big, g1);
  const float l_small = reused.loss_and_grad(p, small, g1);
  Gpt<float> fresh(tiny_gpt());
  BOOST_TEST(fresh.loss_and_grad(p, small, g2) == l_small);
  BOOST_TEST(g1 == g2);
}

BOOST_AUTO_TEST_CASE(model_interface_matches_the_network) {
  auto m = make_model(tiny_gpt());
  Gpt<float> net(tiny_gpt());
  std::vector<float> p(m->layout().size());
  m->init(p, 51);
  const Batch b = random_batch(2, 6, 52);
  BOOST_TEST(m->loss(p, b) == net.loss(p, b));
  BOOST_TEST(m->flops_per_token(64) > 6.0 * 12 * 2 * 16 * 16);
}

BOOST_AUTO_TEST_CASE(standard_error_of_known_losses_is_the_sample_deviation_over_root_n) {
  const std::vector<double> losses = {1.0, 2.0, 3.0, 4.0};  // mean 2.5, sample variance 5/3
  const auto r = mean_and_std_error(losses);
  BOOST_TEST(r.loss == 2.5);
  BOOST_TEST(r.std_error == std::sqrt(5.0 / 3.0 / 4.0), boost::test_tools::tolerance(1e-15));
  BOOST_TEST(r.batches == 4u);
  const std::vector<double> same(100, 3.25);  // no spread, no error (and no cancellation)
  BOOST_TEST(mean_and_std_error(same).loss == 3.25);
  BOOST_TEST(mean_and_std_error(same).std_error == 0.0);
  const std::vector<double> one = {2.0};  // one window: a loss without an error
  BOOST_TEST(mean_and_std_error(one).loss == 2.0);
  BOOST_TEST(mean_and_std_error(one).std_error == 0.0);
  BOOST_TEST(std::isnan(mean_and_std_error({}).loss));
}

BOOST_AUTO_TEST_CASE(evaluate_reports_the_mean_and_error_of_the_batch_losses) {
  auto m = make_model(tiny_gpt());
  std::vector<float> p(m->layout().size());
  m->init(p, 61);
  std::vector<Batch> eval;
  std::vector<double> losses;
  for (int k = 0; k < 5; ++k) {
    eval.push_back(random_batch(1, 8, 62 + static_cast<std::uint64_t>(k)));
    losses.push_back(m->loss(p, eval.back()));
  }
  const auto r = evaluate_with_error(*m, p, eval), expected = mean_and_std_error(losses);
  BOOST_TEST(r.loss == expected.loss);
  BOOST_TEST(r.std_error == expected.std_error);
  BOOST_TEST(r.std_error > 0.0);
  BOOST_TEST(r.batches == 5u);
  BOOST_TEST(evaluate(*m, p, eval) == r.loss);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(learning)

BOOST_AUTO_TEST_CASE(gpt_memorises_a_repetitive_batch_by_gradient_descent) {
  ModelConfig cfg = tiny_gpt();
  cfg.n_embd = 32;
  cfg.seq_len = 16;
  Gpt<float> net(cfg);
  std::vector<float> p(net.layout().size());
  net.init(p, 61);
  const Batch b = text_batch(4, 16);
  const float before = net.loss(p, b);
  const double after = descend(net, p, b, 300, 0.3f);
  BOOST_TEST_MESSAGE("GPT loss " << before << " -> " << after);
  BOOST_TEST(after < 0.1);
}

BOOST_AUTO_TEST_CASE(mlp_memorises_a_repetitive_batch_by_gradient_descent) {
  Mlp<float> net(tiny_mlp());
  std::vector<float> p(net.layout().size());
  net.init(p, 71);
  const Batch b = text_batch(4, 16);
  const float before = net.loss(p, b);
  const double after = descend(net, p, b, 300, 1.0f);
  BOOST_TEST_MESSAGE("MLP loss " << before << " -> " << after);
  BOOST_TEST(after < 0.1);
}

BOOST_AUTO_TEST_SUITE_END()

// ---- models by name ----

BOOST_AUTO_TEST_CASE(the_built_in_models_are_registered_like_any_other) {
  const auto kinds = model_kinds();
  BOOST_TEST((std::find(kinds.begin(), kinds.end(), "gpt") != kinds.end()));
  BOOST_TEST((std::find(kinds.begin(), kinds.end(), "mlp") != kinds.end()));
  BOOST_TEST(is_model_kind("gpt"));
  BOOST_TEST(!is_model_kind("nope"));
}

BOOST_AUTO_TEST_CASE(an_unknown_kind_names_the_key_and_lists_the_registered_kinds) {
  ModelConfig c;
  c.kind = "nope";
  try {
    make_model(c);
    BOOST_FAIL("an unknown kind was built");
  } catch (const std::invalid_argument& e) {
    const std::string m = e.what();
    BOOST_TEST(m.find("model.kind: unknown model \"nope\"") != std::string::npos, m);
    BOOST_TEST(m.find("\"gpt\"") != std::string::npos, m);
    BOOST_TEST(m.find("\"mlp\"") != std::string::npos, m);
  }
}

BOOST_AUTO_TEST_CASE(a_kind_is_registered_once_with_a_factory_and_a_plain_name) {
  testing::register_bigram();
  auto factory = [](const ModelConfig& c) -> std::unique_ptr<Model> { return std::make_unique<testing::Bigram>(c); };
  BOOST_CHECK_THROW(register_model({"bigram", "again", factory, {}}), std::invalid_argument);
  BOOST_CHECK_THROW(register_model({"gpt", "a second gpt", factory, {}}), std::invalid_argument);
  BOOST_CHECK_THROW(register_model({"no factory", "", {}, {}}), std::invalid_argument);
  BOOST_CHECK_THROW(register_model({"bad name", "", factory, {}}), std::invalid_argument);
  BOOST_CHECK_THROW(register_model({"", "", factory, {}}), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(an_apps_model_builds_by_name_and_reads_its_options) {
  testing::register_bigram();
  ModelConfig c;
  c.kind = "bigram";
  c.options["smoothing"] = "0.5";
  auto m = make_model(c);
  BOOST_TEST(m->layout().tensors().size() == 1u);
  BOOST_TEST(m->layout()[0].name == "bigram.w");
  std::vector<float> p(m->layout().size(), 1.0f), g(p.size());
  // All logits equal: ln V, plus the smoothing term 0.5 · mean(W²) = 0.5.
  BOOST_TEST(m->loss_and_grad(p, text_batch(2, 8), g) == std::log(256.0f) + 0.5f, boost::test_tools::tolerance(1e-5f));
}

BOOST_AUTO_TEST_CASE(an_apps_model_trains_through_the_reference_loops) {
  testing::register_bigram();
  auto cfg = parse_config(R"(
[model]
kind = "bigram"
init_std = 0.01
seq_len = 32
[train]
islands = 2
steps = 60
H = 10
batch = 8
eval_windows = 32
[inner]
lr = 0.05
warmup_steps = 5
)");
  const auto summary = run_reference(cfg);
  BOOST_REQUIRE(!summary.diverged);
  BOOST_REQUIRE(summary.reports.size() == 6u);
  BOOST_TEST_MESSAGE("bigram: first eval " << summary.reports.front().eval_loss << ", last " << summary.final_eval_loss
                                           << ", unigram entropy " << summary.unigram_entropy);
  // From ln 256 = 5.55 to below the unigram entropy: the table learnt which byte follows which.
  BOOST_TEST(summary.final_eval_loss < summary.reports.front().eval_loss);
  BOOST_TEST(summary.final_eval_loss < summary.unigram_entropy);
}

// ---- token ids wider than a byte ----

BOOST_AUTO_TEST_CASE(model_vocab_sizes_the_embedding_and_bounds_the_token_ids) {
  for (const char* kind : {"gpt", "mlp"}) {
    BOOST_TEST_CONTEXT(kind) {
      ModelConfig c = std::string(kind) == "gpt" ? tiny_gpt() : tiny_mlp();
      c.vocab = 1000;
      auto m = make_model(c);
      const auto& l = m->layout();
      const auto& emb = l[l.index_of(std::string(kind) == "gpt" ? "wte" : "emb")];
      BOOST_TEST(emb.shape.front() == 1000u);
      Batch b;
      b.B = 2;
      b.T = 6;
      Rng rng(3);
      for (int i = 0; i < 14; ++i) b.tokens.push_back(static_cast<std::uint32_t>(256 + rng.below(744)));
      std::vector<float> p(l.size()), g(l.size());
      m->init(p, 1);
      // Near-uniform predictions at init: about ln V, which bytes alone could not reach.
      BOOST_TEST(m->loss_and_grad(p, b, g) == std::log(1000.0f), boost::test_tools::tolerance(0.02f));
      b.tokens[5] = 1000;
      BOOST_CHECK_THROW(m->loss(p, b), std::invalid_argument);
    }
  }
}
