// Tool-call parsing for both Qwen formats: well-formed calls, schema conversion, garbled output
// as structured errors (never exceptions), and a randomized fuzz run.
#include <catch2/catch.hpp>

#include <chrono>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/text/chat_format.hpp"
#include "core/text/tool_call_parser.hpp"
#include "core/text/unicode.hpp"
#include "tests/unit/text/fixtures.hpp"

using namespace mlpt::text;
using nlohmann::json;

namespace {

// The benchmark harness's tools (docs/benchmark.md §5), trimmed, plus one with every schema type.
const json& tools() {
  static const json t = json::parse(R"([
    {"type": "function", "function": {"name": "execute_bash", "parameters": {"type": "object", "properties": {
      "command": {"type": "string"}, "is_input": {"type": "string", "enum": ["true", "false"]},
      "timeout": {"type": "number"}, "security_risk": {"type": "string", "enum": ["LOW", "MEDIUM", "HIGH"]}},
      "required": ["command", "security_risk"]}}},
    {"type": "function", "function": {"name": "str_replace_editor", "parameters": {"type": "object", "properties": {
      "command": {"type": "string"}, "path": {"type": "string"}, "insert_line": {"type": "integer"},
      "view_range": {"type": "array", "items": {"type": "integer"}}},
      "required": ["command", "path"]}}},
    {"type": "function", "function": {"name": "finish", "parameters": {"type": "object",
      "properties": {"message": {"type": "string"}}, "required": []}}},
    {"type": "function", "function": {"name": "typed", "parameters": {"type": "object", "properties": {
      "i": {"type": "integer"}, "n": {"type": "number"}, "b": {"type": "boolean"}, "a": {"type": "array"},
      "o": {"type": "object"}, "s": {"type": "string"}, "maybe": {"type": ["integer", "null"]},
      "either": {"type": ["string", "integer"]}, "any_of": {"anyOf": [{"type": "boolean"}, {"type": "array"}]},
      "level": {"type": "integer", "enum": [1, 2, 3]}, "untyped": {}}}}}
  ])");
  return t;
}

std::string xml_call(const std::string& name, const std::vector<std::pair<std::string, std::string>>& params) {
  std::string s = "<tool_call>\n<function=" + name + ">\n";
  for (const auto& [k, v] : params) s += "<parameter=" + k + ">\n" + v + "\n</parameter>\n";
  return s + "</function>\n</tool_call>";
}
std::string hermes_call(const std::string& name, const json& args) {
  return "<tool_call>\n{\"name\": \"" + name + "\", \"arguments\": " + args.dump() + "}\n</tool_call>";
}

// The one parse error of a reply.
std::string only_error(const ParsedReply& r) {
  INFO("errors: " << json(r.parse_errors).dump());
  REQUIRE(r.parse_errors.size() == 1);
  return r.parse_errors[0];
}

json convert(const std::string& raw, const json& schema) {
  std::string error;
  json v = convert_parameter(raw, schema, error);
  INFO("raw " << raw << " schema " << schema.dump() << " error " << error);
  REQUIRE(error.empty());
  return v;
}
std::string conversion_error(const std::string& raw, const json& schema) {
  std::string error;
  json v = convert_parameter(raw, schema, error);
  CHECK(v.is_null());
  return error;
}

}  // namespace

