// Configuration: defaults are valid and documented; bad input names the key and the problem.
#define BOOST_TEST_MODULE config
#include <boost/test/unit_test.hpp>

#include <algorithm>

#include <limits>
#include <thread>

#include "bigram_model.hpp"
#include "diloco/config.hpp"
#include "diloco/model.hpp"
#include "diloco/model_registry.hpp"

using namespace diloco;

namespace {
// Parses and expects failure; returns all problems joined.
std::string problems_of(const std::string& toml, const std::vector<std::string>& overrides = {}) {
  try {
    parse_config(toml, overrides, "test.toml");
  } catch (const ConfigError& e) {
    return e.what();
  }
  BOOST_FAIL("expected a ConfigError for: " << toml);
  return {};
}
bool mentions(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }
}  // namespace

BOOST_AUTO_TEST_CASE(defaults_are_valid) {
  BOOST_TEST(validate(RunConfig{}).empty());
  auto cfg = parse_config("");
  BOOST_TEST((cfg.train.mode == TrainMode::diloco));
}

BOOST_AUTO_TEST_CASE(printed_defaults_parse_back_to_the_defaults) {
  auto text = default_config_toml();
  auto cfg = parse_config(text, {}, "defaults");
  RunConfig d;
  BOOST_TEST(cfg.inner.lr == d.inner.lr);
  BOOST_TEST(cfg.outer.momentum == d.outer.momentum);
  BOOST_TEST(cfg.fragments.alpha == d.fragments.alpha);
  BOOST_TEST(cfg.data.skew == d.data.skew);
  BOOST_TEST(mentions(text, "# "));  // every key carries its documentation
}

BOOST_AUTO_TEST_CASE(values_and_overrides_are_applied) {
  auto cfg = parse_config("[train]\nislands = 8\nH = 20\n[outer]\nlr = 1\n", {"train.H=10", "model.kind=\"mlp\""});
  BOOST_TEST(cfg.train.islands == 8);
  BOOST_TEST(cfg.train.H == 10);
  BOOST_TEST(cfg.outer.lr == 1.0f);  // an integer is accepted for a float key
  BOOST_TEST(cfg.model.kind == "mlp");
}

BOOST_AUTO_TEST_CASE(unknown_keys_and_sections_are_errors_naming_them) {
  BOOST_TEST(mentions(problems_of("[model]\nn_layr = 2\n"), "model.n_layr: unknown key"));
  BOOST_TEST(mentions(problems_of("[modle]\nn_layer = 2\n"), "modle: unknown section"));
}

BOOST_AUTO_TEST_CASE(wrong_types_name_the_key) {
  BOOST_TEST(mentions(problems_of("[train]\nislands = \"four\"\n"), "train.islands: expected an integer"));
  BOOST_TEST(mentions(problems_of("[merge]\nrda = 1\n"), "merge.rda: expected true or false"));
  BOOST_TEST(mentions(problems_of("[train]\nmode = 3\n"), "train.mode: expected a string"));
  BOOST_TEST(mentions(problems_of("[inner]\nlr = \"fast\"\n"), "inner.lr: expected a number"));
  BOOST_TEST(mentions(problems_of("[train]\nislands = 99999999999\n"), "train.islands: out of range"));
  BOOST_TEST(mentions(problems_of("[data]\nseed = -1\n"), "data.seed: must not be negative"));
}

BOOST_AUTO_TEST_CASE(bad_values_name_the_key_and_the_problem) {
  BOOST_TEST(mentions(problems_of("[train]\nH = 0\n"), "train.H: must be ≥ 1"));
  BOOST_TEST(mentions(problems_of("[model]\nn_embd = 30\nn_head = 4\n"), "model.n_embd: must be divisible by model.n_head"));
  BOOST_TEST(mentions(problems_of("[train]\nmode = \"async\"\n"), "train.mode"));
  BOOST_TEST(mentions(problems_of("[fragments]\ntau = 60\n"), "fragments.tau"));
  BOOST_TEST(mentions(problems_of("[quorum]\nmin_islands = 9\n"), "quorum.min_islands: exceeds train.islands"));
  BOOST_TEST(mentions(problems_of("[inner]\nlr = nan\n"), "inner.lr: must be finite"));
  BOOST_TEST(mentions(problems_of("[data]\ncorpus = \"file\"\n"), "data.path: required"));
  // several problems are all reported at once
  auto all = problems_of("[train]\nH = 0\nbatch = 0\n");
  BOOST_TEST(mentions(all, "train.H"));
  BOOST_TEST(mentions(all, "train.batch"));
}

