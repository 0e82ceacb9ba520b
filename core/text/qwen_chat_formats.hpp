// The two Qwen chat formats behind make_chat_format (core/text/chat_format.hpp).
#pragma once

#include "core/text/chat_format.hpp"

namespace mlpt::text {

std::unique_ptr<ChatFormat> make_qwen3_chat_format(std::shared_ptr<const Tokenizer> tok, ChatOptions options);
std::unique_ptr<ChatFormat> make_qwen35_chat_format(std::shared_ptr<const Tokenizer> tok, ChatOptions options);

}  // namespace mlpt::text
