// The built-in synthetic language, file corpora, llm.c token shards (mapped), per-island shards
// and the evaluation split.
#include "diloco/data.hpp"

#include <fcntl.h>
#include <glob.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <sstream>
#include <stdexcept>

#include "diloco/rng.hpp"

namespace diloco {

namespace {
// Symbols of the synthetic language, most "letter-like" first; `alphabet` takes a prefix.
constexpr char kSymbols[] = " etaoinshrdlcumwfgypbvkjxqz.,ETAOINSHRDLCUMWFGYPBVKJXQZ0123456789";
constexpr int kMaxAlphabet = static_cast<int>(sizeof(kSymbols) - 1);
constexpr std::uint64_t kEvalStream = 0xE7A1;
constexpr std::uint64_t kEvalWindowStream = 0xE7A2;
constexpr std::uint64_t kLanguageStream = 0x1A46;
constexpr std::uint64_t kDealStream = 0xDEA1;  // the orders token windows are dealt to islands in
// llm.c's token shard (dev/data/data_common.py write_datafile): 256 int32 of header, then uint16.
constexpr std::int32_t kShardMagic = 20240520;
constexpr std::int32_t kShardVersion = 1;
constexpr std::size_t kShardHeaderBytes = 256 * sizeof(std::int32_t);

double entropy_of(const std::vector<double>& p) {
  double h = 0.0;
  for (double x : p)
    if (x > 0) h -= x * std::log(x);
  return h;
}
}  // namespace

/// D dialects, each a sparse order-k Markov chain over an alphabet of A symbols.
/// Context c encodes the last k symbols base A; the next context is (c·A + s) mod A^k.
class MarkovLanguage {
public:
  explicit MarkovLanguage(const DataConfig& cfg)
      : A_(cfg.alphabet), k_(cfg.order), branching_(cfg.branching), doc_len_(cfg.doc_len) {
    contexts_ = 1;
    for (int i = 0; i < k_; ++i) contexts_ *= static_cast<std::size_t>(A_);
    Rng rng(derive_seed(cfg.seed, kLanguageStream));
    dialects_.resize(static_cast<std::size_t>(cfg.dialects));
    for (auto& d : dialects_) {
      d.succ.resize(contexts_ * branching_);
      d.prob.resize(contexts_ * branching_);
      d.entropy.resize(contexts_);
      // Each symbol s owns a pool of 2·branching candidate successors; a context ending in s
      // draws its `branching` successors from that pool. The last byte alone thus narrows the
      // next one (as in natural text) and the earlier bytes narrow it further.
      const int pool_size = std::min(A_, 2 * branching_);
      std::vector<std::vector<int>> pools(static_cast<std::size_t>(A_));
      for (auto& pool : pools) {
        std::vector<int> all(static_cast<std::size_t>(A_));
        for (int s = 0; s < A_; ++s) all[static_cast<std::size_t>(s)] = s;
        for (int j = 0; j < pool_size; ++j)
          std::swap(all[static_cast<std::size_t>(j)],
                    all[static_cast<std::size_t>(j) + rng.below(static_cast<std::uint64_t>(A_ - j))]);
        pool.assign(all.begin(), all.begin() + pool_size);
      }
      for (std::size_t c = 0; c < contexts_; ++c) {
        std::vector<int> pool = pools[c % static_cast<std::size_t>(A_)];  // last symbol of c
        double total = 0.0;
        std::vector<double> w(static_cast<std::size_t>(branching_));
        for (int j = 0; j < branching_; ++j) {
          auto pick = static_cast<std::size_t>(j) + rng.below(static_cast<std::uint64_t>(pool_size - j));
          std::swap(pool[static_cast<std::size_t>(j)], pool[pick]);
          d.succ[c * branching_ + j] = pool[static_cast<std::size_t>(j)];
          w[static_cast<std::size_t>(j)] = -std::log(1.0 - rng.uniform());
          total += w[static_cast<std::size_t>(j)];
        }
        for (int j = 0; j < branching_; ++j) w[static_cast<std::size_t>(j)] /= total;
        std::copy(w.begin(), w.end(), d.prob.begin() + static_cast<std::ptrdiff_t>(c * branching_));
        d.entropy[c] = entropy_of(w);
      }
    }
    analyse();
  }

  int alphabet() const { return A_; }
  int num_dialects() const { return static_cast<int>(dialects_.size()); }
  /// Exact floor and unigram entropy for a mixture of dialects (weights sum to 1).
  double floor(const std::vector<double>& mix) const {
    double h = 0.0;
    for (std::size_t d = 0; d < dialects_.size(); ++d) h += mix[d] * dialects_[d].floor;
    return h;
  }
  double unigram(const std::vector<double>& mix) const {
    std::vector<double> p(static_cast<std::size_t>(A_), 0.0);
    for (std::size_t d = 0; d < dialects_.size(); ++d)
      for (int s = 0; s < A_; ++s) p[static_cast<std::size_t>(s)] += mix[d] * dialects_[d].unigram[static_cast<std::size_t>(s)];
    return entropy_of(p);
  }

