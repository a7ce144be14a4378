// TorchScript chips (diloco::torch): the exported GPT gives the Eigen GPT's layout, loss and
// gradients; a decoupled run on the actors trains with TorchScript chips through a chip kill;
// bad modules, files and checkpoints are refused with a clear error.
#define BOOST_TEST_MODULE torch
#include <boost/test/unit_test.hpp>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/exit_reason.hpp>
#include <caf/send.hpp>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "diloco/actors/runtime.hpp"
#include "diloco/checkpoint.hpp"
#include "diloco/fragments.hpp"
#include "diloco/model_registry.hpp"
#include "diloco/rng.hpp"
#include "diloco/torchscript.hpp"
#include "coordinated.hpp"

using namespace diloco;

namespace {

std::string module_path(const std::string& file) {
  const char* dir = std::getenv("DILOCO_TORCH_MODULES");
  BOOST_REQUIRE_MESSAGE(dir, "DILOCO_TORCH_MODULES is not set (ctest sets it)");
  return (std::filesystem::path(dir) / file).string();
}

/// The sizes scripts/export_gpt.py was run with (tests/make_torch_modules.py).
ModelConfig tiny_gpt() {
  ModelConfig m;
  m.kind = "gpt";
  m.seq_len = 16;
  m.n_layer = 2;
  m.n_head = 2;
  m.n_embd = 32;
  return m;
}

ModelConfig tiny_torchscript() {
  register_torchscript();
  auto m = tiny_gpt();
  m.kind = "torchscript";
  m.path = module_path("gpt_tiny.pt");
  return m;
}

Batch random_batch(int B, int T, std::uint64_t seed) {
  Batch b;
  b.B = B;
  b.T = T;
  Rng rng(seed);
  for (int i = 0; i < B * (T + 1); ++i) b.tokens.push_back(static_cast<std::uint32_t>(rng.below(256)));
  return b;
}

double norm(std::span<const float> x) {
  double s = 0.0;
  for (float v : x) s += double(v) * v;
  return std::sqrt(s);
}

}  // namespace

BOOST_AUTO_TEST_CASE(the_exported_gpt_has_the_eigen_gpts_layout) {
  auto eigen = make_model(tiny_gpt());
  auto ts = make_model(tiny_torchscript());
  const auto& a = eigen->layout().tensors();
  const auto& b = ts->layout().tensors();
  BOOST_REQUIRE_EQUAL(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    BOOST_TEST_CONTEXT(a[i].name) {
      BOOST_TEST(b[i].name == a[i].name);
      BOOST_TEST(b[i].shape == a[i].shape);
      BOOST_TEST(b[i].offset == a[i].offset);
      BOOST_TEST(b[i].layer == a[i].layer);
      BOOST_TEST(b[i].decay == a[i].decay);
      BOOST_TEST(b[i].embedding == a[i].embedding);
    }
  }
}

BOOST_AUTO_TEST_CASE(torchscript_and_eigen_chips_give_the_same_loss_and_gradients) {
  auto eigen = make_model(tiny_gpt());
  auto ts = make_model(tiny_torchscript());
  std::vector<float> params(eigen->layout().size());
  eigen->init(params, 7);  // the same weights for both: the chips compute on the island's buffer
  const auto batch = random_batch(4, 16, 11);
  std::vector<float> ge(params.size()), gt(params.size(), 123.0f);  // stale values must be overwritten
  const float le = eigen->loss_and_grad(params, batch, ge);
  const float lt = ts->loss_and_grad(params, batch, gt);
  BOOST_TEST(std::abs(lt - le) <= 1e-5 * std::abs(le), "loss torchscript " << lt << " eigen " << le);
  BOOST_TEST(std::abs(ts->loss(params, batch) - le) <= 1e-5 * std::abs(le));
  for (const auto& t : eigen->layout().tensors()) {
    std::span<const float> a(ge.data() + t.offset, t.size), b(gt.data() + t.offset, t.size);
    std::vector<float> d(t.size);
    for (std::size_t j = 0; j < t.size; ++j) d[j] = a[j] - b[j];
    BOOST_TEST(norm(d) <= 1e-4 * norm(a), t.name << ": |diff| " << norm(d) << " |eigen| " << norm(a));
  }
  // A second step on other parameters: nothing of the first binding lingers.
  for (auto& p : params) p *= 0.5f;
  eigen->loss_and_grad(params, batch, ge);
  ts->loss_and_grad(params, batch, gt);
  std::vector<float> d(params.size());
  for (std::size_t j = 0; j < d.size(); ++j) d[j] = ge[j] - gt[j];
  BOOST_TEST(norm(d) <= 1e-4 * norm(ge));
}

