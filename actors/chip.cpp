// The chip actor: one model workspace, its share of the island's batch per message, gradient back
// to the island.
#include "diloco/actors/chip.hpp"

#include <chrono>

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/system_messages.hpp>
#include <spdlog/spdlog.h>

#include "detail.hpp"

namespace diloco::actors {

namespace {

// ---- chip: loss and gradient of one micro-batch on the island's current parameters ----

caf::behavior chip_actor(caf::event_based_actor* self, std::shared_ptr<Runtime> rt, int island, int chip) {
  detail::guard(self, "chip " + std::to_string(island) + "." + std::to_string(chip));
  auto model = std::shared_ptr<Model>(make_model(rt->cfg.model));
  // Under repair (a chaos kill): take our place in the directory once the repair is over.
  const double repaired = rt->windows.chip_back(island, chip);
  if (const double now = detail::now_s(self); now < repaired)
    self->delayed_send(self, detail::micros(repaired - now), repaired_atom::value);
  auto& rec = rt->chips[static_cast<std::size_t>(island)][static_cast<std::size_t>(chip)];
  ++rec.starts;
  self->attach_functor([&rec, rt](const caf::error&) { ++rec.ends; });  // rt keeps rec alive
  // The gradient buffer is reused once the island has let go of the previous one (no 3 MB
  // allocation and zero-fill per step); while the island still holds it, a new one is made.
  auto buffer = std::make_shared<std::shared_ptr<std::vector<float>>>();
  return {
      [=](compute_atom, const ChipWork& w) {
        const auto t0 = std::chrono::steady_clock::now();
        auto& grads = *buffer;
        if (!grads || grads.use_count() > 1 || grads->size() != w.params->size())
          grads = std::make_shared<std::vector<float>>(w.params->size());
        // An empty share (more chips than windows in the island's batch) computes nothing: its
        // answer holds no tokens, and the island's step leaves it out (combine_chips).
        const double loss = w.batch->B > 0 ? model->loss_and_grad(*w.params, *w.batch, *grads) : 0.0;
        ChipResult r{chip, w.step, w.batch->num_targets(), loss, grads};
        auto dest = caf::actor_cast<caf::actor>(self->current_sender());
        // Slower hardware (or a straggler) is emulated: the reply waits (1/speed − 1) × the compute
        // time. Simulated, the whole step's time is modelled: FLOPs over the chip's FLOP/s and speed.
        const double speed = rt->speed(island, detail::now_s(self));
        const double slow =
            rt->simulated ? model->flops_per_token(w.batch->T) * static_cast<double>(r.tokens) / (rt->cfg.islands.chip_flops * speed)
            : speed < 1.0 ? std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() * (1.0 / speed - 1.0)
                          : 0.0;
        if (slow > 0.0) self->delayed_send(dest, detail::micros(slow), std::move(r));
        else self->send(dest, std::move(r));
      },
      [=](repaired_atom) { rt->dir.set_chip(island, chip, caf::actor_cast<caf::actor>(self)); },
  };
}

}  // namespace

caf::actor spawn_chip(caf::event_based_actor* parent, std::shared_ptr<Runtime> rt, int island, int chip) {
  return parent->spawn(chip_actor, std::move(rt), island, chip);
}

}  // namespace diloco::actors
