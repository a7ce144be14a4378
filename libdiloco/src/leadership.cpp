// Leadership of a replicated syncer: majority rounds, base64, and etcd's v3 lease and election
// API over its HTTP/JSON gateway (libcurl, one easy handle per request).
#include "diloco/leadership.hpp"

#include <algorithm>
#include <cmath>
#include <mutex>

#include <curl/curl.h>
#include <nlohmann/json.hpp>

namespace diloco {

using json = nlohmann::json;

std::uint64_t majority_round(std::uint64_t leader_round, std::vector<std::uint64_t> acks, std::size_t replicas) {
  // Sorted newest first, the leader's own round among them: the round at position ⌊n/2⌋ is held
  // by that many replicas and the ones before it, which is a majority of n.
  acks.resize(replicas > 0 ? replicas - 1 : 0, 0);  // followers never heard of hold nothing
  for (auto& a : acks) a = std::min(a, leader_round);
  acks.push_back(leader_round);
  std::sort(acks.begin(), acks.end(), std::greater<>());
  return acks[acks.size() / 2];
}

std::uint64_t commits_held(const std::vector<std::uint64_t>& fragment_rounds) {
  std::uint64_t n = 0;
  for (auto r : fragment_rounds) n += r;
  return n;
}

std::optional<std::string> newer_replica(std::uint64_t mine, const std::vector<std::pair<std::string, std::string>>& held,
                                         const std::string& me) {
  std::optional<std::string> best;
  std::uint64_t most = mine;
  for (const auto& [name, value] : held) {
    if (name == me || value.empty() || value.find_first_not_of("0123456789") != std::string::npos || value.size() > 19)
      continue;  // ourselves, or nothing a replica of ours wrote
    const std::uint64_t n = std::stoull(value);
    if (n > most) most = n, best = name;
  }
  return best;
}

namespace {
constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
}

std::string base64_encode(const std::string& in) {
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  for (std::size_t i = 0; i < in.size(); i += 3) {
    const std::uint32_t b0 = static_cast<unsigned char>(in[i]);
    const std::uint32_t b1 = i + 1 < in.size() ? static_cast<unsigned char>(in[i + 1]) : 0;
    const std::uint32_t b2 = i + 2 < in.size() ? static_cast<unsigned char>(in[i + 2]) : 0;
    const std::uint32_t v = b0 << 16 | b1 << 8 | b2;
    out += kAlphabet[v >> 18 & 63];
    out += kAlphabet[v >> 12 & 63];
    out += i + 1 < in.size() ? kAlphabet[v >> 6 & 63] : '=';
    out += i + 2 < in.size() ? kAlphabet[v & 63] : '=';
  }
  return out;
}

std::optional<std::string> base64_decode(const std::string& in) {
  if (in.size() % 4 != 0) return std::nullopt;
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::string out;
  for (std::size_t i = 0; i < in.size(); i += 4) {
    const bool last = i + 4 == in.size();
    const int pad = last ? (in[i + 3] == '=') + (in[i + 2] == '=') : 0;
    if (pad == 1 && in[i + 2] == '=') return std::nullopt;
    std::uint32_t v = 0;
    for (int k = 0; k < 4; ++k) {
      const int d = k >= 4 - pad ? 0 : value(in[i + static_cast<std::size_t>(k)]);
      if (d < 0) return std::nullopt;
      v = v << 6 | static_cast<std::uint32_t>(d);
    }
    out += static_cast<char>(v >> 16 & 255);
    if (pad < 2) out += static_cast<char>(v >> 8 & 255);
    if (pad < 1) out += static_cast<char>(v & 255);
  }
  return out;
}

// ---- etcd ----

namespace {

void init_curl_once() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

size_t collect(char* data, size_t size, size_t n, void* out) {
  static_cast<std::string*>(out)->append(data, size * n);
  return size * n;
}

int check_cancel(void* flag, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  const auto* cancel = static_cast<const std::atomic<bool>*>(flag);
  return cancel && cancel->load() ? 1 : 0;  // non-zero aborts the transfer
}

Error etcd_error(const std::string& what) { return Error{errc::io_error, what}; }

/// int64 fields come as JSON strings from the gateway (proto3's JSON mapping), 0 when absent.
std::int64_t int_of(const json& j, const char* key) {
  if (!j.is_object() || !j.contains(key)) return 0;
  const auto& v = j.at(key);
  if (v.is_number_integer()) return v.get<std::int64_t>();
  if (v.is_string()) {
    try {
      return std::stoll(v.get<std::string>());
    } catch (const std::exception&) {
      return 0;
    }
  }
  return 0;
}

std::string decoded(const json& j, const char* key) {
  if (!j.is_object() || !j.contains(key) || !j.at(key).is_string()) return {};
  return base64_decode(j.at(key).get<std::string>()).value_or(std::string());
}

}  // namespace

Etcd::Etcd(std::string endpoint, double timeout_s) : endpoint_(std::move(endpoint)), timeout_s_(timeout_s) {
  while (!endpoint_.empty() && endpoint_.back() == '/') endpoint_.pop_back();
  init_curl_once();
}

Expected<std::string> Etcd::post(const std::string& path, const std::string& body, double timeout_s,
                                 const std::atomic<bool>* cancel) {
  CURL* c = curl_easy_init();
  if (!c) return etcd_error("etcd at " + endpoint_ + ": cannot start a request");
  std::string out;
  const std::string url = endpoint_ + path;
  curl_slist* headers = curl_slist_append(nullptr, "Content-Type: application/json");
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_POST, 1L);
  curl_easy_setopt(c, CURLOPT_POSTFIELDS, body.c_str());
  curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, static_cast<long>(body.size()));
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, collect);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &out);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);  // threads: no SIGALRM for timeouts
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(std::min(timeout_s_, 5.0) * 1000));
  if (timeout_s > 0) curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, static_cast<long>(std::ceil(timeout_s * 1000)));
  if (cancel) {
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, check_cancel);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, const_cast<std::atomic<bool>*>(cancel));
  }
  const CURLcode rc = curl_easy_perform(c);
  long status = 0;
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
  curl_slist_free_all(headers);
  curl_easy_cleanup(c);
  if (rc == CURLE_ABORTED_BY_CALLBACK) return etcd_error("etcd at " + endpoint_ + ": " + path + " cancelled");
  if (rc != CURLE_OK) return etcd_error("etcd at " + endpoint_ + ": " + path + ": " + curl_easy_strerror(rc));
  if (status != 200) {
    std::string why = out;
    try {
      const auto j = json::parse(out);
      if (j.contains("error") && j["error"].is_string()) why = j["error"].get<std::string>();
      else if (j.contains("message") && j["message"].is_string()) why = j["message"].get<std::string>();
    } catch (const std::exception&) {
    }
    return etcd_error("etcd at " + endpoint_ + ": " + path + ": HTTP " + std::to_string(status) + ": " + why);
  }
  return out;
}

