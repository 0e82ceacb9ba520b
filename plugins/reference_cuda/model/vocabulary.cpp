#include "model/vocabulary.hpp"

#include <algorithm>
#include <filesystem>

#include "mlpt/sdk/error.hpp"

namespace mlpt::ref {

int64_t sampling_vocab_size(const ModelConfig& config, const std::string& dir, int64_t override_size) {
  int64_t n = config.vocab_size;
  std::string path = dir + "/tokenizer.json";
  if (override_size > 0) {
    n = override_size;
  } else if (std::filesystem::exists(path)) {
    nlohmann::json tok = parse_json_file(path);
    int64_t max_id = -1;
    if (tok.contains("model") && tok["model"].contains("vocab") && tok["model"]["vocab"].is_object())
      for (auto& [piece, id] : tok["model"]["vocab"].items())
        if (id.is_number_integer()) max_id = std::max(max_id, id.get<int64_t>());
    if (tok.contains("added_tokens") && tok["added_tokens"].is_array())
      for (auto& a : tok["added_tokens"])
        if (a.contains("id") && a["id"].is_number_integer()) max_id = std::max(max_id, a["id"].get<int64_t>());
    if (max_id < 0) throw sdk::Error(MLPT_INVALID_ARGUMENT, path + ": no token ids found (model.vocab, added_tokens)");
    n = max_id + 1;
  }
  if (n > config.vocab_size)
    throw sdk::Error(MLPT_INVALID_ARGUMENT, (override_size > 0 ? std::string("sampling_vocab_size ") : path + ": ") +
                                                std::to_string(n) + " ids exceed the model's vocab_size " +
                                                std::to_string(config.vocab_size));
  return n;
}

}  // namespace mlpt::ref
