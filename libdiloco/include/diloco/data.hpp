// Training data: a built-in synthetic language with a known loss floor, or a plain text file;
// deterministic per-island shards (IID or non-IID) and a held-out evaluation split.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "diloco/model.hpp"

namespace diloco {

/// Where the bytes come from and how islands share them.
struct DataConfig {
  std::string corpus = "synthetic";  // "synthetic" (built in) or "file"
  std::string path;                  // corpus = "file": a plain text file, read as bytes
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
  // contiguous slice of the file.
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
  /// Target tokens handed out so far (B·T per batch).
  std::uint64_t tokens_served() const { return tokens_; }

protected:
  std::uint64_t tokens_ = 0;
};

class MarkovLanguage;

/// A corpus: training shards for islands, a fixed evaluation split, and what is known of its
/// entropy. Solves "every island gets its own reproducible data, and we know the best loss".
class Corpus {
public:
  /// Builds the corpus; throws std::invalid_argument naming the key on bad settings and
  /// std::runtime_error if a file cannot be read.
  static Corpus make(const DataConfig& cfg);

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
  const std::vector<std::uint8_t>& eval_tokens() const { return eval_; }

  /// Loss floor in nats/token of the evaluation stream, if the source is known (synthetic):
  /// the conditional entropy of the next byte given the dialect and all earlier bytes of its
  /// document. A lower bound: a model must also infer the dialect and document boundaries.
  std::optional<double> entropy_floor() const { return floor_; }
  /// Entropy of the byte unigram distribution in nats (exact for synthetic, measured for files).
  double unigram_entropy() const { return unigram_; }
  /// One line saying what the corpus is.
  std::string describe() const;

private:
  DataConfig cfg_;
  std::shared_ptr<const MarkovLanguage> lang_;      // synthetic only
  std::shared_ptr<const std::vector<std::uint8_t>> train_;  // file only
  std::vector<std::uint8_t> eval_;
  std::optional<double> floor_;
  double unigram_ = 0.0;
};

/// Validation messages ("data.order: ...") for a data config; empty when valid.
std::vector<std::string> validate(const DataConfig& cfg);

}  // namespace diloco
