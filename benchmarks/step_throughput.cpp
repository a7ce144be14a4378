// Training-step throughput of the byte GPT on one thread, against this machine's single-core
// SGEMM (the GEMM the chip itself multiplies with: OpenBLAS, or Eigen's under DILOCO_GEMM=eigen),
// against the same chip on Eigen's own GEMM (a second run of this program with DILOCO_GEMM=eigen)
// and against PyTorch running the same architecture (step_throughput_torch.py).
//
// Every side runs with OpenBLAS's own choice of kernels for this CPU: the program restarts itself
// once without OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE, and PyTorch's command inherits that.
//
// The fraction of SGEMM pairs measurements taken side by side in time: the timed steps run in
// --rounds slices, each followed by a slice of SGEMM, and the figure is the median of the slices'
// fractions, so a machine whose speed drifts (a shared VM) moves both sides of each ratio alike.
// PyTorch is timed the same way: its twin stays up beside this process (--serve) and trains a
// slice of as many steps after each SGEMM slice, and so does the TorchScript chip after that, so
// the ratios pair slices taken seconds apart, not runs taken minutes apart.
//
// The columns above train with a minimal AdamW of this file, the same update as PyTorch's twin.
// One more column trains the chip with the library's AdamW as the runtime's chips run it (global
// gradient norm, clipping at 1.0, the schedule): what a run of `diloco` gets per step.
//
//   step_throughput [--widths 128,256,512 | --n_embd C] [--batch 8] [--steps 50] [--warmup 5]
//                   [--rounds 5] [--n_layer 4] [--n_head 4] [--seq_len 64] [--no-torch]
//                   [--no-eigen-gemm]
//
// Without --n_embd it sweeps the widths (128, 256 and 512 by default): it runs itself once per
// width (each run as above, its columns side by side in time) and ends with a table of the ratios
// and the fractions of SGEMM against the targets. With --n_embd it measures that one width.
//
// The last line of output is one JSON object (for scripts); everything above it is for people.
// GCC 12 reports false -Wmaybe-uninitialized positives inside Eigen's AVX-512 packet code.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <Eigen/Core>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <sys/wait.h>
#include <unistd.h>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "diloco/model.hpp"
#include "diloco/optim.hpp"
#include "diloco/rng.hpp"
#include "gemm.hpp"  // the library's private GEMM, so the SGEMM figure is the one the chip uses
#include "timing.hpp"
#ifdef DILOCO_HAS_TORCH
#include "diloco/torchscript.hpp"
#endif

#ifndef DILOCO_BENCH_DIR
#define DILOCO_BENCH_DIR "."
#endif

namespace {

using diloco::bench::clock_type;
using diloco::bench::median;
using diloco::bench::seconds_since;

struct Options {
  int batch = 8;
  int steps = 50;
  int warmup = 5;
  int rounds = 5;  // slices of the timed steps, each followed by a slice of SGEMM
  bool torch = true;
  bool eigen_gemm = true;  // also run the chip on Eigen's GEMM (DILOCO_GEMM=eigen), in a child
  diloco::ModelConfig model;  // defaults: C=128, L=4, NH=4, T=64
  std::vector<int> widths{128, 256, 512};  // swept unless --n_embd names one width
  bool one_width = false;
};

std::vector<int> parse_widths(const std::string& list) {
  std::vector<int> w;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');) {
    const bool digits = !item.empty() && item.size() <= 6 &&
                        std::all_of(item.begin(), item.end(), [](unsigned char c) { return std::isdigit(c); });
    if (!digits || std::stoi(item) < 1) throw std::invalid_argument("--widths: '" + item + "' is not a width");
    w.push_back(std::stoi(item));
  }
  if (w.empty()) throw std::invalid_argument("--widths needs at least one width");
  return w;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> int {
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
      return std::stoi(argv[++i]);
    };
    if (a == "--batch") o.batch = value();
    else if (a == "--steps") o.steps = value();
    else if (a == "--warmup") o.warmup = value();
    else if (a == "--rounds") o.rounds = value();
    else if (a == "--n_embd") {
      o.model.n_embd = value();
      o.one_width = true;
    } else if (a == "--widths") {
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
      o.widths = parse_widths(argv[++i]);
    }
    else if (a == "--n_layer") o.model.n_layer = value();
    else if (a == "--n_head") o.model.n_head = value();
    else if (a == "--seq_len") o.model.seq_len = value();
    else if (a == "--no-torch") o.torch = false;
    else if (a == "--no-eigen-gemm") o.eigen_gemm = false;
    else if (a == "--help" || a == "-h") {
      std::puts("step_throughput [--widths C,C,... | --n_embd C] [--batch N] [--steps N] [--warmup N] [--rounds N]"
                " [--n_layer L] [--n_head NH] [--seq_len T] [--no-torch] [--no-eigen-gemm]");
      std::exit(0);
    } else {
      throw std::invalid_argument("unknown flag " + a);
    }
  }
  if (o.batch < 1 || o.steps < 1 || o.warmup < 0 || o.rounds < 1 || o.rounds > o.steps)
    throw std::invalid_argument("--batch and --steps must be >= 1, --warmup >= 0, 1 <= --rounds <= --steps");
  if (o.model.n_head < 1) throw std::invalid_argument("--n_head must be >= 1");
  for (int c : o.one_width ? std::vector<int>{o.model.n_embd} : o.widths)
    if (c % o.model.n_head != 0)
      throw std::invalid_argument("width " + std::to_string(c) + " is not divisible by --n_head " + std::to_string(o.model.n_head));
  return o;
}

