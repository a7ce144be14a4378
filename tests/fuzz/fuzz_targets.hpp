// Shared fixed run state for the decoder fuzz targets and the corpus generator, so seeds
// produced by make_corpus reach deep into the checks instead of stopping at "unknown fragment".
#pragma once

#include <memory>

#include "diloco/fragments.hpp"
#include "diloco/model.hpp"
#include "diloco/syncer_core.hpp"
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

/// The mlp of the smallest sizes (5 tensors of 2-8 values) with 2 strided fragments: a checkpoint
/// with an island is under 3 KiB, nearly all of it the JSON header, so the fuzzer spends its time
/// on the structure of the file (the header, the metadata, the tensor table) instead of parsing
/// the dozens of tensor entries of a GPT. parse_checkpoint reads any layout the same way.
struct TinyRun {
  std::unique_ptr<Model> model;
  FragmentPlan plan;
  TinyRun() : model(make_model(config())), plan(FragmentPlan::strided(model->layout(), 2)) {}
  static ModelConfig config() {
    ModelConfig c;
    c.kind = "mlp";
    c.vocab = 4;
    c.n_embd = 2;
    c.context = 1;
    c.hidden = 2;
    return c;
  }
};

/// The syncer of a 4-island run behind a relay for the site holding islands 1 and 2: two
/// fragments of 64 and 32 values (one tensor each), quorum 1, so a fragment can commit.
struct SiteRun {
  ParamLayout layout;
  FragmentPlan plan;
  std::vector<float> initial;
  SyncerSettings settings;
  std::vector<int> site_islands{1, 2};
  SiteRun() : layout(make_layout()), plan(FragmentPlan::strided(layout, 2)), initial(layout.size(), 0.5f) {
    settings.islands = 4;
  }
  SyncerCore core() const { return SyncerCore(plan, initial, settings); }
  static ParamLayout make_layout() {
    ParamLayout l;
    l.add("a", {64}, 0, true);
    l.add("b", {32}, 1, true);
    return l;
  }
};

}  // namespace diloco::fuzz
