// The operator's view of a run (metrics.hpp): Prometheus metrics, the status page's data and the
// HTTP server that serves them.
#include "metrics.hpp"

#include <algorithm>
#include <array>
#include <arpa/inet.h>
#include <chrono>
#include <cmath>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <pthread.h>
#include <thread>
#include <utility>
#include <stdexcept>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>
#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include "diloco/actors/runtime.hpp"
#include "diloco/actors/supervisor.hpp"
#include "status_page.hpp"

using diloco::Event;
using Json = nlohmann::ordered_json;

// ---- --http ----

HttpAddress HttpAddress::parse(const std::string& flag) {
  auto bad = [&](const std::string& why) {
    return std::invalid_argument("--http '" + flag + "': " + why + " (expected PORT or HOST:PORT, HOST an IP address)");
  };
  HttpAddress a{"127.0.0.1", 0};
  std::string port = flag;
  if (const auto colon = flag.rfind(':'); colon != std::string::npos) {
    a.host = flag.substr(0, colon);
    port = flag.substr(colon + 1);
    if (a.host == "localhost") a.host = "127.0.0.1";
    if (a.host.size() > 2 && a.host.front() == '[' && a.host.back() == ']') {
      in6_addr v6{};
      if (inet_pton(AF_INET6, a.host.substr(1, a.host.size() - 2).c_str(), &v6) != 1) throw bad("not an IPv6 address");
    } else {
      in_addr v4{};
      if (inet_pton(AF_INET, a.host.c_str(), &v4) != 1) throw bad("'" + a.host + "' is not an IPv4 address");
    }
  }
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos)
    throw bad("the port is not a number");
  a.port = std::stoi(port);
  if (a.port > 65535) throw bad("the port is above 65535");
  return a;
}

std::string HttpAddress::listen() const { return host + ":" + std::to_string(port); }

// ---- the monitor ----

namespace {

/// A value's recent history, for rates over the last few seconds.
struct Rate {
  std::deque<std::pair<double, double>> samples;  // (seconds, cumulative value)
  void add(double t, double v) {
    if (!samples.empty() && t - samples.back().first < 0.25) return;
    samples.emplace_back(t, v);
    while (samples.size() > 2 && t - samples[1].first > 5.0) samples.pop_front();
  }
  double per_second() const {
    if (samples.size() < 2) return 0.0;
    const double dt = samples.back().first - samples.front().first;
    return dt > 0.0 ? (samples.back().second - samples.front().second) / dt : 0.0;
  }
};

}  // namespace

struct Monitor::Impl {
  const diloco::actors::Runtime& rt;
  std::string role;
  std::vector<int> islands;  // run here
  std::function<double()> actor_now;

  // What the event stream and the watching thread tell, under `mu` (held for a few copies only).
  mutable std::mutex mu;
  struct CommitNote {
    double t;
    int fragment;
    std::uint64_t round;
    std::vector<int> islands, staleness;
  };
  std::deque<CommitNote> commits;                      // the last 16
  std::deque<std::pair<double, std::string>> timeline;  // faults and recoveries (the last 200)
  std::vector<std::array<double, 3>> evals;             // (seconds, round, eval loss)
  double last_train_loss = NAN, last_eval_loss = NAN;
  std::map<int, std::pair<long, double>> last_step;  // island → (step, seconds)
  std::map<int, double> step_s;                      // island → recent inner-step time (moving average)
  std::map<std::string, std::uint64_t> faults_by_kind, refused_by_reason, restarts;
  std::map<int, Rate> tokens;                               // island → tokens trained
  std::map<int, std::pair<long, double>> heard;             // syncer process: island → (step heard, when it moved)
  std::vector<std::pair<Rate, Rate>> link_bytes;            // per site: up, down
  double last_sample = -1.0;