  /// Appends one document of dialect d to `out`.
  void document(int d, Rng& rng, std::vector<std::uint8_t>& out) const {
    const Dialect& D = dialects_[static_cast<std::size_t>(d)];
    std::size_t c = 0;
    for (int t = 0; t < doc_len_; ++t) {
      int s;
      if (t < k_) {
        s = static_cast<int>(rng.below(static_cast<std::uint64_t>(A_)));
      } else {
        double u = rng.uniform();
        int j = 0;
        const double* pr = &D.prob[c * branching_];
        while (j + 1 < branching_ && u >= pr[j]) u -= pr[j++];
        s = D.succ[c * branching_ + j];
      }
      out.push_back(static_cast<std::uint8_t>(kSymbols[s]));
      c = (c * static_cast<std::size_t>(A_) + static_cast<std::size_t>(s)) % contexts_;
    }
  }

private:
  struct Dialect {
    std::vector<int> succ;         // (contexts, branching) successor symbols
    std::vector<double> prob;      // (contexts, branching) their probabilities
    std::vector<double> entropy;   // (contexts) H(next | context) in nats
    double floor = 0.0;            // mean conditional entropy per document position
    std::vector<double> unigram;   // (A) mean symbol distribution per document position
  };

  // Propagates the context distribution through one document: the first k symbols are
  // uniform (ln A each), then position t costs sum_c p_t(c) H(c) and p_{t+1} = p_t P.
  void analyse() {
    for (auto& D : dialects_) {
      std::vector<double> p(contexts_, 1.0 / static_cast<double>(contexts_)), next(contexts_);
      D.unigram.assign(static_cast<std::size_t>(A_), 0.0);
      double h = std::log(static_cast<double>(A_)) * k_;
      for (int s = 0; s < A_; ++s) D.unigram[static_cast<std::size_t>(s)] = static_cast<double>(k_) / A_;
      for (int t = k_; t < doc_len_; ++t) {
        std::fill(next.begin(), next.end(), 0.0);
        for (std::size_t c = 0; c < contexts_; ++c) {
          if (p[c] == 0.0) continue;
          h += p[c] * D.entropy[c];
          for (int j = 0; j < branching_; ++j) {
            const int s = D.succ[c * branching_ + j];
            const double q = p[c] * D.prob[c * branching_ + j];
            D.unigram[static_cast<std::size_t>(s)] += q;
            next[(c * static_cast<std::size_t>(A_) + static_cast<std::size_t>(s)) % contexts_] += q;
          }
        }
        p.swap(next);
      }
      D.floor = h / doc_len_;
      for (auto& u : D.unigram) u /= doc_len_;
    }
  }

