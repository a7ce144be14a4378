// `diloco syncer CONFIG --replica NAME`: one replica of a replicated syncer ([[syncers]]).
//
// etcd decides who leads: every replica holds an etcd lease (net.lease_ms) and campaigns in the
// run's election (net.election) under it. While another replica leads, this one follows it: it
// proves its name to the leader's gateway through its own door and pulls every snapshot the
// leader keeps (each commit), writing it crash-safe to its state file. Once elected it leads: it
// resumes from that file as a restarted syncer would and serves sites on its [[syncers]]
// address, with its term (etcd's revision of its candidacy) in every session. It stops serving
// when its lease hold lapses (LeaseHold: half the lease without a renewal) and follows again.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <spdlog/spdlog.h>

#include "diloco/actors/remote.hpp"
#include "diloco/actors/run.hpp"
#include "diloco/actors/runtime.hpp"
#include "diloco/leadership.hpp"
#include "diloco/run_state.hpp"
#include "site_run.hpp"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_now() { return std::chrono::duration<double>(Clock::now().time_since_epoch()).count(); }

/// The replica's etcd lease, renewed by a thread of its own; the hold is judged on this
/// process's clock (LeaseHold), so a replica cut off from etcd stops leading before etcd could
/// elect another.
class LeaseKeeper {
public:
  /// `asked_at`: when the grant was asked for (the lease runs from no earlier than that).
  LeaseKeeper(diloco::Etcd& etcd, std::int64_t lease, double ttl_s, double asked_at)
      : etcd_(etcd), lease_(lease), hold_(ttl_s) {
    hold_.renewed(asked_at);
    thread_ = std::thread([this] { run(); });
  }
  ~LeaseKeeper() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  bool holds() const {
    std::lock_guard lk(mu_);
    return !lost_ && hold_.valid(seconds_now());
  }
  bool lost() const {
    std::lock_guard lk(mu_);
    return lost_;
  }
  std::int64_t lease() const { return lease_; }

private:
  void run() {
    while (!stop_) {
      const double sent = seconds_now();
      auto r = etcd_.keepalive(lease_);
      {
        std::lock_guard lk(mu_);
        if (r) hold_.renewed(sent);
        else if (r.error().reason.find("expired") != std::string::npos) lost_ = true;  // gone for good
      }
      if (lost_) return;
      const auto until = Clock::now() + std::chrono::duration<double>(hold_.keepalive_period());
      while (!stop_ && Clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  diloco::Etcd& etcd_;
  std::int64_t lease_;
  mutable std::mutex mu_;
  diloco::LeaseHold hold_;
  bool lost_ = false;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

/// Campaigns on a thread of its own (etcd's campaign blocks until elected).
class Candidacy {
public:
  Candidacy(const diloco::RunConfig& cfg, std::int64_t lease, std::string name) : etcd_(cfg.net.etcd) {
    thread_ = std::thread([this, election = cfg.net.election, lease, name] {
      auto r = etcd_.campaign(election, lease, name, &cancel_);
      std::lock_guard lk(mu_);
      if (r) won_ = *r;
      else why_ = r.error().message();
      done_ = true;
    });
  }
  ~Candidacy() {
    cancel_ = true;
    if (thread_.joinable()) thread_.join();
  }
  /// Elected: the leadership; failed: why (the lease expired, etcd unreachable).
  std::optional<diloco::Etcd::Leader> won() const {
    std::lock_guard lk(mu_);
    return won_;
  }
  std::optional<std::string> failed() const {
    std::lock_guard lk(mu_);
    return done_ && !won_ ? std::optional<std::string>(why_) : std::nullopt;
  }

private:
  diloco::Etcd etcd_;
  std::atomic<bool> cancel_{false};
  mutable std::mutex mu_;
  std::optional<diloco::Etcd::Leader> won_;
  std::string why_;
  bool done_ = false;
  std::thread thread_;
};

}  // namespace

int run_replica_process(const diloco::RunConfig& cfg_in, const NetFlags& f) {
  using namespace diloco;
  using namespace diloco::actors;
  RunConfig cfg = cfg_in;
  const int me = replica_index(cfg, f.replica);
  if (me < 0) {
    std::string known;
    for (const auto& r : cfg.syncers) known += (known.empty() ? "" : ", ") + r.name;
    throw ConfigError({"--replica: no replica \"" + f.replica + "\" in [[syncers]] (" +
                       (known.empty() ? std::string("the configuration has none") : "replicas: " + known) + ")"});
  }
  const auto& mine = cfg.syncers[static_cast<std::size_t>(me)];
  const std::string dir = f.state.empty() ? "diloco-state/" + mine.name : f.state;
  auto d = open_run_state(dir, cfg, "syncer.safetensors");
  if (!d) {
    spdlog::error("--state {}: {}. Use another directory for this configuration", dir, d.error().message());
    return 1;
  }
  cfg.syncer.checkpoint = d->state_path();
  // The leader counts its own copy towards a majority: it writes its state file at every commit
  // (before the commit's broadcast is released), as followers write before they acknowledge.
  if (cfg.syncer.snapshot_every != 1) {
    std::printf("replica %s: syncer.snapshot_every = 1 (was %ld): a replicated leader writes every commit\n",
                mine.name.c_str(), static_cast<long>(cfg.syncer.snapshot_every));
    cfg.syncer.snapshot_every = 1;
  }
  const std::string certs = f.certs.empty() ? cfg.net.certs : f.certs;
  std::optional<TlsFiles> tls;
  if (!f.insecure) tls = tls_files(certs, mine.name);
  const double ttl = cfg.net.lease_ms / 1000.0;
  Etcd etcd(cfg.net.etcd);
  Run layout(cfg);  // the model's layout and fragment plan, to check what the leader sends
  std::printf("diloco syncer replica %s (%zu replicas; leadership through etcd at %s, election \"%s\", lease %.1f s); "
              "state file %s\n",
              mine.name.c_str(), cfg.syncers.size(), cfg.net.etcd.c_str(), cfg.net.election.c_str(), ttl,
              cfg.syncer.checkpoint.c_str());
  std::fflush(stdout);
  auto say = [&](const std::string& s) {
    std::printf("replica %s: %s\n", mine.name.c_str(), s.c_str());
    std::fflush(stdout);
  };
  std::uint64_t held_round = 0;
  // What this replica holds, published in etcd under its lease (ELECTION.held/NAME): a replica
  // elected while another live one holds more commits resigns (newer_replica).
  auto held_in_state_file = [&]() -> std::uint64_t {
    auto cp = load_checkpoint(cfg.syncer.checkpoint, layout.layout_model->layout(), layout.plan);
    return cp ? commits_held(cp->rounds) : 0;
  };
  std::uint64_t held_commits = held_in_state_file();
  // Beside the election, not under it: every key under the election's name is a candidacy.
  const std::string held_prefix = cfg.net.election + ".held/";
  // What etcd shows of this replica (published_commits; none: not yet, or the last put failed).
  std::optional<std::uint64_t> published_commits;
  auto publish = [&](std::uint64_t n, std::int64_t lease) {
    auto ok = etcd.put(held_prefix + mine.name, std::to_string(n), lease);
    if (!ok) say("cannot publish what it holds: " + ok.error().message());
    if (ok) published_commits = n;
    else published_commits.reset();
    return ok.has_value();
  };
  auto release = [&](std::int64_t lease) {
    if (auto r = etcd.revoke(lease); !r) say("lease not revoked (it expires by itself): " + r.error().message());
  };
  std::string last_wait_why;
  // The lease outlives a resignation: what this replica holds stays visible while another
  // candidate is elected and looks (two replicas resigning in turn, each revoking its lease and
  // with it its count, would each find nobody beside it, for ever).
  std::unique_ptr<LeaseKeeper> keeper;
  auto drop_lease = [&] {
    if (keeper) release(keeper->lease());
    keeper.reset();
  };
  for (int attempt = 0;; ++attempt) {
    // A lease and a candidacy under it; while another leads, follow it.
    if (!keeper || keeper->lost()) {
      keeper.reset();
      const double asked_at = seconds_now();
      auto lease = etcd.grant(ttl);
      if (!lease) {
        if (attempt == 0 || attempt % 10 == 0) say("cannot reach etcd: " + lease.error().message() + "; retrying");
        if (attempt >= 60) {
          spdlog::error("replica {}: etcd unreachable for a minute: {}", mine.name, lease.error().message());
          return 1;
        }
        std::this_thread::sleep_for(std::chrono::seconds(1));
        continue;
      }
      keeper = std::make_unique<LeaseKeeper>(etcd, *lease, ttl, asked_at);
      published_commits.reset();  // a new lease: nothing of this replica is visible under it yet
    }
    // Published under the lease before campaigning (again, if the last put failed): an elected
    // replica that cannot see this one's count would resign for want of others.
    if (published_commits != held_commits && !publish(held_commits, keeper->lease())) {
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      continue;
    }
    attempt = 0;
    Candidacy candidacy(cfg, keeper->lease(), mine.name);
    bool over = false;
    std::uint64_t last_term = 0;
    while (!candidacy.won() && !candidacy.failed() && !keeper->lost()) {
      auto leader = etcd.leader(cfg.net.election);
      const int at = leader && *leader ? replica_index(cfg, (*leader)->value) : -1;
      if (at < 0 || at == me) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        continue;
      }
      const auto& them = cfg.syncers[static_cast<std::size_t>(at)];
      if ((*leader)->term != last_term) say("follows " + them.name + " (term " + std::to_string((*leader)->term) + ")");
      last_term = (*leader)->term;
      // Its own actor system and door per leader: the door dials only that replica.
      caf::actor_system_config sc;
      configure_runtime_system(sc, 1);
      configure_network(sc, cfg.net);
      caf::actor_system sys(sc);
      auto door = open_site_door(cfg, parse_endpoint(them.address), tls ? &*tls : nullptr, {},
                                 {{parse_endpoint(them.address), them.name}});
      FollowOptions fo;
      fo.name = mine.name;
      fo.tls = tls.has_value();
      if (tls) fo.cert_file = tls->cert, fo.key_file = tls->key;
      // A follower cut off from etcd stops acknowledging: its published count expires with its
      // lease, and a majority must not count on a copy nobody can see.
      fo.keep_going = [&] { return !candidacy.won() && keeper->holds(); };
      fo.on_update = [&](ReplicaUpdate& u) {
        if (!u.over.bytes.empty()) over = true;
        if (u.state.bytes.empty()) return true;
        const auto* p = reinterpret_cast<const std::byte*>(u.state.bytes.data());
        // What the leader sends is checked as any state file is before it replaces this one.
        auto cp = parse_checkpoint({p, u.state.bytes.size()}, layout.layout_model->layout(), layout.plan);
        if (!cp) {
          say("refused a snapshot from the leader: " + cp.error().message());
          return false;
        }
        auto ok = write_file_atomically(cfg.syncer.checkpoint,
                                        std::string_view(reinterpret_cast<const char*>(u.state.bytes.data()), u.state.bytes.size()));
        if (!ok) {
          say("snapshot not written: " + ok.error().message());
          return false;
        }
        if (u.round != held_round) say("holds round " + std::to_string(u.round) + " (term " + std::to_string(u.term) + ")");
        held_round = u.round;
        // Acknowledged only once etcd shows it (an elected replica must see this copy), and the
        // count moves only with a successful put, so a failed one is tried again with the resend.
        if (const auto n = commits_held(cp->rounds); n != published_commits) {
          if (!publish(n, keeper->lease())) return false;
          held_commits = n;
        }
        return true;
      };
      const std::string why = follow_leader(sys, door->port(), fo);
      if (over) {
        say("the leader says the run is over; done");
        drop_lease();
        return 0;
      }
      if (!candidacy.won()) {
        if (why.find("cannot reach") == std::string::npos) say("stopped following " + them.name + ": " + why);
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    }
    if (auto why = candidacy.failed()) {
      say("campaign ended: " + *why + "; campaigning again");
      drop_lease();  // its candidacy, if still there, must not lead with nobody serving
      continue;
    }
    if (keeper->lost()) {
      say("lost its etcd lease; campaigning again");
      continue;
    }
    const auto won = *candidacy.won();
    // Elected: lead only from the newest state a live replica holds, and only seeing what enough
    // others hold that every majority includes one of them (⌊n/2⌋ others): a round any majority
    // held is then in sight.
    auto held = etcd.list(held_prefix);
    std::vector<std::pair<std::string, std::string>> by_name;
    if (held)
      for (auto& [k, v] : *held)
        if (k.substr(held_prefix.size()) != mine.name) by_name.emplace_back(k.substr(held_prefix.size()), v);
    const std::size_t needed = cfg.syncers.size() / 2;
    std::optional<std::string> wait_why;
    if (!held) wait_why = "cannot read what the others hold (" + held.error().message() + ")";
    else if (by_name.size() < needed)
      wait_why = "sees what " + std::to_string(by_name.size()) + " other replica(s) hold, needs " + std::to_string(needed);
    else if (auto newer = newer_replica(held_commits, by_name, mine.name))
      wait_why = *newer + " holds more commits than its " + std::to_string(held_commits);
    if (wait_why) {
      if (*wait_why != last_wait_why)  // said once per reason, not at every election
        say("elected (term " + std::to_string(won.term) + ") but " + *wait_why + "; resigns and campaigns again");
      last_wait_why = *wait_why;
      // Resigning deletes the candidacy alone; the count published under the lease stays.
      if (auto r = etcd.resign(won); !r) {
        say("cannot resign (" + r.error().message() + "); gives up its lease instead");
        drop_lease();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      continue;
    }
    last_wait_why.clear();
    say("leads (term " + std::to_string(won.term) + "), from round " + std::to_string(held_round) +
        " held in its state file; serving on " + mine.address);
    Leadership lead;
    lead.term = won.term;
    lead.name = mine.name;
    lead.holds = [k = keeper.get()] { return k->holds(); };
    NetFlags lf = f;
    lf.endpoint = mine.address;
    const int code = run_syncer_process(cfg, lf, &lead);
    drop_lease();  // the next replica need not wait out the lease
    if (code != kDeposed) return code;
    // Deposed: follow whoever leads now, from what this replica holds (its state file, written at
    // every commit while it led).
    if (const auto n = held_in_state_file(); n > 0) held_commits = n;  // a file it cannot read leaves the count as it was
  }
}
