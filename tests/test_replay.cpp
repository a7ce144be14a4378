// What a simulated run pins to replay on any machine (replay.hpp): the environment it starts
// with, and the models' products, whose sums must not follow the cache sizes the CPU reports.
#define BOOST_TEST_MODULE replay
#include <boost/test/unit_test.hpp>

#include <Eigen/Core>
#include <cstring>
#include <string>
#include <vector>

#include "diloco/model.hpp"
#include "diloco/replay.hpp"
#include "diloco/rng.hpp"

using namespace diloco;

namespace {

std::string value_of(const std::vector<std::pair<std::string, std::string>>& env, const std::string& key) {
  for (const auto& [k, v] : env)
    if (k == key) return v;
  return "(unset)";
}

/// The default GPT's gradients on one batch of 8 windows: its weight gradients sum over 512 rows,
/// more than Eigen's blocking keeps in one panel when the caches are small.
std::vector<float> gradients() {
  ModelConfig c;
  auto model = make_model(c);
  std::vector<float> params(model->layout().size()), grads(params.size());
  model->init(params, 7);
  Batch b;
  b.B = 8;
  b.T = c.seq_len;
  b.tokens.resize(static_cast<std::size_t>(b.B) * (b.T + 1));
  Rng rng(11);
  for (auto& t : b.tokens) t = static_cast<std::uint32_t>(rng.below(256));
  model->loss_and_grad(params, b, grads);
  return grads;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

BOOST_AUTO_TEST_CASE(the_environment_masks_the_fma_variants_and_keeps_other_tunables) {
  const auto none = replay_environment(nullptr);
  BOOST_TEST(value_of(none, "GLIBC_TUNABLES") == "glibc.cpu.hwcaps=-AVX2,-FMA,-FMA4");
  BOOST_TEST(value_of(none, "OPENBLAS_CORETYPE") == "Prescott");
  BOOST_TEST(value_of(none, "DILOCO_REPLAY_PINNED") == "1");
  // A user's own hwcaps mask is replaced (the replay needs exactly this one); the rest is kept.
  const auto mixed = replay_environment("glibc.malloc.check=3:glibc.cpu.hwcaps=-AVX512F::glibc.rtld.nns=2");
  BOOST_TEST(value_of(mixed, "GLIBC_TUNABLES") ==
             "glibc.malloc.check=3:glibc.rtld.nns=2:glibc.cpu.hwcaps=-AVX2,-FMA,-FMA4");
}

BOOST_AUTO_TEST_CASE(pinned_products_do_not_follow_the_cpus_cache_sizes) {
  pin_products_for_replay();
  const auto pinned = gradients();
  // What a CPU with small caches would make Eigen choose: other blocks, other sums. This is the
  // difference the pin removes; without it this check says nothing.
  Eigen::setCpuCacheSizes(std::ptrdiff_t{1} << 10, std::ptrdiff_t{4} << 10, std::ptrdiff_t{16} << 10);
  BOOST_TEST(!same_bits(gradients(), pinned));
  pin_products_for_replay();  // as at the start of a simulated run on that CPU
  BOOST_TEST(same_bits(gradients(), pinned));
}