  // Prometheus: families built once; counters follow the ledger's totals at each scrape.
  std::shared_ptr<prometheus::Registry> reg = std::make_shared<prometheus::Registry>();
  mutable std::mutex scrape_mu;
  prometheus::Family<prometheus::Histogram>* contributions_f = nullptr;
  prometheus::Histogram* contributions = nullptr;
  prometheus::Histogram* staleness = nullptr;
  prometheus::Family<prometheus::Histogram>* step_f = nullptr;
  std::map<int, prometheus::Histogram*> step_hist;

  Impl(const diloco::actors::Runtime& r, std::string ro, std::vector<int> is, std::function<double()> now)
      : rt(r), role(std::move(ro)), islands(std::move(is)), actor_now(std::move(now)) {
    contributions_f = &prometheus::BuildHistogram()
                           .Name("diloco_commit_contributions")
                           .Help("Contributions (islands) merged per fragment commit")
                           .Register(*reg);
    prometheus::Histogram::BucketBoundaries island_buckets;
    for (int k = 1; k <= rt.cfg.train.islands; ++k) island_buckets.push_back(k);
    contributions = &contributions_f->Add({}, island_buckets);
    staleness = &prometheus::BuildHistogram()
                     .Name("diloco_contribution_staleness_rounds")
                     .Help("Rounds a merged contribution was behind its fragment")
                     .Register(*reg)
                     .Add({}, prometheus::Histogram::BucketBoundaries{0, 1, 2, 3, 4, 6, 8});
    step_f = &prometheus::BuildHistogram()
                  .Name("diloco_chip_step_seconds")
                  .Help("Time of one inner step of an island's chips (compute until the AdamW step)")
                  .Register(*reg);
    for (int i : islands)
      step_hist[i] = &step_f->Add({{"island", std::to_string(i)}},
                                  prometheus::Histogram::BucketBoundaries{0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5});
  }

  double run_seconds(double actor_t) const { return actor_t - rt.t0.load(); }
  double now_s() const { return run_seconds(actor_now()); }

  void note(double t, std::string what) {
    timeline.emplace_back(t, std::move(what));
    if (timeline.size() > 200) timeline.pop_front();
  }
};

Monitor::Monitor(const diloco::actors::Runtime& rt, std::string role, std::vector<int> islands,
                 std::function<double()> actor_now)
    : impl_(std::make_unique<Impl>(rt, std::move(role), std::move(islands), std::move(actor_now))) {}

Monitor::~Monitor() = default;

void Monitor::on(const Event& e) {
  auto& m = *impl_;
  const double t = m.run_seconds(e.at);
  if (e.kind == Event::Kind::commit) {
    m.contributions->Observe(e.merged);
    for (int s : e.staleness) m.staleness->Observe(s);
  }
  std::lock_guard lk(m.mu);
  switch (e.kind) {
    case Event::Kind::step: {
      auto& last = m.last_step[e.island];
      if (e.step == last.first + 1 && last.second > 0.0) {
        const double dt = t - last.second;
        if (auto h = m.step_hist.find(e.island); h != m.step_hist.end()) h->second->Observe(dt);
        auto& avg = m.step_s[e.island];
        avg = avg == 0.0 ? dt : 0.8 * avg + 0.2 * dt;
      }
      last = {e.step, t};
      if (std::isfinite(e.loss)) m.last_train_loss = e.loss;
      return;
    }
    case Event::Kind::commit:
      m.commits.push_back({t, e.fragment, e.round, e.islands, e.staleness});
      if (m.commits.size() > 16) m.commits.pop_front();
      return;
    case Event::Kind::fault:
      ++m.faults_by_kind[std::string(diloco::name_of(e.fault))];
      m.note(t, e.detail);
      return;
    case Event::Kind::heal:
      if (e.incarnation > 1)
        m.note(t, fmt::format("island {} (incarnation {}) healed to round {} at step {}", e.island, e.incarnation, e.round,
                              e.step));
      return;
    case Event::Kind::rejoin: m.note(t, fmt::format("island {} re-joined the syncer at step {}", e.island, e.step)); return;
    case Event::Kind::leave: m.note(t, fmt::format("island {} left gracefully at step {}", e.island, e.step)); return;
    case Event::Kind::restore: m.note(t, "syncer restarted (" + e.detail + ") at round " + std::to_string(e.round)); return;
    case Event::Kind::rejected: ++m.refused_by_reason[e.reason.empty() ? "other" : e.reason]; return;
    case Event::Kind::diverged:
    case Event::Kind::unusable_state: m.note(t, e.detail); return;
    default: return;
  }
}

