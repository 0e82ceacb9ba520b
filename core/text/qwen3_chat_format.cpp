// Qwen3: the chat template shipped in Qwen3's tokenizer_config.json, Hermes-style JSON tool calls.
#include "core/text/qwen_chat_formats.hpp"

namespace mlpt::text {
namespace {

using nlohmann::json;

class Qwen3ChatFormat final : public ChatFormat {
 public:
  Qwen3ChatFormat(std::shared_ptr<const Tokenizer> tok, ChatOptions o) : ChatFormat(std::move(tok), o) {}
  std::string name() const override { return "qwen3"; }
  ParsedReply parse_reply(std::string_view text, const json& tools) const override {
    return parse_hermes_tool_calls(text, tools);
  }

 protected:
  void render_tools_system(Rendered& out, const nlohmann::ordered_json& tools,
                           const std::string* system) const override {
    out.literal("<|im_start|>system\n");
    if (system) {
      out.content(*system);
      out.literal("\n\n");
    }
    out.literal(
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n<tools>");
    for (const auto& t : tools) {
      out.literal("\n");
      out.content(to_template_json(t));
    }
    out.literal(
        "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
        "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
        "<args-json-object>}\n</tool_call><|im_end|>\n");
  }

  void render_tool_calls(Rendered& out, const json& calls, bool content_empty) const override {
    for (size_t k = 0; k < calls.size(); ++k) {
      const json& c = calls[k].contains("function") ? calls[k]["function"] : calls[k];
      if ((k == 0 && !content_empty) || k > 0) out.literal("\n");
      out.literal("<tool_call>\n{\"name\": \"");
      out.content(c.value("name", ""));
      out.literal("\", \"arguments\": ");
      const json args = c.value("arguments", json::object());
      out.content(args.is_string() ? args.get<std::string>() : to_template_json(args));
      out.literal("}\n</tool_call>");
    }
  }

  void render_generation_prompt(Rendered& out) const override {
    out.literal("<|im_start|>assistant\n");
    if (!options_.enable_thinking) out.literal("<think>\n\n</think>\n\n");
  }
};

}  // namespace

std::unique_ptr<ChatFormat> make_qwen3_chat_format(std::shared_ptr<const Tokenizer> tok, ChatOptions options) {
  return std::make_unique<Qwen3ChatFormat>(std::move(tok), options);
}

}  // namespace mlpt::text
