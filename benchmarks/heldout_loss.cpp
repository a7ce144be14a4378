// heldout_loss: the loss of saved parameters over the whole evaluation split of a run's corpus,
// every token once. The split of N tokens is cut into consecutive windows of T+1 tokens, each
// starting T after the last (the last one shorter), so tokens 1..N-1 are each predicted exactly
// once, from the context of their own window. For text_parity.py (bits/byte needs every token).
//
//   heldout_loss CONFIG CHECKPOINT [--threads N] [--set key=value ...]
//
// CHECKPOINT is what `diloco run --save` wrote. Prints one JSON object: {"loss": mean nats per
// predicted token, "tokens": predicted tokens, "nats": their sum}.
#include <algorithm>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "diloco/checkpoint.hpp"
#include "diloco/config.hpp"
#include "diloco/data.hpp"
#include "diloco/fragments.hpp"
#include "diloco/model.hpp"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s CONFIG CHECKPOINT [--threads N] [--set key=value ...]\n", argv[0]);
    return 2;
  }
  std::vector<std::string> overrides;
  int threads = 2;
  for (int i = 3; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--set") overrides.push_back(argv[i + 1]);
    else if (flag == "--threads") threads = std::max(1, std::stoi(argv[i + 1]));
    else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  try {
    const auto cfg = diloco::load_config(argv[1], overrides);
    auto probe = diloco::make_model(cfg.model);
    const auto plan = diloco::FragmentPlan::make("strided", probe->layout(), 1);  // as --save writes it
    auto cp = diloco::load_checkpoint(argv[2], probe->layout(), plan, diloco::LoadOptions{false});
    if (!cp) {
      std::fprintf(stderr, "%s: %s\n", argv[2], cp.error().message().c_str());
      return 1;
    }
    const auto corpus = diloco::Corpus::make(cfg.data, cfg.model.vocab);
    const auto tokens = corpus.eval_tokens();
    const std::size_t T = static_cast<std::size_t>(cfg.model.seq_len);
    std::vector<diloco::Batch> windows;
    for (std::size_t s = 0; s + 1 < tokens.size(); s += T) {
      diloco::Batch b;
      b.B = 1;
      b.T = static_cast<int>(std::min(T, tokens.size() - 1 - s));
      b.tokens.assign(tokens.begin() + static_cast<std::ptrdiff_t>(s),
                      tokens.begin() + static_cast<std::ptrdiff_t>(s + b.T + 1));
      windows.push_back(std::move(b));
    }
    // Each thread sums loss × targets over its share of the windows with its own model instance.
    std::vector<double> nats(static_cast<std::size_t>(threads), 0.0);
    std::vector<std::thread> pool;
    for (int k = 0; k < threads; ++k)
      pool.emplace_back([&, k] {
        auto m = diloco::make_model(cfg.model);
        for (std::size_t w = static_cast<std::size_t>(k); w < windows.size(); w += static_cast<std::size_t>(threads))
          nats[static_cast<std::size_t>(k)] += static_cast<double>(m->loss(cp->params, windows[w])) * windows[w].T;
      });
    for (auto& t : pool) t.join();
    double total = 0.0;
    for (double n : nats) total += n;
    const std::size_t predicted = tokens.size() - 1;
    std::printf("{\"loss\":%.6f,\"tokens\":%zu,\"nats\":%.3f,\"windows\":%zu}\n", total / static_cast<double>(predicted),
                predicted, total, windows.size());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "heldout_loss: %s\n", e.what());
    return 1;
  }
}
