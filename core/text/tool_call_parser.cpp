#include "core/text/tool_call_parser.hpp"

#include <cerrno>
#include <cstdlib>

#include "core/text/unicode.hpp"

namespace mlpt::text {
namespace {

using nlohmann::json;

constexpr std::string_view kOpen = "<tool_call>", kClose = "</tool_call>";

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }
std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}
std::string_view rtrim(std::string_view s) {
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}
// A short, printable excerpt of model text for an error message.
std::string excerpt(std::string_view s) {
  std::string e(s.substr(0, 60));
  e = unicode::to_valid_utf8(e);
  return json(e).dump() + (s.size() > 60 ? "..." : "");
}

const json* find_tool(const json& tools, const std::string& name) {
  if (!tools.is_array()) return nullptr;
  for (const auto& t : tools) {
    const json& f = t.contains("function") ? t["function"] : t;
    if (f.is_object() && f.value("name", "") == name) return &f;
  }
  return nullptr;
}

std::string tool_names(const json& tools) {
  std::string names;
  if (tools.is_array())
    for (const auto& t : tools) {
      const json& f = t.contains("function") ? t["function"] : t;
      if (f.is_object() && f.contains("name") && f["name"].is_string())
        names += (names.empty() ? "" : ", ") + f["name"].get<std::string>();
    }
  return names.empty() ? "none" : names;
}

// Checks the function exists and its required parameters are present; returns false with errors.
bool validate(const json& tools, const std::string& name, const json& args, const std::string& who,
              std::vector<std::string>& errors, const json** tool_out) {
  const json* tool = find_tool(tools, name);
  *tool_out = tool;
  if (!tool) {
    errors.push_back(who + ": unknown function '" + name + "' (available: " + tool_names(tools) + ")");
    return false;
  }
  bool ok = true;
  const json params = tool->value("parameters", json::object());
  if (params.is_object() && params.contains("required") && params["required"].is_array())
    for (const auto& r : params["required"])
      if (r.is_string() && !args.contains(r.get<std::string>())) {
        errors.push_back(who + " (" + name + "): missing required parameter '" + r.get<std::string>() + "'");
        ok = false;
      }
  return ok;
}

const json* property_schema(const json* tool, const std::string& key) {
  if (!tool || !tool->contains("parameters")) return nullptr;
  const json& p = (*tool)["parameters"];
  if (!p.is_object() || !p.contains("properties") || !p["properties"].is_object()) return nullptr;
  auto it = p["properties"].find(key);
  return it == p["properties"].end() ? nullptr : &*it;
}

// Splits the reply into the content and the region of tool calls; the common front of both parsers.
struct Front {
  std::string_view content, rest;
  bool has_calls = false;
};
Front front(std::string_view text) {
  for (std::string_view eos : {"<|im_end|>", "<|endoftext|>"})
    if (text.size() >= eos.size() && text.substr(text.size() - eos.size()) == eos) text.remove_suffix(eos.size());
  if (size_t t = text.rfind("</think>"); t != std::string_view::npos) {
    text.remove_prefix(t + 8);
    while (!text.empty() && text.front() == '\n') text.remove_prefix(1);
  }
  Front f;
  size_t at = text.find(kOpen);
  if (at == std::string_view::npos) {
    f.content = text;
    return f;
  }
  f.content = rtrim(text.substr(0, at));
  f.rest = text.substr(at);
  f.has_calls = true;
  return f;
}

// Walks <tool_call>BODY</tool_call> blocks; `body` parses one and returns false if it was bad.
template <class Body>
ParsedReply walk(std::string_view raw_text, Body body) {
  ParsedReply r;
  const std::string text = unicode::to_valid_utf8(raw_text);  // results must be valid JSON strings
  Front f = front(text);
  r.content = std::string(f.content);
  std::string_view rest = f.rest;
  for (int n = 1; f.has_calls; ++n) {
    std::string who = "tool call " + std::to_string(n);
    rest.remove_prefix(kOpen.size());
    size_t close = rest.find(kClose);
    size_t next_open = rest.find(kOpen);
    if (close == std::string_view::npos || (next_open != std::string_view::npos && next_open < close)) {
      r.parse_errors.push_back(who + ": <tool_call> is not closed by </tool_call>");
      if (next_open == std::string_view::npos) break;
      rest = rest.substr(next_open);
      continue;
    }
    body(trim(rest.substr(0, close)), who, r);
    rest = rest.substr(close + kClose.size());
    std::string_view after = trim(rest);
    if (after.empty()) break;
    if (after.substr(0, kOpen.size()) != kOpen) {
      r.parse_errors.push_back("text after the last tool call is not allowed: " + excerpt(after));
      break;
    }
    rest = after;
  }
  return r;
}

}  // namespace

json ParsedReply::to_json() const {
  return {{"content", content}, {"tool_calls", tool_calls}, {"parse_errors", parse_errors}};
}

