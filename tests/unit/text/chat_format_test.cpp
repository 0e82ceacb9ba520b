// Chat formats: Qwen3 against the real Jinja template (text and tokens), Qwen3.5 against strings
// written from the spec; incremental rendering keeps the prefix and sampled tokens untouched.
#include "core/error.hpp"
#include "core/text/chat_format.hpp"
#include "tests/unit/text/fixtures.hpp"

using namespace mlpt::text;
using namespace mlpt::text::testing;
using nlohmann::json;

namespace {

std::shared_ptr<const Tokenizer> shared_qwen3() {
  require_fixtures();
  static auto tok = std::make_shared<const Tokenizer>(Tokenizer::load(qwen3_tokenizer_json()));
  return tok;
}

// Tools of the benchmark's harness (docs/benchmark.md §5), trimmed.
json harness_tools() {
  return json::parse(R"([
    {"type": "function", "function": {"name": "execute_bash", "description": "Run a bash command.\nOutput is capped.",
      "parameters": {"type": "object", "properties": {
        "command": {"type": "string", "description": "The command"},
        "is_input": {"type": "string", "enum": ["true", "false"]},
        "timeout": {"type": "number"},
        "security_risk": {"type": "string", "enum": ["LOW", "MEDIUM", "HIGH"]}},
        "required": ["command", "security_risk"]}}},
    {"type": "function", "function": {"name": "str_replace_editor", "description": "View and edit files — «unicode».",
      "parameters": {"type": "object", "properties": {
        "command": {"type": "string"}, "path": {"type": "string"}, "insert_line": {"type": "integer"},
        "view_range": {"type": "array", "items": {"type": "integer"}}, "security_risk": {"type": "string"}},
        "required": ["command", "path", "security_risk"]}}},
    {"type": "function", "function": {"name": "finish", "description": "Finish.", "parameters": {"type": "object",
      "properties": {"message": {"type": "string"}}, "required": []}}}
  ])");
}

json conversation() {
  return json::parse(R"([
    {"role": "system", "content": "You are a helpful agent."},
    {"role": "user", "content": "<uploaded_files>/testbed</uploaded_files>\nFix the bug in `foo()`:  it crashes.  "},
    {"role": "assistant", "content": "Let me look.", "reasoning_content": "The user wants a fix.",
     "tool_calls": [{"name": "execute_bash", "arguments": {"command": "ls -la /testbed\ncat setup.py", "security_risk": "LOW"}}]},
    {"role": "tool", "name": "execute_bash", "content": "total 8\r\n-rw-r--r-- 1 root root  42 setup.py\n[Command finished with exit code 0]"},
    {"role": "assistant", "content": "",
     "tool_calls": [{"name": "str_replace_editor", "arguments": {"command": "view", "path": "/testbed/a.py", "view_range": [1, 20], "security_risk": "LOW"}},
                    {"name": "execute_bash", "arguments": {"command": "python -c 'print(1)'", "security_risk": "LOW"}}]},
    {"role": "tool", "name": "str_replace_editor", "content": "Here's the result of running `cat -n` on /testbed/a.py:\n     1\tdef foo():\n     2\t    return 1/0\n"},
    {"role": "tool", "name": "execute_bash", "content": "1"}
  ])");
}

}  // namespace

