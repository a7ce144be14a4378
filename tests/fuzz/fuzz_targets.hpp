// Shared fixed run state for the decoder fuzz targets and the corpus generator, so seeds
// produced by make_corpus reach deep into the checks instead of stopping at "unknown fragment".
#pragma once

#include <memory>

#include "diloco/fragments.hpp"
#include "diloco/model.hpp"
#include "diloco/wire.hpp"

namespace diloco::fuzz {

/// The syncer side of a 4-island run with two fragments of 64 and 32 values.
inline WireContext inbox_context() {
  WireContext c;
  c.fragment_sizes = {64, 32};
  c.rounds = {5, 2};
  c.islands = 4;
  c.max_staleness = 3;
  return c;
}

/// A 1-layer byte GPT with width 8 and 2 strided fragments: small enough for fast fuzzing.
struct TinyRun {
  std::unique_ptr<Model> model;
  FragmentPlan plan;
  TinyRun() : model(make_model(config())), plan(FragmentPlan::strided(model->layout(), 2)) {}
  static ModelConfig config() {
    ModelConfig c;
    c.n_layer = 1;
    c.n_embd = 8;
    c.n_head = 2;
    c.seq_len = 4;
    c.vocab = 256;
    return c;
  }
};

}  // namespace diloco::fuzz
