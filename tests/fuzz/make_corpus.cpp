// Writes the seed corpus of every decoder fuzz target: valid messages of each type and encoding,
// plus a few malformed ones. Usage: make_fuzz_corpus tests/fuzz/corpus
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "diloco/checkpoint.hpp"
#include "diloco/config.hpp"
#include "fuzz_targets.hpp"

using namespace diloco;
namespace fs = std::filesystem;

namespace {

fs::path root;

void put(const std::string& target, const std::string& name, const void* data, std::size_t n) {
  fs::create_directories(root / target);
  std::ofstream f(root / target / name, std::ios::binary | std::ios::trunc);
  f.write(static_cast<const char*>(data), static_cast<std::streamsize>(n));
}
void put(const std::string& target, const std::string& name, const std::vector<std::byte>& b) {
  put(target, name, b.data(), b.size());
}

std::vector<float> values(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> d(0.0f, 1e-2f);
  std::vector<float> x(n);
  for (auto& v : x) v = d(g);
  return x;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
    return 2;
  }
  root = argv[1];
  const Encoding encs[] = {Encoding::fp32, Encoding::bf16, Encoding::int8, Encoding::int4, Encoding::e3m0};

  // fragment_inbox and wire_message: valid fragments for the fuzz context, each encoding.
  const WireContext ctx = fuzz::inbox_context();
  for (auto enc : encs) {
    for (std::uint32_t p = 0; p < 2; ++p) {
      FragmentHeader h{FragmentKind::outer_gradient, static_cast<int>(p + 1), p, ctx.rounds[p], 1024, 4};
      auto f = encode_fragment(h, CodecParams{enc, 16}, values(ctx.fragment_sizes[p], p));
      const std::string name = std::string(to_string(enc)) + "_fragment" + std::to_string(p);
      put("fragment_inbox", name, *f);
      put("wire_message", name, *f);
    }
  }
  {
    FragmentHeader h{FragmentKind::outer_gradient, 0, 0, 5, 1024, 4};
    auto f = *encode_fragment(h, CodecParams{Encoding::int4, 16}, values(64, 9));
    put("fragment_inbox", "truncated", std::vector<std::byte>(f.begin(), f.begin() + 40));
    h.base_round = 9;
    put("fragment_inbox", "future_round", *encode_fragment(h, CodecParams{Encoding::int4, 16}, values(64, 9)));
  }
  // wire_message: the other message types.
  auto enc = *encode(CodecParams{Encoding::e3m0, 8}, values(24, 3));
  FragmentMessage gm{FragmentHeader{FragmentKind::global_params, syncer_id, 1, 7, 0, 0}, enc};
  put("wire_message", "progress", encode_message(ProgressMessage{2, 99, {{0, 5, 640, 5}, {1, 2, 128, 1}}}));
  {
    ProgressMessage timed{2, 100, {{0, 5, 768, 6}}};
    timed.step_seconds = 0.0125;  // the island's own step time (StepClock)
    put("wire_message", "progress_with_step_time", encode_message(timed));
  }
  put("wire_message", "join_request", encode_message(JoinRequest{3, 2}));
  put("wire_message", "join_request_keeping_parameters", encode_message(JoinRequest{3, 2, true}));
  put("wire_message", "join_request_of_a_site_process", encode_message(JoinRequest{3, 2, false, 4.75}));
  put("wire_message", "join_reply", encode_message(JoinReply{{gm, gm}}));
  {
    const auto d = sha256(std::span<const float>(values(24, 3)));
    put("wire_message", "join_request_naming_held_fragments",
        encode_message(JoinRequest{3, 2, false, 0.0, {std::vector<std::byte>(d.begin(), d.end()), {}}}));
    FragmentMessage held{FragmentHeader{FragmentKind::global_params, syncer_id, 0, 7, 0, 0}, Encoded{}};
    held.header.held = true;
    held.header.held_digest = d;
    held.data.count = 24;
    put("wire_message", "join_reply_with_a_held_fragment", encode_message(JoinReply{{held, gm}}));
  }
  put("wire_message", "heartbeat", encode_message(Heartbeat{-1, 17, 123456789}));
  put("wire_message", "run_over", encode_message(RunOver{RunOutcome::stopped, "island 1 reported that it diverged at step 3"}));

