#include "server_connection.hpp"

#include <signal.h>

#include <chrono>
#include <cmath>
#include <cstdio>

#include <httplib.h>
#include <mlpt/sdk.hpp>

namespace mlpt::engine_http {
namespace {

std::chrono::microseconds micros(double seconds) { return std::chrono::microseconds(static_cast<int64_t>(seconds * 1e6)); }

std::string seconds_text(double s) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", s);
  return text;
}

std::string text_at(const nlohmann::json& j, const char* key) {
  if (!j.is_object()) return {};
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// While it lives, a write to a connection the server has closed fails with EPIPE instead of
// killing the process with SIGPIPE (the HTTP library sends without MSG_NOSIGNAL, and the host's
// signal dispositions are not a plugin's to change): SIGPIPE is blocked in this thread, and one
// raised meanwhile is taken before the old mask returns.
class NoSigpipe {
 public:
  NoSigpipe() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
  }
  ~NoSigpipe() {
    if (sigismember(&old_, SIGPIPE)) return;  // blocked already: leave it as it was
    sigset_t pending;
    sigpending(&pending);
    if (sigismember(&pending, SIGPIPE)) {
      const timespec now{0, 0};
      sigtimedwait(&pipe_, nullptr, &now);
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  NoSigpipe(const NoSigpipe&) = delete;
  NoSigpipe& operator=(const NoSigpipe&) = delete;

 private:
  sigset_t pipe_, old_;
};

}  // namespace

ServerConnection::ServerConnection(std::string url, double connect_timeout_s)
    : url_(std::move(url)), connect_timeout_s_(connect_timeout_s), client_(std::make_unique<httplib::Client>(url_)) {
  client_->set_keep_alive(true);
  client_->set_tcp_nodelay(true);  // a request is one write: do not hold it for an ACK (Nagle)
  client_->set_connection_timeout(micros(connect_timeout_s_));
  client_->set_write_timeout(micros(connect_timeout_s_));
}

ServerConnection::~ServerConnection() = default;

nlohmann::json ServerConnection::get(const std::string& path, Deadline deadline) { return call("GET", path, nullptr, deadline); }

nlohmann::json ServerConnection::post(const std::string& path, const nlohmann::json& body, Deadline deadline) {
  return call("POST", path, &body, deadline);
}

void ServerConnection::interrupt() { client_->stop(); }

nlohmann::json ServerConnection::call(const char* method, const std::string& path, const nlohmann::json* body, Deadline deadline) {
  using sdk::Error;
  const std::string what = std::string("engine http: ") + method + " " + url_ + path;
  client_->set_read_timeout(micros(deadline.seconds));
  const auto start = std::chrono::steady_clock::now();
  NoSigpipe no_sigpipe;
  httplib::Result result = body ? client_->Post(path, body->dump(), "application/json") : client_->Get(path);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!result) {
    switch (result.error()) {
      case httplib::Error::Connection:
        throw Error(MLPT_UNAVAILABLE, what + ": cannot connect (is the server running and listening there?)");
      case httplib::Error::ConnectionTimeout:
        throw Error(MLPT_DEADLINE_EXCEEDED, what + ": no connection within connect_timeout_s = " + seconds_text(connect_timeout_s_) + " s");
      case httplib::Error::Read:
        if (took >= deadline.seconds * 0.99)
          throw Error(MLPT_DEADLINE_EXCEEDED, what + ": no response within " + deadline.setting + " = " + seconds_text(deadline.seconds) + " s");
        throw Error(MLPT_UNAVAILABLE, what + ": the server closed the connection after " + seconds_text(std::round(took * 10) / 10) +
                                          " s without answering (did it stop?)");
      case httplib::Error::Write:
        throw Error(MLPT_UNAVAILABLE, what + ": the request could not be sent (the server closed the connection)");
      case httplib::Error::Canceled:
        throw Error(MLPT_CANCELLED, what + ": interrupted");
      default:
        throw Error(MLPT_UNAVAILABLE, what + ": " + httplib::to_string(result.error()));
    }
  }
  auto reply = nlohmann::json::parse(result->body, nullptr, false);
  if (result->status != 200) {
    // vLLM: {"error": {"message"}} (older: {"message"}); SGLang: {"message"}; FastAPI: {"detail"}.
    std::string message = result->body.substr(0, 500);
    if (auto m = text_at(reply.is_object() ? reply.value("error", nlohmann::json()) : nlohmann::json(), "message"); !m.empty()) message = m;
    else if (auto m2 = text_at(reply, "message"); !m2.empty()) message = m2;
    else if (reply.is_object() && reply.contains("detail")) message = reply["detail"].dump();
    const mlpt_error_code code = result->status == 404 ? MLPT_NOT_FOUND
                                 : result->status == 503 ? MLPT_UNAVAILABLE
                                 : result->status < 500  ? MLPT_INVALID_ARGUMENT
                                                         : MLPT_INTERNAL;
    throw Error(code, what + ": HTTP " + std::to_string(result->status) + ": " + message);
  }
  if (reply.is_discarded() && !result->body.empty()) throw Error(MLPT_INTERNAL, what + ": the answer is not JSON: " + result->body.substr(0, 200));
  return reply.is_discarded() ? nlohmann::json::object() : reply;
}

}  // namespace mlpt::engine_http
