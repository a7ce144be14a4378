// Data: the synthetic language's entropy is computed right, shards are deterministic, non-IID
// shards differ, files split into train and evaluation, evaluation windows span the whole split;
// llm.c token shards are read through globs, in disjoint slices, resumably, and bad ones refused.
#define BOOST_TEST_MODULE data
#include <boost/test/unit_test.hpp>

#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include "diloco/config.hpp"
#include "diloco/data.hpp"
#include "diloco/rng.hpp"
#include "diloco/loops.hpp"

using namespace diloco;

namespace {
double empirical_unigram(const std::vector<std::uint32_t>& t) {
  std::map<int, double> c;
  for (auto b : t) c[b] += 1.0;
  double h = 0;
  for (auto& [k, n] : c) {
    const double p = n / static_cast<double>(t.size());
    h -= p * std::log(p);
  }
  return h;
}
std::vector<std::uint32_t> draw(BatchSource& s, int batches) {
  std::vector<std::uint32_t> all;
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

// ---- llm.c token shards ----

namespace {

/// A scratch directory of its own, removed with its files at the end of the test.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "diloco-shards-XXXXXX").string();
    BOOST_REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    path = tmpl;
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

/// What a shard's header says; defaults are those of a good shard of `tokens`.
struct Header {
  std::int32_t magic = 20240520, version = 1, count = -1;  // count < 0: the number of tokens
};

/// Writes an llm.c shard: 256 int32 of header, then the tokens as uint16 (little-endian, as on
/// the machines this runs on); `cut` bytes are dropped from the end.
void write_shard(const std::string& file, const std::vector<std::uint16_t>& tokens, Header h = {}, std::size_t cut = 0) {
  std::vector<std::int32_t> header(256, 0);
  header[0] = h.magic;
  header[1] = h.version;
  header[2] = h.count >= 0 ? h.count : static_cast<std::int32_t>(tokens.size());
  std::string bytes(reinterpret_cast<const char*>(header.data()), 1024);
  bytes.append(reinterpret_cast<const char*>(tokens.data()), 2 * tokens.size());
  bytes.resize(bytes.size() - cut);
  std::ofstream(file, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

/// Token i of the stream is `base + i`: every window shows where it was read.
std::vector<std::uint16_t> counting(std::size_t n, std::uint16_t base) {
  std::vector<std::uint16_t> t(n);
  for (std::size_t i = 0; i < n; ++i) t[i] = static_cast<std::uint16_t>(base + i);
  return t;
}

/// Token shards in `dir`; `iid` false: each island reads its own slice in order.
DataConfig token_config(const TempDir& dir, bool iid = true) {
  DataConfig cfg;
  cfg.corpus = "tokens";
  cfg.path = dir / "train_*.bin";
  cfg.eval_path = dir / "val_*.bin";
  cfg.iid = iid;
  return cfg;
}

/// Where each of `count` windows of T+1 tokens an island draws starts, read off a counting stream
/// (token i is i): one batch of one window at a time.
std::vector<std::uint32_t> window_starts(BatchSource& s, int T, int count) {
  std::vector<std::uint32_t> starts;
  Batch b;
  for (int k = 0; k < count; ++k) {
    s.next(1, T, b);
    for (std::size_t t = 1; t < b.tokens.size(); ++t) BOOST_REQUIRE(b.tokens[t] == b.tokens[0] + t);  // one piece of the stream
    starts.push_back(b.tokens[0]);
  }
  return starts;
}

std::string message_of_make(const DataConfig& cfg, int vocab) {
  try {
    Corpus::make(cfg, vocab);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

bool mentions(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

}  // namespace

BOOST_AUTO_TEST_CASE(token_shards_matched_by_a_glob_are_one_stream_in_sorted_order) {
  TempDir dir;
  // Written out of order: the glob sorts them, so the stream counts 1000, 1001, ... 1599.
  write_shard(dir / "train_001.bin", counting(300, 1300));
  write_shard(dir / "train_000.bin", counting(300, 1000));
  write_shard(dir / "val_000.bin", counting(100, 5000));
  const auto c = Corpus::make(token_config(dir, false), 8192);
  const auto val = counting(100, 5000);
  BOOST_TEST(c.eval_tokens() == std::vector<std::uint32_t>(val.begin(), val.end()), boost::test_tools::per_element());
  BOOST_TEST(!c.entropy_floor().has_value());
  BOOST_TEST(c.unigram_entropy() == std::log(600.0), boost::test_tools::tolerance(1e-9));
  BOOST_TEST_MESSAGE(c.describe());
  // One island: consecutive windows of T+1 tokens, each starting T after the last, across the
  // boundary between the two files.
  auto s = c.shard(0, 1);
  Batch b;
  s->next(2, 7, b);
  BOOST_TEST_REQUIRE(b.tokens.size() == 16u);
  for (std::size_t k = 0; k < 8; ++k) {
    BOOST_TEST(b.tokens[k] == 1000u + k);
    BOOST_TEST(b.tokens[8 + k] == 1007u + k);
  }
  for (int k = 0; k < 41; ++k) s->next(1, 7, b);
  BOOST_TEST(b.tokens.front() == 1000u + 7 * 42);  // window 42 reads 1294..1301: both files
  BOOST_TEST(b.tokens.back() == 1301u);
  // Evaluation windows come from the evaluation shards.
  for (const auto& w : c.eval_windows(9, 4))
    for (auto t : w.tokens) BOOST_TEST((t >= 5000u && t < 5100u));
}

BOOST_AUTO_TEST_CASE(non_iid_islands_read_disjoint_slices_of_the_token_shards) {
  TempDir dir;
  write_shard(dir / "train_0.bin", counting(3000, 0));
  write_shard(dir / "val_0.bin", counting(64, 0));
  const auto c = Corpus::make(token_config(dir, false), 3000);
  for (int i = 0; i < 3; ++i) {
    auto s = c.shard(i, 3);
    Batch b;
    std::uint32_t lo = 3000, hi = 0;
    for (int k = 0; k < 100; ++k) {  // 800 windows: the slice of 1000 tokens is read 5 times over
      s->next(8, 15, b);
      lo = std::min(lo, *std::min_element(b.tokens.begin(), b.tokens.end()));
      hi = std::max(hi, *std::max_element(b.tokens.begin(), b.tokens.end()));
    }
    BOOST_TEST(lo == 1000u * i, "island " << i);
    BOOST_TEST(hi <= 1000u * i + 999, "island " << i);
    BOOST_TEST(hi >= 1000u * i + 990, "island " << i);  // the whole slice, up to its last whole window
  }
}

BOOST_AUTO_TEST_CASE(iid_islands_are_dealt_disjoint_windows_of_the_whole_stream_in_a_new_order_each_pass) {
  // Documents in order, as data scripts write them: reading slices, island 0 of 3 would see
  // only the first third of the corpus. Dealt, every island's windows spread over all of it.
  TempDir dir;
  write_shard(dir / "train_0.bin", counting(3001, 0));  // 3000 / 10 = 300 windows of 11 tokens
  write_shard(dir / "val_0.bin", counting(64, 0));
  const auto c = Corpus::make(token_config(dir), 3001);
  constexpr int T = 10, M = 3, W = 300;
  std::vector<std::vector<std::uint32_t>> first(M), second(M);
  std::vector<int> seen(W, 0);
  for (int i = 0; i < M; ++i) {
    auto s = c.shard(i, M);
    first[i] = window_starts(*s, T, W / M);  // one pass: 100 windows each
    second[i] = window_starts(*s, T, W / M);
    for (auto start : first[i]) {
      BOOST_TEST_REQUIRE(start % T == 0u);
      ++seen.at(start / T);
    }
    // Spread over the stream, not a slice: a window in each third of it.
    for (int third = 0; third < 3; ++third)
      BOOST_TEST(std::any_of(first[i].begin(), first[i].end(), [&](auto x) { return x / 1000 == static_cast<std::uint32_t>(third); }),
                 "island " << i << " third " << third);
    // Not in stream order, and the next pass deals the same island other windows.
    BOOST_TEST(!std::is_sorted(first[i].begin(), first[i].end()));
    BOOST_TEST(first[i] != second[i]);
    // The same seed deals the same windows: a shard made again reads the same.
    BOOST_TEST(window_starts(*c.shard(i, M), T, W / M) == first[i], boost::test_tools::per_element());
  }
  // Within a pass the islands' windows are disjoint and together every window of the stream.
  BOOST_TEST(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }));
  std::vector<int> again(W, 0);
  for (const auto& pass : second)
    for (auto start : pass) ++again.at(start / T);
  BOOST_TEST(std::all_of(again.begin(), again.end(), [](int n) { return n == 1; }));
  // Another data.seed, another order.
  auto other = token_config(dir);
  other.seed = 2;
  BOOST_TEST(window_starts(*Corpus::make(other, 3001).shard(0, M), T, W / M) != first[0]);
  // Fewer windows than islands: the error names the key and the counts.
  Batch none;
  BOOST_CHECK_EXCEPTION(c.shard(350, 400)->next(1, T, none), std::invalid_argument,
                        [](const std::invalid_argument& e) {
                          BOOST_TEST_MESSAGE(e.what());
                          return mentions(e.what(), "data.path: the token shards hold 3001 tokens, 300 windows of model.seq_len + 1 = 11 tokens, fewer than the 400 islands");
                        });
}

BOOST_AUTO_TEST_CASE(a_permutation_maps_every_index_to_its_own_image) {
  for (std::uint64_t n : {1u, 2u, 3u, 5u, 16u, 17u, 1000u, 4097u}) {
    const Permutation p(n, 42), q(n, 42), r(n, 43);
    std::vector<bool> hit(n, false);
    std::uint64_t moved = 0, same = 0;
    for (std::uint64_t i = 0; i < n; ++i) {
      const auto y = p(i);
      BOOST_TEST_REQUIRE(y < n);
      BOOST_TEST_REQUIRE(!hit[y], "n " << n << ": " << y << " twice");
      hit[y] = true;
      BOOST_TEST(q(i) == y);  // the same seed, the same permutation
      moved += y != i;
      same += r(i) == y;
    }
    if (n >= 1000) {  // shuffled, and another seed shuffles otherwise
      BOOST_TEST(moved > n * 9 / 10);
      BOOST_TEST(same < n / 10);
    }
  }
}

BOOST_AUTO_TEST_CASE(a_resumed_island_goes_on_where_its_data_was) {
  TempDir dir;
  write_shard(dir / "train_0.bin", counting(5000, 0));
  write_shard(dir / "val_0.bin", counting(64, 0));
  const auto dealt = Corpus::make(token_config(dir), 5000);
  const auto slices = Corpus::make(token_config(dir, false), 5000);
  const auto synthetic = Corpus::make(DataConfig{});
  for (const Corpus* c : {&dealt, &slices, &synthetic}) {
    // The run before the restart drew 41 batches; the restarted island skips as many (the
    // island's step, which the syncer's snapshot keeps) and must read what the first would have
    // (dealt: 166 windows a pass, so the three batches compared cross into the next pass).
    auto first = c->shard(1, 2), resumed = c->shard(1, 2);
    Batch a, b;
    for (int k = 0; k < 41; ++k) first->next(4, 15, a);
    resumed->skip(41, 4, 15);
    BOOST_TEST(resumed->tokens_served() == first->tokens_served());
    for (int k = 0; k < 3; ++k) {
      first->next(4, 15, a);
      resumed->next(4, 15, b);
      BOOST_TEST(a.tokens == b.tokens, boost::test_tools::per_element());
    }
  }
}

BOOST_AUTO_TEST_CASE(a_shard_that_is_not_one_fails_at_start_naming_the_file_and_the_problem) {
  TempDir dir;
  write_shard(dir / "val_0.bin", counting(64, 0));
  const auto cfg = token_config(dir);
  const auto bad = dir / "train_0.bin";
  write_shard(bad, counting(100, 0), {.magic = 20240521});
  auto m = message_of_make(cfg, 256);
  BOOST_TEST(mentions(m, "data.path: '" + bad + "' is not an llm.c token shard (magic number 20240521, expected 20240520)"), m);
  write_shard(bad, counting(100, 0), {.version = 2});
  m = message_of_make(cfg, 256);
  BOOST_TEST(mentions(m, "data.path: '" + bad + "' has version 2"), m);
  write_shard(bad, counting(100, 0), {}, 1);
  m = message_of_make(cfg, 256);
  BOOST_TEST(mentions(m, "data.path: '" + bad + "' is truncated: its header counts 100 tokens (1224 bytes with the header) but the file holds 1223 bytes"), m);
  write_shard(bad, counting(100, 0), {.count = 90});
  m = message_of_make(cfg, 256);
  BOOST_TEST(mentions(m, "data.path: '" + bad + "': its header counts 90 tokens (1204 bytes with the header) but the file holds 1224 bytes"), m);
  write_shard(bad, {}, {}, 1000);
  m = message_of_make(cfg, 256);
  BOOST_TEST(mentions(m, "data.path: '" + bad + "' is truncated: 24 bytes, shorter than the 1024-byte header"), m);
  write_shard(bad, counting(100, 0));
  BOOST_TEST(message_of_make(cfg, 256).empty());
  auto nothing = cfg;
  nothing.path = dir / "nope_*.bin";
  BOOST_TEST(message_of_make(nothing, 256) == "data.path: '" + (dir / "nope_*.bin") + "' matches no file");
  nothing = cfg;
  nothing.eval_path = dir / "test_*.bin";
  BOOST_TEST(message_of_make(nothing, 256) == "data.eval_path: '" + (dir / "test_*.bin") + "' matches no file");
  std::filesystem::remove(dir / "val_0.bin");
  write_shard(dir / "val_0.bin", counting(64, 0), {.magic = 7});
  BOOST_TEST(mentions(message_of_make(cfg, 256), "data.eval_path: '" + (dir / "val_0.bin") + "' is not an llm.c token shard"));
}

BOOST_AUTO_TEST_CASE(a_token_beyond_the_vocabulary_fails_at_start_naming_the_file_and_its_offset) {
  TempDir dir;
  write_shard(dir / "val_0.bin", counting(64, 0));
  auto tokens = counting(100, 0);
  tokens[37] = 700;
  write_shard(dir / "train_0.bin", tokens);
  // Token 37 lies at byte 1024 + 2·37 = 1098 of its file.
  BOOST_TEST(message_of_make(token_config(dir), 512) == "data.path: '" + (dir / "train_0.bin") +
                                                           "' holds token 700 at byte offset 1098, not below model.vocab = 512");
  BOOST_TEST(message_of_make(token_config(dir), 701).empty());
  // Bytes too: a text file read as bytes, for a model of 100 ids, at the first byte ≥ 100.
  const auto text = dir / "text.txt";
  {
    std::ofstream out(text, std::ios::binary);
    for (int i = 0; i < 20000; ++i) out.put(i == 4321 ? 'z' : 'a');
  }
  DataConfig file;
  file.corpus = "file";
  file.path = text;
  BOOST_TEST(message_of_make(file, 100) == "data.path: '" + text + "' holds token 122 at byte offset 4321, not below model.vocab = 100");
  BOOST_TEST(message_of_make(file, 123).empty());
  // The synthetic language's symbols are letters and punctuation.
  BOOST_TEST(mentions(message_of_make(DataConfig{}, 100), "model.vocab: 100 is too small for the synthetic language"));
}

BOOST_AUTO_TEST_CASE(the_reference_loop_trains_on_token_shards_with_ids_beyond_a_byte) {
  // The synthetic language written as token shards with every byte b stored as id 1000 + b: a
  // model that learns must learn it through ids a byte cannot hold.
  TempDir dir;
  DataConfig lang;
  lang.eval_tokens = 200000;
  const auto source = Corpus::make(lang).eval_tokens();
  std::vector<std::uint16_t> ids(source.size());
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::uint16_t>(1000 + source[i]);
  const std::size_t third = ids.size() / 3;
  write_shard(dir / "train_000.bin", {ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(third)});
  write_shard(dir / "train_001.bin", {ids.begin() + static_cast<std::ptrdiff_t>(third), ids.end() - 20000});
  write_shard(dir / "val_000.bin", {ids.end() - 20000, ids.end()});
  auto cfg = parse_config(R"(
[model]
kind = "mlp"
vocab = 1200
seq_len = 32
n_embd = 16
hidden = 64
[data]
corpus = "tokens"
[train]
islands = 2
steps = 120
H = 20
batch = 8
eval_windows = 64
[inner]
lr = 0.01
warmup_steps = 10
)", {"data.path=\"" + (dir / "train_*.bin") + "\"", "data.eval_path=\"" + (dir / "val_*.bin") + "\""});
  const auto summary = run_reference(cfg);
  BOOST_REQUIRE(!summary.diverged);
  BOOST_TEST_MESSAGE("token shards: first eval " << summary.reports.front().eval_loss << ", last " << summary.final_eval_loss
                                                 << ", unigram entropy " << summary.unigram_entropy);
  BOOST_TEST(summary.final_eval_loss < summary.unigram_entropy);
}

BOOST_AUTO_TEST_CASE(shards_written_by_the_writer_read_back_as_the_same_stream) {
  TempDir dir;
  std::vector<std::uint32_t> ids(2500);
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::uint32_t>((i * 7919) % 65536);
  TokenShardWriter train(dir.path.string(), "train", 1000), val(dir.path.string(), "val", 1000);
  train.add({ids.data(), 1200});
  train.add({ids.data() + 1200, ids.size() - 1200});
  val.add({ids.data(), 100});
  const auto files = train.finish();
  val.finish();
  BOOST_TEST(files == (std::vector<std::string>{dir / "train_000000.bin", dir / "train_000001.bin", dir / "train_000002.bin"}),
             boost::test_tools::per_element());
  BOOST_TEST(std::filesystem::file_size(files[2]) == 1024u + 2 * 500);
  const auto c = Corpus::make(token_config(dir, false), 65536);
  auto s = c.shard(0, 1);
  Batch b;
  s->next(1, 2499, b);
  BOOST_TEST(b.tokens == ids, boost::test_tools::per_element());
  std::uint32_t wide = 65536;
  BOOST_CHECK_THROW(train.add({&wide, 1}), std::invalid_argument);
  BOOST_CHECK_THROW(TokenShardWriter(dir.path.string(), "x", 0), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(writing_shards_again_replaces_them_whole_and_leaves_a_mapped_run_reading_the_old) {
  TempDir dir;
  std::vector<std::uint32_t> first(2500, 7), second(1500, 9);
  TokenShardWriter a(dir.path.string(), "train", 1000);
  a.add(first);
  BOOST_TEST(a.finish().size() == 3u);
  TokenShardWriter v(dir.path.string(), "val", 1000);
  v.add(first);
  v.finish();
  // A run has the first shards mapped ...
  const auto running = Corpus::make(token_config(dir, false), 64);
  // ... while they are written again, shorter: two shards, and the third of the first writing is gone.
  TokenShardWriter b(dir.path.string(), "train", 1000);
  b.add(second);
  BOOST_TEST(b.finish() == (std::vector<std::string>{dir / "train_000000.bin", dir / "train_000001.bin"}),
             boost::test_tools::per_element());
  BOOST_TEST(!std::filesystem::exists(dir / "train_000002.bin"));
  BOOST_TEST(std::filesystem::exists(dir / "val_000002.bin"));  // another prefix's are left alone
  for (const auto& e : std::filesystem::directory_iterator(dir.path)) BOOST_TEST(e.path().extension() != ".tmp");
  // The running corpus still reads what it mapped; a new one reads the new stream only.
  Batch b1;
  running.shard(0, 1)->next(1, 2499, b1);
  BOOST_TEST(b1.tokens == std::vector<std::uint32_t>(2500, 7), boost::test_tools::per_element());
  const auto fresh = Corpus::make(token_config(dir, false), 64);
  Batch b2;
  fresh.shard(0, 1)->next(1, 1499, b2);
  BOOST_TEST(b2.tokens == second, boost::test_tools::per_element());
  // A writing that stops midway (an error, a crash of the tokenizer) leaves the shards as they were.
  {
    TokenShardWriter c(dir.path.string(), "train", 1000);
    c.add(std::vector<std::uint32_t>(3500, 11));
  }  // never finished
  for (const auto& e : std::filesystem::directory_iterator(dir.path)) BOOST_TEST(e.path().extension() != ".tmp");
  BOOST_TEST(!std::filesystem::exists(dir / "train_000002.bin"));
  const auto after = Corpus::make(token_config(dir, false), 64);
  Batch b3;
  after.shard(0, 1)->next(1, 1499, b3);
  BOOST_TEST(b3.tokens == second, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(a_byte_corpus_must_be_a_regular_file) {
  DataConfig c;
  c.corpus = "file";
  c.path = "/dev/zero";  // endless: read whole, it would take every byte of memory
  try {
    (void)Corpus::make(c, 256);
    BOOST_FAIL("a device was read as a corpus");
  } catch (const std::invalid_argument& e) {
    BOOST_TEST(std::string(e.what()) == "data.path: '/dev/zero' is not a regular file");
  }
}
