#include "core/serve/engine_server.hpp"

#include <ctime>
#include <future>

#include <httplib.h>
#include <spdlog/spdlog.h>

#include "core/error.hpp"
#include "core/serve/weights_from_disk.hpp"

namespace mlpt::serve {
namespace {

using nlohmann::json;

int http_status(mlpt_error_code code) {
  switch (code) {
    case MLPT_INVALID_ARGUMENT:
    case MLPT_OUT_OF_RANGE: return 400;
    case MLPT_NOT_FOUND: return 404;
    case MLPT_FAILED_PRECONDITION: return 409;
    case MLPT_UNAVAILABLE: return 503;
    default: return 500;
  }
}

void reply(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(body.dump(), "application/json");
}

// Runs `handler`; any error becomes vLLM's error body with the status its code maps to.
template <class F>
void guarded(httplib::Response& res, F&& handler) {
  try {
    handler();
  } catch (const Error& e) {
    reply(res, http_status(e.code()), error_body(e.what(), http_status(e.code())));
  } catch (const json::exception& e) {
    reply(res, 400, error_body(std::string("the body is not JSON of the expected shape: ") + e.what(), 400));
  } catch (const std::exception& e) {
    reply(res, 500, error_body(e.what(), 500));
  }
}

json body_of(const httplib::Request& req) { return req.body.empty() ? json::object() : json::parse(req.body); }

}  // namespace

EngineServer::EngineServer(components::Engine& engine, ServeOptions options)
    : engine_(engine), options_(std::move(options)), http_(std::make_unique<httplib::Server>()) {
  model_.name = options_.model_name;
  model_.info = engine_.model_info();
  const int threads = std::max(options_.threads, 2);
  http_->new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  http_->set_keep_alive_max_count(1u << 20);  // a client keeps its connection for the whole run
  http_->set_tcp_nodelay(true);               // an answer is one write: do not hold it for an ACK (Nagle)
  install_routes();
  port_ = options_.port == 0 ? http_->bind_to_any_port(options_.host)
                             : (http_->bind_to_port(options_.host, options_.port) ? options_.port : -1);
  if (port_ <= 0)
    throw Error(MLPT_UNAVAILABLE, "mlpt serve: cannot listen on " + options_.host + ":" + std::to_string(options_.port) +
                                      " (in use, or not an address of this machine)");
}

EngineServer::~EngineServer() = default;

std::string EngineServer::url() const { return "http://" + options_.host + ":" + std::to_string(port_); }

void EngineServer::run() { http_->listen_after_bind(); }

void EngineServer::stop() { http_->stop(); }

void EngineServer::install_routes() {
  auto& s = *http_;
  s.Get("/health", [](const httplib::Request&, httplib::Response& res) { res.status = 200; });

  s.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    guarded(res, [&] {
      const auto info = engine_.model_info();
      json model = {{"id", model_.name},
                    {"object", "model"},
                    {"created", static_cast<int64_t>(std::time(nullptr))},
                    {"owned_by", "mlpt"},
                    {"root", model_.name},
                    {"parent", nullptr},
                    {"max_model_len", info.max_sequence_length},
                    // What a token-level client needs that vLLM does not list (mlpt's extension).
                    {"mlpt",
                     {{"vocab_size", info.vocab_size},
                      {"num_moe_layers", info.num_moe_layers},
                      {"experts_per_token", info.experts_per_token},
                      {"weight_version", std::to_string(info.weight_version)}}}};
      reply(res, 200, {{"object", "list"}, {"data", json::array({model})}});
    });
  });

  s.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    guarded(res, [&] {
      CompletionRequest r;
      parse_completion_request(body_of(req), model_, r);
      const uint64_t id = next_id_++;
      r.generate.request_id = id;
      {
        std::lock_guard l(mutex_);
        if (running_.count(r.request_id)) throw Error(MLPT_INVALID_ARGUMENT, "/v1/completions: request_id \"" + r.request_id + "\" is already running");
        if (aborted_early_.erase(r.request_id)) {  // its abort came first: it ends at once, nothing generated
          components::Generation none;
          none.finish_reason = MLPT_FINISH_CANCELLED;
          none.weight_version = engine_.model_info().weight_version;
          return reply(res, 200, completion_response(r, none, model_));
        }
        running_[r.request_id] = {id};
      }
      std::promise<components::Generation> result;
      auto done = result.get_future();
      try {
        engine_.submit(r.generate, [&result](components::Generation&& g, std::exception_ptr e) {
          if (e) result.set_exception(e);
          else result.set_value(std::move(g));
        });
      } catch (...) {
        std::lock_guard l(mutex_);
        running_.erase(r.request_id);
        throw;
      }
      bool cancel_now = false;
      {
        std::lock_guard l(mutex_);
        auto& running = running_[r.request_id];
        running.submitted = true;
        cancel_now = running.abort_wanted;
      }
      if (cancel_now) engine_.cancel(id);
      components::Generation g;
      try {
        g = done.get();
      } catch (...) {
        std::lock_guard l(mutex_);
        running_.erase(r.request_id);
        throw;
      }
      {
        std::lock_guard l(mutex_);
        running_.erase(r.request_id);
      }
      reply(res, 200, completion_response(r, g, model_));
    });
  });

  // vLLM: POST /abort_requests {"request_ids": [...]} (empty or absent: all); SGLang: POST
  // /abort_request {"rid": ..., "abort_all": bool}.
  auto abort_route = [this](const httplib::Request& req, httplib::Response& res, bool sglang) {
    guarded(res, [&] {
      json body = body_of(req);
      std::vector<std::string> ids;
      if (sglang && body.value("rid", json()).is_string()) ids.push_back(body["rid"]);
      if (!sglang && body.value("request_ids", json()).is_array())
        for (const auto& id : body["request_ids"]) ids.push_back(id.get<std::string>());
      if (ids.empty()) {
        std::lock_guard l(mutex_);
        for (const auto& [rid, running] : running_) ids.push_back(rid);
      }
      for (const auto& id : ids) abort(id);
      reply(res, 200, {{"status", "aborted"}, {"aborted", ids.size()}});
    });
  };
  s.Post("/abort_requests", [abort_route](const httplib::Request& q, httplib::Response& r) { abort_route(q, r, false); });
  s.Post("/abort_request", [abort_route](const httplib::Request& q, httplib::Response& r) { abort_route(q, r, true); });

  // vLLM: POST /pause?mode=abort|wait|keep (default abort), /resume, GET /is_paused. SGLang: POST
  // /pause_generation {"mode": "abort"|"retract"|"in_place"}, /continue_generation.
  s.Post("/pause", [this](const httplib::Request& req, httplib::Response& res) {
    guarded(res, [&] { reply(res, 200, {{"status", pause(req.has_param("mode") ? req.get_param_value("mode") : "abort")}}); });
  });
  s.Post("/pause_generation", [this](const httplib::Request& req, httplib::Response& res) {
    guarded(res, [&] { reply(res, 200, {{"status", pause(body_of(req).value("mode", "abort"))}}); });
  });
  auto resume_route = [this](const httplib::Request&, httplib::Response& res) {
    guarded(res, [&] {
      resume();
      reply(res, 200, {{"status", "resumed"}});
    });
  };
  s.Post("/resume", resume_route);
  s.Post("/continue_generation", resume_route);
  s.Get("/is_paused", [this](const httplib::Request&, httplib::Response& res) {
    reply(res, 200, {{"is_paused", paused_.load()}});
  });

  // SGLang: POST /update_weights_from_disk {"model_path", "weight_version", ...} ->
  // {"success", "message", "num_paused_requests"}; 400 with success false when it fails.
  s.Post("/update_weights_from_disk", [this](const httplib::Request& req, httplib::Response& res) {
    try {
      json body = body_of(req);
      if (!body.value("model_path", json()).is_string()) throw Error("\"model_path\" (a string) is required");
      const json v = body.value("weight_version", json());
      uint64_t version = engine_.model_info().weight_version + 1;
      if (v.is_string() && v.get<std::string>().find_first_not_of("0123456789") == std::string::npos && !v.get<std::string>().empty())
        version = std::stoull(v.get<std::string>());
      else if (v.is_string()) throw Error("\"weight_version\" " + v.dump() + " is not a whole number");
      else if (v.is_number_unsigned()) version = v.get<uint64_t>();
      else if (!v.is_null()) throw Error("\"weight_version\" must be a string or an integer");
      reply(res, 200, {{"success", true}, {"message", update_weights(body["model_path"], version)}, {"num_paused_requests", 0}});
    } catch (const std::exception& e) {
      reply(res, 400, {{"success", false}, {"message", std::string("update_weights_from_disk: ") + e.what()}, {"num_paused_requests", 0}});
    }
  });
}

