// Reading TOML configs strictly: every key read is marked, `finish()` rejects the keys nobody read,
// and every error names the file, line, column and dotted key. The one way configs are read.
#pragma once

#include <filesystem>
#include <optional>
#include <set>
#include <string>

#include <nlohmann/json.hpp>
#include <toml++/toml.h>

#include "core/error.hpp"

namespace mlpt::config {

class TomlTable {
 public:
  // Parses `path`; a syntax error names the file and position.
  static toml::table parse_file(const std::filesystem::path& path);

  TomlTable(const toml::table& table, std::string file, std::string prefix = "");

  bool has(const std::string& key) const { return table_->contains(key); }
  bool is_table(const std::string& key) const { return table_->contains(key) && table_->get(key)->is_table(); }

  template <class T>
  T get(const std::string& key) const;  // required
  template <class T>
  std::optional<T> optional(const std::string& key) const;
  template <class T>
  T get_or(const std::string& key, T fallback) const {
    return optional<T>(key).value_or(std::move(fallback));
  }

  // A sub-table (required or optional).
  TomlTable table(const std::string& key) const;
  std::optional<TomlTable> optional_table(const std::string& key) const;
  // Keys of this table, in file order of appearance is not guaranteed: sorted.
  std::vector<std::string> keys() const;

  // A sub-table converted to JSON as it is (a component's settings are checked by the component).
  nlohmann::json json(const std::string& key) const;

  // Throws naming the first key that was never read.
  void finish() const;

  // An error about `key` (or the table itself when empty), with position.
  [[noreturn]] void fail(const std::string& key, const std::string& message) const;
  std::string where(const std::string& key) const;
  const std::string& file() const { return file_; }

 private:
  const toml::node* node(const std::string& key) const;
  const toml::table* table_;
  std::string file_, prefix_;
  mutable std::set<std::string> read_;
};

nlohmann::json to_json(const toml::node& node);

}  // namespace mlpt::config
