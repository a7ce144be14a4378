// Shared fixed run state for the decoder fuzz targets and the corpus generator, so seeds
// produced by make_corpus reach deep into the checks instead of stopping at "unknown fragment".
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <memory>
#include <span>
#include <variant>

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

/// What a syncer does with one frame its relay takes from SiteRun's site on `path` (0 join,
/// 1 progress, 2 fragment) at `now`, with the checks both site targets make: the relay's check
/// (admit_site_frame) passes only the path's message type from the site's own islands; a join
/// (a re-join keeping θ withdraws its sends) is answered with a reply that decodes again with
/// every fragment; a heard step is the largest heard; every refused fragment is counted. A broken
/// check traps; a frame the relay refuses changes nothing.
inline void apply_site_frame(const SiteRun& run, SyncerCore& core, int path, std::span<const std::byte> frame, double now) {
  const MessageType paths[] = {MessageType::join_request, MessageType::progress, MessageType::fragment};
  const MessageType want = paths[path % 3];
  auto f = admit_site_frame(frame, want, run.site_islands, "b");
  if (!f) return;
  if (type_of(f->message) != want) __builtin_trap();
  if (f->island != run.site_islands[0] && f->island != run.site_islands[1]) __builtin_trap();
  switch (want) {
    case MessageType::join_request: {
      const auto& req = std::get<JoinRequest>(f->message);
      const auto reply = encode_message(core.join_reply(f->island, req.keeps_local, nullptr, req.holds));
      auto back = decode_message(reply);
      if (!back || !std::holds_alternative<JoinReply>(*back)) __builtin_trap();
      if (std::get<JoinReply>(*back).fragments.size() != static_cast<std::size_t>(run.plan.count())) __builtin_trap();
      break;
    }
    case MessageType::progress: {
      const auto& pm = std::get<ProgressMessage>(f->message);
      const auto before = core.last_step(pm.island);
      core.heard(pm.island, pm.local_step, now, pm.step_seconds);
      if (core.last_step(pm.island) != std::max(before, pm.local_step)) __builtin_trap();
      if (!(core.step_time() >= 0.0) || !std::isfinite(core.step_time())) __builtin_trap();
      if (pm.finished) core.finish(pm.island, true);
      break;
    }
    default: {
      const auto before = core.stats().rejected.total();
      auto h = core.receive(frame, now);
      if (!h && core.stats().rejected.total() != before + 1) __builtin_trap();  // every refusal counted
      if (h && h->island != f->island) __builtin_trap();
      break;
    }
  }
}

}  // namespace diloco::fuzz
