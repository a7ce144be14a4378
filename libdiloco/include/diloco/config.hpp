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

namespace diloco {

/// How islands train and sync.
struct TrainConfig {
  std::string mode = "diloco";   // "ddp", "diloco" or "streaming" (reference loops)
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
};

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
