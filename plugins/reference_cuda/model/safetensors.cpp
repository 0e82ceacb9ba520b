#include "model/safetensors.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "mlpt/sdk/error.hpp"

namespace mlpt::ref {

using nlohmann::json;
using sdk::Error;
namespace fs = std::filesystem;

// ---- dtypes ----

namespace {

struct DtypeInfo {
  Dtype dtype;
  const char* code;
  size_t bytes;
};

constexpr DtypeInfo kDtypes[] = {
    {Dtype::f32, "F32", 4},         {Dtype::bf16, "BF16", 2}, {Dtype::f16, "F16", 2}, {Dtype::f8_e4m3, "F8_E4M3", 1},
    {Dtype::f64, "F64", 8},         {Dtype::f8_e5m2, "F8_E5M2", 1}, {Dtype::i64, "I64", 8}, {Dtype::i32, "I32", 4},
    {Dtype::i16, "I16", 2},         {Dtype::i8, "I8", 1},     {Dtype::u8, "U8", 1},   {Dtype::boolean, "BOOL", 1},
};

const DtypeInfo& info(Dtype d) {
  for (const auto& i : kDtypes)
    if (i.dtype == d) return i;
  return kDtypes[0];
}

}  // namespace

const char* dtype_code(Dtype d) { return info(d).code; }

size_t dtype_bytes(Dtype d) { return info(d).bytes; }

bool is_weight_dtype(Dtype d) { return d == Dtype::f32 || d == Dtype::bf16 || d == Dtype::f16 || d == Dtype::f8_e4m3; }

Dtype parse_dtype(const std::string& n) {
  if (n == "float32") return Dtype::f32;
  if (n == "bfloat16") return Dtype::bf16;
  if (n == "float16") return Dtype::f16;
  for (const auto& i : kDtypes)
    if (n == i.code) return i.dtype;
  throw Error(MLPT_INVALID_ARGUMENT, "unsupported dtype '" + n + "' (expected F32, BF16, F16, F8_E4M3, F8_E5M2, F64, "
                                     "I64, I32, I16, I8, U8 or BOOL)");
}

float bf16_to_float(uint16_t v) {
  uint32_t bits = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t float_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);  // NaN stays NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

float f16_to_float(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do { ++e; mant <<= 1; } while (!(mant & 0x400));
      bits = sign | static_cast<uint32_t>(127 - 15 - e) << 23 | (mant & 0x3ff) << 13;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | mant << 13;
  } else {
    bits = sign | (exp + 127 - 15) << 23 | mant << 13;
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t float_to_f16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  uint32_t sign = (bits >> 16) & 0x8000u;
  uint32_t absb = bits & 0x7fffffffu;
  if (absb > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00);
  if (absb >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00);  // overflow to inf
  if (absb < 0x38800000u) {  // subnormal half or zero: round absb * 2^24 to an integer
    float a;
    std::memcpy(&a, &absb, 4);
    float scaled = a * 16777216.0f;  // exact scaling, then round-to-nearest-even by the FPU
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(scaled)));
  }
  uint32_t r = absb - (112u << 23);  // rebias exponent
  r += 0xfffu + ((r >> 13) & 1u);
  return static_cast<uint16_t>(sign | (r >> 13));
}

float f8_e4m3_to_float(uint8_t v) {
  const int sign = v >> 7, exp = (v >> 3) & 0xf, mant = v & 7;
  if (exp == 15 && mant == 7) return NAN;
  float mag = exp == 0 ? std::ldexp(static_cast<float>(mant), -9)  // subnormal: mant/8 * 2^-6
                       : std::ldexp(static_cast<float>(8 + mant), exp - 10);
  return sign ? -mag : mag;
}

uint8_t float_to_f8_e4m3(float f) {
  if (std::isnan(f)) return 0x7f;
  const uint8_t sign = std::signbit(f) ? 0x80 : 0;
  float a = std::fabs(f);
  if (a >= 448.0f) return sign | 0x7e;  // saturate (the format has no infinity)
  // Quantum of a's binade (2^-9 in the subnormal range); a / quantum rounds to nearest even.
  int e = a < 0x1.0p-6f ? -6 : std::ilogb(a);
  float q = std::nearbyint(std::ldexp(a, 3 - e));  // in [8, 16] for normals, [0, 8] for subnormals
  if (q >= 16.0f) {
    q = 8.0f;
    ++e;
  }
  if (q < 8.0f) return sign | static_cast<uint8_t>(q);  // subnormal (or zero)
  if (e > 8) return sign | 0x7e;
  return sign | static_cast<uint8_t>((e + 7) << 3 | (static_cast<int>(q) - 8));
}