TEST_CASE("XML tool calls: one and several, content before them", "[tool_calls]") {
  auto r = parse_xml_tool_calls("I'll look.\n\n" + xml_call("execute_bash", {{"command", "ls -la\ncat a.py"}, {"security_risk", "LOW"}}),
                                tools());
  CHECK(r.parse_errors.empty());
  CHECK(r.content == "I'll look.");
  REQUIRE(r.tool_calls.size() == 1);
  CHECK(r.tool_calls[0] == json({{"name", "execute_bash"}, {"arguments", {{"command", "ls -la\ncat a.py"}, {"security_risk", "LOW"}}}}));

  // several calls; a value keeps its inner newlines and spaces, only the one newline each side goes
  std::string two = xml_call("str_replace_editor", {{"command", "view"}, {"path", "/testbed/a.py"}, {"view_range", "[1, 20]"}}) +
                    "\n" + xml_call("str_replace_editor", {{"command", "insert"}, {"path", "/a"}, {"insert_line", "7"}}) + "\n" +
                    xml_call("finish", {{"message", "\n  done  \n"}});
  r = parse_xml_tool_calls(two + "<|im_end|>", tools());
  CHECK(r.parse_errors.empty());
  CHECK(r.content.empty());
  REQUIRE(r.tool_calls.size() == 3);
  CHECK(r.tool_calls[0]["arguments"] == json({{"command", "view"}, {"path", "/testbed/a.py"}, {"view_range", {1, 20}}}));
  CHECK(r.tool_calls[1]["arguments"]["insert_line"] == 7);
  CHECK(r.tool_calls[2]["arguments"]["message"] == "\n  done  \n");

  // the reasoning of a thinking reply is not content
  r = parse_xml_tool_calls("<think>\nmaybe <tool_call> here?\n</think>\n\nNow.\n\n" + xml_call("finish", {}), tools());
  CHECK(r.parse_errors.empty());
  CHECK(r.content == "Now.");
  CHECK(r.tool_calls.size() == 1);

  // a plain answer: no calls, no errors
  r = parse_xml_tool_calls("The bug is in foo().", tools());
  CHECK(r.tool_calls.empty());
  CHECK(r.parse_errors.empty());
  CHECK(r.content == "The bug is in foo().");
  CHECK(r.to_json() == json({{"content", "The bug is in foo()."}, {"tool_calls", json::array()}, {"parse_errors", json::array()}}));
}

TEST_CASE("Hermes tool calls: one and several, arguments as object or string", "[tool_calls]") {
  auto r = parse_hermes_tool_calls("Let me see.\n" + hermes_call("execute_bash", {{"command", "ls"}, {"security_risk", "LOW"}}), tools());
  CHECK(r.parse_errors.empty());
  CHECK(r.content == "Let me see.");
  REQUIRE(r.tool_calls.size() == 1);
  CHECK(r.tool_calls[0] == json({{"name", "execute_bash"}, {"arguments", {{"command", "ls"}, {"security_risk", "LOW"}}}}));

  r = parse_hermes_tool_calls(hermes_call("str_replace_editor", {{"command", "view"}, {"path", "/a"}, {"view_range", {1, 5}}}) + "\n" +
                                  "<tool_call>\n{\"name\": \"finish\", \"arguments\": \"{\\\"message\\\": \\\"ok\\\"}\"}\n</tool_call>" +
                                  "\n" + hermes_call("finish", json::object()) + "<|im_end|>",
                              tools());
  CHECK(r.parse_errors.empty());
  REQUIRE(r.tool_calls.size() == 3);
  CHECK(r.tool_calls[0]["arguments"]["view_range"] == json({1, 5}));
  CHECK(r.tool_calls[1]["arguments"] == json({{"message", "ok"}}));  // arguments given as a JSON string
  CHECK(r.tool_calls[2]["arguments"] == json::object());

  // "arguments" may be left out when nothing is required
  r = parse_hermes_tool_calls("<tool_call>\n{\"name\": \"finish\"}\n</tool_call>", tools());
  CHECK(r.parse_errors.empty());
  CHECK(r.tool_calls[0]["arguments"] == json::object());
}

TEST_CASE("Hermes values reach the harness as the JSON gives them", "[tool_calls][schema]") {
  // vLLM's Hermes parser converts nothing: a string "5" for an integer stays "5".
  const json args = {{"i", "5"}, {"n", 2.5}, {"b", "true"}, {"s", 42}, {"either", "x"}};
  auto r = parse_hermes_tool_calls(hermes_call("typed", args), tools());
  CHECK(r.parse_errors.empty());
  REQUIRE(r.tool_calls.size() == 1);
  CHECK(r.tool_calls[0]["arguments"] == args);
  // Neither an enum slip nor a type slip drops the call: OpenHands runs it (and only warns about
  // an odd security_risk).
  r = parse_hermes_tool_calls(hermes_call("execute_bash", {{"command", "ls"}, {"security_risk", "low"}}), tools());
  CHECK(r.parse_errors.empty());
  REQUIRE(r.tool_calls.size() == 1);
  CHECK(r.tool_calls[0]["arguments"]["security_risk"] == "low");
  r = parse_hermes_tool_calls(hermes_call("typed", {{"i", 2.5}}), tools());
  CHECK(r.parse_errors.empty());
  CHECK(r.tool_calls[0]["arguments"]["i"] == 2.5);
}

