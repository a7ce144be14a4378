// The report writer (report.hpp).
#include "report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string_view>

#include <fmt/format.h>
#include <spdlog/fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "diloco/actors/runtime.hpp"

using diloco::Event;
using diloco::FaultKind;

namespace {
bool quiet_ = false;

/// "1 frame refused", "2 frames refused": a count, its noun (with an s unless the count is one)
/// and the rest of the phrase.
std::string counted(std::uint64_t n, std::string_view noun, std::string_view rest = {}) {
  return fmt::format("{} {}{}{}", n, noun, n == 1 ? "" : "s", rest);
}
}  // namespace

void set_quiet_rows(bool quiet) { quiet_ = quiet; }
bool quiet_rows() { return quiet_; }

void Timeline::line(const std::string& s) {
  std::lock_guard lk(mu_);
  std::printf("%8.2fs  %s\n", since(), s.c_str());
  std::fflush(stdout);
}

double Timeline::since() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void JsonLines::open(const std::string& path, bool append) {
  out_.open(path, append ? std::ios::app : std::ios::trunc);
  if (!out_) throw std::runtime_error("--metrics: cannot open '" + path + "' for writing");
}

void JsonLines::write(const Json& object) {
  if (!out_.is_open()) return;
  out_ << object.dump() << "\n";
  out_.flush();
}

// ---- the fault timeline ----

