// What a site's connector and the syncer's gateway and relays say to each other (private to the
// actors across processes): the atoms of the session protocol and small helpers.
#pragma once

#include <chrono>

#include <caf/atom.hpp>

#include "detail.hpp"
#include "diloco/actors/identity.hpp"
#include "diloco/actors/protocol.hpp"

namespace diloco::actors::session {

using hello_atom = caf::atom_constant<caf::atom("dl_hello")>;   // site → gateway: name, certificate
using prove_atom = caf::atom_constant<caf::atom("dl_prove")>;   // site → gateway: signed challenge
using beat_atom = caf::atom_constant<caf::atom("dl_beat")>;     // site ↔ relay: Heartbeat frame
using redial_atom = caf::atom_constant<caf::atom("dl_redial")>; // connector → itself: try again
using pulse_atom = caf::atom_constant<caf::atom("dl_pulse")>;   // relay / connector → itself: timer
using over_atom = caf::atom_constant<caf::atom("dl_over")>;     // app → gateway → relay → site: RunOver frame
using replica_atom = caf::atom_constant<caf::atom("dl_replic")>; // follower replica → leader's gateway

inline std::chrono::microseconds ms(double x) { return detail::micros(x / 1000.0); }

inline WireFrame frame_of(const Bytes& b) { return WireFrame{b}; }

}  // namespace diloco::actors::session