void Monitor::on(const diloco::actors::SupervisionEvent& e) {
  if (e.kind != diloco::actors::SupervisionEvent::restarting) return;
  std::lock_guard lk(impl_->mu);
  ++impl_->restarts[e.supervisor];
}

void Monitor::on_round(std::uint64_t round, double train_loss, double eval_loss) {
  auto& m = *impl_;
  const double t = m.now_s();
  std::lock_guard lk(m.mu);
  m.evals.push_back({t, static_cast<double>(round), eval_loss});
  if (m.evals.size() > 4000) m.evals.erase(m.evals.begin(), m.evals.begin() + 1000);
  m.last_eval_loss = eval_loss;
  if (std::isfinite(train_loss)) m.last_train_loss = train_loss;
}

void Monitor::sample() {
  auto& m = *impl_;
  const double t = m.now_s();
  if (t - m.last_sample < 0.25) return;
  const auto links = m.rt.links.report();  // outside `mu`: the links take their own locks
  std::lock_guard lk(m.mu);
  m.last_sample = t;
  for (int i : m.islands) m.tokens[i].add(t, static_cast<double>(m.rt.islands[static_cast<std::size_t>(i)].tokens.load()));
  if (m.role == "syncer")
    for (int i = 0; i < m.rt.cfg.train.islands; ++i) {
      const long s = m.rt.syncer.heard_step[static_cast<std::size_t>(i)].load();
      auto& h = m.heard[i];
      if (s != h.first) h = {s, t};
    }
  m.link_bytes.resize(links.size());
  for (std::size_t k = 0; k < links.size(); ++k) {
    m.link_bytes[k].first.add(t, static_cast<double>(links[k].up_bytes));
    m.link_bytes[k].second.add(t, static_cast<double>(links[k].down_bytes));
  }
}

namespace {

/// What one island looks like right now.
struct IslandView {
  int island;
  bool alive, done;
  long step;
  int incarnation;
  double tokens_per_s, step_s;
  std::uint64_t tokens;
  std::vector<bool> chips;
};

}  // namespace

/// The state a response is built from: copied under the monitor's lock, read from the ledger
/// without it.
struct Snapshot {
  double t;
  diloco::actors::Tally tally;
  diloco::GoodputMeter::Report goodput;
  std::uint64_t round;
  std::vector<IslandView> islands;
  std::vector<diloco::actors::SiteLinks::Report> links;
  std::vector<std::pair<double, double>> link_rates;  // bytes/s up, down
  double progress;
  // copied from the monitor
  std::deque<Monitor::Impl::CommitNote> commits;
  std::deque<std::pair<double, std::string>> timeline;
  std::vector<std::array<double, 3>> evals;
  double train_loss, eval_loss;
  std::map<std::string, std::uint64_t> faults_by_kind, refused_by_reason, restarts;
};

double run_progress(const diloco::actors::Runtime& rt);  // report.cpp

