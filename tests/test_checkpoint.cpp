// Checkpoints: bit-identical restore, a crash at any stage of a save leaves the previous checkpoint
// intact, corrupt or foreign files are refused with their reason, islands are optional.
#define BOOST_TEST_MODULE checkpoint
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>

#include <sys/wait.h>
#include <unistd.h>

#include "diloco/checkpoint.hpp"
#include "diloco/model.hpp"
#include "diloco/optim.hpp"
#include "diloco/run_state.hpp"

namespace diloco {  // printable in Boost.Test messages
inline std::ostream& operator<<(std::ostream& o, errc e) { return o << to_string(e); }
}  // namespace diloco

using namespace diloco;
namespace fs = std::filesystem;

namespace {

ModelConfig tiny_gpt(int layers = 2) {
  ModelConfig c;
  c.n_layer = layers;
  c.n_embd = 16;
  c.n_head = 2;
  c.seq_len = 8;
  return c;
}

struct Run {
  std::unique_ptr<Model> model;
  FragmentPlan plan;
  explicit Run(ModelConfig cfg = tiny_gpt(), int P = 3)
      : model(make_model(cfg)), plan(FragmentPlan::strided(model->layout(), P)) {}
  const ParamLayout& layout() const { return model->layout(); }
};

std::vector<float> noise(std::size_t n, std::uint64_t seed, bool positive = false) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> d(0.0f, 0.1f);
  std::vector<float> x(n);
  for (auto& v : x) v = positive ? std::fabs(d(g)) : d(g);
  return x;
}

// A syncer state after some rounds, plus `islands` islands with real AdamW state.
Checkpoint make_state(const Run& r, int islands, std::uint64_t seed) {
  Checkpoint cp;
  cp.params.resize(r.layout().size());
  r.model->init(cp.params, seed);
  for (int p = 0; p < r.plan.count(); ++p) {
    cp.momentum.push_back(noise(r.plan.size(p), seed + 10 + p));
    cp.rounds.push_back(seed * 100 + static_cast<std::uint64_t>(p));
  }
  for (int i = 0; i < islands; ++i) {
    AdamW opt(r.layout(), AdamWConfig{});
    opt.restore(5 + i, noise(r.layout().size(), seed + 50 + i), noise(r.layout().size(), seed + 70 + i, true));
    IslandState is;
    is.island = i;
    is.params = noise(r.layout().size(), seed + 30 + i);
    is.adam_steps = opt.steps_taken();
    is.step = is.adam_steps + 3 * i;  // island 1 restarted at step 3: its moments are younger
    if (i == 1) {  // progress since the last send, per fragment, and the global fragments it held
      for (int p = 0; p < r.plan.count(); ++p) is.tokens_since.push_back(7 + p), is.steps_since.push_back(1 + p);
      is.global = noise(r.layout().size(), seed + 90);
    }
    is.adam_m.assign(opt.m().begin(), opt.m().end());
    is.adam_v.assign(opt.v().begin(), opt.v().end());
    cp.islands.push_back(std::move(is));
  }
  cp.metadata["config"] = "train.H = 50";
  cp.metadata["step"] = std::to_string(seed);
  return cp;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), 4 * a.size()) == 0);  // memcmp of no bytes may not take null
}

void check_identical(const Checkpoint& a, const Checkpoint& b, bool islands = true) {
  BOOST_TEST(same_bits(a.params, b.params));
  BOOST_TEST_REQUIRE(a.momentum.size() == b.momentum.size());
  for (std::size_t p = 0; p < a.momentum.size(); ++p) BOOST_TEST(same_bits(a.momentum[p], b.momentum[p]));
  BOOST_TEST(a.rounds == b.rounds);
  BOOST_TEST(a.metadata == b.metadata);
  if (!islands) return;
  BOOST_TEST_REQUIRE(a.islands.size() == b.islands.size());
  for (std::size_t i = 0; i < a.islands.size(); ++i) {
    BOOST_TEST(a.islands[i].island == b.islands[i].island);
    BOOST_TEST(a.islands[i].adam_steps == b.islands[i].adam_steps);
    BOOST_TEST(a.islands[i].step == b.islands[i].step);
    BOOST_TEST(a.islands[i].tokens_since == b.islands[i].tokens_since);
    BOOST_TEST(a.islands[i].steps_since == b.islands[i].steps_since);
    BOOST_TEST(same_bits(a.islands[i].params, b.islands[i].params));
    BOOST_TEST(same_bits(a.islands[i].adam_m, b.islands[i].adam_m));
    BOOST_TEST(same_bits(a.islands[i].adam_v, b.islands[i].adam_v));
    BOOST_TEST(same_bits(a.islands[i].global, b.islands[i].global));  // island 0: none recorded, as files from before
  }
}