TEST_CASE("calls OpenHands runs are not rejected by the parser", "[tool_calls][lenient]") {
  // Only the format is the parser's: a missing required parameter (security_risk, thought,
  // message), an unknown tool or an untyped value reach the harness, which answers as OpenHands.
  for (bool xml : {true, false}) {
    INFO((xml ? "xml" : "hermes"));
    auto parse = [&](const std::string& name, const json& args) {
      std::vector<std::pair<std::string, std::string>> params;
      for (auto& [k, v] : args.items())
        params.emplace_back(k, v.is_string() ? v.get<std::string>() : v.dump());
      return xml ? parse_xml_tool_calls(xml_call(name, params), tools())
                 : parse_hermes_tool_calls(hermes_call(name, args), tools());
    };
    auto r = parse("execute_bash", {{"command", "ls"}});  // no security_risk
    CHECK(r.parse_errors.empty());
    CHECK(r.tool_calls.size() == 1);
    r = parse("str_replace_editor", {{"command", "view"}});  // no path: the harness says so
    CHECK(r.parse_errors.empty());
    CHECK(r.tool_calls.size() == 1);
    r = parse("rm_rf", {{"path", "/"}});  // not a tool: "Tool rm_rf is not registered" comes from the harness
    CHECK(r.parse_errors.empty());
    REQUIRE(r.tool_calls.size() == 1);
    CHECK(r.tool_calls[0]["name"] == "rm_rf");
    CHECK(r.tool_calls[0]["arguments"]["path"] == "/");
  }
  // XML values that are not of their schema's type stay text, as vLLM's Qwen3-Coder parser
  // degrades them ("is not an integer ..., degenerating to string"); enums are not checked.
  auto r = parse_xml_tool_calls(
      xml_call("str_replace_editor",
               {{"command", "view"}, {"path", "/a"}, {"insert_line", "five"}, {"view_range", "[1, 2"}}),
      tools());
  CHECK(r.parse_errors.empty());
  REQUIRE(r.tool_calls.size() == 1);
  CHECK(r.tool_calls[0]["arguments"]["insert_line"] == "five");
  CHECK(r.tool_calls[0]["arguments"]["view_range"] == "[1, 2");
  r = parse_xml_tool_calls(
      xml_call("execute_bash", {{"command", "ls"}, {"security_risk", "low"}, {"timeout", "30"}}), tools());
  CHECK(r.parse_errors.empty());
  CHECK(r.tool_calls[0]["arguments"]["security_risk"] == "low");
  CHECK(r.tool_calls[0]["arguments"]["timeout"] == 30);
  // convert_parameter_leniently is convert_parameter without the enum, and the text on failure.
  CHECK(convert_parameter_leniently("low", {{"type", "string"}, {"enum", {"LOW"}}}) == "low");
  CHECK(convert_parameter_leniently("4", {{"type", "integer"}, {"enum", {1, 2, 3}}}) == 4);
  CHECK(convert_parameter_leniently("4.5", {{"type", "integer"}}) == "4.5");
  CHECK(convert_parameter_leniently("nan", {{"type", "number"}}) == "nan");
  CHECK(convert_parameter_leniently("[1]", {{"type", "array"}}) == json({1}));
}

