// Encode+decode throughput of each fragment encoding through real Cap'n Proto frames (16 MiB
// fp32 fragment) against memcpy of the same bytes in the same run, and bytes on the wire
// against the analytic payload. Prints a table, then one JSON object as the last line.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "diloco/codec.hpp"
#include "diloco/wire.hpp"
#include "timing.hpp"

using namespace diloco;
using bench::median;
using bench::seconds_since;
using clk = bench::clock_type;

namespace {

struct Row {
  std::string name;
  double encode_s = 0, decode_s = 0;
  double gbps = 0, ratio = 0, target = 0;
  double rel_l2 = 0;
  std::size_t frame_16m = 0, frame_1m = 0;
  double analytic_1m = 0, codec_1m = 0;
};

}  // namespace

int main(int argc, char** argv) {
  // usage: codec_throughput [reps] [block]
  const int reps = argc > 1 ? std::max(3, std::atoi(argv[1])) : 9;
  const std::size_t bytes = std::size_t{16} << 20;
  const std::size_t n = bytes / 4;
  const std::uint32_t block = argc > 2 ? static_cast<std::uint32_t>(std::max(1, std::atoi(argv[2]))) : 64;
  std::vector<float> x(n), out(n);
  {
    std::mt19937_64 g(1);
    std::normal_distribution<float> d(0.0f, 1e-3f);
    for (auto& v : x) v = d(g);
  }

  // memcpy of the same 16 MiB, timed the same way (median of reps, warm buffers).
  std::vector<float> dst(n);
  std::memcpy(dst.data(), x.data(), bytes);
  std::vector<double> mt;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = clk::now();
    std::memcpy(dst.data(), x.data(), bytes);
    mt.push_back(seconds_since(t0));
    x[r % n] += dst[(r * 7919) % n] * 0.0f;  // keep the copy observable
  }
  const double memcpy_gbps = bytes / median(mt) / 1e9;

  WireContext ctx;
  ctx.fragment_sizes = {n};
  ctx.rounds = {0};
  ctx.islands = 1;
  const FragmentHeader h{FragmentKind::outer_gradient, 0, 0, 0, 1 << 20, 100};

  std::vector<Row> rows;
  for (auto enc : {Encoding::fp32, Encoding::bf16, Encoding::int8, Encoding::int4, Encoding::e3m0}) {
    const CodecParams p{enc, block};
    Row row;
    row.name = std::string(to_string(enc));
    row.target = (enc == Encoding::fp32 || enc == Encoding::bf16) ? 0.25 : (enc == Encoding::int8 ? 0.0 : 0.10);
    FragmentInbox inbox(ctx);
    std::vector<double> te, td;
    for (int r = 0; r < reps + 1; ++r) {
      auto t0 = clk::now();
      auto frame = encode_fragment(h, p, x);
      const double e = seconds_since(t0);
      if (!frame) {
        std::fprintf(stderr, "encode failed: %s\n", frame.error().message().c_str());
        return 1;
      }
      t0 = clk::now();
      auto got = inbox.receive(*frame, out);
      const double d = seconds_since(t0);
      if (!got) {
        std::fprintf(stderr, "decode failed: %s\n", got.error().message().c_str());
        return 1;
      }
      row.frame_16m = frame->size();
      if (r > 0) {  // the first round warms allocator and caches
        te.push_back(e);
        td.push_back(d);
      }
    }
    row.encode_s = median(te);
    row.decode_s = median(td);
    row.gbps = bytes / (row.encode_s + row.decode_s) / 1e9;
    row.ratio = row.gbps / memcpy_gbps;
    row.rel_l2 = relative_l2_error(x, out);
    // Bytes on the wire for a 1 MiB fp32 fragment: analytic = n·bits/8, codec adds scales.
    const std::size_t n1 = (std::size_t{1} << 20) / 4;
    auto f1 = encode_fragment(h, p, std::span<const float>(x).first(n1));
    row.frame_1m = f1->size();
    row.analytic_1m = n1 * 8.0 * payload_bytes(enc, 2) / 2.0 / 8.0;
    row.codec_1m = payload_bytes(enc, n1) + 4.0 * scale_count(p, n1);
    rows.push_back(row);
  }

  std::printf("codec_throughput: 16 MiB fp32 fragment (%zu values), block %u, median of %d, memcpy %.2f GB/s\n", n,
              block, reps, memcpy_gbps);
  std::printf("%-6s %9s %9s %10s %9s %8s %9s %10s %12s %12s %10s %10s\n", "enc", "enc_ms", "dec_ms", "enc+dec", "x_memcpy",
              "target", "rel_L2", "frame_16M", "frame_1M", "analytic_1M", "framing%", "scales%");
  for (const auto& r : rows) {
    std::printf("%-6s %9.3f %9.3f %7.2f GB/s %8.1f%% %7.0f%% %9.5f %10zu %12zu %12.0f %9.4f%% %9.2f%%\n", r.name.c_str(),
                r.encode_s * 1e3, r.decode_s * 1e3, r.gbps, 100 * r.ratio, 100 * r.target, r.rel_l2, r.frame_16m,
                r.frame_1m, r.analytic_1m, 100 * (r.frame_1m - r.codec_1m) / r.codec_1m,
                100 * (r.codec_1m - r.analytic_1m) / r.analytic_1m);
  }
  std::printf("enc+dec GB/s counts the 16 MiB of fp32 input; framing%% = Cap'n Proto bytes beyond payload+scales;\n"
              "scales%% = per-block scales beyond the analytic n*bits/8 payload (1 MiB fragment).\n");
  bool ok = true;
  std::string json = "{\"benchmark\":\"codec_throughput\",\"fragment_bytes\":" + std::to_string(bytes) +
                     ",\"block\":" + std::to_string(block) + ",\"memcpy_gbps\":" + std::to_string(memcpy_gbps) +
                     ",\"encodings\":{";
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto& r = rows[i];
    const double framing = (r.frame_1m - r.codec_1m) / r.codec_1m;
    ok = ok && r.ratio >= r.target && framing <= 0.01;
    if (i) json += ',';
    json += "\"" + r.name + "\":{\"encode_ms\":" + std::to_string(r.encode_s * 1e3) +
            ",\"decode_ms\":" + std::to_string(r.decode_s * 1e3) + ",\"gbps\":" + std::to_string(r.gbps) +
            ",\"fraction_of_memcpy\":" + std::to_string(r.ratio) + ",\"target_fraction\":" + std::to_string(r.target) +
            ",\"relative_l2_error\":" + std::to_string(r.rel_l2) + ",\"frame_bytes_16MiB\":" + std::to_string(r.frame_16m) +
            ",\"frame_bytes_1MiB\":" + std::to_string(r.frame_1m) + ",\"analytic_bytes_1MiB\":" +
            std::to_string(r.analytic_1m) + ",\"framing_overhead_1MiB\":" + std::to_string(framing) + "}";
  }
  json += "},\"targets_met\":" + std::string(ok ? "true" : "false") + "}";
  std::printf("%s\n", json.c_str());
  return 0;
}