int64_t TensorEntry::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

}  // namespace

// ---- reading ----

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(MLPT_NOT_FOUND, path + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(MLPT_INVALID_ARGUMENT, path + ": not a regular file");
  }
  size_t size = static_cast<size_t>(st.st_size);
  if (size < 8) {
    ::close(fd);
    throw Error(MLPT_DATA_LOSS, path + ": truncated: " + std::to_string(size) + " bytes, no header length");
  }
  map_ = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    throw Error(MLPT_INTERNAL, path + ": mmap failed: " + std::strerror(errno));
  }
  map_size_ = size;
  try {
    const auto* bytes = static_cast<const unsigned char*>(map_);
    uint64_t header_len = 0;
    for (int i = 7; i >= 0; --i) header_len = header_len << 8 | bytes[i];
    if (header_len > size - 8)
      throw Error(MLPT_DATA_LOSS, path + ": header length " + std::to_string(header_len) +
                                      " runs past the end of the file (" + std::to_string(size) + " bytes)");
    json header;
    try {
      header = json::parse(reinterpret_cast<const char*>(bytes + 8), reinterpret_cast<const char*>(bytes + 8 + header_len));
    } catch (const json::parse_error& e) {
      throw Error(MLPT_DATA_LOSS, path + ": header is not valid JSON: " + e.what());
    }
    if (!header.is_object()) throw Error(MLPT_DATA_LOSS, path + ": header is not a JSON object");
    data_ = reinterpret_cast<const std::byte*>(bytes + 8 + header_len);
    size_t data_size = size - 8 - header_len;
    std::vector<std::pair<size_t, std::string>> ranges;
    for (auto& [name, v] : header.items()) {
      if (name == "__metadata__") {
        if (!v.is_object()) throw Error(MLPT_DATA_LOSS, path + ": __metadata__ is not an object");
        for (auto& [k, m] : v.items())
          if (m.is_string()) metadata_[k] = m.get<std::string>();
        continue;
      }
      std::string where = path + ": tensor '" + name + "'";
      if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets"))
        throw Error(MLPT_DATA_LOSS, where + ": header entry needs dtype, shape and data_offsets");
      TensorEntry e;
      if (!v["dtype"].is_string()) throw Error(MLPT_DATA_LOSS, where + ": dtype is not a string");
      try {
        e.dtype = parse_dtype(v["dtype"].get<std::string>());
      } catch (const Error& err) {
        throw Error(MLPT_INVALID_ARGUMENT, where + ": " + err.what());
      }
      if (!v["shape"].is_array()) throw Error(MLPT_DATA_LOSS, where + ": shape is not an array");
      for (auto& d : v["shape"]) {
        if (!d.is_number_unsigned()) throw Error(MLPT_DATA_LOSS, where + ": shape " + v["shape"].dump() + " has a non-integer or negative dimension");
        e.shape.push_back(d.get<int64_t>());
      }
      const json& off = v["data_offsets"];
      if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
        throw Error(MLPT_DATA_LOSS, where + ": data_offsets must be two non-negative integers");
      e.begin = off[0].get<size_t>();
      e.end = off[1].get<size_t>();
      if (e.begin > e.end || e.end > data_size)
        throw Error(MLPT_DATA_LOSS, where + ": data_offsets [" + std::to_string(e.begin) + ", " +
                                        std::to_string(e.end) + ") out of range of the " +
                                        std::to_string(data_size) + "-byte data section (truncated file?)");
      if (static_cast<size_t>(e.numel()) * dtype_bytes(e.dtype) != e.end - e.begin)
        throw Error(MLPT_DATA_LOSS, where + ": " + std::to_string(e.end - e.begin) + " bytes do not hold " +
                                        dtype_code(e.dtype) + " " + shape_str(e.shape));
      ranges.push_back({e.begin, name});
      tensors_.emplace(name, std::move(e));
    }
    std::sort(ranges.begin(), ranges.end());
    for (size_t i = 1; i < ranges.size(); ++i) {
      const TensorEntry& prev = tensors_.at(ranges[i - 1].second);
      const TensorEntry& cur = tensors_.at(ranges[i].second);
      if (cur.begin < prev.end && cur.end > cur.begin && prev.end > prev.begin)
        throw Error(MLPT_DATA_LOSS, path + ": tensors '" + ranges[i - 1].second + "' and '" +
                                        ranges[i].second + "' overlap in the data section");
    }
  } catch (...) {
    ::munmap(map_, map_size_);
    map_ = nullptr;
    throw;
  }
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) ::munmap(map_, map_size_);
}