static Snapshot snapshot(const Monitor::Impl& m) {
  Snapshot s;
  const double actor_t = m.actor_now();
  s.t = m.run_seconds(actor_t);
  s.tally = m.rt.tally();
  s.goodput = m.rt.goodput_report(actor_t);
  s.round = m.rt.syncer.round();
  s.links = m.rt.links.report();
  s.progress = run_progress(m.rt);
  std::lock_guard lk(m.mu);
  s.commits = m.commits;
  s.timeline = m.timeline;
  s.evals = m.evals;
  s.train_loss = m.last_train_loss;
  s.eval_loss = m.last_eval_loss;
  s.faults_by_kind = m.faults_by_kind;
  s.refused_by_reason = m.refused_by_reason;
  s.restarts = m.restarts;
  for (std::size_t k = 0; k < s.links.size(); ++k)
    s.link_rates.emplace_back(k < m.link_bytes.size() ? m.link_bytes[k].first.per_second() : 0.0,
                              k < m.link_bytes.size() ? m.link_bytes[k].second.per_second() : 0.0);
  if (m.role == "syncer") {
    for (int i = 0; i < m.rt.cfg.train.islands; ++i) {
      const auto h = m.heard.count(i) ? m.heard.at(i) : std::pair<long, double>{0, -1e9};
      const bool finished = m.rt.syncer.finished[static_cast<std::size_t>(i)].load();
      s.islands.push_back({i, !finished && s.t - h.second < m.rt.cfg.net.timeout_ms / 1e3, finished, h.first, 0, 0.0, 0.0, 0, {}});
    }
    return s;
  }
  for (int i : m.islands) {
    const auto& r = m.rt.islands[static_cast<std::size_t>(i)];
    IslandView v{i, r.live.load() != 0, r.done.load(), r.step.load(), r.incarnation.load(),
                 m.tokens.count(i) ? m.tokens.at(i).per_second() : 0.0, m.step_s.count(i) ? m.step_s.at(i) : 0.0,
                 r.tokens.load(), {}};
    for (const auto& c : m.rt.chips[static_cast<std::size_t>(i)]) v.chips.push_back(c.starts.load() > c.ends.load());
    s.islands.push_back(std::move(v));
  }
  return s;
}

std::string Monitor::status_json() const {
  const auto s = snapshot(*impl_);
  const auto& cfg = impl_->rt.cfg;
  Json islands = Json::array();
  for (const auto& v : s.islands) {
    Json chips = Json::array();
    for (bool c : v.chips) chips.push_back(c);
    islands.push_back(Json{{"island", v.island},
                           {"site", diloco::site_of(cfg, v.island) < 0 ? std::string("open (a joiner's)")
                                                                        : diloco::site_name(cfg, diloco::site_of(cfg, v.island))},
                           {"alive", v.alive},
                           {"done", v.done},
                           {"step", v.step},
                           {"incarnation", v.incarnation},
                           {"tokens", v.tokens},
                           {"tokens_per_s", v.tokens_per_s},
                           {"step_s", v.step_s},
                           {"chips", std::move(chips)}});
  }
  Json commits = Json::array();
  for (auto it = s.commits.rbegin(); it != s.commits.rend(); ++it)
    commits.push_back(Json{{"t", it->t}, {"fragment", it->fragment}, {"round", it->round}, {"islands", it->islands},
                           {"staleness", it->staleness}});
  Json links = Json::array();
  for (std::size_t k = 0; k < s.links.size(); ++k) {
    const auto& l = s.links[k];
    links.push_back(Json{{"site", l.site},
                         {"up_bytes", l.up_bytes},
                         {"down_bytes", l.down_bytes},
                         {"up_use", l.bandwidth_Bps > 0 ? s.link_rates[k].first / l.bandwidth_Bps : 0.0},
                         {"down_use", l.bandwidth_Bps > 0 ? s.link_rates[k].second / l.bandwidth_Bps : 0.0},
                         {"up_peak", l.up_peak},
                         {"down_peak", l.down_peak},
                         {"bandwidth_mbps", l.bandwidth_Bps * 8e-6}});
  }
  Json evals = Json::array();
  for (const auto& e : s.evals) evals.push_back(Json::array({e[0], e[1], std::isfinite(e[2]) ? Json(e[2]) : Json()}));
  Json timeline = Json::array();
  for (const auto& [t, what] : s.timeline) timeline.push_back(Json::array({t, what}));
  const bool sync = impl_->rt.synchronous();
  return Json{{"role", impl_->role},
              {"mode", diloco::name_of(cfg.train.mode)},
              {"seconds", s.t},
              {"progress", s.progress},
              {"round", s.round},
              {"commits_total", s.tally.commits},
              {"quorum", sync ? cfg.train.islands : cfg.quorum.min_islands},
              {"grace", diloco::name_of(cfg.quorum.grace)},
              {"islands_total", cfg.train.islands},
              {"live_islands", s.tally.live_islands},
              {"live_chips", s.tally.live_chips},
              {"tokens", s.tally.tokens},
              {"bytes", s.tally.bytes_sent},
              {"goodput", s.goodput.goodput},
              {"downtime_s", s.goodput.global_downtime_s},
              {"train_loss", std::isfinite(s.train_loss) ? Json(s.train_loss) : Json()},
              {"eval_loss", std::isfinite(s.eval_loss) ? Json(s.eval_loss) : Json()},
              {"dropped_stale", s.tally.dropped_stale},
              {"superseded", s.tally.superseded},
              {"clipped", s.tally.clipped},
              {"unblocked", s.tally.unblocked},
              {"held_fragments", s.tally.held},
              {"refused", s.tally.rejected},
              {"islands", std::move(islands)},
              {"commits", std::move(commits)},
              {"links", std::move(links)},
              {"evals", std::move(evals)},
              {"timeline", std::move(timeline)}}
      .dump();
}

