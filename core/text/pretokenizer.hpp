// The Split pre-tokenizer of the Qwen tokenizers, as a hand-written scanner equivalent to the regex
//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
// (Qwen2/Qwen3) or its Qwen3.5 form, which adds \p{M} next to \p{L}. Behaviour "Isolated": every
// match is a piece; the patterns cover every character, so there are no gaps.
#pragma once

#include <string_view>
#include <vector>

namespace mlpt::text {

enum class SplitPattern { kQwen3, kQwen35 };

// The exact regex source strings from tokenizer.json that the scanner implements.
extern const std::string_view kQwen3SplitRegex;
extern const std::string_view kQwen35SplitRegex;

// Splits valid UTF-8 into pieces (views into `text`), appended to `out`.
void pre_tokenize(std::string_view text, SplitPattern pattern, std::vector<std::string_view>& out);

}  // namespace mlpt::text