struct TempDir {
  fs::path dir;
  TempDir() {
    char tmpl[] = "/tmp/diloco_ckpt_XXXXXX";
    dir = ::mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(dir); }
  std::string file(const char* name) const { return (dir / name).string(); }
};

std::vector<std::byte> bytes_of(const std::string& path) {
  auto b = read_file(path);
  BOOST_TEST_REQUIRE(b.has_value());
  return *b;
}

void write_bytes(const std::string& path, const std::vector<std::byte>& b) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

}  // namespace

BOOST_AUTO_TEST_CASE(restore_is_bit_identical_including_island_adamw_state) {
  Run r;
  TempDir t;
  const Checkpoint cp = make_state(r, 2, 1);
  BOOST_TEST_REQUIRE(save_checkpoint(t.file("a.safetensors"), r.layout(), r.plan, cp).has_value());
  auto back = load_checkpoint(t.file("a.safetensors"), r.layout(), r.plan);
  BOOST_TEST_REQUIRE(back.has_value());
  check_identical(cp, *back);
  // The restored state drives the real optimizers.
  AdamW opt(r.layout(), AdamWConfig{});
  const auto& is = back->islands[1];
  opt.restore(is.adam_steps, is.adam_m, is.adam_v);
  BOOST_TEST(opt.steps_taken() == cp.islands[1].adam_steps);
  BOOST_TEST(std::memcmp(opt.m().data(), cp.islands[1].adam_m.data(), 4 * r.layout().size()) == 0);
  BOOST_TEST(std::memcmp(opt.v().data(), cp.islands[1].adam_v.data(), 4 * r.layout().size()) == 0);
  OuterOptimizer outer(r.plan.size(0), OuterConfig{});
  std::copy(back->momentum[0].begin(), back->momentum[0].end(), outer.momentum().begin());
  BOOST_TEST(std::memcmp(outer.momentum().data(), cp.momentum[0].data(), 4 * r.plan.size(0)) == 0);
}

