// Fixtures shared by the IslandCore and SyncerCore tests: the smallest layout, plain-SGD syncer
// settings, hand-made outer-gradient frames and helpers for the lossy-broadcast cases.
#pragma once

#include <cstring>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "diloco/codec.hpp"
#include "diloco/config.hpp"
#include "diloco/fragments.hpp"
#include "diloco/syncer_core.hpp"
#include "diloco/wire.hpp"

namespace diloco::testing {

/// The run the lockstep checks share (runtime against the reference loop): a tiny MLP, two
/// islands of 24 steps, batch 4, H = 6, P fragments with overlap tau.
inline RunConfig lockstep_run(const std::string& mode, int P, int tau) {
  RunConfig c;
  c.model.kind = "mlp";
  c.model.seq_len = 8;
  c.model.n_embd = 8;
  c.model.hidden = 16;
  c.model.context = 2;
  c.data.eval_tokens = 4096;
  c.train.mode = *choice_of<TrainMode>(mode);
  c.train.islands = 2;
  c.train.steps = 24;
  c.train.batch = 4;
  c.train.H = 6;
  c.inner.lr = 3e-3f;
  c.fragments.count = P;
  c.fragments.tau = tau;
  c.quorum.tau = tau;
  return c;
}

// A one-tensor layout, one fragment: the smallest syncer world.
struct Tiny {
  ParamLayout layout;
  FragmentPlan plan;
  Tiny(std::size_t n = 4) : layout(make_layout(n)), plan(FragmentPlan::strided(layout, 1)) {}
  static ParamLayout make_layout(std::size_t n) {
    ParamLayout l;
    l.add("w", {n}, 0, true);
    return l;
  }
};

inline SyncerSettings sgd_settings(int islands, int K, std::string grace = "none") {
  SyncerSettings s;
  s.islands = islands;
  s.quorum.min_islands = K;
  s.quorum.grace = *choice_of<GraceRule>(grace);
  s.merge.weighting = Weighting::uniform;
  s.merge.rda = false;
  s.merge.partial_scale = false;  // plain averages: the hand-computed values below
  s.outer.kind = "sgd";
  s.outer.lr = 1.0f;
  s.outer.momentum = 0.0f;
  return s;
}

inline Frame delta_frame(int island, std::uint64_t base, float value, std::size_t n = 4, std::uint32_t p = 0,
                         std::uint64_t seq = 0) {
  FragmentHeader h;
  h.island = island;
  h.index = p;
  h.base_round = base;
  h.seq = seq;
  h.tokens = 100;
  h.steps = 10;
  std::vector<float> v(n, value);
  return encode_fragment(h, CodecParams{}, v).value();
}

inline std::vector<float> gaussian_vec(std::size_t n, std::mt19937_64& g, float sd) {
  std::normal_distribution<float> d(0.0f, sd);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

/// An fp32 outer gradient of `n` values drawn with standard deviation `sd` (100 tokens, 10 steps).
inline Frame gaussian_frame(int island, std::uint64_t base, std::size_t n, std::mt19937_64& g, float sd = 1e-2f) {
  FragmentHeader h;
  h.island = island;
  h.base_round = base;
  h.tokens = 100;
  h.steps = 10;
  return encode_fragment(h, CodecParams{}, gaussian_vec(n, g, sd)).value();
}

inline SyncerSettings lossy_settings(int islands, Encoding enc) {
  auto s = sgd_settings(islands, islands);
  s.outer.kind = "nesterov";
  s.outer.lr = 0.7f;
  s.outer.momentum = 0.9f;
  s.broadcast = CodecParams{enc, 64};
  return s;
}

inline bool same_bits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), 4 * a.size()) == 0;
}

}  // namespace diloco::testing
