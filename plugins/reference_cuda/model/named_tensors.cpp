#include "model/named_tensors.hpp"

#include <cstring>
#include <map>

#include "mlpt/sdk/error.hpp"
#include "mlpt/sdk/types.hpp"

namespace mlpt::ref {

using sdk::Error;
using sdk::operator==;

std::vector<mlpt_named_tensor> export_named_tensors(Weights<float>& w, std::vector<std::vector<int64_t>>& shapes) {
  std::vector<void*> data;
  for (auto& v : w.values) data.push_back(v.data());
  return named_tensor_views(w.layout, data, DLDevice{kDLCPU, 0}, shapes);
}

std::vector<mlpt_named_tensor> named_tensor_views(const ModelLayout& layout, const std::vector<void*>& data,
                                                  DLDevice device, std::vector<std::vector<int64_t>>& shapes) {
  shapes.clear();
  for (const auto& spec : layout.tensors) shapes.push_back(spec.shape);
  std::vector<mlpt_named_tensor> out;
  for (size_t i = 0; i < layout.tensors.size(); ++i) {
    mlpt_named_tensor t{};
    t.struct_size = MLPT_NAMED_TENSOR_STRUCT_SIZE;
    t.name = sdk::borrow(layout.tensors[i].name);
    t.tensor.data = data[i];
    t.tensor.device = device;
    t.tensor.ndim = static_cast<int32_t>(shapes[i].size());
    t.tensor.dtype = sdk::kFloat32;
    t.tensor.shape = shapes[i].data();
    t.tensor.strides = nullptr;
    t.tensor.byte_offset = 0;
    out.push_back(t);
  }
  return out;
}

std::vector<int> match_named_tensors(const ModelLayout& layout, const mlpt_named_tensor* tensors, size_t count,
                                     bool device_memory_ok) {
  std::map<std::string, int> index;
  for (size_t i = 0; i < layout.tensors.size(); ++i) index[layout.tensors[i].name] = static_cast<int>(i);
  std::vector<bool> seen(layout.tensors.size(), false);
  std::vector<int> out;
  for (size_t n = 0; n < count; ++n) {
    if (tensors[n].struct_size < MLPT_NAMED_TENSOR_STRUCT_SIZE)
      throw Error(MLPT_INVALID_ARGUMENT, "tensor " + std::to_string(n) + ": mlpt_named_tensor.struct_size too small");
    std::string name = sdk::to_string(tensors[n].name);
    auto it = index.find(name);
    if (it == index.end()) throw Error(MLPT_INVALID_ARGUMENT, "tensor '" + name + "' is not a tensor of this model");
    int i = it->second;
    if (seen[i]) throw Error(MLPT_INVALID_ARGUMENT, "tensor '" + name + "' is given twice");
    seen[i] = true;
    const DLTensor& t = tensors[n].tensor;
    const auto& want = layout.tensors[i].shape;
    if (t.ndim != static_cast<int32_t>(want.size()) || !std::equal(want.begin(), want.end(), t.shape)) {
      std::string got = "[";
      for (int d = 0; d < t.ndim; ++d) got += (d ? ", " : "") + std::to_string(t.shape[d]);
      throw Error(MLPT_INVALID_ARGUMENT, "tensor '" + name + "' has shape " + got + "], the model needs another");
    }
    check_tensor_memory("tensor '" + name + "'", t, device_memory_ok);
    out.push_back(i);
  }
  for (size_t i = 0; i < seen.size(); ++i)
    if (!seen[i]) throw Error(MLPT_INVALID_ARGUMENT, "tensor '" + layout.tensors[i].name + "' is missing");
  return out;
}

void check_tensor_memory(const std::string& what, const DLTensor& t, bool device_memory_ok) {
  const bool host = t.device.device_type == kDLCPU || t.device.device_type == kDLCUDAHost;
  if (!host && !(device_memory_ok && t.device.device_type == kDLCUDA))
    throw Error(MLPT_INVALID_ARGUMENT, what + " is not in " + (device_memory_ok ? "CPU or CUDA memory" : "CPU memory"));
  if (!sdk::is_compact(t)) throw Error(MLPT_INVALID_ARGUMENT, what + " is not compact row-major");
  if (t.dtype != sdk::kFloat32 && t.dtype != sdk::kBFloat16 && t.dtype != sdk::kFloat16)
    throw Error(MLPT_INVALID_ARGUMENT, what + " has dtype " + sdk::dtype_name(t.dtype) + " (expected float32, bfloat16 or float16)");
}

void host_tensor_to_float(const DLTensor& t, float* out) {
  const char* base = static_cast<const char*>(t.data) + t.byte_offset;
  const int64_t numel = sdk::numel(t);
  if (t.dtype == sdk::kFloat32) {
    std::memcpy(out, base, static_cast<size_t>(numel) * 4);
    return;
  }
  for (int64_t k = 0; k < numel; ++k) {
    uint16_t v;
    std::memcpy(&v, base + 2 * k, 2);
    out[k] = t.dtype == sdk::kBFloat16 ? bf16_to_float(v) : f16_to_float(v);
  }
}

Weights<float> import_named_tensors(const ModelConfig& config, const mlpt_named_tensor* tensors, size_t count) {
  Weights<float> w = zeros_like_layout<float>(config);
  const std::vector<int> index = match_named_tensors(w.layout, tensors, count, false);
  for (size_t n = 0; n < count; ++n) host_tensor_to_float(tensors[n].tensor, w.values[index[n]].data());
  return w;
}

}  // namespace mlpt::ref
