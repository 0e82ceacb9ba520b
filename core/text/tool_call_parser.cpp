#include "core/text/tool_call_parser.hpp"

namespace mlpt::text {
namespace {

using json = nlohmann::json;

const json* find_tool(const json& tools, const std::string& name) {
  for (const auto& t : tools) {
    const json& f = t.contains("function") ? t["function"] : t;
    if (f.value("name", std::string()) == name) return &f;
  }
  return nullptr;
}

std::string tool_names(const json& tools) {
  std::string out;
  for (const auto& t : tools) {
    const json& f = t.contains("function") ? t["function"] : t;
    out += (out.empty() ? "" : ", ") + f.value("name", std::string("?"));
  }
  return out;
}

// Converts `v` to `type` where the conversion is unambiguous; returns false when it is not possible.
bool convert(json& v, const std::string& type) {
  if (type.empty()) return true;
  if (type == "string") {
    if (v.is_string()) return true;
    if (v.is_number() || v.is_boolean()) return v = v.dump(), true;
    return false;
  }
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    json parsed = json::parse(s, nullptr, false);
    if (parsed.is_discarded()) {
      if (type == "boolean" && (s == "True" || s == "False")) return v = (s == "True"), true;
      return false;
    }
    v = parsed;
  }
  if (type == "integer") {
    if (v.is_number_integer()) return true;
    if (v.is_number_float() && v.get<double>() == static_cast<double>(static_cast<int64_t>(v.get<double>())))
      return v = static_cast<int64_t>(v.get<double>()), true;
    return false;
  }
  if (type == "number") return v.is_number();
  if (type == "boolean") return v.is_boolean();
  if (type == "array") return v.is_array();
  if (type == "object") return v.is_object();
  return true;
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r\n"), e = s.find_last_not_of(" \t\r\n");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

// Splits `text` into the content before the first <tool_call> and the bodies of the blocks.
// Unclosed blocks and text after the last block become errors.
void split_blocks(const std::string& text, ParsedReply& r, std::vector<std::string>& bodies) {
  static const std::string open = "<tool_call>", close = "</tool_call>";
  size_t first = text.find(open);
  r.content = first == std::string::npos ? text : text.substr(0, first);
  while (r.content.size() && (r.content.back() == '\n' || r.content.back() == ' ')) r.content.pop_back();
  size_t at = first;
  while (at != std::string::npos) {
    size_t end = text.find(close, at + open.size());
    if (end == std::string::npos) {
      r.errors.push_back("a <tool_call> block is not closed with </tool_call>");
      return;
    }
    bodies.push_back(text.substr(at + open.size(), end - at - open.size()));
    size_t next = text.find(open, end + close.size());
    std::string between = text.substr(end + close.size(), next == std::string::npos ? std::string::npos : next - end - close.size());
    if (!trim(between).empty())
      r.errors.push_back("text after </tool_call> is not allowed: \"" + trim(between).substr(0, 80) + "\"");
    at = next;
  }
}

}  // namespace

json ParsedReply::to_json() const {
  return json{{"content", content}, {"tool_calls", tool_calls}, {"parse_errors", errors}};
}

std::string validate_call(json& call, const json& tools) {
  const std::string name = call.value("name", std::string());
  const json* tool = find_tool(tools, name);
  if (!tool) return "unknown function \"" + name + "\" (available: " + tool_names(tools) + ")";
  json& args = call["arguments"];
  if (args.is_null()) args = json::object();
  if (!args.is_object()) return "the arguments of " + name + " must be an object";
  const json params = tool->value("parameters", json::object());
  const json props = params.value("properties", json::object());
  for (const auto& req : params.value("required", json::array()))
    if (req.is_string() && !args.contains(req.get<std::string>()))
      return "missing required parameter \"" + req.get<std::string>() + "\" for " + name;
  for (auto it = args.begin(); it != args.end(); ++it) {
    if (!props.contains(it.key())) return "unknown parameter \"" + it.key() + "\" for " + name;
    const std::string type = props[it.key()].value("type", std::string());
    if (!convert(it.value(), type))
      return "parameter \"" + it.key() + "\" of " + name + " must be of type " + type + ", got " + it.value().dump().substr(0, 80);
  }
  return "";
}

ParsedReply parse_hermes_tool_calls(const std::string& text, const json& tools) {
  ParsedReply r;
  std::vector<std::string> bodies;
  split_blocks(text, r, bodies);
  for (const auto& body : bodies) {
    json call = json::parse(trim(body), nullptr, false);
    if (call.is_discarded() || !call.is_object()) {
      r.errors.push_back("the tool call is not a JSON object: " + trim(body).substr(0, 120));
      continue;
    }
    if (!call.contains("name") || !call["name"].is_string()) {
      r.errors.push_back("the tool call has no string \"name\"");
      continue;
    }
    if (call.contains("arguments") && call["arguments"].is_string()) {
      json parsed = json::parse(call["arguments"].get<std::string>(), nullptr, false);
      if (!parsed.is_discarded()) call["arguments"] = parsed;
    }
    json clean = {{"name", call["name"]}, {"arguments", call.value("arguments", json::object())}};
    std::string error = validate_call(clean, tools);
    if (error.empty()) r.tool_calls.push_back(std::move(clean));
    else r.errors.push_back(error);
  }
  return r;
}

ParsedReply parse_xml_tool_calls(const std::string& text, const json& tools) {
  ParsedReply r;
  std::vector<std::string> bodies;
  split_blocks(text, r, bodies);
  for (const auto& body : bodies) {
    size_t f = body.find("<function=");
    size_t gt = f == std::string::npos ? f : body.find('>', f);
    if (gt == std::string::npos) {
      r.errors.push_back("the tool call has no <function=NAME> tag");
      continue;
    }
    json call = {{"name", trim(body.substr(f + 10, gt - f - 10))}, {"arguments", json::object()}};
    size_t end_fn = body.find("</function>", gt);
    if (end_fn == std::string::npos) {
      r.errors.push_back("<function=" + call["name"].get<std::string>() + "> is not closed with </function>");
      continue;
    }
    std::string inner = body.substr(gt + 1, end_fn - gt - 1);
    bool ok = true;
    for (size_t p = inner.find("<parameter="); p != std::string::npos; p = inner.find("<parameter=", p)) {
      size_t pgt = inner.find('>', p);
      size_t pend = pgt == std::string::npos ? pgt : inner.find("</parameter>", pgt);
      if (pend == std::string::npos) {
        r.errors.push_back("a <parameter=…> of " + call["name"].get<std::string>() + " is not closed with </parameter>");
        ok = false;
        break;
      }
      std::string key = trim(inner.substr(p + 11, pgt - p - 11));
      std::string value = inner.substr(pgt + 1, pend - pgt - 1);
      // The format puts the value on its own lines: one leading and one trailing newline are syntax.
      if (!value.empty() && value.front() == '\n') value.erase(0, 1);
      if (!value.empty() && value.back() == '\n') value.pop_back();
      call["arguments"][key] = value;
      p = pend + 12;
    }
    if (!ok) continue;
    std::string error = validate_call(call, tools);
    if (error.empty()) r.tool_calls.push_back(std::move(call));
    else r.errors.push_back(error);
  }
  return r;
}

}  // namespace mlpt::text
