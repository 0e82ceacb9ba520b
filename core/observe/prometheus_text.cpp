#include "core/observe/prometheus_text.hpp"

#include <cmath>
#include <cstdio>

#include "core/error.hpp"

namespace mlpt::observe {
namespace {

bool valid_name(const std::string& name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
    if (!letter && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

// Label values and help text escape backslash and newline; label values also the double quote.
std::string escaped(const std::string& s, bool quote) {
  std::string out;
  for (char c : s) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '\n')
      out += "\\n";
    else if (c == '"' && quote)
      out += "\\\"";
    else
      out += c;
  }
  return out;
}

std::string label_set(const std::string& metric, const PrometheusMetrics::Labels& labels) {
  if (labels.empty()) return "";
  std::string out = "{";
  for (const auto& [name, value] : labels) {
    if (!valid_name(name))
      throw Error(MLPT_INVALID_ARGUMENT, "metric " + metric + ": invalid label name '" + name + "'");
    out += (out.size() > 1 ? "," : "") + name + "=\"" + escaped(value, true) + "\"";
  }
  return out + "}";
}

std::string number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char b[32];
  std::snprintf(b, sizeof b, "%.17g", v);
  return b;
}

}  // namespace

PrometheusMetrics::Family& PrometheusMetrics::family(const std::string& name, Type type,
                                                     const std::string& help) {
  if (!valid_name(name)) throw Error(MLPT_INVALID_ARGUMENT, "invalid metric name '" + name + "'");
  return families_.try_emplace(name, Family{type, help, {}}).first->second;
}

void PrometheusMetrics::set(const std::string& name, Type type, const std::string& help, double value,
                            const Labels& labels) {
  std::lock_guard lock(mutex_);
  set_locked(name, type, help, value, labels);
}

void PrometheusMetrics::add(const std::string& name, const std::string& help, double delta,
                            const Labels& labels) {
  std::lock_guard lock(mutex_);
  add_locked(name, help, delta, labels);
}

void PrometheusMetrics::set_locked(const std::string& name, Type type, const std::string& help, double value,
                                   const Labels& labels) {
  family(name, type, help).samples[label_set(name, labels)] = value;
}

void PrometheusMetrics::add_locked(const std::string& name, const std::string& help, double delta,
                                   const Labels& labels) {
  family(name, Type::kCounter, help).samples[label_set(name, labels)] += delta;
}

std::string PrometheusMetrics::text() const {
  std::lock_guard lock(mutex_);
  std::string out;
  for (const auto& [name, f] : families_) {
    out += "# HELP " + name + " " + escaped(f.help, false) + "\n";
    out += "# TYPE " + name + (f.type == Type::kCounter ? " counter\n" : " gauge\n");
    for (const auto& [labels, value] : f.samples) out += name + labels + " " + number(value) + "\n";
  }
  return out;
}

}  // namespace mlpt::observe