TEST_CASE("parameter values convert with the tool's schema", "[tool_calls][schema]") {
  const json integer = {{"type", "integer"}}, number = {{"type", "number"}}, boolean = {{"type", "boolean"}};
  CHECK(convert("42", integer) == 42);
  CHECK(convert(" -7\n", integer) == -7);
  CHECK(convert("42", integer).is_number_integer());
  CHECK(convert("9007199254740993", integer) == 9007199254740993LL);  // exact, not through a double
  CHECK(convert("2.5", number) == 2.5);
  CHECK(convert("3", number).is_number_integer());
  CHECK(convert("-1e3", number) == -1000.0);
  CHECK(convert("true", boolean) == true);
  CHECK(convert("False", boolean) == false);
  CHECK(convert("[1, \"b\", {\"c\": null}]", {{"type", "array"}}) == json::parse(R"([1, "b", {"c": null}])"));
  CHECK(convert("{\"k\": [true]}", {{"type", "object"}}) == json::parse(R"({"k": [true]})"));
  CHECK(convert("null", {{"type", "null"}}).is_null());

  // a string stays the text as written, however much it looks like something else
  const json string = {{"type", "string"}};
  CHECK(convert("42", string) == "42");
  CHECK(convert("true", string) == "true");
  CHECK(convert("null", string) == "null");
  CHECK(convert("[1, 2]", string) == "[1, 2]");
  CHECK(convert("  padded \n", string) == "  padded \n");
  CHECK(convert("", string) == "");
  // no type, or one this parser does not know: the text
  CHECK(convert("42", json::object()) == "42");
  CHECK(convert("42", {{"type", "custom"}}) == "42");

  // enum: the value must be one of the listed ones, after conversion
  const json risk = {{"type", "string"}, {"enum", {"LOW", "MEDIUM", "HIGH"}}};
  CHECK(convert("LOW", risk) == "LOW");
  CHECK_THAT(conversion_error("low", risk), Catch::Contains("is not one of") && Catch::Contains("LOW"));
  CHECK(convert("true", {{"type", "string"}, {"enum", {"true", "false"}}}) == "true");  // a string "true", not a boolean
  CHECK(convert("2", {{"type", "integer"}, {"enum", {1, 2, 3}}}) == 2);
  CHECK_THAT(conversion_error("4", {{"type", "integer"}, {"enum", {1, 2, 3}}}), Catch::Contains("is not one of [1,2,3]"));
  CHECK(convert("2", {{"enum", {1, 2, "x"}}}) == 2);  // no type: the JSON value the enum holds
  CHECK(convert("x", {{"enum", {1, 2, "x"}}}) == "x");
  CHECK_THAT(conversion_error("y", {{"enum", {1, 2, "x"}}}), Catch::Contains("is not one of"));

  // union types: specific types first, string as the fallback, whatever order they are listed in
  const json int_or_null = {{"type", {"integer", "null"}}};
  CHECK(convert("5", int_or_null) == 5);
  CHECK(convert("null", int_or_null).is_null());
  CHECK_THAT(conversion_error("five", int_or_null), Catch::Contains("matches none of its types (integer, null)"));
  const json string_or_int = {{"type", {"string", "integer"}}};
  CHECK(convert("5", string_or_int) == 5);
  CHECK(convert("five", string_or_int) == "five");
  const json any_of = {{"anyOf", {{{"type", "boolean"}}, {{"type", "array"}}}}};
  CHECK(convert("true", any_of) == true);
  CHECK(convert("[1]", any_of) == json({1}));
  CHECK_THAT(conversion_error("maybe", any_of), Catch::Contains("boolean, array"));

  // what does not convert says why
  CHECK_THAT(conversion_error("4.5", integer), Catch::Contains("is not an integer"));
  CHECK_THAT(conversion_error("", integer), Catch::Contains("is not an integer"));
  CHECK_THAT(conversion_error("99999999999999999999", integer), Catch::Contains("is not an integer"));
  CHECK_THAT(conversion_error("0x10", integer), Catch::Contains("is not an integer"));
  for (const char* not_json_number : {"nan", "inf", "-Infinity", "0x1p3", "1e999", "1,5", "five"}) {
    INFO(not_json_number);
    CHECK_THAT(conversion_error(not_json_number, number), Catch::Contains("is not a number"));
  }
  CHECK_THAT(conversion_error("yes", boolean), Catch::Contains("is not a boolean"));
  CHECK_THAT(conversion_error("[1, 2", {{"type", "array"}}), Catch::Contains("is not valid JSON"));
  CHECK_THAT(conversion_error("{\"a\": 1}", {{"type", "array"}}), Catch::Contains("is JSON but not an array"));
  CHECK_THAT(conversion_error(std::string(100000, '['), {{"type", "array"}}), Catch::Contains("nested too deeply"));
  CHECK_THAT(conversion_error("nil", {{"type", "null"}}), Catch::Contains("is not null"));
}