BOOST_AUTO_TEST_CASE(the_evaluation_window_count_is_read_from_train_eval_windows) {
  BOOST_TEST(parse_config("[train]\neval_windows = 300\n").train.eval_windows == 300);
  BOOST_TEST(parse_config("", {"train.eval_windows=64"}).train.eval_windows == 64);
  // One window has no standard error; the old batch count is no longer a key.
  BOOST_TEST(mentions(problems_of("[train]\neval_windows = 1\n"), "train.eval_windows: must be ≥ 2 (got 1"));
  BOOST_TEST(mentions(problems_of("[train]\neval_batches = 8\n"), "train.eval_batches: unknown key"));
}

BOOST_AUTO_TEST_CASE(malformed_toml_reports_file_line_and_column) {
  auto p = problems_of("[train]\nislands = = 3\n");
  BOOST_TEST(mentions(p, "test.toml:2:"));
  BOOST_TEST(mentions(problems_of("", {"train.H"}), "expected section.key=value"));
}

BOOST_AUTO_TEST_CASE(missing_file_is_reported_with_its_path) {
  try {
    load_config("/nonexistent/diloco.toml");
    BOOST_FAIL("expected an error");
  } catch (const ConfigError& e) {
    BOOST_TEST(mentions(e.what(), "/nonexistent/diloco.toml"));
  }
}

// The actor runtime's sections (mode "decoupled"): islands, syncer, supervision, [[faults]].
BOOST_AUTO_TEST_CASE(decoupled_topology_with_faults_is_parsed) {
  auto cfg = parse_config(R"(
[train]
mode = "decoupled"
islands = 3
[islands]
chips = 4
speed = [1.0, 0.55]
[syncer]
snapshot_every = 3
checkpoint = "/tmp/x.safetensors"
[fragments]
encoding = "int4"
block_size = 32
[supervision]
strategy = "rest_for_one"
intensity = 2
[[faults]]
kill = "island"
island = 2
at_step = 40
[[faults]]
kill = "syncer"
at_step = 7
)");
  BOOST_TEST((cfg.train.mode == TrainMode::decoupled));
  BOOST_TEST(cfg.islands.chips == 4);
  BOOST_TEST(cfg.islands.speed_of(1) == 0.55);
  BOOST_TEST(cfg.islands.speed_of(2) == 1.0);  // missing entries run at full speed
  BOOST_TEST(cfg.syncer.snapshot_every == 3);
  BOOST_TEST(cfg.fragments.encoding == "int4");
  BOOST_TEST(cfg.supervision.strategy == "rest_for_one");
  BOOST_REQUIRE_EQUAL(cfg.faults.size(), 2u);
  BOOST_TEST((cfg.faults[0].kill == FaultKind::island));
  BOOST_TEST(cfg.faults[0].island == 2);
  BOOST_TEST((cfg.faults[1].kill == FaultKind::syncer));
  BOOST_TEST(cfg.faults[1].at_step == 7);
}

BOOST_AUTO_TEST_CASE(bad_decoupled_settings_name_the_key) {
  const auto p = problems_of(R"(
[train]
islands = 2
[islands]
chips = 0
speed = [1.0, 1.5, 1.0]
[fragments]
encoding = "int3"
[supervision]
strategy = "all_for_none"
[[faults]]
kill = "rack"
island = 5
at_step = 0
bogus = 1
)");
  BOOST_TEST(mentions(p, "faults[0].bogus: unknown key"));
  const auto q = problems_of(R"(
[train]
islands = 2
[islands]
chips = 0
speed = [1.0, 1.5, 1.0]
[fragments]
encoding = "int3"
[supervision]
strategy = "all_for_none"
[[faults]]
kill = "rack"
island = 5
at_step = 0
)");
  for (auto key : {"islands.chips", "islands.speed: 3 entries", "islands.speed: every entry", "fragments.encoding",
                   "supervision.strategy", "faults[0].kill", "faults[0].island", "faults[0].at_step"})
    BOOST_TEST(mentions(q, key), key);
  BOOST_TEST(mentions(problems_of("[islands]\nspeed = 1.0\n"), "islands.speed: expected an array"));
  BOOST_TEST(mentions(problems_of("[faults]\nkill = \"chip\"\n"), "faults: must be an array of tables"));
}

