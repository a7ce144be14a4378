// The front door (door.hpp): one thread splicing TLS connections from the network to CAF's
// loopback sockets, after the TLS handshake, the identity check and, for every header, the BASP
// checks of diloco::BaspFilter. Non-blocking sockets and poll(); OpenSSL 3 directly.
#include "diloco/actors/door.hpp"

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <stdexcept>
#include <thread>

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <linux/tcp.h>  // TCP_NODELAY, tcp_info with tcpi_bytes_acked
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

namespace diloco::actors {

namespace {

constexpr std::size_t chunk = 256 * 1024;  // bytes read per call and direction

double clock_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string ssl_errors() {
  std::string s;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    s += (s.empty() ? "" : "; ") + std::string(buf);
  }
  return s.empty() ? "connection closed" : s;
}

std::string address_of(const sockaddr_storage& sa) {
  char buf[INET6_ADDRSTRLEN] = "?";
  if (sa.ss_family == AF_INET) inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(sa).sin_addr, buf, sizeof buf);
  else if (sa.ss_family == AF_INET6)
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6&>(sa).sin6_addr, buf, sizeof buf);
  return buf;
}

bool same_socket_address(const sockaddr_storage& a, socklen_t al, const sockaddr_storage& b, socklen_t bl) {
  return al == bl && std::memcmp(&a, &b, al) == 0;
}