void SafetensorsFile::release(size_t begin, size_t end) const {
  static const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  auto base = reinterpret_cast<uintptr_t>(map_);
  uintptr_t lo = reinterpret_cast<uintptr_t>(data_ + begin), hi = reinterpret_cast<uintptr_t>(data_ + end);
  lo = lo / page * page;
  hi = std::min<uintptr_t>((hi + page - 1) / page * page, base + map_size_);
  // Read-only private pages are clean: dropping them only means a later touch reads the file again.
  if (hi > lo) ::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED);
}

const TensorEntry& SafetensorsFile::entry(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) throw Error(MLPT_NOT_FOUND, path_ + ": no tensor '" + name + "'");
  return it->second;
}

SafetensorsCheckpoint::SafetensorsCheckpoint(const std::string& dir) : dir_(dir) {
  fs::path index = fs::path(dir) / "model.safetensors.index.json";
  fs::path single = fs::path(dir) / "model.safetensors";
  if (!fs::is_directory(dir)) throw Error(MLPT_NOT_FOUND, dir + ": checkpoint directory does not exist");
  if (fs::exists(index)) {
    json doc;
    try {
      std::ifstream in(index);
      doc = json::parse(in);
    } catch (const json::parse_error& e) {
      throw Error(MLPT_DATA_LOSS, index.string() + ": not valid JSON: " + e.what());
    }
    if (!doc.is_object() || !doc.contains("weight_map") || !doc["weight_map"].is_object())
      throw Error(MLPT_DATA_LOSS, index.string() + ": weight_map missing or not an object");
    std::map<std::string, size_t> file_index;
    for (auto& [name, file] : doc["weight_map"].items()) {
      if (!file.is_string()) throw Error(MLPT_DATA_LOSS, index.string() + ": weight_map['" + name + "'] is not a file name");
      std::string f = file.get<std::string>();
      if (f.find('/') != std::string::npos || f == ".." )
        throw Error(MLPT_DATA_LOSS, index.string() + ": shard name '" + f + "' leaves the directory");
      if (!file_index.count(f)) {
        file_index[f] = files_.size();
        files_.push_back(std::make_unique<SafetensorsFile>((fs::path(dir) / f).string()));
      }
      size_t k = file_index[f];
      if (!files_[k]->tensors().count(name))
        throw Error(MLPT_DATA_LOSS, index.string() + ": lists '" + name + "' in " + f + ", which does not hold it");
      where_[name] = k;
    }
  } else if (fs::exists(single)) {
    files_.push_back(std::make_unique<SafetensorsFile>(single.string()));
    for (auto& [name, e] : files_[0]->tensors()) where_[name] = 0;
  } else {
    throw Error(MLPT_NOT_FOUND, dir + ": no model.safetensors or model.safetensors.index.json");
  }
  fs::path config = fs::path(dir) / "config.json";
  if (fs::exists(config)) {  // FP8 block size, as HF's fine-grained FP8 config states it
    json doc;
    try {
      std::ifstream in(config);
      doc = json::parse(in);
    } catch (const json::parse_error& e) {
      throw Error(MLPT_DATA_LOSS, config.string() + ": not valid JSON: " + e.what());
    }
    const json* q = nullptr;
    if (doc.is_object() && doc.contains("quantization_config")) q = &doc["quantization_config"];
    else if (doc.is_object() && doc.contains("text_config") && doc["text_config"].is_object() &&
             doc["text_config"].contains("quantization_config"))
      q = &doc["text_config"]["quantization_config"];
    if (q && q->is_object() && q->contains("weight_block_size")) {
      const json& b = (*q)["weight_block_size"];
      if (!b.is_array() || b.size() != 2 || !b[0].is_number_unsigned() || !b[1].is_number_unsigned() || b[0] == 0 || b[1] == 0)
        throw Error(MLPT_INVALID_ARGUMENT, config.string() + ": quantization_config.weight_block_size must be two positive integers");
      fp8_block_ = {b[0].get<int64_t>(), b[1].get<int64_t>()};
    }
  }
}

