#include "diloco/run_state.hpp"

#include <atomic>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>
#include <sstream>

#include <unistd.h>

namespace diloco {

namespace {

const std::string kFormatKey = "format";

/// "key = value" lines into a map (values as written: TOML syntax, compared as text).
std::map<std::string, std::string> parse_manifest(const std::string& text) {
  std::map<std::string, std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const auto eq = line.find(" = ");
    if (eq == std::string::npos) continue;
    out[line.substr(0, eq)] = line.substr(eq + 3);
  }
  return out;
}

}  // namespace

bool may_differ_on_resume(const std::string& key) { return key == "syncer.checkpoint"; }

std::string run_manifest(const RunConfig& cfg) {
  std::string s = "# diloco run state: the settings this run was started with; it resumes under these only.\n";
  s += kFormatKey + " = " + std::to_string(kRunStateFormat) + "\n";
  for (const auto& [k, v] : config_entries(cfg)) s += k + " = " + v + "\n";
  return s;
}

Status check_manifest(const std::string& manifest, const RunConfig& cfg) {
  auto saved = parse_manifest(manifest);
  const auto format = saved.find(kFormatKey);
  if (format == saved.end() || format->second != std::to_string(kRunStateFormat))
    return Error{errc::checkpoint_mismatch, "state directory of format " +
                                                (format == saved.end() ? std::string("(none)") : format->second) +
                                                ", this build reads format " + std::to_string(kRunStateFormat)};
  saved.erase(format);
  std::vector<std::string> diffs;
  std::set<std::string> seen;
  std::map<std::string, std::string> defaults;
  for (auto& [k, v] : config_entries(RunConfig{})) defaults.emplace(std::move(k), std::move(v));
  for (const auto& [k, v] : config_entries(cfg)) {
    seen.insert(k);
    if (may_differ_on_resume(k)) continue;
    const auto it = saved.find(k);
    // A setting newer than the directory, left at its default, changes nothing of the run.
    if (it == saved.end() && defaults.count(k) && defaults[k] == v) continue;
    if (it == saved.end()) diffs.push_back(k + " is not in the state directory, " + v + " now");
    else if (it->second != v) diffs.push_back(k + " is " + it->second + " in the state directory, " + v + " now");
  }
  for (const auto& [k, v] : saved)
    if (!seen.count(k) && !may_differ_on_resume(k)) diffs.push_back(k + " is " + v + " in the state directory, unset now");
  if (diffs.empty()) return {};
  std::string why = "the state directory is of another configuration: ";
  for (std::size_t i = 0; i < diffs.size(); ++i) why += (i ? "; " : "") + diffs[i];
  return Error{errc::checkpoint_mismatch, why};
}

Expected<RunStateDir> open_run_state(const std::string& dir, const RunConfig& cfg, const std::string& file) {
  RunStateDir d{dir, false, file};
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (!ec) std::filesystem::create_directories(std::filesystem::path(d.state_path()).parent_path(), ec);
  if (ec) return Error{errc::io_error, "cannot create the state directory '" + dir + "': " + ec.message()};
  if (std::filesystem::exists(d.manifest_path(), ec)) {
    auto bytes = read_file(d.manifest_path());
    if (!bytes) return bytes.error();
    const std::string text(reinterpret_cast<const char*>(bytes->data()), bytes->size());
    if (auto ok = check_manifest(text, cfg); !ok) return Error{ok.error().code, d.manifest_path() + ": " + ok.error().reason};
    d.resuming = std::filesystem::exists(d.state_path(), ec);
    return d;
  }
  // A state file without a manifest is not this run's to overwrite.
  if (std::filesystem::exists(d.state_path(), ec))
    return Error{errc::checkpoint_mismatch, d.state_path() + " has no manifest (" + d.manifest_path() +
                                                "): not a run state directory this build wrote"};
  // Processes started together on one directory (a syncer and its sites, replicas) may all find
  // no manifest: each writes its own copy and links it in place, which only the first can do
  // (link fails if the name exists); the others then check the one that is there.
  static std::atomic<unsigned> calls{0};
  const std::string mine = d.manifest_path() + "." + std::to_string(::getpid()) + "." + std::to_string(calls++) + ".new";
  if (auto ok = write_file_atomically(mine, run_manifest(cfg)); !ok) return ok.error();
  std::filesystem::create_hard_link(mine, d.manifest_path(), ec);
  std::error_code ignored;
  std::filesystem::remove(mine, ignored);
  if (ec == std::errc::file_exists) return open_run_state(dir, cfg, file);
  if (ec) return Error{errc::io_error, "cannot create " + d.manifest_path() + ": " + ec.message()};
  return d;
}

Checkpoint islands_state_file(std::span<const float> initial, const FragmentPlan& plan, std::vector<IslandState> islands) {
  Checkpoint cp;
  cp.params.assign(initial.begin(), initial.end());
  for (int p = 0; p < plan.count(); ++p) cp.momentum.emplace_back(plan.size(p), 0.0f);
  cp.rounds.assign(static_cast<std::size_t>(plan.count()), 0);
  cp.islands = std::move(islands);
  return cp;
}

void put_run_progress(Checkpoint& cp, const RunProgress& p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", p.elapsed_s);
  cp.metadata["run.elapsed_s"] = buf;
  std::string t;
  for (std::size_t i = 0; i < p.tokens.size(); ++i) t += (i ? "," : "") + std::to_string(p.tokens[i]);
  cp.metadata["run.tokens"] = t;
}

Expected<RunProgress> run_progress_of(const std::map<std::string, std::string>& metadata, int islands) {
  RunProgress p;
  p.tokens.assign(static_cast<std::size_t>(islands), 0);
  if (const auto it = metadata.find("run.elapsed_s"); it != metadata.end()) {
    const std::string& s = it->second;
    double v = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || end != s.data() + s.size() || !std::isfinite(v) || v < 0)
      return Error{errc::corrupt_checkpoint, "metadata run.elapsed_s = '" + s.substr(0, 40) + "' is not a number of seconds"};
    p.elapsed_s = v;
  }
  if (const auto it = metadata.find("run.tokens"); it != metadata.end() && !it->second.empty()) {
    const std::string& s = it->second;
    std::size_t i = 0, at = 0;
    while (at <= s.size()) {
      const auto comma = std::min(s.find(',', at), s.size());
      std::uint64_t v = 0;
      const auto [end, ec] = std::from_chars(s.data() + at, s.data() + comma, v);
      if (ec != std::errc() || end != s.data() + comma || i >= p.tokens.size())
        return Error{errc::corrupt_checkpoint, "metadata run.tokens = '" + s.substr(0, 40) + "' is not " +
                                                   std::to_string(islands) + " token counts"};
      p.tokens[i++] = v;
      at = comma + 1;
    }
    if (i != p.tokens.size())
      return Error{errc::corrupt_checkpoint, "metadata run.tokens = '" + s.substr(0, 40) + "' is not " +
                                                 std::to_string(islands) + " token counts"};
  }
  return p;
}

}  // namespace diloco
