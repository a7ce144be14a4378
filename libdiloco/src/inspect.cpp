// `diloco inspect`: decode a frame or checkpoint with the same validating readers the runtime
// uses, and print what it holds.
#include "diloco/inspect.hpp"

#include <cmath>
#include <cstdio>
#include <span>
#include <cstring>
#include <sstream>
#include <variant>

#include "diloco/checkpoint.hpp"
#include "diloco/wire.hpp"

namespace diloco {

namespace {

std::string fmt(const char* f, double x) {
  char b[64];
  std::snprintf(b, sizeof b, f, x);
  return b;
}

std::string hex(std::span<const std::byte> bytes) {
  std::string s;
  for (std::byte b : bytes) {
    char h[3];
    std::snprintf(h, sizeof h, "%02x", static_cast<unsigned>(b));
    s += h;
  }
  return s;
}

void describe_fragment(std::ostringstream& o, const FragmentMessage& m, const std::string& indent) {
  const auto& h = m.header;
  const auto& d = m.data;
  o << indent << "kind " << to_string(h.kind) << ", sender " << h.island << ", fragment " << h.index << ", round "
    << h.base_round;
  if (h.kind == FragmentKind::global_delta) o << " (from round " << h.from_round << ")";
  o << ", tokens " << h.tokens << ", steps " << h.steps << "\n";
  if (h.held) {
    o << indent << d.count << " values held by the island already (SHA-256 " << hex(h.held_digest) << "): none sent\n";
    return;
  }
  o << indent << "encoding " << to_string(d.params.encoding);
  if (has_scales(d.params.encoding)) o << " (block " << d.params.block_size << ", " << d.scales.size() << " scales)";
  o << ", " << d.count << " values, payload " << d.payload.size() << " bytes ("
    << fmt("%.3g", bits_per_value(d.params)) << " bits/value)\n";
  std::vector<double> v(d.count);
  if (auto st = decode(d, std::span<double>(v)); !st) {
    o << indent << "values: " << st.error().message() << "\n";
    return;
  }
  double sq = 0, mn = INFINITY, mx = -INFINITY;
  std::size_t zeros = 0;
  for (double x : v) {
    sq += x * x;
    mn = std::min(mn, x);
    mx = std::max(mx, x);
    zeros += x == 0.0;
  }
  o << indent << "values: L2 norm " << fmt("%.6g", std::sqrt(sq)) << ", min " << fmt("%.6g", d.count ? mn : 0.0)
    << ", max " << fmt("%.6g", d.count ? mx : 0.0) << ", zeros " << zeros << "\n";
}

std::string describe_message(const Message& m, std::size_t frame_bytes) {
  std::ostringstream o;
  o << "frame: " << frame_bytes << " bytes, protocol version " << protocol_version << ", message "
    << to_string(type_of(m)) << "\n";
  std::visit(
      [&](const auto& msg) {
        using T = std::decay_t<decltype(msg)>;
        if constexpr (std::is_same_v<T, FragmentMessage>) {
          describe_fragment(o, msg, "  ");
        } else if constexpr (std::is_same_v<T, ProgressMessage>) {
          o << "  island " << msg.island << ", local step " << msg.local_step << ", " << msg.fragments.size()
            << " fragment counters";
          if (msg.step_seconds > 0.0) o << ", " << msg.step_seconds * 1e3 << " ms a step";
          o << "\n";
          for (const auto& c : msg.fragments)
            o << "    fragment " << c.index << ": round " << c.base_round << ", tokens " << c.tokens << ", steps "
              << c.steps << "\n";
        } else if constexpr (std::is_same_v<T, JoinRequest>) {
          o << "  island " << msg.island << ", incarnation " << msg.incarnation
            << (msg.keeps_local ? ", keeps its parameters" : "") << "\n";
          for (std::size_t p = 0; p < msg.holds.size(); ++p) {
            if (msg.holds[p].empty()) continue;
            o << "    holds fragment " << p << ": SHA-256 " << hex(msg.holds[p]) << "\n";
          }
        } else if constexpr (std::is_same_v<T, JoinReply>) {
          o << "  " << msg.fragments.size() << " global fragments\n";
          for (const auto& f : msg.fragments) describe_fragment(o, f, "    ");
        } else if constexpr (std::is_same_v<T, Heartbeat>) {
          o << "  sender " << msg.sender << ", sequence " << msg.sequence << ", sent at " << msg.sent_at_ns << " ns\n";
        } else {
          o << "  run " << to_string(msg.outcome) << ": " << msg.reason << "\n";
        }
      },
      m);
  return o.str();
}

std::string describe_checkpoint(const SafetensorsFile& f, std::size_t file_bytes) {
  std::ostringstream o;
  o << "checkpoint (safetensors): " << file_bytes << " bytes, header " << (f.data_offset - 8) << " bytes, "
    << f.tensors.size() << " tensors\n";
  o << "metadata:\n";
  for (const auto& [k, v] : f.metadata) o << "  " << k << " = " << v << "\n";
  std::size_t model = 0, island = 0, outer = 0;
  for (const auto& t : f.tensors) {
    if (t.name.rfind("diloco.island.", 0) == 0) island += t.end - t.begin;
    else if (t.name.rfind("diloco.", 0) == 0) outer += t.end - t.begin;
    else model += t.end - t.begin;
  }
  o << "bytes: global params " << model << ", outer state " << outer << ", island states " << island << "\n";
  o << "tensors:\n";
  for (const auto& t : f.tensors) {
    o << "  " << t.name << " " << t.dtype << " [";
    for (std::size_t i = 0; i < t.shape.size(); ++i) o << (i ? ", " : "") << t.shape[i];
    o << "]";
    if (t.name == "diloco.rounds" && t.dtype == "U64") {
      o << " =";
      for (std::uint64_t b = t.begin; b + 8 <= t.end; b += 8) {
        std::uint64_t r;
        std::memcpy(&r, f.data.data() + b, 8);
        o << " " << r;
      }
    } else if (t.dtype == "F32") {
      double sq = 0;
      bool finite = true;
      for (std::uint64_t b = t.begin; b + 4 <= t.end; b += 4) {
        float x;
        std::memcpy(&x, f.data.data() + b, 4);
        finite = finite && std::isfinite(x);
        sq += static_cast<double>(x) * x;
      }
      o << " L2 " << (finite ? fmt("%.6g", std::sqrt(sq)) : std::string("non-finite!"));
    }
    o << "\n";
  }
  return o.str();
}

}  // namespace

Expected<std::string> describe_file(std::span<const std::byte> bytes) {
  if (bytes.size() > 8 && bytes[8] == std::byte{'{'}) {
    auto sf = read_safetensors(bytes);
    if (!sf) return sf.error();
    return describe_checkpoint(*sf, bytes.size());
  }
  auto m = decode_message(bytes);
  if (!m) return Error{m.error().code, "not a checkpoint, and not a valid frame: " + m.error().reason};
  return describe_message(*m, bytes.size());
}

}  // namespace diloco
