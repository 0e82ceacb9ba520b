#include "weights_file.hpp"

#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include <nlohmann/json.hpp>
#include <mlpt/sdk.hpp>

namespace mlpt::engine_http {

std::string write_weights_file(const std::string& dir, const mlpt_named_tensor* tensors, size_t count) {
  using sdk::Error;
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  size_t offset = 0;
  std::vector<std::pair<const char*, size_t>> parts;
  for (size_t i = 0; i < count; ++i) {
    const std::string name(tensors[i].name.data, tensors[i].name.size);
    const DLTensor& t = tensors[i].tensor;
    auto refuse = [&](const std::string& why) { return Error(MLPT_INVALID_ARGUMENT, "engine http: weight \"" + name + "\": " + why); };
    if (t.device.device_type != kDLCPU) throw refuse("not in CPU memory (this engine sends weights through a file)");
    const char* code = t.dtype.code == kDLFloat && t.dtype.bits == 32   ? "F32"
                       : t.dtype.code == kDLBfloat && t.dtype.bits == 16 ? "BF16"
                       : t.dtype.code == kDLFloat && t.dtype.bits == 16  ? "F16"
                                                                         : nullptr;
    if (!code || t.dtype.lanes != 1) throw refuse("dtype is not F32, BF16 or F16");
    std::vector<int64_t> shape(t.shape, t.shape + t.ndim);
    size_t stride = 1;
    for (int d = t.ndim - 1; d >= 0; --d) {
      if (t.strides && t.shape[d] > 1 && t.strides[d] != static_cast<int64_t>(stride)) throw refuse("not compact (strided)");
      stride *= static_cast<size_t>(t.shape[d]);
    }
    const size_t bytes = sdk::nbytes(t);
    header[name] = {{"dtype", code}, {"shape", shape}, {"data_offsets", {offset, offset + bytes}}};
    parts.emplace_back(static_cast<const char*>(t.data) + t.byte_offset, bytes);
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  std::filesystem::create_directories(dir);
  const std::string path = (std::filesystem::path(dir) / "model.safetensors").string();
  const std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) throw Error(MLPT_UNAVAILABLE, "engine http: cannot write " + tmp);
  unsigned char length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>((text.size() >> (8 * i)) & 0xff);
  bool ok = std::fwrite(length, 1, 8, f) == 8 && std::fwrite(text.data(), 1, text.size(), f) == text.size();
  for (const auto& [data, bytes] : parts) ok = ok && std::fwrite(data, 1, bytes, f) == bytes;
  ok = std::fflush(f) == 0 && ok;
  ok = std::fclose(f) == 0 && ok;
  if (!ok) {
    std::filesystem::remove(tmp);
    throw Error(MLPT_UNAVAILABLE, "engine http: writing " + tmp + " failed (disk full?)");
  }
  std::filesystem::rename(tmp, path);
  return path;
}

}  // namespace mlpt::engine_http
