#include "model/safetensors.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
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

const char* dtype_code(Dtype d) {
  switch (d) {
    case Dtype::f32: return "F32";
    case Dtype::bf16: return "BF16";
    case Dtype::f16: return "F16";
  }
  return "?";
}

size_t dtype_bytes(Dtype d) { return d == Dtype::f32 ? 4 : 2; }

Dtype parse_dtype(const std::string& n) {
  if (n == "F32" || n == "float32") return Dtype::f32;
  if (n == "BF16" || n == "bfloat16") return Dtype::bf16;
  if (n == "F16" || n == "float16") return Dtype::f16;
  throw Error(MLPT_INVALID_ARGUMENT, "unsupported dtype '" + n + "' (expected F32, BF16 or F16)");
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

template <class T>
void read_tensor(const SafetensorsFile& f, const std::string& name, const std::vector<int64_t>& shape, T* out) {
  const TensorEntry& e = f.entry(name);
  if (e.shape != shape)
    throw Error(MLPT_INVALID_ARGUMENT, f.path() + ": tensor '" + name + "' has shape " + shape_str(e.shape) +
                                           ", the model config needs " + shape_str(shape));
  const std::byte* p = f.data(e);
  int64_t n = e.numel();
  switch (e.dtype) {
    case Dtype::f32:
      for (int64_t i = 0; i < n; ++i) {
        float v;
        std::memcpy(&v, p + 4 * i, 4);
        out[i] = static_cast<T>(v);
      }
      break;
    case Dtype::bf16:
    case Dtype::f16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t v;
        std::memcpy(&v, p + 2 * i, 2);
        out[i] = static_cast<T>(e.dtype == Dtype::bf16 ? bf16_to_float(v) : f16_to_float(v));
      }
      break;
  }
}

template void read_tensor<float>(const SafetensorsFile&, const std::string&, const std::vector<int64_t>&, float*);
template void read_tensor<double>(const SafetensorsFile&, const std::string&, const std::vector<int64_t>&, double*);

template <class T>
void SafetensorsCheckpoint::read(const std::string& name, const std::vector<int64_t>& shape, T* out) const {
  entry(name);
  read_tensor(*files_[where_.at(name)], name, shape, out);
}

template void SafetensorsCheckpoint::read<float>(const std::string&, const std::vector<int64_t>&, float*) const;
template void SafetensorsCheckpoint::read<double>(const std::string&, const std::vector<int64_t>&, double*) const;

// ---- writing ----

namespace {

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

void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  size_t offset = 0;
  for (const auto& t : tensors) {
    if (header.contains(t.name)) throw Error(MLPT_INVALID_ARGUMENT, path + ": tensor '" + t.name + "' given twice");
    size_t bytes = static_cast<size_t>(numel_of(t.shape)) * dtype_bytes(t.dtype);
    header[t.name] = {{"dtype", dtype_code(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string h = header.dump();
  while ((8 + h.size()) % 8) h += ' ';  // the data section starts 8-byte aligned
  AtomicFile f(path);
  unsigned char len[8];
  uint64_t hl = h.size();
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(hl >> (8 * i));
  f.write(len, 8);
  f.write(h.data(), h.size());
  std::vector<unsigned char> buf;
  for (const auto& t : tensors) {
    int64_t n = numel_of(t.shape);
    buf.resize(static_cast<size_t>(n) * dtype_bytes(t.dtype));
    for (int64_t i = 0; i < n; ++i) {
      float v = t.values[i];
      if (t.dtype == Dtype::f32) {
        std::memcpy(buf.data() + 4 * i, &v, 4);
      } else {
        uint16_t w = t.dtype == Dtype::bf16 ? float_to_bf16(v) : float_to_f16(v);
        std::memcpy(buf.data() + 2 * i, &w, 2);
      }
    }
    f.write(buf.data(), buf.size());
  }
  f.commit();
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