std::vector<std::string> SafetensorsCheckpoint::names() const {
  std::vector<std::string> out;
  for (auto& [n, k] : where_) out.push_back(n);
  return out;
}

const TensorEntry& SafetensorsCheckpoint::entry(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) throw Error(MLPT_NOT_FOUND, dir_ + ": checkpoint has no tensor '" + name + "'");
  return files_[it->second]->entry(name);
}

const std::string& SafetensorsCheckpoint::file_of(const std::string& name) const {
  entry(name);
  return files_[where_.at(name)]->path();
}

namespace {

// Where the elements of a slice lie: `runs` contiguous runs of `run` elements, run k starting at
// element first + k * stride of the tensor.
struct SliceRuns {
  int64_t runs = 1, run = 0, first = 0, stride = 0;
  std::vector<int64_t> shape;  // of the slice
};

SliceRuns slice_runs(const std::vector<int64_t>& shape, const Slice* slice, const std::string& where) {
  SliceRuns r;
  r.shape = shape;
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  if (!slice) {
    r.run = n;
    return r;
  }
  if (slice->dim < 0 || slice->dim >= static_cast<int>(shape.size()) || slice->begin < 0 || slice->begin > slice->end ||
      slice->end > shape[slice->dim])
    throw Error(MLPT_INVALID_ARGUMENT, where + ": slice [" + std::to_string(slice->begin) + ", " +
                                           std::to_string(slice->end) + ") of dim " + std::to_string(slice->dim) +
                                           " is outside shape " + shape_str(shape));
  int64_t inner = 1;
  for (size_t d = slice->dim + 1; d < shape.size(); ++d) inner *= shape[d];
  for (int d = 0; d < slice->dim; ++d) r.runs *= shape[d];
  r.run = (slice->end - slice->begin) * inner;
  r.first = slice->begin * inner;
  r.stride = shape[slice->dim] * inner;
  r.shape[slice->dim] = slice->end - slice->begin;
  return r;
}

template <class T>
void decode(const std::byte* p, Dtype d, int64_t n, T* out) {
  for (int64_t i = 0; i < n; ++i) {
    switch (d) {
      case Dtype::f32: {
        float v;
        std::memcpy(&v, p + 4 * i, 4);
        out[i] = static_cast<T>(v);
        break;
      }
      case Dtype::bf16:
      case Dtype::f16: {
        uint16_t v;
        std::memcpy(&v, p + 2 * i, 2);
        out[i] = static_cast<T>(d == Dtype::bf16 ? bf16_to_float(v) : f16_to_float(v));
        break;
      }
      default:
        out[i] = static_cast<T>(f8_e4m3_to_float(static_cast<uint8_t>(p[i])));
        break;
    }
  }
}

void check_shape(const std::string& file, const std::string& name, const TensorEntry& e, const std::vector<int64_t>& shape) {
  if (e.shape != shape)
    throw Error(MLPT_INVALID_ARGUMENT, file + ": tensor '" + name + "' has shape " + shape_str(e.shape) +
                                           ", the model config needs " + shape_str(shape));
  if (!is_weight_dtype(e.dtype))
    throw Error(MLPT_INVALID_ARGUMENT, file + ": tensor '" + name + "' has dtype " + dtype_code(e.dtype) +
                                           ", not a weight dtype (F32, BF16, F16 or F8_E4M3)");
}

}  // namespace

std::string scale_inv_name(const std::string& name) { return name + "_scale_inv"; }

int64_t HostTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

template <class T>
void read_tensor(const SafetensorsFile& f, const std::string& name, const std::vector<int64_t>& shape, T* out) {
  const TensorEntry& e = f.entry(name);
  check_shape(f.path(), name, e, shape);
  if (e.dtype == Dtype::f8_e4m3)
    throw Error(MLPT_INVALID_ARGUMENT, f.path() + ": tensor '" + name + "' is FP8; its block scale lives in the checkpoint, read it from there");
  decode(f.data(e), e.dtype, e.numel(), out);
  f.release(e.begin, e.end);
}

template void read_tensor<float>(const SafetensorsFile&, const std::string&, const std::vector<int64_t>&, float*);
template void read_tensor<double>(const SafetensorsFile&, const std::string&, const std::vector<int64_t>&, double*);

const SafetensorsFile& SafetensorsCheckpoint::file(const std::string& name) const {
  entry(name);
  return *files_[where_.at(name)];
}

