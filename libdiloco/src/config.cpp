// Binding of RunConfig to TOML: one table of fields drives parsing, unknown-key detection and
// the documented defaults, so the three can never disagree.
#include "diloco/config.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <string_view>
#include <thread>
#include <variant>

#include "diloco/codec.hpp"
#include "diloco/model_registry.hpp"

#include <toml++/toml.h>

#include "diloco/rng.hpp"

namespace diloco {

namespace {

constexpr long double kMaxIndex = 2147483647.0L;         // the models index tensors with int
constexpr long double kMaxTokens = 4611686018427387904.0L;  // 2^62: token counters are 64-bit
constexpr long double kMaxChaosEvents = 1e7;              // chaos.cpp refuses longer schedules
constexpr float kMaxInitStd = 100.0f;
constexpr double kMinSpeed = 1e-3;                        // a chip at speed s waits 1/s − 1 times its compute
constexpr double kMaxLoss = 0.999;                        // a frame is sent 1/(1 − loss) times on average
constexpr int kMaxIslands = 1024;                            // train.islands
constexpr int kMaxSchedulerThreads = 1024;                   // train.threads

// A setting that names one of an enum's choices (choice.hpp), bound through its name table.
struct ChoicePtr {
  void* target;
  std::string_view (*get)(const void*);
  bool (*set)(void*, std::string_view);
  std::string (*list)();
};
template <class E>
ChoicePtr choice(E* p) {
  return {p, [](const void* v) { return name_of(*static_cast<const E*>(v)); },
          [](void* v, std::string_view s) {
            auto e = choice_of<E>(s);
            if (e) *static_cast<E*>(v) = *e;
            return e.has_value();
          },
          &choice_list<E>};
}

using Options = std::map<std::string, std::string>;
using FieldPtr =
    std::variant<int*, long*, std::uint64_t*, double*, float*, bool*, std::string*, std::vector<double>*,
                 std::vector<int>*, Options*, ChoicePtr>;

struct Field {
  std::string_view section, key;
  FieldPtr ptr;
  std::string_view doc;
};

// The whole configuration surface. Add a key here and it is parsed, checked and documented.
std::vector<Field> fields(RunConfig& c) {
  return {
      {"model", "kind", &c.model.kind,
       "a registered model: \"gpt\" (byte-level transformer), \"mlp\" (next-byte classifier for tests) or one the app "
       "registered (register_model)"},
      {"model", "vocab", &c.model.vocab,
       "V: token ids are below it (256: bytes); sizes the embedding; a token ≥ V in the data is an error"},
      {"model", "seq_len", &c.model.seq_len, "context length T in tokens"},
      {"model", "n_layer", &c.model.n_layer, "gpt: transformer blocks L"},
      {"model", "n_head", &c.model.n_head, "gpt: attention heads (must divide n_embd)"},
      {"model", "n_embd", &c.model.n_embd, "width C (gpt) or embedding size per context byte (mlp)"},
      {"model", "context", &c.model.context, "mlp: bytes of context per prediction"},
      {"model", "hidden", &c.model.hidden, "mlp: hidden units"},
      {"model", "init_std", &c.model.init_std, "standard deviation of the initial weights"},
      {"model", "path", &c.model.path,
       "torchscript: the .pt file (torch.jit.script(m).save(path)) whose forward(inputs, targets) returns the mean loss"},
      {"model", "device", &c.model.device,
       "torchscript: \"cpu\", or \"cuda:N\" where libtorch has CUDA and sees GPU N (refused otherwise; only the CPU path is tested)"},
      {"model", "options", &c.model.options,
       "settings of an app's registered model, passed to its factory as text, e.g. { classes = 10 } (the built-in "
       "kinds take none)"},

      {"data", "corpus", &c.data.corpus,
       "\"synthetic\" (built in, known entropy), \"file\" (a text file as bytes) or \"tokens\" (llm.c token shards)"},
      {"data", "path", &c.data.path,
       "file: a plain text file read as bytes; tokens: a glob of llm.c .bin shards (e.g. \"data/train_*.bin\"), "
       "memory-mapped, read in sorted order as one stream whose windows are dealt to the islands (see iid)"},
      {"data", "eval_path", &c.data.eval_path, "tokens: a glob of the evaluation shards"},
      {"data", "seed", &c.data.seed, "seeds the synthetic language, the shards and the evaluation split"},
      {"data", "alphabet", &c.data.alphabet, "synthetic: symbols in the language (2-64)"},
      {"data", "order", &c.data.order, "synthetic: Markov order (bytes of context that matter)"},
      {"data", "branching", &c.data.branching, "synthetic: possible successors of each context"},
      {"data", "dialects", &c.data.dialects, "synthetic: number of Markov chains (topics) mixed in the corpus"},
      {"data", "doc_len", &c.data.doc_len, "synthetic: bytes per document (one dialect each)"},
      {"data", "iid", &c.data.iid, "true: every island sees the same mixture (token shards: windows of the whole stream dealt in a seeded random order, disjoint per pass); false: skewed shards (token shards: island i of M reads slice i in order)"},
      {"data", "skew", &c.data.skew, "non-IID: share of an island's documents from its own dialect"},
      {"data", "eval_tokens", &c.data.eval_tokens, "synthetic: size of the held-out evaluation split"},
      {"data", "eval_fraction", &c.data.eval_fraction, "file: tail share held out for evaluation"},

      {"train", "mode", choice(&c.train.mode),
       "\"ddp\" (all-reduce every step), \"diloco\", \"streaming\" (reference loops) or \"decoupled\" (actor runtime)"},
      {"train", "islands", &c.train.islands, "M: islands (learners), each with its own model copy"},
      {"train", "steps", &c.train.steps, "inner steps per island"},
      {"train", "batch", &c.train.batch, "windows of seq_len bytes per island per inner step, split among its chips"},
      {"train", "H", &c.train.H, "inner steps between two syncs of a fragment"},
      {"train", "sync_every_s", &c.train.sync_every_s,
       "decoupled on actors, > 0: each island syncs a fragment every this many seconds of its own time instead of "
       "every H steps (a slow island after fewer steps, as fresh as a fast one); a good value is H times a fast "
       "island's step time. 0: every H steps"},
      {"train", "eval_windows", &c.train.eval_windows,
       "held-out windows of seq_len + 1 bytes per evaluation, one in each equal stretch of the split; the summary "
       "prints the loss ± its standard error"},
      {"train", "round_eval_windows", &c.train.round_eval_windows,
       "actor runs: windows of the per-round evaluation (live table, metrics), spread over the split the same way; "
       "the summary uses eval_windows"},
      {"train", "seed", &c.train.seed, "seeds the initial parameters"},
      {"train", "budget", choice(&c.train.budget),
       "actors: \"island_steps\" (each island trains `steps`) or \"total_tokens\" (the islands together train "
       "islands x steps x batch x seq_len tokens; faster islands do more steps)"},
      {"train", "final_sync_s", &c.train.final_sync_s,
       "decoupled on actors: at the end each island sends its unsent progress; seconds the run waits for those "
       "contributions to merge (0: no final sync)"},
      {"train", "threads", &c.train.threads,
       "actor runs (run, syncer, site): scheduler threads that the islands, chips and syncer share (0: one per "
       "core). More threads than cores lets the operating system share the cores among the islands, so islands "
       "that outnumber the cores step at an even pace instead of drifting apart"},

      {"inner", "lr", &c.inner.lr, "AdamW peak learning rate"},
      {"inner", "beta1", &c.inner.beta1, "AdamW β1"},
      {"inner", "beta2", &c.inner.beta2, "AdamW β2"},
      {"inner", "eps", &c.inner.eps, "AdamW ε"},
      {"inner", "weight_decay", &c.inner.weight_decay, "decoupled weight decay on matrices"},
      {"inner", "grad_clip", &c.inner.grad_clip, "clip the global gradient norm to this (0: off)"},
      {"inner", "warmup_steps", &c.inner.warmup_steps, "linear warm-up steps"},
      {"inner", "decay_steps", &c.inner.decay_steps, "cosine decay steps after warm-up (0: constant lr)"},
      {"inner", "min_lr_ratio", &c.inner.min_lr_ratio, "final lr of the cosine as a share of lr"},

      {"outer", "kind", &c.outer.kind, "\"nesterov\", \"sgd\" (lr 1, momentum 0 = FedAvg) or \"delayed_nesterov\""},
      {"outer", "lr", &c.outer.lr, "outer learning rate"},
      {"outer", "momentum", &c.outer.momentum, "outer momentum"},
      {"outer", "delay", &c.outer.delay, "delayed_nesterov: contributions per momentum step"},
      {"outer", "eager", &c.outer.eager, "delayed_nesterov: share of each contribution applied at once"},

      {"fragments", "count", &c.fragments.count, "P: fragments (streaming); diloco uses 1"},
      {"fragments", "plan", &c.fragments.plan, "\"strided\" (layer l to fragment l mod P) or \"balanced\""},
      {"fragments", "tau", &c.fragments.tau, "steps between sending a fragment and adopting its merge"},
      {"fragments", "wait_steps", &c.fragments.wait_steps, "decoupled on actors: hold the next step up to this many inner steps for the merge of a send τ steps old (0: never wait)"},
      {"fragments", "alpha", &c.fragments.alpha, "local share when adopting: α·local + (1−α)·global; <0: 0.5 if tau>0 else 0"},
      {"fragments", "encoding", &c.fragments.encoding, "decoupled: outer gradients on the wire: fp32, bf16, int8, int4 or e3m0"},
      {"fragments", "broadcast_encoding", &c.fragments.broadcast_encoding, "actors: merged fragments on the wire: fp32 (exact) or bf16/int8/int4/e3m0 (their change, with error feedback)"},
      {"fragments", "broadcast_to", choice(&c.fragments.broadcast_to), "actors: who gets a commit: \"all\" islands, or its \"contributors\" (each one frame with every commit since its last)"},
      {"fragments", "adopt", choice(&c.fragments.adopt), "actors: a commit that lacks the island's last send: \"mix\" it in (α) or \"rebase\" onto it (keeps the island's unsent progress); \"carry\": rebase, and a commit of its last send mixes the θ it sent and keeps the progress since"},
      {"fragments", "block_size", &c.fragments.block_size, "decoupled: values per scale of int8/int4/e3m0"},
      {"fragments", "error_feedback", &c.fragments.error_feedback, "decoupled: carry the quantisation residual into the next send"},

      {"merge", "weighting", choice(&c.merge.weighting), "\"uniform\" or \"tokens\" (w = tokens·tokens/steps)"},
      {"merge", "rda", &c.merge.rda, "radial-directional averaging of non-embedding tensors"},
      {"merge", "max_staleness", &c.merge.max_staleness, "rounds after which a late contribution is dropped"},
      {"merge", "staleness_discount", &c.merge.staleness_discount, "weight × discount^staleness"},
      {"merge", "staleness_scale", choice(&c.merge.staleness_scale),
       "\"relative\": the discount shifts weight among a commit's contributions (a lone stale one is taken whole); "
       "\"absolute\": a stale contribution moves the parameters by discount^staleness of a fresh one's, alone or not"},
      {"merge", "partial_scale", &c.merge.partial_scale,
       "decoupled: a merge of n of L live islands applies n/L of the average (one outer step per period, not L)"},
      {"merge", "max_delta_ratio", &c.merge.max_delta_ratio,
       "decoupled: refuse an outer gradient whose RMS exceeds this × max(RMS of the global fragment, 1) (out_of_bounds)"},
      {"merge", "clip_ratio", &c.merge.clip_ratio,
       "decoupled: scale a merged outer gradient down to this × the median over islands of their last merged norms of the fragment (0: off)"},

      {"quorum", "min_islands", &c.quorum.min_islands, "K: contributions a round needs"},
      {"quorum", "grace", choice(&c.quorum.grace), "\"none\", \"fixed\", \"adaptive\" or \"steps\" wait past the quorum"},
      {"quorum", "grace_s", &c.quorum.grace_s, "fixed grace window in seconds"},
      {"quorum", "grace_steps", &c.quorum.grace_steps, "steps grace: a window of this many inner steps (the islands' measured step time)"},
      {"quorum", "gamma", &c.quorum.gamma, "adaptive grace: γ in γ·max(0, τ·t_step − (t_quorum + t_sync))"},

      {"islands", "chips", &c.islands.chips, "decoupled: chips per island (an island steps on the chips that answer)"},
      {"islands", "counts", &c.islands.counts,
       "decoupled: per-island chip counts, e.g. [4, 4, 2] (islands may differ in size); missing = chips"},
      {"islands", "speed", &c.islands.speed,
       "decoupled: per-island speed in [0.001, 1], e.g. [1.0, 0.55]; emulated by delaying chip replies; missing = 1.0"},
      {"islands", "chip_flops", &c.islands.chip_flops,
       "--simulate: one chip's FLOP/s at speed 1.0 (a step's virtual time: the model's FLOPs over this, over the speed)"},

      {"wan", "enabled", &c.wan.enabled, "decoupled: frames between islands and the syncer cross emulated WAN links"},
      {"wan", "bandwidth_mbps", &c.wan.bandwidth_mbps, "decoupled: each link's bandwidth per direction, Mbit/s"},
      {"wan", "latency_ms", &c.wan.latency_ms, "decoupled: one-way latency of each link, ms"},
      {"wan", "jitter_ms", &c.wan.jitter_ms, "decoupled: uniform jitter around the latency, ms"},
      {"wan", "loss", &c.wan.loss, "decoupled: probability a transmission is lost (and resent)"},
      {"wan", "retransmit_timeout_ms", &c.wan.retransmit_timeout_ms, "decoupled: a lost transmission is resent this much later, ms"},

      {"syncer", "snapshot_every", &c.syncer.snapshot_every, "decoupled: global rounds between writes of the syncer's state file (0: never); in memory every commit is kept, so a syncer restarted in the process loses no round"},
      {"syncer", "checkpoint", &c.syncer.checkpoint, "decoupled: the syncer's state file (safetensors), what a syncer process started again resumes from; \"\": in memory only"},

      {"supervision", "strategy", &c.supervision.strategy, "island supervisors: one_for_one, one_for_all or rest_for_one"},
      {"supervision", "intensity", &c.supervision.intensity, "restarts allowed within period_s before escalating"},
      {"supervision", "period_s", &c.supervision.period_s, "restart intensity window in seconds"},
      {"supervision", "backoff_initial_s", &c.supervision.backoff_initial_s, "delay before a child's first restart"},
      {"supervision", "backoff_max_s", &c.supervision.backoff_max_s, "cap of the exponential restart back-off"},
      {"supervision", "backoff_factor", &c.supervision.backoff_factor, "growth of the back-off per recent restart"},

      {"chaos", "enabled", &c.chaos.enabled, "decoupled/ddp on actors: inject the seeded fault schedule below"},
      {"chaos", "seed", &c.chaos.seed, "seeds the fault schedule (same seed and topology: same schedule)"},
      {"chaos", "chip_mtbf_s", &c.chaos.chip_mtbf_s, "mean time between failures of each chip, s (0: none)"},
      {"chaos", "island_mtbf_s", &c.chaos.island_mtbf_s, "mean time between failures of each island, s (0: none)"},
      {"chaos", "syncer_mtbf_s", &c.chaos.syncer_mtbf_s, "mean time between failures of the syncer, s (0: none)"},
      {"chaos", "repair_s", &c.chaos.repair_s, "a killed unit can start again this long after its kill, s"},
      {"chaos", "straggler_mtbf_s", &c.chaos.straggler_mtbf_s, "mean time between slow spells of each island, s (0: none)"},
      {"chaos", "straggler_factor", &c.chaos.straggler_factor, "speed of a straggling island, in [0.001, 1]"},
      {"chaos", "straggler_s", &c.chaos.straggler_s, "length of a slow spell, s"},
      {"chaos", "partition_mtbf_s", &c.chaos.partition_mtbf_s, "mean time between partitions of each site's link, s (0: none)"},
      {"chaos", "partition_s", &c.chaos.partition_s, "length of a partition, s"},
      {"chaos", "horizon_s", &c.chaos.horizon_s, "no fault is scheduled later than this, s"},
      {"chaos", "downtime_gap_s", &c.chaos.downtime_gap_s,
       "goodput: waiting longer than this for a global commit with ≥ K islands alive is global downtime, s"},

      {"net", "listen", &c.net.listen, "diloco syncer: bind address host:port (loopback by default)"},
      {"net", "certs", &c.net.certs, "directory from scripts/make-certs.sh: ca.pem, <site>.pem, <site>.key"},
      {"net", "heartbeat_ms", &c.net.heartbeat_ms, "period of a site's heartbeats to the syncer, ms"},
      {"net", "timeout_ms", &c.net.timeout_ms, "a site silent this long counts as lost (its islands leave the quorum), ms"},
      {"net", "reconnect_initial_ms", &c.net.reconnect_initial_ms, "first delay before reconnecting, ms (doubles per attempt)"},
      {"net", "reconnect_max_ms", &c.net.reconnect_max_ms, "cap of the reconnect delay, ms"},
      {"net", "syncer_name", &c.net.syncer_name,
       "the syncer's name: its certificate <name>.pem, which sites require to carry this name (subjectAltName or CN)"},
      {"net", "handshake_ms", &c.net.handshake_ms, "a connection that has not completed TLS and proven its identity by then is closed, ms"},
      {"net", "join_interval_ms", &c.net.join_interval_ms,
       "a site's join requests for one island reach the syncer at most once this often (each may be answered with the whole model); later ones wait, the newest kept, ms"},
      {"net", "pending_per_address", &c.net.pending_per_address,
       "connections still in their handshake from one address; a newcomer past it closes that address's oldest"},
      {"net", "pending_total", &c.net.pending_total, "connections still in their handshake from all addresses together"},
      {"net", "etcd", &c.net.etcd, "with [[syncers]]: etcd's HTTP/JSON gateway, where the replicas elect their leader"},
      {"net", "election", &c.net.election, "with [[syncers]]: the election's name in etcd (one per run)"},
      {"net", "lease_ms", &c.net.lease_ms,
       "with [[syncers]]: the leader's etcd lease; a dead leader is replaced this long after, a cut-off one stops serving after half of it, ms"},
      {"net", "replicate_before_broadcast", &c.net.replicate_before_broadcast,
       "with [[syncers]]: a commit reaches islands only once a majority of the replicas holds it (false: at once; a failover may then lose the rounds not yet replicated)"},
      {"net", "allow_join", &c.net.allow_join,
       "islands that no [[sites]] entry holds are open: a site not in the config, certified by the run's CA, takes some mid-run with `diloco site --join`"},
      {"net", "join_lease_ms", &c.net.join_lease_ms,
       "with allow_join: a joiner lost without leaving keeps its islands (and their data parts) this long for its return, ms"},
  };
}

// Keys of one [[faults]] table (fault injection, mode "decoupled").
std::vector<Field> fault_fields(FaultSpec& f) {
  return {
      {"faults", "kill", choice(&f.kill), "\"chip\", \"island\", \"syncer\", \"straggle\" or \"partition\""},
      {"faults", "island", &f.island, "the island whose local step triggers the fault (and owns the chip)"},
      {"faults", "chip", &f.chip, "kill = \"chip\": which chip of the island"},
      {"faults", "at_step", &f.at_step, "fires once, when that island finishes this local step (0: use at_s)"},
      {"faults", "at_s", &f.at_s, "fires once, this many seconds after the start (<0: use at_step)"},
      {"faults", "site", &f.site, "kill = \"partition\": the site whose link to the syncer is cut"},
      {"faults", "duration_s", &f.duration_s, "straggle/partition: how long; kills: repair time before the restart"},
      {"faults", "factor", &f.factor, "kill = \"straggle\": the island's speed meanwhile, in [0.001, 1]"},
  };
}

// Keys of one [[sites]] table.
std::vector<Field> site_fields(SiteSpec& s) {
  return {
      {"sites", "name", &s.name, "the site's name (its certificate's CN in multi-process runs)"},
      {"sites", "islands", &s.islands, "the islands at this site, e.g. [0, 1]"},
      {"sites", "bandwidth_mbps", &s.bandwidth_mbps, "this site's link to the syncer, Mbit/s per direction (<0: [wan])"},
      {"sites", "latency_ms", &s.latency_ms, "one-way latency of this site's link, ms (<0: [wan])"},
      {"sites", "jitter_ms", &s.jitter_ms, "jitter of this site's link, ms (<0: [wan])"},
      {"sites", "loss", &s.loss, "loss probability of this site's link (<0: [wan])"},
  };
}

// A [[sites]] or [[syncers]] table's name: a certificate CN, so letters, digits, '.', '_' or '-',
// and unique among the tables before it (`list[0..k)`).
template <class Spec>
void check_unique_name(std::vector<std::string>& e, const std::string& key, const std::string& name,
                       const std::vector<Spec>& list, std::size_t k) {
  if (name.empty() || name.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") !=
                          std::string::npos)
    e.push_back(key + ".name: must be non-empty letters, digits, '.', '_' or '-' (got \"" + name + "\")");
  // Said once per repeated name (at its second use): a list of n equal names costs n checks of
  // the earlier ones, not n²/2 messages.
  std::size_t earlier = 0;
  for (std::size_t j = 0; j < k && earlier < 2; ++j) earlier += list[j].name == name;
  if (earlier == 1) e.push_back(key + ".name: \"" + name + "\" is used twice");
}

// Keys of one [[syncers]] table.
std::vector<Field> replica_fields(SyncerReplicaSpec& r) {
  return {
      {"syncers", "name", &r.name, "the replica's name (its certificate <name>.pem carries it as CN and subjectAltName)"},
      {"syncers", "address", &r.address, "host:port it serves sites and the other replicas on while it leads"},
  };
}

template <class Int>
void assign_int(const toml::node& n, Int* dst, const std::string& key, std::vector<std::string>& errs) {
  auto v = n.value_exact<std::int64_t>();
  if (!v) {
    errs.push_back(key + ": expected an integer");
    return;
  }
  if constexpr (std::is_unsigned_v<Int>) {
    if (*v < 0) {
      errs.push_back(key + ": must not be negative (got " + std::to_string(*v) + ")");
      return;
    }
  } else if (*v < static_cast<std::int64_t>(std::numeric_limits<Int>::min()) ||
             *v > static_cast<std::int64_t>(std::numeric_limits<Int>::max())) {
    errs.push_back(key + ": out of range (got " + std::to_string(*v) + ")");
    return;
  }
  *dst = static_cast<Int>(*v);
}

// A number as it would be typed: "1e+300", "0.05", "2147483647".
std::string shown(long double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6Lg", x);
  return buf;
}

// Whether a finite double converts to T without overflow or flushing a non-zero value to zero
// (checked in double, before the conversion: 1e300 as a float is undefined).
template <class T>
bool fits(double v) {
  if constexpr (std::is_same_v<T, float>)
    return v == 0.0 || (std::abs(v) <= std::numeric_limits<float>::max() && std::abs(v) >= std::numeric_limits<float>::min());
  else return true;
}

void assign(const toml::node& n, FieldPtr ptr, const std::string& key, std::vector<std::string>& errs) {
  std::visit(
      [&](auto dst) {
        using T = std::remove_pointer_t<decltype(dst)>;
        if constexpr (std::is_same_v<decltype(dst), ChoicePtr>) {
          auto v = n.value_exact<std::string>();
          if (!v) errs.push_back(key + ": expected a string");
          else if (!dst.set(dst.target, *v)) errs.push_back(key + ": must be " + dst.list() + " (got \"" + *v + "\")");
        } else if constexpr (std::is_same_v<T, bool>) {
          if (auto v = n.value_exact<bool>()) *dst = *v;
          else errs.push_back(key + ": expected true or false");
        } else if constexpr (std::is_same_v<T, std::string>) {
          if (auto v = n.value_exact<std::string>()) *dst = *v;
          else errs.push_back(key + ": expected a string");
        } else if constexpr (std::is_same_v<T, std::vector<double>>) {
          const auto* arr = n.as_array();
          if (!arr) {
            errs.push_back(key + ": expected an array of numbers");
            return;
          }
          std::vector<double> out;
          for (const auto& x : *arr) {
            std::optional<double> v = x.is_integer() ? std::optional<double>(static_cast<double>(*x.value<std::int64_t>()))
                                                     : x.value_exact<double>();
            if (!v || !std::isfinite(*v)) {
              errs.push_back(key + ": expected an array of finite numbers");
              return;
            }
            out.push_back(*v);
          }
          *dst = std::move(out);
        } else if constexpr (std::is_same_v<T, Options>) {
          const auto* tbl = n.as_table();
          if (!tbl) {
            errs.push_back(key + ": expected a table of settings, e.g. { classes = 10 }");
            return;
          }
          Options out;
          for (auto&& [k, v] : *tbl) {
            const std::string name(k.str());
            if (auto str = v.template value_exact<std::string>()) out[name] = *str;
            else if (auto i = v.template value_exact<std::int64_t>()) out[name] = std::to_string(*i);
            else if (auto b = v.template value_exact<bool>()) out[name] = *b ? "true" : "false";
            else if (auto d = v.template value_exact<double>()) {
              char buf[64];
              auto r = std::to_chars(buf, buf + sizeof buf, *d);
              out[name] = std::string(buf, r.ptr);
            } else errs.push_back(key + "." + name + ": expected a string, a number or a boolean");
          }
          *dst = std::move(out);
        } else if constexpr (std::is_same_v<T, std::vector<int>>) {
          const auto* arr = n.as_array();
          std::vector<int> out;
          for (std::size_t k = 0; arr && k < arr->size(); ++k) {
            auto v = arr->get(k)->value_exact<std::int64_t>();
            if (!v || *v < 0 || *v > std::numeric_limits<int>::max()) {
              arr = nullptr;
              break;
            }
            out.push_back(static_cast<int>(*v));
          }
          if (!arr) errs.push_back(key + ": expected an array of non-negative integers");
          else *dst = std::move(out);
        } else if constexpr (std::is_floating_point_v<T>) {
          std::optional<double> v = n.is_integer() ? std::optional<double>(static_cast<double>(*n.value<std::int64_t>()))
                                                   : n.value_exact<double>();
          if (!v) errs.push_back(key + ": expected a number");
          else if (!std::isfinite(*v)) errs.push_back(key + ": must be finite");
          else if (!fits<T>(*v)) errs.push_back(key + ": " + shown(*v) + " is out of range (a 32-bit float holds 1.2e-38 to 3.4e+38)");
          else *dst = static_cast<T>(*v);
        } else {
          assign_int(n, dst, key, errs);
        }
      },
      ptr);
}

void merge_tables(toml::table& into, const toml::table& from) {
  for (auto&& [k, v] : from) {
    if (auto* sub = v.as_table(); sub && into[k].is_table()) merge_tables(*into[k].as_table(), *sub);
    else into.insert_or_assign(k, v);
  }
}

std::string describe_parse_error(std::string_view origin, const toml::parse_error& e) {
  std::ostringstream s;
  s << origin << ":" << e.source().begin.line << ":" << e.source().begin.column << ": " << e.description();
  return s.str();
}

std::string format_value(FieldPtr ptr) {
  return std::visit(
      [](auto v) -> std::string {
        using T = std::remove_pointer_t<decltype(v)>;
        if constexpr (std::is_same_v<decltype(v), ChoicePtr>) return "\"" + std::string(v.get(v.target)) + "\"";
        else if constexpr (std::is_same_v<T, bool>) return *v ? "true" : "false";
        else if constexpr (std::is_same_v<T, std::string>) return "\"" + *v + "\"";
        else if constexpr (std::is_same_v<T, std::vector<double>>) {
          std::string s = "[";
          for (std::size_t i = 0; i < v->size(); ++i) {
            char buf[64];
            auto r = std::to_chars(buf, buf + sizeof buf, (*v)[i]);
            std::string x(buf, r.ptr);
            if (x.find_first_of(".e") == std::string::npos) x += ".0";
            s += (i ? ", " : "") + x;
          }
          return s + "]";
        } else if constexpr (std::is_same_v<T, std::vector<int>>) {
          std::string s = "[";
          for (std::size_t i = 0; i < v->size(); ++i) s += (i ? ", " : "") + std::to_string((*v)[i]);
          return s + "]";
        } else if constexpr (std::is_same_v<T, Options>) {
          if (v->empty()) return "{}";
          std::string s = "{ ";
          for (auto it = v->begin(); it != v->end(); ++it) s += (it == v->begin() ? "" : ", ") + it->first + " = \"" + it->second + "\"";
          return s + " }";
        } else if constexpr (std::is_floating_point_v<T>) {
          char buf[64];
          auto r = std::to_chars(buf, buf + sizeof buf, *v);
          std::string s(buf, r.ptr);
          if (s.find_first_of(".e") == std::string::npos) s += ".0";
          return s;
        } else return std::to_string(*v);
      },
      ptr);
}

}  // namespace

namespace {

bool builtin_kind(const ModelConfig& m) { return m.kind == "gpt" || m.kind == "mlp"; }

// What the layout of an app's model holds, measured by building one (a model owns only its
// workspace, so this is cheap); zeros if its factory refuses the settings (validate says why).
struct Measured {
  bool built = false;
  long double parameters = 0, tensors = 0;
  int layers = 1;  // strided fragment units: layer ids 0..max (the ones before the blocks count as 0)
};
Measured measure_model(const ModelConfig& m) {
  Measured r;
  try {
    auto model = make_model(m);
    r.parameters = static_cast<long double>(model->layout().size());
    r.tensors = static_cast<long double>(model->layout().tensors().size());
    r.layers = std::max(model->layout().max_layer(), 0) + 1;
    r.built = true;
  } catch (const std::exception&) {
  }
  return r;
}

}  // namespace

ConfigError::ConfigError(std::vector<std::string> problems)
    : std::runtime_error([&] {
        std::string s = "invalid configuration:";
        for (const auto& p : problems) s += "\n  " + p;
        return s;
      }()),
      problems_(std::move(problems)) {}

std::vector<std::string> validate(const ModelConfig& m) {
  std::vector<std::string> e;
  const auto kind_problems = validate_model_kind(m);
  e.insert(e.end(), kind_problems.begin(), kind_problems.end());
  if (m.kind != "torchscript" && !m.path.empty())
    e.push_back("model.path: only model.kind = \"torchscript\" reads a model file (kind is \"" + m.kind + "\")");
  if (m.kind != "torchscript" && m.device != "cpu")
    e.push_back("model.device: only model.kind = \"torchscript\" runs on a device (kind is \"" + m.kind + "\")");
  if (m.vocab < 2 || m.vocab > kMaxVocab)
    e.push_back("model.vocab: must be in [2, " + std::to_string(kMaxVocab) + "] (got " + std::to_string(m.vocab) + ")");
  if (m.seq_len < 1 || m.seq_len > 4096) e.push_back("model.seq_len: must be in [1, 4096] (got " + std::to_string(m.seq_len) + ")");
  if (m.n_layer < 1) e.push_back("model.n_layer: must be ≥ 1 (got " + std::to_string(m.n_layer) + ")");
  if (m.n_head < 1) e.push_back("model.n_head: must be ≥ 1 (got " + std::to_string(m.n_head) + ")");
  if (m.n_embd < 1) e.push_back("model.n_embd: must be ≥ 1 (got " + std::to_string(m.n_embd) + ")");
  else if (m.n_head >= 1 && m.n_embd % m.n_head != 0)
    e.push_back("model.n_embd: must be divisible by model.n_head (" + std::to_string(m.n_embd) + " % " +
                std::to_string(m.n_head) + " != 0)");
  if (m.context < 1) e.push_back("model.context: must be ≥ 1");
  if (m.hidden < 1) e.push_back("model.hidden: must be ≥ 1");
  if (!(m.init_std > 0.0f && m.init_std <= kMaxInitStd))
    e.push_back("model.init_std: must be in (0, " + shown(kMaxInitStd) + "] (got " + shown(m.init_std) + ")");
  // The models index with int: a K·E-wide MLP input and the GPT's 4·C-wide MLP must fit.
  if (m.kind == "mlp" && static_cast<long double>(m.context) * m.n_embd > kMaxIndex)
    e.push_back("model.context: context × n_embd = " + shown(static_cast<long double>(m.context) * m.n_embd) +
                " exceeds the model's index range (2^31 − 1)");
  if (m.kind == "gpt" && 4.0L * m.n_embd > kMaxIndex)
    e.push_back("model.n_embd: 4 × n_embd exceeds the model's index range (2^31 − 1)");
  // An app's model: its factory has the last word on its settings (the built-ins checked above).
  if (e.empty() && !builtin_kind(m)) {
    try {
      make_model(m);
    } catch (const std::exception& ex) {
      e.push_back(ex.what());
    }
  }
  return e;
}

namespace {

// ---- what a configuration implies: memory, index ranges, event counts ----

// Values of one model copy.
long double model_parameters(const ModelConfig& m) {
  if (!builtin_kind(m)) return measure_model(m).parameters;
  const long double V = m.vocab, C = m.n_embd;
  if (m.kind == "mlp") {
    const long double K = m.context, H = m.hidden;
    return V * C + H * K * C + H + V * H + V;  // emb, fc1.w, fc1.b, fc2.w, fc2.b
  }
  const long double T = m.seq_len, L = m.n_layer;
  return V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C;  // wte, wpe, L blocks, lnf
}

// Tensors of the parameter layout (each carries a name, a shape and offsets).
long double model_tensors(const ModelConfig& m) {
  if (!builtin_kind(m)) return measure_model(m).tensors;
  return m.kind == "mlp" ? 5.0L : 12.0L * m.n_layer + 4;
}

// Bytes of one model instance's activation workspace for B windows (gpt.cpp / mlp.cpp prepare()).
// An app's model: unknown (0; the estimate is a lower bound).
long double workspace_bytes(const ModelConfig& m, long double B) {
  if (!builtin_kind(m)) return 0;
  const long double T = m.seq_len, N = B * T, V = m.vocab, C = m.n_embd;
  if (m.kind == "mlp") {
    const long double K = m.context, H = m.hidden;
    return 4 * (2 * N * K * C + 2 * N * H + N * V) + 4 * (N * K + N);  // x, dx, h, dh, logits; ctx, targets
  }
  const long double L = m.n_layer, NH = m.n_head;
  const long double floats = L * (16 * N * C + 4 * N + B * NH * T * T) + 12 * N * C + 2 * N + N * V + T * T;
  return 4 * floats + 4 * 2 * N;  // workspace; inputs and targets
}

// Chips of every island: islands.counts over islands.chips.
long double total_chips(const RunConfig& c) {
  const long double islands = std::max(c.train.islands, 0);
  long double n = 0;
  std::size_t listed = 0;
  for (int k : c.islands.counts) {
    if (listed++ >= static_cast<std::size_t>(std::max(c.train.islands, 0))) break;
    n += k;
  }
  return n + (islands - static_cast<long double>(listed)) * c.islands.chips;
}

constexpr std::size_t kNoKey = static_cast<std::size_t>(-1);

// The key to name when a product of sizes is too large: of the integer keys whose default would
// lower `measure`, the one furthest above its default (value / default). kNoKey if none.
template <class Measure>
std::size_t culprit(const RunConfig& c, Measure measure) {
  RunConfig d;
  const auto defaults = fields(d);
  std::size_t best = kNoKey;
  long double best_ratio = 0;
  const long double now = measure(c);
  for (std::size_t i = 0; i < defaults.size(); ++i) {
    RunConfig x = c;
    auto xs = fields(x);
    long double ratio = -1;  // < 0: not an integer size
    std::visit(
        [&](auto dst) {
          using T = std::remove_pointer_t<decltype(dst)>;
          if constexpr (std::is_same_v<decltype(dst), ChoicePtr>) {
            return;
          } else if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
            if (defaults[i].key == "seed") return;
            const T def = *std::get<T*>(defaults[i].ptr);
            ratio = static_cast<long double>(*dst) / std::max<long double>(static_cast<long double>(def), 1);
            *dst = def;
          } else if constexpr (std::is_same_v<T, std::vector<int>>) {
            ratio = 1;
            *dst = *std::get<T*>(defaults[i].ptr);
          }
        },
        xs[i].ptr);
    if (ratio > best_ratio && measure(x) < now) {
      best_ratio = ratio;
      best = i;
    }
  }
  return best;
}

// "section.key: value" of field `i` of `c`, or `fallback` when no key is to blame.
std::string blame(const RunConfig& c, std::size_t i, const std::string& fallback) {
  if (i == kNoKey) return fallback + ": ";
  RunConfig x = c;
  const auto xs = fields(x);
  return std::string(xs[i].section) + "." + std::string(xs[i].key) + ": " + format_value(xs[i].ptr) + " ";
}

void check_memory(const RunConfig& c, std::uint64_t limit, std::vector<std::string>& e) {
  const MemoryNeed need = memory_need(c);
  if (need.total() <= static_cast<long double>(limit)) return;
  const auto key = culprit(c, [](const RunConfig& x) { return memory_need(x).total(); });
  e.push_back(blame(c, key, "model") + "needs " + format_bytes(need.total()) + " of memory (" +
              format_bytes(need.state_bytes) + " for " + shown(need.parameters) +
              " parameters with their gradients and optimizer state, " + format_bytes(need.activation_bytes) +
              " of activations, " + format_bytes(need.data_bytes) + " of evaluation data; limit " +
              format_bytes(static_cast<long double>(limit)) + ")");
}

// Products of sizes the models and counters hold in fixed-width integers.
void check_index_ranges(const RunConfig& c, std::vector<std::string>& e) {
  auto over = [&](const char* what, long double limit, const char* limit_label, auto measure, const char* fallback) {
    if (measure(c) <= limit) return;
    e.push_back(blame(c, culprit(c, measure), fallback) + "makes " + what + " = " + shown(measure(c)) +
                ", beyond the range of the integers that hold it (" + limit_label + ")");
  };
  const char* tokens_per_step = c.model.kind == "gpt" ? "n_layer × batch × seq_len" : "batch × (seq_len + 1)";
  over(tokens_per_step, kMaxIndex, "2^31 − 1", [](const RunConfig& x) {
    const long double window = static_cast<long double>(x.train.batch) * (x.model.seq_len + 1.0L);
    return x.model.kind == "gpt" ? std::max(window, static_cast<long double>(x.model.n_layer) * x.train.batch * x.model.seq_len)
                                 : window;
  }, "train.batch");
  over("islands × steps × batch × seq_len tokens", kMaxTokens, "2^62", [](const RunConfig& x) {
    return static_cast<long double>(std::max(x.train.islands, 1)) * x.train.steps * x.train.batch * x.model.seq_len;
  }, "train.steps");
}

// A duration that becomes timer ticks: at most kMaxDurationS (`scale` converts the key's unit
// to seconds).
void check_not_too_long(std::vector<std::string>& e, const std::string& key, double v, double scale = 1.0) {
  if (std::isfinite(v) && v * scale <= kMaxDurationS) return;
  const char* unit = scale == 1.0 ? " s" : " ms";
  e.push_back(key + ": must be at most 30 days (" + shown(kMaxDurationS / scale) + unit + ", got " + shown(v) + unit + ")");
}

// A WAN link must move the largest frame, the whole model in fp32, within kMaxDurationS.
void check_bandwidth(std::vector<std::string>& e, const std::string& key, double mbps, long double parameters) {
  if (!(mbps > 0.0)) return;  // reported as not positive
  const long double seconds = 4.0L * parameters * 8.0L / (static_cast<long double>(mbps) * 1e6L);
  if (seconds <= kMaxDurationS) return;
  e.push_back(key + ": a full-model frame (" + format_bytes(4.0L * parameters) + ") would take " + shown(seconds) +
              " s at " + shown(mbps) + " Mbit/s, more than 30 days");
}

// The chaos schedule must stay within chaos.cpp's event budget: about horizon / MTBF events per unit.
void check_chaos_events(const RunConfig& c, std::vector<std::string>& e) {
  const auto& ch = c.chaos;
  if (!ch.enabled || !(ch.horizon_s > 0.0)) return;
  const long double sites = site_count(c);
  struct Kind {
    const char* key;
    double mtbf;
    long double units;
  };
  const Kind kinds[] = {{"chip_mtbf_s", ch.chip_mtbf_s, total_chips(c)},
                        {"island_mtbf_s", ch.island_mtbf_s, static_cast<long double>(std::max(c.train.islands, 0))},
                        {"syncer_mtbf_s", ch.syncer_mtbf_s, 1.0L},
                        {"straggler_mtbf_s", ch.straggler_mtbf_s, static_cast<long double>(std::max(c.train.islands, 0))},
                        {"partition_mtbf_s", ch.partition_mtbf_s, sites}};
  long double events = 0, worst = 0;
  const Kind* blamed = nullptr;
  for (const auto& k : kinds) {
    if (!(k.mtbf > 0.0)) continue;
    const long double n = k.units * ch.horizon_s / k.mtbf;
    events += n;
    if (n > worst) worst = n, blamed = &k;
  }
  if (events <= kMaxChaosEvents || !blamed) return;
  e.push_back(std::string("chaos.") + blamed->key + ": " + shown(blamed->mtbf) + " s over chaos.horizon_s = " +
              shown(ch.horizon_s) + " s means about " + shown(events) + " faults (limit " + shown(kMaxChaosEvents) + ")");
}

}  // namespace

