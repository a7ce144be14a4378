// Where the runtime's actors find each other after restarts (like Erlang's registered names).
#pragma once

#include <mutex>
#include <vector>

#include <caf/actor.hpp>

namespace diloco::actors {

/// Where actors find each other after restarts (like Erlang's registered names): the start
/// functions write the handle of every unit they spawn here.
class Directory {
public:
  Directory(int islands, int chips);
  void set_syncer(caf::actor a);
  caf::actor syncer() const;
  void set_island(int i, caf::actor a);
  caf::actor island(int i) const;
  void set_chip(int i, int c, caf::actor a);
  caf::actor chip(int i, int c) const;

private:
  mutable std::mutex mu_;
  caf::actor syncer_;
  std::vector<caf::actor> islands_;
  std::vector<std::vector<caf::actor>> chips_;
};

}  // namespace diloco::actors
