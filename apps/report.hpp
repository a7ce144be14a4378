// The apps' one report writer: a timeline of timestamped lines on stdout and JSON lines for
// --metrics, every object built with nlohmann::json (keys in the order written; a number that
// is not finite becomes null).
#pragma once

#include <chrono>
#include <fstream>
#include <mutex>
#include <string>

#include <nlohmann/json.hpp>

using Json = nlohmann::ordered_json;

/// Timestamped lines on stdout from any thread ("   12.34s  what happened").
class Timeline {
public:
  void line(const std::string& s);
  /// Seconds since this timeline began.
  double since() const;

private:
  std::mutex mu_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

/// One JSON object per line (--metrics). Closed (writes nothing) until open() succeeds.
class JsonLines {
public:
  /// Opens `path` for writing (`append`: after what is there, as a restarted syncer does).
  /// Throws std::runtime_error naming the flag and the file when it cannot be opened.
  void open(const std::string& path, bool append = false);
  explicit operator bool() const { return out_.is_open(); }
  void write(const Json& object);

private:
  std::ofstream out_;
};