  int A_, k_, branching_, doc_len_;
  std::size_t contexts_ = 1;
  std::vector<Dialect> dialects_;
};

/// Tokens read in place: runs of 8- or 16-bit ids (bytes held in memory, or mapped shards),
/// indexed as one stream. Each run remembers its file and where its first token lies in it, so
/// that a bad token can be named by file and byte offset.
class TokenSeq {
public:
  struct Run {
    const void* data = nullptr;
    int width = 1;             // bytes per token: 1 (uint8) or 2 (uint16, little-endian)
    std::size_t n = 0;         // tokens
    std::string file;          // where they come from
    std::size_t offset = 0;    // byte offset of the first token in `file`
  };
  void add(Run run, std::shared_ptr<const void> owner) {
    owners_.push_back(std::move(owner));
    if (run.n == 0) return;
    begin_.push_back(total_);
    total_ += run.n;
    runs_.push_back(std::move(run));
  }
  std::size_t size() const { return total_; }
  const std::vector<Run>& runs() const { return runs_; }
  /// Tokens [start, start + n) into `out`, across runs.
  void copy(std::size_t start, std::size_t n, std::uint32_t* out) const {
    auto r = static_cast<std::size_t>(std::upper_bound(begin_.begin(), begin_.end(), start) - begin_.begin()) - 1;
    while (n > 0) {
      const Run& run = runs_.at(r);
      const std::size_t from = start - begin_[r], take = std::min(n, run.n - from);
      if (run.width == 1) {
        const auto* p = static_cast<const std::uint8_t*>(run.data) + from;
        for (std::size_t k = 0; k < take; ++k) out[k] = p[k];
      } else {
        const auto* p = static_cast<const unsigned char*>(run.data) + 2 * from;
        for (std::size_t k = 0; k < take; ++k) out[k] = static_cast<std::uint32_t>(p[2 * k] | (p[2 * k + 1] << 8));
      }
      out += take;
      start += take;
      n -= take;
      ++r;
    }
  }

private:
  std::vector<Run> runs_;
  std::vector<std::size_t> begin_;  // first stream index of each run
  std::vector<std::shared_ptr<const void>> owners_;
  std::size_t total_ = 0;
};

namespace {

std::vector<double> mixture(const DataConfig& cfg, int island, bool iid) {
  const auto D = static_cast<std::size_t>(cfg.dialects);
  std::vector<double> w(D, 1.0 / static_cast<double>(D));
  if (!iid && D > 1) {
    std::fill(w.begin(), w.end(), (1.0 - cfg.skew) / static_cast<double>(D - 1));
    w[static_cast<std::size_t>(island) % D] = cfg.skew;
  }
  return w;
}

int pick(const std::vector<double>& w, Rng& rng) {
  double u = rng.uniform();
  for (std::size_t i = 0; i + 1 < w.size(); ++i) {
    if (u < w[i]) return static_cast<int>(i);
    u -= w[i];
  }
  return static_cast<int>(w.size()) - 1;
}

/// An endless stream of documents from the synthetic language, cut into windows.
class SyntheticShard final : public BatchSource {
public:
  SyntheticShard(std::shared_ptr<const MarkovLanguage> lang, std::vector<double> mix, std::uint64_t seed)
      : lang_(std::move(lang)), mix_(std::move(mix)), rng_(seed) {}
  void next(int B, int T, Batch& out) override {
    out.B = B;
    out.T = T;
    out.tokens.resize(static_cast<std::size_t>(B) * (T + 1));
    for (std::size_t i = 0; i < out.tokens.size(); ++i) {
      if (pos_ == buf_.size()) {
        buf_.clear();
        pos_ = 0;
        lang_->document(pick(mix_, rng_), rng_, buf_);
      }
      out.tokens[i] = buf_[pos_++];
    }
    tokens_ += out.num_targets();
  }

private:
  std::shared_ptr<const MarkovLanguage> lang_;
  std::vector<double> mix_;
  Rng rng_;
  std::vector<std::uint8_t> buf_;
  std::size_t pos_ = 0;
};

/// Random windows from [begin, end) of a byte corpus.
class FileShard final : public BatchSource {
public:
  FileShard(std::shared_ptr<const TokenSeq> data, std::size_t begin, std::size_t end, std::uint64_t seed)
      : data_(std::move(data)), begin_(begin), end_(end), rng_(seed) {}
  void next(int B, int T, Batch& out) override {
    const auto w = static_cast<std::size_t>(T) + 1;
    if (end_ - begin_ < w)
      throw std::runtime_error("data: shard of " + std::to_string(end_ - begin_) +
                               " bytes is shorter than one window of " + std::to_string(w));
    out.B = B;
    out.T = T;
    out.tokens.resize(static_cast<std::size_t>(B) * w);
    for (int b = 0; b < B; ++b) {
      const std::size_t start = begin_ + rng_.below(end_ - begin_ - w + 1);
      data_->copy(start, w, out.tokens.data() + b * w);
    }
    tokens_ += out.num_targets();
  }

private:
  std::shared_ptr<const TokenSeq> data_;
  std::size_t begin_, end_;
  Rng rng_;
};

/// Windows of T+1 tokens of a token stream, each starting at a multiple of T after the head of
/// what is read (llm.c's DataLoader cuts them so). Two ways to share them among M islands:
/// - a slice (data.iid = false): island i reads the windows of [i·N/M, (i+1)·N/M) one after the
///   other, from the head again after the last whole one; each island sees only the documents
///   of its slice (non-IID when the shards hold documents in order, as data scripts write them);
/// - dealt (data.iid = true): the W windows of the whole stream are put in a random order drawn
///   from data.seed, a new order for every pass over them, and island i takes the i-th, the
///   (i+M)-th, ... of each pass (PyTorch's DistributedSampler with shuffling): within a pass the
///   islands read disjoint windows, and every island sees the mixture of the whole corpus.
/// Either way window k of an island is a function of k alone, so skip() seeks at once.
class TokenWindows final : public BatchSource {
public:
  /// Island `island` reading its slice [begin, end) in order.
  static std::unique_ptr<TokenWindows> slice(std::shared_ptr<const TokenSeq> data, std::size_t begin, std::size_t end,
                                             int island) {
    return std::unique_ptr<TokenWindows>(new TokenWindows(std::move(data), begin, end, island, 1, std::nullopt));
  }
  /// Island `island` of `islands` dealt windows of the whole stream, in orders drawn from `seed`
  /// (the same for every island: that is what keeps their windows disjoint).
  static std::unique_ptr<TokenWindows> dealt(std::shared_ptr<const TokenSeq> data, int island, int islands,
                                             std::uint64_t seed) {
    const std::size_t n = data->size();
    return std::unique_ptr<TokenWindows>(new TokenWindows(std::move(data), 0, n, island, islands, seed));
  }

