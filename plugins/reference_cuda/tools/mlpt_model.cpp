// `mlpt model`: make and inspect reference-model checkpoints.
//   mlpt model init --config FILE --seed N --out DIR [--tokenizer DIR] [--dtype D] [--shard-bytes N]
//   mlpt model score --checkpoint DIR [--top N] [--threads N]
// score reads one sequence of token ids per line on stdin (spaces, commas or a JSON array) and
// prints one JSON object per line: {"tokens": [...], "logprobs": [...], "top": [[[id, logprob], ...], ...]}.
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "backends/cpu/linear.hpp"
#include "backends/cpu/threads.hpp"
#include "model/scoring.hpp"
#include "model/vocabulary.hpp"
#include "model/weights.hpp"
#include "mlpt/sdk/error.hpp"

namespace fs = std::filesystem;
using namespace mlpt::ref;
using mlpt::sdk::Error;

namespace {

const char* kUsage =
    "usage:\n"
    "  mlpt model init --config FILE --seed N --out DIR [--tokenizer DIR] [--dtype float32|bfloat16|float16]\n"
    "                  [--shard-bytes N]\n"
    "  mlpt model score --checkpoint DIR [--top N] [--threads N]   (token ids on stdin, one sequence per line)\n";

// --key value pairs; every key must be known.
std::map<std::string, std::string> parse_options(int argc, char** argv, int first,
                                                 const std::vector<std::string>& known) {
  std::map<std::string, std::string> out;
  for (int i = first; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--", 0) != 0) throw Error(MLPT_INVALID_ARGUMENT, "unexpected argument '" + a + "'");
    std::string key = a.substr(2);
    if (std::find(known.begin(), known.end(), key) == known.end())
      throw Error(MLPT_INVALID_ARGUMENT, "unknown option --" + key);
    if (i + 1 >= argc) throw Error(MLPT_INVALID_ARGUMENT, "--" + key + " needs a value");
    out[key] = argv[++i];
  }
  return out;
}

std::string required(const std::map<std::string, std::string>& o, const std::string& key) {
  auto it = o.find(key);
  if (it == o.end()) throw Error(MLPT_INVALID_ARGUMENT, "--" + key + " is required");
  return it->second;
}

int64_t integer(const std::map<std::string, std::string>& o, const std::string& key, int64_t fallback) {
  auto it = o.find(key);
  if (it == o.end()) return fallback;
  try {
    size_t used = 0;
    long long v = std::stoll(it->second, &used);
    if (used != it->second.size()) throw std::invalid_argument("trailing");
    return v;
  } catch (const std::exception&) {
    throw Error(MLPT_INVALID_ARGUMENT, "--" + key + " expects an integer, got '" + it->second + "'");
  }
}

int init(int argc, char** argv) {
  auto o = parse_options(argc, argv, 2, {"config", "seed", "out", "tokenizer", "dtype", "shard-bytes"});
  std::string config_path = required(o, "config"), out = required(o, "out");
  int64_t seed = integer(o, "seed", -1);
  if (seed < 0) throw Error(MLPT_INVALID_ARGUMENT, "--seed N (a non-negative integer) is required");
  ModelConfig config = load_model_config(config_path);
  if (config.variant != CheckpointVariant::qwen3_5_moe)
    throw Error(MLPT_INVALID_ARGUMENT, config_path + ": init writes Qwen3.5 checkpoints; model_type must be qwen3_5_moe");
  Dtype dtype = parse_dtype(o.count("dtype") ? o["dtype"] : config.dtype);
  fs::create_directories(out);
  if (o.count("tokenizer")) {
    fs::path tok = o["tokenizer"];
    if (!fs::exists(tok / "tokenizer.json")) throw Error(MLPT_NOT_FOUND, (tok / "tokenizer.json").string() + ": not found");
    for (const char* f : {"tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt", "special_tokens_map.json",
                          "generation_config.json"})
      if (fs::exists(tok / f)) fs::copy_file(tok / f, fs::path(out) / f, fs::copy_options::overwrite_existing);
    sampling_vocab_size(config, out);  // the tokenizer must fit the LM head
  }
  Weights<float> w = init_weights<float>(config, static_cast<uint64_t>(seed));
  save_checkpoint(out, w, dtype, static_cast<size_t>(integer(o, "shard-bytes", 0)));
  std::cerr << "mlpt model init: " << out << ": " << parameter_count(config) << " parameters, " << dtype_code(dtype)
            << ", seed " << seed << "\n";
  return 0;
}

std::vector<int32_t> parse_ids(const std::string& line, int line_no) {
  std::string s = line;
  for (char& c : s)
    if (c == ',' || c == '[' || c == ']') c = ' ';
  std::istringstream in(s);
  std::vector<int32_t> ids;
  std::string word;
  while (in >> word) {
    try {
      size_t used = 0;
      long long v = std::stoll(word, &used);
      if (used != word.size() || v < 0 || v > INT32_MAX) throw std::invalid_argument("id");
      ids.push_back(static_cast<int32_t>(v));
    } catch (const std::exception&) {
      throw Error(MLPT_INVALID_ARGUMENT, "stdin line " + std::to_string(line_no) + ": '" + word + "' is not a token id");
    }
  }
  return ids;
}

int score(int argc, char** argv) {
  auto o = parse_options(argc, argv, 2, {"checkpoint", "top", "threads"});
  std::string dir = required(o, "checkpoint");
  int64_t top = integer(o, "top", 0);
  mlpt::ref::cpu::set_cpu_threads(static_cast<int>(integer(o, "threads", 1)));
  Weights<float> w = load_weights<float>(dir);
  int64_t valid = sampling_vocab_size(w.config, dir);
  std::string line;
  int line_no = 0;
  while (std::getline(std::cin, line)) {
    ++line_no;
    std::vector<int32_t> ids = parse_ids(line, line_no);
    if (ids.empty()) continue;
    ForwardBatch<float> b;
    b.tokens = ids.data();
    b.offsets = {0, static_cast<int64_t>(ids.size())};
    ScoreResult<float> r = score_sequences(w, b, valid, top);
    nlohmann::json out = {{"tokens", ids}, {"logprobs", r.logprobs}};
    if (top > 0) {
      nlohmann::json t = nlohmann::json::array();
      for (auto& row : r.top) {
        nlohmann::json entries = nlohmann::json::array();
        for (auto& [id, lp] : row) entries.push_back({id, lp});
        t.push_back(entries);
      }
      out["top"] = t;
    }
    std::cout << out.dump() << "\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    std::cout << kUsage;
    return argc < 2 ? 2 : 0;
  }
  try {
    std::string cmd = argv[1];
    if (cmd == "init") return init(argc, argv);
    if (cmd == "score") return score(argc, argv);
    std::cerr << "mlpt model: unknown sub-command '" << cmd << "'\n" << kUsage;
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "mlpt model " << argv[1] << ": " << e.what() << "\n";
    return 1;
  }
}
