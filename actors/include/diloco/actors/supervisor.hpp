// An OTP supervisor for CAF 0.17 actors: starts children in order, restarts them by the
// policy of libdiloco's SupervisorPolicy, stops them in reverse, and fails upward when the
// restart intensity is exceeded. CAF itself has monitors and links but no supervisor.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/fwd.hpp>

#include "diloco/supervision.hpp"

namespace diloco::actors {

/// Spawns one child from the supervisor's context (the supervisor monitors it).
using StartFn = std::function<caf::actor(caf::event_based_actor* supervisor)>;

/// A supervised child: its OTP spec and how to start it.
struct Child {
  ChildSpec spec;
  StartFn start;
};

/// Something that happened in a supervision tree; every fault and recovery is one.
struct SupervisionEvent {
  enum Kind { started, exited, restarting, removed, escalated, stopped } kind;
  std::string supervisor;   // name of the supervisor
  std::string child;        // child id (empty for escalated / stopped)
  std::string reason;       // exit reason, "normal" for a clean exit
  double at = 0.0;          // actor-clock time in seconds
  double delay_s = 0.0;     // restarting: back-off before the start
  caf::actor handle;        // started: the new child
};
const char* to_string(SupervisionEvent::Kind k);

/// Receives every event of a tree (called inside the supervisor actor: keep it short).
/// Events are logged with spdlog as well.
using EventSink = std::function<void(const SupervisionEvent&)>;

/// Sends `dest` an exit signal with any reason (CAF's anon_send_exit takes only exit_reason
/// codes); fault injection uses it to crash a unit with a reason that names the fault.
void exit_signal(const caf::actor& dest, caf::error reason);

/// A supervisor as a child of another supervisor (nested trees).
StartFn supervisor_child(std::string name, SupervisorFlags flags, std::vector<Child> children, EventSink sink = {});

/// Spawns a top-level supervisor.
caf::actor spawn_supervisor(caf::actor_system& sys, std::string name, SupervisorFlags flags,
                            std::vector<Child> children, EventSink sink = {});

}  // namespace diloco::actors