BOOST_AUTO_TEST_CASE(sites_net_and_chaos_problems_name_the_key) {
  const auto q = problems_of(R"(
[train]
islands = 3
[[sites]]
name = "us east"
islands = [0, 1]
[[sites]]
name = "eu"
islands = [1, 7]
bandwidth_mbps = 0.0
[net]
heartbeat_ms = 500.0
timeout_ms = 400.0
reconnect_initial_ms = 100.0
reconnect_max_ms = 50.0
[chaos]
chip_mtbf_s = -1.0
straggler_factor = 1.5
[[faults]]
kill = "partition"
site = "mars"
at_step = 3
)");
  for (auto key : {"sites[0].name", "sites[1].islands: island 1 is already at site", "sites[1].islands: no island 7",
                   "sites[1].bandwidth_mbps", "sites: island 2 belongs to no site", "net.timeout_ms",
                   "net.reconnect_max_ms", "chaos.chip_mtbf_s", "chaos.straggler_factor", "faults[0].site",
                   "faults[0].duration_s", "faults[0].at_s"})
    BOOST_TEST(mentions(q, key), key);
  BOOST_TEST(mentions(problems_of("[[sites]]\nname = \"a\"\nislands = [0, -1]\n"), "sites[0].islands: expected an array"));
  BOOST_TEST(mentions(problems_of("[train]\nbudget = \"hours\"\n"), "train.budget: must be"));
  BOOST_TEST(mentions(problems_of("[train]\nislands = 2\n[islands]\ncounts = [1, 0, 2]\n"), "islands.counts: 3 entries"));
  BOOST_TEST(mentions(problems_of("[train]\nislands = 2\n[islands]\ncounts = [1, 0]\n"), "islands.counts: every entry"));
  BOOST_TEST(mentions(problems_of("[train]\nmode = \"ddp\"\nbudget = \"total_tokens\"\n"), "train.budget: \"total_tokens\" is for"));
  // Found by the config fuzzer: an island count far out of range with [[sites]] cost one check and
  // one message per island (a timeout); now the count is refused once and the sites checked
  // against at most the largest count, and islands without a site are named up to eight.
  {
    const auto huge = problems_of("[train]\nislands = 407850\n\n[[sites]]\nname = \"a\"\nislands = [0, 5000]\n");
    BOOST_TEST(mentions(huge, "train.islands: must be in [1, 1024]"));
    BOOST_TEST(mentions(huge, "sites[0].islands: no island 5000"));
    BOOST_TEST(mentions(huge, "sites: 1015 more islands belong to no site"));
    BOOST_TEST(std::count(huge.begin(), huge.end(), '\n') < 20);
  }
  // Siblings the review found: a partition fault looked its site up island by island (2^31 of
  // them here), and n unnamed sites or replicas said "used twice" n²/2 times.
  {
    const auto huge = problems_of("[train]\nislands = 2147483647\n[[faults]]\nkill = \"partition\"\nsite = \"island-7\"\n"
                                  "at_s = 1.0\nduration_s = 1.0\n");
    BOOST_TEST(mentions(huge, "train.islands: must be in [1, 1024]"));
    BOOST_TEST(!mentions(huge, "no such site"));  // island-7 is a site of the run as written
    BOOST_TEST(mentions(problems_of("[train]\nislands = 2\n[[faults]]\nkill = \"partition\"\nsite = \"island-2\"\n"
                                    "at_s = 1.0\nduration_s = 1.0\n"),
                        "faults[0].site: no such site \"island-2\""));
    std::string many = "[train]\nislands = 1\n";
    for (int k = 0; k < 300; ++k) many += "[[sites]]\n[[syncers]]\n";
    const auto twice = problems_of(many);
    std::size_t used = 0, also = 0;
    for (std::size_t at = 0; (at = twice.find("is used twice", at)) != std::string::npos; ++at) ++used;
    for (std::size_t at = 0; (at = twice.find("is also a site's name", at)) != std::string::npos; ++at) ++also;
    BOOST_TEST(used == 2u);   // once for the sites' repeated "", once for the replicas'
    BOOST_TEST(also == 300u);  // at most once per replica
  }
  BOOST_TEST(mentions(problems_of("[train]\nmode = \"ddp\"\n[[syncers]]\nname = \"s1\"\naddress = \"127.0.0.1:7001\"\n"),
                      "syncers: train.mode \"ddp\" has a parameter server, which is not replicated"));
  BOOST_TEST(mentions(problems_of("[train]\nfinal_sync_s = -1.0\n"), "train.final_sync_s: must be"));
  BOOST_TEST(mentions(problems_of("[train]\nfinal_sync_s = inf\n"), "train.final_sync_s: must be"));
}

