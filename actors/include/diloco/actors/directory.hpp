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
  /// The unit island `i` joins as its syncer: the syncer, or the relay of its site's session where
  /// a route is set (a run whose sites reach the syncer through sessions in one process,
  /// `diloco run --simulate --relays`; an empty relay: no session now, the island waits).
  caf::actor syncer_for(int i) const;
  /// Island `i` joins `relay` from now on instead of the syncer (every island of `islands`).
  void set_route(const std::vector<int>& islands, caf::actor relay);
  void set_island(int i, caf::actor a);
  caf::actor island(int i) const;
  void set_chip(int i, int c, caf::actor a);
  caf::actor chip(int i, int c) const;

private:
  mutable std::mutex mu_;
  caf::actor syncer_;
  std::vector<char> routed_;        // island → a route is set
  std::vector<caf::actor> routes_;  // island → the relay it joins
  std::vector<caf::actor> islands_;
  std::vector<std::vector<caf::actor>> chips_;
};

}  // namespace diloco::actors
