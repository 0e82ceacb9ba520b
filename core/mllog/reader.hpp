// Reads a result log back into records. As the reference parser does, a line counts as an MLLOG
// line when it contains ":::MLLOG " anywhere (launchers prefix lines with a rank, "0: :::MLLOG ...");
// the JSON is what follows the last occurrence. Every other line is ignored: the reference
// interleaves its own output with the log.
//
// A malformed MLLOG line is not fatal to reading: it becomes a ParseError (1-based line number and
// what is wrong), so the checker can report it among the violations and still check the rest.
#pragma once

#include <cstdint>
#include <filesystem>
#include <istream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/mllog/logger.hpp"

namespace mlpt::mllog {

struct Record {
  int64_t line = 0;  // 1-based line in the file
  int64_t time_ms = 0;
  EventType event_type = EventType::point_in_time;
  std::string key;
  nlohmann::json value;     // any JSON (null for interval events)
  nlohmann::json metadata;  // always an object
};

struct ParseError {
  int64_t line = 0;
  std::string message;  // e.g. "invalid JSON after :::MLLOG: ... at byte 17"
};

struct ParsedLog {
  std::string source;  // file name or "<string>", for messages
  std::vector<Record> records;
  std::vector<ParseError> errors;
  int64_t total_lines = 0;
};

// Parses one MLLOG line's text (with or without prefix). Throws mlpt::Error with the problem.
Record parse_line(const std::string& text, int64_t line_number);

ParsedLog parse_log(std::istream& in, std::string source = "<string>");
ParsedLog parse_log_text(const std::string& text);
// Throws mlpt::Error (MLPT_NOT_FOUND) when the file cannot be read.
ParsedLog parse_log_file(const std::filesystem::path& path);

}  // namespace mlpt::mllog