  // site_frame: [path byte: 0 join, 1 progress, 2 fragment][frame], from the site of islands 1, 2.
  auto site = [](std::uint8_t path, const std::vector<std::byte>& f) {
    std::vector<std::byte> b(f.size() + 1);
    b[0] = static_cast<std::byte>(path);
    std::copy(f.begin(), f.end(), b.begin() + 1);
    return b;
  };
  put("site_frame", "join", site(0, encode_message(JoinRequest{1, 0})));
  put("site_frame", "join_other_site", site(0, encode_message(JoinRequest{3, 0})));
  put("site_frame", "progress", site(1, encode_message(ProgressMessage{2, 40, {{0, 0, 640, 5}}})));
  {
    ProgressMessage done{1, 80, {}};
    done.finished = true;
    put("site_frame", "progress_finished", site(1, encode_message(done)));
    ProgressMessage timed{2, 41, {{0, 0, 768, 6}}};
    timed.step_seconds = 5e-324;  // a denormal step time: decodes, and the clock only shortens its reports
    put("site_frame", "progress_with_a_tiny_step_time", site(1, encode_message(timed)));
  }
  put("site_frame", "heartbeat_on_fragment_path", site(2, encode_message(Heartbeat{1, 17, 123456789})));
  const fuzz::SiteRun site_run;
  {
    // An island of the site that holds the run's start: the syncer's reply marks both held.
    JoinRequest jr{2, 0, false, 0.0, {}};
    for (int p = 0; p < site_run.plan.count(); ++p) {
      std::vector<float> v(site_run.plan.size(p));
      site_run.plan.gather<float>(p, site_run.initial, v);
      const auto d = sha256(std::span<const float>(v));
      jr.holds.emplace_back(d.begin(), d.end());
    }
    put("site_frame", "join_naming_held_fragments", site(0, encode_message(jr)));
  }
  for (auto enc : encs) {
    for (std::uint32_t p = 0; p < 2; ++p) {
      FragmentHeader h{FragmentKind::outer_gradient, static_cast<int>(p + 1), p, 0, 1024, 4};
      auto f = encode_fragment(h, CodecParams{enc, 16}, values(site_run.plan.size(static_cast<int>(p)), p));
      put("site_frame", std::string(to_string(enc)) + "_fragment" + std::to_string(p), site(2, *f));
    }
  }

  // site_session: records of [path][u16 length][frame], path 3 a poll without length or frame.
  {
    struct Rec {
      std::uint8_t path;
      std::vector<std::byte> frame;
    };
    auto session = [](const std::vector<Rec>& recs) {
      std::vector<std::byte> b;
      for (const auto& r : recs) {
        b.push_back(static_cast<std::byte>(r.path));
        if (r.path == 3) continue;
        b.push_back(static_cast<std::byte>(r.frame.size() & 0xff));
        b.push_back(static_cast<std::byte>(r.frame.size() >> 8));
        b.insert(b.end(), r.frame.begin(), r.frame.end());
      }
      return b;
    };
    auto fragment = [&](int island, std::uint32_t p, std::uint64_t base, Encoding enc, std::uint64_t seq) {
      FragmentHeader h{FragmentKind::outer_gradient, island, p, base, 1024, 4};
      h.seq = seq;
      return *encode_fragment(h, CodecParams{enc, 16}, values(site_run.plan.size(static_cast<int>(p)), seq + p));
    };
    const Rec poll{3, {}};
    put("site_session", "join_fragments_commit",
        session({{0, encode_message(JoinRequest{1, 0})}, {2, fragment(1, 0, 0, Encoding::fp32, 1)}, poll,
                 {2, fragment(2, 1, 0, Encoding::fp32, 1)}, poll}));
    ProgressMessage done{1, 80, {}};
    done.finished = true;
    put("site_session", "progress_then_finish",
        session({{1, encode_message(ProgressMessage{2, 40, {{0, 0, 640, 5}}})}, {2, fragment(1, 0, 0, Encoding::int8, 1)},
                 {1, encode_message(done)}, poll}));
    put("site_session", "two_rounds_int4",
        session({{2, fragment(1, 0, 0, Encoding::int4, 1)}, poll, {2, fragment(1, 0, 1, Encoding::int4, 2)},
                 {2, fragment(2, 0, 1, Encoding::int4, 1)}, poll}));
    put("site_session", "rejoin_withdraws",
        session({{0, encode_message(JoinRequest{2, 0})}, {2, fragment(2, 1, 0, Encoding::bf16, 1)},
                 {0, encode_message(JoinRequest{2, 1, true})}, {2, fragment(2, 1, 0, Encoding::bf16, 1)}, poll}));
    std::vector<std::byte> junk(40, std::byte{0x5a});
    put("site_session", "junk_between",
        session({{2, fragment(1, 1, 0, Encoding::fp32, 1)}, {2, junk}, {0, junk}, poll}));
  }