namespace {

/// Moves a prometheus counter up to a total the ledger keeps (totals only go up).
void follow(prometheus::Counter& c, double total) {
  if (total > c.Value()) c.Increment(total - c.Value());
}

}  // namespace

std::string Monitor::metrics() const {
  auto& m = *impl_;
  const auto s = snapshot(m);
  std::lock_guard lk(m.scrape_mu);
  auto& reg = *m.reg;
  using prometheus::BuildCounter;
  using prometheus::BuildGauge;
  // Families are looked up by name (Registry merges a family registered twice with the same
  // help and labels), so every scrape states the whole list here, in one place.
  auto gauge = [&](const std::string& name, const std::string& help) -> prometheus::Family<prometheus::Gauge>& {
    return BuildGauge().Name(name).Help(help).Register(reg);
  };
  auto counter = [&](const std::string& name, const std::string& help) -> prometheus::Family<prometheus::Counter>& {
    return BuildCounter().Name(name).Help(help).Register(reg);
  };
  gauge("diloco_info", "The run: its mode and this process's role (value 1)")
      .Add({{"mode", std::string(diloco::name_of(m.rt.cfg.train.mode))}, {"role", m.role}})
      .Set(1);
  gauge("diloco_global_round", "Global rounds committed (the syncer's round counter)").Add({}).Set(static_cast<double>(s.round));
  follow(counter("diloco_commits_total", "Fragment commits (merges) by the syncer").Add({}), static_cast<double>(s.tally.commits));
  follow(counter("diloco_stale_drops_total", "Contributions dropped as too stale").Add({}), static_cast<double>(s.tally.dropped_stale));
  follow(counter("diloco_superseded_sends_total", "Sends replaced by the same island's next before a commit").Add({}),
         static_cast<double>(s.tally.superseded));
  follow(counter("diloco_held_fragments_total", "Join-reply fragments sent without values: the island held them already").Add({}),
         static_cast<double>(s.tally.held));
  follow(counter("diloco_clipped_total", "Merged outer gradients scaled down to their fragment's norm bound (merge.clip_ratio)").Add({}),
         static_cast<double>(s.tally.clipped));
  follow(counter("diloco_unblocked_rounds_total",
                 "Synchronous rounds committed without islands that waited on other rounds (sends in different orders after restarts)")
             .Add({}),
         static_cast<double>(s.tally.unblocked));
  auto& refused = counter("diloco_frames_refused_total", "Frames refused, by reason (an errc name or the refusing session)");
  for (const auto& [reason, n] : s.refused_by_reason) follow(refused.Add({{"reason", reason}}), static_cast<double>(n));
  gauge("diloco_live_islands", "Islands alive (joined, not dead)").Add({}).Set(s.tally.live_islands);
  gauge("diloco_live_chips", "Chips alive").Add({}).Set(s.tally.live_chips);
  gauge("diloco_quorum_islands", "Quorum K: contributions a round needs")
      .Add({})
      .Set(m.rt.synchronous() ? m.rt.cfg.train.islands : m.rt.cfg.quorum.min_islands);
  auto& step = gauge("diloco_island_step", "An island's last finished local step");
  auto& alive = gauge("diloco_island_alive", "1 while an island is alive");
  auto& incarnation = gauge("diloco_island_incarnation", "Starts of an island so far");
  auto& tps = gauge("diloco_island_tokens_per_second", "Tokens an island trained per second, over the last 5 s");
  auto& tokens = counter("diloco_island_tokens_total", "Tokens an island trained");
  auto& chip_alive = gauge("diloco_chip_alive", "1 while a chip is alive");
  for (const auto& v : s.islands) {
    const std::map<std::string, std::string> l{{"island", std::to_string(v.island)}};
    step.Add(l).Set(static_cast<double>(v.step));
    alive.Add(l).Set(v.alive ? 1 : 0);
    if (m.role == "syncer") continue;
    incarnation.Add(l).Set(v.incarnation);
    tps.Add(l).Set(v.tokens_per_s);
    follow(tokens.Add(l), static_cast<double>(v.tokens));
    for (std::size_t c = 0; c < v.chips.size(); ++c)
      chip_alive.Add({{"island", std::to_string(v.island)}, {"chip", std::to_string(c)}}).Set(v.chips[c] ? 1 : 0);
  }
  follow(counter("diloco_tokens_total", "Tokens trained by the islands of this process").Add({}), static_cast<double>(s.tally.tokens));
  follow(counter("diloco_frame_bytes_total", "Frame bytes islands -> syncer and syncer -> islands, as accounted").Add({}),
         static_cast<double>(s.tally.bytes_sent));
  auto& link_bytes = counter("diloco_link_bytes_total", "Bytes a site's emulated WAN link carried, by direction");
  auto& link_use = gauge("diloco_link_use_ratio", "Share of a link's bandwidth in use over the last 5 s, by direction");
  auto& link_peak = gauge("diloco_link_peak_use_ratio", "Share of a link's bandwidth used in its busiest second");
  for (std::size_t k = 0; k < s.links.size(); ++k) {
    const auto& l = s.links[k];
    for (const bool up : {true, false}) {
      const std::map<std::string, std::string> lab{{"site", l.site}, {"direction", up ? "up" : "down"}};
      follow(link_bytes.Add(lab), static_cast<double>(up ? l.up_bytes : l.down_bytes));
      const double rate = up ? s.link_rates[k].first : s.link_rates[k].second;
      link_use.Add(lab).Set(l.bandwidth_Bps > 0 ? rate / l.bandwidth_Bps : 0.0);
      link_peak.Add(lab).Set(up ? l.up_peak : l.down_peak);
    }
  }
  gauge("diloco_goodput_ratio", "Chip-seconds that reached the global model / chip-seconds provisioned").Add({}).Set(s.goodput.goodput);
  follow(counter("diloco_useful_chip_seconds_total", "Chip-seconds whose work reached the global model").Add({}),
         s.goodput.useful_chip_s);
  follow(counter("diloco_provisioned_chip_seconds_total", "Chip-seconds provisioned").Add({}), s.goodput.provisioned_chip_s);
  follow(counter("diloco_global_downtime_seconds_total", "Time with a quorum alive but no global commit").Add({}),
         s.goodput.global_downtime_s);
  if (std::isfinite(s.eval_loss)) gauge("diloco_eval_loss", "Eval loss of the global parameters at the last round").Add({}).Set(s.eval_loss);
  if (std::isfinite(s.train_loss)) gauge("diloco_train_loss", "Mean training loss of the last steps").Add({}).Set(s.train_loss);
  gauge("diloco_progress_ratio", "Share of the run's budget trained").Add({}).Set(s.progress);
  auto& faults = counter("diloco_faults_total", "Injected faults that fired, by kind");
  for (const auto& [kind, n] : s.faults_by_kind) follow(faults.Add({{"kind", kind}}), static_cast<double>(n));
  auto& restarts = counter("diloco_supervisor_restarts_total", "Children restarted, by supervisor");
  for (const auto& [sup, n] : s.restarts) follow(restarts.Add({{"supervisor", sup}}), static_cast<double>(n));
  return prometheus::TextSerializer().Serialize(reg.Collect());
}

