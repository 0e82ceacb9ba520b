// Parsing model replies into tool calls, for both Qwen formats. Never throws on model output:
// anything garbled becomes a message in parse_errors, which the harness can show the model.
// Only the format is judged here, as the reference's server-side parsers (vLLM) do: a call to a
// tool that does not exist, a missing parameter, a value outside an enum or of another type all
// reach the harness as the model wrote them, and the harness answers them as OpenHands does.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace mlpt::text {

struct ParsedReply {
  std::string content;                                     // text before the first tool call
  nlohmann::json tool_calls = nlohmann::json::array();     // [{"name", "arguments": {...}}], valid calls only
  std::vector<std::string> parse_errors;                   // one line each, naming the call
  // {"content", "tool_calls", "parse_errors"}: what the core passes to the harness.
  nlohmann::json to_json() const;
};

// Qwen3.5 / Qwen3-Coder XML calls:
//   <tool_call>\n<function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>\n</function>\n</tool_call>
// Values are typed with the tool's JSON schema (`tools`: OpenAI function format) where they can
// be; one that is not of its schema's type stays the text (convert_parameter_leniently).
ParsedReply parse_xml_tool_calls(std::string_view text, const nlohmann::json& tools);
// Qwen3 Hermes calls: <tool_call>\n{"name": NAME, "arguments": {...}}\n</tool_call>; the arguments
// as the JSON gives them.
ParsedReply parse_hermes_tool_calls(std::string_view text, const nlohmann::json& tools);

// A parameter's raw text as the JSON value its schema asks for ("integer", "number", "boolean",
// "object", "array", "string", "null", or a list of those). On failure returns null and sets `error`.
nlohmann::json convert_parameter(const std::string& raw, const nlohmann::json& schema, std::string& error);
// As vLLM's Qwen3-Coder parser types an XML value: by the schema's types, the enum not checked,
// and the text itself when it is of none of them (the reference warns and passes the string on).
nlohmann::json convert_parameter_leniently(const std::string& raw, const nlohmann::json& schema);

}  // namespace mlpt::text
