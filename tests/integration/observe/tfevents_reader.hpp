// A reader of TensorBoard event files written from the format's description, sharing no code with
// mlpt's writer: a file is records of (uint64 little-endian length, uint32 masked CRC-32C of those
// 8 bytes, the data, uint32 masked CRC-32C of the data); each record's data is an Event protobuf
// (wall_time = 1 double, step = 2 int64, file_version = 3 string, summary = 5 Summary); a Summary
// holds repeated Value = 1 (tag = 1 string, simple_value = 2 float). The CRC here is bit by bit.
#pragma once

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace tfevents_spec {

inline uint32_t crc32c_bitwise(const unsigned char* p, size_t n) {
  uint32_t crc = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) {
    crc ^= p[i];
    for (int b = 0; b < 8; ++b) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
  }
  return crc ^ 0xFFFFFFFFu;
}
inline uint32_t mask(uint32_t crc) {
  return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u;
}

struct Event {
  double wall_time = 0;
  int64_t step = 0;
  std::string file_version;
  std::vector<std::pair<std::string, float>> scalars;
};

// The protobuf wire format: a key varint (field << 3 | type), then a varint, 8 bytes, a
// length-prefixed run of bytes, or 4 bytes.
class Fields {
 public:
  Fields(const unsigned char* p, size_t n) : p_(p), end_(p + n) {}
  bool next(uint32_t& field, uint32_t& type, uint64_t& number, std::string& bytes) {
    if (p_ == end_) return false;
    const uint64_t key = varint();
    field = static_cast<uint32_t>(key >> 3), type = static_cast<uint32_t>(key & 7);
    if (type == 0)
      number = varint();
    else if (type == 1)
      number = little_endian(8);
    else if (type == 5)
      number = little_endian(4);
    else if (type == 2) {
      const uint64_t n = varint();
      need(n);
      bytes.assign(reinterpret_cast<const char*>(p_), n);
      p_ += n;
    } else {
      throw std::runtime_error("unsupported wire type " + std::to_string(type));
    }
    return true;
  }

 private:
  void need(uint64_t n) {
    if (static_cast<uint64_t>(end_ - p_) < n)
      throw std::runtime_error("protobuf field runs past its message");
  }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      need(1);
      const unsigned char b = *p_++;
      v |= uint64_t{b & 0x7Fu} << shift;
      if (!(b & 0x80)) return v;
    }
    throw std::runtime_error("varint longer than 10 bytes");
  }
  uint64_t little_endian(int n) {
    need(static_cast<uint64_t>(n));
    uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= uint64_t{p_[i]} << (8 * i);
    p_ += n;
    return v;
  }
  const unsigned char* p_;
  const unsigned char* end_;
};

inline Event decode_event(const std::string& data) {
  Event e;
  Fields f(reinterpret_cast<const unsigned char*>(data.data()), data.size());
  uint32_t field, type;
  uint64_t number;
  std::string bytes;
  while (f.next(field, type, number, bytes)) {
    if (field == 1 && type == 1)
      std::memcpy(&e.wall_time, &number, 8);
    else if (field == 2 && type == 0)
      e.step = static_cast<int64_t>(number);
    else if (field == 3 && type == 2)
      e.file_version = bytes;
    else if (field == 5 && type == 2) {
      Fields summary(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
      std::string value_bytes;
      while (summary.next(field, type, number, value_bytes)) {
        if (field != 1 || type != 2) continue;
        Fields value(reinterpret_cast<const unsigned char*>(value_bytes.data()), value_bytes.size());
        std::string tag, text;
        float simple = 0;
        bool has_simple = false;
        while (value.next(field, type, number, text)) {
          if (field == 1 && type == 2) tag = text;
          if (field == 2 && type == 5) {
            const auto bits = static_cast<uint32_t>(number);
            std::memcpy(&simple, &bits, 4);
            has_simple = true;
          }
        }
        if (has_simple) e.scalars.emplace_back(tag, simple);
      }
    }
  }
  return e;
}

// Every event of `file`, in order; throws naming the record when a length or CRC is wrong.
inline std::vector<Event> read(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  const std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto* p = reinterpret_cast<const unsigned char*>(all.data());
  auto u32 = [&](size_t at) {
    return uint32_t{p[at]} | uint32_t{p[at + 1]} << 8 | uint32_t{p[at + 2]} << 16 | uint32_t{p[at + 3]} << 24;
  };
  std::vector<Event> events;
  for (size_t at = 0; at < all.size();) {
    const std::string where = file.filename().string() + " record " + std::to_string(events.size());
    if (all.size() - at < 12) throw std::runtime_error(where + ": truncated header");
    uint64_t length = 0;
    for (int i = 0; i < 8; ++i) length |= uint64_t{p[at + i]} << (8 * i);
    if (u32(at + 8) != mask(crc32c_bitwise(p + at, 8)))
      throw std::runtime_error(where + ": length CRC mismatch");
    if (all.size() - at - 12 < length + 4) throw std::runtime_error(where + ": truncated data");
    const unsigned char* data = p + at + 12;
    if (u32(at + 12 + length) != mask(crc32c_bitwise(data, length)))
      throw std::runtime_error(where + ": data CRC mismatch");
    events.push_back(decode_event(std::string(reinterpret_cast<const char*>(data), length)));
    at += 12 + length + 4;
  }
  return events;
}

}  // namespace tfevents_spec
