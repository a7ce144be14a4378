// GoodputMeter: chip-seconds from step to merge (useful, lost to failures, lost as stale) and
// global downtime past the expected gap between commits. See goodput.hpp.
#include "diloco/goodput.hpp"

#include <algorithm>
#include <stdexcept>

namespace diloco {

GoodputMeter::GoodputMeter(int islands, int chips_per_island, int fragments, int quorum_k, double expected_gap_s, double start_s)
    : islands_(islands), chips_(chips_per_island), fragments_(fragments), k_(quorum_k),
      expected_gap_s_(expected_gap_s), start_s_(start_s),
      unsent_(static_cast<std::size_t>(std::max(islands, 0)), std::vector<double>(static_cast<std::size_t>(std::max(fragments, 0)), 0.0)),
      in_flight_(static_cast<std::size_t>(std::max(islands, 0)),
                 std::vector<std::deque<double>>(static_cast<std::size_t>(std::max(fragments, 0)))),
      alive_(islands), stretch_from_(start_s) {
  if (islands < 1 || chips_per_island < 1 || fragments < 1 || quorum_k < 1 || !(expected_gap_s >= 0.0))
    throw std::invalid_argument("GoodputMeter: islands, chips, fragments and K must be ≥ 1, expected_gap_s ≥ 0");
}

void GoodputMeter::step(int island, int chips, double seconds) {
  stepped_ += chips * seconds;
  const double share = chips * seconds / fragments_;
  for (auto& u : unsent_.at(static_cast<std::size_t>(island))) u += share;
}

void GoodputMeter::sent(int island, int fragment) {
  auto& u = unsent_.at(static_cast<std::size_t>(island)).at(static_cast<std::size_t>(fragment));
  in_flight_[static_cast<std::size_t>(island)][static_cast<std::size_t>(fragment)].push_back(u);
  u = 0.0;
}

double GoodputMeter::take_oldest(int island, int fragment) {
  auto& q = in_flight_.at(static_cast<std::size_t>(island)).at(static_cast<std::size_t>(fragment));
  if (q.empty()) return 0.0;  // nothing recorded in flight (e.g. sent before the meter existed)
  const double v = q.front();
  q.pop_front();
  return v;
}

void GoodputMeter::merged(int island, int fragment) { useful_ += take_oldest(island, fragment); }

void GoodputMeter::dropped(int island, int fragment) { lost_stale_ += take_oldest(island, fragment); }

void GoodputMeter::island_lost(int island) {
  for (auto& u : unsent_.at(static_cast<std::size_t>(island))) {
    lost_failure_ += u;
    u = 0.0;
  }
}

void GoodputMeter::close_stretch(double now) {
  downtime_ += std::max(0.0, now - stretch_from_ - expected_gap_s_);
}

void GoodputMeter::commit(double now) {
  if (alive_ >= k_) close_stretch(now);
  stretch_from_ = now;  // the allowance starts again from every commit
}

void GoodputMeter::alive(int islands_alive, double now) {
  const bool was = alive_ >= k_, is = islands_alive >= k_;
  if (was && !is) close_stretch(now);
  if (!was && is) stretch_from_ = now;  // a new stretch with K alive, with its own allowance
  alive_ = islands_alive;
}

GoodputMeter::Report GoodputMeter::report(double now) const {
  Report r;
  r.elapsed_s = now - start_s_;
  r.provisioned_chip_s = (total_chips_ >= 0 ? static_cast<double>(total_chips_) : static_cast<double>(islands_) * chips_) *
                         r.elapsed_s;
  r.useful_chip_s = useful_;
  r.lost_failure_chip_s = lost_failure_;
  r.lost_stale_chip_s = lost_stale_;
  r.stepped_chip_s = stepped_;
  for (std::size_t i = 0; i < unsent_.size(); ++i)
    for (std::size_t f = 0; f < unsent_[i].size(); ++f) {
      r.in_flight_chip_s += unsent_[i][f];
      for (double v : in_flight_[i][f]) r.in_flight_chip_s += v;
    }
  r.goodput = r.provisioned_chip_s > 0.0 ? useful_ / r.provisioned_chip_s : 0.0;
  r.global_downtime_s = downtime_;
  if (alive_ >= k_) r.global_downtime_s += std::max(0.0, now - stretch_from_ - expected_gap_s_);
  return r;
}

}  // namespace diloco