/// Whether the loopback peer of `fd` is a socket of this very process (a site's door serves
/// only its own CAF, not any local user who could borrow the site's identity).
bool peer_is_this_process(int fd) {
  sockaddr_storage peer{};
  socklen_t pl = sizeof peer;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &pl) != 0) return false;
  DIR* d = opendir("/proc/self/fd");
  if (!d) return false;
  bool found = false;
  while (auto* e = readdir(d)) {
    const int other = std::atoi(e->d_name);
    struct stat st {};
    if (other <= 2 || other == fd || fstat(other, &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    sockaddr_storage local{};
    socklen_t ll = sizeof local;
    if (getsockname(other, reinterpret_cast<sockaddr*>(&local), &ll) == 0 && same_socket_address(local, ll, peer, pl)) {
      found = true;
      break;
    }
  }
  closedir(d);
  return found;
}

struct Resolved {
  sockaddr_storage addr{};
  socklen_t len = 0;
};

Resolved resolve(const Endpoint& e, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  addrinfo* res = nullptr;
  const std::string port = std::to_string(e.port);
  const char* host = e.host.empty() ? (passive ? nullptr : "127.0.0.1") : e.host.c_str();
  if (int rc = getaddrinfo(host, port.c_str(), &hints, &res); rc != 0 || !res)
    throw std::runtime_error("cannot resolve " + e.host + ":" + port + ": " + gai_strerror(rc));
  Resolved r;
  std::memcpy(&r.addr, res->ai_addr, res->ai_addrlen);
  r.len = static_cast<socklen_t>(res->ai_addrlen);
  freeaddrinfo(res);
  return r;
}

void tune(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

struct Buffer {
  std::unique_ptr<std::byte[]> data = std::make_unique<std::byte[]>(chunk);
  std::size_t len = 0, at = 0;
  bool empty() const { return at == len; }
};

/// What a closed connection counts as, for the stats and the summarised log.
enum class Ending { normal, refused, evicted, bad_frame };

}  // namespace

struct Door::Impl {
  struct Conn {
    std::uint64_t id = 0;
    int outer = -1, inner = -1;
    SSL* ssl = nullptr;
    enum class State { connecting_outer, handshake, connecting_inner, spliced } state = State::handshake;
    std::string address;  // the network peer's address
    std::string peer;     // its proven identity, once spliced
    BaspFilter filter;
    Buffer to_inner, to_outer;
    bool outer_wants_write = false;  // TLS needs the socket writable to make progress
    bool counted = false;            // holds one of its peer's sessions
    bool dead = false;
    std::size_t target = 0;          // site role with targets: the replica it dialled
    std::size_t tried = 0;           // ... and how many it tried before it
    Conn(std::uint64_t i, BaspFilter f) : id(i), filter(std::move(f)) {}
  };

  DoorOptions o;
  SSL_CTX* ctx = nullptr;
  int listener = -1;
  int wake[2] = {-1, -1};
  std::uint16_t bound = 0;
  Resolved forward;
  std::vector<Resolved> targets;  // site role: DoorOptions::targets, resolved
  std::size_t current = 0;        // the target the next connection dials
  DoorAdmission admission;
  std::map<std::uint64_t, std::unique_ptr<Conn>> conns;
  std::uint64_t next_id = 1;
  std::map<std::string, std::size_t> sessions;  // per proven identity
  std::map<std::string, std::uint64_t> tally;   // refusals per kind, for the summarised log
  double listen_paused_until = 0.0;
  double bytes_checked_at = 0.0;
  std::uint64_t closed_sent = 0, closed_received = 0;
  mutable std::mutex mu;
  DoorStats st;
  std::atomic<bool> stop{false};
  std::thread thread;

  explicit Impl(DoorOptions opts) : o(std::move(opts)), admission(o.admission) {}

  ~Impl() {
    for (auto& [id, c] : conns) release(*c);
    if (listener >= 0) ::close(listener);
    for (int fd : wake)
      if (fd >= 0) ::close(fd);
    if (ctx) SSL_CTX_free(ctx);
  }

  bool syncer_role() const { return o.role == DoorOptions::Role::syncer; }

  void log(const std::string& s) const {
    if (o.log) o.log("door: " + s);
  }

  void setup_tls() {
    if (!o.tls) return;
    ctx = SSL_CTX_new(syncer_role() ? TLS_server_method() : TLS_client_method());
    if (!ctx) throw std::runtime_error("TLS: " + ssl_errors());
    SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    SSL_CTX_set_num_tickets(ctx, 0);  // no resumption: every session proves its identity afresh
    if (SSL_CTX_use_certificate_chain_file(ctx, o.tls->cert.c_str()) != 1)
      throw std::runtime_error("TLS: cannot use certificate " + o.tls->cert + ": " + ssl_errors());
    if (SSL_CTX_use_PrivateKey_file(ctx, o.tls->key.c_str(), SSL_FILETYPE_PEM) != 1 || SSL_CTX_check_private_key(ctx) != 1)
      throw std::runtime_error("TLS: cannot use key " + o.tls->key + ": " + ssl_errors());
    if (SSL_CTX_load_verify_locations(ctx, o.tls->ca.c_str(), nullptr) != 1)
      throw std::runtime_error("TLS: cannot load CA " + o.tls->ca + ": " + ssl_errors());
    // A peer must present a certificate chaining to the run's CA, with the extended key usage of
    // its side (OpenSSL checks clientAuth on a client's, serverAuth on a server's).
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  }

  void bind_listener() {
    const auto at = resolve(o.listen, true);
    listener = ::socket(at.addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (listener < 0) throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
    int one = 1;
    setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    const std::string where = o.listen.host + ":" + std::to_string(o.listen.port);
    if (::bind(listener, reinterpret_cast<const sockaddr*>(&at.addr), at.len) != 0)
      throw std::runtime_error("cannot listen on " + where + ": " + std::strerror(errno));
    if (::listen(listener, 1024) != 0) throw std::runtime_error("cannot listen on " + where + ": " + std::strerror(errno));
    sockaddr_storage got{};
    socklen_t gl = sizeof got;
    getsockname(listener, reinterpret_cast<sockaddr*>(&got), &gl);
    bound = ntohs(got.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6&>(got).sin6_port
                                            : reinterpret_cast<sockaddr_in&>(got).sin_port);
    if (pipe2(wake, O_NONBLOCK | O_CLOEXEC) != 0) throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  }

  // ---- ends of a connection ----

  // A site's door serves one process and logs every refusal; the syncer's, facing the network,
  // summarises floods.
  void note(const std::string& kind, const std::string& detail) {
    const auto n = ++tally[kind];
    if (!syncer_role() || n <= 5 || n % 100 == 0)
      log(kind + (n > 5 ? " (" + std::to_string(n) + " so far)" : "") + ": " + detail);
  }

  static std::uint64_t tcp_bytes(int fd, bool sent) {
    tcp_info ti{};
    socklen_t len = sizeof ti;
    if (fd < 0 || getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0) return 0;
    return sent ? ti.tcpi_bytes_acked : ti.tcpi_bytes_received;
  }

  void release(Conn& c) {
    closed_sent += tcp_bytes(c.outer, true);
    closed_received += tcp_bytes(c.outer, false);
    if (c.ssl) SSL_free(c.ssl);
    c.ssl = nullptr;
    for (int* fd : {&c.outer, &c.inner})
      if (*fd >= 0) ::close(*fd), *fd = -1;
  }

  void end(Conn& c, Ending how, const std::string& why) {
    if (c.dead) return;
    c.dead = true;
    admission.settle(c.id);
    if (c.counted)
      if (auto it = sessions.find(c.peer); it != sessions.end() && --it->second == 0) sessions.erase(it);
    if (c.state == Conn::State::spliced && how == Ending::normal)
      log("session of " + c.peer + " (" + c.address + ") ended: " + why);
    {
      std::lock_guard lk(mu);
      if (how == Ending::refused) ++st.refused;
      if (how == Ending::evicted) ++st.evicted;
      if (how == Ending::bad_frame) ++st.bad_frames;
    }
    // A replica that could not be reached or proven: the next connection tries the next one.
    if (!syncer_role() && !targets.empty() && c.state != Conn::State::spliced && c.target == current)
      current = (current + 1) % targets.size();
    if (how == Ending::refused) note("refused", c.address + ": " + why);
    if (how == Ending::evicted) note("closed a pending connection", c.address + ": " + why);
    if (how == Ending::bad_frame) note("closed a session for a bad frame", c.peer + " (" + c.address + "): " + why);
    release(c);
  }

  // ---- accepting ----

  void accept_all(double now) {
    for (int k = 0; k < 256; ++k) {
      sockaddr_storage sa{};
      socklen_t len = sizeof sa;
      const int fd = accept4(listener, reinterpret_cast<sockaddr*>(&sa), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EMFILE || errno == ENFILE) {
          // Out of descriptors: the oldest pending connection makes room, else wait a moment.
          if (admission.pending() > 0) {
            auto oldest = admission.expired(std::numeric_limits<double>::infinity()).front();
            end(*conns.at(oldest), Ending::evicted, "out of file descriptors");
          } else {
            listen_paused_until = now + 0.1;
          }
        }
        return;
      }
      tune(fd);
      const std::uint64_t id = next_id++;
      auto c = std::make_unique<Conn>(
          id, syncer_role() ? BaspFilter(BaspSender::client, o.max_payload, o.peer_messages)
                            : BaspFilter(BaspSender::server, o.max_payload));
      c->address = address_of(sa);
      for (auto old : admission.admit(id, c->address, now))
        if (auto it = conns.find(old); it != conns.end())
          end(*it->second, Ending::evicted, "too many connections waiting for their handshake");
      Conn& ref = *c;
      conns[id] = std::move(c);
      if (syncer_role()) {
        ref.outer = fd;
        if (ctx) {
          ref.ssl = SSL_new(ctx);
          SSL_set_fd(ref.ssl, fd);
          SSL_set_accept_state(ref.ssl);
        }
        ref.state = Conn::State::handshake;
        handshake(ref);
      } else {
        ref.inner = fd;
        if (!peer_is_this_process(fd)) {
          end(ref, Ending::refused, "a local connection from another process");
          continue;
        }
        dial_outer(ref);
      }
    }
  }

  void dial_outer(Conn& c) {
    c.target = current;
    const Resolved& to = targets.empty() ? forward : targets[current];
    const Endpoint& at = targets.empty() ? o.forward : o.targets[current].at;
    c.outer = ::socket(to.addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c.outer < 0) return end(c, Ending::refused, std::string("socket: ") + std::strerror(errno));
    tune(c.outer);
    c.address = at.host + ":" + std::to_string(at.port);
    if (::connect(c.outer, reinterpret_cast<const sockaddr*>(&to.addr), to.len) != 0 && errno != EINPROGRESS) {
      if (dial_next(c)) return;
      return end(c, Ending::refused, "cannot connect to the syncer at " + c.address + ": " + std::strerror(errno));
    }
    c.state = Conn::State::connecting_outer;
  }

  /// A replicated syncer: the replica dialled for `c` does not listen (it follows, or is down), so
  /// the same connection dials the next one at once, until every replica was tried.
  bool dial_next(Conn& c) {
    if (targets.empty() || ++c.tried >= targets.size()) return false;
    if (c.outer >= 0) ::close(c.outer), c.outer = -1;
    current = (c.target + 1) % targets.size();
    dial_outer(c);
    return true;
  }

  void dial_inner(Conn& c) {
    c.inner = ::socket(forward.addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c.inner < 0) return end(c, Ending::refused, std::string("socket: ") + std::strerror(errno));
    tune(c.inner);
    if (::connect(c.inner, reinterpret_cast<const sockaddr*>(&forward.addr), forward.len) != 0 && errno != EINPROGRESS)
      return end(c, Ending::refused, std::string("cannot reach the local endpoint: ") + std::strerror(errno));
    c.state = Conn::State::connecting_inner;
  }

  /// site role: the name the syncer (replica) dialled for `c` must prove.
  std::string server_name(const Conn& c) const {
    if (!o.targets.empty()) return o.targets[c.target].name;
    return o.peers.empty() ? std::string() : o.peers.front();
  }

  static bool connected(int fd, std::string* why) {
    int err = 0;
    socklen_t len = sizeof err;
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
    if (err != 0) *why = std::strerror(err);
    return err == 0;
  }

  // ---- TLS handshake and identity ----

  void handshake(Conn& c) {
    if (!ctx) return proven(c, "");
    ERR_clear_error();
    const int r = SSL_do_handshake(c.ssl);
    if (r == 1) {
      std::string name;
      if (syncer_role()) {
        X509* cert = SSL_get0_peer_certificate(c.ssl);
        char cn[256] = "";
        if (cert) X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, cn, sizeof cn);
        name = cn;
        if (name.empty() || (!o.any_peer && std::find(o.peers.begin(), o.peers.end(), name) == o.peers.end()))
          return end(c, Ending::refused, "certificate CN=" + name + " is not a site of this run");
      } else {
        name = server_name(c);  // checked by SSL_set1_host
      }
      return proven(c, name);
    }
    const int e = SSL_get_error(c.ssl, r);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
      c.outer_wants_write = e == SSL_ERROR_WANT_WRITE;
      return;
    }
    std::string why = ssl_errors();
    if (const long v = SSL_get_verify_result(c.ssl); v != X509_V_OK)
      why = std::string("certificate not trusted: ") + X509_verify_cert_error_string(v);
    end(c, Ending::refused, "TLS handshake failed: " + why);
  }

  void proven(Conn& c, const std::string& name) {
    if (!name.empty() && sessions[name] >= o.sessions_per_peer)
      return end(c, Ending::refused, name + " already holds " + std::to_string(sessions[name]) + " sessions");
    admission.settle(c.id);
    c.peer = name.empty() ? "an unproven peer" : name;
    ++sessions[c.peer];
    c.counted = true;
    {
      std::lock_guard lk(mu);
      ++st.accepted;
    }
    if (syncer_role()) {
      log(c.address + (ctx ? " proved it is " + name : " connected (insecure: identity not checked)"));
      dial_inner(c);
    } else {
      log(std::string("connected to the syncer at ") + c.address +
          (ctx ? " (TLS 1.3, server proven as " + name + ")" : " (INSECURE)"));
      c.state = Conn::State::spliced;
    }
  }

  // ---- splicing ----

  // Bytes from the network side: > 0 read, 0 nothing now, < 0 closed (why set).
  long read_outer(Conn& c, std::byte* buf, std::size_t n, std::string* why) {
    if (!c.ssl) {
      const auto r = ::recv(c.outer, buf, n, 0);
      if (r > 0) return r;
      if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return 0;
      *why = r == 0 ? "closed by the peer" : std::strerror(errno);
      return -1;
    }
    ERR_clear_error();
    const int r = SSL_read(c.ssl, buf, static_cast<int>(n));
    if (r > 0) return r;
    switch (SSL_get_error(c.ssl, r)) {
      case SSL_ERROR_WANT_READ: return 0;
      case SSL_ERROR_WANT_WRITE: c.outer_wants_write = true; return 0;
      case SSL_ERROR_ZERO_RETURN: *why = "closed by the peer"; return -1;
      default: *why = "TLS: " + ssl_errors(); return -1;
    }
  }

  long write_outer(Conn& c, const std::byte* buf, std::size_t n, std::string* why) {
    if (!c.ssl) {
      const auto r = ::send(c.outer, buf, n, MSG_NOSIGNAL);
      if (r >= 0) return r;
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return 0;
      *why = std::strerror(errno);
      return -1;
    }
    ERR_clear_error();
    const int r = SSL_write(c.ssl, buf, static_cast<int>(std::min<std::size_t>(n, 1 << 30)));
    if (r > 0) {
      c.outer_wants_write = false;
      return r;
    }
    switch (SSL_get_error(c.ssl, r)) {
      case SSL_ERROR_WANT_WRITE: c.outer_wants_write = true; return 0;
      case SSL_ERROR_WANT_READ: return 0;
      default: *why = "TLS: " + ssl_errors(); return -1;
    }
  }

  // Moves what can move in both directions; returns true when it stopped with work left.
  bool pump(Conn& c) {
    std::string why;
    for (int round = 0; round < 16; ++round) {
      bool moved = false;
      if (c.to_inner.empty()) {
        const long n = read_outer(c, c.to_inner.data.get(), chunk, &why);
        if (n < 0) return end(c, Ending::normal, why), false;
        c.to_inner.len = static_cast<std::size_t>(n);
        c.to_inner.at = 0;
        if (n > 0) {
          if (auto ok = c.filter.feed({c.to_inner.data.get(), c.to_inner.len}); !ok)
            return end(c, Ending::bad_frame, ok.error().reason), false;
          moved = true;
        }
      }
      if (!c.to_inner.empty()) {
        const auto r = ::send(c.inner, c.to_inner.data.get() + c.to_inner.at, c.to_inner.len - c.to_inner.at, MSG_NOSIGNAL);
        if (r > 0) c.to_inner.at += static_cast<std::size_t>(r), moved = true;
        else if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
          return end(c, Ending::normal, std::string("local side: ") + std::strerror(errno)), false;
      }
      if (c.to_outer.empty()) {
        const auto r = ::recv(c.inner, c.to_outer.data.get(), chunk, 0);
        if (r == 0) return end(c, Ending::normal, "closed locally"), false;
        if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
          return end(c, Ending::normal, std::string("local side: ") + std::strerror(errno)), false;
        c.to_outer.len = r > 0 ? static_cast<std::size_t>(r) : 0;
        c.to_outer.at = 0;
        moved = moved || r > 0;
      }
      if (!c.to_outer.empty()) {
        const long n = write_outer(c, c.to_outer.data.get() + c.to_outer.at, c.to_outer.len - c.to_outer.at, &why);
        if (n < 0) return end(c, Ending::normal, why), false;
        c.to_outer.at += static_cast<std::size_t>(n);
        moved = moved || n > 0;
      }
      if (!moved) return c.ssl && SSL_pending(c.ssl) > 0 && c.to_inner.empty();
    }
    return true;
  }

  void step(Conn& c) {
    std::string why;
    switch (c.state) {
      case Conn::State::connecting_outer:
        if (!connected(c.outer, &why)) {
          if (dial_next(c)) return;
          return end(c, Ending::refused, "cannot connect to the syncer at " + c.address + ": " + why);
        }
        if (ctx) {
          c.ssl = SSL_new(ctx);
          SSL_set_fd(c.ssl, c.outer);
          SSL_set_connect_state(c.ssl);
          if (const auto name = server_name(c); !name.empty()) {
            SSL_set1_host(c.ssl, name.c_str());  // the server must be the syncer named in the config
            SSL_set_tlsext_host_name(c.ssl, name.c_str());
          }
        }
        c.state = Conn::State::handshake;
        return handshake(c);
      case Conn::State::handshake: return handshake(c);
      case Conn::State::connecting_inner:
        if (!connected(c.inner, &why)) return end(c, Ending::refused, "cannot reach the local endpoint: " + why);
        c.state = Conn::State::spliced;
        return;
      case Conn::State::spliced: return;
    }
  }

  // ---- the loop ----

  void run() {
    std::vector<pollfd> fds;
    std::vector<Conn*> owner;
    bool busy = false;
    while (!stop.load()) {
      const double now = clock_s();
      fds.clear();
      owner.clear();
      fds.push_back({wake[0], POLLIN, 0});
      owner.push_back(nullptr);
      if (now >= listen_paused_until) {
        fds.push_back({listener, POLLIN, 0});
        owner.push_back(nullptr);
      }
      for (auto& [id, cp] : conns) {
        Conn& c = *cp;
        short out = 0, in = 0;
        switch (c.state) {
          case Conn::State::connecting_outer: out = POLLOUT; break;
          case Conn::State::handshake: out = c.outer_wants_write ? POLLOUT : POLLIN; break;
          case Conn::State::connecting_inner: in = POLLOUT; break;
          case Conn::State::spliced:
            out = static_cast<short>((c.to_inner.empty() ? POLLIN : 0) |
                                     (!c.to_outer.empty() || c.outer_wants_write ? POLLOUT : 0));
            in = static_cast<short>((c.to_outer.empty() ? POLLIN : 0) | (!c.to_inner.empty() ? POLLOUT : 0));
            break;
        }
        if (c.outer >= 0) fds.push_back({c.outer, out, 0}), owner.push_back(&c);
        if (c.inner >= 0 && c.state != Conn::State::connecting_outer && c.state != Conn::State::handshake)
          fds.push_back({c.inner, in, 0}), owner.push_back(&c);
      }
      double wait = std::min(0.1, admission.next_deadline() - now);
      if (busy) wait = 0.0;
      ::poll(fds.data(), fds.size(), static_cast<int>(std::ceil(std::max(0.0, wait) * 1000)));
      if (fds[0].revents & POLLIN) {
        char b[64];
        while (::read(wake[0], b, sizeof b) > 0) {
        }
      }
      if (stop.load()) break;
      const double t = clock_s();
      if (fds.size() > 1 && fds[1].fd == listener && (fds[1].revents & POLLIN)) accept_all(t);
      // Advance every connection whose socket reported something; pump every spliced one.
      for (std::size_t k = 0; k < fds.size(); ++k)
        if (owner[k] && fds[k].revents && !owner[k]->dead && owner[k]->state != Conn::State::spliced) step(*owner[k]);
      busy = false;
      for (auto& [id, cp] : conns)
        if (!cp->dead && cp->state == Conn::State::spliced) busy = pump(*cp) || busy;
      for (auto id : admission.expired(t))
        if (auto it = conns.find(id); it != conns.end())
          end(*it->second, Ending::evicted, "no handshake within " + std::to_string(o.admission.handshake_s) + " s");
      std::erase_if(conns, [](const auto& kv) { return kv.second->dead; });
      if (t - bytes_checked_at > 0.25) {
        bytes_checked_at = t;
        std::uint64_t sent = closed_sent, received = closed_received;
        for (auto& [id, cp] : conns) sent += tcp_bytes(cp->outer, true), received += tcp_bytes(cp->outer, false);
        std::lock_guard lk(mu);
        st.bytes_sent = sent;
        st.bytes_received = received;
      }
    }
  }
};

