// An engine behind an HTTP API on one address: vLLM's OpenAI-compatible completions with token ids
// (/v1/completions, /v1/models, /health), vLLM's RL control endpoints (/pause, /resume,
// /is_paused, /abort_requests) and SGLang's (/pause_generation, /continue_generation,
// /abort_request, /update_weights_from_disk). Each request runs on one of `threads` server threads
// while the engine batches them; see core/serve/completion_api.hpp for the schema.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>

#include "core/components/instances.hpp"
#include "core/serve/completion_api.hpp"

namespace httplib {
class Server;
}

namespace mlpt::serve {

struct ServeOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // 0: a free port chosen by the kernel (see EngineServer::port)
  int threads = 64;  // concurrent HTTP requests (each generation holds one while it runs)
  std::string model_name = "mlpt";
};

class EngineServer {
 public:
  // Binds the address (throws mlpt::Error naming it when it cannot); serving starts with run().
  EngineServer(components::Engine& engine, ServeOptions options);
  ~EngineServer();
  EngineServer(const EngineServer&) = delete;
  EngineServer& operator=(const EngineServer&) = delete;

  int port() const { return port_; }
  std::string url() const;
  void run();   // serves until stop(); returns then
  void stop();  // thread-safe; any thread

 private:
  void install_routes();
  void abort(const std::string& request_id);
  std::string pause(const std::string& mode);  // "keep", "wait" or "abort"; returns the status text
  void resume();
  std::string update_weights(const std::string& path, uint64_t version);

  components::Engine& engine_;
  ServeOptions options_;
  ServedModel model_;
  std::unique_ptr<httplib::Server> http_;
  int port_ = 0;

  std::atomic<uint64_t> next_id_{1};
  std::mutex mutex_;
  struct Running {
    uint64_t id;                // the engine's request id
    bool submitted = false;     // the engine has it (a cancel reaches it)
    bool abort_wanted = false;  // aborted before it was submitted: cancelled right after
  };
  std::unordered_map<std::string, Running> running_;  // by the caller's request_id
  std::set<std::string> aborted_early_;  // aborted before they arrived (an abort can overtake its request)
  std::atomic<bool> paused_{false};
  std::mutex control_;  // one pause/resume/weight update at a time
};

}  // namespace mlpt::serve
