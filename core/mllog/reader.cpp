#include "core/mllog/reader.hpp"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/error.hpp"

namespace mlpt::mllog {

namespace {

constexpr std::string_view kToken = ":::MLLOG ";

[[noreturn]] void fail(const std::string& what) { throw Error(MLPT_INVALID_ARGUMENT, what); }

EventType parse_event_type(const nlohmann::json& j) {
  if (!j.is_string()) fail(std::string("\"event_type\" must be a string, got ") + j.type_name());
  const auto& s = j.get_ref<const std::string&>();
  if (s == "POINT_IN_TIME") return EventType::point_in_time;
  if (s == "INTERVAL_START") return EventType::interval_start;
  if (s == "INTERVAL_END") return EventType::interval_end;
  fail("unknown \"event_type\" \"" + s + "\" (POINT_IN_TIME, INTERVAL_START or INTERVAL_END)");
}

}  // namespace

Record parse_line(const std::string& text, int64_t line_number) {
  auto at = text.rfind(kToken);
  if (at == std::string::npos) fail("no \":::MLLOG \" marker");
  std::string body = text.substr(at + kToken.size());
  while (!body.empty() && (body.back() == '\r' || body.back() == '\n' || body.back() == ' ' ||
                           body.back() == '\t'))
    body.pop_back();

  nlohmann::json j;
  try {
    j = nlohmann::json::parse(body);
  } catch (const nlohmann::json::parse_error& e) {
    // e.byte is 1-based within `body`; say it relative to the JSON so a person can count.
    fail("invalid JSON after :::MLLOG at character " + std::to_string(e.byte) + ": " +
         (body.size() > 80 ? body.substr(0, 77) + "..." : body));
  }
  if (!j.is_object()) fail(std::string("the JSON after :::MLLOG must be an object, got ") + j.type_name());
  for (const char* field : {"time_ms", "event_type", "key", "value", "metadata"})
    if (!j.contains(field)) fail(std::string("missing field \"") + field + "\"");

  Record r;
  r.line = line_number;
  const auto& t = j["time_ms"];
  if (!t.is_number()) fail(std::string("\"time_ms\" must be a number, got ") + t.type_name());
  double ms = t.get<double>();
  if (!std::isfinite(ms) || ms < 0) fail("\"time_ms\" must be a non-negative number of milliseconds");
  r.time_ms = t.is_number_integer() ? t.get<int64_t>() : static_cast<int64_t>(std::llround(ms));
  r.event_type = parse_event_type(j["event_type"]);
  const auto& key = j["key"];
  if (!key.is_string() || key.get_ref<const std::string&>().empty())
    fail("\"key\" must be a non-empty string");
  r.key = key.get<std::string>();
  r.value = j["value"];
  if (!j["metadata"].is_object())
    fail(std::string("\"metadata\" must be an object, got ") + j["metadata"].type_name());
  r.metadata = j["metadata"];
  return r;
}

ParsedLog parse_log(std::istream& in, std::string source) {
  ParsedLog log;
  log.source = std::move(source);
  std::string line;
  int64_t n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.find(kToken) == std::string::npos) continue;
    try {
      log.records.push_back(parse_line(line, n));
    } catch (const Error& e) {
      log.errors.push_back({n, e.what()});
    }
  }
  log.total_lines = n;
  return log;
}

ParsedLog parse_log_text(const std::string& text) {
  std::istringstream in(text);
  return parse_log(in);
}

ParsedLog parse_log_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(MLPT_NOT_FOUND, "cannot read result log " + path.string() + ": " + std::strerror(errno));
  auto log = parse_log(in, path.string());
  if (in.bad()) throw Error(MLPT_DATA_LOSS, "error while reading result log " + path.string());
  return log;
}

}  // namespace mlpt::mllog
