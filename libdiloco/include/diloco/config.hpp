// The run configuration: plain structs with defaults, validated with errors that name the key,
// loaded from TOML text or a file with optional `key=value` overrides.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "diloco/chaos.hpp"
#include "diloco/data.hpp"
#include "diloco/limits.hpp"
#include "diloco/merge.hpp"
#include "diloco/choice.hpp"
#include "diloco/model.hpp"
#include "diloco/optim.hpp"
#include "diloco/wan.hpp"

namespace diloco {

/// What trains: synchronous data parallel, DiLoCo, Streaming DiLoCo (reference loops, or the
/// actors with --actors) or Decoupled DiLoCo (the actor runtime).
enum class TrainMode { ddp, diloco, streaming, decoupled };
template <>
struct Choices<TrainMode> {
  static constexpr std::pair<TrainMode, std::string_view> all[] = {
      {TrainMode::ddp, "ddp"}, {TrainMode::diloco, "diloco"}, {TrainMode::streaming, "streaming"},
      {TrainMode::decoupled, "decoupled"}};
};

/// When a run ends: every island trained `train.steps`, or all islands together trained what
/// islands × steps would (faster islands do more steps).
enum class Budget { island_steps, total_tokens };
template <>
struct Choices<Budget> {
  static constexpr std::pair<Budget, std::string_view> all[] = {{Budget::island_steps, "island_steps"},
                                                                {Budget::total_tokens, "total_tokens"}};
};

/// What a [[faults]] entry does.
enum class FaultKind { chip, island, syncer, straggle, partition };
template <>
struct Choices<FaultKind> {
  static constexpr std::pair<FaultKind, std::string_view> all[] = {
      {FaultKind::chip, "chip"}, {FaultKind::island, "island"}, {FaultKind::syncer, "syncer"},
      {FaultKind::straggle, "straggle"}, {FaultKind::partition, "partition"}};
};

/// How islands train and sync.
struct TrainConfig {
  TrainMode mode = TrainMode::diloco;
  int islands = 4;               // M
  long steps = 500;              // inner steps per island
  int batch = 8;                 // windows per island per step (B); T is model.seq_len
  int H = 50;                    // inner steps between two syncs of a fragment
  double sync_every_s = 0.0;     // decoupled on actors, > 0: each island syncs a fragment every
                                 // this many seconds of its own time instead of every H steps,
                                 // so islands of any speed send equally fresh contributions
  int eval_windows = 1536;       // held-out windows of seq_len + 1 bytes per evaluation, one in
                                 // each equal stretch of the split (Corpus::eval_window_starts)
  int round_eval_windows = 64;   // actor runs: windows of the per-round evaluation (live table,
                                 // metrics), spread over the split the same way; the summary uses
                                 // eval_windows
  std::uint64_t seed = 1;        // model initialisation
  Budget budget = Budget::island_steps;
  double final_sync_s = 30.0;    // decoupled on actors: at the end every island sends the progress
                                 // it has not sent yet and the run waits up to this long for
                                 // those last contributions to merge (0: end at once, unsent
                                 // progress is not merged)
  int threads = 0;               // actor runs: CAF scheduler threads (0: one per core)
};

/// Streaming DiLoCo fragments (arXiv 2501.18512).
struct FragmentConfig {
  int count = 1;                 // P; mode "diloco" always uses 1
  std::string plan = "strided";  // "strided" or "balanced"
  int tau = 0;                   // steps between sending a fragment and adopting the merge
  double wait_steps = 0.0;       // decoupled on actors: an island holds its next step up to this
                                 // many inner steps for a merge due (its send τ steps old) and
                                 // not yet arrived; after a wait that ran out, none for that
                                 // fragment until a merge settles its sends (IslandSettings::wait_steps);
                                 // 0: islands never wait
  double alpha = -1.0;           // θ_local ← α·θ_local + (1−α)·Θ; negative = 0.5 if tau > 0 else 0
  double effective_alpha() const { return alpha >= 0.0 ? alpha : (tau > 0 ? 0.5 : 0.0); }
  std::string encoding = "fp32"; // outer gradients on the wire: fp32, bf16, int8, int4, e3m0
  std::string broadcast_encoding = "fp32"; // merged fragments on the wire: fp32 (exact Θ) or a lossy one
                                           // (quantised change of Θ̂ with error feedback)
  BroadcastTo broadcast_to = BroadcastTo::all;  // after a commit: every island, or its contributors
                                                // (one frame each with every commit since their last)
  AdoptRule adopt = AdoptRule::mix;  // a commit without the island's own pending send: "mix" it
                                     // (α) or "rebase" onto it, keeping unsent progress whole
  int block_size = 64;           // values per scale (int8, int4, e3m0)
  bool error_feedback = true;    // carry the quantisation residual into the next send
};

/// Islands of the actor runtime (mode "decoupled"): chips per island and per-island speed.
struct IslandsConfig {
  int chips = 2;                 // chips per island (data parallel inside the island)
  std::vector<double> speed;     // per island, in (0, 1]: 0.55 emulates hardware at 55% speed
                                 // (the chip delays its reply); missing islands run at 1.0
  std::vector<int> counts;       // per island: chips of that island; missing islands have `chips`
  double chip_flops = 1e10;      // a simulated run (--simulate): one chip's FLOP/s at speed 1.0; a
                                 // step takes the model's FLOPs over this, over the island's speed
  int chips_of(int island) const {
    return island >= 0 && static_cast<std::size_t>(island) < counts.size() ? counts[static_cast<std::size_t>(island)] : chips;
  }
  int max_chips() const {
    int m = chips;
    for (int c : counts) m = c > m ? c : m;
    return m;
  }
  int total_chips(int islands) const {
    int n = 0;
    for (int i = 0; i < islands; ++i) n += chips_of(i);
    return n;
  }
  double speed_of(int island) const {
    return island >= 0 && static_cast<std::size_t>(island) < speed.size() ? speed[static_cast<std::size_t>(island)] : 1.0;
  }
};

/// The syncer actor: snapshots that a restarted syncer resumes from. In memory the syncer keeps
/// every commit (a restart in the process loses no round); on disk, for a process started again,
/// its state file is written every snapshot_every global rounds.
struct SyncerConfig {
  long snapshot_every = 5;       // global rounds between writes of the state file (0: never)
  std::string checkpoint;        // state file (safetensors); empty: kept in memory only
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

/// A fault to inject, once per run: kill a chip, an island or the syncer, slow an island down
/// ("straggle") or cut a site's link ("partition"), either when island `island` finishes local
/// step `at_step` or `at_s` seconds after the start (exactly one of the two is set).
struct FaultSpec {
  FaultKind kill = FaultKind::chip;
  int island = 0;
  int chip = 0;
  long at_step = 0;              // 0: not step-triggered
  double at_s = -1.0;            // < 0: not time-triggered
  std::string site;              // partition: the site whose link is cut
  double duration_s = 0.0;       // straggle / partition: how long; kills: repair time (0: at once)
  double factor = 0.5;           // straggle: speed meanwhile, in (0, 1]
};

/// A site: a data centre (in multi-process runs, a process) holding some islands, with its own
/// WAN link to the syncer. Without [[sites]] every island is a site of its own, "island-<i>".
struct SiteSpec {
  std::string name;
  std::vector<int> islands;
  double bandwidth_mbps = -1.0;  // this site's link; negative: the [wan] value
  double latency_ms = -1.0;
  double jitter_ms = -1.0;
  double loss = -1.0;
};

/// Between processes (diloco syncer / diloco site): addresses, certificates, liveness.
struct NetConfig {
  std::string listen = "127.0.0.1:7700";  // the syncer's bind address
  std::string certs = "certs";            // scripts/make-certs.sh output: ca.pem, <site>.pem, <site>.key
  double heartbeat_ms = 200.0;            // a site's heartbeat period
  double timeout_ms = 2000.0;             // a site silent this long counts as lost
  double reconnect_initial_ms = 100.0;    // first reconnect delay, doubling per attempt
  double reconnect_max_ms = 3000.0;       // cap of the reconnect delay
  std::string syncer_name = "syncer";     // the name the syncer's certificate must carry (CN / subjectAltName)
  double handshake_ms = 5000.0;           // a connection that has not proven its identity by then is closed
  int pending_per_address = 32;           // connections still in their handshake from one address
  int pending_total = 256;                // ... and from all addresses together
  double join_interval_ms = 1000.0;       // a site's joins of one island reach the syncer at most once
                                          // this often; later ones wait (the newest kept; JoinThrottle)
  // Syncer replicas ([[syncers]]): leadership through etcd's v3 lease and election API.
  std::string etcd = "http://127.0.0.1:2379";  // etcd's HTTP/JSON gateway (only with [[syncers]])
  std::string election = "diloco";             // the election's name in etcd (one per run)
  double lease_ms = 3000.0;                    // the leader's etcd lease: a dead leader is replaced this long after
  bool replicate_before_broadcast = true;      // a commit reaches islands once a majority of replicas holds it
  // Joining mid-run: islands that no [[sites]] entry holds are open; a site of the run's CA that
  // is not in the config takes some with `diloco site --join`.
  bool allow_join = false;
  double join_lease_ms = 30000.0;  // a joiner lost (not left) keeps its islands and their data this long
};

/// One syncer replica of a replicated syncer ([[syncers]] tables): its name (its certificate's
/// CN / subjectAltName) and the address it serves sites on while it leads.
struct SyncerReplicaSpec {
  std::string name;
  std::string address;
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
  std::vector<SiteSpec> sites;    // [[sites]] tables
  std::vector<SyncerReplicaSpec> syncers;  // [[syncers]] tables: a replicated syncer (empty: one syncer at net.listen)
  NetConfig net;
  ChaosConfig chaos;
};

/// The actor system's scheduler threads: train.threads, or one per core when it is 0.
unsigned scheduler_threads(const RunConfig& cfg);

/// Number of sites: the [[sites]] tables, or one per island without them.
int site_count(const RunConfig& cfg);
/// The site holding island `island` (index into site_count()).
int site_of(const RunConfig& cfg, int island);
/// A site's name: its [[sites]] name, or "island-<i>".
std::string site_name(const RunConfig& cfg, int site);
/// The site index of a name, or -1.
int site_index(const RunConfig& cfg, const std::string& name);
/// Index of the [[syncers]] replica called `name`, or -1.
int replica_index(const RunConfig& cfg, const std::string& name);
/// The islands of a site, in order.
std::vector<int> islands_of_site(const RunConfig& cfg, int site);
/// The islands no [[sites]] entry holds: with net.allow_join, the places joiners take (empty
/// without [[sites]], where every island is a site of its own).
std::vector<int> open_islands(const RunConfig& cfg);

/// The WAN link of site `site` in one direction (up: to the syncer), seeded per link: its
/// [[sites]] values over [wan]'s.
LinkConfig link_config(const RunConfig& cfg, int site, bool up);

/// What a configuration implies in memory, so that an absurd size is refused with its key before
/// anything is allocated. Estimated in long double: no value, however large, overflows it. A
/// lower bound of what a run allocates (the reference loops hold one model workspace, the actor
/// runtime one per chip).
struct MemoryNeed {
  long double parameters = 0;        // values of one model copy
  long double state_bytes = 0;       // parameters, gradients and AdamW moments of every island
  long double activation_bytes = 0;  // activation workspaces of train.batch windows
  long double data_bytes = 0;        // evaluation windows, evaluation split, documents being made
  long double total() const { return state_bytes + activation_bytes + data_bytes; }
};
MemoryNeed memory_need(const RunConfig& cfg);

/// Every problem of `cfg`, one "section.key: problem" line each; empty when valid. Sizes are
/// bounded by what they imply: the run must fit in `memory_limit` bytes (see memory_need()) and
/// in the models' index range; durations by kMaxDurationS.
std::vector<std::string> validate(const RunConfig& cfg, std::uint64_t memory_limit = kDefaultMemoryLimit);
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
/// `origin` names the text in messages (a file name); `memory_limit` goes to validate(). Throws
/// ConfigError.
RunConfig parse_config(std::string_view toml, const std::vector<std::string>& overrides = {},
                       std::string_view origin = "config", std::uint64_t memory_limit = kDefaultMemoryLimit);
/// Reads and parses a TOML file; throws ConfigError (also if the file cannot be read).
RunConfig load_config(const std::string& path, const std::vector<std::string>& overrides = {},
                      std::uint64_t memory_limit = kDefaultMemoryLimit);
/// Every setting of `cfg` as ("section.key", value in TOML syntax), in the order of the
/// configuration reference; [[faults]] and [[sites]] tables as "faults[k].key" and
/// "sites[k].key". What a run's state directory records, to refuse resuming under another config.
std::vector<std::pair<std::string, std::string>> config_entries(const RunConfig& cfg);
/// The defaults as TOML text (what `diloco config` prints), every key present.
std::string default_config_toml();

}  // namespace diloco
