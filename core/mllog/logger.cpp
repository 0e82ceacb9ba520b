#include "core/mllog/logger.hpp"

#include <cerrno>
#include <chrono>
#include <cstring>

#include "core/error.hpp"
#include "core/mllog/keys.hpp"

namespace mlpt::mllog {

std::string_view to_string(EventType type) {
  switch (type) {
    case EventType::point_in_time: return "POINT_IN_TIME";
    case EventType::interval_start: return "INTERVAL_START";
    case EventType::interval_end: return "INTERVAL_END";
  }
  return "POINT_IN_TIME";
}

int64_t now_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

namespace {

// JSON with Python's json.dumps separators (", " and ": "), keeping object order as given.
void write_json(std::string& out, const nlohmann::json& j) {
  if (j.is_object()) {
    out += '{';
    bool first = true;
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (!first) out += ", ";
      first = false;
      out += nlohmann::json(it.key()).dump();
      out += ": ";
      write_json(out, it.value());
    }
    out += '}';
  } else if (j.is_array()) {
    out += '[';
    for (size_t i = 0; i < j.size(); ++i) {
      if (i) out += ", ";
      write_json(out, j[i]);
    }
    out += ']';
  } else {
    // Replace invalid UTF-8 rather than throw: a log line must never be lost to a stray byte.
    out += j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
}

}  // namespace

std::string format_line(int64_t time_ms, EventType type, std::string_view key,
                        const nlohmann::json& value, const nlohmann::json& metadata) {
  std::string line = ":::MLLOG {\"namespace\": \"\", \"time_ms\": ";
  line += std::to_string(time_ms);
  line += ", \"event_type\": \"";
  line += to_string(type);
  line += "\", \"key\": ";
  write_json(line, nlohmann::json(std::string(key)));
  line += ", \"value\": ";
  write_json(line, value);
  line += ", \"metadata\": {";
  bool first = true;
  auto put = [&](const std::string& k, const nlohmann::json& v) {
    if (!first) line += ", ";
    first = false;
    write_json(line, nlohmann::json(k));
    line += ": ";
    write_json(line, v);
  };
  const std::string file_key(keys::kMetaFile), lineno_key(keys::kMetaLineno);
  if (metadata.is_object()) {
    if (metadata.contains(file_key)) put(file_key, metadata[file_key]);
    if (metadata.contains(lineno_key)) put(lineno_key, metadata[lineno_key]);
    for (auto it = metadata.begin(); it != metadata.end(); ++it)
      if (it.key() != file_key && it.key() != lineno_key) put(it.key(), it.value());
  }
  line += "}}";
  return line;
}

Logger::Logger(Options options) : options_(std::move(options)) {
  if (!options_.clock) options_.clock = now_ms;
  if (!options_.file.empty()) {
    file_ = std::fopen(options_.file.c_str(), options_.append ? "a" : "w");
    if (!file_)
      throw Error(MLPT_UNAVAILABLE, "cannot open result log " + options_.file.string() + ": " +
                                     std::strerror(errno));
  }
}

Logger::~Logger() {
  if (file_) std::fclose(file_);
}

void Logger::point(std::string_view key, const nlohmann::json& value, const nlohmann::json& metadata,
                   std::source_location where) {
  event(EventType::point_in_time, key, value, metadata, where);
}

void Logger::start(std::string_view key, const nlohmann::json& metadata, std::source_location where) {
  event(EventType::interval_start, key, nullptr, metadata, where);
}

void Logger::end(std::string_view key, const nlohmann::json& metadata, std::source_location where) {
  event(EventType::interval_end, key, nullptr, metadata, where);
}

void Logger::event(EventType type, std::string_view key, const nlohmann::json& value,
                   const nlohmann::json& metadata, std::source_location where) {
  if (!metadata.is_object() && !metadata.is_null())
    throw Error("mllog: metadata of '" + std::string(key) + "' must be a JSON object, got " +
                metadata.type_name());
  nlohmann::json meta = metadata.is_object() ? metadata : nlohmann::json::object();
  const std::string file_key(keys::kMetaFile), lineno_key(keys::kMetaLineno);
  if (!meta.contains(file_key))
    meta[file_key] = std::filesystem::path(where.file_name()).filename().string();
  if (!meta.contains(lineno_key)) meta[lineno_key] = where.line();

  std::lock_guard lock(mutex_);
  std::string line = format_line(options_.clock(), type, key, value, meta);
  if (file_) {
    line += '\n';
    if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() || std::fflush(file_) != 0)
      throw Error(MLPT_DATA_LOSS, "cannot write result log " + options_.file.string() + ": " +
                                     std::strerror(errno));
    line.pop_back();
  }
  if (options_.sink) options_.sink(line);
  ++lines_;
}

int Logger::fd() const { return file_ ? fileno(file_) : -1; }

int64_t Logger::lines_written() const {
  std::lock_guard lock(mutex_);
  return lines_;
}

}  // namespace mlpt::mllog
