// Value helpers for the ABI's plain types: strings, sinks, struct-size checks and DLPack tensors.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "mlpt/mlpt.h"
#include "mlpt/sdk/error.hpp"

namespace mlpt::sdk {

// ---- Strings ----

inline std::string_view view(mlpt_string s) { return s.data ? std::string_view(s.data, s.size) : std::string_view(); }
inline std::string to_string(mlpt_string s) { return std::string(view(s)); }
// Borrows `s`: the result lives as long as `s` does.
inline mlpt_string borrow(std::string_view s) { return mlpt_string{s.data(), s.size()}; }

// ---- Sinks ----

// Writes to a caller's sink (callee side). A NULL sink discards.
inline void write(const mlpt_sink* sink, std::string_view bytes) {
  if (sink && sink->write && !bytes.empty()) sink->write(sink->ctx, bytes.data(), bytes.size());
}

// A sink that appends to a std::string, optionally capped (caller side).
class StringSink {
 public:
  explicit StringSink(size_t limit = SIZE_MAX) : limit_(limit) {
    sink_.struct_size = MLPT_SINK_STRUCT_SIZE;
    sink_.ctx = this;
    sink_.write = [](void* ctx, const char* data, size_t size) {
      auto* self = static_cast<StringSink*>(ctx);
      size_t room = self->limit_ - std::min(self->limit_, self->text_.size());
      self->text_.append(data, std::min(room, size));
      self->dropped_ += size - std::min(room, size);
    };
  }
  StringSink(const StringSink&) = delete;
  StringSink& operator=(const StringSink&) = delete;

  const mlpt_sink* sink() const { return &sink_; }
  const std::string& text() const { return text_; }
  std::string take() { return std::move(text_); }
  size_t dropped() const { return dropped_; }

 private:
  mlpt_sink sink_{};
  size_t limit_;
  std::string text_;
  size_t dropped_ = 0;
};

// ---- Struct sizes ----

// Throws unless the caller's struct holds at least the fields of the oldest version of it (`min_size`:
// the `_1_0` constant, or the plain one for a struct that never grew). Fields appended later are read
// only after MLPT_HAS_FIELD: a host of an older minor writes a shorter struct and is not refused.
inline void require_struct(const void* ptr, size_t struct_size, size_t min_size, const char* type) {
  if (!ptr) throw Error(MLPT_INVALID_ARGUMENT, std::string(type) + " is NULL");
  if (struct_size < min_size)
    throw Error(MLPT_INVALID_ARGUMENT, std::string(type) + ".struct_size is " + std::to_string(struct_size) +
                                           ", smaller than the " + std::to_string(min_size) +
                                           " bytes of the oldest ABI version that has it");
}
template <class T>
void require_struct(const T* ptr, size_t min_size, const char* type) {
  require_struct(ptr, ptr ? ptr->struct_size : 0, min_size, type);
}
// MLPT_HAS_FIELD for a struct held by reference (after require_struct): whether the other side's
// struct reaches `field_end`, MLPT_STRUCT_SIZE(type, field). The macro's NULL test is pointless on a
// reference's address (GCC warns of it).
template <class T>
constexpr bool has_field(const T& s, size_t field_end) {
  return s.struct_size >= field_end;
}

// ---- Tensors ----

inline int64_t numel(const DLTensor& t) {
  int64_t n = 1;
  for (int i = 0; i < t.ndim; ++i) n *= t.shape[i];
  return n;
}
inline size_t element_bytes(DLDataType dtype) { return (dtype.bits * dtype.lanes + 7) / 8; }
inline size_t nbytes(const DLTensor& t) { return static_cast<size_t>(numel(t)) * element_bytes(t.dtype); }

inline bool is_compact(const DLTensor& t) {
  if (!t.strides) return true;
  int64_t expected = 1;
  for (int i = t.ndim - 1; i >= 0; --i) {
    if (t.shape[i] != 1 && t.strides[i] != expected) return false;
    expected *= t.shape[i];
  }
  return true;
}

inline std::string dtype_name(DLDataType d) {
  std::string base = d.code == kDLFloat ? "float" : d.code == kDLBfloat ? "bfloat" : d.code == kDLInt ? "int" : d.code == kDLUInt ? "uint" : "dtype" + std::to_string(d.code);
  return base + std::to_string(d.bits) + (d.lanes != 1 ? "x" + std::to_string(d.lanes) : "");
}

inline constexpr DLDataType kFloat32{kDLFloat, 32, 1};
inline constexpr DLDataType kBFloat16{kDLBfloat, 16, 1};
inline constexpr DLDataType kFloat16{kDLFloat, 16, 1};
inline bool operator==(DLDataType a, DLDataType b) { return a.code == b.code && a.bits == b.bits && a.lanes == b.lanes; }

// A compact CPU tensor view over memory someone else owns; the shape is stored here.
class TensorView {
 public:
  TensorView(void* data, DLDataType dtype, std::vector<int64_t> shape) : shape_(std::move(shape)) {
    tensor_.data = data;
    tensor_.device = DLDevice{kDLCPU, 0};
    tensor_.ndim = static_cast<int32_t>(shape_.size());
    tensor_.dtype = dtype;
    tensor_.shape = shape_.data();
    tensor_.strides = nullptr;
    tensor_.byte_offset = 0;
  }
  TensorView(const TensorView& o) : TensorView(o.tensor_.data, o.tensor_.dtype, o.shape_) {}
  TensorView& operator=(const TensorView&) = delete;
  const DLTensor& tensor() const { return tensor_; }

 private:
  std::vector<int64_t> shape_;
  DLTensor tensor_{};
};

}  // namespace mlpt::sdk
