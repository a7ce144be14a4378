// The goodput meter: the one writer of the run's GoodputMeter, fed by messages.
#include "diloco/actors/meter.hpp"

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/send.hpp>

#include "detail.hpp"
#include "diloco/actors/runtime.hpp"

namespace diloco::actors {

namespace {

using watch_atom = caf::atom_constant<caf::atom("dl_mwatch")>;

void apply(GoodputMeter& g, const GoodputFact& f) {
  switch (f.kind) {
    case GoodputFact::step: g.step(f.island, f.count, f.seconds); break;
    case GoodputFact::sent: g.sent(f.island, f.fragment); break;
    case GoodputFact::merged: g.merged(f.island, f.fragment); break;
    case GoodputFact::dropped: g.dropped(f.island, f.fragment); break;
    case GoodputFact::lost: g.island_lost(f.island); break;
    case GoodputFact::commit: g.commit(f.at); break;
    case GoodputFact::alive: g.alive(f.count, f.at); break;
  }
}

struct MeterState {
  std::unique_ptr<GoodputMeter> meter;
};

caf::behavior meter_actor(caf::stateful_actor<MeterState>* self, std::shared_ptr<Runtime> rt) {
  detail::guard(self, "meter");
  self->state.meter = std::make_unique<GoodputMeter>(rt->goodput_copy());  // what the ledger holds
  self->set_down_handler([self](caf::down_msg& m) { self->quit(m.reason); });
  return {
      [=](const GoodputFact& f) {
        apply(*self->state.meter, f);
        rt->publish_goodput(*self->state.meter);
      },
      [=](watch_atom, const caf::actor& root) { self->monitor(root); },
  };
}

}  // namespace

caf::actor spawn_meter(caf::actor_system& sys, std::shared_ptr<Runtime> rt) { return sys.spawn(meter_actor, std::move(rt)); }

void meter_watch(const caf::actor& meter, const caf::actor& root) { caf::anon_send(meter, watch_atom::value, root); }

}  // namespace diloco::actors