/// Minimal AdamW (decoupled weight decay on `decay` tensors), written here so the benchmark does
/// not depend on the library's optimizer: the point is a realistic per-step update cost.
struct AdamW {
  static constexpr float kLr = 1e-3f;  // also the library column's (Trainer)
  float lr = kLr, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, wd = 0.1f;
  std::vector<float> m, v, decay_mask;
  int t = 0;
  explicit AdamW(const diloco::ParamLayout& layout)
      : m(layout.size()), v(layout.size()), decay_mask(layout.size()) {
    for (const auto& ts : layout.tensors())
      std::fill_n(decay_mask.begin() + ts.offset, ts.size, ts.decay ? 1.0f : 0.0f);
  }
  void step(std::vector<float>& p, const std::vector<float>& g) {
    ++t;
    const float c1 = 1.0f / (1.0f - std::pow(beta1, static_cast<float>(t)));
    const float c2 = 1.0f / (1.0f - std::pow(beta2, static_cast<float>(t)));
    // The settings and the arrays, loaded once: a store to p[i] might otherwise change a float
    // member of this object as far as the compiler knows, and once this was inlined where the
    // optimizer is reachable from outside (Trainer) the loop reloaded them every element and
    // did not vectorize (3x as long).
    const std::size_t n = p.size();
    const float b1 = beta1, b2 = beta2, rate = lr, e = eps, decay = wd;
    float *pp = p.data(), *mm = m.data(), *vv = v.data();
    const float *gg = g.data(), *dm = decay_mask.data();
    for (std::size_t i = 0; i < n; ++i) {
      mm[i] = b1 * mm[i] + (1.0f - b1) * gg[i];
      vv[i] = b2 * vv[i] + (1.0f - b2) * gg[i] * gg[i];
      const float update = (mm[i] * c1) / (std::sqrt(vv[i] * c2) + e);
      pp[i] -= rate * (update + decay * dm[i] * pp[i]);
    }
  }
};

