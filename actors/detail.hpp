// Small helpers shared by the runtime's actors (private to diloco::actors): actor-clock time,
// frames to and from CAF messages, and the exception guard.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <optional>
#include <span>
#include <utility>
#include <variant>
#include <string>

#include <caf/send.hpp>
#include <caf/actor_clock.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/sec.hpp>

#include "diloco/actors/protocol.hpp"
#include "diloco/actors/runtime.hpp"
#include "diloco/wire.hpp"

namespace diloco::actors::detail {

/// The actor clock in seconds (the test coordinator's clock in tests): the `now` of policy code.
inline double now_s(caf::actor_clock& clock) {
  return std::chrono::duration<double>(clock.now().time_since_epoch()).count();
}
inline double now_s(caf::event_based_actor* self) { return now_s(self->clock()); }

inline WireFrame to_wire(const Frame& f) {
  WireFrame w;
  w.bytes.resize(f.size());
  std::memcpy(w.bytes.data(), f.data(), f.size());
  return w;
}
inline std::span<const std::byte> bytes_of(const WireFrame& w) {
  return {reinterpret_cast<const std::byte*>(w.bytes.data()), w.bytes.size()};
}

/// Seconds as the ticks of a delayed send, defined for every double. Settings are validated to at
/// most kMaxDurationS (30 days) long before they get here, so the bounds below never bite a valid
/// run: they keep a computed delay gone wrong from undefined behaviour (a double beyond int64)
/// or from overflowing the clock's nanoseconds when added to now. Negative or NaN: at once;
/// beyond 100 years: 100 years. A delay in the future rounds up, never to 0: a deadline less than
/// a microsecond away, sent at once, would find itself not yet due and ask again at once, for as
/// long as the clock does not move (for ever on the simulated run's virtual clock).
inline std::chrono::microseconds micros(double s) {
  constexpr double max_s = 100.0 * 365.0 * 86400.0;  // 3.2e15 µs; as ns 3.2e18, below 2^63
  if (!(s > 0.0)) return std::chrono::microseconds(0);
  return std::chrono::microseconds(static_cast<std::int64_t>(std::ceil(std::min(s, max_s) * 1e6)));
}

/// No exception crosses an actor boundary: it becomes an exit reason the supervisor logs.
inline void guard(caf::event_based_actor* self, std::string who) {
  self->set_exception_handler([who](caf::scheduled_actor*, std::exception_ptr& e) -> caf::error {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& x) {
      return caf::make_error(caf::sec::runtime_error, who + ": " + x.what());
    } catch (...) {
      return caf::make_error(caf::sec::runtime_error, who + ": unknown exception");
    }
  });
}

/// Tells the run's goodput meter (meter.hpp) what a unit did; from any thread, in or out of an
/// actor (a clean-up functor tells it of a death).
inline void tell_meter(const Runtime& rt, const GoodputFact& f) { caf::anon_send(rt.meter, f); }

/// A contribution the syncer (or ddp's server) drops as late (errc::stale_round: too stale, or of
/// a step already taken): counted, its chip time booked as dropped, reported; never a refusal.
inline void drop_late(caf::event_based_actor* self, Runtime& rt, const WireFrame& w, const std::string& why) {
  ++rt.syncer.dropped_stale;
  if (auto m = decode_message(bytes_of(w)); m && std::holds_alternative<FragmentMessage>(*m)) {
    const auto& h = std::get<FragmentMessage>(*m).header;
    tell_meter(rt, GoodputFact::dropped_of(h.island, static_cast<int>(h.index)));
  }
  rt.emit(Event::dropped_late(now_s(self), why));
}

/// A frame that cannot be taken (it does not decode, is not the message its path carries, or
/// names no island of the run): counted in the refusing unit's own record (`count`) and reported
/// (Event::refused), never dropped in silence. `why` says where and what ("island 1: welcome: ..."),
/// `reason` the kind in one word (an errc name, or "unexpected_message").
inline void refuse(caf::event_based_actor* self, Runtime& rt, std::atomic<std::uint64_t>& count, std::string why,
                   std::string reason) {
  ++count;
  rt.emit(Event::refused(now_s(self), std::move(why), std::move(reason)));
}

/// Whether a frame on path `where` comes from a deposed syncer leader: its term is older than the
/// newest this process has heard of (Run::newest_term). Such a frame is refused (`count`, as
/// refuse() says). A frame that does not even read as an envelope is left to its decode.
inline bool stale_term(caf::event_based_actor* self, Runtime& rt, std::atomic<std::uint64_t>& count,
                       const std::string& where, const WireFrame& w) {
  auto ok = admit_term(bytes_of(w), rt.newest_term.load());
  if (ok || ok.error().code != errc::stale_term) return false;
  refuse(self, rt, count, where + ": " + ok.error().message(), std::string(to_string(errc::stale_term)));
  return true;
}