MemoryNeed memory_need(const RunConfig& c) {
  MemoryNeed n;
  n.parameters = model_parameters(c.model);
  const long double islands = std::max(c.train.islands, 1);
  // Every island holds parameters, gradients and AdamW's m and v; ddp one set plus the sum.
  const long double copies = c.train.mode == TrainMode::ddp ? 5.0L : 4.0L * islands;
  constexpr long double kTensorBytes = 64;  // name, shape and offsets per tensor (at least)
  n.state_bytes = 4.0L * n.parameters * copies + kTensorBytes * model_tensors(c.model);
  // The reference loops share one model workspace; on actors every chip has its own.
  const long double models = c.train.mode == TrainMode::decoupled ? std::max(total_chips(c), 1.0L) : 1.0L;
  n.activation_bytes = models * workspace_bytes(c.model, c.train.batch);
  const long double window = c.model.seq_len + 1.0L;
  // Each evaluation window is a batch of its own, with its start and its loss.
  n.data_bytes = static_cast<long double>(std::max(c.train.eval_windows, 0)) *
                 (window + sizeof(Batch) + sizeof(std::size_t) + sizeof(double));
  if (c.data.corpus == "synthetic") {  // the evaluation split, and a document in the making per stream
    n.data_bytes += static_cast<long double>(c.data.eval_tokens) + (islands + 1) * std::max(c.data.doc_len, 0);
    // The language's tables: per dialect and context, `branching` successors (int) with their
    // probabilities (double), and the context's entropy (double).
    const long double contexts = std::pow(static_cast<long double>(std::max(c.data.alphabet, 1)), std::clamp(c.data.order, 0, 8));
    n.data_bytes += std::max(c.data.dialects, 0) * contexts * (12.0L * std::max(c.data.branching, 0) + 8.0L);
  }
  return n;
}