/// Single-thread SGEMM at n×n×n, GFLOP/s, timed for at least `seconds` and 3 products: through
/// the library's GEMM (`chip`, what the models multiply with) or through Eigen's own product.
double sgemm_gflops(int n, bool chip, double seconds = 1.0) {
  Eigen::MatrixXf a = Eigen::MatrixXf::Random(n, n), b = Eigen::MatrixXf::Random(n, n);
  Eigen::MatrixXf c(n, n);
  auto product = [&] {
    if (chip) diloco::nn::gemm(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    else c.noalias() = a * b;
  };
  product();  // warm-up
  int reps = 0;
  const auto t0 = clock_type::now();
  double elapsed = 0;
  do {
    product();
    ++reps;
    elapsed = seconds_since(t0);
  } while (elapsed < seconds || reps < 3);
  volatile float sink = c(0, 0);
  (void)sink;
  return 2.0 * n * n * n * reps / elapsed / 1e9;
}

/// A number of one run's JSON line ("key":value), if it is there and not null.
std::optional<double> json_number(const std::string& line, const std::string& key) {
  const auto pos = line.find("\"" + key + "\":");
  if (pos == std::string::npos) return std::nullopt;
  const char* start = line.c_str() + pos + key.size() + 3;
  char* end = nullptr;
  const double v = std::strtod(start, &end);
  if (end == start) return std::nullopt;
  return v;
}

/// What a command printed last: its exit status (-1: it did not start) and its last non-empty
/// line, read whole however long; with `echo` every line is passed through to stdout as it comes.
struct CommandOutput {
  int status = -1;
  std::string last;
};
CommandOutput run_command(const std::string& cmd, bool echo) {
  CommandOutput r;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) return r;
  std::string line;
  char buf[4096];
  auto end_line = [&] {
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
    if (!line.empty()) r.last = line;
    line.clear();
  };
  while (std::fgets(buf, sizeof buf, pipe)) {
    if (echo) std::fputs(buf, stdout);
    line += buf;
    if (line.back() == '\n') end_line();  // a line longer than the buffer comes in pieces
  }
  end_line();
  if (echo) std::fflush(stdout);
  r.status = pclose(pipe);
  return r;
}

/// Runs `cmd` and returns the number after "tokens_per_s": in its last line, or nothing (with the
/// reason) if it fails.
std::optional<double> run_tokens_per_s(const std::string& cmd, const char* who, std::string& note) {
  const auto out = run_command(cmd, false);
  if (out.status == -1) {
    note = std::string("could not start ") + who;
    return std::nullopt;
  }
  const auto tokens_per_s = json_number(out.last, "tokens_per_s");
  if (out.status != 0 || !tokens_per_s) {
    note = std::string(who) + " run failed: " + (out.last.empty() ? std::string("no output") : out.last);
    return std::nullopt;
  }
  if (out.last.find("\"error\"") != std::string::npos) {
    note = out.last;
    return std::nullopt;
  }
  return tokens_per_s;
}

std::vector<std::string> model_args(const Options& o) {
  return {"--batch",   std::to_string(o.batch),         "--steps",   std::to_string(o.steps),
          "--warmup",  std::to_string(o.warmup),        "--n_embd",  std::to_string(o.model.n_embd),
          "--n_layer", std::to_string(o.model.n_layer), "--n_head",  std::to_string(o.model.n_head),
          "--seq_len", std::to_string(o.model.seq_len)};
}

std::string model_flags(const Options& o) {
  std::string f;
  for (const auto& a : model_args(o)) f += " " + a;
  return f;
}