  void next(int B, int T, Batch& out) override {
    const std::size_t w = static_cast<std::size_t>(T) + 1;
    const std::uint64_t mine = windows_of_island(T);
    out.B = B;
    out.T = T;
    out.tokens.resize(static_cast<std::size_t>(B) * w);
    for (int b = 0; b < B; ++b, ++k_)
      data_->copy(begin_ + window(mine, T) * static_cast<std::size_t>(T), w, out.tokens.data() + static_cast<std::size_t>(b) * w);
    tokens_ += out.num_targets();
  }
  void skip(long batches, int B, int T) override {
    windows_of_island(T);  // too little data fails here as in next()
    k_ += static_cast<std::uint64_t>(batches) * static_cast<std::uint64_t>(B);
    tokens_ += static_cast<std::uint64_t>(batches) * static_cast<std::uint64_t>(B) * static_cast<std::uint64_t>(T);
  }

private:
  TokenWindows(std::shared_ptr<const TokenSeq> data, std::size_t begin, std::size_t end, int island, int islands,
               std::optional<std::uint64_t> seed)
      : data_(std::move(data)), begin_(begin), end_(end), island_(island), islands_(islands), seed_(seed) {}

  /// Windows of T+1 tokens starting at multiples of T in [begin, end).
  std::uint64_t windows_in_range(int T) const {
    const auto w = static_cast<std::size_t>(T) + 1;
    return end_ - begin_ < w ? 0 : (end_ - begin_ - 1) / static_cast<std::size_t>(T);
  }
  /// The windows this island reads in one pass; too few is an error naming the key.
  std::uint64_t windows_of_island(int T) const {
    // A slice is read whole by its island: one island of one, as far as the count goes.
    const std::uint64_t W = windows_in_range(T), M = seed_ ? static_cast<std::uint64_t>(islands_) : 1;
    const std::uint64_t i = seed_ ? static_cast<std::uint64_t>(island_) : 0;
    if (W > i) return (W - i + M - 1) / M;
    const std::string why = seed_ ? "the token shards hold " + std::to_string(end_ - begin_) + " tokens, " +
                                        std::to_string(W) + " windows of model.seq_len + 1 = " + std::to_string(T + 1) +
                                        " tokens, fewer than the " + std::to_string(islands_) + " islands"
                                  : "island " + std::to_string(island_) + "'s slice of the token shards holds " +
                                        std::to_string(end_ - begin_) + " tokens, fewer than one window of model.seq_len + 1 = " +
                                        std::to_string(T + 1);
    throw std::invalid_argument("data.path: " + why);
  }
  /// Index (in [0, windows_in_range)) of the island's window k_, `mine` windows per pass.
  std::uint64_t window(std::uint64_t mine, int T) {
    const std::uint64_t pass = k_ / mine, j = k_ % mine;
    if (!seed_) return j;
    if (!order_ || pass_ != pass) {
      order_.emplace(windows_in_range(T), derive_seed(*seed_, pass));
      pass_ = pass;
    }
    return (*order_)(j * static_cast<std::uint64_t>(islands_) + static_cast<std::uint64_t>(island_));
  }

  std::shared_ptr<const TokenSeq> data_;
  std::size_t begin_, end_;
  int island_, islands_;
  std::optional<std::uint64_t> seed_;  // dealt; none: a slice read in order
  std::optional<Permutation> order_;   // the order of pass pass_
  std::uint64_t pass_ = 0;
  std::uint64_t k_ = 0;  // windows drawn
};

/// A file mapped read-only for the life of the corpus.
struct Mapping {
  void* addr = MAP_FAILED;
  std::size_t len = 0;
  ~Mapping() {
    if (addr != MAP_FAILED) munmap(addr, len);
  }
};

std::string quoted(const std::string& s) { return "'" + s + "'"; }

/// The files matching `pattern`, sorted (glob(3)); none is an error naming `key`.
std::vector<std::string> glob_files(const std::string& pattern, const std::string& key) {
  glob_t g{};
  const int rc = ::glob(pattern.c_str(), 0, nullptr, &g);
  std::vector<std::string> files;
  if (rc == 0)
    for (std::size_t i = 0; i < g.gl_pathc; ++i) files.emplace_back(g.gl_pathv[i]);
  globfree(&g);
  if (rc == GLOB_NOMATCH || (rc == 0 && files.empty()))
    throw std::invalid_argument(key + ": " + quoted(pattern) + " matches no file");
  if (rc != 0) throw std::runtime_error(key + ": cannot search for " + quoted(pattern) + " (" + std::strerror(errno) + ")");
  return files;
}

/// Maps `file` read-only, never reading it whole: it must be a regular file (not a device or a
/// pipe, which could be endless) and pass `check_size` (which throws, naming `key`, if not).
template <class CheckSize>
std::shared_ptr<Mapping> map_file(const std::string& file, const std::string& key, CheckSize check_size) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error(key + ": cannot open " + quoted(file) + " (" + std::strerror(errno) + ")");
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw std::invalid_argument(key + ": " + quoted(file) + " is not a regular file");
  }
  const auto size = static_cast<std::size_t>(st.st_size);
  try {
    check_size(size);
  } catch (...) {
    ::close(fd);
    throw;
  }
  auto map = std::make_shared<Mapping>();
  map->addr = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_errno = errno;
  ::close(fd);
  if (map->addr == MAP_FAILED) throw std::runtime_error(key + ": cannot map " + quoted(file) + " (" + std::strerror(map_errno) + ")");
  map->len = size;
  return map;
}