template <class T>
void SafetensorsCheckpoint::read(const std::string& name, const std::vector<int64_t>& shape, T* out) const {
  read_box<T>(name, shape, std::vector<int64_t>(shape.size(), 0), shape, out);
}

template <class T>
void SafetensorsCheckpoint::read_slice(const std::string& name, const std::vector<int64_t>& shape, const Slice& slice,
                                       T* out) const {
  std::vector<int64_t> offset(shape.size(), 0), extent = shape;
  if (slice.dim < 0 || slice.dim >= static_cast<int>(shape.size()) || slice.begin < 0 || slice.begin > slice.end)
    throw Error(MLPT_INVALID_ARGUMENT, file_of(name) + ": tensor '" + name + "': slice [" + std::to_string(slice.begin) + ", " +
                                           std::to_string(slice.end) + ") of dim " + std::to_string(slice.dim) +
                                           " is outside shape " + shape_str(shape));
  offset[slice.dim] = slice.begin, extent[slice.dim] = slice.end - slice.begin;
  read_box<T>(name, shape, offset, extent, out);
}

template <class T>
void SafetensorsCheckpoint::read_box(const std::string& name, const std::vector<int64_t>& shape,
                                     const std::vector<int64_t>& offset, const std::vector<int64_t>& extent, T* out) const {
  const SafetensorsFile& f = file(name);
  const TensorEntry& e = f.entry(name);
  check_shape(f.path(), name, e, shape);
  const std::string where = f.path() + ": tensor '" + name + "'";
  const size_t nd = e.shape.size();
  if (offset.size() != nd || extent.size() != nd)
    throw Error(MLPT_INVALID_ARGUMENT, where + ": a box of " + std::to_string(offset.size()) + " dims for shape " + shape_str(e.shape));
  int64_t runs = 1;
  for (size_t d = 0; d < nd; ++d) {
    if (offset[d] < 0 || extent[d] < 0 || offset[d] + extent[d] > e.shape[d])
      throw Error(MLPT_INVALID_ARGUMENT, where + ": box at " + shape_str(offset) + " of extent " + shape_str(extent) +
                                             " is outside shape " + shape_str(e.shape));
    if (d + 1 < nd) runs *= extent[d];
  }
  const int64_t run = nd ? extent[nd - 1] : 1;
  if (runs == 0 || run == 0) return;
  // Element index of run k: the box's index tuple of every dimension but the last, row-major.
  std::vector<int64_t> stride(nd, 1);
  for (size_t d = nd; d-- > 1;) stride[d - 1] = stride[d] * e.shape[d];
  auto run_start = [&](int64_t k) -> int64_t {
    if (nd == 0) return 0;  // a scalar
    int64_t at = offset[nd - 1];
    for (size_t d = nd - 1; d-- > 0;) {
      at += (offset[d] + k % extent[d]) * stride[d];
      k /= extent[d];
    }
    return at;
  };
  const size_t width = dtype_bytes(e.dtype);
  if (e.dtype != Dtype::f8_e4m3) {
    for (int64_t k = 0; k < runs; ++k) decode(f.data(e) + run_start(k) * width, e.dtype, run, out + k * run);
  } else {
    // Dequantise: each element times the scale of its block in the last two dims.
    std::string sname = scale_inv_name(name);
    if (!contains(sname))
      throw Error(MLPT_NOT_FOUND, where + " is FP8 but the checkpoint has no block scale '" + sname + "'");
    if (nd < 2) throw Error(MLPT_INVALID_ARGUMENT, where + ": an FP8 tensor needs at least two dims");
    const int64_t rows = e.shape[nd - 2], cols = e.shape.back();
    const auto [br, bc] = fp8_block_;
    std::vector<int64_t> sshape(e.shape.begin(), e.shape.end() - 2);
    sshape.push_back((rows + br - 1) / br);
    sshape.push_back((cols + bc - 1) / bc);
    const TensorEntry& se = entry(sname);
    if (se.dtype != Dtype::f32 && se.dtype != Dtype::bf16)
      throw Error(MLPT_INVALID_ARGUMENT, file(sname).path() + ": block scale '" + sname + "' must be F32 or BF16, not " + dtype_code(se.dtype));
    if (se.shape != sshape)
      throw Error(MLPT_INVALID_ARGUMENT, file(sname).path() + ": block scale '" + sname + "' has shape " + shape_str(se.shape) +
                                             ", " + std::to_string(br) + " x " + std::to_string(bc) + " blocks of " +
                                             shape_str(e.shape) + " need " + shape_str(sshape));
    std::vector<float> scale(static_cast<size_t>(se.numel()));  // small: one value per block
    read_tensor(file(sname), sname, sshape, scale.data());
    bytes_read_ += se.end - se.begin;
    const int64_t srows = sshape[sshape.size() - 2], scols = sshape.back();
    for (int64_t k = 0; k < runs; ++k) {
      const int64_t start = run_start(k);
      const std::byte* p = f.data(e) + start;
      T* o = out + k * run;
      for (int64_t i = 0; i < run; ++i) {
        const int64_t idx = start + i, c = idx % cols, row = (idx / cols) % rows, b = idx / (rows * cols);
        const float s = scale[static_cast<size_t>((b * srows + row / br) * scols + c / bc)];
        o[i] = static_cast<T>(static_cast<double>(f8_e4m3_to_float(static_cast<uint8_t>(p[i]))) * s);
      }
    }
  }
  bytes_read_ += static_cast<uint64_t>(runs * run) * width;
  f.release(e.begin + run_start(0) * width, e.begin + (run_start(runs - 1) + run) * width);
}