BOOST_AUTO_TEST_CASE(a_crash_at_any_stage_of_a_save_leaves_the_previous_checkpoint_intact) {
  Run r;
  TempDir t;
  const std::string path = t.file("ckpt.safetensors");
  const Checkpoint old_state = make_state(r, 1, 1);
  const Checkpoint new_state = make_state(r, 1, 2);
  for (const char* stage : {"temp_opened", "half_written", "written", "synced", "renamed"}) {
    BOOST_TEST_REQUIRE(save_checkpoint(path, r.layout(), r.plan, old_state).has_value());
    const pid_t pid = ::fork();
    BOOST_TEST_REQUIRE(pid >= 0);
    if (pid == 0) {  // the child saves and dies abruptly at `stage`, like kill -9
      (void)save_checkpoint(path, r.layout(), r.plan, new_state, [&](std::string_view s) {
        if (s == stage) ::_exit(42);
      });
      ::_exit(0);
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    BOOST_TEST_CONTEXT("crash at " << stage) {
      BOOST_TEST_REQUIRE(WIFEXITED(status));
      BOOST_TEST(WEXITSTATUS(status) == 42);
      auto back = load_checkpoint(path, r.layout(), r.plan);
      BOOST_TEST_REQUIRE(back.has_value());
      // Before the rename the old checkpoint is whole; from the rename on, the new one is.
      check_identical(std::string_view(stage) == "renamed" ? new_state : old_state, *back);
    }
  }
}

BOOST_AUTO_TEST_CASE(a_leftover_temp_file_from_a_crash_does_not_block_the_next_save) {
  Run r;
  TempDir t;
  const std::string path = t.file("c.safetensors");
  write_bytes(path + ".tmp", std::vector<std::byte>(100, std::byte{0x55}));
  const Checkpoint cp = make_state(r, 0, 3);
  BOOST_TEST_REQUIRE(save_checkpoint(path, r.layout(), r.plan, cp).has_value());
  BOOST_TEST(!fs::exists(path + ".tmp"));
  check_identical(cp, *load_checkpoint(path, r.layout(), r.plan));
}

BOOST_AUTO_TEST_CASE(a_checkpoint_loads_into_a_run_with_a_different_island_count) {
  Run r;
  TempDir t;
  const std::string path = t.file("i.safetensors");
  const Checkpoint cp = make_state(r, 3, 4);
  BOOST_TEST_REQUIRE(save_checkpoint(path, r.layout(), r.plan, cp).has_value());
  // Global state only: a run of any size starts every island from the global parameters.
  auto global = load_checkpoint(path, r.layout(), r.plan, LoadOptions{.islands = false});
  BOOST_TEST_REQUIRE(global.has_value());
  BOOST_TEST(global->islands.empty());
  check_identical(cp, *global, /*islands=*/false);
  // A run with 5 islands takes the 3 saved island states; islands 3 and 4 start fresh.
  auto all = load_checkpoint(path, r.layout(), r.plan);
  BOOST_TEST_REQUIRE(all.has_value());
  const int run_islands = 5;
  int restored = 0;
  for (int i = 0; i < run_islands; ++i)
    for (const auto& is : all->islands) restored += is.island == i;
  BOOST_TEST(restored == 3);
  // A checkpoint without islands loads too.
  Checkpoint bare = make_state(r, 0, 5);
  BOOST_TEST_REQUIRE(save_checkpoint(path, r.layout(), r.plan, bare).has_value());
  BOOST_TEST(load_checkpoint(path, r.layout(), r.plan)->islands.empty());
}

BOOST_AUTO_TEST_CASE(non_finite_state_never_replaces_a_good_checkpoint) {
  Run r;
  TempDir t;
  const std::string path = t.file("n.safetensors");
  const Checkpoint good = make_state(r, 1, 6);
  BOOST_TEST_REQUIRE(save_checkpoint(path, r.layout(), r.plan, good).has_value());
  Checkpoint bad = make_state(r, 1, 7);
  bad.momentum[1][3] = std::numeric_limits<float>::quiet_NaN();
  auto st = save_checkpoint(path, r.layout(), r.plan, bad);
  BOOST_TEST_REQUIRE(!st.has_value());
  BOOST_TEST((st.error().code == errc::non_finite));
  BOOST_TEST(st.error().reason.find("momentum of fragment 1") != std::string::npos);
  check_identical(good, *load_checkpoint(path, r.layout(), r.plan));
  // State of the wrong shape is refused too.
  Checkpoint wrong = good;
  wrong.params.pop_back();
  auto st2 = save_checkpoint(path, r.layout(), r.plan, wrong);
  BOOST_TEST_REQUIRE(!st2.has_value());
  BOOST_TEST((st2.error().code == errc::checkpoint_mismatch));
}

BOOST_AUTO_TEST_CASE(corrupt_or_foreign_checkpoints_are_refused_with_their_reason) {
  Run r;
  TempDir t;
  const std::string path = t.file("x.safetensors");
  const Checkpoint cp = make_state(r, 1, 8);
  BOOST_TEST_REQUIRE(save_checkpoint(path, r.layout(), r.plan, cp).has_value());
  const auto good = bytes_of(path);
  auto sf = read_safetensors(good);
  BOOST_TEST_REQUIRE(sf.has_value());
  std::uint64_t hlen;
  std::memcpy(&hlen, good.data(), 8);

  struct Row {
    std::string name;
    std::vector<std::byte> file;
    errc code;
    std::string reason_has;
  };
  std::vector<Row> rows;
  rows.push_back({"empty_file", {}, errc::corrupt_checkpoint, "shorter than the 8-byte header length"});
  rows.push_back({"truncated_data", {good.begin(), good.end() - 100}, errc::corrupt_checkpoint, "outside"});
  rows.push_back({"truncated_header", {good.begin(), good.begin() + 40}, errc::truncated, "header of"});
  {
    auto f = good;
    const std::uint64_t huge = std::uint64_t{1} << 40;
    std::memcpy(f.data(), &huge, 8);
    rows.push_back({"absurd_header_length", f, errc::corrupt_checkpoint, "exceeds"});
  }
  {
    auto f = good;
    f[8] = std::byte{'['};
    rows.push_back({"header_not_json_object", f, errc::corrupt_checkpoint, "not a JSON object"});
  }
  {
    auto f = good;
    const std::string h(reinterpret_cast<const char*>(f.data() + 8), hlen);
    const auto at = h.find("\"diloco.version\":\"1\"");
    BOOST_TEST_REQUIRE(at != std::string::npos);
    f[8 + at + std::strlen("\"diloco.version\":\"")] = std::byte{'2'};
    rows.push_back({"future_format_version", f, errc::unsupported_version, "format version '2'"});
  }
  {
    auto f = good;
    const std::uint32_t nan = 0x7fc00000u;
    std::memcpy(f.data() + sf->data_offset + 4 * 5, &nan, 4);  // inside the first tensor, whichever it is
    rows.push_back({"nan_in_the_weights", f, errc::non_finite, "NaN"});
  }
  for (const auto& row : rows) {
    auto back = parse_checkpoint(row.file, r.layout(), r.plan);
    BOOST_TEST_CONTEXT(row.name) {
      BOOST_TEST_REQUIRE(!back.has_value());
      BOOST_TEST(to_string(back.error().code) == to_string(row.code));
      BOOST_TEST(back.error().reason.find(row.reason_has) != std::string::npos, "reason: " << back.error().reason);
    }
  }
  // A valid checkpoint of another model or another fragment plan.
  Run bigger(tiny_gpt(3), 3);
  auto other_model = load_checkpoint(path, bigger.layout(), bigger.plan);
  BOOST_TEST_REQUIRE(!other_model.has_value());
  BOOST_TEST((other_model.error().code == errc::checkpoint_mismatch));
  Run other_plan(tiny_gpt(), 2);
  auto p2 = load_checkpoint(path, other_plan.layout(), other_plan.plan);
  BOOST_TEST_REQUIRE(!p2.has_value());
  BOOST_TEST((p2.error().code == errc::checkpoint_mismatch));
  BOOST_TEST(p2.error().reason.find("3 fragments, the run's plan has 2") != std::string::npos);
  // A missing file names the path.
  auto missing = load_checkpoint(t.file("nope"), r.layout(), r.plan);
  BOOST_TEST_REQUIRE(!missing.has_value());
  BOOST_TEST((missing.error().code == errc::io_error));
  BOOST_TEST(missing.error().reason.find("nope") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(the_file_is_safetensors_that_other_tools_can_read) {
  Run r;
  TempDir t;
  const std::string path = t.file("s.safetensors");
  BOOST_TEST_REQUIRE(save_checkpoint(path, r.layout(), r.plan, make_state(r, 1, 9)).has_value());
  const auto b = bytes_of(path);
  auto sf = read_safetensors(b);
  BOOST_TEST_REQUIRE(sf.has_value());
  BOOST_TEST(sf->data_offset % 8 == 0u);
  // The model's tensors appear under their own names with their shapes.
  const auto& first = r.layout()[0];
  bool found = false;
  for (const auto& ti : sf->tensors)
    if (ti.name == first.name) {
      found = true;
      BOOST_TEST(ti.dtype == "F32");
      BOOST_TEST(ti.shape == std::vector<std::uint64_t>(first.shape.begin(), first.shape.end()));
    }
  BOOST_TEST(found);
  BOOST_TEST(sf->metadata.at("diloco.format") == "diloco-checkpoint");
  // Debian's python reads the header with nothing but the json module.
  if (fs::exists("/usr/bin/python3")) {
    const std::string cmd =
        "/usr/bin/python3 -c \"import json,struct,sys; f=open(sys.argv[1],'rb'); n=struct.unpack('<Q', f.read(8))[0]; "
        "h=json.loads(f.read(n)); assert h['__metadata__']['diloco.format']=='diloco-checkpoint'; "
        "assert h[sys.argv[2]]['dtype']=='F32'\" " + path + " " + first.name;
    BOOST_TEST(std::system(cmd.c_str()) == 0);
  }
}

namespace {
// A safetensors file of `header` and `data_bytes` zero bytes of data.
std::vector<std::byte> safetensors_of(const std::string& header, std::size_t data_bytes = 0) {
  std::vector<std::byte> f(8 + header.size() + data_bytes, std::byte{0});
  const std::uint64_t n = header.size();
  std::memcpy(f.data(), &n, 8);
  std::memcpy(f.data() + 8, header.data(), header.size());
  return f;
}
}  // namespace

BOOST_AUTO_TEST_CASE(a_shape_whose_byte_size_wraps_past_64_bits_is_refused) {
  // 2^62 F32 values are 2^64 bytes: multiplied unchecked they wrap to 0 and match [0, 0].
  const auto f = safetensors_of(R"({"x":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,0]}})");
  auto sf = read_safetensors(f);
  BOOST_TEST_REQUIRE(!sf.has_value());
  BOOST_TEST(sf.error().code == errc::corrupt_checkpoint);
  BOOST_TEST(sf.error().reason.find("tensor 'x' of 4611686018427387904 F32 values needs more bytes") != std::string::npos,
             sf.error().reason);
  // Shapes that fit the data section exactly still read.
  BOOST_TEST(read_safetensors(safetensors_of(R"({"x":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}})", 16)).has_value());
}

BOOST_AUTO_TEST_CASE(a_huge_or_deeply_nested_header_is_refused_before_it_is_parsed) {
  // 100 MB of nested arrays: refused on its length alone.
  const std::size_t big = 100u << 20;
  std::string nested = "{\"a\":" + std::string(big / 2, '[') + std::string(big / 2, ']') + "}";
  auto sf = read_safetensors(safetensors_of(nested));
  BOOST_TEST_REQUIRE(!sf.has_value());
  BOOST_TEST(sf.error().reason.find("exceeds") != std::string::npos, sf.error().reason);
  // Within the length bound, nesting past an entry's shape array is refused at its first bracket.
  nested = "{\"a\":" + std::string(4u << 20, '[') + std::string(4u << 20, ']') + "}";
  const auto t0 = std::chrono::steady_clock::now();
  sf = read_safetensors(safetensors_of(nested));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  BOOST_TEST_REQUIRE(!sf.has_value());
  BOOST_TEST(sf.error().reason == "header nests deeper than 3 levels (at byte 7)");
  BOOST_TEST(seconds < 1.0);
  // Brackets inside strings are text, not nesting.
  BOOST_TEST(read_safetensors(safetensors_of(R"({"__metadata__":{"note":"[[[[{{{{\"]]"}})")).has_value());
  // A 20 MiB header of whitespace around an empty object was accepted; it is far beyond any
  // checkpoint's needs.
  sf = read_safetensors(safetensors_of("{" + std::string(20u << 20, ' ') + "}"));
  BOOST_TEST_REQUIRE(!sf.has_value());
  BOOST_TEST(sf.error().reason.find("exceeds 16777216") != std::string::npos, sf.error().reason);
}

BOOST_AUTO_TEST_CASE(a_checkpoint_whose_header_no_reader_would_accept_is_not_written) {
  Run r;
  TempDir t;
  Checkpoint cp = make_state(r, 0, 3);
  cp.metadata["notes"] = std::string(17u << 20, 'x');
  const auto st = save_checkpoint(t.file("big.safetensors"), r.layout(), r.plan, cp);
  BOOST_TEST_REQUIRE(!st.has_value());
  BOOST_TEST(st.error().reason.find("exceeds the 16777216") != std::string::npos, st.error().reason);
  BOOST_TEST(!fs::exists(t.file("big.safetensors")));
}

// ---- run state directories (`diloco run --state DIR`) ----

BOOST_AUTO_TEST_CASE(a_state_directory_resumes_only_under_the_configuration_it_was_started_with) {
  TempDir t;
  const std::string dir = t.file("state");
  auto cfg = parse_config("[train]\nH = 25\nislands = 2\n");
  auto fresh = open_run_state(dir, cfg);
  BOOST_TEST_REQUIRE(fresh.has_value());
  BOOST_TEST(!fresh->resuming);  // a manifest, no state yet
  BOOST_TEST(fs::exists(fresh->manifest_path()));
  write_bytes(fresh->state_path(), {std::byte{1}});
  auto again = open_run_state(dir, cfg);
  BOOST_TEST_REQUIRE(again.has_value());
  BOOST_TEST(again->resuming);
  // The state file's own path may differ (the directory sets it); nothing else may.
  auto moved = cfg;
  moved.syncer.checkpoint = "/elsewhere/state.safetensors";
  BOOST_TEST(open_run_state(dir, moved).has_value());
  auto other = parse_config("[train]\nH = 40\nislands = 3\n");
  auto refused = open_run_state(dir, other);
  BOOST_TEST_REQUIRE(!refused.has_value());
  BOOST_TEST(refused.error().code == errc::checkpoint_mismatch);
  const std::string why = refused.error().message();
  BOOST_TEST(why.find("train.H is 25 in the state directory, 40 now") != std::string::npos, why);
  BOOST_TEST(why.find("train.islands is 2 in the state directory, 3 now") != std::string::npos, why);
  BOOST_TEST(why.find("run.toml") != std::string::npos, why);
}

BOOST_AUTO_TEST_CASE(processes_started_together_on_a_fresh_state_directory_all_open_it) {
  // A syncer and its sites (or replicas) started at once on one directory all find no manifest;
  // every one must open it, and the manifest must be whole.
  TempDir t;
  const auto cfg = parse_config("[train]\nH = 25\n");
  for (int trial = 0; trial < 10; ++trial) {
    const std::string dir = t.file(("together-" + std::to_string(trial)).c_str());
    const auto go = std::chrono::steady_clock::now() + std::chrono::milliseconds(30);
    std::vector<pid_t> children;
    for (int k = 0; k < 4; ++k) {
      const pid_t pid = fork();
      if (pid == 0) {
        while (std::chrono::steady_clock::now() < go) {
        }
        _exit(open_run_state(dir, cfg, "sites/s" + std::to_string(k) + ".safetensors").has_value() ? 0 : 1);
      }
      children.push_back(pid);
    }
    for (pid_t pid : children) {
      int status = 0;
      waitpid(pid, &status, 0);
      BOOST_TEST((WIFEXITED(status) && WEXITSTATUS(status) == 0));
    }
    BOOST_TEST(open_run_state(dir, cfg).has_value());  // the manifest is whole and this run's
    for (const auto& e : fs::directory_iterator(dir)) BOOST_TEST(e.path().filename().string().find(".new") == std::string::npos);
  }
}

BOOST_AUTO_TEST_CASE(a_state_directory_of_another_format_or_without_a_manifest_is_refused) {
  TempDir t;
  const auto cfg = parse_config("");
  // Another format: the manifest says which, and which this build reads.
  std::string manifest = run_manifest(cfg);
  manifest.replace(manifest.find("format = 1"), 10, "format = 0");
  fs::create_directories(t.file("old"));
  BOOST_TEST_REQUIRE(write_file_atomically(t.file("old") + "/run.toml", manifest).has_value());
  auto old = open_run_state(t.file("old"), cfg);
  BOOST_TEST_REQUIRE(!old.has_value());
  BOOST_TEST(old.error().message().find("format 0, this build reads format 1") != std::string::npos, old.error().message());
  // A state file with no manifest beside it is not overwritten.
  fs::create_directories(t.file("bare"));
  write_bytes(t.file("bare") + "/state.safetensors", {std::byte{1}});
  auto bare = open_run_state(t.file("bare"), cfg);
  BOOST_TEST_REQUIRE(!bare.has_value());
  BOOST_TEST(bare.error().message().find("has no manifest") != std::string::npos, bare.error().message());
  BOOST_TEST(bytes_of(t.file("bare") + "/state.safetensors").size() == 1u);
}

BOOST_AUTO_TEST_CASE(the_run_progress_travels_in_the_state_file_and_corrupt_values_are_refused) {
  TempDir t;
  Run r;
  Checkpoint cp = make_state(r, 2, 3);
  put_run_progress(cp, RunProgress{12.25, {1000, 2048}});
  BOOST_TEST_REQUIRE(save_checkpoint(t.file("s"), r.layout(), r.plan, cp).has_value());
  auto back = load_checkpoint(t.file("s"), r.layout(), r.plan);
  BOOST_TEST_REQUIRE(back.has_value());
  auto p = run_progress_of(back->metadata, 2);
  BOOST_TEST_REQUIRE(p.has_value());
  BOOST_TEST(p->elapsed_s == 12.25);
  BOOST_TEST(p->tokens == (std::vector<std::uint64_t>{1000, 2048}));
  // A state file written before any progress: nothing trained yet.
  auto none = run_progress_of({}, 3);
  BOOST_TEST_REQUIRE(none.has_value());
  BOOST_TEST(none->tokens == (std::vector<std::uint64_t>{0, 0, 0}));
  for (auto [key, value] : std::vector<std::pair<std::string, std::string>>{
           {"run.elapsed_s", "nan"}, {"run.elapsed_s", "-1"}, {"run.elapsed_s", "3s"},
           {"run.tokens", "1,2,3"}, {"run.tokens", "1"}, {"run.tokens", "1,x"}, {"run.tokens", "1,"}}) {
    auto bad = run_progress_of({{key, value}}, 2);
    BOOST_TEST_REQUIRE(!bad.has_value(), key << " = " << value);
    BOOST_TEST(bad.error().code == errc::corrupt_checkpoint);
    BOOST_TEST(bad.error().message().find(key) != std::string::npos, bad.error().message());
  }
}
