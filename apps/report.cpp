// The report writer (report.hpp).
#include "report.hpp"

#include <cstdio>
#include <stdexcept>

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
