// The supervisor actor: monitors its children, traps exit signals, and carries out what
// SupervisorPolicy (libdiloco/src/supervision.cpp) decides.
#include "diloco/actors/supervisor.hpp"

#include <chrono>
#include <map>
#include <memory>
#include <sstream>

#include <caf/actor_system.hpp>
#include <caf/atom.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/exit_reason.hpp>
#include <caf/sec.hpp>
#include <caf/send.hpp>
#include <caf/system_messages.hpp>
#include <spdlog/spdlog.h>

namespace diloco::actors {

namespace {

using restart_atom = caf::atom_constant<caf::atom("dl_restart")>;
using kill_atom = caf::atom_constant<caf::atom("dl_kill")>;

struct State {
  std::string name;
  SupervisorPolicy policy;
  std::vector<Child> children;
  EventSink sink;
  std::vector<caf::actor> running;  // per child; invalid while not running
  std::uint64_t next_token = 0;
  std::map<std::uint64_t, std::vector<std::size_t>> pending;  // delayed (re)starts

  State(std::string n, SupervisorFlags f, std::vector<Child> c, EventSink s)
      : name(std::move(n)), policy(f, specs_of(c)), children(std::move(c)), sink(std::move(s)),
        running(children.size()) {}
  static std::vector<ChildSpec> specs_of(const std::vector<Child>& c) {
    std::vector<ChildSpec> out;
    for (const auto& x : c) out.push_back(x.spec);
    return out;
  }
};

double seconds(caf::event_based_actor* self) {
  return std::chrono::duration<double>(self->clock().now().time_since_epoch()).count();
}

void emit(caf::event_based_actor* self, State& st, SupervisionEvent ev) {
  ev.supervisor = st.name;
  ev.at = seconds(self);
  const auto level = ev.kind == SupervisionEvent::exited && ev.reason != "normal" ? spdlog::level::warn
                     : ev.kind == SupervisionEvent::escalated                      ? spdlog::level::err
                                                                                   : spdlog::level::info;
  spdlog::log(level, "[{}] {} {}{}{}", st.name, to_string(ev.kind), ev.child,
              ev.reason.empty() ? "" : " reason=" + ev.reason,
              ev.kind == SupervisionEvent::restarting ? " in " + std::to_string(ev.delay_s) + "s" : "");
  if (st.sink) st.sink(ev);
}

std::string describe(caf::event_based_actor* self, const caf::error& reason) {
  if (!reason) return "normal";  // an empty error must not be inspected further
  return self->system().render(reason);
}

void start_child(caf::event_based_actor* self, State& st, std::size_t i) {
  auto child = st.children[i].start(self);
  self->monitor(child);
  st.running[i] = child;
  SupervisionEvent ev{SupervisionEvent::started, {}, st.children[i].spec.id, {}, 0.0, 0.0, child};
  emit(self, st, std::move(ev));
}

// Asks a child to stop; kills it if it has not stopped within its shutdown timeout.
void stop_child(caf::event_based_actor* self, State& st, std::size_t i) {
  auto child = st.running[i];
  if (!child) return;
  st.running[i] = caf::actor{};
  self->demonitor(child);
  self->send_exit(child, caf::exit_reason::user_shutdown);
  const auto timeout = std::chrono::duration<double>(st.children[i].spec.shutdown_timeout_s);
  self->delayed_send(self, std::chrono::duration_cast<std::chrono::microseconds>(timeout), kill_atom::value, child);
  emit(self, st, {SupervisionEvent::stopped, {}, st.children[i].spec.id, "shutdown", 0.0, 0.0, {}});
}

void stop_all(caf::event_based_actor* self, State& st) {
  for (auto i : st.policy.shutdown_order()) stop_child(self, st, i);
}

void on_child_exit(caf::event_based_actor* self, State& st, std::size_t i, const caf::error& reason) {
  st.running[i] = caf::actor{};
  const bool abnormal = static_cast<bool>(reason) && reason != caf::make_error(caf::exit_reason::normal);
  emit(self, st, {SupervisionEvent::exited, {}, st.children[i].spec.id, describe(self, reason), 0.0, 0.0, {}});
  auto d = st.policy.on_exit(i, abnormal, seconds(self));
  for (auto r : d.remove) emit(self, st, {SupervisionEvent::removed, {}, st.children[r].spec.id, {}, 0.0, 0.0, {}});
  switch (d.action) {
    case SupervisorDecision::ignore:
      return;
    case SupervisorDecision::escalate: {
      for (auto j : d.stop) stop_child(self, st, j);
      emit(self, st, {SupervisionEvent::escalated, {}, {}, "restart intensity exceeded", 0.0, 0.0, {}});
      // The run's configuration names these limits supervision.intensity and supervision.period_s.
      const auto& f = st.policy.flags();
      std::ostringstream why;
      why << st.name << ": restart intensity exceeded (more than " << f.intensity << " restarts within " << f.period_s
          << " s; supervision.intensity and supervision.period_s set the limit)";
      self->quit(caf::make_error(caf::sec::runtime_error, why.str()));
      return;
    }
    case SupervisorDecision::restart: {
      for (auto j : d.stop) stop_child(self, st, j);
      emit(self, st, {SupervisionEvent::restarting, {}, st.children[i].spec.id, {}, 0.0, d.delay_s, {}});
      const auto token = st.next_token++;
      st.pending[token] = d.start;
      const auto delay = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::duration<double>(d.delay_s));
      if (delay.count() > 0) self->delayed_send(self, delay, restart_atom::value, token);
      else self->send(self, restart_atom::value, token);
      return;
    }
  }
}

caf::behavior supervisor_impl(caf::event_based_actor* self, std::shared_ptr<State> st) {
  // Children are monitored, not linked: a child killed with exit_reason::kill (which no exit
  // handler can trap) must not take its supervisor down. When the supervisor terminates for
  // any reason, whatever children still run are told to stop.
  self->set_down_handler([self, st](caf::down_msg& msg) {
    for (std::size_t i = 0; i < st->running.size(); ++i)
      if (st->running[i] && st->running[i].address() == msg.source) return on_child_exit(self, *st, i, msg.reason);
  });
  self->set_exit_handler([self, st](caf::exit_msg& msg) {
    // An exit signal from our parent (or anyone): stop the children in reverse order, then quit.
    stop_all(self, *st);
    self->quit(msg.reason);
  });
  self->attach_functor([st](const caf::error& reason) {
    for (auto& child : st->running)
      if (child) exit_signal(child, reason ? reason : caf::make_error(caf::exit_reason::user_shutdown));
  });
  for (std::size_t i = 0; i < st->children.size(); ++i) start_child(self, *st, i);
  return {
      [self, st](restart_atom, std::uint64_t token) {
        auto it = st->pending.find(token);
        if (it == st->pending.end()) return;
        for (auto i : it->second)
          if (st->policy.active(i) && !st->running[i]) start_child(self, *st, i);
        st->pending.erase(it);
      },
      [self](kill_atom, caf::actor& child) { self->send_exit(child, caf::exit_reason::kill); },
  };
}

}  // namespace