TEST_CASE("XML calls convert every parameter with its schema", "[tool_calls][schema]") {
  auto r = parse_xml_tool_calls(xml_call("typed", {{"i", "12"}, {"n", "0.25"}, {"b", "false"}, {"a", "[\"x\", 2]"},
                                                   {"o", "{\"k\": {\"j\": 1}}"}, {"s", "007"}, {"maybe", "null"},
                                                   {"either", "x1"}, {"any_of", "true"}, {"level", "3"}, {"untyped", "[1]"},
                                                   {"not_in_schema", "kept"}}),
                                tools());
  CHECK(r.parse_errors.empty());
  REQUIRE(r.tool_calls.size() == 1);
  CHECK(r.tool_calls[0]["arguments"] == json::parse(R"({"i": 12, "n": 0.25, "b": false, "a": ["x", 2], "o": {"k": {"j": 1}},
      "s": "007", "maybe": null, "either": "x1", "any_of": true, "level": 3, "untyped": "[1]", "not_in_schema": "kept"})"));
  // the harness's string enums: "true" stays a string where the schema says string
  r = parse_xml_tool_calls(xml_call("execute_bash", {{"command", "C-c"}, {"is_input", "true"}, {"security_risk", "HIGH"}}), tools());
  CHECK(r.parse_errors.empty());
  CHECK(r.tool_calls[0]["arguments"]["is_input"] == "true");
}

