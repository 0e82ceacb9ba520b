// HF safetensors I/O: files are read through mmap and every header is checked before any byte of
// it is trusted (offsets inside the file, no overlaps, sizes matching dtype x shape). A checkpoint
// directory holds model.safetensors, or shards listed in model.safetensors.index.json. Reads copy
// only the bytes asked for (a tensor, or a slice of one) and hand the mapped pages back afterwards,
// so loading never holds the file and the converted copy at once. FP8 (E4M3) tensors are
// block-scaled as in the published FP8 checkpoints: `X.weight` F8_E4M3 with `X.weight_scale_inv`
// (F32 or BF16) holding one multiplier per block of the last two dims (128 x 128 unless the
// config's quantization_config.weight_block_size says otherwise). Writing is atomic per file
// (temporary file, fsync, rename); a sharded checkpoint writes its index last.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace mlpt::ref {

// The model reads f32/bf16/f16/f8_e4m3 as weights; the others are carried through unchanged
// (checkpoints may hold integer buffers, e.g. in the vision tower).
enum class Dtype { f32, bf16, f16, f8_e4m3, f64, f8_e5m2, i64, i32, i16, i8, u8, boolean };

const char* dtype_code(Dtype d);  // the safetensors code: "F32", "BF16", "F8_E4M3", "I64", ...
size_t dtype_bytes(Dtype d);
bool is_weight_dtype(Dtype d);  // f32, bf16, f16 or f8_e4m3
// "float32"/"bfloat16"/"float16" (HF config spelling) or the safetensors codes; throws otherwise.
Dtype parse_dtype(const std::string& name);

// Conversions between the stored dtypes and float (round to nearest even when narrowing).
float bf16_to_float(uint16_t v);
uint16_t float_to_bf16(float v);
float f16_to_float(uint16_t v);
uint16_t float_to_f16(float v);
// OCP FP8 E4M3 ("fn": no infinities, 0x7f/0xff are NaN, largest finite 448); narrowing rounds to
// nearest even and saturates to +-448.
float f8_e4m3_to_float(uint8_t v);
uint8_t float_to_f8_e4m3(float v);

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
  // Hands the mapped pages of bytes [begin, end) of the data section back to the kernel (they are
  // read again from the file if touched later): what was copied out stops counting as resident.
  void release(size_t begin, size_t end) const;

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

// Part of a tensor along one dimension: indices [begin, end) of dimension `dim`, all of the others.
struct Slice {
  int dim = 0;
  int64_t begin = 0, end = 0;
};

// A tensor's bytes in its stored dtype (BF16 stays BF16), e.g. one rank's slice.
struct HostTensor {
  Dtype dtype = Dtype::f32;
  std::vector<int64_t> shape;
  std::vector<std::byte> bytes;
  int64_t numel() const;
};

// The name of the FP8 block-scale tensor of `name` ("X.weight" -> "X.weight_scale_inv").
std::string scale_inv_name(const std::string& name);

// A checkpoint directory (single file or sharded); tensors are looked up by name across shards.
class SafetensorsCheckpoint {
 public:
  explicit SafetensorsCheckpoint(const std::string& dir);

  const std::string& dir() const { return dir_; }
  bool contains(const std::string& name) const { return where_.count(name) != 0; }
  std::vector<std::string> names() const;
  const TensorEntry& entry(const std::string& name) const;
  const std::string& file_of(const std::string& name) const;
  // FP8 block size (rows, cols) of the last two dims; from config.json's
  // quantization_config.weight_block_size when present, else 128 x 128.
  std::pair<int64_t, int64_t> fp8_block() const { return fp8_block_; }

  // Copies the tensor into `out` as T (float or double), converting from its stored dtype (FP8
  // multiplied by its block scale), after checking it has exactly `shape`. Errors name the tensor,
  // the file and the mismatch.
  template <class T>
  void read(const std::string& name, const std::vector<int64_t>& shape, T* out) const;
  // The same for one slice: `out` holds the slice's numel values, row-major.
  template <class T>
  void read_slice(const std::string& name, const std::vector<int64_t>& shape, const Slice& slice, T* out) const;
  // The same for a box: indices [offset[d], offset[d] + extent[d]) of every dimension d (a rank's
  // rows, or the row segments of a column split); `out` holds the box's values, row-major. Only
  // the box's bytes are read (and, for FP8, the block scales).
  template <class T>
  void read_box(const std::string& name, const std::vector<int64_t>& shape, const std::vector<int64_t>& offset,
                const std::vector<int64_t>& extent, T* out) const;
  // Bytes copied out of the mapped files by the reads of this checkpoint so far (what a rank that
  // reads only its slices saves is visible here).
  uint64_t bytes_read() const { return bytes_read_; }
  // A slice (or with no slice, all) of the tensor as stored, reading only its bytes. FP8 tensors
  // are refused here (their scale blocks do not follow a slice): read them as float.
  HostTensor read_raw(const std::string& name) const;
  HostTensor read_raw_slice(const std::string& name, const Slice& slice) const;
  // The stored bytes of a tensor inside the mapping (valid while this checkpoint lives): for
  // copying a tensor through unchanged without holding a second copy.
  const std::byte* stored_bytes(const std::string& name) const;

