// Checkpoints in safetensors layout (readable by other tools): the syncer's global parameters,
// outer momentum and fragment rounds, optionally islands' parameters and AdamW state.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "diloco/expected.hpp"
#include "diloco/fragments.hpp"
#include "diloco/params.hpp"

namespace diloco {

/// One island's private training state; optional in a checkpoint, so a run can resume with a
/// different number of islands (new islands start from the global parameters).
struct IslandState {
  int island = 0;
  std::vector<float> params;  // flat, ParamLayout order
  long adam_steps = 0;        // AdamW::steps_taken()
  long step = 0;              // the island's local step (≥ adam_steps; more after a restart of the
                              // island, whose moments started afresh): the schedule's position
  // Per fragment: target tokens and steps since its last send (IslandCore::tokens_since and
  // steps_since), the weight of the progress the island sends next; empty: none recorded.
  std::vector<std::uint64_t> tokens_since, steps_since;
  std::vector<float> adam_m;  // AdamW::m()
  std::vector<float> adam_v;  // AdamW::v()
  // The global fragments the island held (IslandCore::global), flat in ParamLayout order: a
  // resumed island names them in its join (JoinRequest::holds) and is sent none the syncer
  // still has. Empty: not recorded (files from before; the island names the run's start).
  std::vector<float> global;
};

/// What the syncer needs to resume where it stopped.
struct Checkpoint {
  std::vector<float> params;                 // global θ, flat, ParamLayout order
  std::vector<std::vector<float>> momentum;  // per fragment p: plan.size(p) values (OuterOptimizer::momentum())
  std::vector<std::uint64_t> rounds;         // per fragment: the round number of its global values
  // Delayed Nesterov only: per fragment the sum of contributions waiting for the next momentum
  // step (OuterOptimizer::pending_sum()); empty for the other outer optimizers.
  std::vector<std::vector<double>> outer_pending;
  std::vector<IslandState> islands;          // optional
  std::map<std::string, std::string> metadata;  // run metadata (config, step, ...); keys must not start "diloco."
};

/// Called at each stage of a save ("temp_opened", "half_written", "written", "synced",
/// "renamed"); tests use it to crash a process at a chosen moment.
using SaveHook = std::function<void(std::string_view stage)>;

/// Writes `cp` to `path` atomically: temporary file `path`.tmp, fsync, rename over `path`, fsync
/// the directory. A crash at any moment leaves either the previous checkpoint or the new one.
/// Refuses state that does not match `layout`/`plan` (checkpoint_mismatch) or holds NaN/inf
/// (non_finite): a diverged run never replaces a good checkpoint.
Status save_checkpoint(const std::string& path, const ParamLayout& layout, const FragmentPlan& plan,
                       const Checkpoint& cp, const SaveHook& hook = {});

/// The bytes save_checkpoint writes, in memory (what a leading syncer replica sends its
/// followers); the same refusals.
Expected<std::string> encode_checkpoint(const ParamLayout& layout, const FragmentPlan& plan, const Checkpoint& cp);

struct LoadOptions {
  bool islands = true;  // also load island states (false: global state only)
};

/// Reads and validates a checkpoint for this model and fragment plan: safetensors structure,
/// every tensor's name, dtype, shape and offsets, finite values, metadata and format version.
Expected<Checkpoint> load_checkpoint(const std::string& path, const ParamLayout& layout, const FragmentPlan& plan,
                                     const LoadOptions& opt = {});
/// The same from bytes in memory.
Expected<Checkpoint> parse_checkpoint(std::span<const std::byte> file, const ParamLayout& layout,
                                      const FragmentPlan& plan, const LoadOptions& opt = {});

/// One tensor entry of a safetensors header.
struct TensorInfo {
  std::string name;
  std::string dtype;                 // "F32", "U64", ...
  std::vector<std::uint64_t> shape;
  std::uint64_t begin = 0, end = 0;  // byte offsets into the data section
};

/// A safetensors file checked for structure only (no model needed): what `diloco inspect` shows.
struct SafetensorsFile {
  std::map<std::string, std::string> metadata;
  std::vector<TensorInfo> tensors;    // in data order
  std::size_t data_offset = 0;        // where the data section starts in the file
  std::span<const std::byte> data;    // the data section (points into the parsed bytes)
};

/// Parses and checks the header: length, JSON, dtypes, shapes against byte ranges, ranges that
/// tile the data section exactly. The result points into `file`.
Expected<SafetensorsFile> read_safetensors(std::span<const std::byte> file);

/// Writes `bytes` to `path` the same crash-safe way (temporary file, fsync, rename, fsync of
/// the directory): a crash leaves the old file or the new one, never a mix.
Status write_file_atomically(const std::string& path, std::string_view bytes);
/// Whole file into memory (errc::io_error with the system's reason on failure).
Expected<std::vector<std::byte>> read_file(const std::string& path);

}  // namespace diloco