double FaultTimeline::since() const {
  if (clock_) return clock_() - clock_start_;
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void FaultTimeline::restart_clock() {
  std::lock_guard lk(mu_);
  start_ = std::chrono::steady_clock::now();
  if (clock_) clock_start_ = clock_();
}

void FaultTimeline::use_clock(std::function<double()> now) {
  std::lock_guard lk(mu_);
  clock_ = std::move(now);
  clock_start_ = clock_();
}

double FaultTimeline::last_step_s() const {
  std::lock_guard lk(mu_);
  return last_step_;
}

/// Time to heal: from the injected fault to the unit working again (" [chip 0.1 healed in 0.5 s]").
std::string FaultTimeline::healed(const std::string& unit, double t) {
  auto it = down_.find(unit);
  if (it == down_.end()) return {};
  const double d = t - it->second;
  down_.erase(it);
  return fmt::format(" [{} healed in {:.3f} s]", unit, d);
}

void FaultTimeline::on(const Event& e) {
  std::lock_guard lk(mu_);
  const double t = since();
  const auto at = fmt::format("{:8.2f}s  ", t);
  if (e.kind == Event::Kind::step) {
    if (std::isfinite(e.loss)) loss_sum_ += e.loss, ++loss_count_;
    last_step_ = std::max(last_step_, t);
    const int chips = islands_.chips_of(e.island);
    if (e.chips != chips) return;
    for (int c = 0; c < chips; ++c) {
      auto note = healed("chip " + std::to_string(e.island) + "." + std::to_string(c), t);
      if (!note.empty())
        lines_.push_back(at + fmt::format("island {} steps with all {} chips again at step {}{}", e.island, chips, e.step, note));
    }
    return;
  }
  switch (e.kind) {
    case Event::Kind::fault:
      faults_.emplace_back(t, e.detail);
      if (e.fault == FaultKind::chip) down_["chip " + std::to_string(e.island) + "." + std::to_string(e.chip)] = t;
      else if (e.fault == FaultKind::island) down_["island " + std::to_string(e.island)] = t;
      else if (e.fault == FaultKind::syncer) down_["syncer"] = t;
      lines_.push_back(at + e.detail);
      return;
    case Event::Kind::heal:
      if (e.incarnation <= 1) return;  // the first start of every island is not news
      lines_.push_back(at + fmt::format("island {} (incarnation {}) healed to round {} at step {}{}", e.island, e.incarnation,
                                        e.round, e.step, healed("island " + std::to_string(e.island), t)));
      return;
    case Event::Kind::rejoin:
      lines_.push_back(at + fmt::format("island {} re-joined the syncer (base round {}, it held {}) at step {}", e.island,
                                        e.round, e.held_round, e.step));
      return;
    case Event::Kind::restore:
      lines_.push_back(at + fmt::format("syncer restarted ({}) at global round {}{}", e.detail, e.round, healed("syncer", t)));
      return;
    case Event::Kind::rejected: lines_.push_back(at + "refused a frame: " + e.detail); return;
    case Event::Kind::diverged:
    case Event::Kind::unusable_state: lines_.push_back(at + e.detail); return;
    case Event::Kind::dropped:
      // Late contributions are normal in small numbers; the first few are shown, all counted.
      if (++dropped_shown_ > 10) return;
      lines_.push_back(at + "syncer dropped a late contribution: " + e.detail +
                       (dropped_shown_ == 10 ? " (further drops are only counted)" : ""));
      return;
    default: return;
  }
}

double FaultTimeline::take_train_loss() {
  std::lock_guard lk(mu_);
  const double mean = loss_count_ ? loss_sum_ / static_cast<double>(loss_count_) : std::nan("");
  loss_sum_ = 0.0;
  loss_count_ = 0;
  return mean;
}

void FaultTimeline::print() const {
  std::lock_guard lk(mu_);
  std::printf("timeline (%zu events):\n", lines_.size());
  for (const auto& l : lines_) std::printf("  %s\n", l.c_str());
  std::fflush(stdout);
}

std::vector<std::pair<double, std::string>> FaultTimeline::faults() const {
  std::lock_guard lk(mu_);
  return faults_;
}

// ---- the round table ----

void RoundTable::header() const {
  if (quiet_) return;
  std::printf("%6s %11s %10s %9s %8s %6s %7s %12s %8s  %-19s %6s\n", "round", "train_loss", "eval_loss", "tok/s", "islands",
              "chips", "quorum", "MB_on_wire", "goodput", "progress", "eta");
  std::fflush(stdout);
}

double run_progress(const diloco::actors::Runtime& rt) {
  if (rt.budget.kind == diloco::Budget::total_tokens)
    return rt.budget.tokens ? std::min(1.0, static_cast<double>(rt.tally().tokens) / static_cast<double>(rt.budget.tokens))
                            : 1.0;
  if (rt.budget.steps <= 0 || rt.islands.empty()) return 1.0;
  double sum = 0.0;
  for (const auto& r : rt.islands) sum += static_cast<double>(std::min(r.step.load(), rt.budget.steps));
  return sum / (static_cast<double>(rt.budget.steps) * static_cast<double>(rt.islands.size()));
}

/// "[#####.......]  42%" and the time left at the pace so far ("1:05"; "-" before any progress).
static std::pair<std::string, std::string> progress_bar(double fraction, double seconds) {
  constexpr int width = 12;
  const int filled = static_cast<int>(std::lround(fraction * width));
  std::string bar = "[" + std::string(static_cast<std::size_t>(filled), '#') +
                    std::string(static_cast<std::size_t>(width - filled), '.') + "]";
  bar += fmt::format(" {:3.0f}%", 100.0 * fraction);
  if (!(fraction > 0.0)) return {bar, "-"};
  const long left = std::lround(seconds * (1.0 - fraction) / fraction);
  return {bar, fmt::format("{}:{:02d}", left / 60, left % 60)};
}

void RoundTable::row(std::uint64_t round, double train_loss, double eval_loss, double now, double seconds) const {
  const auto t = rt_.tally();
  const auto gp = rt_.goodput_report(now);
  const int quorum = rt_.synchronous() ? rt_.cfg.train.islands : rt_.cfg.quorum.min_islands;
  const double done = run_progress(rt_);
  const auto [bar, eta] = progress_bar(done, seconds);
  if (!quiet_)
    std::printf("%6llu %11.4f %10.4f %9.0f %8d %6d %7d %12.3f %7.1f%%  %-19s %6s\n", static_cast<unsigned long long>(round),
                train_loss, eval_loss, t.tokens / std::max(seconds, 1e-9), t.live_islands, t.live_chips, quorum,
                t.bytes_sent / 1e6, 100.0 * gp.goodput, bar.c_str(), eta.c_str());
  std::fflush(stdout);
  std::vector<long> island_steps;  // each island's last step: how fast each goes
  for (const auto& rec : rt_.islands) island_steps.push_back(rec.step.load());
  jsonl_.write(Json{{"round", round},
                    {"train_loss", train_loss},
                    {"eval_loss", eval_loss},
                    {"tokens", t.tokens},
                    {"bytes", t.bytes_sent},
                    {"goodput", gp.goodput},
                    {"useful_chip_s", gp.useful_chip_s},
                    {"provisioned_chip_s", gp.provisioned_chip_s},
                    {"stepped_chip_s", gp.stepped_chip_s},
                    {"downtime_s", gp.global_downtime_s},
                    {"live_islands", t.live_islands},
                    {"live_chips", t.live_chips},
                    {"progress", done},
                    {"island_steps", island_steps},
                    {"seconds", seconds}});
}

// ---- the summary ----

std::size_t faults_scheduled(const diloco::actors::Runtime& rt) {
  // The schedule holds [chaos] events and the time-triggered [[faults]]; the step-triggered
  // ones fire from the islands.
  return rt.schedule.size() + static_cast<std::size_t>(std::count_if(
                                  rt.cfg.faults.begin(), rt.cfg.faults.end(), [](const auto& f) { return f.at_s < 0.0; }));
}

std::size_t check_invariants(diloco::actors::Runtime& rt, double at, diloco::actors::RunPart part) {
  rt.check_end(at, part);
  const auto violations = rt.violations();
  for (const auto& v : violations)
    spdlog::error("invariant broken ({}) at {:.3f} s: {}", to_string(v.kind), v.at - rt.t0.load(), v.what);
  return violations.size();
}

void print_invariants(std::size_t violations, diloco::actors::RunPart part) {
  using Part = diloco::actors::RunPart;
  if (violations == 0)
    std::printf("invariants: all kept (%s)\n",
                part == Part::whole_run ? "rounds, quorum, refused frames, heals, finite parameters, goodput, repairs"
                : part == Part::syncer  ? "this syncer's part: rounds, quorum, refused frames, finite parameters, its restores"
                                        : "this site's part: heals, finite parameters, its chips' and islands' repairs");
  else
    std::printf("invariants: %zu violation(s), logged above\n", violations);
}

void print_summary(const diloco::actors::Runtime& rt, const RunEnd& end, const FaultTimeline& timeline, JsonLines& jsonl) {
  const auto& cfg = rt.cfg;
  const auto t = rt.tally();
  const auto& gp = end.goodput;
  timeline.print();
  std::printf("done: %s on actors, %llu global rounds, final eval loss %.4f ± %.4f nats/token",
              std::string(name_of(cfg.train.mode)).c_str(), static_cast<unsigned long long>(end.rounds), end.eval.loss,
              end.eval.std_error);
  if (auto floor = rt.corpus.entropy_floor())
    std::printf(" (entropy floor %.4f, unigram entropy %.4f)", *floor, rt.corpus.unigram_entropy());
  std::printf(", %llu tokens in %.1f s (%.0f tok/s), %.2f MB on the wire", static_cast<unsigned long long>(t.tokens),
              end.seconds, t.tokens / std::max(end.seconds, 1e-9), t.bytes_sent / 1e6);
  std::printf("; %s, %s, %s", counted(t.commits, "fragment commit").c_str(),
              counted(t.dropped_stale, "late contribution", " dropped").c_str(),
              counted(t.rejected, "frame", " refused").c_str());
  if (t.clipped > 0) std::printf(", %s", counted(t.clipped, "outer gradient", " clipped").c_str());
  if (t.unblocked > 0)
    std::printf(", %s", counted(t.unblocked, "round", " committed without islands waiting on other rounds").c_str());
  if (t.superseded > 0)
    std::printf(", %s", counted(t.superseded, "send", " superseded by the same island's next before a commit").c_str());
  if (t.held > 0)
    std::printf(", %s", counted(t.held, "heal fragment", " not sent (their island held them already)").c_str());
  std::printf("\n");
  std::printf("goodput %.1f%%: %.1f of %.1f chip-seconds reached the global model (lost: %.1f to failures, %.1f to "
              "stale drops, %.1f undecided at the end; the rest waiting or down); global downtime %.2f s\n",
              100.0 * gp.goodput, gp.useful_chip_s, gp.provisioned_chip_s, gp.lost_failure_chip_s, gp.lost_stale_chip_s,
              gp.in_flight_chip_s, gp.global_downtime_s);
  if (cfg.fragments.adopt != diloco::AdoptRule::mix) {
    const bool carry = cfg.fragments.adopt == diloco::AdoptRule::carry;
    std::printf("adoptions: %llu rebased onto other islands' commits, ", static_cast<unsigned long long>(t.rebased));
    if (carry)
      std::printf("%llu carried over a commit of the island's last send, ", static_cast<unsigned long long>(t.carried));
    std::printf("%llu mixed (%s)\n", static_cast<unsigned long long>(t.mixed),
                carry ? "one it could not tell" : "a commit with the island's own send, or one it could not tell");
  }
  if (cfg.fragments.wait_steps > 0.0 && cfg.train.mode == diloco::TrainMode::decoupled)  // others never hold
    std::printf("waits for a due merge: %llu, %.2f s in all (%llu ran out before it came)\n",
                static_cast<unsigned long long>(t.waits), t.waited_s, static_cast<unsigned long long>(t.wait_timeouts));
  print_invariants(end.violations, diloco::actors::RunPart::whole_run);
  if (jsonl) {
    for (const auto& [at, what] : timeline.faults()) jsonl.write(Json{{"fault", what}, {"seconds", at}});
    // Per site link: bytes each way and the busiest second (peak bandwidth in use).
    auto links = Json::array();
    for (const auto& l : rt.links.report())
      links.push_back(Json{{"site", l.site},
                           {"up_bytes", l.up_bytes},
                           {"down_bytes", l.down_bytes},
                           {"up_peak_mbps", l.up_peak * l.bandwidth_Bps * 8e-6},
                           {"down_peak_mbps", l.down_peak * l.bandwidth_Bps * 8e-6},
                           {"bandwidth_mbps", l.bandwidth_Bps * 8e-6}});
    std::vector<long> island_steps;  // how far each island got (faster islands further under a token budget)
    for (const auto& rec : rt.islands) island_steps.push_back(rec.step.load());
    std::vector<int> island_chips;  // chips each island was configured with (stepped_chip_s counts chip-seconds)
    for (int i = 0; i < cfg.train.islands; ++i) island_chips.push_back(cfg.islands.chips_of(i));
    jsonl.write(Json{{"summary", true},
                     {"mode", name_of(cfg.train.mode)},
                     {"island_steps", island_steps},
                     {"island_chips", island_chips},
                     {"final_eval_loss", end.eval.loss},
                     {"final_eval_std_error", end.eval.std_error},
                     {"seconds", end.seconds},
                     {"tokens", t.tokens},
                     {"bytes", t.bytes_sent},
                     {"goodput", gp.goodput},
                     {"useful_chip_s", gp.useful_chip_s},
                     {"provisioned_chip_s", gp.provisioned_chip_s},
                     {"stepped_chip_s", gp.stepped_chip_s},
                     {"trained_s", timeline.last_step_s()},
                     {"downtime_s", gp.global_downtime_s},
                     {"faults", timeline.faults().size()},
                     {"faults_scheduled", faults_scheduled(rt)},
                     {"schedule_hash", fmt::format("{:016x}", diloco::schedule_hash(rt.schedule))},
                     {"rounds", end.rounds},
                     {"commits", t.commits},
                     {"dropped_stale", t.dropped_stale},
                     {"superseded", t.superseded},
                     {"clipped", t.clipped},
                     {"unblocked", t.unblocked},
                     {"held_fragments", t.held},
                     {"adoptions_rebased", t.rebased},
                     {"adoptions_mixed", t.mixed},
                     {"adoptions_carried", t.carried},
                     {"waits", t.waits},
                     {"waited_s", t.waited_s},
                     {"wait_timeouts", t.wait_timeouts},
                     {"invariant_violations", end.violations},
                     {"links", std::move(links)}});
  }
  if (!rt.links.empty()) {
    const auto links = rt.links.totals();
    std::printf("links (emulated%s): %.2f MB carried incl. progress reports, %llu retransmissions\n",
                cfg.wan.enabled ? "" : ", ideal but for partitions", links.bytes / 1e6,
                static_cast<unsigned long long>(links.retransmissions));
    for (const auto& l : rt.links.report())
      std::printf("  %-12s %8.1f Mbit/s  up %10.3f MB (peak %5.1f%%)  down %10.3f MB (peak %5.1f%%)\n", l.site.c_str(),
                  l.bandwidth_Bps * 8e-6, l.up_bytes / 1e6, 100.0 * l.up_peak, l.down_bytes / 1e6, 100.0 * l.down_peak);
  }
  std::fflush(stdout);
}

void log_start(const diloco::actors::Runtime& rt, const std::string& config_label, unsigned threads) {
  const auto& cfg = rt.cfg;
  spdlog::info("config: {}", config_label.empty() ? "built-in defaults" : config_label);
  spdlog::info("data: {}", rt.corpus.describe());
  std::string speeds;
  for (int i = 0; i < cfg.train.islands; ++i) speeds += fmt::format("{}{:.2f}", i ? "," : "", cfg.islands.speed_of(i));
  spdlog::info("mode {} (actor runtime{}): {} islands x {} chips (speed {}; <1 is emulated by delayed chip "
               "replies), {} steps, H={}, P={}, K={}, grace {}, encoding {}, {} scheduler threads",
               name_of(cfg.train.mode), rt.synchronous() ? ", synchronous rounds" : "", cfg.train.islands,
               cfg.islands.counts.empty() ? std::to_string(cfg.islands.chips)
                                          : fmt::format("[{}]", fmt::join(cfg.islands.counts, ",")),
               speeds, cfg.train.steps, cfg.train.H, rt.P(), rt.synchronous() ? cfg.train.islands : cfg.quorum.min_islands,
               name_of(cfg.quorum.grace), cfg.fragments.encoding, threads);
  // A fault triggered by a step the budget never reaches would silently not happen.
  for (std::size_t k = 0; k < cfg.faults.size(); ++k) {
    const auto& f = cfg.faults[k];
    if (f.at_s < 0.0 && cfg.train.budget == diloco::Budget::island_steps && f.at_step > cfg.train.steps)
      spdlog::warn("faults[{}] (kill {} at island {} step {}) cannot fire: island {} trains only train.steps = {} steps",
                   k, name_of(f.kill), f.island, f.at_step, f.island, cfg.train.steps);
  }
  if (rt.schedule.empty()) return;
  spdlog::info("fault schedule: {} events (hash {:016x}){}", rt.schedule.size(), diloco::schedule_hash(rt.schedule),
               cfg.chaos.enabled ? fmt::format(", chaos seed {}", cfg.chaos.seed) : std::string());
  for (std::size_t k = 0; k < rt.schedule.size() && k < 8; ++k) spdlog::info("  {}", rt.schedule[k].describe());
  if (rt.schedule.size() > 8) spdlog::info("  ... and {} more", rt.schedule.size() - 8);
}

// ---- the lines of the syncer and site processes ----

std::optional<std::string> syncer_line(const Event& e) {
  switch (e.kind) {
    case Event::Kind::restore: return "syncer restored (" + e.detail + ") at global round " + std::to_string(e.round);
    case Event::Kind::join: return "island " + std::to_string(e.island) + " joined at global round " + std::to_string(e.round);
    case Event::Kind::rejected: return "refused: " + e.detail;
    case Event::Kind::dropped: return "dropped a late contribution: " + e.detail;
    case Event::Kind::diverged:
    case Event::Kind::unusable_state: return e.detail;
    default: return std::nullopt;
  }
}

std::optional<std::string> site_line(const Event& e, long every_steps) {
  switch (e.kind) {
    case Event::Kind::step:
      if (e.step % every_steps != 0) return std::nullopt;
      return fmt::format("island {} step {} train loss {:.4f}", e.island, e.step, e.loss);
    case Event::Kind::heal:
      return fmt::format("island {} (incarnation {}) healed to global round {} at step {}", e.island, e.incarnation, e.round,
                         e.step);
    case Event::Kind::rejoin:
      return fmt::format("island {} re-joined the syncer (base round {}, it held {}) at step {}", e.island, e.round,
                         e.held_round, e.step);
    case Event::Kind::fault: return e.detail;
    case Event::Kind::leave:
      return e.unsent > 0 ? fmt::format("island {} leaving at step {}: hands over the unsent progress of {} fragment(s)",
                                        e.island, e.step, e.unsent)
                          : fmt::format("island {} leaving at step {}: nothing unsent", e.island, e.step);
    default: return std::nullopt;
  }
}
