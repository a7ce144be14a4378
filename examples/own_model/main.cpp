// Brings its own model and its own data to diloco, as an app does: registers a bag-of-context
// classifier (bag_model.hpp), writes a topic-switching token stream as llm.c token shards, and
// trains with Decoupled DiLoCo on the actor runtime (3 islands of 2 chips, 2 fragments, K = 2)
// while a chip and then a whole island are killed. Exits 0 only if the held-out loss fell and
// both killed units came back: the chip (its island stepped with all chips again, its supervisor
// restarted it) and the island (a second incarnation healed to the global fragments and was
// merged again).
//
//   own_model DATA_DIR        (writes the shards there, then trains)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/exit_reason.hpp>
#include <caf/send.hpp>

#include <diloco/actors/protocol.hpp>
#include <diloco/actors/runtime.hpp>
#include <diloco/config.hpp>

#include "bag_model.hpp"

namespace {

constexpr int kVocab = 64;   // token ids 0..63
constexpr int kTopics = 4;   // topic z favours tokens 16z .. 16z+11
constexpr int kFavoured = 12;

/// The data: a stream whose topic switches with probability 1/64 per token; a token is one of
/// its topic's 12 favoured tokens with probability 0.85, otherwise any of the 64. The best
/// predictor must infer the topic from the recent tokens: what a bag-of-context classifier does.
std::vector<std::uint16_t> topic_stream(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  auto uniform = [&gen] { return static_cast<double>(gen() >> 11) * 0x1.0p-53; };
  std::vector<std::uint16_t> out(n);
  int topic = 0;
  for (auto& tok : out) {
    if (uniform() < 1.0 / 64) topic = static_cast<int>(gen() % kTopics);
    tok = static_cast<std::uint16_t>(uniform() < 0.85 ? 16 * topic + static_cast<int>(gen() % kFavoured)
                                                      : static_cast<int>(gen() % kVocab));
  }
  return out;
}

/// One llm.c token shard: 256 int32 of header (magic 20240520, version 1, token count), then
/// the tokens as uint16, little-endian (this example runs on little-endian machines).
void write_shard(const std::filesystem::path& file, const std::vector<std::uint16_t>& tokens) {
  std::int32_t header[256] = {20240520, 1, static_cast<std::int32_t>(tokens.size())};
  std::ofstream f(file, std::ios::binary);
  f.write(reinterpret_cast<const char*>(header), sizeof header);
  f.write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(tokens.size() * 2));
  if (!f) throw std::runtime_error("cannot write " + file.string());
}

/// Central differences against loss_and_grad on a few parameters of a random batch.
bool gradient_matches(diloco::Model& m) {
  std::vector<float> p(m.layout().size()), g(p.size());
  m.init(p, 7);
  for (auto& v : p) v *= 20.0f;  // away from the flat start
  diloco::Batch b{2, 8, {}};
  const auto s = topic_stream(2 * 9, 3);
  b.tokens.assign(s.begin(), s.end());
  m.loss_and_grad(p, b, g);
  std::mt19937_64 gen(5);
  double worst = 0.0;
  for (int k = 0; k < 40; ++k) {
    const std::size_t i = k < 20 ? static_cast<std::size_t>(b.tokens[k % 16]) * kVocab + gen() % kVocab
                                 : gen() % p.size();  // rows that the batch uses, then anywhere
    const float keep = p[i], h = 1e-2f;
    p[i] = keep + h;
    const double up = m.loss(p, b);
    p[i] = keep - h;
    const double down = m.loss(p, b);
    p[i] = keep;
    worst = std::max(worst, std::abs((up - down) / (2 * h) - g[i]));
  }
  std::printf("gradient check: largest |numeric - analytic| over 40 parameters %.2e\n", worst);
  return worst < 2e-4;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DATA_DIR\n", argv[0]);
    return 2;
  }
  using namespace diloco;
  using namespace diloco::actors;
  own::register_bag_model();  // before any configuration is read

  const std::filesystem::path dir = argv[1];
  std::filesystem::create_directories(dir);
  const auto stream = topic_stream(220000, 1);
  write_shard(dir / "train_000.bin", {stream.begin(), stream.begin() + 100000});
  write_shard(dir / "train_001.bin", {stream.begin() + 100000, stream.begin() + 200000});
  write_shard(dir / "val_000.bin", {stream.begin() + 200000, stream.end()});

  const std::string toml = R"(