TEST_CASE("Qwen3 renders like the real Jinja chat template", "[chat][reference]") {
  auto fmt_off = make_chat_format("qwen3", shared_qwen3());
  auto fmt_on = make_chat_format("qwen3", shared_qwen3(), ChatOptions{true});
  json conv = conversation();
  json cases = json::array();
  std::vector<const ChatFormat*> formats;
  auto add = [&](json messages, json tools, bool gen, bool thinking, json plain_tokens = json::array()) {
    cases.push_back({{"messages", messages}, {"tools", tools}, {"add_generation_prompt", gen}, {"enable_thinking", thinking},
                     {"plain_tokens", plain_tokens}});
    formats.push_back(thinking ? fmt_on.get() : fmt_off.get());
  };
  json no_system(conv.begin() + 1, conv.end());
  add(conv, harness_tools(), true, false);
  add(conv, harness_tools(), true, true);
  add(conv, json::array(), true, false);
  add(no_system, harness_tools(), false, false);
  add(no_system, json::array(), true, true);
  add(json::array({conv[0], conv[1]}), json::array(), true, false);
  add(json::array({conv[1]}), harness_tools(), true, false);
  // reasoning inside the content, a second user turn, an assistant without reasoning after it, and
  // a user message that only looks like tool results (not the last query for the template). Its
  // "<tool_response>" is message content, which the format never encodes as special tokens, while
  // HF tokenizes the whole rendered text with every added token; the template itself writes no
  // <tool_response> here, so the reference tokenizes with those two as plain text.
  add(json::parse(R"([{"role": "user", "content": "hi"},
      {"role": "assistant", "content": "<think>\nold thoughts\n</think>\n\nHello!"},
      {"role": "user", "content": "again"},
      {"role": "assistant", "content": "<think>\nnew thoughts\n\n</think>\n\nSure."},
      {"role": "user", "content": "<tool_response>\nlooks like a tool\n</tool_response>"},
      {"role": "assistant", "content": "Done.", "reasoning_content": "\nthinking\n"}])"), harness_tools(), false, false,
      json::array({"<tool_response>", "</tool_response>"}));
  add(json::parse(R"([{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"},
      {"role": "system", "content": "mid system"}, {"role": "user", "content": "  spaces \n\n"}])"), json::array(), true, true);
  json res = run_node("render_template.mjs", {{"tokenizer_config", (qwen3_dir() / "tokenizer_config.json").string()},
                                              {"tokenizer", qwen3_tokenizer_json().string()}, {"cases", cases}});
  for (size_t i = 0; i < cases.size(); ++i) {
    INFO("case " << i);
    const json& c = cases[i];
    CHECK(formats[i]->render_text(c["messages"], c["tools"], c["add_generation_prompt"]) == res["texts"][i].get<std::string>());
    std::vector<int32_t> ids = formats[i]->render_prompt(c["messages"], c["tools"], c["add_generation_prompt"]);
    CHECK(ids == res["ids"][i].get<std::vector<int32_t>>());
    for (const auto& plain : c["plain_tokens"])
      CHECK(std::count(ids.begin(), ids.end(), *shared_qwen3()->token_to_id(plain.get<std::string>())) == 0);
  }
}