void exit_signal(const caf::actor& dest, caf::error reason) {
  if (dest) dest->enqueue(nullptr, caf::make_message_id(), caf::make_message(caf::exit_msg{dest.address(), std::move(reason)}), nullptr);
}

const char* to_string(SupervisionEvent::Kind k) {
  switch (k) {
    case SupervisionEvent::started: return "started";
    case SupervisionEvent::exited: return "exited";
    case SupervisionEvent::restarting: return "restarting";
    case SupervisionEvent::removed: return "removed";
    case SupervisionEvent::escalated: return "escalated";
    case SupervisionEvent::stopped: return "stopped";
  }
  return "?";
}

StartFn supervisor_child(std::string name, SupervisorFlags flags, std::vector<Child> children, EventSink sink) {
  return [=](caf::event_based_actor* parent) {
    auto st = std::make_shared<State>(name, flags, children, sink);
    return parent->spawn(supervisor_impl, st);
  };
}

caf::actor spawn_supervisor(caf::actor_system& sys, std::string name, SupervisorFlags flags,
                            std::vector<Child> children, EventSink sink) {
  auto st = std::make_shared<State>(std::move(name), flags, std::move(children), std::move(sink));
  return sys.spawn(supervisor_impl, st);
}

}  // namespace diloco::actors
