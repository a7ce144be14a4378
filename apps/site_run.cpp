// `diloco syncer` and `diloco site`: the syncer and each site's islands in their own processes.
// The syncer process publishes its gateway and prints how to join; a site process connects,
// proves its identity, and runs its islands under their supervisors (actors/remote.hpp).
#include "site_run.hpp"
#include "metrics.hpp"
#include "report.hpp"
#include "watch.hpp"

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include <signal.h>


#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/exit_reason.hpp>
#include <caf/send.hpp>
#include <spdlog/spdlog.h>

#include "diloco/actors/remote.hpp"
#include "diloco/actors/runtime.hpp"
#include "diloco/run_state.hpp"
#include "diloco/syncer_core.hpp"

namespace {

using Clock = std::chrono::steady_clock;

/// The actor clock of `sys`, in seconds (what the monitor stamps its samples with).
std::function<double()> actor_clock(caf::actor_system& sys) {
  return [&sys] { return actor_seconds(sys); };
}

/// SIGTERM or SIGINT asks a site to leave gracefully (the signal's number; 0: none yet). A
/// second one ends the process at once, as the signal would have.
std::atomic<int> leave_signal{0};

extern "C" void on_leave_signal(int sig) {
  if (leave_signal.exchange(sig) == 0) return;
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

void catch_leave_signals() {
  struct sigaction sa {};
  sa.sa_handler = on_leave_signal;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGTERM, SIGINT}) sigaction(sig, &sa, nullptr);
}