const std::byte* SafetensorsCheckpoint::stored_bytes(const std::string& name) const {
  const SafetensorsFile& f = file(name);
  return f.data(f.entry(name));
}

HostTensor SafetensorsCheckpoint::read_raw(const std::string& name) const {
  const TensorEntry& e = entry(name);
  return read_raw_slice(name, Slice{0, 0, e.shape.empty() ? 1 : e.shape[0]});
}

HostTensor SafetensorsCheckpoint::read_raw_slice(const std::string& name, const Slice& slice) const {
  const SafetensorsFile& f = file(name);
  const TensorEntry& e = f.entry(name);
  const std::string where = f.path() + ": tensor '" + name + "'";
  if (e.dtype == Dtype::f8_e4m3 && contains(scale_inv_name(name)) && !(slice.begin == 0 && slice.end == e.shape[0]))
    throw Error(MLPT_INVALID_ARGUMENT, where + " is block-scaled FP8: slice it after dequantising (read_slice)");
  SliceRuns r = slice_runs(e.shape, e.shape.empty() ? nullptr : &slice, where);
  const size_t width = dtype_bytes(e.dtype);
  HostTensor t{e.dtype, r.shape, std::vector<std::byte>(static_cast<size_t>(r.runs * r.run) * width)};
  for (int64_t k = 0; k < r.runs; ++k)
    std::memcpy(t.bytes.data() + k * r.run * width, f.data(e) + (r.first + k * r.stride) * width, r.run * width);
  bytes_read_ += t.bytes.size();
  if (r.runs > 0 && r.run > 0)
    f.release(e.begin + r.first * width, e.begin + (r.first + (r.runs - 1) * r.stride + r.run) * width);
  return t;
}

template void SafetensorsCheckpoint::read<float>(const std::string&, const std::vector<int64_t>&, float*) const;
template void SafetensorsCheckpoint::read<double>(const std::string&, const std::vector<int64_t>&, double*) const;
template void SafetensorsCheckpoint::read_slice<float>(const std::string&, const std::vector<int64_t>&, const Slice&, float*) const;
template void SafetensorsCheckpoint::read_slice<double>(const std::string&, const std::vector<int64_t>&, const Slice&, double*) const;
template void SafetensorsCheckpoint::read_box<float>(const std::string&, const std::vector<int64_t>&, const std::vector<int64_t>&,
                                                     const std::vector<int64_t>&, float*) const;
template void SafetensorsCheckpoint::read_box<double>(const std::string&, const std::vector<int64_t>&, const std::vector<int64_t>&,
                                                      const std::vector<int64_t>&, double*) const;

std::vector<int64_t> fp8_scale_shape(const std::vector<int64_t>& shape, std::pair<int64_t, int64_t> block) {
  if (shape.size() < 2) throw Error(MLPT_INVALID_ARGUMENT, "FP8 block quantisation needs at least two dims, got " + shape_str(shape));
  std::vector<int64_t> scales(shape.begin(), shape.end() - 2);
  scales.push_back((shape[shape.size() - 2] + block.first - 1) / block.first);
  scales.push_back((shape.back() + block.second - 1) / block.second);
  return scales;
}

