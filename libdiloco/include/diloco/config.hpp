// The run configuration: plain structs with defaults, validated with errors that name the key,
// loaded from TOML text or a file with optional `key=value` overrides.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "diloco/data.hpp"
#include "diloco/merge.hpp"
#include "diloco/model.hpp"
#include "diloco/optim.hpp"
#include "diloco/wan.hpp"

namespace diloco {

/// How islands train and sync.
struct TrainConfig {
  std::string mode = "diloco";   // "ddp", "diloco", "streaming" (reference loops) or
                                 // "decoupled" (the actor runtime, Decoupled DiLoCo)
  int islands = 4;               // M
  long steps = 500;              // inner steps per island
  int batch = 8;                 // windows per island per step (B); T is model.seq_len
  int H = 50;                    // inner steps between two syncs of a fragment
  int eval_batches = 8;          // evaluation batches of `batch` windows
  std::uint64_t seed = 1;        // model initialisation
};

/// Streaming DiLoCo fragments (arXiv 2501.18512).
struct FragmentConfig {
  int count = 1;                 // P; mode "diloco" always uses 1
  std::string plan = "strided";  // "strided" or "balanced"
  int tau = 0;                   // steps between sending a fragment and adopting the merge
  double alpha = -1.0;           // θ_local ← α·θ_local + (1−α)·Θ; negative = 0.5 if tau > 0 else 0
  double effective_alpha() const { return alpha >= 0.0 ? alpha : (tau > 0 ? 0.5 : 0.0); }
  std::string encoding = "fp32"; // outer gradients on the wire: fp32, bf16, int8, int4, e3m0
  int block_size = 64;           // values per scale (int8, int4, e3m0)
  bool error_feedback = true;    // carry the quantisation residual into the next send
};

/// Islands of the actor runtime (mode "decoupled"): chips per island and per-island speed.
struct IslandsConfig {
  int chips = 2;                 // chips per island (data parallel inside the island)
  std::vector<double> speed;     // per island, in (0, 1]: 0.55 emulates hardware at 55% speed
                                 // (the chip delays its reply); missing islands run at 1.0
  double speed_of(int island) const {
    return island >= 0 && static_cast<std::size_t>(island) < speed.size() ? speed[static_cast<std::size_t>(island)] : 1.0;
  }
};

/// The syncer actor: snapshots that a restarted syncer resumes from.
struct SyncerConfig {
  long snapshot_every = 5;       // global rounds between snapshots (0: never)
  std::string checkpoint;        // snapshot file (safetensors); empty: kept in memory only
};

/// Supervision of the actor tree (OTP flags, applied to the root and every island supervisor).
struct SupervisionConfig {
  std::string strategy = "one_for_one";  // island supervisors: one_for_one, one_for_all, rest_for_one
  int intensity = 5;                     // restarts allowed within period_s, then escalate
  double period_s = 10.0;
  double backoff_initial_s = 0.05;       // first restart delay of a child
  double backoff_max_s = 2.0;
  double backoff_factor = 2.0;
};

/// A fault to inject: kill a chip, an island or the syncer when island `island` finishes
/// local step `at_step` (once per run).
struct FaultSpec {
  std::string kill = "chip";     // "chip", "island" or "syncer"
  int island = 0;
  int chip = 0;
  long at_step = 1;
};

/// Emulated WAN between every island and the syncer (both directions alike), or none.
struct WanConfig {
  bool enabled = false;
  double bandwidth_mbps = 100.0;   // per link and direction, Mbit/s
  double latency_ms = 30.0;        // one way
  double jitter_ms = 0.0;          // uniform ± around the latency
  double loss = 0.0;               // probability that one transmission is lost (then resent)
  double retransmit_timeout_ms = 200.0;
};

struct RunConfig {
  ModelConfig model;
  DataConfig data;
  TrainConfig train;
  AdamWConfig inner;
  OuterConfig outer;
  FragmentConfig fragments;
  MergeConfig merge;
  QuorumConfig quorum;
  IslandsConfig islands;
  SyncerConfig syncer;
  SupervisionConfig supervision;
  std::vector<FaultSpec> faults;  // [[faults]] tables
  WanConfig wan;
};

/// The link of island `island` in one direction (up: to the syncer), seeded per link.
LinkConfig link_config(const RunConfig& cfg, int island, bool up);

/// Every problem of `cfg`, one "section.key: problem" line each; empty when valid.
std::vector<std::string> validate(const RunConfig& cfg);
std::vector<std::string> validate(const ModelConfig& cfg);

/// A configuration that cannot be used; what() lists every problem, each naming its key.
class ConfigError : public std::runtime_error {
public:
  explicit ConfigError(std::vector<std::string> problems);
  const std::vector<std::string>& problems() const { return problems_; }

private:
  std::vector<std::string> problems_;
};

/// Parses TOML text over the defaults, applies `overrides` ("section.key=value", value in TOML
/// syntax), and validates. Unknown sections or keys and wrongly typed values are errors.
/// `origin` names the text in messages (a file name). Throws ConfigError.
RunConfig parse_config(std::string_view toml, const std::vector<std::string>& overrides = {},
                       std::string_view origin = "config");
/// Reads and parses a TOML file; throws ConfigError (also if the file cannot be read).
RunConfig load_config(const std::string& path, const std::vector<std::string>& overrides = {});
/// The defaults as TOML text (what `diloco config` prints), every key present.
std::string default_config_toml();

}  // namespace diloco
