// The coordinator's Prometheus endpoint: GET /metrics on a port of its own (off unless the run
// config sets [run] metrics_port), serving PrometheusMetrics' text on a thread of its own.
#pragma once

#include <memory>
#include <string>
#include <thread>

#include "core/observe/prometheus_text.hpp"

namespace httplib {
class Server;
}

namespace mlpt::observe {

class MetricsEndpoint {
 public:
  // Listens on `host`:`port` (all interfaces by default: Prometheus scrapes from its own host);
  // throws naming the address when it cannot. `metrics` must outlive the endpoint.
  MetricsEndpoint(const PrometheusMetrics& metrics, int port, const std::string& host = "0.0.0.0");
  ~MetricsEndpoint();  // stops serving
  MetricsEndpoint(const MetricsEndpoint&) = delete;
  MetricsEndpoint& operator=(const MetricsEndpoint&) = delete;
  int port() const { return port_; }

 private:
  std::unique_ptr<httplib::Server> http_;
  int port_;
  std::thread thread_;
};

}  // namespace mlpt::observe