Fp8Tensor quantize_fp8(const float* values, const std::vector<int64_t>& shape, std::pair<int64_t, int64_t> block) {
  if (shape.size() < 2) throw Error(MLPT_INVALID_ARGUMENT, "FP8 block quantisation needs at least two dims, got " + shape_str(shape));
  const int64_t rows = shape[shape.size() - 2], cols = shape.back();
  const auto [br, bc] = block;
  int64_t batch = 1;
  for (size_t d = 0; d + 2 < shape.size(); ++d) batch *= shape[d];
  Fp8Tensor q;
  q.scale_shape = fp8_scale_shape(shape, block);
  const int64_t srows = q.scale_shape[q.scale_shape.size() - 2], scols = q.scale_shape.back();
  q.values.resize(static_cast<size_t>(batch * rows * cols));
  q.scale_inv.assign(static_cast<size_t>(batch * srows * scols), 0.0f);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        float& s = q.scale_inv[static_cast<size_t>((b * srows + r / br) * scols + c / bc)];
        s = std::max(s, std::fabs(values[(b * rows + r) * cols + c]));
      }
  for (float& s : q.scale_inv) s = s > 0 ? s / 448.0f : 1.0f;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const int64_t i = (b * rows + r) * cols + c;
        const float s = q.scale_inv[static_cast<size_t>((b * srows + r / br) * scols + c / bc)];
        q.values[static_cast<size_t>(i)] = static_cast<std::byte>(float_to_f8_e4m3(values[i] / s));
      }
  return q;
}

// ---- writing ----

// Writes through a temporary name in the same directory, fsyncs, renames over `path`.
class AtomicFile {
 public:
  explicit AtomicFile(std::string path) : path_(std::move(path)) {
    tmp_ = path_ + ".tmp." + std::to_string(::getpid());
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) throw Error(MLPT_PERMISSION_DENIED, tmp_ + ": cannot create: " + std::strerror(errno));
  }
  ~AtomicFile() {
    if (fd_ >= 0) {
      ::close(fd_);
      ::unlink(tmp_.c_str());
    }
  }
  void write(const void* data, size_t n) {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      ssize_t w = ::write(fd_, p, n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) throw Error(MLPT_RESOURCE_EXHAUSTED, tmp_ + ": write failed: " + std::strerror(errno));
      p += w;
      n -= static_cast<size_t>(w);
    }
  }
  // At `offset` of the file, whatever was written before.
  void write_at(size_t offset, const void* data, size_t n) {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      const ssize_t w = ::pwrite(fd_, p, n, static_cast<off_t>(offset));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) throw Error(MLPT_RESOURCE_EXHAUSTED, tmp_ + ": write failed: " + std::strerror(errno));
      p += w, offset += static_cast<size_t>(w);
      n -= static_cast<size_t>(w);
    }
  }
  void commit() {
    if (::fsync(fd_) != 0) throw Error(MLPT_DATA_LOSS, tmp_ + ": fsync failed: " + std::strerror(errno));
    ::close(fd_);
    fd_ = -1;
    if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
      ::unlink(tmp_.c_str());
      throw Error(MLPT_PERMISSION_DENIED, path_ + ": rename failed: " + std::strerror(errno));
    }
  }

 private:
  std::string path_, tmp_;
  int fd_ = -1;
};

