#include "core/text/tool_call_parser.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
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

// A name or key from model text as it appears in an error: one line, bounded even when the model
// wrote a page, and valid UTF-8 where the cut splits a character.
std::string shown(std::string_view name) {
  std::string s;
  for (char c : name.substr(0, 60)) {
    if (static_cast<unsigned char>(c) >= 0x20) {
      s += c;
      continue;
    }
    std::string escaped = json(std::string(1, c)).dump();  // "\n" as JSON writes it, in quotes
    s += escaped.substr(1, escaped.size() - 2);
  }
  return unicode::to_valid_utf8(s) + (name.size() > 60 ? "..." : "");
}

// Deeper JSON than any tool argument needs is refused: nested values are later dumped and
// rendered recursively, and a reply of a million '[' must not overflow the stack there.
constexpr int kMaxJsonDepth = 256;
json parse_json(std::string_view text, bool& too_deep) {
  too_deep = false;
  json v = json::parse(
      text,
      [&](int depth, json::parse_event_t, json&) {
        if (depth > kMaxJsonDepth) too_deep = true;
        return !too_deep;
      },
      false);
  if (too_deep) return json(json::value_t::discarded);
  return v;
}

const json* find_tool(const json& tools, const std::string& name) {
  if (!tools.is_array()) return nullptr;
  for (const auto& t : tools) {
    const json& f = t.contains("function") ? t["function"] : t;
    if (f.is_object() && f.value("name", "") == name) return &f;
  }
  return nullptr;
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
    // The close is looked for only up to the next open, so a reply of many unclosed calls stays linear.
    size_t next_open = rest.find(kOpen);
    size_t close = rest.substr(0, next_open).find(kClose);
    if (close == std::string_view::npos) {
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

namespace {

// One schema type; true with `out` set when the trimmed text `t` is a value of it.
bool convert_as(const std::string& type, const std::string& raw, const std::string& t, json& out, std::string& why) {
  if (type == "string") return out = raw, true;
  if (type == "null") {
    if (t == "null") return out = nullptr, true;
    why = "is not null";
  } else if (type == "integer") {
    errno = 0;
    char* end = nullptr;
    long long v = std::strtoll(t.c_str(), &end, 10);
    if (!t.empty() && *end == '\0' && errno == 0) return out = v, true;
    why = "is not an integer";
  } else if (type == "number") {
    // Decimal notation only: strtod would also take "inf", "nan" and hex floats, none of them JSON.
    bool decimal = !t.empty() && t.find_first_not_of("0123456789+-.eE") == std::string::npos;
    errno = 0;
    char* end = nullptr;
    long long iv = std::strtoll(t.c_str(), &end, 10);
    if (decimal && *end == '\0' && errno == 0) return out = iv, true;
    double v = std::strtod(t.c_str(), &end);
    if (decimal && *end == '\0' && std::isfinite(v)) return out = v, true;
    why = "is not a number";
  } else if (type == "boolean") {
    std::string l = t;
    for (auto& c : l) c = char(std::tolower(static_cast<unsigned char>(c)));
    if (l == "true") return out = true, true;
    if (l == "false") return out = false, true;
    why = "is not a boolean (true or false)";
  } else if (type == "object" || type == "array") {
    bool too_deep = false;
    json v = parse_json(t, too_deep);
    if (!v.is_discarded() && (type == "object" ? v.is_object() : v.is_array())) return out = std::move(v), true;
    why = too_deep ? "is JSON nested too deeply" : v.is_discarded() ? "is not valid JSON" : "is JSON but not an " + type;
  } else {
    return out = raw, true;  // a type this parser does not convert: the text as it is
  }
  return false;
}

void add_types(const json& type, std::vector<std::string>& types) {
  auto add = [&](const json& t) {
    if (t.is_string() && std::find(types.begin(), types.end(), t.get<std::string>()) == types.end())
      types.push_back(t.get<std::string>());
  };
  if (type.is_array())
    for (const auto& t : type) add(t);
  else
    add(type);
}

}  // namespace

json convert_parameter(const std::string& raw, const json& schema, std::string& error) {
  // The types the schema allows: "type" (one or a list), else those of its anyOf / oneOf branches.
  std::vector<std::string> types;
  if (schema.is_object()) {
    if (schema.contains("type")) add_types(schema["type"], types);
    for (const char* branches : {"anyOf", "oneOf"})
      if (types.empty() && schema.contains(branches) && schema[branches].is_array())
        for (const auto& b : schema[branches])
          if (b.is_object() && b.contains("type")) add_types(b["type"], types);
  }
  const json* allowed = schema.is_object() && schema.contains("enum") && schema["enum"].is_array() ? &schema["enum"] : nullptr;
  auto in_enum = [&](const json& v) { return !allowed || std::find(allowed->begin(), allowed->end(), v) != allowed->end(); };
  const std::string t(trim(raw));
  if (types.empty()) {  // no type: the text, or the JSON value it spells if only that is in the enum
    if (in_enum(raw)) return raw;
    bool too_deep = false;
    json v = parse_json(t, too_deep);
    if (!v.is_discarded() && in_enum(v)) return v;
    error = "is not one of " + allowed->dump();
    return nullptr;
  }
  // Strings (and types not converted) match any text, so they are tried last: with
  // ["integer", "string"], "5" is 5 and "five" is "five".
  std::stable_partition(types.begin(), types.end(), [](const std::string& type) {
    return type == "null" || type == "integer" || type == "number" || type == "boolean" || type == "object" ||
           type == "array";
  });
  std::string why;
  bool converted_any = false;
  for (const std::string& type : types) {
    json v;
    if (!convert_as(type, raw, t, v, why)) continue;
    converted_any = true;
    if (in_enum(v)) return v;
  }
  if (converted_any) error = "is not one of " + allowed->dump();
  else if (types.size() == 1) error = why;
  else {
    std::string names;
    for (const auto& type : types) names += (names.empty() ? "" : ", ") + type;
    error = "matches none of its types (" + names + ")";
  }
  return nullptr;
}

json convert_parameter_leniently(const std::string& raw, const json& schema) {
  json types_only = schema;
  if (types_only.is_object()) types_only.erase("enum");
  std::string error;
  json v = convert_parameter(raw, types_only, error);
  return error.empty() ? v : json(raw);
}

ParsedReply parse_xml_tool_calls(std::string_view text, const json& tools) {
  ParsedReply reply = walk(text, [&](std::string_view body, const std::string& who, ParsedReply& r) {
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
      r.parse_errors.push_back(who + " (" + shown(name) + "): <function=" + shown(name) + "> is not closed by </function>");
      return;
    }
    if (!trim(inner.substr(fn_end + kFnEnd.size())).empty()) {
      r.parse_errors.push_back(who + " (" + shown(name) + "): text after </function>: " + excerpt(trim(inner.substr(fn_end + kFnEnd.size()))));
      return;
    }
    inner = inner.substr(0, fn_end);
    const json* tool = find_tool(tools, name);
    json args = json::object();
    bool ok = true;
    for (std::string_view p = trim(inner); !p.empty(); p = trim(p)) {
      if (p.substr(0, kP.size()) != kP) {
        r.parse_errors.push_back(who + " (" + shown(name) + "): expected <parameter=KEY> but found " + excerpt(p));
        ok = false;
        break;
      }
      size_t kgt = p.find('>');
      std::string key(kgt == std::string_view::npos ? std::string_view() : trim(p.substr(kP.size(), kgt - kP.size())));
      if (kgt == std::string_view::npos || key.empty() || key.find('\n') != std::string::npos) {
        r.parse_errors.push_back(who + " (" + shown(name) + "): malformed <parameter=KEY> tag: " + excerpt(p));
        ok = false;
        break;
      }
      size_t vend = p.find(kPEnd, kgt + 1);
      // A value running into the next <parameter= lost its </parameter>; taking it whole would
      // silently swallow the next parameter.
      if (vend != std::string_view::npos && p.substr(kgt + 1, vend - kgt - 1).find(kP) != std::string_view::npos)
        vend = std::string_view::npos;
      if (vend == std::string_view::npos) {
        r.parse_errors.push_back(who + " (" + shown(name) + "): <parameter=" + shown(key) + "> is not closed by </parameter>");
        ok = false;
        break;
      }
      std::string_view value = p.substr(kgt + 1, vend - kgt - 1);
      if (!value.empty() && value.front() == '\n') value.remove_prefix(1);
      if (!value.empty() && value.back() == '\n') value.remove_suffix(1);
      p.remove_prefix(vend + kPEnd.size());
      if (args.contains(key)) {
        r.parse_errors.push_back(who + " (" + shown(name) + "): parameter '" + shown(key) + "' is given twice");
        ok = false;
        continue;
      }
      const json* schema = property_schema(tool, key);
      args[key] =
          schema ? convert_parameter_leniently(std::string(value), *schema) : json(std::string(value));
    }
    if (ok) r.tool_calls.push_back({{"name", name}, {"arguments", std::move(args)}});
  });
  // The commonest slip of these models: a <function=...> block without its <tool_call> wrapper.
  // Said so, rather than taken for a plain answer.
  if (reply.tool_calls.empty() && reply.parse_errors.empty() && reply.content.find("<function=") != std::string::npos &&
      reply.content.find("</function>") != std::string::npos)
    reply.parse_errors.push_back("tool call 1: a <function=...></function> block must be nested within <tool_call></tool_call>");
  return reply;
}

ParsedReply parse_hermes_tool_calls(std::string_view text, const json& tools) {
  return walk(text, [&](std::string_view body, const std::string& who, ParsedReply& r) {
    bool too_deep = false;
    json call = parse_json(body, too_deep);
    if (call.is_discarded() || !call.is_object()) {
      r.parse_errors.push_back(who + (too_deep ? ": JSON nested too deeply: " : ": not a valid JSON object: ") + excerpt(body));
      return;
    }
    if (!call.contains("name") || !call["name"].is_string()) {
      r.parse_errors.push_back(who + ": the JSON has no string \"name\"");
      return;
    }
    std::string name = call["name"];
    json args = call.value("arguments", json::object());
    if (args.is_string()) args = parse_json(args.get<std::string>(), too_deep);
    if (args.is_discarded() || !args.is_object()) {
      r.parse_errors.push_back(who + " (" + shown(name) + "): \"arguments\" is not a JSON object");
      return;
    }
    // The values as the model wrote them: JSON already has types (vLLM's Hermes parser converts
    // nothing either), and the harness judges names and arguments.
    r.tool_calls.push_back({{"name", name}, {"arguments", std::move(args)}});
  });
}

}  // namespace mlpt::text
