// DdpServer: the parameter-server form of synchronous data parallel (ddp.hpp).
#include "diloco/ddp.hpp"

#include <algorithm>

namespace diloco {

namespace {
WireContext gradient_context(std::size_t n, int islands) {
  WireContext ctx;
  ctx.fragment_sizes = {n};
  ctx.rounds = {0};
  ctx.islands = islands;
  ctx.accept = FragmentKind::gradient;
  return ctx;
}
}  // namespace

DdpServer::DdpServer(const ParamLayout& layout, std::span<const float> initial, AdamWConfig inner, int islands)
    : params_(initial.begin(), initial.end()), opt_(layout, inner), islands_(islands),
      inbox_(gradient_context(initial.size(), islands)),
      grads_(static_cast<std::size_t>(islands), std::vector<float>(initial.size())),
      tokens_(static_cast<std::size_t>(islands), 0), mean_(initial.size()) {}

Expected<FragmentHeader> DdpServer::receive(std::span<const std::byte> frame) {
  // Decode into a scratch row first: a refused frame must not touch a kept gradient.
  auto got = inbox_.receive(frame, std::span<float>(mean_));
  if (!got) return got.error();
  const auto i = static_cast<std::size_t>(got->header.island);
  std::copy(mean_.begin(), mean_.end(), grads_[i].begin());
  tokens_[i] = got->header.tokens;
  return got->header;
}

void DdpServer::clear_pending() { std::fill(tokens_.begin(), tokens_.end(), 0); }

int DdpServer::received() const {
  return static_cast<int>(std::count_if(tokens_.begin(), tokens_.end(), [](std::uint64_t t) { return t > 0; }));
}

std::optional<std::uint64_t> DdpServer::poll() {
  if (received() < islands_) return std::nullopt;
  std::uint64_t total = 0;
  for (auto t : tokens_) total += t;
  // g = Σ_i tokens_i·g_i / Σ_i tokens_i; equal tokens give the reference loop's plain mean.
  std::fill(mean_.begin(), mean_.end(), 0.0f);
  for (std::size_t i = 0; i < grads_.size(); ++i) {
    const float w = static_cast<float>(static_cast<double>(tokens_[i]) / static_cast<double>(total));
    const auto& g = grads_[i];
    for (std::size_t j = 0; j < mean_.size(); ++j) mean_[j] += w * g[j];
  }
  opt_.step(params_, mean_);
  std::fill(tokens_.begin(), tokens_.end(), 0);
  ++step_;
  inbox_.set_round(0, step_);
  return step_;
}

Expected<Frame> DdpServer::params_frame() const {
  FragmentHeader h;
  h.kind = FragmentKind::global_params;
  h.island = syncer_id;
  h.index = 0;
  h.base_round = step_;
  return encode_fragment(h, CodecParams{}, params_);
}

JoinReply DdpServer::join_reply() const {
  JoinReply r;
  FragmentMessage m;
  m.header.kind = FragmentKind::global_params;
  m.header.island = syncer_id;
  m.header.base_round = step_;
  m.data = encode(CodecParams{}, params_).value();
  r.fragments.push_back(std::move(m));
  return r;
}

Expected<Frame> gradient_frame(int island, std::uint64_t step, std::uint64_t tokens, std::span<const float> grad) {
  FragmentHeader h;
  h.kind = FragmentKind::gradient;
  h.island = island;
  h.index = 0;
  h.base_round = step;
  h.tokens = tokens;
  h.steps = 1;
  return encode_fragment(h, CodecParams{}, grad);
}

}  // namespace diloco
