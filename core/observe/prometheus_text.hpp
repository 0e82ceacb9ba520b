// The run's live numbers in Prometheus's text exposition format (version 0.0.4): metric families,
// each with a HELP and TYPE line and one sample per label set. The run sets values as they change;
// the /metrics endpoint renders them when scraped.
#pragma once

#include <map>
#include <mutex>
#include <string>

namespace mlpt::observe {

class PrometheusMetrics {
 public:
  enum class Type { kGauge, kCounter };
  using Labels = std::map<std::string, std::string>;

  // Sets the sample of `name` with `labels`. A family's help and type come from its first set; a
  // name or label name outside [a-zA-Z_:][a-zA-Z0-9_:]* is an error. Thread-safe.
  void set(const std::string& name, Type type, const std::string& help, double value,
           const Labels& labels = {});
  // Adds `delta` to a counter's sample (created at 0).
  void add(const std::string& name, const std::string& help, double delta, const Labels& labels = {});
  std::string text() const;  // the exposition, families sorted by name

  // Sets and adds that a scrape sees all together or not at all (one step's samples): the metrics
  // stay locked while the batch lives. Call only the batch's set and add meanwhile.
  class Batch {
   public:
    void set(const std::string& name, Type type, const std::string& help, double value,
             const Labels& labels = {}) {
      metrics_.set_locked(name, type, help, value, labels);
    }
    void add(const std::string& name, const std::string& help, double delta, const Labels& labels = {}) {
      metrics_.add_locked(name, help, delta, labels);
    }

   private:
    friend class PrometheusMetrics;
    explicit Batch(PrometheusMetrics& metrics) : metrics_(metrics), lock_(metrics.mutex_) {}
    PrometheusMetrics& metrics_;
    std::lock_guard<std::mutex> lock_;
  };
  Batch batch() { return Batch(*this); }

 private:
  struct Family {
    Type type;
    std::string help;
    std::map<std::string, double> samples;  // by the rendered label set, e.g. {worker="0"}
  };
  Family& family(const std::string& name, Type type, const std::string& help);
  void set_locked(const std::string& name, Type type, const std::string& help, double value,
                  const Labels& labels);  // the caller holds mutex_
  void add_locked(const std::string& name, const std::string& help, double delta, const Labels& labels);

  mutable std::mutex mutex_;
  std::map<std::string, Family> families_;
};

}  // namespace mlpt::observe
