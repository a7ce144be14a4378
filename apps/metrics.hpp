// What an operator watches of a run, over HTTP (`--http HOST:PORT`): Prometheus metrics at
// /metrics (prometheus-cpp), a live status page at / (apps/status/index.html, compiled in) and
// its data at /status.json. Fed from the ledger, read when a client asks, and from the event
// stream; the actors know nothing of it, and a request only reads.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "diloco/events.hpp"

namespace diloco::actors {
struct Runtime;
struct SupervisionEvent;
}  // namespace diloco::actors

/// Where `--http` listens: "PORT" (loopback) or "HOST:PORT" with HOST an IPv4 address,
/// "localhost" or "[IPv6]". Throws std::invalid_argument naming --http when it is not one.
struct HttpAddress {
  std::string host;
  int port = 0;
  static HttpAddress parse(const std::string& flag);
  /// "HOST:PORT" as given ("127.0.0.1:9100", "[::1]:9100"), for messages.
  std::string listen() const;
};

/// The run as an operator sees it. `islands` are the islands this process runs (a syncer
/// process runs none and reports the steps it heard of); `role` is "run", "syncer" or "site";
/// `actor_now` reads the actor clock (seconds).
class Monitor {
public:
  Monitor(const diloco::actors::Runtime& rt, std::string role, std::vector<int> islands,
          std::function<double()> actor_now);
  ~Monitor();
  Monitor(const Monitor&) = delete;
  Monitor& operator=(const Monitor&) = delete;

  /// From the event stream (any thread; a few counters and a short ring under one lock).
  void on(const diloco::Event& e);
  /// From the supervision trees (restarts per supervisor).
  void on(const diloco::actors::SupervisionEvent& e);
  /// A global round the watching thread evaluated.
  void on_round(std::uint64_t round, double train_loss, double eval_loss);
  /// Called by the watching thread on every tick: samples tokens and link bytes for rates.
  void sample();

  /// The Prometheus text exposition (format 0.0.4).
  std::string metrics() const;
  /// What the status page draws, as JSON.
  std::string status_json() const;

  struct Impl;  // the state (metrics.cpp)

private:
  std::unique_ptr<Impl> impl_;
};

/// An HTTP server (Boost.Beast, asynchronous on one thread of its own) serving `/`, `/status.json`
/// and `/metrics` of a monitor until destroyed. Its handlers only read; a slow or stuck client
/// holds a socket for at most 2 s, never the thread or a lock the run needs.
class HttpServer {
public:
  /// Listens on `address`; throws std::runtime_error naming --http when it cannot (a port in
  /// use, an address of no interface here).
  HttpServer(const HttpAddress& address, const Monitor& monitor);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;
  /// The port it listens on (the one chosen when asked for port 0).
  int port() const { return port_; }
  std::string url() const;

private:
  struct Impl;  // the io_context, the listener and the thread (metrics.cpp)
  std::unique_ptr<Impl> impl_;
  HttpAddress address_;
  int port_ = 0;
};

/// `--http` for one process: a monitor of its part of the run, put in `slot` (which the runtime's
/// event callback reads, so it is set before the tree is spawned), and the server serving it,
/// which logs its URL; nothing without an address. `role`, `islands` and `actor_now` are the
/// monitor's.
std::unique_ptr<HttpServer> serve_http(const std::optional<HttpAddress>& at, const diloco::actors::Runtime& rt,
                                       const std::string& role, std::vector<int> islands,
                                       std::function<double()> actor_now, std::shared_ptr<Monitor>& slot);

/// What the supervision trees report, for the monitor `m` (restarts per supervisor); empty
/// without a monitor.
std::function<void(const diloco::actors::SupervisionEvent&)> supervision_sink(const std::shared_ptr<Monitor>& m);
