#include "core/text/chat_format.hpp"

#include "core/error.hpp"
#include "core/text/tool_call_parser.hpp"

namespace mlpt::text {
namespace {

using json = nlohmann::json;

// Builds a rendering as text and as tokens at once. Glue goes through special() (an added token);
// everything else through text(), which is encoded without special tokens: content can never turn
// into control tokens. Consecutive text() runs are encoded together, as HF encodes the text between
// two special tokens, so the tokens equal those of encoding the rendered string with specials.
class Renderer {
 public:
  Renderer(const Tokenizer& tok, bool want_tokens) : tok_(tok), want_tokens_(want_tokens) {}
  Renderer& special(const std::string& token) {
    flush();
    text_ += token;
    if (want_tokens_) {
      auto id = tok_.token_to_id(token);
      if (!id) throw Error(MLPT_INVALID_ARGUMENT, "the tokenizer has no special token " + token);
      ids_.push_back(*id);
    }
    return *this;
  }
  Renderer& text(const std::string& s) {
    pending_ += s;
    text_ += s;
    return *this;
  }
  std::vector<int32_t> tokens() {
    flush();
    return std::move(ids_);
  }
  const std::string& rendered() const { return text_; }

 private:
  void flush() {
    if (want_tokens_ && !pending_.empty()) tok_.encode_into(pending_, false, ids_);
    pending_.clear();
  }
  const Tokenizer& tok_;
  bool want_tokens_;
  std::string text_, pending_;
  std::vector<int32_t> ids_;
};

std::string content_of(const json& m) {
  if (!m.contains("content") || m["content"].is_null()) return "";
  return m["content"].is_string() ? m["content"].get<std::string>() : m["content"].dump();
}

// What both Qwen formats share: turns, tool results merged into one user turn, the generation
// prompt with thinking disabled. The formats differ in the tools block and the tool-call syntax.
class QwenFormat : public ChatFormat {
 public:
  explicit QwenFormat(const Tokenizer& tok) : tok_(tok) {
    for (const char* t : {"<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"})
      if (!tok.token_to_id(t)) throw Error(MLPT_INVALID_ARGUMENT, std::string("chat format: the tokenizer has no special token ") + t);
    im_end_ = *tok.token_to_id("<|im_end|>");
  }

  std::string render_text(const json& messages, const json& tools, bool add_generation_prompt) const override {
    Renderer r(tok_, false);
    render(r, messages, tools, add_generation_prompt);
    return r.rendered();
  }
  std::vector<int32_t> render_prompt(const json& messages, const json& tools) const override {
    Renderer r(tok_, true);
    render(r, messages, tools, true);
    return r.tokens();
  }
  std::vector<int32_t> append_turns(const std::vector<int32_t>&, bool closed, const json& messages) const override {
    Renderer r(tok_, true);
    if (!closed) r.special("<|im_end|>");
    r.text("\n");
    render_messages(r, messages, /*first_is_system=*/false);
    generation_prompt(r);
    return r.tokens();
  }
  std::vector<int32_t> stop_tokens() const override { return {im_end_}; }

 protected:
  virtual void render_tools_system(Renderer& r, const json& tools, const std::string& system) const = 0;
  virtual void render_tool_call(Renderer& r, const json& call) const = 0;

 private:
  void render(Renderer& r, const json& messages, const json& tools, bool add_generation_prompt) const {
    bool has_system = !messages.empty() && messages[0].value("role", "") == "system";
    if (tools.is_array() && !tools.empty()) {
      render_tools_system(r, tools, has_system ? content_of(messages[0]) : "");
    } else if (has_system) {
      r.special("<|im_start|>").text("system\n" + content_of(messages[0])).special("<|im_end|>").text("\n");
    }
    render_messages(r, messages, has_system);
    if (add_generation_prompt) generation_prompt(r);
  }

  void render_messages(Renderer& r, const json& messages, bool first_is_system) const {
    for (size_t i = first_is_system ? 1 : 0; i < messages.size(); ++i) {
      const json& m = messages[i];
      const std::string role = m.value("role", "");
      if (role == "user" || role == "system") {
        r.special("<|im_start|>").text(role + "\n" + content_of(m)).special("<|im_end|>").text("\n");
      } else if (role == "assistant") {
        // History turns keep content only (the rollout never re-renders its own turns).
        std::string content = content_of(m);
        r.special("<|im_start|>").text("assistant\n" + content);
        const json calls = m.value("tool_calls", json::array());
        for (size_t c = 0; c < calls.size(); ++c) {
          if (c > 0 || !content.empty()) r.text(c == 0 ? first_call_separator() : "\n");
          render_tool_call(r, calls[c].contains("function") ? calls[c]["function"] : calls[c]);
        }
        r.special("<|im_end|>").text("\n");
      } else if (role == "tool") {
        if (i == 0 || messages[i - 1].value("role", "") != "tool") r.special("<|im_start|>").text("user");
        r.text("\n").special("<tool_response>").text("\n" + content_of(m) + "\n").special("</tool_response>");
        if (i + 1 == messages.size() || messages[i + 1].value("role", "") != "tool") r.special("<|im_end|>").text("\n");
      } else {
        throw Error(MLPT_INVALID_ARGUMENT, "chat format: message " + std::to_string(i) + " has unknown role \"" + role + "\"");
      }
    }
  }