BOOST_AUTO_TEST_CASE(a_decoupled_run_trains_on_torchscript_chips_through_a_chip_kill) {
  RunConfig c;
  c.model = tiny_torchscript();
  c.data.eval_tokens = 4096;
  c.train.mode = TrainMode::decoupled;
  c.train.islands = 2;
  c.train.steps = 30;
  c.train.batch = 4;
  c.train.H = 5;
  c.train.eval_windows = 8;
  c.inner.lr = 3e-3f;
  c.inner.warmup_steps = 3;
  c.islands.chips = 2;
  c.quorum.min_islands = 2;
  c.supervision.backoff_initial_s = 0.0;
  c.supervision.backoff_max_s = 0.0;
  FaultSpec kill;
  kill.kill = FaultKind::chip;
  kill.island = 0;
  kill.chip = 1;
  kill.at_step = 6;
  c.faults.push_back(kill);
  BOOST_REQUIRE(validate(c).empty());

  diloco::testing::Coordinated co;
  std::vector<Event> events;
  std::vector<actors::SupervisionEvent> sup;
  auto rt = std::make_shared<actors::Runtime>(c, [&](const Event& e) { events.push_back(e); });
  auto root = actors::spawn_runtime(*co.sys, rt, [&](const actors::SupervisionEvent& e) { sup.push_back(e); });
  co.settle_until_done(*rt);
  BOOST_REQUIRE_MESSAGE(rt->tally().islands_done == c.train.islands, "the run did not finish");
  for (const auto& v : co.end_of_run(*rt)) BOOST_ERROR("invariant broken (" << to_string(v.kind) << "): " << v.what);
  caf::anon_send_exit(root, caf::exit_reason::user_shutdown);
  co.sched->run();

  double first = 0.0, last = 0.0;
  int n_first = 0, n_last = 0, full_after_kill = 0;
  for (const auto& e : events) {
    if (e.kind != Event::Kind::step) continue;
    if (e.step <= 3) first += e.loss, ++n_first;
    if (e.step > c.train.steps - 3) last += e.loss, ++n_last;
    if (e.island == 0 && e.step > 6 && e.chips == 2) ++full_after_kill;
  }
  BOOST_REQUIRE(n_first > 0 && n_last > 0);
  first /= n_first;
  last /= n_last;
  BOOST_TEST_MESSAGE("train loss " << first << " -> " << last);
  BOOST_TEST(last < first - 0.3);
  int chip_starts = 0;
  for (const auto& e : sup) chip_starts += e.kind == actors::SupervisionEvent::started && e.supervisor == "island-0" && e.child == "chip-1";
  BOOST_TEST(chip_starts == 2);       // killed and restarted
  BOOST_TEST(full_after_kill > 0);    // and island 0 stepped with both chips again
  BOOST_TEST(rt->tally().commits > 0u);
  for (float x : rt->syncer.global().first) BOOST_REQUIRE(std::isfinite(x));
}