[model]
kind = "bag"
vocab = 64
seq_len = 32
options = { window = 8 }
[data]
corpus = "tokens"
path = ")" + (dir / "train_*.bin").string() + R"("
eval_path = ")" + (dir / "val_*.bin").string() + R"("
[train]
mode = "decoupled"
islands = 3
steps = 240
batch = 16
H = 10
[inner]
lr = 3e-2
warmup_steps = 10
[fragments]
count = 2
[quorum]
min_islands = 2
[islands]
chips = 2
[[faults]]
kill = "chip"
island = 0
chip = 1
at_step = 40
[[faults]]
kill = "island"
island = 1
at_step = 80
)";
  const RunConfig cfg = parse_config(toml, {}, "own_model");

  auto model = make_model(cfg.model);  // through the registry, as the chips build theirs
  if (!gradient_matches(*model)) {
    std::printf("FAILED: the gradient does not match the loss\n");
    return 1;
  }

  std::mutex mu;
  std::vector<Event> events;
  std::vector<SupervisionEvent> supervision;
  auto rt = std::make_shared<Runtime>(cfg, [&](const Event& e) {
    std::lock_guard lock(mu);
    events.push_back(e);
  });
  // The whole held-out split, in batches of 8 windows.
  const int T = cfg.model.seq_len;
  const auto eval = rt->corpus.eval_batches(8, T, static_cast<int>(rt->corpus.eval_size() / (8 * (T + 1))));
  const double start_loss = evaluate(*model, rt->initial, eval);

  {
    caf::actor_system_config sc;
    configure_runtime_system(sc, 2);
    caf::actor_system sys(sc);
    auto root = spawn_runtime(sys, rt, [&](const SupervisionEvent& e) {
      std::lock_guard lock(mu);
      supervision.push_back(e);
    });
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (!rt->all_done() && !rt->stopped() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    caf::anon_send_exit(root, caf::exit_reason::user_shutdown);
  }  // the actor system waits for its actors here
  if (auto why = rt->stopped()) {
    std::printf("FAILED: the run stopped: %s\n", why->c_str());
    return 1;
  }
  const auto [global, round] = rt->syncer.global();
  const double end_loss = evaluate(*model, global, eval);
  const auto tally = rt->tally();

  // What happened to the two killed units, from the runtime's events.
  long chip_fault_step = -1, island_fault_step = -1;
  bool chip_back = false, island_healed = false, island_merged_again = false;
  int heal_incarnation = 0;
  std::size_t heal_at = events.size();
  for (std::size_t j = 0; j < events.size(); ++j) {
    const auto& e = events[j];
    if (e.kind == Event::Kind::fault && e.fault == FaultKind::chip) chip_fault_step = e.step;
    if (e.kind == Event::Kind::fault && e.fault == FaultKind::island) island_fault_step = e.step;
    if (e.kind == Event::Kind::step && e.island == 0 && chip_fault_step >= 0 && e.step > chip_fault_step &&
        e.chips == cfg.islands.chips)
      chip_back = true;
    if (e.kind == Event::Kind::heal && e.island == 1 && island_fault_step >= 0 && e.incarnation > 1 && !island_healed) {
      island_healed = true;
      heal_incarnation = e.incarnation;
      heal_at = j;
    }
    if (e.kind == Event::Kind::commit && j > heal_at)
      for (int i : e.islands) island_merged_again = island_merged_again || i == 1;
  }
  auto starts = [&](const std::string& sup, const std::string& child) {
    return std::count_if(supervision.begin(), supervision.end(), [&](const SupervisionEvent& e) {
      return e.kind == SupervisionEvent::started && e.supervisor == sup && e.child == child;
    });
  };

  std::printf("own model \"bag\" (%zu parameters) on its own data: decoupled, 3 islands x 2 chips, %llu tokens\n",
              model->layout().size(), static_cast<unsigned long long>(tally.tokens));
  std::printf("held-out loss over %zu windows: %.4f -> %.4f nats/token (uniform %.4f) at global round %llu, "
              "%llu commits\n",
              eval.size() * 8, start_loss, end_loss, std::log(static_cast<double>(kVocab)),
              static_cast<unsigned long long>(round), static_cast<unsigned long long>(tally.commits));
  std::printf("chip 0.1 killed at step %ld: started %ld times, island 0 stepped with all chips again: %s\n",
              chip_fault_step, static_cast<long>(starts("island-0", "chip-1")), chip_back ? "yes" : "no");
  std::printf("island 1 killed at step %ld: started %ld times, healed (incarnation %d): %s, merged again: %s\n",
              island_fault_step, static_cast<long>(starts("island-1", "island")), heal_incarnation,
              island_healed ? "yes" : "no", island_merged_again ? "yes" : "no");

  std::vector<std::string> failed;
  if (!(end_loss < start_loss - 0.5)) failed.push_back("the held-out loss did not fall by 0.5 nats");
  if (chip_fault_step < 0 || !chip_back || starts("island-0", "chip-1") < 2) failed.push_back("the chip did not come back");
  if (island_fault_step < 0 || !island_healed || !island_merged_again || starts("island-1", "island") < 2)
    failed.push_back("the island did not heal and contribute again");
  if (tally.islands_done != cfg.train.islands) failed.push_back("not every island finished");
  for (const auto& f : failed) std::printf("FAILED: %s\n", f.c_str());
  return failed.empty() ? 0 : 1;
}