/// Maps one llm.c shard and checks its header against its size; adds its tokens to `seq`.
void map_shard(const std::string& file, const std::string& key, TokenSeq& seq) {
  const auto map = map_file(file, key, [&](std::size_t size) {
    if (size < kShardHeaderBytes)
      throw std::invalid_argument(key + ": " + quoted(file) + " is truncated: " + std::to_string(size) +
                                  " bytes, shorter than the 1024-byte header of a token shard");
  });
  const auto size = map->len;
  std::int32_t header[3];
  std::memcpy(header, map->addr, sizeof header);  // little-endian, as llm.c writes it
  if (header[0] != kShardMagic)
    throw std::invalid_argument(key + ": " + quoted(file) + " is not an llm.c token shard (magic number " +
                                std::to_string(header[0]) + ", expected " + std::to_string(kShardMagic) + ")");
  if (header[1] != kShardVersion)
    throw std::invalid_argument(key + ": " + quoted(file) + " has version " + std::to_string(header[1]) +
                                " (only version 1, uint16 tokens, is read)");
  if (header[2] < 0)
    throw std::invalid_argument(key + ": " + quoted(file) + " counts " + std::to_string(header[2]) + " tokens in its header");
  const auto count = static_cast<std::size_t>(header[2]), expected = kShardHeaderBytes + 2 * count;
  if (size != expected)
    throw std::invalid_argument(key + ": " + quoted(file) + (size < expected ? " is truncated: its" : ": its") +
                                " header counts " + std::to_string(count) + " tokens (" + std::to_string(expected) +
                                " bytes with the header) but the file holds " + std::to_string(size) + " bytes");
  madvise(map->addr, size, MADV_WILLNEED);
  seq.add({static_cast<const unsigned char*>(map->addr) + kShardHeaderBytes, 2, count, file, kShardHeaderBytes}, map);
}

std::shared_ptr<const TokenSeq> map_shards(const std::string& pattern, const std::string& key) {
  auto seq = std::make_shared<TokenSeq>();
  for (const auto& f : glob_files(pattern, key)) map_shard(f, key, *seq);
  return seq;
}

/// Refuses the first token ≥ vocab, naming its file and byte offset; counts every token into
/// `counts` (sized vocab) if given.
void check_tokens(const TokenSeq& seq, int vocab, const std::string& key, std::vector<double>* counts) {
  const auto V = static_cast<std::uint32_t>(vocab);
  for (const auto& run : seq.runs()) {
    const auto* p = static_cast<const unsigned char*>(run.data);
    for (std::size_t k = 0; k < run.n; ++k) {
      const std::uint32_t t = run.width == 1 ? p[k] : static_cast<std::uint32_t>(p[2 * k] | (p[2 * k + 1] << 8));
      if (t >= V)
        throw std::invalid_argument(key + ": " + quoted(run.file) + " holds token " + std::to_string(t) + " at byte offset " +
                                    std::to_string(run.offset + k * static_cast<std::size_t>(run.width)) +
                                    ", not below model.vocab = " + std::to_string(vocab));
      if (counts) (*counts)[t] += 1.0;
    }
  }
}

}  // namespace

TokenShardWriter::TokenShardWriter(std::string dir, std::string prefix, std::size_t shard_tokens)
    : dir_(std::move(dir)), prefix_(std::move(prefix)), shard_tokens_(shard_tokens) {
  if (shard_tokens_ == 0) throw std::invalid_argument("shard tokens: must be at least 1");
  if (shard_tokens_ > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()))
    throw std::invalid_argument("shard tokens: at most 2147483647 (the header's count is an int32)");
}

void TokenShardWriter::open_next() {
  char name[32];
  std::snprintf(name, sizeof name, "_%06zu.bin", files_.size());
  files_.push_back(dir_ + "/" + prefix_ + name);
  // Written beside its name and renamed over it in finish(): a run that has the old shard of
  // that name mapped keeps reading it (a shard truncated under a mapping ends its reader with
  // SIGBUS), and a crash never leaves a half-written shard under a shard's name.
  out_.open(files_.back() + ".tmp", std::ios::binary | std::ios::trunc);
  if (!out_) throw std::runtime_error("cannot write '" + files_.back() + ".tmp'");
  const std::vector<char> header(kShardHeaderBytes, 0);  // its count is written on closing
  out_.write(header.data(), static_cast<std::streamsize>(header.size()));
  in_shard_ = 0;
}