json convert_parameter(const std::string& raw, const json& schema, std::string& error) {
  std::vector<std::string> types;
  if (schema.is_object() && schema.contains("type")) {
    if (schema["type"].is_string()) types.push_back(schema["type"]);
    else if (schema["type"].is_array())
      for (const auto& t : schema["type"])
        if (t.is_string()) types.push_back(t);
  }
  if (types.empty()) return raw;  // no type: keep the text
  std::string t = trim(raw).empty() ? "" : std::string(trim(raw));
  std::string last_error;
  for (const std::string& type : types) {
    if (type == "string") return raw;
    if (type == "null" && t == "null") return nullptr;
    if (type == "integer") {
      errno = 0;
      char* end = nullptr;
      long long v = std::strtoll(t.c_str(), &end, 10);
      if (!t.empty() && end && *end == '\0' && errno == 0) return v;
      last_error = "is not an integer";
    } else if (type == "number") {
      errno = 0;
      char* end = nullptr;
      long long iv = std::strtoll(t.c_str(), &end, 10);
      if (!t.empty() && *end == '\0' && errno == 0) return iv;
      double v = std::strtod(t.c_str(), &end);
      if (!t.empty() && end && *end == '\0' && errno == 0) return v;
      last_error = "is not a number";
    } else if (type == "boolean") {
      std::string l = t;
      for (auto& c : l) c = char(std::tolower(static_cast<unsigned char>(c)));
      if (l == "true") return true;
      if (l == "false") return false;
      last_error = "is not a boolean (true or false)";
    } else if (type == "object" || type == "array") {
      json v = json::parse(t, nullptr, false);
      if (!v.is_discarded() && (type == "object" ? v.is_object() : v.is_array())) return v;
      last_error = v.is_discarded() ? "is not valid JSON" : "is JSON but not an " + type;
    } else if (type != "null") {
      return raw;  // a type this parser does not convert
    }
  }
  error = last_error.empty() ? "does not match its schema type" : last_error;
  return nullptr;
}

ParsedReply parse_xml_tool_calls(std::string_view text, const json& tools) {
  return walk(text, [&](std::string_view body, const std::string& who, ParsedReply& r) {
    constexpr std::string_view kFn = "<function=", kFnEnd = "</function>", kP = "<parameter=", kPEnd = "</parameter>";
    if (body.substr(0, kFn.size()) != kFn) {
      r.parse_errors.push_back(who + ": expected <function=NAME> but found " + excerpt(body));
      return;
    }
    size_t gt = body.find('>');
    std::string name(trim(body.substr(kFn.size(), gt == std::string_view::npos ? 0 : gt - kFn.size())));
    if (gt == std::string_view::npos || name.empty() || name.find('\n') != std::string::npos) {
      r.parse_errors.push_back(who + ": malformed <function=NAME> tag: " + excerpt(body));
      return;
    }
    std::string_view inner = body.substr(gt + 1);
    size_t fn_end = inner.rfind(kFnEnd);
    if (fn_end == std::string_view::npos) {
      r.parse_errors.push_back(who + " (" + name + "): <function=" + name + "> is not closed by </function>");
      return;
    }
    if (!trim(inner.substr(fn_end + kFnEnd.size())).empty()) {
      r.parse_errors.push_back(who + " (" + name + "): text after </function>: " + excerpt(trim(inner.substr(fn_end + kFnEnd.size()))));
      return;
    }
    inner = inner.substr(0, fn_end);
    const json* tool = find_tool(tools, name);
    json args = json::object();
    bool ok = true;
    for (std::string_view p = trim(inner); !p.empty(); p = trim(p)) {
      if (p.substr(0, kP.size()) != kP) {
        r.parse_errors.push_back(who + " (" + name + "): expected <parameter=KEY> but found " + excerpt(p));
        ok = false;
        break;
      }
      size_t kgt = p.find('>');
      std::string key(kgt == std::string_view::npos ? std::string_view() : trim(p.substr(kP.size(), kgt - kP.size())));
      if (kgt == std::string_view::npos || key.empty() || key.find('\n') != std::string::npos) {
        r.parse_errors.push_back(who + " (" + name + "): malformed <parameter=KEY> tag: " + excerpt(p));
        ok = false;
        break;
      }
      size_t vend = p.find(kPEnd, kgt + 1);
      if (vend == std::string_view::npos) {
        r.parse_errors.push_back(who + " (" + name + "): <parameter=" + key + "> is not closed by </parameter>");
        ok = false;
        break;
      }
      std::string_view value = p.substr(kgt + 1, vend - kgt - 1);
      if (!value.empty() && value.front() == '\n') value.remove_prefix(1);
      if (!value.empty() && value.back() == '\n') value.remove_suffix(1);
      p.remove_prefix(vend + kPEnd.size());
      if (args.contains(key)) {
        r.parse_errors.push_back(who + " (" + name + "): parameter '" + key + "' is given twice");
        ok = false;
        continue;
      }
      std::string raw(value), error;
      const json* schema = property_schema(tool, key);
      json v = schema ? convert_parameter(raw, *schema, error) : json(raw);
      if (!error.empty()) {
        r.parse_errors.push_back(who + " (" + name + "): parameter '" + key + "' " + error + ": " + excerpt(raw));
        ok = false;
        continue;
      }
      args[key] = std::move(v);
    }
    const json* t;
    if (validate(tools, name, args, who, r.parse_errors, &t) && ok)
      r.tool_calls.push_back({{"name", name}, {"arguments", std::move(args)}});
  });
}

ParsedReply parse_hermes_tool_calls(std::string_view text, const json& tools) {
  return walk(text, [&](std::string_view body, const std::string& who, ParsedReply& r) {
    json call = json::parse(body, nullptr, false);
    if (call.is_discarded() || !call.is_object()) {
      r.parse_errors.push_back(who + ": not a valid JSON object: " + excerpt(body));
      return;
    }
    if (!call.contains("name") || !call["name"].is_string()) {
      r.parse_errors.push_back(who + ": the JSON has no string \"name\"");
      return;
    }
    std::string name = call["name"];
    json args = call.value("arguments", json::object());
    if (args.is_string()) args = json::parse(args.get<std::string>(), nullptr, false);
    if (args.is_discarded() || !args.is_object()) {
      r.parse_errors.push_back(who + " (" + name + "): \"arguments\" is not a JSON object");
      return;
    }
    const json* t;
    if (validate(tools, name, args, who, r.parse_errors, &t))
      r.tool_calls.push_back({{"name", name}, {"arguments", std::move(args)}});
  });
}

}  // namespace mlpt::text