/// The PyTorch twin kept running (step_throughput_torch.py --serve) on one thread, so that it is
/// timed in slices beside the chip's: `seconds(n)` has it train n steps and returns their time.
class TorchWorker {
 public:
  TorchWorker(const Options& o, std::string& note) {
    int in[2], out[2];
    if (pipe(in) != 0) {
      note = "could not start torch: pipe failed";
      return;
    }
    if (pipe(out) != 0) {
      close(in[0]), close(in[1]);
      note = "could not start torch: pipe failed";
      return;
    }
    std::vector<std::string> args = {"/usr/bin/python3", DILOCO_BENCH_DIR "/step_throughput_torch.py", "--serve",
                                      "--vocab", std::to_string(o.model.vocab)};
    for (auto& a : model_args(o)) args.push_back(std::move(a));
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::signal(SIGPIPE, SIG_IGN);  // a twin that died makes a write fail, not this process
    pid_ = fork();
    if (pid_ == 0) {
      dup2(in[0], STDIN_FILENO);
      dup2(out[1], STDOUT_FILENO);
      for (int fd : {in[0], in[1], out[0], out[1]}) close(fd);
      setenv("OMP_NUM_THREADS", "1", 1);
      setenv("OPENBLAS_NUM_THREADS", "1", 1);
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(in[0]);
    close(out[1]);
    if (pid_ < 0) {
      close(in[1]), close(out[0]);
      note = "could not start torch: fork failed";
      return;
    }
    to_ = fdopen(in[1], "w");
    from_ = fdopen(out[0], "r");
    const std::string first = line();
    if (first != "ready") {
      note = first.empty() ? "torch run failed: no output" : first;  // e.g. {"error": "torch unavailable: ..."}
      stop();
    }
  }
  ~TorchWorker() { stop(); }
  TorchWorker(const TorchWorker&) = delete;
  TorchWorker& operator=(const TorchWorker&) = delete;

  bool up() const { return pid_ > 0; }

  std::optional<double> seconds(int steps) {
    if (!up() || std::fprintf(to_, "%d\n", steps) < 0 || std::fflush(to_) != 0) return std::nullopt;
    const std::string reply = line();
    char* end = nullptr;
    const double s = std::strtod(reply.c_str(), &end);
    if (reply.empty() || end == reply.c_str() || !(s > 0)) return std::nullopt;
    return s;
  }

  void stop() {
    if (to_) std::fclose(to_);  // end of input: the twin returns
    if (from_) std::fclose(from_);
    to_ = from_ = nullptr;
    if (pid_ > 0) waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  std::string line() {
    char buf[4096];
    if (!from_ || !std::fgets(buf, sizeof buf, from_)) return {};
    std::string l(buf);
    while (!l.empty() && (l.back() == '\n' || l.back() == '\r')) l.pop_back();
    return l;
  }
  pid_t pid_ = -1;
  FILE* to_ = nullptr;
  FILE* from_ = nullptr;
};

/// The same chip multiplying with Eigen's own GEMM: this program again, with DILOCO_GEMM=eigen.
std::optional<double> eigen_gemm_tokens_per_s(const Options& o, std::string& note) {
  const std::string cmd = "env DILOCO_GEMM=eigen /proc/" + std::to_string(getpid()) + "/exe" +
                          model_flags(o) + " --no-torch --no-eigen-gemm 2>&1";
  return run_tokens_per_s(cmd, "DILOCO_GEMM=eigen", note);
}

std::string json_escape(const std::string& s) {
  std::string r;
  for (char c : s) {
    if (c == '"' || c == '\\') r += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) r += c;
  }
  return r;
}

/// One model training on one batch with one AdamW: the minimal one of this file, or the library's
/// as a run's chips take it (clipping at 1.0, warm-up, weight decay 0.1). Each holds two
/// model-sized moment buffers, so a trainer builds only the one it times.
class Trainer {
 public:
  Trainer(diloco::Model& model, const diloco::Batch& batch, bool library_adamw)
      : model_(model), batch_(batch), params_(model.layout().size()), grads_(model.layout().size()) {
    model_.init(params_, 1234);
    if (library_adamw) {
      diloco::AdamWConfig c;  // the runtime's defaults
      c.lr = AdamW::kLr;
      lib_.emplace(model_.layout(), c);
    } else {
      opt_.emplace(model_.layout());
    }
  }
  /// One step; its loss.
  float step() {
    loss_ = model_.loss_and_grad(params_, batch_, grads_);
    if (lib_) lib_->step(params_, grads_);
    else opt_->step(params_, grads_);
    return loss_;
  }
  /// Seconds of `n` steps.
  double seconds(int n) {
    const auto t0 = clock_type::now();
    for (int s = 0; s < n; ++s) step();
    return seconds_since(t0);
  }
  float loss() const { return loss_; }

