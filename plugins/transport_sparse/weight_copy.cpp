#include "weight_copy.hpp"

#include <algorithm>
#include <cstring>

#include "host_tensor.hpp"

namespace mlpt::sparse_refit {

void WeightCopy::assign(uint64_t version, const mlpt_named_tensor* tensors, size_t count, bool values) {
  valid_ = false;
  if (!same_layout(tensors, count)) {
    tensors_.assign(count, {});
    views_.clear();
  }
  for (size_t i = 0; i < count; ++i) {
    const auto& t = tensors[i];
    Tensor& c = tensors_[i];
    c.name.assign(t.name.data, t.name.size);
    require_host_compact(t.tensor, "weight '" + c.name + "'");
    c.dtype = t.tensor.dtype;
    c.shape.assign(t.tensor.shape, t.tensor.shape + t.tensor.ndim);
    if (!values) continue;
    c.bytes.resize(sdk::nbytes(t.tensor));
    if (!c.bytes.empty()) std::memcpy(c.bytes.data(), bytes_of(t.tensor), c.bytes.size());
  }
  version_ = version;
  if (!values) drop_values();
  valid_ = values;
}

void WeightCopy::drop_values() {
  for (Tensor& c : tensors_) std::vector<std::byte>().swap(c.bytes);
  views_.clear();
  valid_ = false;
}

bool WeightCopy::same_layout(const mlpt_named_tensor* tensors, size_t count) const {
  if (count != tensors_.size()) return false;
  for (size_t i = 0; i < count; ++i) {
    const auto& t = tensors[i].tensor;
    const Tensor& c = tensors_[i];
    if (std::string_view(tensors[i].name.data, tensors[i].name.size) != c.name) return false;
    if (t.dtype.code != c.dtype.code || t.dtype.bits != c.dtype.bits || t.dtype.lanes != c.dtype.lanes)
      return false;
    if (static_cast<size_t>(t.ndim) != c.shape.size() || !std::equal(c.shape.begin(), c.shape.end(), t.shape))
      return false;
  }
  return true;
}

const std::vector<mlpt_named_tensor>& WeightCopy::views() {
  views_.resize(tensors_.size());
  for (size_t i = 0; i < tensors_.size(); ++i) {
    Tensor& c = tensors_[i];
    mlpt_named_tensor& v = views_[i];
    v = mlpt_named_tensor{};
    v.struct_size = MLPT_NAMED_TENSOR_STRUCT_SIZE;
    v.name = mlpt_string{c.name.data(), c.name.size()};
    v.tensor.data = c.bytes.data();
    v.tensor.device = DLDevice{kDLCPU, 0};
    v.tensor.ndim = static_cast<int32_t>(c.shape.size());
    v.tensor.dtype = c.dtype;
    v.tensor.shape = c.shape.data();
  }
  return views_;
}

}  // namespace mlpt::sparse_refit
