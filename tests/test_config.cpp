// Configuration: defaults are valid and documented; bad input names the key and the problem.
#define BOOST_TEST_MODULE config
#include <boost/test/unit_test.hpp>

#include "diloco/config.hpp"

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
  BOOST_TEST(cfg.train.mode == "diloco");
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
  BOOST_TEST(cfg.train.mode == "decoupled");
  BOOST_TEST(cfg.islands.chips == 4);
  BOOST_TEST(cfg.islands.speed_of(1) == 0.55);
  BOOST_TEST(cfg.islands.speed_of(2) == 1.0);  // missing entries run at full speed
  BOOST_TEST(cfg.syncer.snapshot_every == 3);
  BOOST_TEST(cfg.fragments.encoding == "int4");
  BOOST_TEST(cfg.supervision.strategy == "rest_for_one");
  BOOST_REQUIRE_EQUAL(cfg.faults.size(), 2u);
  BOOST_TEST(cfg.faults[0].kill == "island");
  BOOST_TEST(cfg.faults[0].island == 2);
  BOOST_TEST(cfg.faults[1].kill == "syncer");
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
  BOOST_TEST(mentions(problems_of("[train]\nfinal_sync_s = -1.0\n"), "train.final_sync_s: must be"));
  BOOST_TEST(mentions(problems_of("[train]\nfinal_sync_s = inf\n"), "train.final_sync_s: must be"));
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