 private:
  diloco::Model& model_;
  const diloco::Batch& batch_;
  std::vector<float> params_, grads_;
  std::optional<AdamW> opt_;
  std::optional<diloco::AdamW> lib_;
  float loss_ = 0;
};

/// Tokens/s of a trainer over o.steps steps after o.warmup, and the last loss.
struct Throughput {
  double tokens_per_s = 0;               // over every timed step
  float loss = 0;                        // after the last step
  std::vector<double> slice_tokens_per_s;  // per slice of the timed steps (--rounds)
};

/// Trains o.warmup + o.steps steps; the timed ones run in o.rounds slices with `between(n)` called
/// after each slice of n steps (untimed): the SGEMM, PyTorch and TorchScript slices that pair with them.
Throughput train_tokens_per_s(Trainer& trainer, const diloco::Batch& batch, const Options& o,
                              const std::function<void(int)>& between = {}) {
  for (int s = 0; s < o.warmup; ++s) trainer.step();
  const double tokens_per_step = static_cast<double>(batch.B) * batch.T;
  Throughput r;
  double elapsed = 0;
  for (int k = 0; k < o.rounds; ++k) {
    const int n = o.steps / o.rounds + (k < o.steps % o.rounds ? 1 : 0);
    const double dt = trainer.seconds(n);
    elapsed += dt;
    r.slice_tokens_per_s.push_back(tokens_per_step * n / dt);
    if (between) between(n);
  }
  r.tokens_per_s = tokens_per_step * o.steps / elapsed;
  r.loss = trainer.loss();
  return r;
}

#ifdef DILOCO_HAS_TORCH
/// The same GPT exported by scripts/export_gpt.py, as a TorchScript chip; nothing (with the reason)
/// if the export fails.
std::unique_ptr<diloco::Model> torchscript_model(const Options& o, std::string& note) {
  diloco::register_torchscript();
  const auto path = std::filesystem::temp_directory_path() /
                    ("diloco_step_throughput_" + std::to_string(o.model.n_embd) + "_" + std::to_string(getpid()) + ".pt");
  std::ostringstream cmd;
  cmd << "/usr/bin/python3 '" << DILOCO_BENCH_DIR << "/../scripts/export_gpt.py' --out '" << path.string() << "'"
      << " --vocab " << o.model.vocab << " --seq_len " << o.model.seq_len << " --n_layer " << o.model.n_layer
      << " --n_head " << o.model.n_head << " --n_embd " << o.model.n_embd << " > /dev/null 2>&1";
  if (std::system(cmd.str().c_str()) != 0) {
    note = "export failed: " + cmd.str();
    return nullptr;
  }
  auto cfg = o.model;
  cfg.kind = "torchscript";
  cfg.path = path.string();
  auto model = diloco::make_model(cfg);
  std::filesystem::remove(path);
  return model;
}
#endif

}  // namespace

/// The sweep: this program once per width (--n_embd W, every other flag as given), its output
/// passed through, then one table of the widths against the targets: the chip >= 1.5x PyTorch
/// eager up to C = 256 and >= 1.15x above, >= 80% of SGEMM from C = 256, the TorchScript chip
/// within 10% of PyTorch eager (>= 0.9x).
int sweep(const Options& o) {
  const std::string self = "/proc/" + std::to_string(getpid()) + "/exe";  // this very file, no quoting needed
  std::string flags = " --rounds " + std::to_string(o.rounds);
  if (!o.torch) flags += " --no-torch";
  if (!o.eigen_gemm) flags += " --no-eigen-gemm";
  struct Row {
    int c;
    std::string json;
  };
  std::vector<Row> rows;
  bool failed = false;
  for (int c : o.widths) {
    Options width = o;
    width.model.n_embd = c;
    const std::string cmd = self + model_flags(width) + flags + " 2>&1";
    std::printf("== C = %d: %s\n", c, cmd.c_str());
    std::fflush(stdout);
    auto out = run_command(cmd, true);
    if (out.status != 0 || out.last.rfind("{", 0) != 0) {
      std::printf("step_throughput: the run at C = %d failed; its row stays empty\n", c);
      failed = true;
      out.last = "{}";
    }
    rows.push_back({c, out.last});
  }
  auto shown = [](std::optional<double> v, const char* fmt) {
    if (!v) return std::string("-");
    char b[32];
    std::snprintf(b, sizeof b, fmt, *v);
    return std::string(b);
  };
  auto verdict = [](std::optional<double> v, double target) { return !v ? "" : *v >= target ? " met" : " NOT met"; };
  std::printf("\nsweep (L = %d, T = %d, batch %d, one thread; ratios over slices side by side in time)\n", o.model.n_layer,
              o.model.seq_len, o.batch);
  std::printf("  %5s %10s %10s %10s %10s  %-22s %-18s %-20s\n", "C", "chip tok/s", "torch", "TorchScr.", "SGEMM",
              "chip / PyTorch", "% of SGEMM", "TorchScript / PyTorch");
  std::string json = "{\"benchmark\":\"step_throughput_sweep\",\"widths\":[";
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto& r = rows[i];
    const auto chip = json_number(r.json, "tokens_per_s"), torch = json_number(r.json, "torch_tokens_per_s"),
               ts = json_number(r.json, "torchscript_tokens_per_s"), ratio = json_number(r.json, "ratio"),
               ts_ratio = json_number(r.json, "torchscript_ratio"), frac = json_number(r.json, "peak_fraction"),
               sgemm = json_number(r.json, "sgemm_gflops");
    const double speed_target = r.c <= 256 ? 1.5 : 1.15;
    const auto pct = frac ? std::optional<double>(100.0 * *frac) : std::nullopt;
    const std::string ratio_cell = shown(ratio, "%.2fx") + (ratio ? " (>= " + shown(speed_target, "%.2f") + ")" : "") +
                                   verdict(ratio, speed_target);
    const std::string frac_cell = shown(pct, "%.1f%%") + (r.c >= 256 ? verdict(pct, 80.0) : "");
    const std::string ts_cell = shown(ts_ratio, "%.2fx") + verdict(ts_ratio, 0.9);
    std::printf("  %5d %10s %10s %10s %10s  %-22s %-18s %-20s\n", r.c, shown(chip, "%.0f").c_str(),
                shown(torch, "%.0f").c_str(), shown(ts, "%.0f").c_str(), shown(sgemm, "%.1f").c_str(),
                ratio_cell.c_str(), frac_cell.c_str(), ts_cell.c_str());
    json += (i ? "," : "") + r.json;
  }
  std::printf("%s]}\n", json.c_str());
  return failed ? 2 : 0;
}