void EngineServer::abort(const std::string& request_id) {
  uint64_t id = 0;
  {
    std::lock_guard l(mutex_);
    auto it = running_.find(request_id);
    if (it == running_.end()) {
      if (aborted_early_.size() > 4096) aborted_early_.clear();  // ids of requests that never came
      aborted_early_.insert(request_id);
      return;
    }
    if (!it->second.submitted) {  // its handler cancels it once submitted
      it->second.abort_wanted = true;
      return;
    }
    id = it->second.id;
  }
  engine_.cancel(id);
}

std::string EngineServer::pause(const std::string& mode) {
  if (mode != "abort" && mode != "wait" && mode != "keep" && mode != "retract" && mode != "in_place")
    throw Error("pause: mode must be abort, wait or keep (vLLM) or retract or in_place (SGLang), got \"" + mode + "\"");
  std::lock_guard c(control_);
  if (paused_) return "paused";
  if (mode == "abort") {
    std::vector<uint64_t> ids;
    {
      std::lock_guard l(mutex_);
      for (const auto& [rid, running] : running_)
        if (running.submitted) ids.push_back(running.id);
    }
    for (uint64_t id : ids) engine_.cancel(id);
  }
  engine_.pause();  // returns once no generation runs; new requests wait
  paused_ = true;
  return "paused";
}

void EngineServer::resume() {
  std::lock_guard c(control_);
  if (!paused_) return;
  engine_.resume();
  paused_ = false;
}

std::string EngineServer::update_weights(const std::string& path, uint64_t version) {
  WeightsFromDisk weights(path);
  std::lock_guard c(control_);
  const bool was_paused = paused_;
  if (!was_paused) engine_.pause();
  try {
    engine_.load_weights(version, weights.tensors().data(), weights.tensors().size());
  } catch (...) {
    if (!was_paused) engine_.resume();
    throw;
  }
  if (!was_paused) engine_.resume();
  spdlog::info("mlpt serve: weight version {} from {} ({} tensors)", version, weights.file(), weights.tensors().size());
  return "weight version " + std::to_string(version) + " loaded from " + weights.file();
}

}  // namespace mlpt::serve
