// Safetensors checkpoints (https://github.com/huggingface/safetensors: 8-byte little-endian header
// length, JSON header, raw little-endian data), written crash-safely with temp + fsync + rename.
#include "diloco/checkpoint.hpp"
#include "diloco/limits.hpp"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

namespace diloco {

namespace {

static_assert(std::endian::native == std::endian::little, "checkpoint data is written in host order");

constexpr std::string_view kFormat = "diloco-checkpoint";
constexpr std::string_view kVersion = "1";
// A diloco header lists each tensor in about 100 bytes: 16 MiB holds 160k tensors (models of
// 13k blocks), far below the 100 MB the safetensors reference accepts. Nesting: the root object,
// an entry object, its shape or data_offsets array.
constexpr std::uint64_t kMaxHeaderBytes = 16u << 20;
constexpr int kMaxHeaderDepth = 3;

using json = nlohmann::json;

std::string num(std::uint64_t x) { return std::to_string(x); }

std::string momentum_name(int p) { return "diloco.outer.momentum." + std::to_string(p); }
std::string pending_name(int p) { return "diloco.outer.pending." + std::to_string(p); }
std::string island_name(int i, std::string_view what, const std::string& tensor) {
  return "diloco.island." + std::to_string(i) + "." + std::string(what) + "." + tensor;
}
std::string island_steps_key(int i) { return "diloco.island." + std::to_string(i) + ".adam_steps"; }
std::string island_step_key(int i) { return "diloco.island." + std::to_string(i) + ".step"; }
std::string island_since_key(int i) { return "diloco.island." + std::to_string(i) + ".since"; }

std::size_t dtype_bytes(const std::string& d) {
  if (d == "F64" || d == "I64" || d == "U64") return 8;
  if (d == "F32" || d == "I32" || d == "U32") return 4;
  if (d == "F16" || d == "BF16" || d == "I16" || d == "U16") return 2;
  if (d == "I8" || d == "U8" || d == "BOOL" || d == "F8_E4M3" || d == "F8_E5M2") return 1;
  return 0;
}

// ---- writing ----

struct Blob {
  std::string name;
  std::string dtype;
  std::vector<std::uint64_t> shape;
  const void* data;
  std::size_t bytes;
};

bool all_finite(std::span<const float> x) {
  std::uint32_t m = 0;
  for (float f : x) m = std::max(m, std::bit_cast<std::uint32_t>(f) & 0x7fffffffu);
  return m < 0x7f800000u;
}

Error sys_error(const std::string& what, const std::string& path) {
  return {errc::io_error, what + " '" + path + "': " + std::strerror(errno)};
}

Status write_all(int fd, const void* p, std::size_t n, const std::string& path) {
  const auto* c = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t w = ::write(fd, c, std::min<std::size_t>(n, std::size_t{1} << 30));
    if (w < 0) {
      if (errno == EINTR) continue;
      return sys_error("cannot write", path);
    }
    c += w;
    n -= static_cast<std::size_t>(w);
  }
  return {};
}

class Fd {
public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

private:
  int fd_;
};

Status check_state(const ParamLayout& layout, const FragmentPlan& plan, const Checkpoint& cp) {
  auto mismatch = [](std::string r) { return Error{errc::checkpoint_mismatch, std::move(r)}; };
  if (cp.params.size() != layout.size())
    return mismatch("params hold " + num(cp.params.size()) + " values, the model has " + num(layout.size()));
  if (cp.momentum.size() != static_cast<std::size_t>(plan.count()) || cp.rounds.size() != cp.momentum.size())
    return mismatch(num(cp.momentum.size()) + " momentum buffers and " + num(cp.rounds.size()) +
                    " rounds for a plan of " + num(plan.count()) + " fragments");
  for (int p = 0; p < plan.count(); ++p)
    if (cp.momentum[p].size() != plan.size(p))
      return mismatch("momentum of fragment " + num(p) + " holds " + num(cp.momentum[p].size()) + " values, the fragment has " + num(plan.size(p)));
  if (!cp.outer_pending.empty()) {
    if (cp.outer_pending.size() != static_cast<std::size_t>(plan.count()))
      return mismatch(num(cp.outer_pending.size()) + " pending outer buffers for a plan of " + num(plan.count()) + " fragments");
    for (int p = 0; p < plan.count(); ++p) {
      if (cp.outer_pending[p].size() != plan.size(p))
        return mismatch("pending outer buffer of fragment " + num(p) + " holds " + num(cp.outer_pending[p].size()) +
                        " values, the fragment has " + num(plan.size(p)));
      for (double x : cp.outer_pending[p])
        if (!std::isfinite(x)) return Error{errc::non_finite, "pending outer buffer of fragment " + num(p) + " holds NaN or infinity; refusing to save"};
    }
  }
  std::set<int> ids;
  for (const auto& is : cp.islands) {
    if (is.island < 0 || !ids.insert(is.island).second)
      return mismatch("island id " + std::to_string(is.island) + " is negative or repeated");
    if (is.params.size() != layout.size() || is.adam_m.size() != layout.size() || is.adam_v.size() != layout.size() ||
        (!is.global.empty() && is.global.size() != layout.size()))
      return mismatch("island " + std::to_string(is.island) + " state does not match the model's " + num(layout.size()) + " values");
    if (is.adam_steps < 0) return mismatch("island " + std::to_string(is.island) + " has negative AdamW steps");
    if (is.step < is.adam_steps)
      return mismatch("island " + std::to_string(is.island) + " is at step " + std::to_string(is.step) + ", before its " +
                      std::to_string(is.adam_steps) + " AdamW steps");
    if (is.tokens_since.size() != is.steps_since.size() ||
        (!is.tokens_since.empty() && is.tokens_since.size() != static_cast<std::size_t>(plan.count())))
      return mismatch("island " + std::to_string(is.island) + " counts progress of " + num(is.tokens_since.size()) + " and " +
                      num(is.steps_since.size()) + " fragments for a plan of " + num(plan.count()));
  }
  for (const auto& [k, v] : cp.metadata)
    if (k.rfind("diloco.", 0) == 0) return mismatch("metadata key '" + k + "' uses the reserved prefix diloco.");
  for (const auto& t : layout.tensors())
    if (t.name.rfind("diloco.", 0) == 0) return mismatch("tensor name '" + t.name + "' uses the reserved prefix diloco.");
  auto nf = [](std::string what) { return Error{errc::non_finite, what + " holds NaN or infinity; refusing to save"}; };
  if (!all_finite(cp.params)) return nf("global params");
  for (int p = 0; p < plan.count(); ++p)
    if (!all_finite(cp.momentum[p])) return nf("momentum of fragment " + num(p));
  for (const auto& is : cp.islands)
    if (!all_finite(is.params) || !all_finite(is.adam_m) || !all_finite(is.adam_v) || !all_finite(is.global))
      return nf("island " + std::to_string(is.island) + " state");
  return {};
}

std::vector<Blob> blobs_of(const ParamLayout& layout, const FragmentPlan& plan, const Checkpoint& cp) {
  std::vector<Blob> b;
  auto add_tensors = [&](auto name_of, const std::vector<float>& flat) {
    for (const auto& t : layout.tensors())
      b.push_back({name_of(t.name), "F32", {t.shape.begin(), t.shape.end()}, flat.data() + t.offset, 4 * t.size});
  };
  add_tensors([](const std::string& n) { return n; }, cp.params);
  for (int p = 0; p < plan.count(); ++p)
    b.push_back({momentum_name(p), "F32", {cp.momentum[p].size()}, cp.momentum[p].data(), 4 * cp.momentum[p].size()});
  b.push_back({"diloco.rounds", "U64", {cp.rounds.size()}, cp.rounds.data(), 8 * cp.rounds.size()});
  for (std::size_t p = 0; p < cp.outer_pending.size(); ++p)
    b.push_back({pending_name(static_cast<int>(p)), "F64", {cp.outer_pending[p].size()}, cp.outer_pending[p].data(),
                 8 * cp.outer_pending[p].size()});
  for (const auto& is : cp.islands) {
    add_tensors([&](const std::string& n) { return island_name(is.island, "params", n); }, is.params);
    add_tensors([&](const std::string& n) { return island_name(is.island, "adam_m", n); }, is.adam_m);
    add_tensors([&](const std::string& n) { return island_name(is.island, "adam_v", n); }, is.adam_v);
    if (!is.global.empty()) add_tensors([&](const std::string& n) { return island_name(is.island, "global", n); }, is.global);
  }
  return b;
}

std::string header_of(const ParamLayout& layout, const FragmentPlan& plan, const Checkpoint& cp, const std::vector<Blob>& blobs) {
  json h = json::object();
  json meta = json::object();
  for (const auto& [k, v] : cp.metadata) meta[k] = v;
  meta["diloco.format"] = kFormat;
  meta["diloco.version"] = kVersion;
  meta["diloco.fragments"] = std::to_string(plan.count());
  std::string sizes, ids;
  for (int p = 0; p < plan.count(); ++p) {
    if (p) sizes += ',';
    sizes += num(plan.size(p));
  }
  meta["diloco.fragment_sizes"] = sizes;
  meta["diloco.model_values"] = num(layout.size());
  for (const auto& is : cp.islands) {
    if (!ids.empty()) ids += ',';
    ids += std::to_string(is.island);
    meta[island_steps_key(is.island)] = std::to_string(is.adam_steps);
    meta[island_step_key(is.island)] = std::to_string(is.step);
    if (!is.tokens_since.empty()) {  // tokens and steps of fragment 0, of fragment 1, ...
      std::string since;
      for (std::size_t p = 0; p < is.tokens_since.size(); ++p)
        since += (p ? "," : "") + num(is.tokens_since[p]) + "," + num(is.steps_since[p]);
      meta[island_since_key(is.island)] = since;
    }
  }
  meta["diloco.islands"] = ids;
  h["__metadata__"] = meta;
  std::uint64_t off = 0;
  for (const auto& b : blobs) {
    h[b.name] = {{"dtype", b.dtype}, {"shape", b.shape}, {"data_offsets", {off, off + b.bytes}}};
    off += b.bytes;
  }
  std::string s = h.dump();
  s.append((8 - (8 + s.size()) % 8) % 8, ' ');  // data starts 8-byte aligned
  return s;
}

Status fsync_dir(const std::filesystem::path& dir) {
  const std::string d = dir.empty() ? std::string(".") : dir.string();
  Fd fd(::open(d.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0) return sys_error("cannot open directory", d);
  if (::fsync(fd.get()) != 0) return sys_error("cannot fsync directory", d);
  return {};
}

// ---- reading ----

Error corrupt(std::string r) { return {errc::corrupt_checkpoint, std::move(r)}; }

std::vector<std::uint64_t> parse_list(const std::string& s, bool& ok) {
  std::vector<std::uint64_t> v;
  ok = true;
  if (s.empty()) return v;
  std::size_t i = 0;
  while (i <= s.size()) {
    const std::size_t j = std::min(s.find(',', i), s.size());
    const std::string tok = s.substr(i, j - i);
    if (tok.empty() || tok.size() > 19 || tok.find_first_not_of("0123456789") != std::string::npos) {
      ok = false;
      return {};
    }
    v.push_back(std::stoull(tok));
    i = j + 1;
  }
  return v;
}

// Refuses JSON nested deeper than a safetensors header ever is, in one pass over the bytes and
// before any parser allocates a node: a 16 MiB "[[[[..." is refused at its fourth byte.
Status check_nesting(std::string_view h) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (std::size_t i = 0; i < h.size(); ++i) {
    const char ch = h[i];
    if (in_string) {
      if (escaped) escaped = false;
      else if (ch == '\\') escaped = true;
      else if (ch == '"') in_string = false;
    } else if (ch == '"') {
      in_string = true;
    } else if (ch == '{' || ch == '[') {
      if (++depth > kMaxHeaderDepth)
        return corrupt("header nests deeper than " + std::to_string(kMaxHeaderDepth) + " levels (at byte " + num(i) + ")");
    } else if (ch == '}' || ch == ']') {
      --depth;
    }
  }
  return {};
}

Expected<SafetensorsFile> read_safetensors_impl(std::span<const std::byte> file) {
  if (file.size() < 8) return corrupt("file of " + num(file.size()) + " bytes is shorter than the 8-byte header length");
  std::uint64_t n;
  std::memcpy(&n, file.data(), 8);
  if (n > kMaxHeaderBytes) return corrupt("header length " + num(n) + " exceeds " + num(kMaxHeaderBytes));
  if (n > file.size() - 8) return Error{errc::truncated, "header of " + num(n) + " bytes but the file has " + num(file.size() - 8) + " after the length"};
  const char* hb = reinterpret_cast<const char*>(file.data() + 8);
  if (auto st = check_nesting({hb, static_cast<std::size_t>(n)}); !st) return st.error();
  json h = json::parse(hb, hb + n, nullptr, /*allow_exceptions=*/false);
  if (h.is_discarded() || !h.is_object()) return corrupt("header is not a JSON object");
  SafetensorsFile f;
  f.data_offset = 8 + n;
  f.data = file.subspan(f.data_offset);
  for (auto it = h.begin(); it != h.end(); ++it) {
    const std::string& key = it.key();
    const json& v = it.value();
    if (key == "__metadata__") {
      if (!v.is_object()) return corrupt("__metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string()) return corrupt("__metadata__ value of '" + m.key() + "' is not a string");
        f.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    if (!v.is_object()) return corrupt("entry '" + key + "' is not an object");
    auto dt = v.find("dtype");
    auto sh = v.find("shape");
    auto off = v.find("data_offsets");
    if (dt == v.end() || !dt->is_string()) return corrupt("tensor '" + key + "' has no dtype string");
    if (sh == v.end() || !sh->is_array()) return corrupt("tensor '" + key + "' has no shape array");
    if (off == v.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() || !(*off)[1].is_number_unsigned())
      return corrupt("tensor '" + key + "' has no [begin, end] data_offsets");
    TensorInfo t;
    t.name = key;
    t.dtype = dt->get<std::string>();
    const std::size_t eb = dtype_bytes(t.dtype);
    if (eb == 0) return corrupt("tensor '" + key + "' has unknown dtype '" + t.dtype + "'");
    std::uint64_t elems = 1;
    for (const auto& d : *sh) {
      if (!d.is_number_unsigned()) return corrupt("tensor '" + key + "' shape holds a non-integer");
      const auto x = d.get<std::uint64_t>();
      if (x != 0 && elems > (std::uint64_t{1} << 62) / x) return corrupt("tensor '" + key + "' shape overflows");
      elems *= x;
      t.shape.push_back(x);
    }
    t.begin = (*off)[0].get<std::uint64_t>();
    t.end = (*off)[1].get<std::uint64_t>();
    if (t.begin > t.end || t.end > f.data.size())
      return corrupt("tensor '" + key + "' data_offsets [" + num(t.begin) + ", " + num(t.end) + "] outside the " + num(f.data.size()) + "-byte data section");
    std::uint64_t bytes = 0;  // checked: 2^62 F32 values are 2^64 bytes, which wraps to 0
    if (__builtin_mul_overflow(elems, static_cast<std::uint64_t>(eb), &bytes) || bytes > f.data.size())
      return corrupt("tensor '" + key + "' of " + num(elems) + " " + t.dtype + " values needs more bytes than the " +
                     num(f.data.size()) + "-byte data section holds");
    if (t.end - t.begin != bytes)
      return corrupt("tensor '" + key + "' of shape with " + num(elems) + " " + t.dtype + " values spans " + num(t.end - t.begin) + " bytes");
    f.tensors.push_back(std::move(t));
  }
  std::sort(f.tensors.begin(), f.tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  std::uint64_t at = 0;
  for (const auto& t : f.tensors) {
    if (t.begin != at) return corrupt("tensor '" + t.name + "' starts at byte " + num(t.begin) + ", expected " + num(at) + " (gap or overlap)");
    at = t.end;
  }
  if (at != f.data.size()) return corrupt("tensors cover " + num(at) + " of the " + num(f.data.size()) + " data bytes");
  return f;
}

}  // namespace

Status save_checkpoint(const std::string& path, const ParamLayout& layout, const FragmentPlan& plan,
                       const Checkpoint& cp, const SaveHook& hook) {
  if (auto st = check_state(layout, plan, cp); !st) return st;
  auto at = [&](std::string_view stage) {
    if (hook) hook(stage);
  };
  const auto blobs = blobs_of(layout, plan, cp);
  const std::string header = header_of(layout, plan, cp, blobs);
  if (header.size() > kMaxHeaderBytes)  // a file no reader of ours would accept
    return Error{errc::frame_too_large, "header of " + num(header.size()) + " bytes exceeds the " + num(kMaxHeaderBytes) +
                                                " a checkpoint may have (too many tensors or too much metadata)"};
  const std::string tmp = path + ".tmp";
  {
    Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (fd.get() < 0) return sys_error("cannot create", tmp);
    at("temp_opened");
    const std::uint64_t n = header.size();
    if (auto st = write_all(fd.get(), &n, 8, tmp); !st) return st;
    if (auto st = write_all(fd.get(), header.data(), header.size(), tmp); !st) return st;
    for (std::size_t i = 0; i < blobs.size(); ++i) {
      if (i == blobs.size() / 2) at("half_written");
      if (auto st = write_all(fd.get(), blobs[i].data, blobs[i].bytes, tmp); !st) return st;
    }
    at("written");
    if (::fsync(fd.get()) != 0) return sys_error("cannot fsync", tmp);
    at("synced");
    if (::close(fd.release()) != 0) return sys_error("cannot close", tmp);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) return sys_error("cannot rename '" + tmp + "' to", path);
  at("renamed");
  return fsync_dir(std::filesystem::path(path).parent_path());
}

Expected<std::string> encode_checkpoint(const ParamLayout& layout, const FragmentPlan& plan, const Checkpoint& cp) {
  if (auto st = check_state(layout, plan, cp); !st) return st.error();
  const auto blobs = blobs_of(layout, plan, cp);
  const std::string header = header_of(layout, plan, cp, blobs);
  if (header.size() > kMaxHeaderBytes)
    return Error{errc::frame_too_large, "header of " + num(header.size()) + " bytes exceeds the " + num(kMaxHeaderBytes) +
                                            " a checkpoint may have (too many tensors or too much metadata)"};
  std::string out;
  std::size_t total = 8 + header.size();
  for (const auto& b : blobs) total += b.bytes;
  out.reserve(total);
  const std::uint64_t n = header.size();
  out.append(reinterpret_cast<const char*>(&n), 8);
  out += header;
  for (const auto& b : blobs) out.append(static_cast<const char*>(static_cast<const void*>(b.data)), b.bytes);
  return out;
}

Status write_file_atomically(const std::string& path, std::string_view bytes) {
  const std::string tmp = path + ".tmp";
  {
    Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (fd.get() < 0) return sys_error("cannot create", tmp);
    if (auto st = write_all(fd.get(), bytes.data(), bytes.size(), tmp); !st) return st;
    if (::fsync(fd.get()) != 0) return sys_error("cannot fsync", tmp);
    if (::close(fd.release()) != 0) return sys_error("cannot close", tmp);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) return sys_error("cannot rename '" + tmp + "' to", path);
  return fsync_dir(std::filesystem::path(path).parent_path());
}

Expected<std::vector<std::byte>> read_file(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return sys_error("cannot open", path);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return sys_error("cannot stat", path);
  std::vector<std::byte> buf(static_cast<std::size_t>(st.st_size));
  std::size_t got = 0;
  while (got < buf.size()) {
    const ssize_t r = ::read(fd.get(), buf.data() + got, buf.size() - got);
    if (r < 0) {
      if (errno == EINTR) continue;
      return sys_error("cannot read", path);
    }
    if (r == 0) break;
    got += static_cast<std::size_t>(r);
  }
  buf.resize(got);
  return buf;
}

Expected<SafetensorsFile> read_safetensors(std::span<const std::byte> file) {
  try {
    return read_safetensors_impl(file);
  } catch (const std::exception& e) {  // nlohmann type errors; none expected after the checks
    return corrupt(std::string("header: ") + e.what());
  }
}

Expected<Checkpoint> parse_checkpoint(std::span<const std::byte> file, const ParamLayout& layout,
                                      const FragmentPlan& plan, const LoadOptions& opt) {
  auto sf = read_safetensors(file);
  if (!sf) return sf.error();
  const auto& meta = sf->metadata;
  auto meta_of = [&](const std::string& k) -> const std::string* {
    auto it = meta.find(k);
    return it == meta.end() ? nullptr : &it->second;
  };
  const std::string* format = meta_of("diloco.format");
  if (!format || *format != kFormat) return corrupt("not a diloco checkpoint (__metadata__ diloco.format is missing or wrong)");
  const std::string* version = meta_of("diloco.version");
  if (!version || *version != kVersion)
    return Error{errc::unsupported_version, "checkpoint format version '" + (version ? *version : std::string("none")) + "', this build reads " + std::string(kVersion)};
  bool ok = true;
  const std::string* sizes_s = meta_of("diloco.fragment_sizes");
  const auto sizes = sizes_s ? parse_list(*sizes_s, ok) : std::vector<std::uint64_t>{};
  if (!sizes_s || !ok) return corrupt("metadata diloco.fragment_sizes is missing or not a list of integers");
  if (sizes.size() != static_cast<std::size_t>(plan.count()))
    return Error{errc::checkpoint_mismatch, "checkpoint has " + num(sizes.size()) + " fragments, the run's plan has " + num(plan.count())};
  for (int p = 0; p < plan.count(); ++p)
    if (sizes[p] != plan.size(p))
      return Error{errc::checkpoint_mismatch, "fragment " + num(p) + " has " + num(sizes[p]) + " values in the checkpoint, " + num(plan.size(p)) + " in the run's plan"};
  const std::string* ids_s = meta_of("diloco.islands");
  const auto ids = ids_s ? parse_list(*ids_s, ok) : std::vector<std::uint64_t>{};
  if (!ids_s || !ok) return corrupt("metadata diloco.islands is missing or not a list of integers");

  std::map<std::string, const TensorInfo*> by_name;
  for (const auto& t : sf->tensors) by_name[t.name] = &t;
  std::set<std::string> used;
  // Copies tensor `name` (dtype, shape checked) into dst.
  auto take = [&](const std::string& name, const std::string& dtype, const std::vector<std::uint64_t>& shape,
                  void* dst, std::size_t bytes) -> Status {
    auto it = by_name.find(name);
    if (it == by_name.end()) return Error{errc::checkpoint_mismatch, "tensor '" + name + "' is missing"};
    const TensorInfo& t = *it->second;
    if (t.dtype != dtype || t.shape != shape)
      return Error{errc::checkpoint_mismatch, "tensor '" + name + "' is " + t.dtype + " of another shape than the run's " + dtype};
    if (t.end - t.begin != bytes) return Error{errc::checkpoint_mismatch, "tensor '" + name + "' has the wrong size"};
    if (bytes) std::memcpy(dst, sf->data.data() + t.begin, bytes);
    used.insert(name);
    return {};
  };
  auto take_model = [&](auto name_of, std::vector<float>& flat, const std::string& what) -> Status {
    flat.resize(layout.size());
    for (const auto& t : layout.tensors()) {
      if (auto st = take(name_of(t.name), "F32", {t.shape.begin(), t.shape.end()}, flat.data() + t.offset, 4 * t.size); !st)
        return st;
    }
    if (!all_finite(flat)) return Error{errc::non_finite, what + " hold NaN or infinity"};
    return {};
  };

  Checkpoint cp;
  if (auto st = take_model([](const std::string& n) { return n; }, cp.params, "global params"); !st) return st.error();
  cp.momentum.resize(plan.count());
  for (int p = 0; p < plan.count(); ++p) {
    cp.momentum[p].resize(plan.size(p));
    if (auto st = take(momentum_name(p), "F32", {plan.size(p)}, cp.momentum[p].data(), 4 * plan.size(p)); !st) return st.error();
    if (!all_finite(cp.momentum[p])) return Error{errc::non_finite, "momentum of fragment " + num(p) + " holds NaN or infinity"};
  }
  cp.rounds.resize(plan.count());
  if (auto st = take("diloco.rounds", "U64", {static_cast<std::uint64_t>(plan.count())}, cp.rounds.data(), 8 * plan.count()); !st)
    return st.error();
  if (by_name.count(pending_name(0))) {  // Delayed Nesterov's pending sums: all fragments or none
    cp.outer_pending.resize(plan.count());
    for (int p = 0; p < plan.count(); ++p) {
      cp.outer_pending[p].resize(plan.size(p));
      if (auto st = take(pending_name(p), "F64", {plan.size(p)}, cp.outer_pending[p].data(), 8 * plan.size(p)); !st)
        return st.error();
      for (double x : cp.outer_pending[p])
        if (!std::isfinite(x)) return Error{errc::non_finite, "pending outer buffer of fragment " + num(p) + " holds NaN or infinity"};
    }
  }
  std::set<std::uint64_t> seen;
  for (auto id : ids) {
    if (id > 1u << 20 || !seen.insert(id).second) return corrupt("metadata diloco.islands has a repeated or absurd id " + num(id));
    const int i = static_cast<int>(id);
    const std::string* steps_s = meta_of(island_steps_key(i));
    const auto steps = steps_s ? parse_list(*steps_s, ok) : std::vector<std::uint64_t>{};
    if (!steps_s || !ok || steps.size() != 1 || steps[0] > kMaxCounter)
      return corrupt("metadata " + island_steps_key(i) + " is missing or not an integer");
    IslandState is;
    is.island = i;
    is.adam_steps = static_cast<long>(steps[0]);
    // The local step (absent from files of islands that kept no schedule position: their AdamW steps).
    is.step = is.adam_steps;
    if (const std::string* step_s = meta_of(island_step_key(i))) {
      const auto step = parse_list(*step_s, ok);
      if (!ok || step.size() != 1 || step[0] > kMaxCounter || step[0] < steps[0])
        return corrupt("metadata " + island_step_key(i) + " is not an integer at least " + island_steps_key(i));
      is.step = static_cast<long>(step[0]);
    }
    if (const std::string* since_s = meta_of(island_since_key(i))) {
      const auto since = parse_list(*since_s, ok);
      if (!ok || since.size() != 2 * static_cast<std::size_t>(plan.count()))
        return corrupt("metadata " + island_since_key(i) + " is not " + num(2 * plan.count()) +
                       " integers (tokens and steps since the last send, per fragment)");
      for (int p = 0; p < plan.count(); ++p) {
        is.tokens_since.push_back(since[2 * static_cast<std::size_t>(p)]);
        is.steps_since.push_back(since[2 * static_cast<std::size_t>(p) + 1]);
      }
    }
    const std::string label = "island " + std::to_string(i);
    if (auto st = take_model([&](const std::string& n) { return island_name(i, "params", n); }, is.params, label + " params"); !st)
      return st.error();
    if (auto st = take_model([&](const std::string& n) { return island_name(i, "adam_m", n); }, is.adam_m, label + " AdamW m"); !st)
      return st.error();
    if (auto st = take_model([&](const std::string& n) { return island_name(i, "adam_v", n); }, is.adam_v, label + " AdamW v"); !st)
      return st.error();
    for (float x : is.adam_v)
      if (x < 0.0f) return corrupt(label + " AdamW v holds a negative second moment");
    if (!layout.tensors().empty() && by_name.count(island_name(i, "global", layout.tensors().front().name)))
      if (auto st = take_model([&](const std::string& n) { return island_name(i, "global", n); }, is.global, label + " global fragments"); !st)
        return st.error();
    if (opt.islands) cp.islands.push_back(std::move(is));
  }
  for (const auto& t : sf->tensors)
    if (!used.count(t.name)) return corrupt("unexpected tensor '" + t.name + "'");
  for (const auto& [k, v] : meta)
    if (k.rfind("diloco.", 0) != 0) cp.metadata[k] = v;
  return cp;
}

Expected<Checkpoint> load_checkpoint(const std::string& path, const ParamLayout& layout, const FragmentPlan& plan,
                                     const LoadOptions& opt) {
  auto bytes = read_file(path);
  if (!bytes) return bytes.error();
  auto cp = parse_checkpoint(*bytes, layout, plan, opt);
  if (!cp) return Error{cp.error().code, path + ": " + cp.error().reason};
  return cp;
}

}  // namespace diloco
