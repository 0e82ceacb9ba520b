// Tool calls out of model text, for both Qwen formats, with argument values converted by the tool's
// JSON schema. Garbled output never throws: every problem becomes a message in `errors` that names
// what is wrong, for the harness to show the model as an observation.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace mlpt::text {

struct ParsedReply {
  std::string content;               // text before the first tool call
  nlohmann::json tool_calls = nlohmann::json::array();  // [{"name", "arguments"}]
  std::vector<std::string> errors;   // one per call that could not be used
  nlohmann::json to_json() const;
};

// Hermes style (Qwen3): <tool_call>\n{"name": …, "arguments": {…}}\n</tool_call>
ParsedReply parse_hermes_tool_calls(const std::string& text, const nlohmann::json& tools);
// XML style (Qwen3.5): <tool_call>\n<function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>\n</function>\n</tool_call>
ParsedReply parse_xml_tool_calls(const std::string& text, const nlohmann::json& tools);

// Checks a call against the tools and converts argument values to the schema's types (a string
// "5" for an integer, a JSON array written as text, numbers or booleans where a string is wanted).
// Returns an error message, or "" when the call is usable (then `call` is converted in place).
std::string validate_call(nlohmann::json& call, const nlohmann::json& tools);

}  // namespace mlpt::text