std::unique_ptr<Door> Door::open(DoorOptions o) {
  // A server holds a descriptor per waiting connection: take the process's hard limit.
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    setrlimit(RLIMIT_NOFILE, &lim);
  }
  auto impl = std::make_unique<Impl>(std::move(o));
  impl->setup_tls();
  if (impl->o.targets.empty()) impl->forward = resolve(impl->o.forward, false);
  for (const auto& t : impl->o.targets) impl->targets.push_back(resolve(t.at, false));
  impl->bind_listener();
  Impl* p = impl.get();
  impl->thread = std::thread([p] {
    // OpenSSL writes to the socket with write(2), not send(MSG_NOSIGNAL): a peer that closes
    // while TLS answers it (a ClientHello and then FIN is enough) would raise SIGPIPE, whose
    // default action ends the whole process. That signal is directed at the writing thread, so
    // blocking it here turns it into the EPIPE the door already handles, without changing the
    // signal disposition of the process that links the library.
    sigset_t pipe;
    sigemptyset(&pipe);
    sigaddset(&pipe, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe, nullptr);
    p->run();
  });
  return std::unique_ptr<Door>(new Door(std::move(impl)));
}

Door::Door(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Door::~Door() {
  impl_->stop.store(true);
  const char b = 1;
  [[maybe_unused]] auto r = ::write(impl_->wake[1], &b, 1);
  if (impl_->thread.joinable()) impl_->thread.join();
}

std::uint16_t Door::port() const { return impl_->bound; }

DoorStats Door::stats() const {
  std::lock_guard lk(impl_->mu);
  return impl_->st;
}

}  // namespace diloco::actors
