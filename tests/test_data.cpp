// Data: the synthetic language's entropy is computed right, shards are deterministic, non-IID
// shards differ, files split into train and evaluation, evaluation windows span the whole split.
#define BOOST_TEST_MODULE data
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>

#include "diloco/data.hpp"

using namespace diloco;

namespace {
double empirical_unigram(const std::vector<std::uint8_t>& t) {
  std::map<int, double> c;
  for (auto b : t) c[b] += 1.0;
  double h = 0;
  for (auto& [k, n] : c) {
    const double p = n / static_cast<double>(t.size());
    h -= p * std::log(p);
  }
  return h;
}
std::vector<std::uint8_t> draw(BatchSource& s, int batches) {
  std::vector<std::uint8_t> all;
  Batch b;
  for (int i = 0; i < batches; ++i) {
    s.next(4, 63, b);
    all.insert(all.end(), b.tokens.begin(), b.tokens.end());
  }
  return all;
}
}  // namespace

BOOST_AUTO_TEST_CASE(entropy_floor_lies_below_the_unigram_entropy) {
  auto c = Corpus::make(DataConfig{});
  BOOST_REQUIRE(c.entropy_floor().has_value());
  const double floor = *c.entropy_floor();
  BOOST_TEST_MESSAGE("floor " << floor << " unigram " << c.unigram_entropy());
  BOOST_TEST(floor > 0.0);
  BOOST_TEST(floor < c.unigram_entropy() - 1.0);
  BOOST_TEST(c.unigram_entropy() <= std::log(24.0) + 1e-9);
}

BOOST_AUTO_TEST_CASE(computed_unigram_entropy_matches_the_generated_text) {
  DataConfig cfg;
  cfg.eval_tokens = 1 << 19;
  auto c = Corpus::make(cfg);
  BOOST_TEST(empirical_unigram(c.eval_tokens()) == c.unigram_entropy(), boost::test_tools::tolerance(0.01));
}