TEST_CASE("garbled calls become structured errors naming the problem, never exceptions", "[tool_calls][errors]") {
  const std::string view = xml_call("str_replace_editor", {{"command", "view"}, {"path", "/a"}});
  struct Case {
    std::string text;
    bool xml;
    std::vector<std::string> names;  // what the error must say
  };
  const std::vector<Case> cases = {
      // unclosed tags
      {"<tool_call>\n<function=finish>\n</function>\n", true, {"tool call 1", "not closed by </tool_call>"}},
      {"<tool_call>\n<function=finish>\n</tool_call>", true, {"finish", "not closed by </function>"}},
      {"<tool_call>\n<function=finish>\n<parameter=message>\nhi\n</function>\n</tool_call>",
       true,
       {"finish", "<parameter=message> is not closed by </parameter>"}},
      {"<tool_call>\n<function=finish\n</function>\n</tool_call>", true, {"malformed <function=NAME>"}},
      {"<tool_call>\n<function=finish>\n<parameter=message\nhi\n</parameter>\n</function>\n</tool_call>",
       true,
       {"malformed <parameter=KEY>"}},
      // a </parameter> lost between two parameters: not silently one long value
      {"<tool_call>\n<function=str_replace_editor>\n<parameter=command>\nview\n<parameter=path>\n/a\n</"
       "parameter>\n</function>\n</tool_call>",
       true,
       {"<parameter=command> is not closed by </parameter>"}},
      {"<tool_call>\n{\"name\": \"finish\", \"arguments\": {}}\n",
       false,
       {"tool call 1", "not closed by </tool_call>"}},
      // invalid JSON
      {"<tool_call>\n{\"name\": \"finish\", \"arguments\": {\"message\": \"x\"\n</tool_call>",
       false,
       {"not a valid JSON object"}},
      {"<tool_call>\n[\"finish\"]\n</tool_call>", false, {"not a valid JSON object"}},
      {"<tool_call>\n{\"arguments\": {}}\n</tool_call>", false, {"no string \"name\""}},
      {"<tool_call>\n{\"name\": \"finish\", \"arguments\": \"{not json\"}\n</tool_call>",
       false,
       {"finish", "\"arguments\" is not a JSON object"}},
      {"<tool_call>\n{\"name\": \"finish\", \"arguments\": [1]}\n</tool_call>",
       false,
       {"\"arguments\" is not a JSON object"}},
      // text after the call
      {view + "\nI ran it.", true, {"text after the last tool call", "I ran it."}},
      {hermes_call("finish", json::object()) + " trailing",
       false,
       {"text after the last tool call", "trailing"}},
      {"<tool_call>\n<function=finish>\n</function>\nextra\n</tool_call>",
       true,
       {"text after </function>", "extra"}},
      // nested and duplicated tags
      {"<tool_call>\n<function=finish>\n<function=finish>\n</function>\n</function>\n</tool_call>",
       true,
       {"expected <parameter=KEY>", "<function=finish>"}},
      {view + "\n</tool_call>", true, {"text after the last tool call", "</tool_call>"}},
      {"<tool_call>\n<function=str_replace_editor>\n<parameter=path>\n/a\n</parameter>\n<parameter=path>\n/"
       "b\n</parameter>\n"
       "<parameter=command>\nview\n</parameter>\n</function>\n</tool_call>",
       true,
       {"parameter 'path' is given twice"}},
      {"<tool_call>\n" + hermes_call("finish", json::object()),
       false,
       {"tool call 1", "not closed by </tool_call>"}},
      // empty calls
      {"<tool_call>\n\n</tool_call>", true, {"expected <function=NAME>"}},
      {"<tool_call></tool_call>", false, {"not a valid JSON object"}},
      // a call without its wrapper
      {"<function=finish>\n</function>", true, {"must be nested within <tool_call></tool_call>"}},
  };
  for (const auto& c : cases) {
    INFO((c.xml ? "xml: " : "hermes: ") << c.text);
    ParsedReply r;
    REQUIRE_NOTHROW(r = c.xml ? parse_xml_tool_calls(c.text, tools()) : parse_hermes_tool_calls(c.text, tools()));
    REQUIRE_FALSE(r.parse_errors.empty());
    std::string all;
    for (const auto& e : r.parse_errors) {
      CHECK(e.find('\n') == std::string::npos);  // one line each
      all += e + " | ";
    }
    for (const auto& name : c.names) CHECK_THAT(all, Catch::Contains(name));
    REQUIRE_NOTHROW(r.to_json().dump());  // what the harness gets is valid JSON
  }

  // A bad call does not take the good ones with it.
  auto r = parse_xml_tool_calls("<tool_call>\n<function=finish\n</function>\n</tool_call>\n" + view, tools());
  CHECK(r.parse_errors.size() == 1);
  REQUIRE(r.tool_calls.size() == 1);
  CHECK(r.tool_calls[0]["name"] == "str_replace_editor");
  // An unclosed call followed by a good one: the error, then the call.
  r = parse_xml_tool_calls("<tool_call>\n<function=finish>\n" + view, tools());
  CHECK_THAT(only_error(r), Catch::Contains("tool call 1") && Catch::Contains("not closed"));
  CHECK(r.tool_calls.size() == 1);
  // Text after a good call is an error, the call stands.
  r = parse_hermes_tool_calls(hermes_call("finish", json::object()) + "\nDone!", tools());
  CHECK(r.tool_calls.size() == 1);
  CHECK(r.parse_errors.size() == 1);

  // Empty input: an empty reply, not an error (the harness nudges the model to continue).
  for (bool xml : {true, false}) {
    ParsedReply e = xml ? parse_xml_tool_calls("", tools()) : parse_hermes_tool_calls("", tools());
    CHECK(e.content.empty());
    CHECK(e.tool_calls.empty());
    CHECK(e.parse_errors.empty());
    e = xml ? parse_xml_tool_calls("<|im_end|>", json()) : parse_hermes_tool_calls("<|im_end|>", json());
    CHECK(e.content.empty());
  }
  // No tools at all: the call still reaches the harness, its values as text.
  r = parse_xml_tool_calls(view, json());
  CHECK(r.parse_errors.empty());
  CHECK(r.tool_calls[0]["arguments"] == json({{"command", "view"}, {"path", "/a"}}));
  // Ill-formed UTF-8 and giant names stay valid JSON (a giant name is the harness's to refuse).
  r = parse_hermes_tool_calls("<tool_call>\n{\"name\": \"" + std::string(5000, 'x') + "\u00e9\"}\n</tool_call>", tools());
  REQUIRE(r.tool_calls.size() == 1);
  CHECK(r.tool_calls[0]["name"].get<std::string>().size() == 5002);
  CHECK_NOTHROW(r.to_json().dump());
  // An error naming a giant tag stays bounded.
  r = parse_xml_tool_calls("<tool_call>\n<function=" + std::string(5000, 'x') + ">\n", tools());
  CHECK(only_error(r).size() < 400);
  r = parse_xml_tool_calls("ok \xff\xfe <tool_call>\n<function=f\xc3>\n</function>\n</tool_call>", tools());
  CHECK(r.content == "ok \xEF\xBF\xBD\xEF\xBF\xBD");
  CHECK_NOTHROW(r.to_json().dump());
}

