// `diloco plot` (plot_cmd.hpp): reads the rows, faults and summary that apps/report.cpp writes
// with --metrics, writes them as gnuplot data in a scratch directory and runs gnuplot on a script
// that draws three panels.
#include "plot_cmd.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spawn.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace plotcmd {

std::unique_ptr<Flags> add_command(CLI::App& app) {
  auto f = std::make_unique<Flags>();
  auto* cmd = app.add_subcommand("plot", "draw a run's --metrics file (eval loss with faults, goodput and live islands, "
                                         "bytes per link) as a PNG with gnuplot");
  cmd->add_option("metrics", f->metrics, "JSON lines written by diloco run --metrics")->required()->check(CLI::ExistingFile);
  cmd->add_option("-o,--out", f->out, "the PNG to write")->required();
  cmd->add_option("--gnuplot", f->gnuplot, "the gnuplot program (Debian gnuplot-nox)")->capture_default_str();
  return f;
}

namespace {

using Json = nlohmann::json;

double number(const Json& o, const char* key) {
  auto it = o.find(key);
  return it != o.end() && it->is_number() ? it->get<double>() : NAN;
}

/// gnuplot's quoting: a single-quoted string with ' doubled.
std::string quoted(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("''") : std::string(1, c);
  return q + "'";
}

int run_program(const std::string& program, const std::string& script) {
  std::vector<char*> argv{const_cast<char*>(program.c_str()), const_cast<char*>(script.c_str()), nullptr};
  pid_t pid = 0;
  if (posix_spawnp(&pid, program.c_str(), nullptr, nullptr, argv.data(), environ) != 0)
    throw std::runtime_error("--gnuplot: cannot run '" + program + "' (scripts/setup.sh installs gnuplot-nox)");
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

}  // namespace

int run(const Flags& f) {
  std::ifstream in(f.metrics);
  if (!in) throw std::runtime_error("cannot read '" + f.metrics + "'");
  namespace fs = std::filesystem;
  const auto dir = fs::temp_directory_path() / fmt::format("diloco-plot-{}", ::getpid());
  fs::create_directories(dir);
  std::ofstream rounds(dir / "rounds.dat"), faults(dir / "faults.dat"), links(dir / "links.dat");
  std::string line, mode = "?";
  long n_rounds = 0, n_faults = 0, n_links = 0, lineno = 0;
  bool goodput = false, islands = false;
  double end_s = 0.0, final_loss = NAN;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.empty()) continue;
    Json o;
    try {
      o = Json::parse(line);
    } catch (const std::exception& e) {
      throw std::runtime_error(fmt::format("{}:{}: not a JSON object ({})", f.metrics, lineno, e.what()));
    }
    if (!o.is_object()) throw std::runtime_error(fmt::format("{}:{}: not a JSON object", f.metrics, lineno));
    if (o.contains("summary")) {
      if (o.contains("mode") && o["mode"].is_string()) mode = o["mode"].get<std::string>();
      end_s = number(o, "seconds");
      final_loss = number(o, "final_eval_loss");
      if (o.contains("links") && o["links"].is_array())
        for (const auto& l : o["links"]) {
          links << fmt::format("\"{}\" {} {}\n", l.value("site", std::string("?")), number(l, "up_bytes") / 1e6,
                               number(l, "down_bytes") / 1e6);
          ++n_links;
        }
    } else if (o.contains("fault")) {
      faults << fmt::format("{} 0\n", number(o, "seconds"));
      ++n_faults;
    } else if (o.contains("round")) {
      const double gp = number(o, "goodput"), live = number(o, "live_islands");
      goodput = goodput || std::isfinite(gp);
      islands = islands || std::isfinite(live);
      auto v = [](double x) { return std::isfinite(x) ? fmt::format("{}", x) : std::string("NaN"); };
      rounds << fmt::format("{} {} {} {} {} {}\n", v(number(o, "seconds")), v(number(o, "eval_loss")), v(100.0 * gp),
                            v(live), v(number(o, "bytes") / 1e6), v(number(o, "train_loss")));
      ++n_rounds;
    }
  }
  rounds.close(), faults.close(), links.close();
  if (n_rounds == 0) {
    fs::remove_all(dir);
    throw std::runtime_error("'" + f.metrics + "' holds no round (is it a --metrics file of diloco run?)");
  }
  const auto d = [&](const char* name) { return quoted((dir / name).string()); };
  std::string g;
  g += "set terminal pngcairo size 1200,1100 font ',11'\n";
  g += "set output " + quoted(f.out) + "\n";
  g += "set multiplot layout 3,1 title " +
       quoted(fmt::format("{}: {} rounds{}{}", mode, n_rounds,
                          std::isfinite(final_loss) ? fmt::format(", final eval loss {:.4f}", final_loss) : "",
                          n_faults ? fmt::format(", {} faults (red)", n_faults) : "")) + "\n";
  g += "set grid\nset key top right\nset xlabel 'seconds'\n";
  if (std::isfinite(end_s) && end_s > 0) g += fmt::format("set xrange [0:{}]\n", end_s);
  // The faults as vertical red lines on the time panels.
  std::ifstream fin(dir / "faults.dat");
  std::string marks;
  for (double t, z; fin >> t >> z;)
    marks += fmt::format("set arrow from {0},graph 0 to {0},graph 1 nohead lc rgb '#c0392b' dt 2\n", t);
  g += marks;
  g += "set ylabel 'loss (nats/token)'\n";
  g += "plot " + d("rounds.dat") + " using 1:2 with linespoints lw 2 pt 7 ps 0.6 lc rgb '#2d6cdf' title 'eval loss', " +
       d("rounds.dat") + " using 1:6 with lines lc rgb '#999999' title 'train loss'\n";
  if (goodput || islands) {
    g += "set ylabel 'goodput (%)'\nset yrange [0:105]\nset y2label 'live islands'\nset y2tics\nset ytics nomirror\n";
    g += "set y2range [0:*]\n";
    g += "plot " + d("rounds.dat") + " using 1:3 with lines lw 2 lc rgb '#1a7f37' title 'goodput', " + d("rounds.dat") +
         " using 1:4 axes x1y2 with steps lw 2 lc rgb '#8250df' title 'live islands'\n";
    g += "unset y2tics\nunset y2label\nset ytics mirror\nset yrange [*:*]\n";
  } else {
    g += "set ylabel 'MB on the wire'\nplot " + d("rounds.dat") +
         " using 1:5 with lines lw 2 lc rgb '#1a7f37' title 'bytes (reference loop: no goodput)'\n";
  }
  g += "unset arrow\nunset xrange\nset autoscale x\n";
  if (n_links) {
    g += "set xlabel 'site'\nset ylabel 'MB'\nset style data histograms\nset style histogram clustered gap 1\n";
    g += "set style fill solid 0.8 border -1\nset boxwidth 0.9\nset xtics rotate by -20\n";
    g += "plot " + d("links.dat") + " using 2:xtic(1) title 'up (to the syncer)' lc rgb '#2d6cdf', '' using 3 title 'down' "
         "lc rgb '#e08a00'\n";
  } else {
    g += "set ylabel 'MB on the wire'\nplot " + d("rounds.dat") +
         " using 1:5 with lines lw 2 lc rgb '#e08a00' title 'bytes, all islands (no per-link figures in this file)'\n";
  }
  g += "unset multiplot\n";
  const auto script = dir / "plot.gp";
  std::ofstream(script) << g;
  const int rc = run_program(f.gnuplot, script.string());
  fs::remove_all(dir);
  if (rc != 0) {
    spdlog::error("gnuplot failed (exit status {}) drawing {}", rc, f.out);
    return 1;
  }
  std::printf("plot: %s (%ld rounds, %ld faults, %ld links)\n", f.out.c_str(), n_rounds, n_faults, n_links);
  return 0;
}

}  // namespace plotcmd