void TokenShardWriter::close_current() {
  if (!out_.is_open()) return;
  std::int32_t head[3] = {kShardMagic, kShardVersion, static_cast<std::int32_t>(in_shard_)};
  out_.seekp(0);
  out_.write(reinterpret_cast<const char*>(head), sizeof head);
  out_.close();
  const std::string tmp = files_.back() + ".tmp";
  if (!out_) throw std::runtime_error("cannot write '" + tmp + "'");
  const int fd = ::open(tmp.c_str(), O_RDONLY | O_CLOEXEC);
  const bool synced = fd >= 0 && ::fsync(fd) == 0;
  const int err = errno;
  if (fd >= 0) ::close(fd);
  if (!synced) throw std::runtime_error("cannot write '" + tmp + "' (" + std::strerror(err) + ")");
}

TokenShardWriter::~TokenShardWriter() {
  if (finished_) return;
  out_.close();
  std::error_code ec;
  for (const auto& f : files_) std::filesystem::remove(f + ".tmp", ec);
}

void TokenShardWriter::add(std::span<const std::uint32_t> ids) {
  for (std::uint32_t id : ids) {
    if (id > 0xFFFF)
      throw std::invalid_argument("token id " + std::to_string(id) + " does not fit a shard's 16-bit tokens (at most 65535)");
    if (!out_.is_open() || in_shard_ == shard_tokens_) {
      close_current();
      open_next();
    }
    const unsigned char le[2] = {static_cast<unsigned char>(id & 0xFF), static_cast<unsigned char>(id >> 8)};
    out_.write(reinterpret_cast<const char*>(le), 2);
    ++in_shard_;
    ++total_;
  }
  if (!out_.good() && out_.is_open()) throw std::runtime_error("cannot write '" + files_.back() + "'");
}

std::vector<std::string> TokenShardWriter::finish() {
  close_current();
  for (const auto& f : files_)
    if (std::rename((f + ".tmp").c_str(), f.c_str()) != 0)
      throw std::runtime_error("cannot put '" + f + "' in place (" + std::strerror(errno) + ")");
  if (const int dir = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dir >= 0) {  // the renames, durable
    ::fsync(dir);
    ::close(dir);
  }
  finished_ = true;
  // Shards of this prefix numbered past the last one written are an earlier, longer run's: left
  // in place, a glob over the folder would read them after these.
  std::error_code ec;
  const std::string head = prefix_ + "_";
  for (const auto& entry : std::filesystem::directory_iterator(dir_, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.size() != head.size() + 10 || name.compare(0, head.size(), head) != 0 || !name.ends_with(".bin")) continue;
    const std::string number = name.substr(head.size(), 6);
    if (!std::all_of(number.begin(), number.end(), [](char ch) { return ch >= '0' && ch <= '9'; })) continue;
    if (std::stoul(number) >= files_.size()) std::filesystem::remove(entry.path(), ec);
  }
  return files_;
}

int synthetic_max_token(const DataConfig& cfg) {
  const int n = std::clamp(cfg.alphabet, 1, kMaxAlphabet);
  return static_cast<unsigned char>(*std::max_element(kSymbols, kSymbols + n));
}

std::optional<std::string> synthetic_language_too_large(const DataConfig& c) {
  if (c.corpus != "synthetic") return std::nullopt;
  // Working out the language's entropy floor (MarkovLanguage::analyse) walks every document
  // position through every context and successor of every dialect, before anything trains:
  // 2^32 steps take a few seconds of one core; 2^36, a minute or more.
  const double work = std::max(c.dialects, 0) * std::pow(static_cast<double>(std::max(c.alphabet, 0)), std::clamp(c.order, 0, 8)) *
                      std::max(c.branching, 0) * std::max(c.doc_len, 0);
  if (work <= 68719476736.0) return std::nullopt;
  return "data.doc_len: data.dialects × alphabet^order × branching × doc_len = " + std::to_string(static_cast<long long>(work)) +
         " steps to analyse the synthetic language, more than 2^36 (a minute or more before training starts)";
}

