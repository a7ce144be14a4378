// `diloco tokenize`: text files through a SentencePiece model into llm.c token shards, the files
// data.corpus = "tokens" trains on.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace tokenizecmd {

/// Flags of `diloco tokenize`.
struct Flags {
  std::string model;                 // SentencePiece .model file
  std::vector<std::string> inputs;   // text files, one document each
  std::string out;                   // directory of the shards (created if missing)
  std::string prefix = "shard";      // shard names: PREFIX_000000.bin, ...
  std::size_t shard_tokens = 100000000;
};

/// Adds the subcommand to `app`; the returned flags are filled when the command line is parsed.
std::unique_ptr<Flags> add_command(CLI::App& app);
/// Tokenises the inputs; returns the exit status (errors name the file or flag).
int run(const Flags& f);

}  // namespace tokenizecmd