TEST_CASE("ChatFormat::parse_reply uses each format's tool-call syntax", "[tool_calls][chat]") {
  testing::require_fixtures();
  static const auto tok = std::make_shared<const Tokenizer>(Tokenizer::load(testing::qwen3_tokenizer_json()));
  auto qwen3 = make_chat_format("qwen3", tok);
  auto qwen35 = make_chat_format("qwen3_5", tok);
  const std::string xml = "Running.\n\n" + xml_call("execute_bash", {{"command", "ls"}, {"security_risk", "LOW"}}) + "<|im_end|>";
  const std::string hermes = "Running.\n" + hermes_call("execute_bash", {{"command", "ls"}, {"security_risk", "LOW"}}) + "<|im_end|>";
  const json expected_call = {{"name", "execute_bash"}, {"arguments", {{"command", "ls"}, {"security_risk", "LOW"}}}};

  ParsedReply r = qwen35->parse_reply(xml, tools());
  CHECK(r.parse_errors.empty());
  CHECK(r.content == "Running.");
  CHECK(r.tool_calls == json::array({expected_call}));
  r = qwen3->parse_reply(hermes, tools());
  CHECK(r.parse_errors.empty());
  CHECK(r.content == "Running.");
  CHECK(r.tool_calls == json::array({expected_call}));
  // the other format's syntax is an error, not a call
  CHECK_THAT(only_error(qwen3->parse_reply(xml, tools())), Catch::Contains("not a valid JSON object"));
  CHECK_THAT(only_error(qwen35->parse_reply(hermes, tools())), Catch::Contains("expected <function=NAME>"));

  // What a format renders parses back to the same call (the round trip of a history turn).
  for (const ChatFormat* fmt : {qwen3.get(), qwen35.get()}) {
    INFO(fmt->name());
    json call = {{"name", "str_replace_editor"}, {"arguments", {{"command", "view"}, {"path", "/a b.py"}, {"view_range", {3, 9}}}}};
    json msgs = json::array({json{{"role", "user"}, {"content", "go"}},
                             json{{"role", "assistant"}, {"content", "Looking."}, {"tool_calls", {call}}}});
    std::string text = fmt->render_text(msgs, tools(), false);
    std::string turn = text.substr(text.rfind("<|im_start|>assistant\n") + std::string("<|im_start|>assistant\n").size());
    REQUIRE(turn.back() == '\n');  // the template's newline after <|im_end|>, never sampled
    turn.pop_back();
    r = fmt->parse_reply(turn, tools());
    CHECK(r.parse_errors.empty());
    CHECK(r.content == "Looking.");
    CHECK(r.tool_calls == json::array({call}));
  }
}

