#include "core/serve/weights_from_disk.hpp"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <mlpt/sdk/types.hpp>
#include <nlohmann/json.hpp>

#include "core/error.hpp"

namespace mlpt::serve {
namespace {

struct Dtype {
  const char* code;
  DLDataType dl;
};
const Dtype kDtypes[] = {{"F32", {kDLFloat, 32, 1}}, {"BF16", {kDLBfloat, 16, 1}}, {"F16", {kDLFloat, 16, 1}}};

}  // namespace

WeightsFromDisk::WeightsFromDisk(const std::string& path) {
  namespace fs = std::filesystem;
  file_ = fs::is_directory(path) ? (fs::path(path) / "model.safetensors").string() : path;
  auto fail = [&](const std::string& what) { return Error(MLPT_INVALID_ARGUMENT, file_ + ": " + what); };
  {
    std::ifstream in(file_, std::ios::binary);
    if (!in) throw Error(MLPT_NOT_FOUND, file_ + ": cannot be read");
    std::ostringstream s;
    s << in.rdbuf();
    bytes_ = s.str();
  }
  if (bytes_.size() < 8) throw fail("shorter than a safetensors header");
  uint64_t header_size = 0;
  for (int i = 7; i >= 0; --i) header_size = (header_size << 8) | static_cast<unsigned char>(bytes_[static_cast<size_t>(i)]);
  if (header_size > bytes_.size() - 8) throw fail("header length " + std::to_string(header_size) + " runs past the end of the file");
  const auto header = nlohmann::json::parse(bytes_.substr(8, header_size), nullptr, false);
  if (!header.is_object()) throw fail("the header is not a JSON object");
  const size_t data_begin = 8 + header_size, data_size = bytes_.size() - data_begin;
  data_.resize((data_size + 7) / 8);  // 8-byte aligned, so values at aligned offsets can be read in place
  std::memcpy(data_.data(), bytes_.data() + data_begin, data_size);
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    const std::string where = "tensor \"" + name + "\": ";
    if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") || !entry.contains("data_offsets"))
      throw fail(where + "needs dtype, shape and data_offsets");
    const Dtype* dtype = nullptr;
    for (const auto& d : kDtypes)
      if (entry["dtype"] == d.code) dtype = &d;
    if (!dtype) throw fail(where + "dtype " + entry["dtype"].dump() + " (an engine takes F32, BF16 or F16)");
    std::vector<int64_t> shape;
    uint64_t numel = 1;
    for (const auto& d : entry["shape"]) {
      if (!d.is_number_unsigned()) throw fail(where + "shape " + entry["shape"].dump() + " is not a list of sizes");
      shape.push_back(d.get<int64_t>());
      numel *= d.get<uint64_t>();
    }
    const auto& offsets = entry["data_offsets"];
    if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() || !offsets[1].is_number_unsigned())
      throw fail(where + "data_offsets must be [begin, end]");
    const uint64_t begin = offsets[0], end = offsets[1];
    if (begin > end || end > data_size) throw fail(where + "bytes [" + std::to_string(begin) + ", " + std::to_string(end) + ") lie outside the data");
    if (end - begin != numel * sdk::element_bytes(dtype->dl))
      throw fail(where + std::to_string(end - begin) + " bytes for " + std::to_string(numel) + " " + dtype->code + " values");
    names_.push_back(name);
    shapes_.push_back(std::move(shape));
    mlpt_named_tensor t{};
    t.struct_size = MLPT_NAMED_TENSOR_STRUCT_SIZE;
    t.tensor.data = reinterpret_cast<char*>(data_.data()) + begin;
    t.tensor.device = {kDLCPU, 0};
    t.tensor.dtype = dtype->dl;
    tensors_.push_back(t);
  }
  for (size_t i = 0; i < tensors_.size(); ++i) {  // names_ and shapes_ no longer grow: point into them
    tensors_[i].name = mlpt_string{names_[i].data(), names_[i].size()};
    tensors_[i].tensor.ndim = static_cast<int>(shapes_[i].size());
    tensors_[i].tensor.shape = shapes_[i].data();
  }
  if (tensors_.empty()) throw fail("holds no tensors");
  bytes_ = {};
}

}  // namespace mlpt::serve