// ---- the server ----

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

/// A client has this long to send its request and take the answer; then it is dropped.
constexpr auto kRequestTimeout = std::chrono::seconds(2);
/// Connections held at once; past this the server stops accepting until one ends (the kernel's
/// backlog holds the rest), so a flood of clients costs the process a bounded number of sockets.
constexpr std::size_t kMaxClients = 256;

/// The answer to one request: the routes, or 404, or 405 for a method other than GET and HEAD.
http::response<http::string_body> answer(const http::request<http::empty_body>& req, const Monitor& monitor) {
  std::string_view path(req.target().data(), req.target().size());
  path = path.substr(0, path.find('?'));
  http::response<http::string_body> res{http::status::ok, req.version()};
  std::string type = "text/plain; charset=utf-8";
  if (req.method() != http::verb::get && req.method() != http::verb::head) {
    res.result(http::status::method_not_allowed);
    res.set(http::field::allow, "GET, HEAD");
    res.body() = "only GET and HEAD\n";
  } else if (path == "/" || path == "/index.html") {
    type = "text/html; charset=utf-8";
    res.body() = kStatusPage;
  } else if (path == "/status.json") {
    type = "application/json";
    res.body() = monitor.status_json();
  } else if (path == "/metrics") {
    type = "text/plain; version=0.0.4; charset=utf-8";
    res.body() = monitor.metrics();
  } else {
    res.result(http::status::not_found);
    res.body() = "not found (/, /status.json, /metrics)\n";
  }
  res.set(http::field::content_type, type);
  res.set(http::field::cache_control, "no-store");
  res.keep_alive(false);
  res.content_length(res.body().size());
  if (req.method() == http::verb::head) res.body().clear();
  return res;
}