  static void generation_prompt(Renderer& r) {
    r.special("<|im_start|>").text("assistant\n").special("<think>").text("\n\n").special("</think>").text("\n\n");
  }

 protected:
  virtual std::string first_call_separator() const { return "\n"; }
  const Tokenizer& tok_;
  int32_t im_end_ = 0;
};

// Qwen3: Hermes-style JSON calls; the tools block of Qwen3's tokenizer_config.json chat template.
class Qwen3Format final : public QwenFormat {
 public:
  using QwenFormat::QwenFormat;
  json parse_reply(const std::string& text, const json& tools) const override {
    return parse_hermes_tool_calls(text, tools).to_json();
  }

 private:
  void render_tools_system(Renderer& r, const json& tools, const std::string& system) const override {
    r.special("<|im_start|>").text("system\n" + (system.empty() ? "" : system + "\n\n"));
    r.text("# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
           "You are provided with function signatures within <tools></tools> XML tags:\n<tools>");
    for (const auto& t : tools) r.text("\n" + python_json(t));
    r.text("\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
           "<tool_call></tool_call> XML tags:\n");
    r.special("<tool_call>").text("\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n").special("</tool_call>");
    r.special("<|im_end|>").text("\n");
  }
  void render_tool_call(Renderer& r, const json& call) const override {
    const json& args = call.contains("arguments") ? call["arguments"] : json::object();
    r.special("<tool_call>")
        .text("\n{\"name\": \"" + call.value("name", "") + "\", \"arguments\": " +
              (args.is_string() ? args.get<std::string>() : python_json(args)) + "}\n")
        .special("</tool_call>");
  }
};

// Qwen3.5: XML calls; the tools block as the spec describes it (qwen35-architecture.md §6).
class Qwen35Format final : public QwenFormat {
 public:
  using QwenFormat::QwenFormat;
  json parse_reply(const std::string& text, const json& tools) const override {
    return parse_xml_tool_calls(text, tools).to_json();
  }

 private:
  std::string first_call_separator() const override { return "\n\n"; }
  void render_tools_system(Renderer& r, const json& tools, const std::string& system) const override {
    r.special("<|im_start|>").text("system\n# Tools\n\nYou have access to the following functions:\n\n<tools>");
    for (const auto& t : tools) r.text("\n" + python_json(t));
    r.text("\n</tools>\n\nIf you choose to call a function ONLY reply in the following format with NO suffix:\n\n");
    r.special("<tool_call>")
        .text("\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n</parameter>\n"
              "<parameter=example_parameter_2>\nThis is the value for the second parameter\nthat can span\nmultiple lines\n"
              "</parameter>\n</function>\n")
        .special("</tool_call>");
    r.text("\n\n<IMPORTANT>\nReminder:\n- Function calls MUST follow the specified format: an inner <function=...></function> "
           "block must be nested within <tool_call></tool_call> XML tags\n- Required parameters MUST be specified\n"
           "- You may provide optional reasoning for your function call in natural language BEFORE the function call, "
           "but NOT after\n- If there is no function call available, answer the question like normal with your current "
           "knowledge and do not tell the user about function calls\n</IMPORTANT>");
    if (!system.empty()) r.text("\n\n" + system);
    r.special("<|im_end|>").text("\n");
  }
  void render_tool_call(Renderer& r, const json& call) const override {
    std::string body = "\n<function=" + call.value("name", "") + ">\n";
    const json& args = call.contains("arguments") ? call["arguments"] : json::object();
    for (auto it = args.begin(); it != args.end(); ++it)
      body += "<parameter=" + it.key() + ">\n" + (it.value().is_string() ? it.value().get<std::string>() : python_json(it.value())) +
              "\n</parameter>\n";
    r.special("<tool_call>").text(body + "</function>\n").special("</tool_call>");
  }
};

void python_json_into(const json& v, std::string& out) {
  if (v.is_object()) {
    out += '{';
    bool first = true;
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (!first) out += ", ";
      first = false;
      out += json(it.key()).dump(-1, ' ', false, json::error_handler_t::replace);
      out += ": ";
      python_json_into(it.value(), out);
    }
    out += '}';
  } else if (v.is_array()) {
    out += '[';
    for (size_t i = 0; i < v.size(); ++i) {
      if (i) out += ", ";
      python_json_into(v[i], out);
    }
    out += ']';
  } else {
    out += v.dump(-1, ' ', false, json::error_handler_t::replace);
  }
}

}  // namespace

std::string python_json(const json& value) {
  std::string out;
  python_json_into(value, out);
  return out;
}

std::unique_ptr<ChatFormat> make_chat_format(const std::string& name, const Tokenizer& tokenizer) {
  if (name == "qwen3") return std::make_unique<Qwen3Format>(tokenizer);
  if (name == "qwen3_5") return std::make_unique<Qwen35Format>(tokenizer);
  throw Error(MLPT_INVALID_ARGUMENT, "unknown chat format \"" + name + "\" (known: qwen3, qwen3_5)");
}

}  // namespace mlpt::text
