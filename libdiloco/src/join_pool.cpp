// JoinPool (join_pool.hpp): open islands granted to joiners, leased while they are away.
#include "diloco/join_pool.hpp"

#include <algorithm>

namespace diloco {

JoinPool::JoinPool(std::vector<int> open, double lease_s) : open_(std::move(open)), lease_s_(lease_s) {
  std::sort(open_.begin(), open_.end());
}

bool JoinPool::vacant(int i) const {
  return std::binary_search(open_.begin(), open_.end(), i) && holder_.find(i) == holder_.end() &&
         reserved_.find(i) == reserved_.end();
}

void JoinPool::reserve(const std::vector<int>& islands, double until) {
  for (int i : islands)
    if (vacant(i)) reserved_[i] = until;
}

std::vector<int> JoinPool::held_by(const std::string& name) const {
  auto c = claims_.find(name);
  return c == claims_.end() ? std::vector<int>{} : c->second.islands;
}

int JoinPool::live() const {
  int n = 0;
  for (const auto& [name, c] : claims_) n += c.live ? 1 : 0;
  return n;
}

std::optional<double> JoinPool::next_expiry() const {
  std::optional<double> t;
  for (const auto& [name, c] : claims_)
    if (!c.live && (!t || c.expires < *t)) t = c.expires;
  for (const auto& [i, until] : reserved_)
    if (!t || until < *t) t = until;
  return t;
}

JoinPool::Answer JoinPool::ask(const std::string& name, int want, const std::vector<int>& held,
                               const std::function<bool(int)>& spent) {
  Answer a;
  if (open_.empty()) {
    a.refused = "this run takes no joiners (net.allow_join)";
    return a;
  }
  if (want <= 0) {
    a.refused = "it asks for no island";
    return a;
  }
  if (auto c = claims_.find(name); c != claims_.end()) {
    if (c->second.live) {
      a.busy = "joiner '" + name + "' already has a live session";
      return a;
    }
    c->second.live = true;  // back within its lease: the same islands, the same data
    a.islands = c->second.islands;
    a.back = true;
    return a;
  }
  // New islands must have steps left; islands it trains already are its own whatever their step
  // (one that finished its budget stays with its joiner), reserved for it or not.
  auto free = [&](int i) { return vacant(i) && !(spent && spent(i)); };
  auto own = [&](int i) {
    return std::binary_search(open_.begin(), open_.end(), i) && holder_.find(i) == holder_.end();
  };
  std::vector<int> got;
  for (int i : held)
    if (own(i) && std::find(got.begin(), got.end(), i) == got.end()) got.push_back(i);
  if (!held.empty() && got.size() != held.size()) {
    a.refused = "the islands it trained were given to another joiner after its lease ran out";
    return a;
  }
  for (int i : open_)
    if (static_cast<int>(got.size()) < want && free(i) && std::find(got.begin(), got.end(), i) == got.end())
      got.push_back(i);
  if (static_cast<int>(got.size()) < want) {
    int n = 0, kept = 0;
    for (int i : open_) n += free(i) ? 1 : 0;
    for (const auto& [i, until] : reserved_) kept += !(spent && spent(i)) ? 1 : 0;
    if (n + kept >= want) {  // enough once the reservations run out
      a.busy = std::to_string(kept) + " of the open islands it needs are kept for the joiners that trained them "
               "(until their lease runs out)";
      return a;
    }
    a.refused = "it asks for " + std::to_string(want) + " islands and " + std::to_string(n) + " of the run's " +
                std::to_string(open_.size()) + " open islands are free";
    return a;
  }
  std::sort(got.begin(), got.end());
  auto& c = claims_[name];
  c.islands = got;
  c.live = true;
  for (int i : got) {
    holder_[i] = name;
    reserved_.erase(i);
  }
  a.islands = std::move(got);
  return a;
}

bool JoinPool::lost(const std::string& name, bool left, double now) {
  auto c = claims_.find(name);
  if (c == claims_.end()) return false;
  if (!left) {
    c->second.live = false;
    c->second.expires = now + lease_s_;
    return false;
  }
  for (int i : c->second.islands) holder_.erase(i);
  claims_.erase(c);
  return true;
}

std::vector<std::string> JoinPool::expire(double now) {
  std::vector<std::string> freed;
  for (const auto& [name, c] : claims_)
    if (!c.live && c.expires <= now) freed.push_back(name);
  for (const auto& name : freed) lost(name, true, now);
  for (auto r = reserved_.begin(); r != reserved_.end();)
    if (r->second <= now) {
      freed.push_back("the joiner of island " + std::to_string(r->first));
      r = reserved_.erase(r);
    } else {
      ++r;
    }
  return freed;
}

}  // namespace diloco
