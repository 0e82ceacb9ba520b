// docs/config-reference.md is what `mlpt config reference` generates, and the reference lists
// exactly the keys the config reader reads (scanned from core/run/run_config.cpp and
// core/config/components_config.cpp), so neither can drift from the code.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "core/run/config_reference.hpp"

namespace fs = std::filesystem;

namespace {

std::string read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// "table.key" for every key read through a TomlTable variable named in `tables`.
std::set<std::string> keys_read(const fs::path& source, const std::map<std::string, std::string>& tables) {
  const std::string text = read(source);
  std::set<std::string> keys;
  const std::regex call("(\\w+)\\.(?:get|get_or|optional)<[^>]+>\\(\"(\\w+)\"|(\\w+)\\.json\\(\"(\\w+)\"|path_of\\((\\w+), \"(\\w+)\"");
  for (std::sregex_iterator it(text.begin(), text.end(), call), end; it != end; ++it) {
    const auto& m = *it;
    const std::string var = m[1].matched ? m[1] : m[3].matched ? m[3] : m[5];
    const std::string key = m[2].matched ? m[2] : m[4].matched ? m[4] : m[6];
    if (tables.count(var)) keys.insert(tables.at(var) + "." + key);
  }
  return keys;
}

}  // namespace

TEST_CASE("docs/config-reference.md is up to date with the code") {
  const std::string doc = read(fs::path(MLPT_SOURCE_DIR) / "docs" / "config-reference.md");
  INFO("regenerate it: build/bin/mlpt config reference > docs/config-reference.md");
  CHECK(doc == mlpt::run::config_reference_markdown());
}

TEST_CASE("the config reference lists exactly the keys the reader reads, each with a type, default and meaning") {
  std::set<std::string> documented;
  for (const auto& k : mlpt::run::config_keys()) {
    INFO(k.table << "." << k.key);
    CHECK(!k.type.empty());
    CHECK(!k.default_value.empty());
    CHECK(!k.meaning.empty());
    CHECK(documented.insert(k.table + "." + k.key).second);
  }
  auto read_keys = keys_read(fs::path(MLPT_SOURCE_DIR) / "core/run/run_config.cpp", {{"run", "run"}, {"bench", "benchmark"}, {"data", "dataset"}, {"placement", "placement"}});
  for (const auto& k : keys_read(fs::path(MLPT_SOURCE_DIR) / "core/config/components_config.cpp", {{"t", "components.KIND"}})) read_keys.insert(k);
  REQUIRE(read_keys.size() >= 30);
  CHECK(read_keys == documented);
}