TEST_CASE("fuzz: mutated and spliced calls never throw or hang, and calls found are well-formed",
          "[tool_calls][fuzz]") {
  std::mt19937 rng(20240611);
  auto pick = [&](size_t n) { return size_t(rng() % n); };
  const std::vector<std::string> valid = {
      xml_call("execute_bash", {{"command", "ls -la\ncd /testbed && python -m pytest -x"}, {"security_risk", "LOW"}}),
      xml_call("str_replace_editor", {{"command", "view"}, {"path", "/a.py"}, {"view_range", "[1, 20]"}, {"insert_line", "3"}}),
      xml_call("typed", {{"i", "1"}, {"n", "2.5"}, {"b", "true"}, {"a", "[1,[2]]"}, {"o", "{\"k\":\"v\"}"}, {"maybe", "null"}}),
      xml_call("finish", {{"message", "done \u00e9\u00e8 \xf0\x9f\x98\x80"}}),
      hermes_call("execute_bash", {{"command", "echo '{}' | jq ."}, {"security_risk", "MEDIUM"}}),
      hermes_call("str_replace_editor", {{"command", "create"}, {"path", "/x"}, {"view_range", {1, 2}}}),
      hermes_call("typed", {{"i", 3}, {"o", {{"deep", {1, {{"x", nullptr}}}}}}}),
      hermes_call("finish", json::object()),
  };
  const std::vector<std::string> tokens = {"<tool_call>", "</tool_call>", "<function=", "</function>", "<parameter=",
                                           "</parameter>", "<think>", "</think>", "<|im_end|>", "{", "}", "[", "]", "\"",
                                           ":", ",", "\\", "\n", ">", "<", "name", "arguments", "finish", "typed", "null",
                                           "\xff", "\xc3", "\xe2\x82", "\xf0\x9f\x98", std::string(1, '\0')};
  std::set<std::string> known;
  size_t known_found = 0;
  for (const auto& t : tools()) known.insert(t["function"]["name"].get<std::string>());

  auto mutate = [&](std::string s) {
    for (int m = 1 + int(pick(6)); m > 0; --m) {
      size_t at = s.empty() ? 0 : pick(s.size() + 1);
      switch (pick(7)) {
        case 0:  // delete a span
          if (!s.empty()) s.erase(at == s.size() ? at - 1 : at, 1 + pick(12));
          break;
        case 1:  // insert a structural token
          s.insert(at, tokens[pick(tokens.size())]);
          break;
        case 2:  // random bytes
          for (int k = 1 + int(pick(8)); k > 0; --k) s.insert(s.begin() + long(std::min(at, s.size())), char(rng()));
          break;
        case 3:  // splice in part of another valid call
          {
            const std::string& o = valid[pick(valid.size())];
            size_t b = pick(o.size()), e = b + pick(o.size() - b + 1);
            s.insert(at, o.substr(b, e - b));
          }
          break;
        case 4:  // duplicate a span
          if (!s.empty()) {
            size_t b = pick(s.size());
            s.insert(at, s.substr(b, 1 + pick(40)));
          }
          break;
        case 5:  // truncate
          s.resize(at);
          break;
        default:  // flip a byte
          if (!s.empty()) s[pick(s.size())] ^= char(1 << pick(8));
      }
    }
    return s;
  };

  const auto start = std::chrono::steady_clock::now();
  size_t calls_found = 0, errors_found = 0;
  for (int i = 0; i < 6000; ++i) {
    std::string input;
    switch (i % 4) {
      case 0:  // one valid call, mutated
        input = mutate(valid[pick(valid.size())]);
        break;
      case 1:  // several calls with prose, mutated
        input = "Some text.\n\n";
        for (int k = 1 + int(pick(4)); k > 0; --k) input += valid[pick(valid.size())] + "\n";
        input = mutate(input);
        break;
      case 2:  // random token soup
        for (int k = int(pick(40)); k > 0; --k) input += tokens[pick(tokens.size())];
        break;
      default:  // random bytes
        for (int k = int(pick(200)); k > 0; --k) input += char(rng());
    }
    INFO("input " << i << ": " << json(unicode::to_valid_utf8(input)).dump());
    for (bool xml : {true, false}) {
      ParsedReply r;
      REQUIRE_NOTHROW(r = xml ? parse_xml_tool_calls(input, tools()) : parse_hermes_tool_calls(input, tools()));
      REQUIRE(r.tool_calls.is_array());
      for (const auto& call : r.tool_calls) {
        REQUIRE(call["name"].is_string());
        REQUIRE(!call["name"].get<std::string>().empty());
        known_found += known.count(call["name"].get<std::string>());
        REQUIRE(call["arguments"].is_object());
      }
      for (const auto& e : r.parse_errors) REQUIRE(e.find('\n') == std::string::npos);
      REQUIRE_NOTHROW(r.to_json().dump());
      calls_found += r.tool_calls.size();
      errors_found += r.parse_errors.size();
    }
  }
  // Both outcomes occur, so the mutations reach past the first check.
  CHECK(calls_found > 100);
  CHECK(errors_found > 1000);
  CHECK(known_found > 100);  // and most calls found name the tools they were made from

  // Large adversarial replies stay linear: many unclosed opens, deep nesting, a huge parameter.
  const std::vector<std::string> big = {
      [] { std::string s; for (int i = 0; i < 100000; ++i) s += "<tool_call>"; return s; }(),
      [] { std::string s; for (int i = 0; i < 50000; ++i) s += "<tool_call>\n<function=finish>\n<parameter=message>\nx"; return s; }(),
      "<tool_call>\n{\"name\": \"typed\", \"arguments\": {\"o\": " + std::string(200000, '[') + "}}\n</tool_call>",
      xml_call("typed", {{"a", std::string(200000, '[')}}),
      // valid but deep JSON: refused, since dumping it later would recurse 200000 levels
      "<tool_call>\n{\"name\": \"typed\", \"arguments\": {\"a\": " + std::string(200000, '[') + std::string(200000, ']') +
          "}}\n</tool_call>",
      xml_call("typed", {{"a", std::string(200000, '[') + std::string(200000, ']')}}),
      xml_call("finish", {{"message", std::string(2000000, 'y')}}),
  };
  for (const auto& s : big)
    for (bool xml : {true, false}) {
      ParsedReply r;
      REQUIRE_NOTHROW(r = xml ? parse_xml_tool_calls(s, tools()) : parse_hermes_tool_calls(s, tools()));
      REQUIRE_NOTHROW(r.to_json().dump());
    }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(seconds < 60);  // a hang or quadratic blow-up shows here (this takes well under a second)
}
