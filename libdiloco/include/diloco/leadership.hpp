// A replicated syncer: the rules of leadership as plain code (a leader's hold on its lease, the
// terms that fence off a deposed leader, which round a majority of replicas holds), and a client
// of etcd's v3 lease and election API over etcd's HTTP/JSON gateway. etcd decides who leads;
// nothing here votes.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "diloco/expected.hpp"

namespace diloco {

/// A leader's hold on its etcd lease, judged on its own clock (time is a parameter).
///
/// etcd expires a lease `ttl` after the last keepalive it received, and only then can another
/// replica win the election. A leader cut off from etcd must therefore stop serving before
/// that: it may act only while its last successful keepalive was *sent* less than ttl/2 ago.
/// Counting from the moment the request left (not when the answer came) keeps the rule safe
/// however long the answer took.
class LeaseHold {
public:
  explicit LeaseHold(double ttl_s) : ttl_(ttl_s) {}
  /// A keepalive sent at `sent_at` was answered: the lease lives on.
  void renewed(double sent_at) {
    if (sent_at > last_) last_ = sent_at;
  }
  /// May the leader still act at `now`?
  bool valid(double now) const { return last_ > -1e300 && now - last_ < ttl_ / 2.0; }
  /// How often to send keepalives: three per half lease, so two may fail without losing it.
  double keepalive_period() const { return ttl_ / 6.0; }
  double ttl() const { return ttl_; }

private:
  double ttl_;
  double last_ = -1e308;
};

/// Terms fence off deposed leaders. Each election's winner leads under a term that etcd makes
/// strictly larger than every earlier one (the revision at which its candidacy was created).
/// A site admits a session only from a term no older than the newest it has seen; anything
/// older comes from a leader that has been replaced. (A follower serves one leader, one term, at
/// a time: follow_leader ends when the term it follows changes.)
class TermFence {
public:
  /// True, and `term` becomes the newest seen, unless `term` is older than the newest.
  bool admit(std::uint64_t term) {
    if (term < newest_) return false;
    newest_ = term;
    return true;
  }
  std::uint64_t newest() const { return newest_; }

private:
  std::uint64_t newest_ = 0;
};

/// The newest round that a majority of `replicas` holds: the leader holds `leader_round`, each
/// follower the round it acknowledged last (`acks`, one per follower heard of). A round held by
/// a majority survives the loss of any minority, leader included, as long as each holds it on
/// disk (followers write before they acknowledge; a replicated leader writes every commit).
std::uint64_t majority_round(std::uint64_t leader_round, std::vector<std::uint64_t> acks, std::size_t replicas);

/// How far a syncer state has come: its commits, the sum of its fragments' rounds (every commit
/// raises one fragment's round by one, and a restore keeps them), comparable across leaders.
std::uint64_t commits_held(const std::vector<std::uint64_t>& fragment_rounds);

/// A newly elected replica must not lead from an older state than another live replica holds
/// (etcd elects the longest-waiting candidate, not the most up-to-date): `held` lists what each
/// replica published (name, commits held as text; keys of dead replicas expire with their
/// leases). Returns the name of a replica other than `me` that holds more commits than `mine`,
/// the most up-to-date one; the caller then resigns so that it can be elected.
std::optional<std::string> newer_replica(std::uint64_t mine, const std::vector<std::pair<std::string, std::string>>& held,
                                         const std::string& me);

/// Base64 (RFC 4648, with padding): etcd's gateway carries keys and values so.
std::string base64_encode(const std::string& bytes);
/// Decodes base64; nullopt on a character outside the alphabet or a bad length.
std::optional<std::string> base64_decode(const std::string& text);

/// A client of etcd's v3 API through its HTTP/JSON gateway (etcd 3.4: /v3/lease/*,
/// /v3/election/*), the way torch.distributed.elastic's etcd rendezvous reaches it. Each call
/// is one blocking HTTP request (libcurl). Errors name the endpoint and what failed.
class Etcd {
public:
  /// `endpoint`: "http://HOST:PORT" of etcd's client URL; `timeout_s` bounds every request but
  /// a campaign.
  explicit Etcd(std::string endpoint, double timeout_s = 5.0);

  /// A new lease of `ttl_s` seconds (rounded up to whole seconds, as etcd counts them).
  Expected<std::int64_t> grant(double ttl_s);
  /// Renews `lease`; returns the seconds it now has. An expired or unknown lease is an error.
  Expected<std::int64_t> keepalive(std::int64_t lease);
  /// Ends `lease` (and with it any leadership held under it).
  Status revoke(std::int64_t lease);

  /// Who leads an election: the leader's value (a replica's name), its key, and the term (the
  /// revision at which its candidacy was created).
  struct Leader {
    std::string value;
    std::string key;
    std::uint64_t term = 0;
    std::int64_t lease = 0;
  };
  /// Campaigns in `election` under `lease` with `value`, blocking until this candidacy leads.
  /// Ends early with an error when `cancel` turns true (checked every 100 ms) or the lease
  /// expires.
  Expected<Leader> campaign(const std::string& election, std::int64_t lease, const std::string& value,
                            const std::atomic<bool>* cancel = nullptr);
  /// The election's current leader, or nullopt when nobody leads.
  Expected<std::optional<Leader>> leader(const std::string& election);
  /// Gives up the leadership `l` (the next candidate wins at once).
  Status resign(const Leader& l);

  /// Sets `key` to `value`, attached to `lease` (0: none): it goes when the lease does.
  Status put(const std::string& key, const std::string& value, std::int64_t lease = 0);
  /// Every key under `prefix` with its value, in key order.
  Expected<std::vector<std::pair<std::string, std::string>>> list(const std::string& prefix);

  const std::string& endpoint() const { return endpoint_; }

private:
  Expected<std::string> post(const std::string& path, const std::string& body, double timeout_s,
                             const std::atomic<bool>* cancel);
  std::string endpoint_;
  double timeout_s_;
};

}  // namespace diloco