BOOST_AUTO_TEST_CASE(scheduler_threads_are_one_per_core_unless_train_threads_says) {
  const RunConfig defaults = parse_config("", {}, "test.toml");
  BOOST_TEST(defaults.train.threads == 0);
  BOOST_TEST(scheduler_threads(defaults) == std::max(1u, std::thread::hardware_concurrency()));
  const RunConfig four = parse_config("[train]\nthreads = 4\n", {}, "test.toml");
  BOOST_TEST(scheduler_threads(four) == 4u);
  BOOST_TEST(mentions(problems_of("[train]\nthreads = -1\n"), "train.threads: must be in [0, 1024]"));
  BOOST_TEST(mentions(problems_of("", {"train.threads=5000"}), "train.threads: must be in [0, 1024]"));
}

BOOST_AUTO_TEST_CASE(sites_share_a_link_and_override_the_wan_settings) {
  const auto cfg = diloco::parse_config(R"(
[train]
islands = 3
[wan]
bandwidth_mbps = 100.0
latency_ms = 40.0
[[sites]]
name = "us-east"
islands = [2, 0]
bandwidth_mbps = 2000.0
[[sites]]
name = "eu-west"
islands = [1]
latency_ms = 80.0
)");
  BOOST_TEST(diloco::site_count(cfg) == 2);
  BOOST_TEST(diloco::site_of(cfg, 0) == 0);
  BOOST_TEST(diloco::site_of(cfg, 1) == 1);
  BOOST_TEST(diloco::site_of(cfg, 2) == 0);
  BOOST_TEST((diloco::islands_of_site(cfg, 0) == std::vector<int>{0, 2}));
  BOOST_TEST(diloco::site_index(cfg, "eu-west") == 1);
  BOOST_TEST(diloco::site_index(cfg, "nowhere") == -1);
  const auto us = diloco::link_config(cfg, 0, true), eu = diloco::link_config(cfg, 1, false);
  BOOST_TEST(us.bandwidth_Bps == 2000e6 / 8.0);
  BOOST_TEST(us.latency_s == 0.040, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(eu.bandwidth_Bps == 100e6 / 8.0);
  BOOST_TEST(eu.latency_s == 0.080, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(us.seed != eu.seed);
  // Without [[sites]] every island is a site of its own.
  const auto plain = diloco::parse_config("[train]\nislands = 2\n");
  BOOST_TEST(diloco::site_count(plain) == 2);
  BOOST_TEST(diloco::site_name(plain, 1) == "island-1");
}

// ---- absurd values: sizes bounded by the memory they imply, durations by what a timer holds ----

BOOST_AUTO_TEST_CASE(absurd_layer_count_is_refused_naming_the_key_and_memory) {
  const auto p = problems_of("[model]\nn_layer = 2147483647\n");
  BOOST_TEST(mentions(p, "model.n_layer: 2147483647 needs "), p);
  BOOST_TEST(mentions(p, "PiB of memory"), p);     // 2^31 blocks of 12·128² values, per island copy
  BOOST_TEST(mentions(p, "limit 1.0 TiB"), p);
}

BOOST_AUTO_TEST_CASE(each_absurd_size_names_its_key_before_anything_is_allocated) {
  const std::pair<const char*, const char*> rows[] = {
      {"[train]\neval_windows = 2147483647\n[model]\nseq_len = 1024\n", "train.eval_windows: 2147483647 needs "},
      {"[train]\nbatch = 2147483647\n", "train.batch: 2147483647 "},
      {"[model]\nn_embd = 65536\n", "model.n_embd: 65536 needs "},
      {"[data]\neval_tokens = 9223372036854775807\n", "data.eval_tokens: 9223372036854775807 needs "},
      {"[data]\ndoc_len = 2147483647\n[train]\nislands = 1024\n", "data.doc_len: 2147483647 needs "},
      {"[model]\nkind = \"mlp\"\nhidden = 2147483647\n", "model.hidden: 2147483647 needs "},
      {"[train]\nmode = \"decoupled\"\nbatch = 100000\n[islands]\nchips = 256\n", "train.batch: 100000 needs "},
  };
  for (const auto& [toml, expected] : rows) {
    const auto p = problems_of(toml);
    BOOST_TEST(mentions(p, expected), toml << " -> " << p);
  }
  // Products that overflow the models' int indices or the 64-bit token counters.
  BOOST_TEST(mentions(problems_of("[train]\nbatch = 9000000\n"), "train.batch: 9000000 makes n_layer × batch × seq_len"));
  BOOST_TEST(mentions(problems_of("[train]\nsteps = 4611686018427387904\n"), "train.steps: 4611686018427387904 makes islands × steps"));
  BOOST_TEST(mentions(problems_of("[model]\nkind = \"mlp\"\ncontext = 65536\nn_embd = 65536\n"), "model.context: context × n_embd"));
  BOOST_TEST(mentions(problems_of("[data]\neval_tokens = 1024\n[model]\nseq_len = 2048\n"), "data.eval_tokens: 1024 tokens hold no window"));
}

BOOST_AUTO_TEST_CASE(a_synthetic_language_too_large_to_build_or_analyse_is_refused_naming_its_keys) {
  // Each key within its own range, together 26 GB of tables and 10^12 steps of analysis before
  // training: refused up front, never an allocation or a silent hour.
  RunConfig c;
  c.data.alphabet = 32;
  c.data.order = 4;
  c.data.branching = 32;
  c.data.dialects = 64;
  std::string all;
  for (const auto& x : validate(c, 8ull << 30)) all += x + "\n";
  BOOST_TEST(mentions(all, "data.doc_len: data.dialects × alphabet^order × branching × doc_len = 1099511627776 steps"), all);
  BOOST_TEST(mentions(all, "of evaluation data; limit 8.0 GiB"), all);
  // The defaults are far inside both bounds.
  BOOST_TEST(validate(RunConfig{}).empty());
}

BOOST_AUTO_TEST_CASE(the_memory_limit_is_a_parameter_and_names_what_the_run_needs) {
  BOOST_TEST(validate(RunConfig{}).empty());
  const auto e = validate(RunConfig{}, 1u << 20);  // the defaults need more than 1 MiB
  BOOST_TEST_REQUIRE(e.size() == 1u);
  BOOST_TEST(mentions(e[0], "of activations"), e[0]);
  BOOST_TEST(mentions(e[0], "limit 1.0 MiB"), e[0]);
  // The estimate is a lower bound that grows with what the run holds: islands and chips.
  RunConfig one, many;
  many.train.islands = 8;
  BOOST_TEST(memory_need(many).state_bytes > memory_need(one).state_bytes);
  many.train.mode = TrainMode::decoupled;
  BOOST_TEST(memory_need(many).activation_bytes == 16 * memory_need(one).activation_bytes);  // 8 islands x 2 chips
  // The parameter count is the model's own.
  for (const char* kind : {"gpt", "mlp"}) {
    RunConfig c;
    c.model.kind = kind;
    BOOST_TEST(memory_need(c).parameters == static_cast<long double>(make_model(c.model)->layout().size()), kind);
  }
}

BOOST_AUTO_TEST_CASE(init_std_beyond_a_float_is_out_of_range_not_must_be_positive) {
  const auto p = problems_of("[model]\ninit_std = 1e300\n");
  BOOST_TEST(mentions(p, "model.init_std: 1e+300 is out of range"), p);
  BOOST_TEST(!mentions(p, "positive"), p);
  BOOST_TEST(mentions(problems_of("[inner]\nlr = 1e-300\n"), "inner.lr: 1e-300 is out of range"));
  BOOST_TEST(mentions(problems_of("[model]\ninit_std = 1000.0\n"), "model.init_std: must be in (0, 100] (got 1000)"));
  ModelConfig m;
  m.init_std = std::numeric_limits<float>::infinity();
  BOOST_TEST_REQUIRE(validate(m).size() == 1u);
  BOOST_TEST(mentions(validate(m)[0], "model.init_std: must be in (0, 100] (got inf)"));
}

BOOST_AUTO_TEST_CASE(durations_that_would_overflow_a_timer_are_refused_naming_the_key) {
  const auto q = problems_of(R"(
[train]
final_sync_s = 1e300
[supervision]
backoff_initial_s = 1e300
backoff_max_s = 1e300
period_s = 1e300
[wan]
latency_ms = 1e300
jitter_ms = 1.0
retransmit_timeout_ms = 1e300
[net]
heartbeat_ms = 200.0
timeout_ms = 1e300
reconnect_max_ms = 1e300
[quorum]
grace_s = 1e300
gamma = 1e300
[chaos]
repair_s = 1e300
straggler_s = 1e300
horizon_s = 1e300
downtime_gap_s = 1e300
[[faults]]
kill = "chip"
at_s = 1e300
duration_s = 1e300
)");
  for (auto key : {"train.final_sync_s: must be at most 30 days", "supervision.backoff_initial_s: must be at most 30 days",
                   "supervision.backoff_max_s: must be at most 30 days", "supervision.period_s: must be at most 30 days",
                   "wan.latency_ms: must be at most 30 days (2.592e+09 ms, got 1e+300 ms)",
                   "wan.retransmit_timeout_ms: must be at most", "net.timeout_ms: must be at most",
                   "net.reconnect_max_ms: must be at most", "quorum.grace_s: must be in [0, 2592000]",
                   "quorum.gamma: must be in [0, 100]", "chaos.repair_s: must be at most 30 days",
                   "chaos.straggler_s: must be at most", "chaos.horizon_s: must be at most",
                   "chaos.downtime_gap_s: must be at most", "faults[0].at_s: must be at most",
                   "faults[0].duration_s: must be at most"})
    BOOST_TEST(mentions(q, key), key);
  BOOST_TEST(mentions(problems_of("[train]\nislands = 1\n[[sites]]\nname = \"a\"\nislands = [0]\nlatency_ms = 1e300\n"),
                      "sites[0].latency_ms: must be at most 30 days"));
  // Speeds and losses that stretch a delay without bound.
  BOOST_TEST(mentions(problems_of("[train]\nislands = 1\n[islands]\nspeed = [1e-300]\n"), "islands.speed: every entry must be in [0.001, 1]"));
  BOOST_TEST(mentions(problems_of("[wan]\nloss = 0.99999999\n"), "wan.loss: must be in [0, 0.999]"));
  BOOST_TEST(mentions(problems_of("[wan]\nenabled = true\nbandwidth_mbps = 1e-9\n"), "wan.bandwidth_mbps: a full-model frame"));
  // A fault schedule far beyond what chaos.cpp would build.
  BOOST_TEST(mentions(problems_of("[chaos]\nenabled = true\nchip_mtbf_s = 1e-6\n"), "chaos.chip_mtbf_s: 1e-06 s over chaos.horizon_s = 600 s"));
}

BOOST_AUTO_TEST_CASE(more_fragments_than_the_model_has_layers_is_refused_before_the_run) {
  // The default model has 4 blocks: 5 strided units (embeddings go with block 0, the final norm is one more).
  BOOST_TEST(mentions(problems_of("[fragments]\ncount = 6\n"), "fragments.count: 6 fragments, but the model has only 5 layers"));
  BOOST_TEST(validate(parse_config("[fragments]\ncount = 5\n")).empty());
  BOOST_TEST(mentions(problems_of("[model]\nkind = \"mlp\"\n[fragments]\ncount = 6\nplan = \"balanced\"\n"),
                      "fragments.count: 6 fragments, but the model has only 5 tensors"));
}

BOOST_AUTO_TEST_CASE(model_kind_is_checked_against_the_registry) {
  const auto p = problems_of("[model]\nkind = \"nope\"\n");
  BOOST_TEST(mentions(p, "model.kind: unknown model \"nope\" (registered: "), p);
  BOOST_TEST(mentions(p, "\"gpt\""), p);
  BOOST_TEST(mentions(p, "\"mlp\""), p);
  testing::register_bigram();
  BOOST_TEST(mentions(problems_of("[model]\nkind = \"nope\"\n"), "\"bigram\""));
  const auto cfg = parse_config("[model]\nkind = \"bigram\"\noptions = { smoothing = 0.25 }\n");
  BOOST_TEST(cfg.model.kind == "bigram");
  BOOST_TEST(cfg.model.options.at("smoothing") == "0.25");
  // An app's model is measured by its layout: a V × V table.
  BOOST_TEST(memory_need(cfg).parameters == 256.0L * 256.0L);
}

BOOST_AUTO_TEST_CASE(model_options_are_checked_by_their_kind) {
  testing::register_bigram();
  BOOST_TEST(mentions(problems_of("[model]\nkind = \"bigram\"\noptions = { smoothing = -1 }\n"),
                      "model.options.smoothing: must be a number ≥ 0"));
  BOOST_TEST(mentions(problems_of("[model]\nkind = \"bigram\"\n", {"model.options.tempo=3"}),
                      "model.options.tempo: unknown option of \"bigram\""));
  BOOST_TEST(mentions(problems_of("[model.options]\nlayers = 3\n"), "model.options.layers: unknown option (model.kind \"gpt\" takes none)"));
  BOOST_TEST(mentions(problems_of("[model]\noptions = 3\n"), "model.options: expected a table"));
  BOOST_TEST(mentions(problems_of("[model]\nkind = \"bigram\"\noptions = { smoothing = [1] }\n"),
                      "model.options.smoothing: expected a string, a number or a boolean"));
  // One fragment per layer: the table is one layer.
  BOOST_TEST(mentions(problems_of("[model]\nkind = \"bigram\"\n[fragments]\ncount = 2\n"), "fragments.count: 2 fragments"));
}

BOOST_AUTO_TEST_CASE(model_vocab_and_token_shards_are_settings_checked_with_their_keys) {
  BOOST_TEST(parse_config("[model]\nvocab = 50257\n").model.vocab == 50257);
  BOOST_TEST(mentions(problems_of("[model]\nvocab = 1\n"), "model.vocab: must be in [2, 16777216] (got 1)"));
  BOOST_TEST(mentions(problems_of("[model]\nvocab = 100\n"), "model.vocab: 100 is too small for the synthetic language"));
  const auto p = problems_of("[data]\ncorpus = \"tokens\"\n");
  BOOST_TEST(mentions(p, "data.path: required when data.corpus = \"tokens\""), p);
  BOOST_TEST(mentions(p, "data.eval_path: required when data.corpus = \"tokens\""), p);
  BOOST_TEST(mentions(problems_of("[data]\neval_path = \"val_*.bin\"\n"), "data.eval_path: only for data.corpus = \"tokens\""));
  BOOST_TEST(mentions(problems_of("[data]\ncorpus = \"bpe\"\n"), "data.corpus: must be \"synthetic\", \"file\" or \"tokens\""));
  const auto cfg = parse_config("[data]\ncorpus = \"tokens\"\npath = \"d/train_*.bin\"\neval_path = \"d/val_*.bin\"\n");
  BOOST_TEST(cfg.data.path == "d/train_*.bin");
  BOOST_TEST(cfg.data.eval_path == "d/val_*.bin");
}
