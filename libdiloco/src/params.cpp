// ParamLayout: the named-tensor directory of the flat parameter buffer.
#include "diloco/params.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <utility>

#include "diloco/hash.hpp"

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
  std::uint64_t h = kFnvBasis;
  for (float v : values) {
    std::uint32_t b;
    std::memcpy(&b, &v, sizeof b);
    h = fnv1a_le(h, b, 4);
  }
  return h;
}

std::string layout_signature(const ParamLayout& layout) {
  std::uint64_t h = kFnvBasis;
  for (const auto& t : layout.tensors()) {
    for (char ch : t.name) h = fnv1a_le(h, static_cast<std::uint8_t>(ch), 1);
    h = fnv1a_le(h, t.shape.size(), 8);
    for (std::size_t d : t.shape) h = fnv1a_le(h, d, 8);
  }
  char hex[19];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return std::to_string(layout.tensors().size()) + " tensors, " + std::to_string(layout.size()) + " parameters, layout 0x" + hex;
}

}  // namespace diloco
