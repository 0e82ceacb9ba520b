// Reading a component's settings (its `config_json`, the component's TOML table converted by the
// host): typed getters with defaults, errors that name the key with its full dotted path, and a
// final check that every key present was asked for, so a misspelled setting is an error, never
// silently ignored. One reader for every plugin:
//
//   mlpt::sdk::Settings s(config_json, "transport inprocess");
//   receivers_ = s.integer_or("receivers", 1, 1);
//   auto limits = s.object("limits");
//   memory_mb_ = limits.integer_or("memory_mb", 0, 0);
//   limits.reject_unknown();
//   s.reject_unknown();   // "transport inprocess settings: unknown key 'recievers' (known: receivers, limits)"
//
// Every error is MLPT_INVALID_ARGUMENT with the message "<component> settings: <key>: <what>".
#pragma once

#include <cstdint>
#include <limits>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "mlpt/sdk/error.hpp"

namespace mlpt::sdk {

class Settings {
 public:
  // An empty or all-blank text is an empty object.
  Settings(std::string_view json_text, std::string component) : component_(std::move(component)) {
    if (json_text.find_first_not_of(" \t\r\n") == std::string_view::npos) {
      doc_ = nlohmann::json::object();
      return;
    }
    try {
      doc_ = nlohmann::json::parse(json_text);
    } catch (const nlohmann::json::parse_error& e) {
      throw Error(MLPT_INVALID_ARGUMENT, component_ + " settings: not valid JSON: " + e.what());
    }
    if (!doc_.is_object()) throw Error(MLPT_INVALID_ARGUMENT, component_ + " settings: expected a JSON object, got " + doc_.dump());
  }

  // True when the key is present and not null; marks it as known either way.
  bool has(const std::string& key) {
    used_.insert(key);
    return doc_.contains(key) && !doc_[key].is_null();
  }
  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    throw Error(MLPT_INVALID_ARGUMENT, component_ + " settings: " + prefix_ + key + ": " + what);
  }

  std::string string(const std::string& key) {
    if (!has(key)) fail(key, "missing (required)");
    if (!doc_[key].is_string()) fail(key, "expected a string, got " + doc_[key].dump());
    return doc_[key].get<std::string>();
  }
  std::string string_or(const std::string& key, const std::string& fallback) { return has(key) ? string(key) : fallback; }
  // One of `choices`.
  std::string choice_or(const std::string& key, const std::string& fallback, const std::vector<std::string>& choices) {
    std::string v = string_or(key, fallback);
    for (const auto& c : choices)
      if (v == c) return v;
    std::string list;
    for (const auto& c : choices) list += (list.empty() ? "\"" : ", \"") + c + "\"";
    fail(key, "expected one of " + list + ", got \"" + v + "\"");
  }
  std::vector<std::string> strings_or(const std::string& key, std::vector<std::string> fallback) {
    if (!has(key)) return fallback;
    const auto& v = doc_[key];
    std::vector<std::string> out;
    if (!v.is_array()) fail(key, "expected a list of strings, got " + v.dump());
    for (const auto& e : v) {
      if (!e.is_string()) fail(key, "expected a list of strings, got " + v.dump());
      out.push_back(e.get<std::string>());
    }
    return out;
  }
  double number_or(const std::string& key, double fallback, double lo = -std::numeric_limits<double>::infinity(),
                   double hi = std::numeric_limits<double>::infinity()) {
    if (!has(key)) return fallback;
    if (!doc_[key].is_number()) fail(key, "expected a number, got " + doc_[key].dump());
    double v = doc_[key].get<double>();
    if (!(v >= lo && v <= hi))
      fail(key, (hi == std::numeric_limits<double>::infinity() ? "must be at least " + num(lo)
                 : lo == -std::numeric_limits<double>::infinity() ? "must be at most " + num(hi)
                                                                   : "must be in [" + num(lo) + ", " + num(hi) + "]") +
                    ", got " + num(v));
    return v;
  }
  int64_t integer_or(const std::string& key, int64_t fallback, int64_t min = std::numeric_limits<int64_t>::min(),
                     int64_t max = std::numeric_limits<int64_t>::max()) {
    if (!has(key)) return fallback;
    if (!doc_[key].is_number_integer()) fail(key, "expected an integer, got " + doc_[key].dump());
    int64_t v = doc_[key].get<int64_t>();
    if (v < min) fail(key, "must be at least " + std::to_string(min) + ", got " + std::to_string(v));
    if (v > max) fail(key, "must be at most " + std::to_string(max) + ", got " + std::to_string(v));
    return v;
  }
  bool boolean_or(const std::string& key, bool fallback) {
    if (!has(key)) return fallback;
    if (!doc_[key].is_boolean()) fail(key, "expected true or false, got " + doc_[key].dump());
    return doc_[key].get<bool>();
  }
  // A nested table as Settings whose errors name "key.inner"; an empty one when absent. Call its
  // reject_unknown() too.
  Settings object(const std::string& key) {
    Settings s(component_);
    s.prefix_ = prefix_ + key + ".";
    if (!has(key)) return s;
    if (!doc_[key].is_object()) fail(key, "expected a table (JSON object), got " + doc_[key].dump());
    s.doc_ = doc_[key];
    return s;
  }
  // A value taken as it is (for a plugin's own structured data); marks the key as known.
  const nlohmann::json& raw(const std::string& key) {
    has(key);
    static const nlohmann::json null;
    return doc_.contains(key) ? doc_[key] : null;
  }
  // Every key present must have been asked for: the first one that was not is an error naming it
  // and the keys this table knows.
  void reject_unknown() const {
    for (auto& [k, v] : doc_.items())
      if (!used_.count(k)) {
        std::string known;
        for (const auto& u : used_) known += (known.empty() ? "" : ", ") + u;
        throw Error(MLPT_INVALID_ARGUMENT, component_ + " settings: unknown key '" + prefix_ + k + "'" +
                                               (known.empty() ? " (this table takes no keys)" : " (known: " + known + ")"));
      }
  }
  const nlohmann::json& json() const { return doc_; }

 private:
  explicit Settings(std::string component) : doc_(nlohmann::json::object()), component_(std::move(component)) {}
  static std::string num(double v) { return nlohmann::json(v).dump(); }

  nlohmann::json doc_;
  std::string component_, prefix_;
  std::set<std::string> used_;
};

}  // namespace mlpt::sdk
