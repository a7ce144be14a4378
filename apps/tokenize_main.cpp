// `diloco-tokenize`: what `diloco tokenize` runs (diloco_main.cpp hands its command line over).
// A program of its own because Debian's libsentencepiece carries its own copy of protobuf, which
// clashes with the libprotobuf that libtorch loads: the two must not share a process.
#include <cstdio>
#include <exception>

#include <CLI/CLI.hpp>

#include "tokenize_cmd.hpp"

int main(int argc, char** argv) {
  CLI::App app{"diloco tokenize: text files through a SentencePiece model into llm.c token shards"};
  app.require_subcommand(1);
  auto flags = tokenizecmd::add_command(app);
  CLI11_PARSE(app, argc, argv);
  try {
    return tokenizecmd::run(*flags);
  } catch (const std::exception& e) {  // an unreadable input, a full disk: said, not aborted on
    std::fprintf(stderr, "diloco tokenize: %s\n", e.what());
    return 1;
  }
}
