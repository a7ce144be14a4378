// The directory (directory.hpp): one mutex around the handles of the syncer, islands and chips.
#include "diloco/actors/directory.hpp"

namespace diloco::actors {

Directory::Directory(int islands, int chips)
    : routed_(static_cast<std::size_t>(islands)),
      routes_(static_cast<std::size_t>(islands)),
      islands_(static_cast<std::size_t>(islands)),
      chips_(static_cast<std::size_t>(islands), std::vector<caf::actor>(static_cast<std::size_t>(chips))) {}
void Directory::set_syncer(caf::actor a) {
  std::lock_guard lk(mu_);
  syncer_ = std::move(a);
}
caf::actor Directory::syncer() const {
  std::lock_guard lk(mu_);
  return syncer_;
}
caf::actor Directory::syncer_for(int i) const {
  std::lock_guard lk(mu_);
  const auto k = static_cast<std::size_t>(i);
  return k < routed_.size() && routed_[k] ? routes_[k] : syncer_;
}
void Directory::set_route(const std::vector<int>& islands, caf::actor relay) {
  std::lock_guard lk(mu_);
  for (int i : islands) {
    const auto k = static_cast<std::size_t>(i);
    routed_.at(k) = 1;
    routes_.at(k) = relay;
  }
}
void Directory::set_island(int i, caf::actor a) {
  std::lock_guard lk(mu_);
  islands_.at(static_cast<std::size_t>(i)) = std::move(a);
}
caf::actor Directory::island(int i) const {
  std::lock_guard lk(mu_);
  return islands_.at(static_cast<std::size_t>(i));
}
void Directory::set_chip(int i, int c, caf::actor a) {
  std::lock_guard lk(mu_);
  chips_.at(static_cast<std::size_t>(i)).at(static_cast<std::size_t>(c)) = std::move(a);
}
caf::actor Directory::chip(int i, int c) const {
  std::lock_guard lk(mu_);
  return chips_.at(static_cast<std::size_t>(i)).at(static_cast<std::size_t>(c));
}

}  // namespace diloco::actors
