// A small argument reader for the sub-commands: `--flag`, `--option VALUE` / `--option=VALUE` and
// positionals, with errors that name the argument. Unknown options are errors.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/error.hpp"

namespace mlpt::cli {

class Args {
 public:
  // `flags` take no value, `options` take one. Throws mlpt::Error on anything else starting with --.
  Args(const std::vector<std::string>& argv, std::set<std::string> flags,
       std::set<std::string> options) {
    for (size_t i = 0; i < argv.size(); ++i) {
      const std::string& a = argv[i];
      if (a.rfind("--", 0) != 0 || a == "--") {
        positionals_.push_back(a);
        continue;
      }
      std::string key = a, value;
      bool has_value = false;
      if (auto eq = a.find('='); eq != std::string::npos) {
        key = a.substr(0, eq), value = a.substr(eq + 1), has_value = true;
      }
      if (flags.count(key)) {
        if (has_value) throw Error("option " + key + " takes no value");
        flags_.insert(key);
      } else if (options.count(key)) {
        if (!has_value) {
          if (i + 1 >= argv.size()) throw Error("option " + key + " needs a value");
          value = argv[++i];
        }
        options_[key] = value;
      } else {
        throw Error("unknown option " + key);
      }
    }
  }

  bool flag(const std::string& name) const { return flags_.count(name) != 0; }
  std::optional<std::string> option(const std::string& name) const {
    auto it = options_.find(name);
    if (it == options_.end()) return std::nullopt;
    return it->second;
  }
  std::string option_or(const std::string& name, const std::string& fallback) const {
    return option(name).value_or(fallback);
  }
  std::string required(const std::string& name) const {
    auto v = option(name);
    if (!v) throw Error("missing required option " + name);
    return *v;
  }
  const std::vector<std::string>& positionals() const { return positionals_; }
  const std::string& positional(size_t i, const char* what) const {
    if (i >= positionals_.size()) throw Error(std::string("missing argument: ") + what);
    return positionals_[i];
  }

 private:
  std::set<std::string> flags_;
  std::map<std::string, std::string> options_;
  std::vector<std::string> positionals_;
};

}  // namespace mlpt::cli
