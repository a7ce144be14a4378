// The goodput meter as an actor: islands and the syncer tell it what they did (a step, a sent or
// merged contribution, a death, a commit) by message, and it is the one writer of the run's
// GoodputMeter (goodput.hpp). After each fact it publishes a copy to the ledger for the apps.
#pragma once

#include <memory>

#include <caf/actor.hpp>
#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/fwd.hpp>

namespace diloco::actors {

struct Runtime;

/// One thing the meter is told (GoodputMeter's inputs, by name).
struct GoodputFact {
  enum Kind { step, sent, merged, dropped, lost, commit, alive };
  Kind kind = step;
  int island = -1;
  int fragment = -1;
  int count = 0;         // step: chips busy; alive: live islands
  double seconds = 0.0;  // step: how long
  double at = 0.0;       // commit, alive: run time (seconds since t0)

  static GoodputFact stepped(int island, int chips, double seconds) { return {step, island, -1, chips, seconds, 0.0}; }
  static GoodputFact sent_of(int island, int fragment) { return {sent, island, fragment, 0, 0.0, 0.0}; }
  static GoodputFact merged_of(int island, int fragment) { return {merged, island, fragment, 0, 0.0, 0.0}; }
  static GoodputFact dropped_of(int island, int fragment) { return {dropped, island, fragment, 0, 0.0, 0.0}; }
  static GoodputFact lost_island(int island) { return {lost, island, -1, 0, 0.0, 0.0}; }
  static GoodputFact committed_at(double at) { return {commit, -1, -1, 0, 0.0, at}; }
  static GoodputFact alive_at(int islands, double at) { return {alive, -1, -1, islands, 0.0, at}; }
};

/// The meter of `rt`'s run; it ends when `root` (the supervision tree) ends.
caf::actor spawn_meter(caf::actor_system& sys, std::shared_ptr<Runtime> rt);
/// Tells the meter that `root` is the tree it serves: it ends with it.
void meter_watch(const caf::actor& meter, const caf::actor& root);

}  // namespace diloco::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(diloco::actors::GoodputFact)
