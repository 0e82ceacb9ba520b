#include "core/observe/tfevents_writer.hpp"

#include <unistd.h>

#include <chrono>
#include <cstring>

#include "core/error.hpp"
#include "core/observe/crc32c.hpp"

namespace mlpt::observe {
namespace {

// The protobuf wire format, as much of it as Event needs: a field's key is (number << 3 | wire
// type); varints for integers, 8 and 4 little-endian bytes for double and float, and a varint
// length before strings and nested messages.
enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7F) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
}
void put_key(std::string& out, uint32_t field, WireType type) {
  put_varint(out, (uint64_t{field} << 3) | type);
}
template <class T>
void put_little_endian(std::string& out, T value) {  // x86 and ARM Linux are little-endian, as the format is
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  out.append(bytes, sizeof(T));
}
void put_bytes(std::string& out, uint32_t field, std::string_view bytes) {
  put_key(out, field, kLengthDelimited);
  put_varint(out, bytes.size());
  out.append(bytes);
}

// Field numbers of tensorflow/core/util/event.proto and summary.proto.
constexpr uint32_t kEventWallTime = 1, kEventStep = 2, kEventFileVersion = 3, kEventSummary = 5;
constexpr uint32_t kSummaryValue = 1;
constexpr uint32_t kValueTag = 1, kValueSimpleValue = 2;

std::string event_header(double wall_time) {
  std::string e;
  put_key(e, kEventWallTime, kFixed64);
  put_little_endian(e, wall_time);
  return e;
}

double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

std::string file_version_event(double wall_time) {
  std::string e = event_header(wall_time);
  put_bytes(e, kEventFileVersion, "brain.Event:2");
  return e;
}

std::string scalars_event(double wall_time, int64_t step,
                          const std::vector<std::pair<std::string, double>>& values) {
  std::string summary;
  for (const auto& [tag, value] : values) {
    std::string v;
    put_bytes(v, kValueTag, tag);
    put_key(v, kValueSimpleValue, kFixed32);
    put_little_endian(v, static_cast<float>(value));  // simple_value is a float
    put_bytes(summary, kSummaryValue, v);
  }
  std::string e = event_header(wall_time);
  put_key(e, kEventStep, kVarint);
  put_varint(e, static_cast<uint64_t>(step));  // int64: negative values as their two's complement
  put_bytes(e, kEventSummary, summary);
  return e;
}

TfEventsWriter::TfEventsWriter(const std::filesystem::path& folder) {
  std::filesystem::create_directories(folder);
  char host[256] = "localhost";
  gethostname(host, sizeof host - 1);
  const double now = unix_seconds();
  file_ = folder / ("events.out.tfevents." + std::to_string(static_cast<int64_t>(now)) + "." + host + "." +
                    std::to_string(::getpid()));
  out_.open(file_, std::ios::binary | std::ios::app);
  if (!out_)
    throw Error(MLPT_INTERNAL, file_.string() + ": cannot open for writing: " + std::strerror(errno));
  write_record(file_version_event(now));
  out_.flush();
}

void TfEventsWriter::scalars(int64_t step, const std::vector<std::pair<std::string, double>>& values) {
  const std::string event = scalars_event(unix_seconds(), step, values);
  std::lock_guard lock(mutex_);
  write_record(event);
  out_.flush();
}

void TfEventsWriter::write_record(std::string_view data) {
  std::string header;
  put_little_endian(header, static_cast<uint64_t>(data.size()));
  put_little_endian(header, masked_crc32c(crc32c(header.data(), 8)));
  std::string footer;
  put_little_endian(footer, masked_crc32c(crc32c(data.data(), data.size())));
  out_ << header << data << footer;
}

}  // namespace mlpt::observe
