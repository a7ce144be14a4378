// Training data: a built-in synthetic language with a known loss floor, a plain text file, or
// pre-tokenised llm.c shards (memory-mapped); deterministic per-island shards (IID or non-IID) and
// a held-out evaluation split.
#pragma once

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "diloco/model.hpp"

namespace diloco {

/// Where the tokens come from and how islands share them.
struct DataConfig {
  std::string corpus = "synthetic";  // "synthetic" (built in), "file" or "tokens"
  std::string path;                  // corpus = "file": a plain text file, read as bytes;
                                     // "tokens": a glob(3) pattern of llm.c .bin shards, read in
                                     // sorted order as one stream
  std::string eval_path;             // corpus = "tokens": a glob of the evaluation shards
  std::uint64_t seed = 1;            // seeds the language itself and every shard
  // The synthetic language: `dialects` sparse order-`order` Markov chains over `alphabet`
  // symbols, each context allowing `branching` successors out of a pool of 2·branching that
  // depends on the last symbol only (so lower orders carry part of the signal, as in text);
  // documents of `doc_len` bytes.
  int alphabet = 24;
  int order = 2;
  int branching = 3;
  int dialects = 4;
  int doc_len = 512;
  // Sharding: IID islands all see the same mixture; non-IID island i draws a share `skew`
  // of its documents from dialect i mod dialects (synthetic) or reads only its own
  // contiguous slice of the file. Token shards: IID, the windows of the whole stream are dealt
  // to the islands in a random order drawn from `seed`, a new one each pass, disjoint within a
  // pass; non-IID, island i of M reads its own slice i/M of the stream, window after window.
  bool iid = true;
  double skew = 0.7;
  std::size_t eval_tokens = 131072;  // held-out evaluation tokens
  double eval_fraction = 0.1;        // corpus = "file": tail share kept for evaluation
};

/// Something that hands out training batches and counts the tokens it served.
class BatchSource {
public:
  virtual ~BatchSource() = default;
  /// Fills `out` with B windows of T+1 tokens.
  virtual void next(int B, int T, Batch& out) = 0;
  /// Moves past `batches` batches of B windows, as if next() had been called that often (a
  /// resumed island goes on where it was: its position is a function of the batches it drew).
  /// The default draws them; sources that can seek override it.
  virtual void skip(long batches, int B, int T);
  /// Target tokens handed out so far (B·T per batch).
  std::uint64_t tokens_served() const { return tokens_; }

protected:
  std::uint64_t tokens_ = 0;
};

class MarkovLanguage;
class TokenSeq;

/// A corpus: training shards for islands, a fixed evaluation split, and what is known of its
/// entropy. Solves "every island gets its own reproducible data, and we know the best loss".
class Corpus {
public:
  /// Builds the corpus for a model of `vocab` token ids; throws std::invalid_argument naming the
  /// key on bad settings or data (a token shard that is not one, naming the file and what is
  /// wrong; a token ≥ vocab, naming the file and its byte offset) and std::runtime_error if a
  /// file cannot be read. Every token of the data is checked here, once, so that training
  /// never meets a bad one. Token shards are memory-mapped, not read into memory.
  static Corpus make(const DataConfig& cfg, int vocab = 256);

  /// Training batches for island `island` of `num_islands` (same inputs, same batches).
  std::unique_ptr<BatchSource> shard(int island, int num_islands) const;
  /// Where `count` evaluation windows of T+1 tokens start: the split's possible starts cut into
  /// `count` equal stretches, one window in each at an offset drawn from data.seed (stratified
  /// sampling). Deterministic; the windows reach from the head of the split to its end, so the
  /// loss is not that of the head alone, and no period of the text (data.doc_len) aliases with
  /// their spacing. Windows overlap when count exceeds the possible starts.
  std::vector<std::size_t> eval_window_starts(int T, std::size_t count) const;
  /// `count` batches of B evaluation windows (the count·B windows of eval_window_starts).
  std::vector<Batch> eval_batches(int B, int T, int count) const;
  /// `count` evaluation windows, one per batch, so an evaluation can tell how the loss varies
  /// from window to window (evaluate_with_error); what train.eval_windows asks for.
  std::vector<Batch> eval_windows(int T, int count) const { return eval_batches(1, T, count); }
  /// About `windows` evaluation windows spread the same way, in batches of up to 8 (a cheap
  /// mean loss for progress reports; no standard error).
  std::vector<Batch> progress_windows(int T, int windows) const {
    const int B = std::max(1, std::min(8, windows));
    return eval_batches(B, T, (windows + B - 1) / B);
  }
  /// Tokens in the evaluation split.
  std::size_t eval_size() const;
  /// A copy of the whole evaluation split (for tests and small splits).
  std::vector<std::uint32_t> eval_tokens() const;

