// Reference loops: DiLoCo reduces to plain training, Streaming with one fragment to DiLoCo,
// bytes scale with 1/H, and short runs learn the synthetic language.
#define BOOST_TEST_MODULE loops
#include <boost/test/unit_test.hpp>

#include "diloco/loops.hpp"

using namespace diloco;

namespace {
RunConfig tiny(const std::string& mode) {
  RunConfig c;
  c.model.n_layer = 1;
  c.model.n_embd = 16;
  c.model.n_head = 2;
  c.model.seq_len = 16;
  c.train.mode = *choice_of<TrainMode>(mode);
  c.train.batch = 4;
  c.train.steps = 24;
  c.train.eval_windows = 8;
  c.inner.warmup_steps = 5;
  c.data.eval_tokens = 4096;
  return c;
}
}  // namespace

BOOST_AUTO_TEST_CASE(diloco_with_one_island_H1_and_fedavg_lr1_equals_plain_training_exactly) {
  auto plain = tiny("ddp");
  plain.train.islands = 1;
  plain.train.H = 1;
  auto dl = plain;
  dl.train.mode = TrainMode::diloco;
  dl.outer.kind = "sgd";
  dl.outer.lr = 1.0f;
  dl.outer.momentum = 0.0f;
  const auto a = run_reference(plain), b = run_reference(dl);
  BOOST_REQUIRE(a.params.size() == b.params.size());
  std::size_t differing = 0;
  for (std::size_t i = 0; i < a.params.size(); ++i) differing += a.params[i] != b.params[i];
  BOOST_TEST(differing == 0u);
  BOOST_TEST(a.final_eval_loss == b.final_eval_loss);
}

BOOST_AUTO_TEST_CASE(streaming_with_one_fragment_and_no_overlap_equals_diloco) {
  auto dl = tiny("diloco");
  dl.train.islands = 2;
  dl.train.H = 6;
  auto st = dl;
  st.train.mode = TrainMode::streaming;
  st.fragments.count = 1;
  st.fragments.tau = 0;
  const auto a = run_reference(dl), b = run_reference(st);
  BOOST_TEST(a.params == b.params, boost::test_tools::per_element());
  BOOST_TEST(a.bytes == b.bytes);
}

BOOST_AUTO_TEST_CASE(diloco_sends_H_times_fewer_bytes_than_ddp) {
  auto ddp = tiny("ddp");
  ddp.train.islands = 4;
  ddp.train.H = 8;
  auto dl = ddp;
  dl.train.mode = TrainMode::diloco;
  auto st = ddp;
  st.train.mode = TrainMode::streaming;
  st.fragments.count = 2;
  const auto a = run_reference(ddp), b = run_reference(dl), c = run_reference(st);
  BOOST_TEST(a.bytes > 0.0);
  BOOST_TEST(a.bytes / b.bytes == 8.0, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(c.bytes == b.bytes, boost::test_tools::tolerance(1e-12));  // same payload, spread out
  BOOST_TEST(a.tokens == b.tokens);
  BOOST_TEST(a.reports.size() == 3u);  // one report per H steps
}

BOOST_AUTO_TEST_CASE(streaming_with_overlap_runs_and_learns) {
  auto st = tiny("streaming");
  st.train.islands = 2;
  st.train.H = 8;
  st.train.steps = 48;
  st.fragments.count = 2;
  st.fragments.tau = 2;
  const auto r = run_reference(st);
  BOOST_TEST(r.reports.size() == 6u);
  BOOST_TEST(r.final_eval_loss < r.reports.front().eval_loss);
}

BOOST_AUTO_TEST_CASE(every_report_evaluates_train_eval_windows_spread_windows_with_their_error) {
  for (const int windows : {6, 40}) {
    auto c = tiny("diloco");
    c.train.islands = 2;
    c.train.H = 8;
    c.train.eval_windows = windows;
    const auto r = run_reference(c);
    BOOST_TEST_REQUIRE(r.reports.size() == 3u);
    for (const auto& rep : r.reports) BOOST_TEST(rep.eval_std_error > 0.0);
    // The final figure is the configured count of windows of the split, measured again by hand.
    auto model = make_model(c.model);
    const auto expected =
        evaluate_with_error(*model, r.params, Corpus::make(c.data).eval_windows(c.model.seq_len, windows));
    BOOST_TEST(expected.batches == static_cast<std::size_t>(windows));
    BOOST_TEST(r.final_eval_loss == expected.loss);
    BOOST_TEST(r.final_eval_std_error == expected.std_error);
    BOOST_TEST(r.final_eval_std_error == r.reports.back().eval_std_error);
  }
}

BOOST_AUTO_TEST_CASE(a_short_diloco_run_falls_well_below_the_unigram_entropy) {
  RunConfig c;
  c.model.n_layer = 2;
  c.model.n_embd = 32;
  c.model.n_head = 2;
  c.model.seq_len = 32;
  c.train.islands = 2;
  c.train.batch = 8;
  c.train.steps = 800;
  c.train.H = 25;
  c.inner.lr = 3e-3f;
  c.inner.warmup_steps = 20;
  c.data.eval_tokens = 8192;
  const auto r = run_reference(c);
  BOOST_REQUIRE(r.entropy_floor.has_value());
  BOOST_TEST_MESSAGE("eval loss " << r.final_eval_loss << ", unigram " << r.unigram_entropy << ", floor "
                                  << *r.entropy_floor);
  BOOST_TEST(r.final_eval_loss < r.unigram_entropy - 0.8);
  BOOST_TEST(r.final_eval_loss > *r.entropy_floor - 0.05);  // nothing beats the source's entropy
}

BOOST_AUTO_TEST_CASE(diverging_diloco_run_stops_and_names_the_divergence) {
  auto c = tiny("diloco");
  c.train.islands = 2;
  c.train.H = 6;
  c.outer.lr = 1e12f;  // the first outer step throws the global parameters far out
  const auto s = run_reference(c);
  BOOST_REQUIRE(s.diverged.has_value());
  BOOST_TEST((s.diverged->code == errc::non_finite));
  BOOST_TEST_MESSAGE(s.diverged->reason);
  BOOST_TEST(s.diverged->reason.find("diverged") != std::string::npos);
  BOOST_TEST(s.diverged->reason.find("at step") != std::string::npos);
  BOOST_TEST(s.reports.size() < 4u);  // stopped there, not trained to the end on NaN
}

BOOST_AUTO_TEST_CASE(diverging_ddp_run_stops_and_names_the_divergence) {
  auto c = tiny("ddp");
  c.train.islands = 2;
  c.inner.lr = 1e30f;
  c.inner.grad_clip = 0.0f;
  c.inner.warmup_steps = 0;
  const auto s = run_reference(c);
  BOOST_REQUIRE(s.diverged.has_value());
  BOOST_TEST_MESSAGE(s.diverged->reason);
  BOOST_TEST(s.diverged->reason.find("diverged") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_healthy_run_does_not_report_divergence) {
  auto c = tiny("streaming");
  c.train.islands = 2;
  c.train.H = 6;
  c.fragments.count = 2;
  BOOST_TEST(!run_reference(c).diverged.has_value());
}