unsigned scheduler_threads(const RunConfig& c) {
  if (c.train.threads > 0) return static_cast<unsigned>(c.train.threads);
  return std::max(1u, std::thread::hardware_concurrency());
}

int site_count(const RunConfig& c) { return c.sites.empty() ? c.train.islands : static_cast<int>(c.sites.size()); }

int site_of(const RunConfig& c, int island) {
  if (c.sites.empty()) return island;
  for (std::size_t s = 0; s < c.sites.size(); ++s)
    for (int i : c.sites[s].islands)
      if (i == island) return static_cast<int>(s);
  return -1;  // validate() refuses configs that leave an island out
}

std::string site_name(const RunConfig& c, int site) {
  if (c.sites.empty()) return "island-" + std::to_string(site);
  return c.sites.at(static_cast<std::size_t>(site)).name;
}

int replica_index(const RunConfig& c, const std::string& name) {
  for (std::size_t k = 0; k < c.syncers.size(); ++k)
    if (c.syncers[k].name == name) return static_cast<int>(k);
  return -1;
}

int site_index(const RunConfig& c, const std::string& name) {
  if (c.sites.empty()) {
    // Every island is a site of its own, "island-N": read N (no loop over a count that may be
    // out of range while the configuration is checked).
    constexpr std::string_view prefix = "island-";
    if (name.size() <= prefix.size() || name.size() > prefix.size() + 9 || name.compare(0, prefix.size(), prefix) != 0 ||
        name.find_first_not_of("0123456789", prefix.size()) != std::string::npos || (name[prefix.size()] == '0' && name.size() > prefix.size() + 1))
      return -1;
    const long n = std::stol(name.substr(prefix.size()));
    return n < c.train.islands ? static_cast<int>(n) : -1;
  }
  for (int s = 0; s < site_count(c); ++s)
    if (site_name(c, s) == name) return s;
  return -1;
}