  /// Loss floor in nats/token of the evaluation stream, if the source is known (synthetic):
  /// the conditional entropy of the next byte given the dialect and all earlier bytes of its
  /// document. A lower bound: a model must also infer the dialect and document boundaries.
  std::optional<double> entropy_floor() const { return floor_; }
  /// Entropy of the token unigram distribution in nats (exact for synthetic, measured over the
  /// training data otherwise).
  double unigram_entropy() const { return unigram_; }
  /// One line saying what the corpus is.
  std::string describe() const;

private:
  DataConfig cfg_;
  std::shared_ptr<const MarkovLanguage> lang_;      // synthetic only
  std::shared_ptr<const TokenSeq> train_;          // file and tokens
  std::shared_ptr<const TokenSeq> eval_;
  std::optional<double> floor_;
  double unigram_ = 0.0;
};

/// Writes token ids as llm.c shards, the files data.corpus = "tokens" reads: `dir`/`prefix`_000000.bin,
/// `prefix`_000001.bin, ... of at most `shard_tokens` tokens each (header of 256 int32: magic
/// 20240520, version 1, token count; then uint16 little-endian). Solves "turn my tokenizer's
/// output into training data" without holding it in memory: each shard is streamed to its file
/// and its count written into its header when it is full or at finish().
class TokenShardWriter {
public:
  /// Throws std::invalid_argument if shard_tokens is 0.
  TokenShardWriter(std::string dir, std::string prefix, std::size_t shard_tokens);
  /// A writer that did not finish removes what it wrote: its shards are still temporary files.
  ~TokenShardWriter();
  TokenShardWriter(const TokenShardWriter&) = delete;
  TokenShardWriter& operator=(const TokenShardWriter&) = delete;
  /// Appends ids to the stream; throws std::invalid_argument for an id above 65535 (uint16) and
  /// std::runtime_error if a file cannot be written.
  void add(std::span<const std::uint32_t> ids);
  /// Completes the last shard and puts every shard in place at once (each is written as
  /// NAME.tmp, fsynced, and renamed over NAME here, so a run that has the old ones mapped keeps
  /// reading them, and a writer that fails midway leaves the old set whole); then removes the
  /// shards of this prefix numbered past the last one written (an earlier, longer stream's), so
  /// a glob reads this stream alone. Returns every file written, in order.
  std::vector<std::string> finish();
  std::uint64_t tokens() const { return total_; }

private:
  void open_next();
  void close_current();
  std::string dir_, prefix_;
  std::size_t shard_tokens_;
  std::ofstream out_;
  std::size_t in_shard_ = 0;
  std::uint64_t total_ = 0;
  std::vector<std::string> files_;
  bool finished_ = false;
};

/// The largest token id the synthetic language writes (its symbols are ASCII bytes); data.alphabet
/// must be in [2, 64].
int synthetic_max_token(const DataConfig& cfg);

/// Validation messages ("data.order: ...") for a data config; empty when valid.
std::vector<std::string> validate(const DataConfig& cfg);
/// The problem with a synthetic language too large to work out before training (more than 2^36
/// steps: dialects × alphabet^order × branching × doc_len), or nothing. A product of values each
/// valid alone: validate(RunConfig) reports it once every value is in range, Corpus::make refuses it.
std::optional<std::string> synthetic_language_too_large(const DataConfig& cfg);

}  // namespace diloco