namespace {

int64_t numel_of(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

}  // namespace

void write_file_atomic(const std::string& path, const std::string& text) {
  AtomicFile f(path);
  f.write(text.data(), text.size());
  f.commit();
}

SafetensorsWriter::SafetensorsWriter(std::string path, const std::vector<TensorDeclaration>& tensors,
                                     const std::map<std::string, std::string>& metadata)
    : path_(std::move(path)) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  size_t offset = 0;
  for (const auto& t : tensors) {
    if (header.contains(t.name)) throw Error(MLPT_INVALID_ARGUMENT, path_ + ": tensor '" + t.name + "' given twice");
    const size_t bytes = static_cast<size_t>(numel_of(t.shape)) * dtype_bytes(t.dtype);
    header[t.name] = {{"dtype", dtype_code(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    slots_[t.name] = {offset, offset + bytes, 0};
    offset += bytes;
  }
  std::string h = header.dump();
  while ((8 + h.size()) % 8) h += ' ';  // the data section starts 8-byte aligned
  for (auto& [name, slot] : slots_) slot.begin += 8 + h.size(), slot.end += 8 + h.size();
  file_ = std::make_unique<AtomicFile>(path_);
  unsigned char len[8];
  const uint64_t hl = h.size();
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(hl >> (8 * i));
  file_->write_at(0, len, 8);
  file_->write_at(8, h.data(), h.size());
}

SafetensorsWriter::~SafetensorsWriter() = default;

void SafetensorsWriter::append(const std::string& name, const void* bytes, size_t n) {
  auto it = slots_.find(name);
  if (it == slots_.end()) throw Error(MLPT_INTERNAL, path_ + ": tensor '" + name + "' was not declared");
  Slot& slot = it->second;
  if (slot.begin + slot.written + n > slot.end)
    throw Error(MLPT_INTERNAL, path_ + ": tensor '" + name + "' given more bytes than its " + std::to_string(slot.end - slot.begin));
  file_->write_at(slot.begin + slot.written, bytes, n);
  slot.written += n;
}

void SafetensorsWriter::commit() {
  for (const auto& [name, slot] : slots_)
    if (slot.written != slot.end - slot.begin)
      throw Error(MLPT_INTERNAL, path_ + ": tensor '" + name + "' got " + std::to_string(slot.written) + " of its " +
                                     std::to_string(slot.end - slot.begin) + " bytes");
  file_->commit();
}

void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<TensorDeclaration> declared;
  for (const auto& t : tensors) declared.push_back({t.name, t.shape, t.dtype});
  SafetensorsWriter f(path, declared, metadata);
  for (const auto& t : tensors) {
    if (t.raw) {
      f.append(t.name, t.raw, static_cast<size_t>(numel_of(t.shape)) * dtype_bytes(t.dtype));
      continue;
    }
    if (t.dtype != Dtype::f32 && t.dtype != Dtype::bf16 && t.dtype != Dtype::f16)
      throw Error(MLPT_INVALID_ARGUMENT, path + ": tensor '" + t.name + "': float values cannot be written as " +
                                             dtype_code(t.dtype) + " (encode them and pass raw bytes)");
    const EncodedTensor e = encode_floats(t.name, t.shape, t.values, t.dtype);
    f.append(t.name, e.bytes.data(), e.bytes.size());
  }
  f.commit();
}

EncodedTensor encode_floats(const std::string& name, const std::vector<int64_t>& shape, const float* values, Dtype dtype) {
  if (dtype != Dtype::f32 && dtype != Dtype::bf16 && dtype != Dtype::f16)
    throw Error(MLPT_INVALID_ARGUMENT, "tensor '" + name + "': float values cannot be encoded as " + dtype_code(dtype));
  const int64_t n = numel_of(shape);
  EncodedTensor e{name, shape, dtype, std::vector<std::byte>(static_cast<size_t>(n) * dtype_bytes(dtype))};
  for (int64_t i = 0; i < n; ++i) {
    const float v = values[i];
    if (dtype == Dtype::f32) {
      std::memcpy(e.bytes.data() + 4 * i, &v, 4);
    } else {
      const uint16_t w = dtype == Dtype::bf16 ? float_to_bf16(v) : float_to_f16(v);
      std::memcpy(e.bytes.data() + 2 * i, &w, 2);
    }
  }
  return e;
}

void write_checkpoint(const std::string& dir, const std::vector<TensorToWrite>& tensors, size_t max_shard_bytes) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (!fs::is_directory(dir)) throw Error(MLPT_PERMISSION_DENIED, dir + ": cannot create directory");
  std::vector<std::vector<TensorToWrite>> shards(1);
  size_t in_shard = 0, total = 0;
  for (const auto& t : tensors) {
    size_t bytes = static_cast<size_t>(numel_of(t.shape)) * dtype_bytes(t.dtype);
    if (max_shard_bytes && in_shard > 0 && in_shard + bytes > max_shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(t);
    in_shard += bytes;
    total += bytes;
  }
  fs::path index = fs::path(dir) / "model.safetensors.index.json";
  if (shards.size() == 1) {
    write_safetensors((fs::path(dir) / "model.safetensors").string(), tensors, {{"format", "pt"}});
    fs::remove(index, ec);  // a stale index would shadow the single file
    return;
  }
  json weight_map = json::object();
  char name[64];
  for (size_t k = 0; k < shards.size(); ++k) {
    std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", k + 1, shards.size());
    write_safetensors((fs::path(dir) / name).string(), shards[k], {{"format", "pt"}});
    for (const auto& t : shards[k]) weight_map[t.name] = name;
  }
  json doc = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  write_file_atomic(index.string(), doc.dump(2) + "\n");
  fs::remove(fs::path(dir) / "model.safetensors", ec);
}

}  // namespace mlpt::ref