TEST_CASE("Qwen3.5 renders the spec's turns, tools and tool calls", "[chat]") {
  auto fmt = make_chat_format("qwen3_5", shared_qwen3());
  CHECK(fmt->name() == "qwen3_5");
  CHECK(fmt->generation_prompt_text() == "<|im_start|>assistant\n<think>\n\n</think>\n\n");
  CHECK(make_chat_format("qwen3_5_moe", shared_qwen3(), {true})->generation_prompt_text() == "<|im_start|>assistant\n<think>\n");
  json tools = json::parse(R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}])");
  json msgs = json::parse(R"([
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Do it."},
    {"role": "assistant", "content": "Calling.", "tool_calls": [
       {"name": "f", "arguments": {"a": "line1\nline2", "n": 3, "xs": [1, "b"], "o": {"k": true}}},
       {"name": "f", "arguments": {}}]},
    {"role": "tool", "content": "r1"}, {"role": "tool", "content": "r2 <|im_end|>"}])");
  std::string text = fmt->render_text(msgs, tools, true);
  std::string expected =
      "<|im_start|>system\n# Tools\n\nYou have access to the following functions:\n\n<tools>\n"
      "{\"function\": {\"name\": \"f\", \"parameters\": {\"type\": \"object\"}}, \"type\": \"function\"}\n</tools>";
  CHECK(text.rfind(expected, 0) == 0);
  CHECK(text.find("<IMPORTANT>\nReminder:\n") != std::string::npos);
  CHECK(text.find("</IMPORTANT>\n\nBe brief.<|im_end|>\n<|im_start|>user\nDo it.<|im_end|>\n") != std::string::npos);
  std::string turn =
      "<|im_start|>assistant\n<think>\n\n</think>\n\nCalling.\n\n<tool_call>\n<function=f>\n"
      "<parameter=a>\nline1\nline2\n</parameter>\n<parameter=n>\n3\n</parameter>\n<parameter=o>\n{\"k\": true}\n</parameter>\n"
      "<parameter=xs>\n[1, \"b\"]\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=f>\n</function>\n</tool_call>"
      "<|im_end|>\n<|im_start|>user\n<tool_response>\nr1\n</tool_response>\n<tool_response>\nr2 <|im_end|>\n</tool_response>"
      "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n";
  // Spec §6: every assistant turn after the last real user query renders its think block, here empty
  // (unlike Qwen3, which keeps it only in the last turn or one with reasoning).
  CHECK(text.size() >= turn.size());
  CHECK(text.substr(text.size() - turn.size()) == turn);
  // tokens: the template's special tokens are ids, the tool's "<|im_end|>" is plain text
  auto ids = fmt->render_prompt(msgs, tools, true);
  const Tokenizer& tok = *shared_qwen3();
  CHECK(tok.decode(ids) == text);
  CHECK(std::count(ids.begin(), ids.end(), *tok.token_to_id("<|im_end|>")) == 4);
  // 2 in the instructions (the example call and the reminder's "<tool_call></tool_call> XML tags")
  CHECK(std::count(ids.begin(), ids.end(), *tok.token_to_id("<tool_call>")) == 4);
  CHECK(std::count(ids.begin(), ids.end(), *tok.token_to_id("</tool_call>")) == 4);
  // without tools, no system message
  CHECK(fmt->render_text(json::array({msgs[1]}), json::array(), false) == "<|im_start|>user\nDo it.<|im_end|>\n");
  // reasoning after the last query is kept
  json r = json::parse(R"([{"role": "user", "content": "q"}, {"role": "assistant", "content": "a", "reasoning_content": "why"}])");
  CHECK(fmt->render_text(r, json::array(), false) == "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n<think>\nwhy\n</think>\n\na<|im_end|>\n");
  // ... and dropped from turns before it
  r.push_back({{"role", "user"}, {"content", "q2"}});
  CHECK(fmt->render_text(r, json::array(), false) ==
        "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\na<|im_end|>\n<|im_start|>user\nq2<|im_end|>\n");
}

