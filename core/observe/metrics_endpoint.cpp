#include "core/observe/metrics_endpoint.hpp"

#include <httplib.h>

#include "core/error.hpp"

namespace mlpt::observe {

MetricsEndpoint::MetricsEndpoint(const PrometheusMetrics& metrics, int port, const std::string& host)
    : http_(std::make_unique<httplib::Server>()), port_(port) {
  http_->new_task_queue = [] { return new httplib::ThreadPool(2); };  // scrapes are rare and small
  http_->Get("/metrics", [&metrics](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics.text(), "text/plain; version=0.0.4; charset=utf-8");
  });
  if (!http_->bind_to_port(host, port))
    throw Error(MLPT_UNAVAILABLE, "[run] metrics_port: cannot listen on " + host + ":" +
                                      std::to_string(port) + " (is the port taken?)");
  thread_ = std::thread([this] { http_->listen_after_bind(); });
}

MetricsEndpoint::~MetricsEndpoint() {
  http_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace mlpt::observe