/// The message `T` a frame on path `where` ("island 1: welcome") must carry; a frame that does
/// not decode, or carries another message, is refused (`count`, as refuse() says) and gives nothing.
template <class T>
std::optional<T> expect_message(caf::event_based_actor* self, Runtime& rt, std::atomic<std::uint64_t>& count,
                                const std::string& where, const WireFrame& w) {
  auto msg = decode_message(bytes_of(w));
  if (!msg) return refuse(self, rt, count, where + ": " + msg.error().message(), std::string(to_string(msg.error().code))), std::nullopt;
  if (!std::holds_alternative<T>(*msg))
    return refuse(self, rt, count, where + ": a " + std::string(to_string(type_of(*msg))) + " message", "unexpected_message"),
           std::nullopt;
  return std::get<T>(std::move(*msg));
}

/// A join request admitted: the island, its sender, and whether it keeps its parameters.
struct Joining {
  int id = 0;
  caf::actor who;
  bool keeps_local = false;
  std::vector<std::vector<std::byte>> holds;  // JoinRequest::holds
};

/// A join request from an island of the run, with its sender (the syncer's and the parameter
/// server's join path); anything else is refused (counted and reported) and gives nothing.
inline std::optional<Joining> admit_join(caf::event_based_actor* self, Runtime& rt, const WireFrame& w) {
  auto req = expect_message<JoinRequest>(self, rt, rt.syncer.refused, "syncer: join request", w);
  if (!req) return std::nullopt;
  const int id = req->island;
  if (id < 0 || id >= rt.cfg.train.islands)
    return refuse(self, rt, rt.syncer.refused, "syncer: join request of island " + std::to_string(id) + ", not an island of the run", "unknown_island"),
           std::nullopt;
  auto who = caf::actor_cast<caf::actor>(self->current_sender());
  if (!who)
    return refuse(self, rt, rt.syncer.refused, "syncer: join request of island " + std::to_string(id) + " without a sender", "no_sender"), std::nullopt;
  return Joining{id, std::move(who), req->keeps_local, std::move(req->holds)};
}

/// A progress report of an island of the run (the syncer's and the parameter server's progress
/// path); anything else is refused. A report that the island diverged stops the run here.
inline std::optional<ProgressMessage> admit_progress(caf::event_based_actor* self, Runtime& rt, const WireFrame& w) {
  auto got = expect_message<ProgressMessage>(self, rt, rt.syncer.refused, "syncer: progress", w);
  if (!got) return std::nullopt;
  auto& pm = *got;
  if (pm.island < 0 || pm.island >= rt.cfg.train.islands)
    return refuse(self, rt, rt.syncer.refused, "syncer: progress of island " + std::to_string(pm.island) + ", not an island of the run", "unknown_island"),
           std::nullopt;
  if (pm.diverged) {
    // The island's state holds NaN or infinity: the run cannot go on (as for the syncer's own).
    const std::string why =
        "island " + std::to_string(pm.island) + " reported that it diverged at step " + std::to_string(pm.local_step);
    rt.emit(Event::diverged_state(now_s(self), pm.island, -1, static_cast<long>(pm.local_step), why));
    rt.stop(why);
  }
  return pm;
}


/// Sends a frame between island `island` and the syncer through that island's emulated WAN link
/// (`up`: towards the syncer): delivered when the link would deliver it, or at once without a WAN.
/// Returns the delay it was given.
template <class Atom>
double send_over_link(caf::event_based_actor* self, Runtime& rt, int island, bool up, const caf::actor& dest, Atom atom,
                      WireFrame w) {
  return actors::send_over_link(self, rt.links, rt.t0.load(), island, up, dest, atom, std::move(w));
}

/// The syncer's (or the parameter server's) answer to island `island`'s join request: `reply`
/// sent to `who` over the island's link, its bytes counted and the join reported (at `round`).
inline void welcome(caf::event_based_actor* self, Runtime& rt, int island, const caf::actor& who, const JoinReply& reply,
                    std::uint64_t round) {
  auto w = to_wire(encode_message(reply, rt.leader_term));
  rt.syncer.bytes_down += w.bytes.size();
  rt.emit(Event::joined(now_s(self), island, round));
  send_over_link(self, rt, island, false, who, welcome_atom::value, std::move(w));
}

}  // namespace diloco::actors::detail