  // config: the defaults, every key, and a few shapes of TOML the loader must take or refuse.
  const std::string defaults = default_config_toml();
  put("config", "defaults", defaults.data(), defaults.size());
  const char* configs[][2] = {
      {"small", "[model]\nn_layer = 2\nn_embd = 32\nn_head = 2\nseq_len = 32\n\n[train]\nislands = 2\n"
                "steps = 800\nH = 25\n\n[inner]\nlr = 3e-3\nwarmup_steps = 20\n"},
      {"sites", "[train]\nmode = \"decoupled\"\nislands = 2\n[net]\nlisten = \"127.0.0.1:7700\"\n"
                "heartbeat_ms = 200.0\n\n[[sites]]\nname = \"site-a\"\nislands = [0]\n\n"
                "[[sites]]\nname = \"site-b\"\nislands = [1]\n"},
      {"wrong_type", "[train]\nislands = \"four\"\n"},
      {"unknown_key", "[train]\nislandz = 4\n# comment\n"},
      {"inline_and_escapes", "title = 'x'\n[model]\nname = \"g\\u00e9pt\\t\"\n[train]\nsteps = 1_000\n"},
  };
  for (const auto& c : configs) put("config", c[0], c[1], std::strlen(c[1]));

  // codec: [encoding][block u32][count u16][scales][payload]
  for (auto e : encs) {
    const CodecParams p{e, 16};
    const auto x = values(40, 5);
    auto c = *encode(p, x);
    std::vector<std::byte> b(7);
    b[0] = static_cast<std::byte>(e);
    const std::uint32_t block = has_scales(e) ? 16u : 0u;
    const std::uint16_t n = 40;
    std::memcpy(b.data() + 1, &block, 4);
    std::memcpy(b.data() + 5, &n, 2);
    const auto* s = reinterpret_cast<const std::byte*>(c.scales.data());
    b.insert(b.end(), s, s + 4 * c.scales.size());
    const auto* pl = reinterpret_cast<const std::byte*>(c.payload.data());
    b.insert(b.end(), pl, pl + c.payload.size());
    put("codec", std::string(to_string(e)), b);
  }

  // checkpoint: a tiny run's checkpoint with and without an island, and a truncated one.
  fuzz::TinyRun run;
  const auto& layout = run.model->layout();
  Checkpoint cp;
  cp.params.resize(layout.size());
  run.model->init(cp.params, 1);
  for (int p = 0; p < run.plan.count(); ++p) {
    cp.momentum.push_back(values(run.plan.size(p), 10 + p));
    cp.rounds.push_back(3 + p);
  }
  cp.metadata["note"] = "fuzz seed";
  const std::string tmp = (root / "checkpoint.tmp.safetensors").string();
  if (!save_checkpoint(tmp, layout, run.plan, cp)) return 1;
  auto bytes = *read_file(tmp);
  put("checkpoint", "global_only", bytes);
  put("checkpoint", "truncated", std::vector<std::byte>(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(bytes.size() / 2)));
  IslandState is;
  is.island = 1;
  is.params = cp.params;
  is.adam_steps = 12;
  is.step = 12;
  is.adam_m = values(layout.size(), 20);
  is.adam_v.assign(layout.size(), 1e-6f);
  cp.islands.push_back(is);
  if (!save_checkpoint(tmp, layout, run.plan, cp)) return 1;
  put("checkpoint", "with_island", *read_file(tmp));
  // Delayed Nesterov's pending sums (F64) and the island's tokens and steps since its last send.
  for (int p = 0; p < run.plan.count(); ++p) cp.outer_pending.emplace_back(run.plan.size(p), 0.25 * (p + 1));
  cp.islands[0].tokens_since = {640, 128};
  cp.islands[0].steps_since = {5, 1};
  if (!save_checkpoint(tmp, layout, run.plan, cp)) return 1;
  put("checkpoint", "with_pending_and_since", *read_file(tmp));
  fs::remove(tmp);
  std::printf("corpus written under %s\n", root.c_str());
  return 0;
}