Expected<std::int64_t> Etcd::grant(double ttl_s) {
  const auto ttl = static_cast<std::int64_t>(std::ceil(ttl_s));
  auto r = post("/v3/lease/grant", json{{"TTL", std::to_string(ttl)}}.dump(), timeout_s_, nullptr);
  if (!r) return r.error();
  try {
    const auto j = json::parse(*r);
    const auto id = int_of(j, "ID");
    if (id == 0) return etcd_error("etcd at " + endpoint_ + ": no lease granted: " + *r);
    return id;
  } catch (const std::exception& e) {
    return etcd_error("etcd at " + endpoint_ + ": lease grant: " + e.what());
  }
}

Expected<std::int64_t> Etcd::keepalive(std::int64_t lease) {
  auto r = post("/v3/lease/keepalive", json{{"ID", std::to_string(lease)}}.dump(), timeout_s_, nullptr);
  if (!r) return r.error();
  try {
    // A stream of one answer: {"result": {..., "TTL": "5"}}; an expired lease answers no TTL.
    const auto j = json::parse(*r);
    const auto ttl = int_of(j.contains("result") ? j["result"] : j, "TTL");
    if (ttl <= 0) return etcd_error("etcd at " + endpoint_ + ": lease " + std::to_string(lease) + " has expired");
    return ttl;
  } catch (const std::exception& e) {
    return etcd_error("etcd at " + endpoint_ + ": lease keepalive: " + e.what());
  }
}

