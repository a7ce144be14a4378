// Fragment plans cover every parameter exactly once; the sync schedule spreads fragments over H.
#define BOOST_TEST_MODULE fragments
#include <boost/test/unit_test.hpp>

#include <numeric>

#include "diloco/fragments.hpp"
#include "diloco/model.hpp"

using namespace diloco;

namespace {
ModelConfig gpt(int layers) {
  ModelConfig c;
  c.n_layer = layers;
  c.n_embd = 32;
  c.n_head = 2;
  c.seq_len = 16;
  return c;
}

void check_covers_once(const FragmentPlan& plan, const ParamLayout& layout) {
  std::vector<int> hits(layout.size(), 0);
  std::size_t total = 0;
  for (int p = 0; p < plan.count(); ++p) {
    BOOST_TEST(plan.size(p) > 0u);
    std::size_t dst = 0;
    for (const auto& s : plan.segments(p)) {
      BOOST_TEST(s.dst == dst);
      dst += s.size;
      BOOST_TEST(plan.fragment_of(s.tensor) == p);
      for (std::size_t i = 0; i < s.size; ++i) ++hits[s.src + i];
    }
    BOOST_TEST(dst == plan.size(p));
    total += plan.size(p);
  }
  BOOST_TEST(total == layout.size());
  BOOST_TEST(std::all_of(hits.begin(), hits.end(), [](int h) { return h == 1; }));
}
}  // namespace

BOOST_AUTO_TEST_CASE(strided_and_balanced_plans_cover_every_parameter_once) {
  auto model = make_model(gpt(4));
  const auto& layout = model->layout();
  for (int P : {1, 2, 3, 4}) {
    check_covers_once(FragmentPlan::strided(layout, P), layout);
    check_covers_once(FragmentPlan::balanced(layout, P), layout);
  }
  check_covers_once(FragmentPlan::balanced(layout, 7), layout);
}

BOOST_AUTO_TEST_CASE(strided_plan_puts_layer_l_in_fragment_l_mod_P) {
  auto model = make_model(gpt(4));
  const auto& layout = model->layout();
  auto plan = FragmentPlan::strided(layout, 2);
  for (std::size_t i = 0; i < layout.tensors().size(); ++i)
    BOOST_TEST(plan.fragment_of(i) == std::max(layout[i].layer, 0) % 2);
}

BOOST_AUTO_TEST_CASE(balanced_plan_loads_differ_by_at_most_the_largest_tensor) {
  auto model = make_model(gpt(4));
  const auto& layout = model->layout();
  auto plan = FragmentPlan::balanced(layout, 4);
  std::size_t lo = SIZE_MAX, hi = 0, biggest = 0;
  for (int p = 0; p < 4; ++p) lo = std::min(lo, plan.size(p)), hi = std::max(hi, plan.size(p));
  for (const auto& t : layout.tensors()) biggest = std::max(biggest, t.size);
  BOOST_TEST(hi - lo <= biggest);
}

BOOST_AUTO_TEST_CASE(gather_then_scatter_restores_the_buffer) {
  auto model = make_model(gpt(2));
  const auto& layout = model->layout();
  std::vector<float> flat(layout.size());
  std::iota(flat.begin(), flat.end(), 0.0f);
  auto plan = FragmentPlan::balanced(layout, 3);
  std::vector<float> other(flat.size(), -1.0f);
  for (int p = 0; p < 3; ++p) {
    std::vector<float> frag(plan.size(p));
    plan.gather<float>(p, flat, frag);
    plan.scatter(p, frag, other);
  }
  BOOST_TEST(other == flat, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(too_many_fragments_for_the_layers_is_an_error_naming_the_key) {
  auto model = make_model(gpt(2));  // layer ids 0..2: three groups
  try {
    FragmentPlan::strided(model->layout(), 5);
    BOOST_FAIL("expected an error");
  } catch (const std::invalid_argument& e) {
    BOOST_TEST(std::string(e.what()).find("fragments.count") == 0u);
  }
  BOOST_CHECK_THROW(FragmentPlan::make("random", model->layout(), 2), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(schedule_spreads_fragments_evenly_over_H) {
  SyncSchedule s{8, 4};
  BOOST_TEST(s.offset(0) == 0);
  BOOST_TEST(s.offset(1) == 2);
  BOOST_TEST(s.offset(3) == 6);
  std::vector<long> due0, due1;
  for (long step = 1; step <= 24; ++step) {
    if (s.due(step, 0)) due0.push_back(step);
    if (s.due(step, 1)) due1.push_back(step);
  }
  BOOST_TEST(due0 == (std::vector<long>{8, 16, 24}), boost::test_tools::per_element());
  BOOST_TEST(due1 == (std::vector<long>{2, 10, 18}), boost::test_tools::per_element());
  // exactly one fragment is due on the steps where any is
  for (long step = 1; step <= 24; ++step) {
    int n = 0;
    for (int p = 0; p < 4; ++p) n += s.due(step, p);
    BOOST_TEST(n == (step % 2 == 0 ? 1 : 0));
  }
}
