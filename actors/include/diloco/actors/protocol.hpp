// Messages of the actor runtime: Cap'n Proto frames for everything that could cross a site,
// and the in-process chip work items that share parameters without copying.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/atom.hpp>
#include <caf/fwd.hpp>
#include <caf/meta/type_name.hpp>

#include "diloco/model.hpp"

namespace diloco::actors {

/// A Cap'n Proto frame (wire.hpp) as a CAF message: everything that would cross a site
/// (fragments, progress, join request/reply) travels as these bytes, never as pointers.
struct WireFrame {
  std::vector<std::uint8_t> bytes;
};
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, WireFrame& x) {
  return f(caf::meta::type_name("diloco.WireFrame"), x.bytes);
}

/// Registers the runtime's message types (call on every actor_system_config that runs it).
void add_runtime_types(caf::actor_system_config& cfg);

/// Configures an actor system to run the runtime on `threads` scheduler threads: registers the
/// message types and picks the scheduler. Fairness between islands: a shared FIFO queue (work
/// stealing lets an island and its chips ping-pong on one worker while another island starves,
/// and islands drifted 2x apart in step count). Up to 64 messages per turn: the syncer gets a
/// progress report from every island every step, and at one message per turn it fell behind
/// the chips' work in the queue until commits lagged whole periods and islands re-sent merged
/// progress.
void configure_runtime_system(caf::actor_system_config& cfg, std::size_t threads);

// Message tags (CAF 0.17 atoms, at most 10 characters).
using compute_atom = caf::atom_constant<caf::atom("dl_comp")>;     // island → chip: ChipWork
using step_atom = caf::atom_constant<caf::atom("dl_step")>;        // island → itself: next step
using join_atom = caf::atom_constant<caf::atom("dl_join")>;        // island → syncer: JoinRequest frame
using welcome_atom = caf::atom_constant<caf::atom("dl_welcome")>;  // syncer → island: JoinReply frame
using fragment_atom = caf::atom_constant<caf::atom("dl_frag")>;    // island → syncer: outer gradient frame
using global_atom = caf::atom_constant<caf::atom("dl_global")>;    // syncer → islands: global fragment frame
using progress_atom = caf::atom_constant<caf::atom("dl_prog")>;    // island → syncer: ProgressMessage frame
using tick_atom = caf::atom_constant<caf::atom("dl_tick")>;        // syncer → itself: grace deadline
using repaired_atom = caf::atom_constant<caf::atom("dl_repair")>;  // unit → itself: repair time is over
using grad_atom = caf::atom_constant<caf::atom("dl_grad")>;        // ddp: replica → parameter server: gradient frame
using replicated_atom = caf::atom_constant<caf::atom("dl_repl")>;  // gateway → syncer: snapshot generation a majority holds
using drain_atom = caf::atom_constant<caf::atom("dl_drain")>;    // app → island: leave gracefully (drain)

/// One micro-batch for one chip. Purely in-process (island and chips share a process): the
/// parameters are the island's read-only vector, never copied per step. Never crosses a site.
struct ChipWork {
  long step = 0;
  std::shared_ptr<const std::vector<float>> params;
  std::shared_ptr<const Batch> batch;
};
/// A chip's answer: gradient and the tokens it covers (the island weights by tokens).
struct ChipResult {
  int chip = 0;
  long step = 0;
  std::uint64_t tokens = 0;
  double loss = 0.0;
  std::shared_ptr<const std::vector<float>> grads;
};

}  // namespace diloco::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(diloco::actors::ChipWork)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(diloco::actors::ChipResult)
