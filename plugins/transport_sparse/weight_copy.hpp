// A copy of one version of the weights in host memory: the base a sparse refit is computed against
// (sender) or applied to (receiver). Views of it cross the ABI as named tensors.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "mlpt/mlpt.h"

namespace mlpt::sparse_refit {

class WeightCopy {
 public:
  struct Tensor {
    std::string name;
    DLDataType dtype{};
    std::vector<int64_t> shape;
    std::vector<std::byte> bytes;
  };

  // Replaces the copy with `tensors` (compact host memory, else MLPT_INVALID_ARGUMENT). Without
  // `values`, only their layout: as drop_values() leaves it.
  void assign(uint64_t version, const mlpt_named_tensor* tensors, size_t count, bool values = true);
  // True when `tensors` have exactly this copy's names, order, dtypes and shapes.
  bool same_layout(const mlpt_named_tensor* tensors, size_t count) const;
  void clear() { tensors_.clear(), version_ = 0, valid_ = false; }
  // Frees the values and keeps the layout (names, dtypes, shapes): same_layout still answers, the
  // copy is no longer valid.
  void drop_values();

  bool valid() const { return valid_; }
  uint64_t version() const { return version_; }
  void set_version(uint64_t v) { version_ = v; }
  std::vector<Tensor>& tensors() { return tensors_; }
  // Named views of the copy; valid until the copy changes layout or goes.
  const std::vector<mlpt_named_tensor>& views();

 private:
  std::vector<Tensor> tensors_;
  std::vector<mlpt_named_tensor> views_;
  uint64_t version_ = 0;
  bool valid_ = false;
};

}  // namespace mlpt::sparse_refit