/// OpenBLAS picks its kernels and blocking from OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE while it
/// loads, so a machine that sets them runs another CPU's kernels. This process restarts once
/// without them, so the chip, the TorchScript chip, the SGEMM figure and the PyTorch command (whose
/// environment is this one) all run the kernels OpenBLAS itself picks for this CPU; with
/// DILOCO_KEEP_OPENBLAS_ENV set every side keeps them alike.
void restart_without_openblas_overrides(char** argv) {
  const bool set = std::getenv("OPENBLAS_CORETYPE") || std::getenv("OPENBLAS_L2_SIZE");
  if (!set || std::getenv("DILOCO_KEEP_OPENBLAS_ENV")) return;
  std::fprintf(stderr, "step_throughput: restarting without OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE "
                       "(set DILOCO_KEEP_OPENBLAS_ENV=1 to keep them)\n");
  unsetenv("OPENBLAS_CORETYPE");
  unsetenv("OPENBLAS_L2_SIZE");
  execv("/proc/self/exe", argv);
  std::perror("step_throughput: execv /proc/self/exe");  // only reached if the restart failed
}

int main(int argc, char** argv) try {
  restart_without_openblas_overrides(argv);
  const Options o = parse(argc, argv);
  if (!o.one_width) return sweep(o);
  diloco::ModelConfig cfg = o.model;
  cfg.kind = "gpt";
  const int T = cfg.seq_len, B = o.batch;
  auto model = diloco::make_model(cfg);
  const auto& layout = model->layout();

  diloco::Batch batch;
  batch.B = B;
  batch.T = T;
  batch.tokens.resize(static_cast<std::size_t>(B) * (T + 1));
  diloco::Rng rng(99);
  for (auto& t : batch.tokens) t = static_cast<std::uint32_t>(rng.below(cfg.vocab));

  // PyTorch's twin starts first and waits, warmed up, on its input; the TorchScript chip is built
  // and warmed up too: nothing else runs while the chip is timed.
  std::string torch_note = "skipped (--no-torch)", ts_note = "not built (no libtorch)";
  std::optional<TorchWorker> worker;
  if (o.torch) {
    torch_note.clear();
    worker.emplace(o, torch_note);
    if (!worker->up()) worker.reset();
  }
  std::unique_ptr<diloco::Model> ts_model;
  std::optional<Trainer> ts_trainer;
#ifdef DILOCO_HAS_TORCH
  if (o.torch) ts_model = torchscript_model(o, ts_note);
  else ts_note = "skipped (--no-torch)";
  if (ts_model) {
    ts_trainer.emplace(*ts_model, batch, false);
    for (int s = 0; s < o.warmup; ++s) ts_trainer->step();
  }
#endif
  // Each slice of steps is followed by 0.3 s of SGEMM through the chip's GEMM, by as many steps of
  // PyTorch and by as many of the TorchScript chip: the pairs give the fraction and the ratios (the
  // fraction's figure is the median of the slices'), and the SGEMM figure is the median of the slices.
  std::vector<double> sgemm_slices, torch_slices, ts_slices;
  double torch_seconds = 0, ts_seconds = 0;
  const double tokens_per_step = static_cast<double>(B) * T;
  Trainer chip(*model, batch, false);
  const auto run = train_tokens_per_s(chip, batch, o, [&](int n) {
    sgemm_slices.push_back(sgemm_gflops(1024, true, 0.3));
    if (worker) {
      if (const auto s = worker->seconds(n)) {
        torch_slices.push_back(tokens_per_step * n / *s);
        torch_seconds += *s;
      } else {
        torch_note = "torch run failed: the twin stopped answering";
        worker.reset();
      }
    }
    if (ts_trainer) {
      const double s = ts_trainer->seconds(n);
      ts_slices.push_back(tokens_per_step * n / s);
      ts_seconds += s;
    }
  });
  worker.reset();
  ts_trainer.reset();
  ts_model.reset();
  std::optional<double> torch, ts;
  std::vector<double> ratios, ts_ratios;
  if (torch_note.empty() && torch_slices.size() == run.slice_tokens_per_s.size()) {
    torch = tokens_per_step * o.steps / torch_seconds;
    for (std::size_t k = 0; k < torch_slices.size(); ++k) ratios.push_back(run.slice_tokens_per_s[k] / torch_slices[k]);
  }
  if (!ts_slices.empty()) {
    ts = tokens_per_step * o.steps / ts_seconds;
    if (torch)
      for (std::size_t k = 0; k < ts_slices.size(); ++k) ts_ratios.push_back(ts_slices[k] / torch_slices[k]);
  }
  const double tokens_per_s = run.tokens_per_s;
  const float loss = run.loss;
  Trainer library(*model, batch, true);
  const double lib_tokens_per_s = train_tokens_per_s(library, batch, o).tokens_per_s;
  const double elapsed = static_cast<double>(B) * T * o.steps / tokens_per_s;
  const double flops_per_token = model->flops_per_token(T);
  const double model_gflops = tokens_per_s * flops_per_token / 1e9;
  std::vector<double> fractions;
  for (std::size_t k = 0; k < sgemm_slices.size(); ++k)
    fractions.push_back(run.slice_tokens_per_s[k] * flops_per_token / 1e9 / sgemm_slices[k]);
  const double fraction = median(fractions);
  const auto [fmin, fmax] = std::minmax_element(fractions.begin(), fractions.end());
  const auto [smin, smax] = std::minmax_element(sgemm_slices.begin(), sgemm_slices.end());

  const std::string gemm = diloco::nn::gemm_backend();
  const double peak = median(sgemm_slices);
  const double eigen_peak = gemm == "eigen" ? peak : sgemm_gflops(1024, false);

  std::string eg_note = "skipped (--no-eigen-gemm)";
  std::optional<double> eg;
  if (o.eigen_gemm && gemm != "eigen") eg = eigen_gemm_tokens_per_s(o, eg_note);
  std::printf("byte GPT  C=%d L=%d NH=%d T=%d  batch=%d  params=%zu  steps=%d (+%d warm-up)\n",
              cfg.n_embd, cfg.n_layer, cfg.n_head, T, B, layout.size(), o.steps, o.warmup);
  std::printf("  %-34s %12s\n", "GEMM of the chip", gemm.c_str());
  std::printf("  %-34s %12.0f\n", "C++ tokens/s (1 thread)", tokens_per_s);
  std::printf("  %-34s %12.2f\n", "C++ ms/step", 1e3 * elapsed / o.steps);
  std::printf("  %-34s %12.0f   (%.2fx the minimal AdamW's)\n", "C++ tokens/s, the library's AdamW",
              lib_tokens_per_s, lib_tokens_per_s / tokens_per_s);
  std::printf("  %-34s %12.3f\n", "final loss", loss);
  std::printf("  %-34s %12.2f\n", "MFLOP/token (fwd+bwd)", flops_per_token / 1e6);
  std::printf("  %-34s %12.1f\n", "model GFLOP/s", model_gflops);
  std::printf("  %-34s %12.1f   (median of %zu slices, %.1f to %.1f)\n",
              ("SGEMM n=1024 GFLOP/s (" + gemm + ")").c_str(), peak, sgemm_slices.size(), *smin, *smax);
  std::printf("  %-34s %11.1f%%   (median of the slices' own, %.1f%% to %.1f%%)\n", "fraction of that SGEMM",
              100.0 * fraction, 100.0 * *fmin, 100.0 * *fmax);
  if (gemm != "eigen") std::printf("  %-34s %12.1f\n", "Eigen's SGEMM n=1024 GFLOP/s", eigen_peak);
  if (eg) {
    std::printf("  %-34s %12.0f\n", "C++ on Eigen's GEMM tokens/s", *eg);
    std::printf("  %-34s %12.2fx\n", "C++ / C++ on Eigen's GEMM", tokens_per_s / *eg);
  } else if (gemm != "eigen") {
    std::printf("  C++ on Eigen's GEMM: %s\n", eg_note.c_str());
  }
  if (torch) {
    const auto [rmin, rmax] = std::minmax_element(ratios.begin(), ratios.end());
    std::printf("  %-34s %12.0f   (in slices beside the chip's)\n", "PyTorch tokens/s (1 thread)", *torch);
    std::printf("  %-34s %12.2fx  (slices %.2fx to %.2fx)\n", "C++ / PyTorch", tokens_per_s / *torch, *rmin, *rmax);
    if (eg) std::printf("  %-34s %12.2fx\n", "C++ on Eigen's GEMM / PyTorch", *eg / *torch);
  } else {
    std::printf("  PyTorch: %s\n", torch_note.c_str());
  }
  if (ts) {
    std::printf("  %-34s %12.0f   (in slices beside the chip's)\n", "TorchScript tokens/s (1 thread)", *ts);
    if (torch) {
      const auto [rmin, rmax] = std::minmax_element(ts_ratios.begin(), ts_ratios.end());
      std::printf("  %-34s %12.2fx  (slices %.2fx to %.2fx)\n", "TorchScript chip / PyTorch", *ts / *torch, *rmin, *rmax);
    }
  } else {
    std::printf("  TorchScript chip: %s\n", ts_note.c_str());
  }

  std::printf("{\"benchmark\":\"step_throughput\",\"tokens_per_s\":%.1f,\"gemm\":\"%s\",", tokens_per_s,
              gemm.c_str());
  std::printf("\"library_adamw_tokens_per_s\":%.1f,", lib_tokens_per_s);
  if (eg) std::printf("\"eigen_gemm_tokens_per_s\":%.1f,", *eg);
  if (torch) {
    const auto [rmin, rmax] = std::minmax_element(ratios.begin(), ratios.end());
    std::printf("\"torch_tokens_per_s\":%.1f,\"ratio\":%.3f,\"ratio_min\":%.3f,\"ratio_max\":%.3f,", *torch,
                tokens_per_s / *torch, *rmin, *rmax);
  } else {
    std::printf("\"torch_tokens_per_s\":null,\"ratio\":null,\"torch_note\":\"%s\",",
                json_escape(torch_note).c_str());
  }
  if (ts && torch) {
    const auto [rmin, rmax] = std::minmax_element(ts_ratios.begin(), ts_ratios.end());
    std::printf("\"torchscript_tokens_per_s\":%.1f,\"torchscript_ratio\":%.3f,\"torchscript_ratio_min\":%.3f,"
                "\"torchscript_ratio_max\":%.3f,", *ts, *ts / *torch, *rmin, *rmax);
  } else if (ts) {
    std::printf("\"torchscript_tokens_per_s\":%.1f,", *ts);
  } else {
    std::printf("\"torchscript_tokens_per_s\":null,\"torchscript_note\":\"%s\",", json_escape(ts_note).c_str());
  }
  std::printf("\"eigen_sgemm_gflops\":%.2f,", eigen_peak);
  std::printf("\"model_gflops\":%.2f,\"sgemm_gflops\":%.2f,\"sgemm_gflops_min\":%.2f,\"sgemm_gflops_max\":%.2f,"
              "\"peak_fraction\":%.4f,\"peak_fraction_min\":%.4f,\"peak_fraction_max\":%.4f,"
              "\"flops_per_token\":%.0f,\"config\":{\"n_embd\":%d,\"n_layer\":%d,\"n_head\":%d,"
              "\"seq_len\":%d,\"batch\":%d,\"steps\":%d,\"rounds\":%d,\"threads\":1}}\n",
              model_gflops, peak, *smin, *smax, fraction, *fmin, *fmax, flops_per_token, cfg.n_embd,
              cfg.n_layer, cfg.n_head, T, B, o.steps, o.rounds);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "step_throughput: %s\n", e.what());
  return 2;
}
