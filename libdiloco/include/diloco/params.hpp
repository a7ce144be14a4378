// One flat float buffer per model copy, with named tensor views (llm.c style).
// Gradients, optimizer state and fragment plans all index the same layout.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace diloco {

/// One named tensor inside the flat parameter vector.
struct TensorSpec {
  std::string name;                 // e.g. "h.2.attn.qkv.w"
  std::vector<std::size_t> shape;   // row-major
  std::size_t offset = 0;           // first element in the flat buffer
  std::size_t size = 0;             // product of shape
  int layer = -1;                   // transformer block, -1 before the blocks, n_layer after
  bool decay = false;               // AdamW weight decay applies (matrices, not biases/norms)
  bool embedding = false;           // token/position embedding: RDA leaves these to plain averaging
};

/// The list of tensors of a model, in buffer order; solves "where is tensor X in the flat vector".
class ParamLayout {
public:
  /// Appends a tensor at the end of the buffer and returns its index.
  std::size_t add(std::string name, std::vector<std::size_t> shape, int layer, bool decay,
                  bool embedding = false);
  std::size_t size() const { return total_; }
  const std::vector<TensorSpec>& tensors() const { return tensors_; }
  /// Index of the tensor called `name`; throws std::out_of_range if absent.
  std::size_t index_of(const std::string& name) const;
  const TensorSpec& operator[](std::size_t i) const { return tensors_[i]; }
  /// Largest `layer` id of any tensor (-1 for an empty layout).
  int max_layer() const;

  /// View of tensor i inside a flat buffer laid out by this layout.
  template <class T>
  std::span<T> view(std::span<T> flat, std::size_t i) const {
    return flat.subspan(tensors_[i].offset, tensors_[i].size);
  }

private:
  std::vector<TensorSpec> tensors_;
  std::size_t total_ = 0;
};

/// FNV-1a over the values' bits: equal exactly when every value is bit for bit the same (a
/// simulated run prints it, so two runs can be compared at a glance).
std::uint64_t params_hash(std::span<const float> values);

/// A short, stable description of a layout ("18 tensors, 830464 parameters, layout 0x…"; the
/// hash covers every tensor's name and shape in order): two processes with equal signatures
/// exchange fragments of the same tensors. A joining site sends it; the syncer compares.
std::string layout_signature(const ParamLayout& layout);

}  // namespace diloco
