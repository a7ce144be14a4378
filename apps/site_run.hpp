// `diloco syncer` and `diloco site`: the syncer and a site's islands in separate processes,
// joined over CAF's io middleman with mutual TLS (actors/remote.hpp).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "diloco/config.hpp"

struct NetFlags {
  std::string config;    // the topology file, for the printed join commands
  std::string endpoint;  // syncer: --listen; site: --connect ("" = net.listen)
  std::string certs;     // "" = net.certs
  bool insecure = false;
  std::string state;     // --state: the state directory (syncer: diloco-state when ""; site: none)
  bool fresh = false;    // syncer: an unusable state file is moved aside (.corrupt-N), not refused
  std::string metrics;   // syncer: JSON lines (rounds and commits)
  std::string site;      // site: its name
  int max_attempts = 0;  // site: failed connection attempts in a row before giving up (0: never)
  std::string http;      // --http: metrics and status page ([HOST:]PORT; "" = off)
  std::string replica;   // syncer: --replica NAME, one of [[syncers]] (replicated syncer)
  bool join = false;     // site: --join, a site not in the config takes open islands (net.allow_join)
  int join_islands = 1;  // site: --islands N with --join
  int chips = 0;         // site: --chips C, chips per island of this site (0: the config's)
};

/// A replicated syncer's leader (apps/replica_run.cpp): its term, whether it still holds its
/// lease, and the replicas that may follow it.
struct Leadership {
  std::uint64_t term = 0;
  std::string name;
  std::function<bool()> holds;
};
/// run_syncer_process's exit code when its leadership ended before the run did.
inline constexpr int kDeposed = 75;

/// Runs the syncer alone and publishes it; returns when every island has finished its steps.
int run_syncer_process(diloco::RunConfig cfg, const NetFlags& f, const Leadership* lead = nullptr);
/// `diloco syncer CONFIG --replica NAME`: follows the leader (pulling every commit into its state
/// directory) until etcd elects it, then leads; again a follower if it loses its lease.
int run_replica_process(const diloco::RunConfig& cfg, const NetFlags& f);
/// Runs one site's islands and chips, connected to the syncer; returns when they finish.
int run_site_process(diloco::RunConfig cfg, const NetFlags& f);
