// HF safetensors I/O: files are read through mmap and every header is checked before any byte of
// it is trusted (offsets inside the file, no overlaps, sizes matching dtype x shape). A checkpoint
// directory holds model.safetensors, or shards listed in model.safetensors.index.json. Writing is
// atomic per file (temporary file, fsync, rename); a sharded checkpoint writes its index last.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace mlpt::ref {

enum class Dtype { f32, bf16, f16 };

const char* dtype_code(Dtype d);  // "F32", "BF16", "F16"
size_t dtype_bytes(Dtype d);
// "float32"/"bfloat16"/"float16" (HF config spelling) or the safetensors codes; throws otherwise.
Dtype parse_dtype(const std::string& name);

// Conversions between the stored dtypes and float (round to nearest even when narrowing).
float bf16_to_float(uint16_t v);
uint16_t float_to_bf16(float v);
float f16_to_float(uint16_t v);
uint16_t float_to_f16(float v);

struct TensorEntry {
  Dtype dtype;
  std::vector<int64_t> shape;
  size_t begin = 0, end = 0;  // byte range inside the data section
  int64_t numel() const;
};

// One mapped .safetensors file.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::map<std::string, TensorEntry>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const TensorEntry& entry(const std::string& name) const;  // throws naming tensor and file
  const std::byte* data(const TensorEntry& e) const { return data_ + e.begin; }

 private:
  std::string path_;
  void* map_ = nullptr;
  size_t map_size_ = 0;
  const std::byte* data_ = nullptr;
  std::map<std::string, TensorEntry> tensors_;
  std::map<std::string, std::string> metadata_;
};

// Copies tensor `name` of `file` into `out` as T, converting from its stored dtype, after checking
// it has exactly `shape`; errors name the tensor, the file and the mismatch.
template <class T>
void read_tensor(const SafetensorsFile& file, const std::string& name, const std::vector<int64_t>& shape, T* out);

// A checkpoint directory (single file or sharded); tensors are looked up by name across shards.
class SafetensorsCheckpoint {
 public:
  explicit SafetensorsCheckpoint(const std::string& dir);

  bool contains(const std::string& name) const { return where_.count(name) != 0; }
  std::vector<std::string> names() const;
  const TensorEntry& entry(const std::string& name) const;
  const std::string& file_of(const std::string& name) const;

  // Copies the tensor into `out` as T (float or double), converting from its stored dtype, after
  // checking it has exactly `shape`. Errors name the tensor, the file and the mismatch.
  template <class T>
  void read(const std::string& name, const std::vector<int64_t>& shape, T* out) const;

 private:
  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, size_t> where_;  // tensor -> index in files_
};

// A tensor to write: float values converted to `dtype` on the way out.
struct TensorToWrite {
  std::string name;
  std::vector<int64_t> shape;
  const float* values = nullptr;  // numel(shape) floats
  Dtype dtype = Dtype::f32;
};

// Writes one .safetensors file atomically (tensors in the given order).
void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// Writes a checkpoint into `dir` (created if needed): model.safetensors when everything fits in
// `max_shard_bytes` (0 = no limit), else model-0000K-of-0000N.safetensors shards and
// model.safetensors.index.json.
void write_checkpoint(const std::string& dir, const std::vector<TensorToWrite>& tensors,
                      size_t max_shard_bytes = 0);

// Writes `text` to `path` atomically (temporary file, fsync, rename).
void write_file_atomic(const std::string& path, const std::string& text);

}  // namespace mlpt::ref
