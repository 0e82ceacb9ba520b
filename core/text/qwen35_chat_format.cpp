// Qwen3.5: XML tool calls (<function=NAME><parameter=KEY>), spec docs/qwen35-architecture.md §6. The
// tool instructions follow the Qwen3-Coder template, which the spec outlines; the exact Qwen3.5
// template is not available here.
#include "core/text/qwen_chat_formats.hpp"

namespace mlpt::text {
namespace {

using nlohmann::json;

constexpr std::string_view kToolInstructions =
    "\n</tools>\n\nIf you choose to call a function ONLY reply in the following format with NO suffix:\n\n"
    "<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n</parameter>\n"
    "<parameter=example_parameter_2>\nThis is the value for the second parameter\nthat can span\nmultiple lines\n"
    "</parameter>\n</function>\n</tool_call>\n\n<IMPORTANT>\nReminder:\n"
    "- Function calls MUST follow the specified format: an inner <function=...></function> block must be nested "
    "within <tool_call></tool_call> XML tags\n"
    "- Required parameters MUST be specified\n"
    "- You may provide optional reasoning for your function call in natural language BEFORE the function call, "
    "but NOT after\n"
    "- If there is no function call available, answer the question like normal with your current knowledge and "
    "do not tell the user about function calls\n"
    "</IMPORTANT>";

class Qwen35ChatFormat final : public ChatFormat {
 public:
  Qwen35ChatFormat(std::shared_ptr<const Tokenizer> tok, ChatOptions o) : ChatFormat(std::move(tok), o) {}
  std::string name() const override { return "qwen3_5"; }
  ParsedReply parse_reply(std::string_view text, const json& tools) const override {
    return parse_xml_tool_calls(text, tools);
  }

 protected:
  void render_tools_system(Rendered& out, const nlohmann::ordered_json& tools,
                           const std::string* system) const override {
    out.literal("<|im_start|>system\n# Tools\n\nYou have access to the following functions:\n\n<tools>");
    for (const auto& t : tools) {
      out.literal("\n");
      out.content(to_template_json(t));
    }
    out.literal(kToolInstructions);
    if (system && !system->empty()) {
      out.literal("\n\n");
      out.content(*system);
    }
    out.literal("<|im_end|>\n");
  }

  void render_tool_calls(Rendered& out, const json& calls, bool content_empty) const override {
    for (size_t k = 0; k < calls.size(); ++k) {
      const json& c = calls[k].contains("function") ? calls[k]["function"] : calls[k];
      if (k == 0 && !content_empty) out.literal("\n\n");
      else if (k > 0) out.literal("\n");
      out.literal("<tool_call>\n<function=");
      out.content(c.value("name", ""));
      out.literal(">\n");
      json args = c.value("arguments", json::object());
      if (args.is_string()) args = json::parse(args.get<std::string>(), nullptr, false);
      if (args.is_object())
        for (auto it = args.begin(); it != args.end(); ++it) {
          out.literal("<parameter=");
          out.content(it.key());
          out.literal(">\n");
          out.content(it.value().is_string() ? it.value().get<std::string>() : to_template_json(it.value()));
          out.literal("\n</parameter>\n");
        }
      out.literal("</function>\n</tool_call>");
    }
  }

  // Every assistant turn after the last query keeps its (possibly empty) think block, so a turn
  // sampled after the thinking-disabled prompt renders the same later as it was sampled.
  bool think_block_after_query(bool, bool) const override { return true; }

  void render_generation_prompt(Rendered& out) const override {
    out.literal("<|im_start|>assistant\n<think>\n");
    if (!options_.enable_thinking) out.literal("\n</think>\n\n");
  }
};

}  // namespace

std::unique_ptr<ChatFormat> make_qwen35_chat_format(std::shared_ptr<const Tokenizer> tok, ChatOptions options) {
  return std::make_unique<Qwen35ChatFormat>(std::move(tok), options);
}

}  // namespace mlpt::text
