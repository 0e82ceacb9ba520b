#include "core/config/toml_table.hpp"

#include <sstream>

namespace mlpt::config {
namespace {

std::string position(const std::string& file, const toml::source_region& r) {
  std::string out = file;
  if (r.begin.line) out += ":" + std::to_string(r.begin.line) + ":" + std::to_string(r.begin.column);
  return out;
}

template <class T>
const char* type_name() {
  if constexpr (std::is_same_v<T, bool>) return "a boolean";
  else if constexpr (std::is_integral_v<T>) return "an integer";
  else if constexpr (std::is_floating_point_v<T>) return "a number";
  else return "a string";
}

}  // namespace

toml::table TomlTable::parse_file(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw Error(MLPT_NOT_FOUND, path.string() + ": config file does not exist");
  try {
    return toml::parse_file(path.string());
  } catch (const toml::parse_error& e) {
    throw Error(MLPT_INVALID_ARGUMENT, position(path.string(), e.source()) + ": TOML syntax error: " + std::string(e.description()));
  }
}

TomlTable::TomlTable(const toml::table& table, std::string file, std::string prefix)
    : table_(&table), file_(std::move(file)), prefix_(std::move(prefix)) {}

const toml::node* TomlTable::node(const std::string& key) const {
  read_.insert(key);
  return table_->get(key);
}

std::string TomlTable::where(const std::string& key) const {
  const toml::node* n = key.empty() ? nullptr : table_->get(key);
  std::string dotted = prefix_.empty() ? key : key.empty() ? prefix_ : prefix_ + "." + key;
  return position(file_, n ? n->source() : table_->source()) + ": " + (dotted.empty() ? "config" : "'" + dotted + "'");
}

void TomlTable::fail(const std::string& key, const std::string& message) const {
  throw Error(MLPT_INVALID_ARGUMENT, where(key) + ": " + message);
}

template <class T>
std::optional<T> TomlTable::optional(const std::string& key) const {
  const toml::node* n = node(key);
  if (!n) return std::nullopt;
  if constexpr (std::is_same_v<T, bool>) {
    if (auto v = n->value_exact<bool>()) return *v;
  } else if constexpr (std::is_integral_v<T>) {
    if (auto v = n->value_exact<int64_t>()) return static_cast<T>(*v);
  } else if constexpr (std::is_floating_point_v<T>) {
    if (auto v = n->value_exact<double>()) return static_cast<T>(*v);
    if (auto v = n->value_exact<int64_t>()) return static_cast<T>(*v);
  } else {
    if (auto v = n->value_exact<std::string>()) return *v;
  }
  fail(key, std::string("must be ") + type_name<T>());
}

template <class T>
T TomlTable::get(const std::string& key) const {
  auto v = optional<T>(key);
  if (!v) fail(key, "is required");
  return *v;
}

template std::optional<bool> TomlTable::optional<bool>(const std::string&) const;
template std::optional<int64_t> TomlTable::optional<int64_t>(const std::string&) const;
template std::optional<int> TomlTable::optional<int>(const std::string&) const;
template std::optional<double> TomlTable::optional<double>(const std::string&) const;
template std::optional<std::string> TomlTable::optional<std::string>(const std::string&) const;
template bool TomlTable::get<bool>(const std::string&) const;
template int64_t TomlTable::get<int64_t>(const std::string&) const;
template int TomlTable::get<int>(const std::string&) const;
template double TomlTable::get<double>(const std::string&) const;
template std::string TomlTable::get<std::string>(const std::string&) const;

TomlTable TomlTable::table(const std::string& key) const {
  auto t = optional_table(key);
  if (!t) fail(key, "table is required");
  return *t;
}

std::optional<TomlTable> TomlTable::optional_table(const std::string& key) const {
  const toml::node* n = node(key);
  if (!n) return std::nullopt;
  if (!n->is_table()) fail(key, "must be a table");
  return TomlTable(*n->as_table(), file_, prefix_.empty() ? key : prefix_ + "." + key);
}

std::vector<std::string> TomlTable::keys() const {
  std::vector<std::string> out;
  for (const auto& [k, v] : *table_) out.emplace_back(k.str());
  std::sort(out.begin(), out.end());
  return out;
}

nlohmann::json TomlTable::json(const std::string& key) const {
  const toml::node* n = node(key);
  if (!n) return nlohmann::json::object();
  if (!n->is_table()) fail(key, "must be a table");
  return to_json(*n);
}

void TomlTable::finish() const {
  for (const auto& [k, v] : *table_) {
    std::string key(k.str());
    if (!read_.count(key)) {
      std::string dotted = prefix_.empty() ? key : prefix_ + "." + key;
      throw Error(MLPT_INVALID_ARGUMENT, position(file_, v.source()) + ": unknown key '" + dotted + "'");
    }
  }
}

nlohmann::json to_json(const toml::node& node) {
  if (auto t = node.as_table()) {
    nlohmann::json j = nlohmann::json::object();
    for (const auto& [k, v] : *t) j[std::string(k.str())] = to_json(v);
    return j;
  }
  if (auto a = node.as_array()) {
    nlohmann::json j = nlohmann::json::array();
    for (const auto& v : *a) j.push_back(to_json(v));
    return j;
  }
  if (auto v = node.value_exact<std::string>()) return *v;
  if (auto v = node.value_exact<int64_t>()) return *v;
  if (auto v = node.value_exact<double>()) return *v;
  if (auto v = node.value_exact<bool>()) return *v;
  std::ostringstream s;  // dates and times: as TOML writes them
  node.visit([&](const auto& v) {
    if constexpr (toml::is_date<decltype(v)> || toml::is_time<decltype(v)> || toml::is_date_time<decltype(v)>) s << v;
  });
  return s.str();
}

}  // namespace mlpt::config
