// A hostile site for the front-door tests (hostile_peers_test.py): it dials the syncer as a site
// of the roster would, proves its identity, joins one of its own islands through the relay it is
// given, and so learns the syncer's actor id as the sender of the welcome. Then it writes an
// outer gradient for another site's island to that id straight, past the relay that would
// refuse it. The syncer's door must close the connection instead of delivering it. Before that,
// it asks for its island's join 40 times in a burst: each answer is the whole model, so the
// relay spaces joins out (net.join_interval_ms) and the burst is answered once or twice.
//
// usage: hostile_site CONFIG HOST:PORT SITE ISLAND VICTIM_ISLAND [CERTS_DIR]
// Prints what it did, one line per step; exit 0 once the connection is closed, 1 otherwise.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/atom.hpp>
#include <caf/io/middleman.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/system_messages.hpp>

#include "diloco/actors/identity.hpp"
#include "diloco/actors/protocol.hpp"
#include "diloco/actors/remote.hpp"
#include "diloco/config.hpp"
#include "diloco/wire.hpp"

using namespace diloco;
using namespace diloco::actors;

namespace {

// The session protocol's atoms, as a site's connector sends them.
using hello_atom = caf::atom_constant<caf::atom("dl_hello")>;
using prove_atom = caf::atom_constant<caf::atom("dl_prove")>;

WireFrame wire(const Frame& f) {
  WireFrame w;
  w.bytes.resize(f.size());
  for (std::size_t i = 0; i < f.size(); ++i) w.bytes[i] = static_cast<std::uint8_t>(f[i]);
  return w;
}

int fail(const std::string& why) {
  std::printf("hostile site: %s\n", why.c_str());
  std::fflush(stdout);
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 6) return fail("usage: hostile_site CONFIG HOST:PORT SITE ISLAND VICTIM_ISLAND [CERTS_DIR]");
  const auto cfg = load_config(argv[1]);
  const auto at = parse_endpoint(argv[2]);
  const std::string site = argv[3];
  const int island = std::atoi(argv[4]), victim = std::atoi(argv[5]);
  std::optional<TlsFiles> tls;
  if (argc > 6) tls = tls_files(argv[6], site);

  caf::actor_system_config sc;
  add_runtime_types(sc);
  configure_network(sc, cfg.net);
  caf::actor_system sys(sc);
  auto door = open_site_door(cfg, at, tls ? &*tls : nullptr, [](const std::string& s) { std::printf("door: %s\n", s.c_str()); });
  auto gw = sys.middleman().remote_actor("127.0.0.1", door->port());
  if (!gw) return fail("cannot reach the syncer: " + sys.render(gw.error()));
  caf::scoped_actor self{sys};
  std::string err;
  auto failed = [&](const caf::error& e) { err = sys.render(e); };

  // Proven as the site it is.
  actors::Bytes cert;
  if (tls) cert = read_bytes(tls->cert, &err);
  WireFrame nonce;
  self->request(*gw, std::chrono::seconds(10), hello_atom::value, site, WireFrame{cert})
      .receive([&](WireFrame& n) { nonce = std::move(n); }, failed);
  if (!err.empty()) return fail("hello refused: " + err);
  actors::Bytes sig;
  if (tls) {
    sig = sign_with_key(tls->key, challenge_message(site, nonce.bytes), &err);
    if (sig.empty()) return fail("cannot sign: " + err);
  }
  SiteSession s;
  self->request(*gw, std::chrono::seconds(10), prove_atom::value, WireFrame{sig})
      .receive([&](SiteSession& x) { s = std::move(x); }, failed);
  if (!err.empty() || !s.relay) return fail("no session: " + err);
  std::printf("hostile site: proven as %s, given relay %llu\n", site.c_str(),
              static_cast<unsigned long long>(s.relay.id()));

  // One of its own islands joins through the relay; the welcome comes from the syncer itself.
  self->send(s.relay, join_atom::value, wire(encode_message(JoinRequest{island, 1, false})));
  caf::actor syncer;
  std::size_t values = 0;
  bool welcomed = false;
  self->receive_while([&] { return !welcomed; })(
      [&](welcome_atom, const WireFrame& w) {
        syncer = caf::actor_cast<caf::actor>(self->current_sender());
        auto m = decode_message({reinterpret_cast<const std::byte*>(w.bytes.data()), w.bytes.size()});
        if (m && std::holds_alternative<JoinReply>(*m) && !std::get<JoinReply>(*m).fragments.empty())
          values = std::get<JoinReply>(*m).fragments[0].data.count;
        welcomed = true;
      },
      caf::after(std::chrono::seconds(30)) >> [&] { welcomed = true; });
  if (!syncer || values == 0) return fail("no welcome for island " + std::to_string(island));
  std::printf("hostile site: island %d welcomed by actor %llu (the syncer), fragment 0 holds %zu values\n", island,
              static_cast<unsigned long long>(syncer.id()), values);

  // A burst of joins: the relay lets one through per interval, the newest waiting.
  const int burst = 40;
  for (int k = 0; k < burst; ++k) self->send(s.relay, join_atom::value, wire(encode_message(JoinRequest{island, 1, false})));
  int answers = 0;
  bool quiet = false;
  self->receive_while([&] { return !quiet; })(
      [&](welcome_atom, const WireFrame&) { ++answers; },
      caf::after(std::chrono::milliseconds(2500)) >> [&] { quiet = true; });
  std::printf("hostile site: %d joins in a burst were answered %d times\n", burst, answers);

  // Another site's island's outer gradient, written to the syncer's id: the relay would refuse it.
  self->monitor(syncer);
  FragmentHeader h;
  h.island = victim;
  h.index = 0;
  h.tokens = 1;
  h.steps = 1;
  std::vector<float> zeros(values, 0.0f);
  auto frame = encode_fragment(h, CodecParams{}, zeros);
  if (!frame) return fail("cannot encode: " + frame.error().message());
  self->send(syncer, fragment_atom::value, wire(*frame));
  std::printf("hostile site: sent island %d's fragment 0 straight to the syncer\n", victim);
  std::fflush(stdout);
  bool closed = false;
  self->receive(
      [&](caf::down_msg& d) {
        closed = true;
        std::printf("hostile site: connection closed (%s)\n", sys.render(d.reason).c_str());
      },
      caf::after(std::chrono::seconds(20)) >> [] {});
  std::fflush(stdout);
  return closed ? 0 : fail("the connection stayed open");
}