std::vector<std::string> validate(const DataConfig& c) {
  std::vector<std::string> e;
  if (c.corpus != "synthetic" && c.corpus != "file" && c.corpus != "tokens")
    e.push_back("data.corpus: must be \"synthetic\", \"file\" or \"tokens\" (got \"" + c.corpus + "\")");
  if (c.corpus != "synthetic" && c.path.empty()) e.push_back("data.path: required when data.corpus = \"" + c.corpus + "\"");
  if (c.corpus == "tokens" && c.eval_path.empty())
    e.push_back("data.eval_path: required when data.corpus = \"tokens\" (a glob of the evaluation shards)");
  if (c.corpus != "tokens" && !c.eval_path.empty())
    e.push_back("data.eval_path: only for data.corpus = \"tokens\" (the other corpora hold out their own split)");
  if (c.alphabet < 2 || c.alphabet > kMaxAlphabet)
    e.push_back("data.alphabet: must be in [2, " + std::to_string(kMaxAlphabet) + "] (got " + std::to_string(c.alphabet) + ")");
  if (c.order < 1 || c.order > 4) e.push_back("data.order: must be in [1, 4] (got " + std::to_string(c.order) + ")");
  else if (c.alphabet >= 2 && std::pow(static_cast<double>(c.alphabet), c.order) > (1 << 20))
    e.push_back("data.order: alphabet^order must be at most 2^20 contexts");
  if (c.branching < 1 || c.branching > c.alphabet)
    e.push_back("data.branching: must be in [1, data.alphabet] (got " + std::to_string(c.branching) + ")");
  if (c.dialects < 1 || c.dialects > 64) e.push_back("data.dialects: must be in [1, 64] (got " + std::to_string(c.dialects) + ")");
  if (c.doc_len <= c.order) e.push_back("data.doc_len: must exceed data.order (got " + std::to_string(c.doc_len) + ")");
  if (!(c.skew >= 0.0 && c.skew <= 1.0)) e.push_back("data.skew: must be in [0, 1]");
  if (c.eval_tokens < 1024) e.push_back("data.eval_tokens: must be at least 1024");
  if (!(c.eval_fraction > 0.0 && c.eval_fraction < 1.0)) e.push_back("data.eval_fraction: must be in (0, 1)");
  return e;
}

void BatchSource::skip(long batches, int B, int T) {
  Batch scratch;
  for (long k = 0; k < batches; ++k) next(B, T, scratch);
}

Corpus Corpus::make(const DataConfig& cfg, int vocab) {
  if (auto errs = validate(cfg); !errs.empty()) throw std::invalid_argument(errs.front());
  if (auto big = synthetic_language_too_large(cfg)) throw std::invalid_argument(*big);
  if (vocab < 2 || vocab > kMaxVocab) throw std::invalid_argument("model.vocab: must be in [2, " + std::to_string(kMaxVocab) + "]");
  Corpus c;
  c.cfg_ = cfg;
  if (cfg.corpus == "synthetic") {
    if (synthetic_max_token(cfg) >= vocab)
      throw std::invalid_argument("model.vocab: " + std::to_string(vocab) + " is too small for the synthetic language (bytes up to " +
                                  std::to_string(synthetic_max_token(cfg)) + ")");
    c.lang_ = std::make_shared<MarkovLanguage>(cfg);
    const auto uniform = mixture(cfg, 0, true);
    c.floor_ = c.lang_->floor(uniform);
    c.unigram_ = c.lang_->unigram(uniform);
    Rng rng(derive_seed(cfg.seed, kEvalStream));
    auto eval = std::make_shared<std::vector<std::uint8_t>>();
    while (eval->size() < cfg.eval_tokens) c.lang_->document(pick(uniform, rng), rng, *eval);
    eval->resize(cfg.eval_tokens);
    auto seq = std::make_shared<TokenSeq>();
    seq->add({eval->data(), 1, eval->size(), "the synthetic evaluation split", 0}, eval);
    c.eval_ = std::move(seq);
    return c;
  }
  if (cfg.corpus == "tokens") {
    auto train = map_shards(cfg.path, "data.path");
    auto eval = map_shards(cfg.eval_path, "data.eval_path");
    std::vector<double> counts(static_cast<std::size_t>(std::min(vocab, 1 << 16)), 0.0);
    check_tokens(*train, vocab, "data.path", &counts);
    check_tokens(*eval, vocab, "data.eval_path", nullptr);
    if (train->size() == 0) throw std::invalid_argument("data.path: the shards of " + quoted(cfg.path) + " hold no tokens");
    if (eval->size() == 0) throw std::invalid_argument("data.eval_path: the shards of " + quoted(cfg.eval_path) + " hold no tokens");
    for (auto& x : counts) x /= static_cast<double>(train->size());
    c.unigram_ = entropy_of(counts);
    c.train_ = std::move(train);
    c.eval_ = std::move(eval);
    return c;
  }
  // A text file read as bytes, memory-mapped like the shards (a file larger than memory trains too).
  const auto bytes = map_file(cfg.path, "data.path", [&](std::size_t size) {
    const auto n_eval = static_cast<std::size_t>(static_cast<double>(size) * cfg.eval_fraction);
    if (size < 4096 || n_eval < 1024)
      throw std::invalid_argument("data.path: '" + cfg.path + "' is too small (" + std::to_string(size) +
                                  " bytes; need at least 4096 and an evaluation tail of 1024)");
  });
  const auto* data = static_cast<const std::uint8_t*>(bytes->addr);
  const auto n_eval = static_cast<std::size_t>(static_cast<double>(bytes->len) * cfg.eval_fraction);
  const std::size_t n_train = bytes->len - n_eval;
  std::vector<double> counts(256, 0.0);
  for (std::size_t k = 0; k < n_train; ++k) counts[data[k]] += 1.0;
  for (auto& x : counts) x /= static_cast<double>(n_train);
  c.unigram_ = entropy_of(counts);
  auto train = std::make_shared<TokenSeq>(), eval = std::make_shared<TokenSeq>();
  train->add({data, 1, n_train, cfg.path, 0}, bytes);
  eval->add({data + n_train, 1, n_eval, cfg.path, n_train}, bytes);
  check_tokens(*train, vocab, "data.path", nullptr);
  check_tokens(*eval, vocab, "data.path", nullptr);
  c.train_ = std::move(train);
  c.eval_ = std::move(eval);
  return c;
}

