// One keep-alive HTTP connection to the server, for JSON requests with a deadline. Every failure is
// an mlpt::sdk::Error that names the method, the URL and what went wrong: the server cannot be
// reached (MLPT_UNAVAILABLE), did not answer in time (MLPT_DEADLINE_EXCEEDED, naming the setting),
// closed the connection (MLPT_UNAVAILABLE), or answered with an HTTP error (its message).
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

namespace httplib {
class Client;
}

namespace mlpt::engine_http {

// How long a call may take, and the setting that says so (named in the error).
struct Deadline {
  double seconds;
  const char* setting;
};

class ServerConnection {
 public:
  ServerConnection(std::string url, double connect_timeout_s);
  ~ServerConnection();
  ServerConnection(const ServerConnection&) = delete;
  ServerConnection& operator=(const ServerConnection&) = delete;

  // `path` may carry a query ("/pause?mode=wait"). Not thread-safe: one call at a time.
  nlohmann::json get(const std::string& path, Deadline deadline);
  nlohmann::json post(const std::string& path, const nlohmann::json& body, Deadline deadline);
  // Breaks off the call in progress (it fails as cancelled). Thread-safe.
  void interrupt();
  const std::string& url() const { return url_; }

 private:
  nlohmann::json call(const char* method, const std::string& path, const nlohmann::json* body, Deadline deadline);

  std::string url_;
  double connect_timeout_s_;
  std::unique_ptr<httplib::Client> client_;
};

}  // namespace mlpt::engine_http