BOOST_AUTO_TEST_CASE(bad_modules_files_and_checkpoints_are_refused_with_the_reason) {
  auto cfg = tiny_torchscript();
  // Refused when the model is built (the configuration's check), before any step.
  auto refused = [&](const std::string& file, const std::string& want) {
    auto m = cfg;
    m.path = module_path(file);
    try {
      (void)make_model(m);
    } catch (const std::exception& e) {
      BOOST_TEST_MESSAGE(file << ": " << e.what());
      BOOST_TEST(std::string(e.what()).find(want) != std::string::npos, file << ": " << e.what());
      return;
    }
    BOOST_ERROR(file << " was not refused");
  };
  refused("one_argument.pt", "forward must take (inputs, targets)");
  refused("per_token.pt", "forward must return the mean loss as a scalar");
  refused("tuple_return.pt", "forward must return a tensor");
  refused("not_a_module.pt", "did not load as a TorchScript module");
  refused("missing.pt", "model.path: no file");

  // Config validation names the key before anything is built.
  RunConfig c;
  c.model = cfg;
  auto names = [&](const std::string& prefix, const std::string& want) {
    bool named = false;
    for (const auto& e : validate(c)) {
      BOOST_TEST_MESSAGE("validate: " << e);
      named = named || (e.rfind(prefix, 0) == 0 && e.find(want) != std::string::npos);
    }
    return named;
  };
  c.model.path = module_path("missing.pt");
  BOOST_TEST(names("model.path: no file", ""));
  c.model.path = module_path("per_token.pt");
  BOOST_TEST(names("model.path:", "forward must return the mean loss as a scalar"));
  c.model.path = module_path("tuple_return.pt");
  BOOST_TEST(names("model.path:", "forward must return a tensor"));
  // A module whose position table is shorter than model.seq_len fails its probe by name.
  c.model = cfg;
  c.model.seq_len = cfg.seq_len * 4;
  BOOST_TEST(names("model.path:", "model.seq_len"));
  // A vocabulary larger than the module's embedding fails the probe too.
  c.model = cfg;
  c.model.vocab = 1024;
  BOOST_TEST(names("model.path:", "model.vocab"));
  // Devices: Debian's libtorch has no CUDA, so "cuda:N" is refused with the reason (a CUDA build
  // without GPU 99 says "no GPU 99": both name the GPU); other strings by their form, and an
  // index too large for libtorch's 8 bits is not taken as another GPU.
  c.model = cfg;
  c.model.device = "cuda:99";
  BOOST_TEST(names("model.device:", "GPU"));
  c.model.device = "cuda:x";
  BOOST_TEST(names("model.device:", "not a device"));
  c.model.device = "cuda:-1";
  BOOST_TEST(names("model.device:", "not a device"));
  c.model.device = "cuda:99999";
  BOOST_TEST(names("model.device:", "not a device"));
  c.model.device = "tpu:0";
  BOOST_TEST(names("model.device:", "use \"cpu\" or \"cuda:N\""));
  c.model = tiny_gpt();
  c.model.device = "cuda:0";
  BOOST_TEST(names("model.device:", "only model.kind = \"torchscript\""));

  // A checkpoint of another width does not load into the module's layout.
  auto other = tiny_gpt();
  other.n_embd = 16;
  auto small = make_model(other);
  const auto small_plan = FragmentPlan::make("strided", small->layout(), 1);
  Checkpoint cp;
  cp.params.assign(small->layout().size(), 0.0f);
  cp.momentum = {std::vector<float>(small_plan.size(0), 0.0f)};
  cp.rounds = {0};
  const auto path = (std::filesystem::temp_directory_path() / "diloco_torch_other_width.safetensors").string();
  BOOST_REQUIRE(save_checkpoint(path, small->layout(), small_plan, cp).has_value());
  auto ts = make_model(cfg);
  auto got = load_checkpoint(path, ts->layout(), FragmentPlan::make("strided", ts->layout(), 1), LoadOptions{false});
  BOOST_REQUIRE(!got.has_value());
  BOOST_TEST_MESSAGE("checkpoint of another width: " << got.error().message());
  BOOST_TEST(got.error().message().find("checkpoint_mismatch") != std::string::npos);
  std::filesystem::remove(path);
}
