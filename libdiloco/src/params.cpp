// ParamLayout: the named-tensor directory of the flat parameter buffer.
#include "diloco/params.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <utility>

namespace diloco {

std::size_t ParamLayout::add(std::string name, std::vector<std::size_t> shape, int layer, bool decay,
                             bool embedding) {
  TensorSpec t;
  t.size = 1;
  for (std::size_t d : shape) t.size *= d;
  t.name = std::move(name);
  t.shape = std::move(shape);
  t.offset = total_;
  t.layer = layer;
  t.decay = decay;
  t.embedding = embedding;
  total_ += t.size;
  tensors_.push_back(std::move(t));
  return tensors_.size() - 1;
}

std::size_t ParamLayout::index_of(const std::string& name) const {
  for (std::size_t i = 0; i < tensors_.size(); ++i)
    if (tensors_[i].name == name) return i;
  throw std::out_of_range("ParamLayout: no tensor named '" + name + "'");
}

int ParamLayout::max_layer() const {
  int m = -1;
  for (const auto& t : tensors_) m = std::max(m, t.layer);
  return m;
}

std::uint64_t params_hash(std::span<const float> values) {
  std::uint64_t h = 0xCBF29CE484222325ULL;  // FNV-1a 64 offset basis
  for (float v : values) {
    std::uint32_t b;
    std::memcpy(&b, &v, sizeof b);
    for (int k = 0; k < 4; ++k) h = (h ^ ((b >> (8 * k)) & 0xFFu)) * 0x100000001B3ULL;
  }
  return h;
}

}  // namespace diloco
