// A run's state directory (`diloco run CONFIG --state DIR`): what a whole run needs to resume
// where it stopped, and the settings it was started with, so that it is never resumed under
// another configuration.
//
//   DIR/run.toml           the manifest: the directory's format and every setting of the run
//   DIR/state.safetensors  (`diloco run`) the syncer's checkpoint (global parameters, outer optimizer state,
//                          rounds) with each island's own state (parameters, AdamW moments, step
//                          and learning-rate position, progress since its last send) and the
//                          run's progress (seconds trained, tokens per island) as metadata
//
// Across sites, `diloco syncer --state DIR` keeps DIR/syncer.safetensors (the syncer's part) and
// `diloco site --state DIR` DIR/sites/NAME.safetensors (its islands' own states).
//
// Every file is written crash-safe (temporary file, fsync, rename). Data read positions follow from
// the islands' steps (every step draws one batch), and nothing else in a run draws random
// numbers once it has started, so there is no generator state to keep.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "diloco/checkpoint.hpp"
#include "diloco/config.hpp"
#include "diloco/expected.hpp"

namespace diloco {

/// The layout of a state directory; one written in another is refused, naming both.
inline constexpr int kRunStateFormat = 1;

/// Settings that may differ between a state directory and the run resuming from it: the state
/// file's own path (the directory sets it).
bool may_differ_on_resume(const std::string& key);

/// The manifest of a run of `cfg`: "format = N" and then every setting as "section.key = value".
std::string run_manifest(const RunConfig& cfg);

/// Checks a manifest read back against the run about to resume: ok, or checkpoint_mismatch
/// naming every setting that differs ("train.H is 20 in the state directory, 40 now"; a key one
/// side lacks is named too) or the format, when it is not kRunStateFormat.
Status check_manifest(const std::string& manifest, const RunConfig& cfg);

/// The state directory of a run, opened for writing and resuming. The processes of a run across
/// sites may share one: each writes its own state file beside the one manifest.
struct RunStateDir {
  std::string dir;
  bool resuming = false;                 // it holds this process's state file to resume from
  std::string file = "state.safetensors";  // `diloco run`; "syncer.safetensors", "sites/NAME.safetensors"

  std::string manifest_path() const { return dir + "/run.toml"; }
  std::string state_path() const { return dir + "/" + file; }
};

/// Opens `dir` for a run of `cfg` whose state file is `file` (a path inside it): creates both and writes the manifest
/// when it has none; checks the manifest otherwise (check_manifest). A state file without a
/// manifest is refused (not this build's to overwrite). io_error when the directory cannot be
/// made or written.
Expected<RunStateDir> open_run_state(const std::string& dir, const RunConfig& cfg,
                                     const std::string& file = "state.safetensors");

/// A site's state file (`diloco site --state`): its islands' own states. The global part, which
/// the syncer keeps, is the run's initial parameters with zero momentum at round 0, so that the
/// file is an ordinary checkpoint any reader of one can check.
Checkpoint islands_state_file(std::span<const float> initial, const FragmentPlan& plan, std::vector<IslandState> islands);

/// How far the whole run had gone when its state was written.
struct RunProgress {
  double elapsed_s = 0.0;              // seconds since the run started (across resumptions)
  std::vector<std::uint64_t> tokens;   // per island: tokens trained
};

/// Adds `p` to a checkpoint's metadata (keys "run.elapsed_s", "run.tokens").
void put_run_progress(Checkpoint& cp, const RunProgress& p);
/// Reads it back for a run of `islands` islands (absent keys: nothing trained yet);
/// corrupt_checkpoint when a value is not what put_run_progress writes.
Expected<RunProgress> run_progress_of(const std::map<std::string, std::string>& metadata, int islands);

}  // namespace diloco
