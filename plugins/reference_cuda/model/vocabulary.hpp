// How many LM-head rows are real tokens: the rest are padding (§2.7) and never sampled or scored.
#pragma once

#include <cstdint>
#include <string>

#include "model/config.hpp"

namespace mlpt::ref {

// The number of ids the checkpoint's tokenizer defines (max id + 1 over DIR/tokenizer.json's
// vocabulary and added tokens), or config.vocab_size when DIR has no tokenizer.json. An
// `override_size` > 0 wins. Throws when the tokenizer defines more ids than the LM head has rows.
int64_t sampling_vocab_size(const ModelConfig& config, const std::string& checkpoint_dir, int64_t override_size = 0);

}  // namespace mlpt::ref