std::unique_ptr<BatchSource> Corpus::shard(int island, int num_islands) const {
  const std::uint64_t seed = derive_seed(cfg_.seed, static_cast<std::uint64_t>(island) + 1);
  if (lang_) return std::make_unique<SyntheticShard>(lang_, mixture(cfg_, island, cfg_.iid), seed);
  const std::size_t n = train_->size();
  const auto i = static_cast<std::size_t>(island), m = static_cast<std::size_t>(num_islands);
  if (cfg_.corpus == "tokens")
    return cfg_.iid ? TokenWindows::dealt(train_, island, num_islands, derive_seed(cfg_.seed, kDealStream))
                    : TokenWindows::slice(train_, n * i / m, n * (i + 1) / m, island);
  if (cfg_.iid) return std::make_unique<FileShard>(train_, 0, n, seed);
  return std::make_unique<FileShard>(train_, n * i / m, n * (i + 1) / m, seed);
}

std::size_t Corpus::eval_size() const { return eval_->size(); }

std::vector<std::uint32_t> Corpus::eval_tokens() const {
  std::vector<std::uint32_t> all(eval_->size());
  if (!all.empty()) eval_->copy(0, all.size(), all.data());
  return all;
}

std::vector<std::size_t> Corpus::eval_window_starts(int T, std::size_t count) const {
  const auto w = static_cast<std::size_t>(T) + 1;
  if (eval_->size() < w)
    throw std::invalid_argument(std::string(cfg_.corpus == "tokens" ? "data.eval_path" : cfg_.corpus == "file" ? "data.eval_fraction" : "data.eval_tokens") +
                                ": the evaluation split (" + std::to_string(eval_->size()) + " tokens) is shorter than one window of " +
                                std::to_string(w));
  if (count > (std::size_t{1} << 31)) throw std::invalid_argument("evaluation: more than 2^31 windows");
  if (count == 0) return {};
  // Starts 0 .. R-1; stretch k holds [k·R/n, (k+1)·R/n), computed as k·q + k·r/n without overflow
  // (k, r < n ≤ 2^31, so k·r < 2^62).
  const std::size_t R = eval_->size() - w + 1, n = count, q = R / n, r = R % n;
  const auto bound = [&](std::size_t k) { return k * q + k * r / n; };
  Rng rng(derive_seed(cfg_.seed, kEvalWindowStream));
  std::vector<std::size_t> starts(n);
  for (std::size_t k = 0; k < n; ++k) {
    const std::size_t lo = bound(k), hi = bound(k + 1);
    starts[k] = hi > lo ? lo + rng.below(hi - lo) : lo;  // more windows than starts: some repeat
  }
  return starts;
}

std::vector<Batch> Corpus::eval_batches(int B, int T, int count) const {
  const auto w = static_cast<std::size_t>(T) + 1;
  const auto starts = eval_window_starts(T, static_cast<std::size_t>(B) * static_cast<std::size_t>(count));
  std::vector<Batch> out(static_cast<std::size_t>(count));
  std::size_t k = 0;
  for (auto& b : out) {
    b.B = B;
    b.T = T;
    b.tokens.resize(static_cast<std::size_t>(B) * w);
    for (int i = 0; i < B; ++i, ++k) eval_->copy(starts[k], w, b.tokens.data() + static_cast<std::size_t>(i) * w);
  }
  return out;
}

std::string Corpus::describe() const {
  std::ostringstream s;
  if (lang_) {
    s << "synthetic language: " << cfg_.dialects << " dialects, order-" << cfg_.order << " Markov over "
      << cfg_.alphabet << " symbols, " << cfg_.branching << " successors per context, "
      << (cfg_.iid ? "IID" : "non-IID") << " shards; entropy floor " << *floor_ << " nats/token, unigram "
      << unigram_ << " nats";
  } else if (cfg_.corpus == "tokens") {
    s << "token shards " << cfg_.path << ": " << train_->runs().size() << " files, " << train_->size()
      << " training tokens, "
      << (cfg_.iid ? "windows dealt to the islands in a seeded random order" : "each island reads its own slice")
      << "; evaluation " << cfg_.eval_path << ": "
      << eval_->runs().size() << " files, " << eval_->size() << " tokens; unigram entropy " << unigram_ << " nats";
  } else {
    s << "file " << cfg_.path << ": " << train_->size() << " training bytes, " << eval_->size()
      << " evaluation bytes, " << (cfg_.iid ? "IID" : "non-IID") << " shards; unigram entropy " << unigram_
      << " nats";
  }
  return s.str();
}

}  // namespace diloco
