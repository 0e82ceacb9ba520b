#include "core/observe/trace_merge.hpp"

#include <cctype>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "core/error.hpp"

namespace mlpt::observe {
namespace {

using nlohmann::json;

// One event per line, as TraceWriter writes them: "[", then each event with a trailing comma but
// the last, then "]".
std::optional<json> event_of(std::string line) {
  while (!line.empty() && (line.back() == ',' || std::isspace(static_cast<unsigned char>(line.back()))))
    line.pop_back();
  if (line.empty() || line == "[" || line == "]") return std::nullopt;
  json e = json::parse(line, nullptr, false);
  if (e.is_discarded() || !e.is_object()) return json();  // null: a line that is not an event
  return e;
}

// The wall-clock origin a TraceWriter puts in its first events.
std::optional<int64_t> origin_of(const json& event) {
  if (event.contains("args") && event["args"].is_object() && event["args"].contains("clock_origin_unix_ns") &&
      event["args"]["clock_origin_unix_ns"].is_number_integer())
    return event["args"]["clock_origin_unix_ns"].get<int64_t>();
  return std::nullopt;
}

std::optional<int64_t> trace_origin(const std::filesystem::path& file) {
  std::ifstream in(file);
  std::string line;
  for (int i = 0; i < 8 && std::getline(in, line); ++i)
    if (auto e = event_of(line); e && !e->is_null())
      if (auto origin = origin_of(*e)) return origin;
  return std::nullopt;
}

}  // namespace

std::optional<uint64_t> closing_bracket(const std::filesystem::path& trace) {
  std::error_code ec;
  const uint64_t size = std::filesystem::file_size(trace, ec);
  if (ec || size == 0) return std::nullopt;
  std::ifstream in(trace, std::ios::binary);
  const uint64_t from = size > 64 ? size - 64 : 0;
  in.seekg(static_cast<std::streamoff>(from));
  const std::string tail((std::istreambuf_iterator<char>(in)), {});
  const auto last = tail.find_last_not_of(" \t\r\n");
  if (last == std::string::npos || tail[last] != ']') return std::nullopt;
  return from + last;
}

TraceMerge merge_trace_parts(const std::filesystem::path& trace,
                             const std::vector<std::filesystem::path>& parts) {
  TraceMerge merged;
  const auto origin = trace_origin(trace);
  if (!origin)
    throw Error(MLPT_INVALID_ARGUMENT, trace.string() + ": no clock_origin_unix_ns in its first events");
  // Reopen the array: cut the closing bracket (a trace cut short has none).
  std::filesystem::resize_file(trace, closing_bracket(trace).value_or(std::filesystem::file_size(trace)));
  std::ofstream out(trace, std::ios::binary | std::ios::app);
  if (!out) throw Error(MLPT_INTERNAL, trace.string() + ": cannot append to it");
  for (const auto& part : parts) {
    std::vector<json> events;
    std::optional<int64_t> part_origin;
    int64_t group = 0;
    std::ifstream in(part);
    for (std::string line; std::getline(in, line);) {
      auto e = event_of(line);
      if (!e) continue;
      if (e->is_null()) {
        ++merged.skipped_lines;
        continue;
      }
      if (!part_origin) part_origin = origin_of(*e);
      if (group == 0 && e->value("pid", int64_t{0}) != 0) group = (*e)["pid"].get<int64_t>();
      events.push_back(std::move(*e));
    }
    if (!part_origin) {
      merged.unaligned.push_back(part);
      continue;
    }
    if (group == 0) continue;  // a rank that made no call worth a span
    const double shift_us = static_cast<double>(*part_origin - *origin) * 1e-3;
    for (auto& e : events) {
      if (e.value("pid", int64_t{0}) == 0) {
        if (e.value("ph", "") == "M") continue;  // the part's title: its group names itself
        e["pid"] = group;
        if (e.value("s", "") == "g") e["s"] = "p";
      }
      if (e.contains("ts") && e["ts"].is_number()) e["ts"] = e["ts"].get<double>() + shift_us;
      out << ",\n" << e.dump(-1, ' ', false, json::error_handler_t::replace);
      ++merged.events;
    }
    ++merged.parts;
  }
  out << "\n]\n";
  out.flush();
  if (!out) throw Error(MLPT_INTERNAL, trace.string() + ": writing the merged parts failed");
  return merged;
}

}  // namespace mlpt::observe
