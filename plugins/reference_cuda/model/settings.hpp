// Reading a component's JSON settings: typed getters that name the key, and a final check that no
// key was left unread (unknown keys are errors, mlpt.h).
#pragma once

#include <set>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "mlpt/sdk/error.hpp"

namespace mlpt::ref {

class Settings {
 public:
  Settings(std::string_view json_text, std::string component) : component_(std::move(component)) {
    try {
      doc_ = json_text.empty() ? nlohmann::json::object() : nlohmann::json::parse(json_text);
    } catch (const nlohmann::json::parse_error& e) {
      throw sdk::Error(MLPT_INVALID_ARGUMENT, component_ + " settings: not valid JSON: " + e.what());
    }
    if (!doc_.is_object()) throw sdk::Error(MLPT_INVALID_ARGUMENT, component_ + " settings: expected a JSON object");
  }
  Settings(const nlohmann::json& obj, std::string component) : doc_(obj), component_(std::move(component)) {
    if (!doc_.is_object()) throw sdk::Error(MLPT_INVALID_ARGUMENT, component_ + ": expected a JSON object");
  }

  bool has(const std::string& key) {
    used_.insert(key);
    return doc_.contains(key) && !doc_[key].is_null();
  }
  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    throw sdk::Error(MLPT_INVALID_ARGUMENT, component_ + " settings: " + prefix_ + key + ": " + what);
  }
  std::string string(const std::string& key) {
    if (!has(key)) fail(key, "missing");
    if (!doc_[key].is_string()) fail(key, "expected a string, got " + doc_[key].dump());
    return doc_[key].get<std::string>();
  }
  std::string string_or(const std::string& key, const std::string& fallback) { return has(key) ? string(key) : fallback; }
  double number_or(const std::string& key, double fallback) {
    if (!has(key)) return fallback;
    if (!doc_[key].is_number()) fail(key, "expected a number, got " + doc_[key].dump());
    return doc_[key].get<double>();
  }
  int64_t integer_or(const std::string& key, int64_t fallback, int64_t min = INT64_MIN) {
    if (!has(key)) return fallback;
    if (!doc_[key].is_number_integer()) fail(key, "expected an integer, got " + doc_[key].dump());
    int64_t v = doc_[key].get<int64_t>();
    if (v < min) fail(key, "must be at least " + std::to_string(min) + ", got " + std::to_string(v));
    return v;
  }
  bool boolean_or(const std::string& key, bool fallback) {
    if (!has(key)) return fallback;
    if (!doc_[key].is_boolean()) fail(key, "expected true or false, got " + doc_[key].dump());
    return doc_[key].get<bool>();
  }
  // A nested object (as Settings with a dotted name), or an empty one.
  Settings object(const std::string& key) {
    if (!has(key)) return Settings(nlohmann::json::object(), component_ + " settings: " + key);
    if (!doc_[key].is_object()) fail(key, "expected an object");
    Settings s(doc_[key], component_);
    s.prefix_ = key + ".";
    return s;
  }
  // Every key present must have been asked for.
  void reject_unknown() const {
    for (auto& [k, v] : doc_.items())
      if (!used_.count(k))
        throw sdk::Error(MLPT_INVALID_ARGUMENT, component_ + " settings: unknown key '" + prefix_ + k + "'");
  }
  const nlohmann::json& json() const { return doc_; }

 private:
  nlohmann::json doc_;
  std::string component_, prefix_;
  std::set<std::string> used_;
};

}  // namespace mlpt::ref