std::vector<int> islands_of_site(const RunConfig& c, int site) {
  if (c.sites.empty()) return {site};
  auto v = c.sites.at(static_cast<std::size_t>(site)).islands;
  std::sort(v.begin(), v.end());
  return v;
}

std::vector<int> open_islands(const RunConfig& c) {
  std::vector<int> v;
  if (c.sites.empty()) return v;
  std::vector<bool> held(static_cast<std::size_t>(std::max(c.train.islands, 0)), false);
  for (const auto& s : c.sites)
    for (int i : s.islands)
      if (i >= 0 && i < c.train.islands) held[static_cast<std::size_t>(i)] = true;
  for (int i = 0; i < c.train.islands; ++i)
    if (!held[static_cast<std::size_t>(i)]) v.push_back(i);
  return v;
}

LinkConfig link_config(const RunConfig& c, int site, bool up) {
  const SiteSpec* s = c.sites.empty() ? nullptr : &c.sites.at(static_cast<std::size_t>(site));
  auto pick = [](double own, double wan) { return own >= 0.0 ? own : wan; };
  LinkConfig l;
  l.bandwidth_Bps = pick(s ? s->bandwidth_mbps : -1.0, c.wan.bandwidth_mbps) * 1e6 / 8.0;
  l.latency_s = pick(s ? s->latency_ms : -1.0, c.wan.latency_ms) * 1e-3;
  l.jitter_s = pick(s ? s->jitter_ms : -1.0, c.wan.jitter_ms) * 1e-3;
  l.loss = pick(s ? s->loss : -1.0, c.wan.loss);
  l.retransmit_timeout_s = c.wan.retransmit_timeout_ms * 1e-3;
  l.seed = derive_seed(c.data.seed ^ 0x5741u, static_cast<std::uint64_t>(2 * site + (up ? 1 : 0)));
  return l;
}

