// `diloco tokenize`: each input file is one document, read line by line and encoded by the
// SentencePiece model, preceded by the model's BOS id (if it has one), and written as llm.c shards.
#include "tokenize_cmd.hpp"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include <sentencepiece_processor.h>
#include <spdlog/spdlog.h>

#include "diloco/data.hpp"

namespace tokenizecmd {

std::unique_ptr<Flags> add_command(CLI::App& app) {
  auto f = std::make_unique<Flags>();
  auto* cmd = app.add_subcommand("tokenize", "encode text files with a SentencePiece model into llm.c token shards "
                                             "(data.corpus = \"tokens\")");
  cmd->add_option("--model", f->model, "SentencePiece model (.model), e.g. from spm_train")->required()->check(CLI::ExistingFile);
  cmd->add_option("inputs", f->inputs, "text files, each one document")->required()->check(CLI::ExistingFile);
  cmd->add_option("--out", f->out, "directory of the shards (created if missing)")->required();
  cmd->add_option("--prefix", f->prefix, "shard names: PREFIX_000000.bin, ... (e.g. train, val)")->capture_default_str();
  cmd->add_option("--shard-tokens", f->shard_tokens, "tokens per shard at most")->capture_default_str()->check(CLI::Range(
      std::size_t{1}, std::size_t{2147483647}));
  return f;
}

int run(const Flags& f) {
  sentencepiece::SentencePieceProcessor sp;
  if (const auto st = sp.Load(f.model); !st.ok()) {
    spdlog::error("--model: cannot load '{}': {}", f.model, st.ToString());
    return 2;
  }
  const int vocab = sp.GetPieceSize();
  if (vocab > 65536) {
    spdlog::error("--model: '{}' has {} pieces; llm.c shards hold 16-bit ids (at most 65536 pieces)", f.model, vocab);
    return 2;
  }
  std::error_code ec;
  std::filesystem::create_directories(f.out, ec);
  if (ec) {
    spdlog::error("--out: cannot create '{}': {}", f.out, ec.message());
    return 2;
  }
  for (const auto& path : f.inputs)
    if (!std::filesystem::is_regular_file(path)) {  // a device or a pipe could be endless
      spdlog::error("inputs: '{}' is not a regular file", path);
      return 2;
    }
  diloco::TokenShardWriter writer(f.out, f.prefix, f.shard_tokens);
  std::vector<std::uint32_t> ids;
  for (const auto& path : f.inputs) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error("cannot read '" + path + "'");
    if (sp.bos_id() >= 0) {
      const std::uint32_t bos = static_cast<std::uint32_t>(sp.bos_id());
      writer.add({&bos, 1});
    }
    std::string line;
    std::vector<int> piece_ids;
    while (std::getline(in, line)) {
      if (const auto st = sp.Encode(line, &piece_ids); !st.ok())
        throw std::runtime_error("'" + path + "': cannot encode: " + st.ToString());
      ids.assign(piece_ids.begin(), piece_ids.end());
      writer.add(ids);
    }
  }
  const auto files = writer.finish();
  std::printf("tokenize: %zu files, %llu tokens in %zu shards in %s (vocabulary %d: set model.vocab = %d)\n",
              f.inputs.size(), static_cast<unsigned long long>(writer.tokens()), files.size(), f.out.c_str(), vocab, vocab);
  return 0;
}

}  // namespace tokenizecmd