/// The listening socket and the connections, run by the server's one thread (its handlers only,
/// so it needs no lock); the connections keep it alive.
struct Listener : std::enable_shared_from_this<Listener> {
  const Monitor& monitor;
  asio::io_context& io;
  tcp::acceptor acceptor;
  std::size_t clients = 0;
  bool accepting = false, stopped = false;

  Listener(asio::io_context& c, const Monitor& m) : monitor(m), io(c), acceptor(c) {}

  void accept() {
    accepting = true;
    acceptor.async_accept([self = shared_from_this()](beast::error_code ec, tcp::socket s) {
      self->accepting = false;
      if (self->stopped || ec == asio::error::operation_aborted) return;
      if (ec) {  // out of file descriptors, say: try again shortly rather than spin
        auto timer = std::make_shared<asio::steady_timer>(self->io, std::chrono::milliseconds(100));
        timer->async_wait([self, timer](beast::error_code) {
          if (!self->stopped && !self->accepting) self->accept();
        });
        return;
      }
      serve(self, std::move(s));
      if (self->clients < kMaxClients) self->accept();
    });
  }

  /// One connection: one request read, answered and closed, within kRequestTimeout in all.
  struct Session {
    std::shared_ptr<Listener> server;
    beast::tcp_stream stream;
    beast::flat_buffer buffer{8192};
    http::request<http::empty_body> req;
    http::response<http::string_body> res;
    Session(std::shared_ptr<Listener> l, tcp::socket s) : server(std::move(l)), stream(std::move(s)) { ++server->clients; }
    ~Session() {  // resumes accepting if the limit had paused it
      --server->clients;
      if (!server->stopped && !server->accepting) server->accept();
    }
  };