std::vector<std::string> validate(const RunConfig& c, std::uint64_t memory_limit) {
  std::vector<std::string> e = validate(c.model);
  auto add = [&](std::vector<std::string> more) { e.insert(e.end(), more.begin(), more.end()); };
  add(validate(c.data));
  add(validate(c.inner));
  add(validate(c.outer));
  add(validate(c.merge));
  add(validate(c.quorum));
  const auto& t = c.train;
  if (t.islands < 1 || t.islands > kMaxIslands)
    e.push_back("train.islands: must be in [1, " + std::to_string(kMaxIslands) + "] (got " + std::to_string(t.islands) + ")");
  if (t.steps < 1) e.push_back("train.steps: must be ≥ 1 (got " + std::to_string(t.steps) + ")");
  if (t.threads < 0 || t.threads > kMaxSchedulerThreads)
    e.push_back("train.threads: must be in [0, " + std::to_string(kMaxSchedulerThreads) + "] (0: one per core; got " +
                std::to_string(t.threads) + ")");
  if (t.budget == Budget::total_tokens && t.mode != TrainMode::decoupled)
    e.push_back("train.budget: \"total_tokens\" is for mode \"decoupled\" (the synchronous modes step together)");
  if (!(t.sync_every_s >= 0.0) || !std::isfinite(t.sync_every_s)) e.push_back("train.sync_every_s: must be a finite number ≥ 0");
  else if (t.sync_every_s > 0.0 && t.mode != TrainMode::decoupled)
    e.push_back("train.sync_every_s: a sync cadence in time is for train.mode = \"decoupled\" (the other modes sync "
                "every island together every H steps)");
  else check_not_too_long(e, "train.sync_every_s", t.sync_every_s);
  if (!(t.final_sync_s >= 0.0) || !std::isfinite(t.final_sync_s)) e.push_back("train.final_sync_s: must be a finite number ≥ 0");
  else check_not_too_long(e, "train.final_sync_s", t.final_sync_s);
  if (t.batch < 1) e.push_back("train.batch: must be ≥ 1 (got " + std::to_string(t.batch) + ")");
  if (t.H < 1) e.push_back("train.H: must be ≥ 1 (got " + std::to_string(t.H) + ")");
  if (t.round_eval_windows < 1 || t.round_eval_windows > 1 << 20)
    e.push_back("train.round_eval_windows: must be in [1, 1048576] (got " + std::to_string(t.round_eval_windows) + ")");
  if (t.eval_windows < 2)
    e.push_back("train.eval_windows: must be ≥ 2 (got " + std::to_string(t.eval_windows) +
                "; a standard error needs two windows)");
  const auto& f = c.fragments;
  // Fragments split the model by layer (strided) or by tensor (balanced); none may be empty.
  const int layers = std::clamp(c.model.n_layer, 1, 1 << 24);
  int units = c.model.kind == "mlp" ? (f.plan == "balanced" ? 5 : 2) : (f.plan == "balanced" ? 12 * layers + 4 : layers + 1);
  if (!builtin_kind(c.model)) {
    const auto mm = measure_model(c.model);
    units = !mm.built ? std::max(f.count, 1)  // the kind or its settings are reported already
            : f.plan == "balanced" ? static_cast<int>(std::min<long double>(mm.tensors, 1 << 30)) : mm.layers;
  }
  if (f.count < 1) e.push_back("fragments.count: must be ≥ 1 (got " + std::to_string(f.count) + ")");
  else if (f.count > t.H && t.H >= 1) e.push_back("fragments.count: must not exceed train.H (each fragment needs its own step)");
  else if (f.count > units)
    e.push_back("fragments.count: " + std::to_string(f.count) + " fragments, but the model has only " + std::to_string(units) +
                (f.plan == "balanced" ? " tensors" : " layers (the embeddings count with the first block, the final norm as one)") +
                " to split among them");
  if (f.plan != "strided" && f.plan != "balanced")
    e.push_back("fragments.plan: must be \"strided\" or \"balanced\" (got \"" + f.plan + "\")");
  if (f.tau < 0 || (t.H >= 1 && f.tau >= t.H))
    e.push_back("fragments.tau: must be in [0, train.H) (got " + std::to_string(f.tau) + ")");
  if (!(f.alpha <= 1.0)) e.push_back("fragments.alpha: must be ≤ 1 (negative means automatic)");
  if (!(f.wait_steps >= 0.0 && f.wait_steps <= 1e6))
    e.push_back("fragments.wait_steps: must be in [0, 1e6] inner steps (got " + shown(f.wait_steps) + ")");
  if (auto enc = parse_encoding(f.encoding); !enc) {
    e.push_back("fragments.encoding: must be fp32, bf16, int8, int4 or e3m0 (got \"" + f.encoding + "\")");
  } else if (f.block_size < 1 || static_cast<std::uint32_t>(f.block_size) > max_block_size) {
    e.push_back("fragments.block_size: must be in [1, " + std::to_string(max_block_size) + "]");
  }
  if (!parse_encoding(f.broadcast_encoding))
    e.push_back("fragments.broadcast_encoding: must be fp32, bf16, int8, int4 or e3m0 (got \"" + f.broadcast_encoding + "\")");
  const auto& is = c.islands;
  if (is.chips < 1 || is.chips > 256) e.push_back("islands.chips: must be in [1, 256] (got " + std::to_string(is.chips) + ")");
  if (is.counts.size() > static_cast<std::size_t>(std::max(t.islands, 0)))
    e.push_back("islands.counts: " + std::to_string(is.counts.size()) + " entries for " + std::to_string(t.islands) + " islands");
  for (int n : is.counts)
    if (n < 1 || n > 256) e.push_back("islands.counts: every entry must be in [1, 256] (got " + std::to_string(n) + ")");
  if (is.speed.size() > static_cast<std::size_t>(std::max(t.islands, 0)))
    e.push_back("islands.speed: " + std::to_string(is.speed.size()) + " entries for " + std::to_string(t.islands) + " islands");
  for (double v : is.speed)
    if (!(v >= kMinSpeed && v <= 1.0))
      e.push_back("islands.speed: every entry must be in [0.001, 1] (got " + shown(v) + "; a chip waits 1/speed − 1 times its compute time)");
  if (!(is.chip_flops >= 1e3 && is.chip_flops <= 1e18))
    e.push_back("islands.chip_flops: must be in [1e3, 1e18] FLOP/s (got " + shown(is.chip_flops) + ")");
  if (c.syncer.snapshot_every < 0) e.push_back("syncer.snapshot_every: must be ≥ 0");
  const auto& sv = c.supervision;
  if (sv.strategy != "one_for_one" && sv.strategy != "one_for_all" && sv.strategy != "rest_for_one")
    e.push_back("supervision.strategy: must be one_for_one, one_for_all or rest_for_one (got \"" + sv.strategy + "\")");
  if (sv.intensity < 0) e.push_back("supervision.intensity: must be ≥ 0");
  if (!(sv.period_s > 0.0)) e.push_back("supervision.period_s: must be positive");
  if (!(sv.backoff_initial_s >= 0.0)) e.push_back("supervision.backoff_initial_s: must be ≥ 0");
  if (!(sv.backoff_max_s >= sv.backoff_initial_s)) e.push_back("supervision.backoff_max_s: must be ≥ backoff_initial_s");
  if (!(sv.backoff_factor >= 1.0)) e.push_back("supervision.backoff_factor: must be ≥ 1");
  check_not_too_long(e, "supervision.period_s", sv.period_s);
  check_not_too_long(e, "supervision.backoff_initial_s", sv.backoff_initial_s);
  check_not_too_long(e, "supervision.backoff_max_s", sv.backoff_max_s);
  for (std::size_t k = 0; k < c.faults.size(); ++k) {
    const auto& ft = c.faults[k];
    const std::string key = "faults[" + std::to_string(k) + "]";
    const bool site_fault = ft.kill == FaultKind::partition;
    if (ft.island < 0 || ft.island >= t.islands) e.push_back(key + ".island: no such island");
    if (ft.chip < 0 || (ft.island >= 0 && ft.chip >= is.chips_of(ft.island))) e.push_back(key + ".chip: no such chip");
    if (ft.at_step < 0) e.push_back(key + ".at_step: must be ≥ 1 (or 0 with at_s)");
    if ((ft.at_step >= 1) == (ft.at_s >= 0.0))
      e.push_back(key + ".at_step: set exactly one of at_step (≥ 1) and at_s (≥ 0)");
    if (site_fault && ft.at_s < 0.0) e.push_back(key + ".at_s: a partition is scheduled by time (at_s)");
    if (site_fault && site_index(c, ft.site) < 0) e.push_back(key + ".site: no such site \"" + ft.site + "\"");
    if (site_fault && !(ft.duration_s > 0.0)) e.push_back(key + ".duration_s: a partition needs a positive duration");
    if (!(ft.duration_s >= 0.0)) e.push_back(key + ".duration_s: must be ≥ 0");
    check_not_too_long(e, key + ".duration_s", ft.duration_s);
    if (ft.at_s >= 0.0) check_not_too_long(e, key + ".at_s", ft.at_s);
    if (!(ft.factor >= kMinSpeed && ft.factor <= 1.0)) e.push_back(key + ".factor: must be in [0.001, 1] (got " + shown(ft.factor) + ")");
  }
  if (!c.sites.empty()) {
    // At most the largest island count allowed (train.islands out of range is reported above):
    // a count of 400,000 must not cost 400,000 checks and messages.
    std::vector<int> owner(static_cast<std::size_t>(std::clamp(t.islands, 0, kMaxIslands)), -1);
    for (std::size_t k = 0; k < c.sites.size(); ++k) {
      const auto& st = c.sites[k];
      const std::string key = "sites[" + std::to_string(k) + "]";
      check_unique_name(e, key, st.name, c.sites, k);
      for (int i : st.islands) {
        if (i < 0 || i >= t.islands || static_cast<std::size_t>(i) >= owner.size())
          e.push_back(key + ".islands: no island " + std::to_string(i));
        else if (owner[static_cast<std::size_t>(i)] >= 0)
          e.push_back(key + ".islands: island " + std::to_string(i) + " is already at site \"" +
                      c.sites[static_cast<std::size_t>(owner[static_cast<std::size_t>(i)])].name + "\"");
        else owner[static_cast<std::size_t>(i)] = static_cast<int>(k);
      }
      if (st.bandwidth_mbps == 0.0) e.push_back(key + ".bandwidth_mbps: must be positive (or negative for [wan])");
      else if (c.wan.enabled) check_bandwidth(e, key + ".bandwidth_mbps", st.bandwidth_mbps, model_parameters(c.model));
      if (st.loss > kMaxLoss) e.push_back(key + ".loss: must be at most 0.999 (got " + shown(st.loss) + "; each loss resends the frame)");
      if (st.jitter_ms >= 0.0 && st.jitter_ms > (st.latency_ms >= 0.0 ? st.latency_ms : c.wan.latency_ms))
        e.push_back(key + ".jitter_ms: must not exceed the link's latency");
      if (st.latency_ms >= 0.0) check_not_too_long(e, key + ".latency_ms", st.latency_ms, 1e-3);
    }
    std::size_t orphans = 0, open = 0;
    for (std::size_t i = 0; i < owner.size(); ++i) {
      if (owner[i] >= 0) continue;
      ++open;
      if (!c.net.allow_join && ++orphans <= 8)
        e.push_back("sites: island " + std::to_string(i) + " belongs to no site (set net.allow_join = true to leave it open for joiners)");
    }
    if (orphans > 8) e.push_back("sites: " + std::to_string(orphans - 8) + " more islands belong to no site");
    if (c.net.allow_join && open == 0)
      e.push_back("net.allow_join: every island belongs to a [[sites]] entry, so none is open for a joiner (raise train.islands)");
    if (c.net.allow_join && open == owner.size() && !owner.empty())
      e.push_back("net.allow_join: no [[sites]] entry holds an island; at least one site must be in the config");
  }
  if (c.net.allow_join) {
    if (c.sites.empty()) e.push_back("net.allow_join: needs [[sites]] (the islands they leave out are the open ones)");
    if (t.mode == TrainMode::ddp) e.push_back("net.allow_join: train.mode \"ddp\" runs in one process; joiners need a syncer");
    if (!(c.net.join_lease_ms >= 0.0)) e.push_back("net.join_lease_ms: must be ≥ 0");
    check_not_too_long(e, "net.join_lease_ms", c.net.join_lease_ms, 1e-3);
  }
  for (std::size_t k = 0; k < c.syncers.size(); ++k) {
    const auto& r = c.syncers[k];
    const std::string key = "syncers[" + std::to_string(k) + "]";
    check_unique_name(e, key, r.name, c.syncers, k);
    for (std::size_t s = 0; s < c.sites.size(); ++s)
      if (c.sites[s].name == r.name) {
        e.push_back(key + ".name: \"" + r.name + "\" is also a site's name");
        break;
      }
    const auto colon = r.address.rfind(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == r.address.size() ||
        r.address.find_first_not_of("0123456789", colon + 1) != std::string::npos || r.address.size() - colon > 6 ||
        std::stol(r.address.substr(colon + 1)) == 0 || std::stol(r.address.substr(colon + 1)) > 65535)
      e.push_back(key + ".address: expected host:port with a port in [1, 65535] (got \"" + r.address + "\")");
  }
  if (!c.syncers.empty()) {
    if (c.net.etcd.rfind("http://", 0) != 0 && c.net.etcd.rfind("https://", 0) != 0)
      e.push_back("net.etcd: expected an http:// or https:// URL of etcd's gateway (got \"" + c.net.etcd + "\")");
    if (c.net.election.empty() || c.net.election.find_first_not_of(
                                      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-/") != std::string::npos)
      e.push_back("net.election: letters, digits, '.', '_', '-' or '/' (got \"" + c.net.election + "\")");
    if (!(c.net.lease_ms >= 1000.0 && c.net.lease_ms <= 600000.0))
      e.push_back("net.lease_ms: must be in [1000, 600000] (etcd counts leases in whole seconds)");
    if (c.train.mode == TrainMode::ddp)
      e.push_back("syncers: train.mode \"ddp\" has a parameter server, which is not replicated; [[syncers]] needs "
                  "\"decoupled\", \"diloco\" or \"streaming\"");
  }
  const auto& n = c.net;
  if (n.listen.rfind(':') == std::string::npos || n.listen.rfind(':') + 1 == n.listen.size())
    e.push_back("net.listen: expected host:port (got \"" + n.listen + "\")");
  if (!(n.heartbeat_ms > 0.0)) e.push_back("net.heartbeat_ms: must be positive");
  if (!(n.timeout_ms > n.heartbeat_ms)) e.push_back("net.timeout_ms: must exceed net.heartbeat_ms");
  if (!(n.reconnect_initial_ms > 0.0)) e.push_back("net.reconnect_initial_ms: must be positive");
  if (!(n.reconnect_max_ms >= n.reconnect_initial_ms)) e.push_back("net.reconnect_max_ms: must be ≥ net.reconnect_initial_ms");
  check_not_too_long(e, "net.heartbeat_ms", n.heartbeat_ms, 1e-3);
  check_not_too_long(e, "net.timeout_ms", n.timeout_ms, 1e-3);
  check_not_too_long(e, "net.reconnect_initial_ms", n.reconnect_initial_ms, 1e-3);
  check_not_too_long(e, "net.reconnect_max_ms", n.reconnect_max_ms, 1e-3);
  if (n.syncer_name.empty() || n.syncer_name.find_first_not_of(
                                   "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") != std::string::npos)
    e.push_back("net.syncer_name: letters, digits, '.', '_' or '-' (got \"" + n.syncer_name + "\")");
  if (!(n.handshake_ms > 0.0 && n.handshake_ms <= 600000.0)) e.push_back("net.handshake_ms: must be in (0, 600000]");
  if (!(n.join_interval_ms >= 0.0 && n.join_interval_ms <= 600000.0)) e.push_back("net.join_interval_ms: must be in [0, 600000]");
  if (n.pending_per_address < 1 || n.pending_per_address > 65536) e.push_back("net.pending_per_address: must be in [1, 65536]");
  if (n.pending_total < n.pending_per_address || n.pending_total > 65536)
    e.push_back("net.pending_total: must be in [net.pending_per_address, 65536]");
  add(validate(c.chaos));
  if (!(c.chaos.downtime_gap_s >= 0.0)) e.push_back("chaos.downtime_gap_s: must be ≥ 0");
  check_not_too_long(e, "chaos.downtime_gap_s", c.chaos.downtime_gap_s);
  check_chaos_events(c, e);
  const auto& w = c.wan;
  if (!(w.bandwidth_mbps > 0.0)) e.push_back("wan.bandwidth_mbps: must be positive");
  else if (w.enabled) check_bandwidth(e, "wan.bandwidth_mbps", w.bandwidth_mbps, model_parameters(c.model));
  if (!(w.latency_ms >= 0.0)) e.push_back("wan.latency_ms: must be ≥ 0");
  check_not_too_long(e, "wan.latency_ms", w.latency_ms, 1e-3);
  if (!(w.jitter_ms >= 0.0 && w.jitter_ms <= w.latency_ms)) e.push_back("wan.jitter_ms: must be in [0, wan.latency_ms]");
  if (!(w.loss >= 0.0 && w.loss <= kMaxLoss)) e.push_back("wan.loss: must be in [0, 0.999] (got " + shown(w.loss) + "; each loss resends the frame)");
  if (!(w.retransmit_timeout_ms >= 0.0)) e.push_back("wan.retransmit_timeout_ms: must be ≥ 0");
  check_not_too_long(e, "wan.retransmit_timeout_ms", w.retransmit_timeout_ms, 1e-3);
  if (c.data.corpus == "synthetic" && c.model.seq_len >= 1 && c.data.eval_tokens < static_cast<std::uint64_t>(c.model.seq_len) + 1)
    e.push_back("data.eval_tokens: " + std::to_string(c.data.eval_tokens) + " tokens hold no window of model.seq_len + 1 = " +
                std::to_string(c.model.seq_len + 1));
  if (c.data.corpus == "synthetic" && c.model.vocab >= 2 && c.data.alphabet >= 2 && c.data.alphabet <= 64 &&
      synthetic_max_token(c.data) >= c.model.vocab)
    e.push_back("model.vocab: " + std::to_string(c.model.vocab) + " is too small for the synthetic language, whose " +
                std::to_string(c.data.alphabet) + " symbols are bytes up to " + std::to_string(synthetic_max_token(c.data)));
  if (c.quorum.min_islands > t.islands)
    e.push_back("quorum.min_islands: exceeds train.islands (" + std::to_string(c.quorum.min_islands) + " > " +
                std::to_string(t.islands) + ")");
  // Sizes by what they imply, once every single value is in range (a product of bad values
  // would only repeat what is already said).
  if (e.empty()) {
    check_index_ranges(c, e);
    check_memory(c, memory_limit, e);
    if (auto big = synthetic_language_too_large(c.data)) e.push_back(*big);
  }
  return e;
}

RunConfig parse_config(std::string_view text, const std::vector<std::string>& overrides, std::string_view origin,
                       std::uint64_t memory_limit) {
  std::vector<std::string> errs;
  toml::table root;
  try {
    root = toml::parse(text, origin);
  } catch (const toml::parse_error& ex) {
    throw ConfigError({describe_parse_error(origin, ex)});
  }
  for (const auto& o : overrides) {
    if (o.find('=') == std::string::npos) {
      errs.push_back("override '" + o + "': expected section.key=value");
      continue;
    }
    try {
      merge_tables(root, toml::parse(std::string_view(o), std::string_view("override")));
    } catch (const toml::parse_error& ex) {
      errs.push_back("override '" + o + "': " + std::string(ex.description()));
    }
  }
  RunConfig cfg;
  auto table = fields(cfg);
  for (auto&& [sec, node] : root) {
    const std::string section(sec.str());
    if (section == "faults" || section == "sites" || section == "syncers") {
      // `faults = []` (e.g. --set 'faults=[]') is an empty list: it clears the file's tables.
      const auto* arr = node.as_array();
      if (!arr || (!arr->empty() && !arr->is_array_of_tables())) {
        errs.push_back(section + ": must be an array of tables ([[" + section + "]])");
        continue;
      }
      for (std::size_t k = 0; k < arr->size(); ++k) {
        FaultSpec f;
        SiteSpec site;
        SyncerReplicaSpec replica;
        auto ft = section == "faults" ? fault_fields(f) : section == "sites" ? site_fields(site) : replica_fields(replica);
        for (auto&& [fk, fv] : *arr->get(k)->as_table()) {
          const std::string name(fk.str());
          const std::string key = section + "[" + std::to_string(k) + "]." + name;
          auto it = std::find_if(ft.begin(), ft.end(), [&](const Field& x) { return x.key == name; });
          if (it == ft.end()) errs.push_back(key + ": unknown key");
          else assign(fv, it->ptr, key, errs);
        }
        if (section == "faults") cfg.faults.push_back(f);
        else if (section == "sites") cfg.sites.push_back(site);
        else cfg.syncers.push_back(replica);
      }
      continue;
    }
    const auto* tbl = node.as_table();
    bool known = false;
    for (const auto& f : table) known = known || f.section == section;
    if (!known || !tbl) {
      errs.push_back(section + ": " + (known ? "must be a table" : "unknown section"));
      continue;
    }
    for (auto&& [k, v] : *tbl) {
      const std::string name(k.str());
      const std::string key = section + "." + name;
      auto it = std::find_if(table.begin(), table.end(),
                             [&](const Field& f) { return f.section == section && f.key == name; });
      if (it == table.end()) errs.push_back(key + ": unknown key");
      else assign(v, it->ptr, key, errs);
    }
  }
  cfg.quorum.tau = cfg.fragments.tau;
  // Every problem at once: a key that could not be read keeps its default, so validating the
  // rest names no problem twice.
  for (auto& e : validate(cfg, memory_limit)) errs.push_back(std::move(e));
  if (!errs.empty()) throw ConfigError(std::move(errs));
  return cfg;
}

RunConfig load_config(const std::string& path, const std::vector<std::string>& overrides, std::uint64_t memory_limit) {
  std::ifstream in(path);
  if (!in) throw ConfigError({path + ": cannot open the configuration file"});
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_config(ss.str(), overrides, path, memory_limit);
}

std::vector<std::pair<std::string, std::string>> config_entries(const RunConfig& cfg) {
  RunConfig c = cfg;  // fields() hands out pointers into its argument
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& f : fields(c)) out.emplace_back(std::string(f.section) + "." + std::string(f.key), format_value(f.ptr));
  for (std::size_t k = 0; k < c.faults.size(); ++k)
    for (const auto& f : fault_fields(c.faults[k]))
      out.emplace_back("faults[" + std::to_string(k) + "]." + std::string(f.key), format_value(f.ptr));
  for (std::size_t k = 0; k < c.sites.size(); ++k)
    for (const auto& f : site_fields(c.sites[k]))
      out.emplace_back("sites[" + std::to_string(k) + "]." + std::string(f.key), format_value(f.ptr));
  for (std::size_t k = 0; k < c.syncers.size(); ++k)
    for (const auto& f : replica_fields(c.syncers[k]))
      out.emplace_back("syncers[" + std::to_string(k) + "]." + std::string(f.key), format_value(f.ptr));
  return out;
}

std::string default_config_toml() {
  RunConfig cfg;
  std::ostringstream s;
  s << "# diloco: the built-in defaults, every key documented (printed by `diloco config`).\n\n";
  std::string_view section;
  for (const auto& f : fields(cfg)) {
    if (f.section != section) {
      s << (section.empty() ? "" : "\n") << "[" << f.section << "]\n";
      section = f.section;
    }
    s << "# " << f.doc << "\n" << f.key << " = " << format_value(f.ptr) << "\n";
  }
  FaultSpec example;
  s << "\n# Faults to inject (decoupled mode), none by default; one [[faults]] table each:\n";
  for (const auto& f : fault_fields(example))
    s << "#   " << f.key << " = " << format_value(f.ptr) << "  # " << f.doc << "\n";
  s << "# [[faults]]\n# kill = \"chip\"\n# island = 0\n# chip = 1\n# at_step = 20\n";
  SiteSpec site;
  s << "\n# Sites, each with its own WAN link to the syncer; by default every island is a site of its\n"
       "# own (\"island-<i>\") on the [wan] link. One [[sites]] table each; every island at one site:\n";
  for (const auto& f : site_fields(site))
    s << "#   " << f.key << " = " << format_value(f.ptr) << "  # " << f.doc << "\n";
  s << "# [[sites]]\n# name = \"us-east\"\n# islands = [0, 1]\n# bandwidth_mbps = 2000.0\n";
  SyncerReplicaSpec replica;
  s << "\n# A replicated syncer (`diloco syncer CONFIG --replica NAME`), none by default: one leads,\n"
       "# elected through etcd (net.etcd), and replicates every commit to the others. One [[syncers]] table each:\n";
  for (const auto& f : replica_fields(replica))
    s << "#   " << f.key << " = " << format_value(f.ptr) << "  # " << f.doc << "\n";
  s << "# [[syncers]]\n# name = \"syncer-a\"\n# address = \"10.0.0.1:7700\"\n";
  return s.str();
}

}  // namespace diloco
