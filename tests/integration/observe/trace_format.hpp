// A check of a trace file against the Trace Event Format (the JSON that chrome://tracing and
// Perfetto's UI import), written from the format's description: the file is a JSON array of
// events (its closing bracket may be missing) or an object with a "traceEvents" array; every event
// has a phase "ph" the format defines, integer "pid" and "tid", a numeric "ts" in microseconds
// (metadata events excepted); complete events ("X") a "dur" >= 0; instant events a scope "s" of
// g, p or t; counters numeric args; metadata events ("M") a known name and its argument. Complete
// events on one track must nest (a span that starts inside another ends inside it), or viewers
// draw them wrongly.
#pragma once

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace trace_format {

struct Checked {
  std::vector<std::string> problems;  // empty: the trace is valid
  nlohmann::json events = nlohmann::json::array();
  std::map<int64_t, std::string> groups;                      // pid -> process_name
  std::map<std::pair<int64_t, int64_t>, std::string> tracks;  // (pid, tid) -> thread_name
  bool closed = false;                                        // the array's bracket was there
};

inline Checked check(const std::filesystem::path& file) {
  Checked c;
  std::ifstream in(file);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto first = text.find_first_not_of(" \t\r\n"), last = text.find_last_not_of(" \t\r\n");
  const bool array_form = first != std::string::npos && text[first] == '[';
  c.closed = !array_form || text[last] == ']';
  if (!c.closed) {
    if (last != std::string::npos && text[last] == ',') text.resize(last);
    text += "]";
  }
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    c.problems.push_back(std::string("not JSON: ") + e.what());
    return c;
  }
  if (doc.is_object() && doc.contains("traceEvents")) doc = doc["traceEvents"];
  if (!doc.is_array()) {
    c.problems.push_back("neither an array of events nor an object with traceEvents");
    return c;
  }
  c.events = doc;
  const std::set<std::string> phases = {"B", "E", "X", "i", "I", "C", "b", "n", "e", "s", "t", "f",
                                        "P", "N", "O", "D", "M", "V", "v", "R", "c", "(", ")"};
  const std::set<std::string> metadata = {"process_name", "process_labels", "process_sort_index",
                                          "thread_name", "thread_sort_index"};
  std::map<std::pair<int64_t, int64_t>, std::vector<std::pair<double, double>>> spans;
  for (size_t i = 0; i < doc.size(); ++i) {
    const auto& e = doc[i];
    auto bad = [&](const std::string& why) {
      c.problems.push_back("event " + std::to_string(i) + ": " + why + ": " + e.dump());
    };
    if (!e.is_object()) {
      bad("not an object");
      continue;
    }
    if (!e.contains("ph") || !e["ph"].is_string() || !phases.count(e["ph"].get<std::string>())) {
      bad("no valid ph");
      continue;
    }
    const std::string ph = e["ph"];
    if (!e.contains("name") || !e["name"].is_string()) bad("no name");
    if (!e.contains("pid") || !e["pid"].is_number_integer() || !e.contains("tid") ||
        !e["tid"].is_number_integer()) {
      bad("pid and tid must be integers");
      continue;
    }
    if (e.contains("args") && !e["args"].is_object()) bad("args is not an object");
    const auto track = std::make_pair(e["pid"].get<int64_t>(), e["tid"].get<int64_t>());
    if (ph == "M") {
      const std::string name = e.value("name", "");
      if (!metadata.count(name))
        bad("unknown metadata event");
      else if (!e.contains("args"))
        bad("metadata without args");
      else if (name == "process_name")
        c.groups[track.first] = e["args"].value("name", "");
      else if (name == "thread_name")
        c.tracks[track] = e["args"].value("name", "");
      continue;
    }
    if (!e.contains("ts") || !e["ts"].is_number()) {
      bad("no numeric ts");
      continue;
    }
    if (ph == "X") {
      if (!e.contains("dur") || !e["dur"].is_number() || e["dur"].get<double>() < 0)
        bad("X without a dur >= 0");
      else
        spans[track].emplace_back(e["ts"].get<double>(), e["ts"].get<double>() + e["dur"].get<double>());
    }
    if ((ph == "i" || ph == "I") && e.contains("s") && !(e["s"] == "g" || e["s"] == "p" || e["s"] == "t"))
      bad("bad instant scope");
    if (ph == "C") {
      const nlohmann::json values = e.value("args", nlohmann::json::object());
      for (const auto& [k, v] : values.items())
        if (!v.is_number()) bad("counter value " + k + " is not a number");
    }
  }
  // Nesting: sorted by start (longer first at the same start), each span must end inside every
  // span still open when it starts. Times are compared to a nanosecond.
  for (auto& [track, list] : spans) {
    std::sort(list.begin(), list.end(), [](const auto& a, const auto& b) {
      return a.first < b.first || (a.first == b.first && a.second > b.second);
    });
    std::vector<double> open;
    for (const auto& [start, end] : list) {
      while (!open.empty() && open.back() <= start + 1e-3) open.pop_back();
      if (!open.empty() && end > open.back() + 1e-3)
        c.problems.push_back("track " + std::to_string(track.first) + "/" + std::to_string(track.second) +
                             ": a span at " + std::to_string(start) + " us overlaps the one it starts in");
      open.push_back(end);
    }
  }
  return c;
}

// The complete events named `name` (every track).
inline std::vector<nlohmann::json> spans_named(const Checked& c, const std::string& name) {
  std::vector<nlohmann::json> out;
  for (const auto& e : c.events)
    if (e.value("ph", "") == "X" && e.value("name", "") == name) out.push_back(e);
  return out;
}

}  // namespace trace_format