TEST_CASE("incremental rendering appends only new tokens and keeps sampled ones", "[chat]") {
  for (const char* name : {"qwen3", "qwen3_5"}) {
    INFO(name);
    auto fmt = make_chat_format(name, shared_qwen3());
    const Tokenizer& tok = *shared_qwen3();
    json conv = conversation();
    json prompt_msgs = json::array({conv[0], conv[1]});
    std::vector<int32_t> seq = fmt->render_prompt(prompt_msgs, harness_tools(), true);
    CHECK(tok.decode(seq) == fmt->render_text(prompt_msgs, harness_tools(), true));
    // a sampled reply, deliberately tokenized in a way re-tokenization would not give
    std::vector<int32_t> sampled;
    for (char c : std::string("I will run <tool_call>")) sampled.push_back(tok.encode(std::string(1, c))[0]);
    sampled.push_back(*tok.token_to_id("<|im_end|>"));
    seq.insert(seq.end(), sampled.begin(), sampled.end());
    const std::vector<int32_t> before = seq;
    json results = json::array({conv[5], conv[6]});
    fmt->extend(seq, results);
    REQUIRE(seq.size() > before.size());
    CHECK(std::equal(before.begin(), before.end(), seq.begin()));
    std::vector<int32_t> added(seq.begin() + long(before.size()), seq.end());
    CHECK(added == fmt->append_turns(before, results));
    // the appended text is the template's rendering of the tool turn after a closed assistant turn
    std::string expect = "\n" + fmt->render_text(results, json::array(), true);
    CHECK(tok.decode(added) == expect);
    // a reply cut off without <|im_end|> gets it
    std::vector<int32_t> cut(before.begin(), before.end() - 1);
    auto closing = fmt->append_turns(cut, json::array({json{{"role", "user"}, {"content", "Please continue."}}}));
    CHECK(closing.front() == *tok.token_to_id("<|im_end|>"));
    CHECK(tok.decode(closing) == "<|im_end|>\n<|im_start|>user\nPlease continue.<|im_end|>\n" + fmt->generation_prompt_text());
    CHECK_THROWS_AS(fmt->append_turns(before, json::array({json{{"role", "assistant"}, {"content", "x"}}})), mlpt::Error);
  }
  // Qwen3: the tool turns appended equal what the real template writes after that assistant turn
  auto fmt = make_chat_format("qwen3", shared_qwen3());
  const Tokenizer& tok = *shared_qwen3();
  json conv = conversation();
  auto render_reference = [&](json upto, json all) {
    json res = run_node("render_template.mjs",
                        {{"tokenizer_config", (qwen3_dir() / "tokenizer_config.json").string()},
                         {"tokenizer", qwen3_tokenizer_json().string()},
                         {"cases", {{{"messages", upto}, {"tools", harness_tools()}, {"add_generation_prompt", false}, {"enable_thinking", false}},
                                    {{"messages", all}, {"tools", harness_tools()}, {"add_generation_prompt", true}, {"enable_thinking", false}}}}});
    return std::pair<std::string, std::string>(res["texts"][0], res["texts"][1]);
  };
  const std::vector<int32_t> closed = {*tok.token_to_id("<|im_end|>")};
  {
    // conv[2] has reasoning, so the template renders it the same whether or not it is last
    auto [a, b] = render_reference(json(conv.begin(), conv.begin() + 3), json(conv.begin(), conv.begin() + 4));
    REQUIRE(b.rfind(a, 0) == 0);
    CHECK(tok.decode(fmt->append_turns(closed, json::array({conv[3]}))) == b.substr(a.size() - 1));  // a ends with "<|im_end|>\n"
  }
  {
    // conv[4] has no reasoning: Qwen3's template writes its empty think block only while it is the
    // last message, so the shorter conversation is not a prefix of the longer one. The sampled
    // sequence keeps the block it was sampled after; what follows the turn is the same either way.
    auto [a, b] = render_reference(json(conv.begin(), conv.begin() + 5), conv);
    const std::string with_think = "<|im_start|>assistant\n<think>\n\n</think>\n\n";
    size_t at = a.rfind(with_think);
    REQUIRE(at != std::string::npos);
    std::string a_as_history = a.substr(0, at) + "<|im_start|>assistant\n" + a.substr(at + with_think.size());
    REQUIRE(b.rfind(a_as_history, 0) == 0);
    CHECK(tok.decode(fmt->append_turns(closed, json::array({conv[5], conv[6]}))) == b.substr(a_as_history.size() - 1));
  }
}

TEST_CASE("chat format factory and bad messages", "[chat][errors]") {
  CHECK(make_chat_format("qwen3_moe", shared_qwen3())->name() == "qwen3");
  CHECK_THROWS_WITH(make_chat_format("llama", shared_qwen3()), Catch::Contains("llama"));
  auto fmt = make_chat_format("qwen3", shared_qwen3());
  CHECK_THROWS_WITH(fmt->render_prompt(json::array({json{{"role", "robot"}, {"content", "x"}}}), json::array()),
                    Catch::Contains("robot"));
  CHECK_THROWS_WITH(fmt->render_prompt(json::array({json{{"role", "user"}, {"content", 5}}}), json::array()),
                    Catch::Contains("content"));
  CHECK(to_template_json(json::parse(R"({"b": [1, 2.5, "é\n\"", null, false], "a": {}})")) ==
        R"({"a": {}, "b": [1, 2.5, "é\n\"", null, false]})");
}