 private:
  const SafetensorsFile& file(const std::string& name) const;
  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, size_t> where_;  // tensor -> index in files_
  std::pair<int64_t, int64_t> fp8_block_{128, 128};
  mutable std::atomic<uint64_t> bytes_read_{0};
};

// A tensor to write: float values converted to `dtype` (f32, bf16 or f16) on the way out, or, when
// `raw` is set, numel x dtype_bytes(dtype) bytes already encoded (written as they are).
struct TensorToWrite {
  std::string name;
  std::vector<int64_t> shape;
  const float* values = nullptr;  // numel(shape) floats
  Dtype dtype = Dtype::f32;
  const std::byte* raw = nullptr;
};

// A tensor already in its stored encoding, owning its bytes.
struct EncodedTensor {
  std::string name;
  std::vector<int64_t> shape;
  Dtype dtype = Dtype::f32;
  std::vector<std::byte> bytes;
};
// Float values converted to `dtype` (f32, bf16 or f16; round to nearest even).
EncodedTensor encode_floats(const std::string& name, const std::vector<int64_t>& shape, const float* values, Dtype dtype);

// The shape of the block scales of an FP8 tensor of `shape` ([.., rows, cols]):
// [.., ceil(rows / block.first), ceil(cols / block.second)].
std::vector<int64_t> fp8_scale_shape(const std::vector<int64_t>& shape, std::pair<int64_t, int64_t> block);

// Block-quantises a [.., rows, cols] float tensor to FP8 E4M3 the way the published FP8 checkpoints
// store it: per block, scale_inv = amax / 448 and q = x / scale_inv (scale 1 for an all-zero block).
struct Fp8Tensor {
  std::vector<std::byte> values;   // numel bytes, F8_E4M3
  std::vector<float> scale_inv;    // [.., ceil(rows / block.first), ceil(cols / block.second)]
  std::vector<int64_t> scale_shape;
};
Fp8Tensor quantize_fp8(const float* values, const std::vector<int64_t>& shape, std::pair<int64_t, int64_t> block);

// Writes one .safetensors file atomically (tensors in the given order).
void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// A tensor of a file to write: its name, shape and stored dtype.
struct TensorDeclaration {
  std::string name;
  std::vector<int64_t> shape;
  Dtype dtype = Dtype::f32;
};

class AtomicFile;  // a file written under a temporary name, renamed into place when complete

// One .safetensors file written in pieces, for a writer that never holds a whole tensor: the
// tensors are declared up front (they make the header; the file's bytes are those
// write_safetensors writes for the same list), then each tensor's bytes arrive in order, in as
// many appends as the writer likes, the tensors in any order. The file is built under a temporary
// name and renamed into place by commit(); a writer destroyed uncommitted removes it. Not
// thread-safe.
class SafetensorsWriter {
 public:
  SafetensorsWriter(std::string path, const std::vector<TensorDeclaration>& tensors,
                    const std::map<std::string, std::string>& metadata = {});
  ~SafetensorsWriter();
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;

  // The next `n` bytes of tensor `name` (errors name the file and the tensor: undeclared, or past
  // its end).
  void append(const std::string& name, const void* bytes, size_t n);
  // Refuses a file a tensor of which is incomplete (naming it); else syncs it and renames it into place.
  void commit();

 private:
  struct Slot {
    size_t begin = 0, end = 0, written = 0;  // in the file
  };
  std::string path_;
  std::unique_ptr<AtomicFile> file_;
  std::map<std::string, Slot> slots_;
};

// Writes a checkpoint into `dir` (created if needed): model.safetensors when everything fits in
// `max_shard_bytes` (0 = no limit), else model-0000K-of-0000N.safetensors shards and
// model.safetensors.index.json.
void write_checkpoint(const std::string& dir, const std::vector<TensorToWrite>& tensors,
                      size_t max_shard_bytes = 0);

// Writes `text` to `path` atomically (temporary file, fsync, rename).
void write_file_atomic(const std::string& path, const std::string& text);

}  // namespace mlpt::ref