std::string list(const std::vector<int>& v) {
  std::string s;
  for (int x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s;
}

void refuse_mode(const diloco::RunConfig& cfg) {
  if (cfg.train.mode == diloco::TrainMode::ddp)
    throw diloco::ConfigError({"train.mode: \"ddp\" runs in one process; the syncer and sites need \"decoupled\", "
                               "\"diloco\" or \"streaming\""});
  // Each process counts the tokens of its own islands only.
  if (cfg.train.budget == diloco::Budget::total_tokens)
    throw diloco::ConfigError({"train.budget: \"total_tokens\" runs in one process; the syncer and sites need "
                               "\"island_steps\""});
}

std::optional<diloco::actors::TlsFiles> tls_of(const NetFlags& f, const diloco::RunConfig& cfg, const std::string& who) {
  if (f.insecure) {
    const char* warn =
        "WARNING: --insecure: no TLS. Frames cross the network in clear text, any process that can reach the "
        "port can speak for any site, and CAF's parser reads what it sends (headers checked by the door only). "
        "Use it only on a trusted, private network.";
    std::fprintf(stderr, "\n*** %s ***\n\n", warn);
    spdlog::warn("{}", warn);
    return std::nullopt;
  }
  return diloco::actors::tls_files(f.certs.empty() ? cfg.net.certs : f.certs, who);
}

/// What the syncer tells its sites when its watch ended `end`.
diloco::RunOver run_over_of(const WatchEnd& end) {
  using diloco::RunOutcome;
  switch (end.how) {
    case WatchEnd::How::tree_failed: return {RunOutcome::failed, "the syncer's supervision tree stopped"};
    case WatchEnd::How::stopped: return {RunOutcome::stopped, end.why};
    case WatchEnd::How::final_sync_expired:
      return {RunOutcome::finished, "every island trained its budget; the final sync expired"};
    case WatchEnd::How::done: break;
  }
  return {RunOutcome::finished, "every island finished"};
}

/// After the run ended, the syncer stays for the sites it has not told yet (a site whose
/// islands all finished needs no telling): a site that lost its session notices within
/// net.timeout_ms and dials again within net.reconnect_max_ms, so it waits at most that long.
/// Then a moment for the last words to leave.
void linger_until_told(const diloco::actors::Runtime& rt, const diloco::NetConfig& net) {
  const auto until = Clock::now() + std::chrono::duration<double, std::milli>(net.timeout_ms + net.reconnect_max_ms);
  while (!diloco::actors::every_site_told(rt) && Clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
}

}  // namespace

int run_syncer_process(diloco::RunConfig cfg, const NetFlags& f, const Leadership* lead) {
  using namespace diloco;
  using namespace diloco::actors;
  refuse_mode(cfg);
  const auto at = parse_endpoint(f.endpoint.empty() ? cfg.net.listen : f.endpoint);
  const std::string certs = f.certs.empty() ? cfg.net.certs : f.certs;
  const auto tls = tls_of(f, cfg, lead ? lead->name : cfg.net.syncer_name);
  // kill -9 of this process loses at most snapshot_every rounds: the snapshot is on disk.
  // A state directory holds the run's manifest: one of another configuration is refused.
  if (cfg.syncer.checkpoint.empty()) {
    const std::string dir = f.state.empty() ? "diloco-state" : f.state;
    auto d = open_run_state(dir, cfg, "syncer.safetensors");
    if (!d) {
      spdlog::error("--state {}: {}. Use another directory for this configuration", dir, d.error().message());
      return 1;
    }
    cfg.syncer.checkpoint = d->state_path();
  }
  if (cfg.syncer.snapshot_every <= 0)
    spdlog::warn("syncer.snapshot_every = 0: no snapshots, a restarted syncer starts from the initial parameters");
  JsonLines jsonl;
  if (!f.metrics.empty()) jsonl.open(f.metrics, true);  // a restarted syncer appends
  auto tl = std::make_shared<Timeline>();
  struct Commit {
    std::uint64_t round;
    int fragment;
    std::vector<int> islands;
    double t;
  };
  auto mu = std::make_shared<std::mutex>();
  auto commits = std::make_shared<std::deque<Commit>>();
  const auto http_at = f.http.empty() ? std::optional<HttpAddress>() : HttpAddress::parse(f.http);
  auto monitor = std::make_shared<std::shared_ptr<Monitor>>();  // --http, set before the tree is spawned
  auto rt = std::make_shared<Runtime>(cfg, [tl, mu, commits, monitor](const Event& e) {
    if (*monitor) (*monitor)->on(e);
    if (e.kind == Event::Kind::commit) {  // printed by the watching thread, with its JSON line
      std::lock_guard lk(*mu);
      commits->push_back({e.round, e.fragment, e.islands, tl->since()});
    } else if (auto line = syncer_line(e)) {
      tl->line(*line);
    }
  });
  if (lead) {
    rt->leading = lead->holds;
    rt->leader_term = lead->term;
    rt->hold_until_replicated = cfg.net.replicate_before_broadcast && cfg.syncers.size() > 1;
  }
  // A state file the syncer cannot resume from is refused before anything listens (the syncer
  // actor refuses it too, also at a restart); --fresh moves it aside and starts from round 0.
  // Open islands: vacant until a joiner takes them, except those the state file says a joiner was
  // training (they wait for it, GatewayOptions::reserved). The gateway keeps these flags from here on.
  std::vector<int> reserved;
  const auto open = open_islands(cfg);
  for (int i : open) rt->gateway.vacant[static_cast<std::size_t>(i)] = true;
  if (auto st = load_syncer_state(cfg.syncer.checkpoint, rt->layout_model->layout(), rt->plan, cfg.train.islands);
      st && *st && cfg.net.allow_join) {
    for (int i : islands_in_progress(**st, cfg.train.islands))
      if (std::find(open.begin(), open.end(), i) != open.end()) {
        reserved.push_back(i);
        rt->gateway.vacant[static_cast<std::size_t>(i)] = false;
      }
  } else if (!st) {
    if (!f.fresh) {
      spdlog::error("unusable syncer state file, refusing to start over it: {}. Keep it for a run that can read it, "
                    "or start over with --fresh (moves it aside)",
                    st.error().message());
      return 1;
    }
    auto moved = move_aside(cfg.syncer.checkpoint);
    if (!moved) {
      spdlog::error("--fresh: {}", moved.error().message());
      return 1;
    }
    spdlog::warn("--fresh: unusable syncer state file ({}) moved to {}; starting from round 0", st.error().message(),
                 *moved);
  }
  auto model = make_model(cfg.model);
  const auto eval = rt->corpus.eval_windows(cfg.model.seq_len, cfg.train.eval_windows);
  const auto round_eval = rt->corpus.progress_windows(cfg.model.seq_len, cfg.train.round_eval_windows);

  caf::actor_system_config sc;
  configure_runtime_system(sc, scheduler_threads(cfg));
  configure_network(sc, cfg.net);
  caf::actor_system sys(sc);
  auto server = serve_http(http_at, *rt, "syncer", {}, actor_clock(sys), *monitor);
  SpawnSet only_syncer;
  only_syncer.syncer = true;
  only_syncer.all_islands = false;
  auto root = spawn_runtime(sys, rt, supervision_sink(*monitor), only_syncer);
  GatewayOptions gw_options{tls ? tls->ca : std::string(), [tl](const std::string& s) { tl->line(s); }};
  if (lead) {
    gw_options.term = lead->term;
    for (const auto& r : cfg.syncers) gw_options.replicas.push_back(r.name);
  }
  gw_options.reserved = reserved;
  auto gateway = spawn_gateway(sys, rt, gw_options);
  // CAF listens on loopback only; the door faces the network and splices proven peers to it.
  auto caf_port = publish_gateway(gateway);
  std::unique_ptr<Door> door;
  std::string door_error;
  if (caf_port) {
    try {
      door = open_syncer_door(cfg, rt->plan, at, *caf_port, tls ? &*tls : nullptr, [tl](const std::string& s) { tl->line(s); },
                              gw_options.receivers);
    } catch (const std::exception& e) {
      door_error = e.what();
    }
  } else {
    door_error = "cannot publish on loopback: " + sys.render(caf_port.error());
  }
  if (!door) {
    spdlog::error("cannot listen on {}:{}: {}", at.host, at.port, door_error);
    caf::anon_send_exit(gateway, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(root, caf::exit_reason::user_shutdown);
    return 1;
  }
  const auto port = door->port();
  const std::string addr = at.host + ":" + std::to_string(port);
  std::printf("diloco syncer: listening on %s (%s); snapshots every %ld rounds to %s\n", addr.c_str(),
              tls ? ("mutual TLS, peers must hold a certificate of " + tls->ca).c_str() : "INSECURE, no TLS",
              static_cast<long>(cfg.syncer.snapshot_every), cfg.syncer.checkpoint.c_str());
  std::printf("%d sites, %d islands, %ld steps, H=%d, P=%d\n", site_count(cfg), cfg.train.islands, cfg.train.steps,
              cfg.train.H, rt->P());
  const std::string config = f.config.empty() ? "CONFIG" : f.config;
  if (lead) std::printf("sites find the leader among [[syncers]]; join with:\n");
  else std::printf("join with:\n");
  if (cfg.net.allow_join && !open.empty())
    std::printf("  diloco site %s --site NAME --join --islands N%s%s   # a site not in the config: open islands %s\n",
                config.c_str(), lead ? "" : (" --connect " + addr).c_str(),
                f.insecure ? " --insecure" : (" --certs " + certs).c_str(), list(open).c_str());
  for (int s = 0; s < site_count(cfg); ++s)
    if (lead)
      std::printf("  diloco site %s --site %s%s   # islands %s\n", config.c_str(), site_name(cfg, s).c_str(),
                  f.insecure ? " --insecure" : (" --certs " + certs).c_str(), list(islands_of_site(cfg, s)).c_str());
    else
      std::printf("  diloco site %s --site %s --connect %s%s   # islands %s\n", config.c_str(), site_name(cfg, s).c_str(),
                  addr.c_str(), f.insecure ? " --insecure" : (" --certs " + certs).c_str(),
                  list(islands_of_site(cfg, s)).c_str());
  std::fflush(stdout);
  // The held-out loss of the initial parameters is measured once the syncer serves: a restarted
  // syncer takes its sites back at once instead of after a full evaluation (seconds on a busy
  // machine, while every site waits).
  // A replica taking over mid-run does not measure it again (seconds during which its commits
  // would wait to be printed); the first leader did.
  const bool taking_over = lead && std::filesystem::exists(cfg.syncer.checkpoint);
  const double initial_eval = taking_over ? NAN : evaluate(*model, rt->initial, eval);
  if (taking_over) std::printf("initial eval loss: measured by the first leader (this replica takes over)\n");
  else std::printf("initial eval loss %.4f\n", initial_eval);
  std::fflush(stdout);
  jsonl.write(Json{{"event", "start"}, {"port", port}, {"initial_eval_loss", initial_eval}});

  auto tree_failed = std::make_shared<std::atomic<bool>>(false);
  root->attach_functor([tree_failed](const caf::error&) { tree_failed->store(true); });
  // With the final sync the run is over when every island said it finished (its last
  // contributions are in and commit at once); the syncer waits for that at most
  // train.final_sync_s after the last island's last step.
  std::uint64_t last_round = 0;
  double last_eval = initial_eval;
  const auto start = Clock::now();
  WatchRules rules;
  rules.done = [&] {
    if (!rt->final_sync()) return rt->trained();
    for (std::size_t i = 0; i < rt->syncer.finished.size(); ++i)
      if (!rt->syncer.finished[i].load() && !rt->gateway.vacant[i].load()) return false;
    return true;
  };
  rules.trained = [&] { return rt->trained(); };
  rules.final_sync_s = cfg.train.final_sync_s;
  rules.linger_s = 0.5;
  rules.failed = [&] { return tree_failed->load(); };
  rules.stopped = [&]() -> std::optional<std::string> {
    if (lead && !lead->holds()) return "deposed: lost the etcd lease of term " + std::to_string(lead->term);
    return rt->stopped();
  };
  const auto end = watch(rules, [&] {
    std::deque<Commit> cs;
    {
      std::lock_guard lk(*mu);
      cs.swap(*commits);
    }
    for (const auto& c : cs) {
      std::printf("%8.2fs  commit round %llu fragment %d: islands %s\n", c.t, static_cast<unsigned long long>(c.round),
                  c.fragment, list(c.islands).c_str());
      jsonl.write(Json{{"event", "commit"}, {"round", c.round}, {"fragment", c.fragment}, {"islands", c.islands}, {"t", c.t}});
    }
    for (const auto& [round, global] : rt->syncer.take_new_rounds()) {
      last_eval = evaluate(*model, global, round_eval);
      last_round = round;
      std::printf("%8.2fs  round %llu eval loss %.4f\n", tl->since(), static_cast<unsigned long long>(round), last_eval);
      jsonl.write(Json{{"event", "round"}, {"round", round}, {"eval_loss", last_eval}, {"t", tl->since()}});
      if (*monitor) (*monitor)->on_round(round, NAN, last_eval);
    }
    if (*monitor) (*monitor)->sample();
    std::fflush(stdout);
  });
  if (lead && end.how == WatchEnd::How::stopped && !lead->holds()) {
    // Deposed: another replica may lead by now. Nothing more is committed or told (the run is
    // not over); the door closes, the sites move on to the leader, and this replica follows again.
    std::printf("replica %s: %s; stops serving\n", lead->name.c_str(), end.why.c_str());
    std::fflush(stdout);
    door.reset();
    caf::anon_send_exit(gateway, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(root, caf::exit_reason::user_shutdown);
    return kDeposed;
  }
  // The sites are told that the run is over (those in session now, the others when they come
  // back), so that none retries for ever against a syncer that is gone.
  const RunOver over = run_over_of(end);
  tell_run_over(gateway, over, rt->leader_term);
  const auto told_all = [&] {
    linger_until_told(*rt, cfg.net);
    int sites = 0;
    for (const auto& t : rt->gateway.told_over) sites += t.load() ? 1 : 0;
    std::printf("run over (%s): %d sites told (%llu run-over frames sent)\n", std::string(to_string(over.outcome)).c_str(),
                sites, static_cast<unsigned long long>(rt->gateway.run_over_sent.load()));
    std::fflush(stdout);
  };
  switch (end.how) {
    case WatchEnd::How::tree_failed:
      spdlog::error("the syncer's supervision tree stopped");
      told_all();
      caf::anon_send_exit(gateway, caf::exit_reason::user_shutdown);
      return 1;
    case WatchEnd::How::stopped:
      spdlog::error("run stopped: {}", end.why);
      told_all();
      caf::anon_send_exit(gateway, caf::exit_reason::user_shutdown);
      caf::anon_send_exit(root, caf::exit_reason::user_shutdown);
      return 1;
    case WatchEnd::How::final_sync_expired:
      spdlog::warn("final sync: not every island finished {} s after the last step (train.final_sync_s); ending",
                   cfg.train.final_sync_s);
      break;
    case WatchEnd::How::done: break;
  }
  const double secs = std::chrono::duration<double>(Clock::now() - start).count();
  // This process's part of the run's invariants (the commits: rounds, quorum, refused frames,
  // finite values); the sites check theirs.
  const std::size_t violations = check_invariants(*rt, actor_seconds(sys), RunPart::syncer);
  const auto final_params = rt->syncer.global().first;
  const auto final_measured = evaluate_with_error(*model, final_params, eval);
  const double final_eval = final_measured.loss;
  std::printf("done: syncer, %llu global rounds, final eval loss %.4f ± %.4f nats/token (initial %.4f), %.1f s, %llu "
              "fragment commits, %.3f MB accounted syncer -> sites, %llu frames refused, %llu tokens merged since the "
              "run began\n",
              static_cast<unsigned long long>(last_round), final_eval, final_measured.std_error, initial_eval, secs,
              static_cast<unsigned long long>(rt->tally().commits), rt->tally().bytes_sent / 1e6,
              static_cast<unsigned long long>(rt->tally().rejected),
              static_cast<unsigned long long>(rt->syncer.merged_tokens.load()));
  std::fflush(stdout);
  jsonl.write(Json{{"event", "done"},
                   {"rounds", last_round},
                   {"final_eval_loss", final_eval},
                   {"final_eval_std_error", final_measured.std_error},
                   {"initial_eval_loss", initial_eval},
                   {"seconds", secs},
                   {"bytes_accounted", rt->tally().bytes_sent},
                   {"rejected", rt->tally().rejected},
                   {"merged_tokens", rt->syncer.merged_tokens.load()},
                   {"invariant_violations", violations}});
  if (lead)
    std::printf("replica %s, term %llu: %d followers in session, round %llu held by a majority of %zu replicas\n",
                lead->name.c_str(), static_cast<unsigned long long>(lead->term), rt->gateway.followers.load(),
                static_cast<unsigned long long>(rt->gateway.majority_round.load()), cfg.syncers.size());
  print_invariants(violations, RunPart::syncer);
  told_all();
  caf::anon_send_exit(gateway, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(root, caf::exit_reason::user_shutdown);
  return violations == 0 ? 0 : 1;
}

int run_site_process(diloco::RunConfig cfg, const NetFlags& f) {
  using namespace diloco;
  using namespace diloco::actors;
  refuse_mode(cfg);
  const int site = site_index(cfg, f.site);
  if (f.join) {
    // A joiner: the syncer says which islands it trains once it has proven its name.
    if (site >= 0)
      throw ConfigError({"--join: \"" + f.site + "\" is a site of the configuration; start it without --join"});
    if (!cfg.net.allow_join || open_islands(cfg).empty())
      throw ConfigError({"--join: this configuration takes no joiners (net.allow_join = false, or no island is left "
                         "out of [[sites]])"});
  } else if (site < 0) {
    std::string known;
    for (int s = 0; s < site_count(cfg); ++s) known += (s ? ", " : "") + site_name(cfg, s);
    throw ConfigError({"--site: no site \"" + f.site + "\" in the topology (sites: " + known +
                       (cfg.net.allow_join ? "); a site not in it joins with --join" : ")")});
  }
  if (f.chips > 0) {
    cfg.islands.chips = f.chips;
    cfg.islands.counts.assign(static_cast<std::size_t>(cfg.train.islands), f.chips);
  }
  // A joiner's islands are known from its first session on (set on the connector's thread
  // before `first`, read after it).
  auto granted = std::make_shared<std::vector<int>>();
  std::vector<int> mine = f.join ? std::vector<int>{} : islands_of_site(cfg, site);
  // --state: this site's islands' own states, written whenever one of them sends.
  std::optional<RunStateDir> state;
  if (!f.state.empty()) {
    auto d = open_run_state(f.state, cfg, "sites/" + f.site + ".safetensors");
    if (!d) {
      spdlog::error("--state {}: {}. Use another directory for this configuration", f.state, d.error().message());
      return 1;
    }
    state = std::move(*d);
  }
  const auto to = parse_endpoint(f.endpoint.empty() ? cfg.net.listen : f.endpoint);
  const auto tls = tls_of(f, cfg, f.site);
  auto tl = std::make_shared<Timeline>();
  const long every = std::max(1, cfg.train.H);
  const auto http_at = f.http.empty() ? std::optional<HttpAddress>() : HttpAddress::parse(f.http);
  auto monitor = std::make_shared<std::shared_ptr<Monitor>>();  // --http, set before anything runs
  auto rt = std::make_shared<Runtime>(cfg, [tl, every, monitor](const Event& e) {
    if (*monitor) (*monitor)->on(e);
    if (auto line = site_line(e, every)) tl->line(*line);
  });
  caf::actor_system_config sc;
  configure_runtime_system(sc, scheduler_threads(cfg));
  configure_network(sc, cfg.net);
  caf::actor_system sys(sc);
  // A joiner's page shows every open island (those it is not given stay at step 0): the monitor is
  // in place before anything emits events.
  auto server = serve_http(http_at, *rt, "site", f.join ? open_islands(cfg) : mine, actor_clock(sys), *monitor);

  auto first = std::make_shared<std::atomic<bool>>(false);
  auto gave_up = std::make_shared<std::atomic<bool>>(false);
  // The site's CAF dials its own door on loopback; the door dials the syncer and checks it.
  auto door = open_site_door(cfg, to, tls ? &*tls : nullptr, [tl, name = f.site](const std::string& s) { tl->line(name + ": " + s); });
  ConnectorOptions co;
  co.site = f.site;
  co.syncer = Endpoint{"127.0.0.1", door->port()};
  co.syncer_label = (cfg.syncers.empty() ? to.host + ":" + std::to_string(to.port) : std::string("the leading replica")) +
                    " (through this site's door)";
  co.tls = tls.has_value();
  if (tls) co.cert_file = tls->cert, co.key_file = tls->key;
  co.max_attempts = f.max_attempts;
  co.log = [tl, name = f.site](const std::string& s) { tl->line(name + ": " + s); };
  co.on_give_up = [gave_up] { gave_up->store(true); };
  // A joiner refused for good (set once on the connector's thread, before gave_up).
  struct Refusal {
    std::mutex mu;
    std::optional<std::string> why;
    std::optional<std::string> get() {
      std::lock_guard lk(mu);
      return why;
    }
  };
  auto refused = std::make_shared<Refusal>();
  if (f.join) {
    co.join_islands = f.join_islands;
    co.layout = layout_signature(rt->layout_model->layout());
    // Started again with its --state: it asks for the islands it trained (a restarted syncer keeps
    // them for their joiner without knowing its name, JoinPool::reserve).
    std::vector<int> saved;
    if (state && state->resuming)
      if (auto cp = load_checkpoint(state->state_path(), rt->layout_model->layout(), rt->plan); cp)
        for (const auto& is : cp->islands)
          if (is.island >= 0 && is.island < cfg.train.islands) saved.push_back(is.island);
    co.held = [granted, first, saved] { return first->load() ? *granted : saved; };
    co.on_refused = [refused, gave_up](const std::string& why) {
      {
        std::lock_guard lk(refused->mu);
        refused->why = why;
      }
      gave_up->store(true);
    };
  }
  // The syncer's word that the run is over, set once from the connector's thread.
  struct Told {
    std::mutex mu;
    std::optional<RunOver> over;
    std::optional<RunOver> get() {
      std::lock_guard lk(mu);
      return over;
    }
  };
  auto told = std::make_shared<Told>();
  co.on_run_over = [told](const RunOver& o) {
    std::lock_guard lk(told->mu);
    told->over = o;
  };
  // The site ends with the run: exit 0 if it finished, 1 if it stopped or failed.
  auto run_over_exit = [&f](const RunOver& o) {
    std::printf("site %s: run over, told by the syncer (%s): %s\n", f.site.c_str(), std::string(to_string(o.outcome)).c_str(),
                o.reason.c_str());
    std::fflush(stdout);
    return o.outcome == RunOutcome::finished ? 0 : 1;
  };
  auto already_finished = std::make_shared<std::atomic<bool>>(false);
  co.on_session = [rt, first, mine, granted, join = f.join, already_finished](const SiteSession& s) mutable {
    if (first->load()) return;
    if (join) {
      for (auto i : s.islands)
        if (i >= 0 && i < rt->cfg.train.islands) granted->push_back(static_cast<int>(i));
      mine = *granted;
    }
    // Restarted after its last step: every island of this site finished at the syncer.
    bool all_finished = !mine.empty();
    for (int i : mine) {
      bool done = false;
      for (std::size_t k = 0; k < s.islands.size() && k < s.finished.size(); ++k)
        done = done || (s.islands[k] == i && s.finished[k] != 0);
      all_finished = all_finished && done;
    }
    already_finished->store(all_finished);
    // A restarted site process resumes its islands at the last step the syncer heard of
    // (values from the network: only this site's islands, only plausible steps).
    for (std::size_t k = 0; k < s.islands.size() && k < s.steps.size(); ++k) {
      const auto i = s.islands[k];
      if (std::find(mine.begin(), mine.end(), i) == mine.end() || s.steps[k] < 0 ||
          s.steps[k] > rt->cfg.train.steps)
        continue;
      rt->resume_steps[static_cast<std::size_t>(i)] = static_cast<long>(s.steps[k]);
    }
    first->store(true);
  };
  std::string syncers = to.host + ":" + std::to_string(to.port);
  if (!cfg.syncers.empty()) {  // a replicated syncer: the door finds the leader among them
    syncers = "the leader of";
    for (const auto& r : cfg.syncers) syncers += " " + r.name + "@" + r.address;
  }
  if (f.join)
    std::printf("diloco site %s: joins with %d islands, %d chips each; syncer at %s (%s)\n", f.site.c_str(),
                f.join_islands, cfg.islands.chips, syncers.c_str(), tls ? "mutual TLS" : "INSECURE");
  else
    std::printf("diloco site %s: islands %s, %d chips each; syncer at %s (%s)\n", f.site.c_str(), list(mine).c_str(),
                cfg.islands.chips, syncers.c_str(), tls ? "mutual TLS" : "INSECURE");
  std::fflush(stdout);
  catch_leave_signals();
  auto connector = spawn_connector(sys, rt, co);
  while (!first->load() && !gave_up->load() && !told->get() && !leave_signal.load())
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  if (auto o = told->get()) return run_over_exit(*o);  // joined after the run ended: nothing to train
  if (!first->load() && leave_signal.load()) {
    std::printf("site %s: left before it joined (signal %d); nothing to hand over\n", f.site.c_str(), leave_signal.load());
    std::fflush(stdout);
    caf::anon_send_exit(connector, caf::exit_reason::user_shutdown);
    return 0;
  }
  if (gave_up->load()) {
    if (auto why = refused->get()) {
      std::printf("site %s: refused by the syncer: %s\n", f.site.c_str(), why->c_str());
      std::fflush(stdout);
      return 4;
    }
    std::printf("site %s: could not join the syncer\n", f.site.c_str());
    return 3;
  }
  if (f.join) {
    mine = *granted;
    std::printf("site %s: joined the run with open islands %s\n", f.site.c_str(), list(mine).c_str());
    std::fflush(stdout);
  }
  if (already_finished->load()) {
    std::printf("done: site %s, islands %s already finished (the syncer holds their last contributions); nothing "
                "to train\n",
                f.site.c_str(), list(mine).c_str());
    std::fflush(stdout);
    caf::anon_send_exit(connector, caf::exit_reason::user_shutdown);
    return 0;
  }
  // Its own saved state wins over the step the syncer heard of: parameters, moments and step belong together.
  if (state && state->resuming) {
    auto cp = load_checkpoint(state->state_path(), rt->layout_model->layout(), rt->plan);
    if (!cp) {
      spdlog::error("--state {}: {}", state->dir, cp.error().message());
      caf::anon_send_exit(connector, caf::exit_reason::user_shutdown);
      return 1;
    }
    for (auto& is : cp->islands) {
      if (std::find(mine.begin(), mine.end(), is.island) == mine.end()) continue;
      // A joiner's island may have been trained on by another joiner since it saved: a state
      // behind the step the syncer heard of is left, and the island heals instead.
      if (const long heard = rt->resume_steps[static_cast<std::size_t>(is.island)]; f.join && is.step < heard) {
        tl->line("island " + std::to_string(is.island) + ": its saved state (step " + std::to_string(is.step) +
                 ") is behind the step the syncer heard of (" + std::to_string(heard) + "); not resumed from it");
        continue;
      }
      rt->resume_island(std::move(is));
    }
  }
  rt->keep_island_states = state.has_value();
  for (int i : mine)
    if (const long step = rt->resume_steps[static_cast<std::size_t>(i)]; step > 0)
      tl->line("island " + std::to_string(i) + " resumes at step " + std::to_string(step) +
               (rt->resume_islands[static_cast<std::size_t>(i)] ? " from its own saved state (" + state->state_path() + ")"
                                                                 : std::string()));
  rt->site_process = true;
  SpawnSet only_mine;
  only_mine.syncer = false;
  only_mine.all_islands = false;
  only_mine.islands = mine;
  const auto start = Clock::now();
  auto root = spawn_runtime(sys, rt, supervision_sink(*monitor), only_mine);
  auto tree_failed = std::make_shared<std::atomic<bool>>(false);
  root->attach_functor([tree_failed](const caf::error&) { tree_failed->store(true); });
  // The final sync waits for the merges of the islands' last contributions, at most
  // train.final_sync_s after their last steps.
  WatchRules rules;
  // The syncer's word that the run finished ends the site as its own end would; a run stopped
  // or failed there stops it.
  rules.done = [&] {
    auto o = told->get();
    return rt->tally().islands_done >= static_cast<int>(mine.size()) || (o && o->outcome == RunOutcome::finished);
  };
  // SIGTERM or SIGINT: the site leaves gracefully. Its islands stop stepping, send their unsent
  // progress and tell the syncer they finished (so their going is no failure there), and the
  // site ends once those contributions were merged, or train.final_sync_s after it was asked.
  bool leaving = false;
  long ticks = 0;
  auto drain = [&] {
    if (!leave_signal.load() || ticks++ % 25 != 0) return;  // then every 0.5 s: a restarted island hears it too
    if (!leaving)
      tl->line("site " + f.site + ": signal " + std::to_string(leave_signal.load()) +
               ": leaving; its islands hand over their unsent progress (a second signal ends it at once)");
    leaving = true;
    for (int i : mine)
      if (!rt->islands[static_cast<std::size_t>(i)].done.load())
        if (auto a = rt->dir.island(i)) caf::anon_send(a, drain_atom::value);
  };
  rules.trained = [&] {
    if (leaving) return true;  // the final-sync window bounds the hand-over
    for (int i : mine)
      if (!rt->budget_spent(rt->islands[static_cast<std::size_t>(i)].step.load())) return false;
    return true;
  };
  rules.final_sync_s = cfg.train.final_sync_s;
  rules.failed = [&] { return tree_failed->load(); };
  rules.stopped = [&]() -> std::optional<std::string> {
    if (auto why = rt->stopped()) return why;
    if (auto o = told->get(); o && o->outcome != RunOutcome::finished) return "the syncer ended the run";
    // A joiner refused after its first session (its islands were given away after its lease ran out).
    if (auto why = refused->get()) return "refused by the syncer: " + *why;
    return std::nullopt;
  };
  // --state: the islands' states as of their last sends, written when one changed.
  std::vector<std::shared_ptr<const IslandState>> written(mine.size());
  auto save_state = [&] {
    if (!state) return;
    std::vector<IslandState> states;
    bool changed = false;
    for (std::size_t k = 0; k < mine.size(); ++k) {
      auto s = rt->islands[static_cast<std::size_t>(mine[k])].kept_state();
      changed = changed || s != written[k];
      written[k] = s;
      if (s) states.push_back(*s);
    }
    if (!changed) return;
    if (auto ok = save_checkpoint(state->state_path(), rt->layout_model->layout(), rt->plan,
                                  islands_state_file(rt->initial, rt->plan, std::move(states)));
        !ok)
      spdlog::error("site {}: state not written: {}", f.site, ok.error().message());
  };
  const auto end = watch(rules, [&] {
    drain();
    save_state();
    if (*monitor) (*monitor)->sample();
  });
  save_state();
  if (auto o = told->get(); o && !rt->stopped()) {
    if (const int code = run_over_exit(*o); code != 0) {
      caf::anon_send_exit(root, caf::exit_reason::user_shutdown);
      return code;
    }
  }
  switch (end.how) {
    case WatchEnd::How::tree_failed: spdlog::error("site {}: the supervision tree stopped", f.site); return 1;
    case WatchEnd::How::stopped:
      // A diverged island: training it further or restarting it would meet the same state.
      std::printf("site %s: run stopped: %s\n", f.site.c_str(), end.why.c_str());
      if (refused->get()) {
        std::fflush(stdout);
        caf::anon_send_exit(root, caf::exit_reason::user_shutdown);
        return 4;
      }
      std::fflush(stdout);
      std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the island's report reaches the syncer
      caf::anon_send_exit(root, caf::exit_reason::user_shutdown);
      caf::anon_send_exit(connector, caf::exit_reason::user_shutdown);
      return 1;
    case WatchEnd::How::final_sync_expired:
      spdlog::warn("site {}: final sync: the last merges did not come back within {} s (train.final_sync_s); ending",
                   f.site, cfg.train.final_sync_s);
      break;
    case WatchEnd::How::done: break;
  }
  const double secs = std::chrono::duration<double>(Clock::now() - start).count();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // last frames out and acknowledged
  // This process's part of the run's invariants (its islands: heals, finite values, repairs).
  const std::size_t violations = check_invariants(*rt, actor_seconds(sys), RunPart::site);
  const auto sock = door->stats();
  std::printf("done: site %s, islands %s, %llu tokens in %.1f s, %.3f MB accounted site -> syncer; "
              "sockets: %llu bytes sent, %llu received\n",
              f.site.c_str(), list(mine).c_str(), static_cast<unsigned long long>(rt->tally().tokens), secs,
              rt->tally().bytes_sent / 1e6, static_cast<unsigned long long>(sock.bytes_sent),
              static_cast<unsigned long long>(sock.bytes_received));
  print_invariants(violations, RunPart::site);
  std::fflush(stdout);
  caf::anon_send_exit(root, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(connector, caf::exit_reason::user_shutdown);
  return violations == 0 ? 0 : 1;
}
