// AdamW with schedule and clipping; Nesterov / SGD / Delayed Nesterov outer steps.
#include "diloco/optim.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace diloco {

float learning_rate(const AdamWConfig& c, long step) {
  if (c.warmup_steps > 0 && step <= c.warmup_steps)
    return c.lr * static_cast<float>(step) / static_cast<float>(c.warmup_steps);
  if (c.decay_steps <= 0) return c.lr;
  const double progress =
      std::min(1.0, static_cast<double>(step - c.warmup_steps) / static_cast<double>(c.decay_steps));
  const double cosine = 0.5 * (1.0 + std::cos(M_PI * progress));
  return static_cast<float>(c.lr * (c.min_lr_ratio + (1.0 - c.min_lr_ratio) * cosine));
}

double global_norm(std::span<const float> g) {
  // Eight partial sums, lane k over the elements k, k + 8, ..., added in a fixed order at the end:
  // the loop vectorizes (one serial sum costs a few ms per step at a few million parameters) and
  // the result is the same on every run of the same build.
  constexpr std::size_t lanes = 8;
  double part[lanes] = {};
  const std::size_t n = g.size(), body = n - n % lanes;
  const float* x = g.data();
  for (std::size_t i = 0; i < body; i += lanes)
    for (std::size_t k = 0; k < lanes; ++k) part[k] += static_cast<double>(x[i + k]) * x[i + k];
  double s = 0.0;
  for (double v : part) s += v;
  for (std::size_t i = body; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
  return std::sqrt(s);
}

AdamW::AdamW(const ParamLayout& layout, AdamWConfig cfg)
    : layout_(&layout), cfg_(cfg), m_(layout.size(), 0.0f), v_(layout.size(), 0.0f), decay_(layout.size(), 0) {
  for (const auto& t : layout.tensors())
    if (t.decay) std::fill_n(decay_.begin() + static_cast<std::ptrdiff_t>(t.offset), t.size, 1);
}

float AdamW::step(std::span<float> p, std::span<float> g) {
  if (p.size() != m_.size() || g.size() != m_.size()) throw std::invalid_argument("AdamW::step: size mismatch");
  const double norm = global_norm(g);
  float scale = 1.0f;
  if (cfg_.grad_clip > 0.0f && norm > cfg_.grad_clip) scale = static_cast<float>(cfg_.grad_clip / norm);
  const float lr = next_lr();
  ++t_;
  const float b1 = cfg_.beta1, b2 = cfg_.beta2;
  const float c1 = 1.0f - static_cast<float>(std::pow(b1, static_cast<double>(t_)));
  const float c2 = 1.0f - static_cast<float>(std::pow(b2, static_cast<double>(t_)));
  const float wd = lr * cfg_.weight_decay, eps = cfg_.eps;
  const std::size_t n = p.size();
  // One fused pass; distinct arrays (restrict) and sqrt without errno (CMakeLists.txt) let it
  // vectorize, with the same arithmetic per element as a scalar loop.
  float* __restrict pp = p.data();
  float* __restrict gg = g.data();
  float* __restrict mm = m_.data();
  float* __restrict vv = v_.data();
  const std::uint8_t* __restrict dec = decay_.data();
  for (std::size_t i = 0; i < n; ++i) {
    const float gi = gg[i] * scale;
    gg[i] = gi;
    mm[i] = b1 * mm[i] + (1.0f - b1) * gi;
    vv[i] = b2 * vv[i] + (1.0f - b2) * gi * gi;
    const float mhat = mm[i] / c1;
    const float vhat = vv[i] / c2;
    pp[i] -= lr * (mhat / (std::sqrt(vhat) + eps)) + (dec[i] ? wd * pp[i] : 0.0f);
  }
  return static_cast<float>(norm);
}

void AdamW::resume_schedule(long step) { offset_ = std::max(0L, step); }

float AdamW::next_lr() const {
  const long t = t_ + 1;
  const float lr = learning_rate(cfg_, offset_ + t);
  if (offset_ == 0 || cfg_.warmup_steps <= 0 || t >= cfg_.warmup_steps) return lr;
  return lr * static_cast<float>(t) / static_cast<float>(cfg_.warmup_steps);
}

void AdamW::restore(long t, std::span<const float> m, std::span<const float> v) {
  if (m.size() != m_.size() || v.size() != v_.size()) throw std::invalid_argument("AdamW::restore: size mismatch");
  t_ = t;
  std::copy(m.begin(), m.end(), m_.begin());
  std::copy(v.begin(), v.end(), v_.begin());
}

OuterOptimizer::OuterOptimizer(std::size_t size, OuterConfig cfg) : cfg_(std::move(cfg)), m_(size, 0.0f) {
  if (auto e = validate(cfg_); !e.empty()) throw std::invalid_argument(e.front());
  if (cfg_.kind == "delayed_nesterov") buf_.assign(size, 0.0);
}

void OuterOptimizer::step(std::span<float> theta, std::span<const double> d) {
  if (theta.size() != m_.size() || d.size() != m_.size())
    throw std::invalid_argument("OuterOptimizer::step: size mismatch");
  ++t_;
  const double lr = cfg_.lr, mu = cfg_.momentum;
  const std::size_t n = theta.size();
  if (cfg_.kind == "sgd") {
    // Heavy-ball SGD; with momentum 0 this is θ ← θ − lr·Δ (lr 1: FedAvg).
    for (std::size_t i = 0; i < n; ++i) {
      double upd = d[i];
      if (mu != 0.0) {
        m_[i] = static_cast<float>(mu * m_[i] + d[i]);
        upd = m_[i];
      }
      theta[i] = static_cast<float>(theta[i] - lr * upd);
    }
  } else if (cfg_.kind == "nesterov") {
    // PyTorch SGD(nesterov=True): m ← μm + Δ; θ ← θ − lr(Δ + μm).
    for (std::size_t i = 0; i < n; ++i) {
      m_[i] = static_cast<float>(mu * m_[i] + d[i]);
      theta[i] = static_cast<float>(theta[i] - lr * (d[i] + mu * m_[i]));
    }
  } else {
    // Delayed Nesterov (Liu et al., arXiv 2401.09135): each contribution moves θ by c·lr·Δ at
    // once and joins a buffer; every `delay` contributions the momentum takes one step on the
    // buffer's mean and θ gets the rest of a Nesterov step, lr(β m + mean − c·sum).
    const double c = cfg_.eager;
    for (std::size_t i = 0; i < n; ++i) {
      buf_[i] += d[i];
      if (c != 0.0) theta[i] = static_cast<float>(theta[i] - lr * c * d[i]);
    }
    if (++pending_ == cfg_.delay) {
      const double N = cfg_.delay;
      for (std::size_t i = 0; i < n; ++i) {
        const double mean = buf_[i] / N;
        m_[i] = static_cast<float>(mu * m_[i] + mean);
        theta[i] = static_cast<float>(theta[i] - lr * (mu * m_[i] + mean - c * buf_[i]));
        buf_[i] = 0.0;
      }
      pending_ = 0;
    }
  }
}

void OuterOptimizer::flush(std::span<float> theta, std::span<const double> d) {
  if (theta.size() != m_.size() || d.size() != m_.size())
    throw std::invalid_argument("OuterOptimizer::flush: size mismatch");
  for (std::size_t i = 0; i < theta.size(); ++i) theta[i] = static_cast<float>(theta[i] - cfg_.lr * d[i]);
}

void OuterOptimizer::restore(long t, std::span<const float> momentum, std::span<const double> pending_sum,
                             int pending_count) {
  if (momentum.size() != m_.size()) throw std::invalid_argument("OuterOptimizer::restore: momentum size mismatch");
  if (!pending_sum.empty() && pending_sum.size() != buf_.size())
    throw std::invalid_argument("OuterOptimizer::restore: pending buffer size mismatch");
  if (pending_count < 0 || pending_count >= cfg_.delay)
    throw std::invalid_argument("OuterOptimizer::restore: pending count out of range");
  t_ = t;
  std::copy(momentum.begin(), momentum.end(), m_.begin());
  if (!pending_sum.empty()) std::copy(pending_sum.begin(), pending_sum.end(), buf_.begin());
  pending_ = pending_count;
}

std::vector<std::string> validate(const AdamWConfig& c) {
  std::vector<std::string> e;
  if (!(c.lr > 0.0f && std::isfinite(c.lr))) e.push_back("inner.lr: must be a positive number");
  if (!(c.beta1 >= 0.0f && c.beta1 < 1.0f)) e.push_back("inner.beta1: must be in [0, 1)");
  if (!(c.beta2 >= 0.0f && c.beta2 < 1.0f)) e.push_back("inner.beta2: must be in [0, 1)");
  if (!(c.eps > 0.0f)) e.push_back("inner.eps: must be positive");
  if (!(c.weight_decay >= 0.0f)) e.push_back("inner.weight_decay: must be ≥ 0");
  if (!(c.grad_clip >= 0.0f)) e.push_back("inner.grad_clip: must be ≥ 0 (0 disables clipping)");
  if (c.warmup_steps < 0) e.push_back("inner.warmup_steps: must be ≥ 0");
  if (c.decay_steps < 0) e.push_back("inner.decay_steps: must be ≥ 0");
  if (!(c.min_lr_ratio >= 0.0f && c.min_lr_ratio <= 1.0f)) e.push_back("inner.min_lr_ratio: must be in [0, 1]");
  return e;
}

std::vector<std::string> validate(const OuterConfig& c) {
  std::vector<std::string> e;
  if (c.kind != "nesterov" && c.kind != "sgd" && c.kind != "delayed_nesterov")
    e.push_back("outer.kind: must be \"nesterov\", \"sgd\" or \"delayed_nesterov\" (got \"" + c.kind + "\")");
  if (!(c.lr > 0.0f && std::isfinite(c.lr))) e.push_back("outer.lr: must be a positive number");
  if (!(c.momentum >= 0.0f && c.momentum < 1.0f)) e.push_back("outer.momentum: must be in [0, 1)");
  if (c.delay < 1) e.push_back("outer.delay: must be ≥ 1");
  if (!(c.eager >= 0.0f && c.eager * static_cast<float>(c.delay) <= 1.0f + 1e-6f))
    e.push_back("outer.eager: must be in [0, 1/outer.delay]");
  return e;
}

}  // namespace diloco
