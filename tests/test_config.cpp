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