  static void serve(const std::shared_ptr<Listener>& self, tcp::socket s) {
    auto session = std::make_shared<Session>(self, std::move(s));
    session->stream.expires_after(kRequestTimeout);
    http::async_read(session->stream, session->buffer, session->req, [session](beast::error_code ec, std::size_t) {
      if (ec) return;  // timed out, closed, or not HTTP: dropped
      auto& res = session->res;
      try {
        res = answer(session->req, session->server->monitor);
      } catch (const std::exception& e) {
        res = {http::status::internal_server_error, session->req.version()};
        res.body() = std::string(e.what()) + "\n";
        res.keep_alive(false);
        res.prepare_payload();
      }
      http::async_write(session->stream, res, [session](beast::error_code, std::size_t) {
        beast::error_code ignored;
        session->stream.socket().shutdown(tcp::socket::shutdown_send, ignored);
      });
    });
  }
};

}  // namespace

struct HttpServer::Impl {
  asio::io_context io{1};
  std::shared_ptr<Listener> listener;
  std::thread thread;
};

HttpServer::HttpServer(const HttpAddress& address, const Monitor& monitor)
    : impl_(std::make_unique<Impl>()), address_(address) {
  const std::string at = address.listen();
  auto refuse = [&](const std::string& why) { return std::runtime_error("--http " + at + ": cannot listen: " + why); };
  std::string host = address.host;
  if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  beast::error_code ec;
  const auto ip = asio::ip::make_address(host, ec);
  if (ec) throw refuse(ec.message());
  const tcp::endpoint endpoint(ip, static_cast<unsigned short>(address.port));
  auto& m = *impl_;
  m.listener = std::make_shared<Listener>(m.io, monitor);
  auto& acceptor = m.listener->acceptor;
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) throw refuse(ec.message());
  port_ = acceptor.local_endpoint().port();
  m.listener->accept();
  // A std::thread has the process's default stack size: the static TLS of the libraries loaded
  // (libtorch and the BLAS it pulls in take well over 100 KiB) must fit in every thread's stack.
  m.thread = std::thread([&io = m.io] {
    pthread_setname_np(pthread_self(), "diloco-http");
    // A handler that throws (memory exhausted while accepting) would end the process from this
    // thread (std::terminate): said, and the server goes on with what it still has in hand.
    for (;;) {
      try {
        io.run();
        return;
      } catch (const std::exception& e) {
        spdlog::error("http: {}", e.what());
      }
    }
  });
}

HttpServer::~HttpServer() {
  auto& m = *impl_;
  m.io.stop();
  if (m.thread.joinable()) m.thread.join();
  // No thread runs the server now; the connections still open close with the io_context.
  m.listener->stopped = true;
  beast::error_code ignored;
  m.listener->acceptor.close(ignored);
  m.listener.reset();
}

std::string HttpServer::url() const { return "http://" + address_.host + ":" + std::to_string(port_) + "/"; }

std::unique_ptr<HttpServer> serve_http(const std::optional<HttpAddress>& at, const diloco::actors::Runtime& rt,
                                       const std::string& role, std::vector<int> islands,
                                       std::function<double()> actor_now, std::shared_ptr<Monitor>& slot) {
  if (!at) return nullptr;
  slot = std::make_shared<Monitor>(rt, role, std::move(islands), std::move(actor_now));
  auto server = std::make_unique<HttpServer>(*at, *slot);
  spdlog::info("status page and metrics: {} (/metrics, /status.json)", server->url());
  return server;
}

std::function<void(const diloco::actors::SupervisionEvent&)> supervision_sink(const std::shared_ptr<Monitor>& m) {
  if (!m) return {};
  return [m](const diloco::actors::SupervisionEvent& e) { m->on(e); };
}