Status Etcd::revoke(std::int64_t lease) {
  auto r = post("/v3/lease/revoke", json{{"ID", std::to_string(lease)}}.dump(), timeout_s_, nullptr);
  if (!r) return r.error();
  return {};
}

Expected<Etcd::Leader> Etcd::campaign(const std::string& election, std::int64_t lease, const std::string& value,
                                      const std::atomic<bool>* cancel) {
  auto r = post("/v3/election/campaign",
                json{{"name", base64_encode(election)}, {"lease", std::to_string(lease)}, {"value", base64_encode(value)}}.dump(),
                0.0, cancel);
  if (!r) return r.error();
  try {
    const auto j = json::parse(*r);
    if (!j.contains("leader")) return etcd_error("etcd at " + endpoint_ + ": campaign ended without leadership: " + *r);
    const auto& l = j["leader"];
    Leader out;
    out.value = value;
    out.key = decoded(l, "key");
    out.term = static_cast<std::uint64_t>(int_of(l, "rev"));
    out.lease = int_of(l, "lease");
    if (out.term == 0 || out.key.empty()) return etcd_error("etcd at " + endpoint_ + ": campaign answer without a key: " + *r);
    return out;
  } catch (const std::exception& e) {
    return etcd_error("etcd at " + endpoint_ + ": campaign: " + e.what());
  }
}

Expected<std::optional<Etcd::Leader>> Etcd::leader(const std::string& election) {
  auto r = post("/v3/election/leader", json{{"name", base64_encode(election)}}.dump(), timeout_s_, nullptr);
  if (!r) {
    // etcd answers "election: no leader" as an error status.
    if (r.error().reason.find("no leader") != std::string::npos) return std::optional<Leader>();
    return r.error();
  }
  try {
    const auto j = json::parse(*r);
    if (!j.contains("kv")) return std::optional<Leader>();
    const auto& kv = j["kv"];
    Leader out;
    out.value = decoded(kv, "value");
    out.key = decoded(kv, "key");
    out.term = static_cast<std::uint64_t>(int_of(kv, "create_revision"));
    out.lease = int_of(kv, "lease");
    return std::optional<Leader>(out);
  } catch (const std::exception& e) {
    return etcd_error("etcd at " + endpoint_ + ": leader: " + e.what());
  }
}

Status Etcd::resign(const Leader& l) {
  auto r = post("/v3/election/resign",
                json{{"leader",
                      {{"name", base64_encode(l.key.substr(0, l.key.rfind('/')))},
                       {"key", base64_encode(l.key)},
                       {"rev", std::to_string(l.term)},
                       {"lease", std::to_string(l.lease)}}}}
                    .dump(),
                timeout_s_, nullptr);
  if (!r) return r.error();
  return {};
}

Status Etcd::put(const std::string& key, const std::string& value, std::int64_t lease) {
  json body{{"key", base64_encode(key)}, {"value", base64_encode(value)}};
  if (lease != 0) body["lease"] = std::to_string(lease);
  auto r = post("/v3/kv/put", body.dump(), timeout_s_, nullptr);
  if (!r) return r.error();
  return {};
}

Expected<std::vector<std::pair<std::string, std::string>>> Etcd::list(const std::string& prefix) {
  // A prefix's range ends at the prefix with its last byte raised by one (etcd's convention).
  std::string end = prefix;
  while (!end.empty() && static_cast<unsigned char>(end.back()) == 0xff) end.pop_back();
  if (end.empty()) end = std::string(1, '\0');
  else end.back() = static_cast<char>(static_cast<unsigned char>(end.back()) + 1);
  auto r = post("/v3/kv/range", json{{"key", base64_encode(prefix)}, {"range_end", base64_encode(end)}}.dump(), timeout_s_,
                nullptr);
  if (!r) return r.error();
  try {
    const auto j = json::parse(*r);
    std::vector<std::pair<std::string, std::string>> out;
    if (j.contains("kvs") && j["kvs"].is_array())
      for (const auto& kv : j["kvs"]) out.emplace_back(decoded(kv, "key"), decoded(kv, "value"));
    return out;
  } catch (const std::exception& e) {
    return etcd_error("etcd at " + endpoint_ + ": range: " + e.what());
  }
}

}  // namespace diloco