BOOST_AUTO_TEST_CASE(a_deterministic_language_costs_only_its_first_symbol) {
  // order 1, branching 1: after the first symbol every byte is determined, so the floor is
  // ln(A)/doc_len exactly.
  DataConfig cfg;
  cfg.order = 1;
  cfg.branching = 1;
  cfg.doc_len = 100;
  auto c = Corpus::make(cfg);
  BOOST_TEST(*c.entropy_floor() == std::log(24.0) / 100.0, boost::test_tools::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE(shards_are_deterministic_and_distinct_per_island) {
  auto c = Corpus::make(DataConfig{});
  auto a = c.shard(0, 4), a2 = c.shard(0, 4), b = c.shard(1, 4);
  const auto ta = draw(*a, 3), ta2 = draw(*a2, 3), tb = draw(*b, 3);
  BOOST_TEST(ta == ta2, boost::test_tools::per_element());
  BOOST_TEST((ta != tb));
  BOOST_TEST(a->tokens_served() == 3u * 4u * 63u);
}

BOOST_AUTO_TEST_CASE(non_iid_shards_see_different_mixtures) {
  DataConfig cfg;
  cfg.iid = false;
  cfg.skew = 1.0;  // island i sees only dialect i
  auto c = Corpus::make(cfg);
  auto a = c.shard(0, 2), b = c.shard(1, 2);
  const auto ta = draw(*a, 200), tb = draw(*b, 200);
  // Bigram statistics of the two dialects differ far more than sampling noise.
  std::map<int, double> ba, bb;
  for (std::size_t i = 1; i < ta.size(); ++i) ba[ta[i - 1] * 256 + ta[i]] += 1.0 / ta.size();
  for (std::size_t i = 1; i < tb.size(); ++i) bb[tb[i - 1] * 256 + tb[i]] += 1.0 / tb.size();
  double tv = 0;
  for (auto& [k, p] : ba) tv += std::fabs(p - bb[k]);
  for (auto& [k, p] : bb)
    if (!ba.count(k)) tv += p;
  BOOST_TEST_MESSAGE("bigram total variation " << tv / 2);
  BOOST_TEST(tv / 2 > 0.5);
}

BOOST_AUTO_TEST_CASE(file_corpus_holds_out_its_tail_and_shards_stay_in_their_slice) {
  const std::string path = "test_data_corpus.txt";
  {
    std::ofstream f(path, std::ios::binary);
    for (int i = 0; i < 20000; ++i) f << static_cast<char>(i < 9000 ? 'a' + (i % 2) : 'x' + (i % 2));  // train: 9000 ab, 9000 xy
  }
  DataConfig cfg;
  cfg.corpus = "file";
  cfg.path = path;
  cfg.iid = false;
  cfg.eval_fraction = 0.1;
  auto c = Corpus::make(cfg);
  BOOST_TEST(c.eval_tokens().size() == 2000u);
  BOOST_TEST(!c.entropy_floor().has_value());
  auto first = draw(*c.shard(0, 2), 5), second = draw(*c.shard(1, 2), 5);
  BOOST_TEST(std::all_of(first.begin(), first.end(), [](auto b) { return b == 'a' || b == 'b'; }));
  BOOST_TEST(std::all_of(second.begin(), second.end(), [](auto b) { return b == 'x' || b == 'y'; }));
  std::remove(path.c_str());
}

BOOST_AUTO_TEST_CASE(bad_data_settings_name_the_key) {
  DataConfig cfg;
  cfg.alphabet = 1000;
  BOOST_CHECK_EXCEPTION(Corpus::make(cfg), std::invalid_argument,
                        [](const auto& e) { return std::string(e.what()).find("data.alphabet") == 0; });
  cfg = DataConfig{};
  cfg.corpus = "file";
  cfg.path = "/nonexistent/corpus.txt";
  BOOST_CHECK_EXCEPTION(Corpus::make(cfg), std::runtime_error,
                        [](const auto& e) { return std::string(e.what()).find("data.path") == 0; });
}

BOOST_AUTO_TEST_CASE(eval_windows_reach_from_the_head_of_the_split_to_its_end) {
  DataConfig cfg;
  cfg.eval_tokens = 10000;
  const auto c = Corpus::make(cfg);
  const int T = 63;
  const std::size_t w = T + 1, R = c.eval_tokens().size() - w + 1, n = 40;  // R possible starts
  const auto starts = c.eval_window_starts(T, n);
  BOOST_TEST_REQUIRE(starts.size() == n);
  // One window in each of n equal stretches of the starts: the first near the head, the last
  // ending near the end of the split, never past it.
  for (std::size_t k = 0; k < n; ++k) {
    BOOST_TEST(starts[k] >= k * R / n, k);
    BOOST_TEST(starts[k] < (k + 1) * R / n, k);
  }
  BOOST_TEST(starts.front() < R / n);
  BOOST_TEST(starts.back() + w <= c.eval_tokens().size());
  BOOST_TEST(c.eval_tokens().size() - (starts.back() + w) <= R / n);
  // The windows are those bytes of the split, the same on every call; another data.seed draws
  // other offsets.
  const auto windows = c.eval_windows(T, static_cast<int>(n));
  BOOST_TEST_REQUIRE(windows.size() == n);
  for (std::size_t k = 0; k < n; ++k) {
    BOOST_TEST(windows[k].B == 1);
    BOOST_TEST(windows[k].T == T);
    BOOST_TEST(std::equal(windows[k].tokens.begin(), windows[k].tokens.end(),
                          c.eval_tokens().begin() + static_cast<std::ptrdiff_t>(starts[k])), k);
  }
  BOOST_TEST(c.eval_window_starts(T, n) == starts, boost::test_tools::per_element());
  cfg.seed = 2;
  BOOST_TEST(Corpus::make(cfg).eval_window_starts(T, n) != starts);
}

BOOST_AUTO_TEST_CASE(eval_windows_spread_over_a_file_tail_not_its_first_bytes) {
  // The evaluation tail of a file: its first half 'a', its second half 'z'. The first windows
  // alone would all read 'a'.
  const std::string path = "test_data_eval_tail.txt";
  {
    std::ofstream f(path, std::ios::binary);
    for (int i = 0; i < 18000; ++i) f << 't';
    for (int i = 0; i < 2000; ++i) f << (i < 1000 ? 'a' : 'z');
  }
  DataConfig cfg;
  cfg.corpus = "file";
  cfg.path = path;
  cfg.eval_fraction = 0.1;
  const auto c = Corpus::make(cfg);
  std::remove(path.c_str());
  BOOST_TEST_REQUIRE(c.eval_tokens().size() == 2000u);
  const auto windows = c.eval_windows(15, 8);
  int all_a = 0, all_z = 0;
  for (const auto& b : windows) {
    all_a += std::all_of(b.tokens.begin(), b.tokens.end(), [](auto x) { return x == 'a'; });
    all_z += std::all_of(b.tokens.begin(), b.tokens.end(), [](auto x) { return x == 'z'; });
  }
  BOOST_TEST(all_a >= 3);
  BOOST_TEST(all_z >= 3);
}

BOOST_AUTO_TEST_CASE(more_windows_than_starts_repeat_windows_inside_the_split) {
  DataConfig cfg;
  cfg.eval_tokens = 1024;
  const auto c = Corpus::make(cfg);
  const auto starts = c.eval_window_starts(1000, 50);  // 24 possible starts
  BOOST_TEST_REQUIRE(starts.size() == 50u);
  BOOST_TEST(std::is_sorted(starts.begin(), starts.end()));
  BOOST_TEST(starts.back() == 23u);
  BOOST_TEST(starts.front() == 0u);
}

BOOST_AUTO_TEST_CASE(eval_batches_group_the_spread_windows) {
  const auto c = Corpus::make(DataConfig{});
  const auto batches = c.eval_batches(4, 31, 3), again = c.eval_batches(4, 31, 3);
  const auto starts = c.eval_window_starts(31, 12);
  BOOST_TEST_REQUIRE(batches.size() == 3u);
  BOOST_TEST(batches[2].tokens == again[2].tokens, boost::test_tools::per_element());
  for (std::size_t k = 0; k < 12; ++k)
    BOOST_TEST(std::equal(batches[k / 4].tokens.begin() + static_cast<std::ptrdiff_t>(k % 4 * 32),
                          batches[k / 4].tokens.begin() + static_cast<std::ptrdiff_t>(k % 4 * 32 + 32),
                          c.eval_tokens().begin() + static_cast<std::ptrdiff_t>(starts[k])), k);
}
