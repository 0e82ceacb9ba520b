// The HTTP engine (plugins/engine_http) against a real `mlpt serve` of the tiny reference engine on
// loopback. The in-process reference engine is the oracle: the same request with the same seed must
// give the same tokens, logprobs and routed experts over HTTP. Failures must end with an error that
// names the server and the cause, within the configured time.
#include <catch2/catch.hpp>

#include <netinet/in.h>
#include <sys/socket.h>

#include <future>

#include <httplib.h>

#include "core/components/instances.hpp"
#include "core/plugin/component_set.hpp"
#include "core/plugin/host_services.hpp"
#include "core/serve/weights_from_disk.hpp"
#include "tests/e2e/mlpt_serve.hpp"
#include "tests/support/test_util.hpp"

using namespace mlpt;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

fs::path test_dir(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("mlpt-engine-http-" + name + "-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// One engine component loaded from a plugin with settings, as a run loads it.
struct LoadedEngine {
  plugin::HostServices host;
  std::unique_ptr<plugin::ComponentSet> set;
  std::unique_ptr<components::Engine> engine;
  LoadedEngine(const std::string& plugin, const std::string& name, json settings) {
    setenv("MLPT_PLUGIN_PATH", MLPT_PLUGIN_DIR, 1);
    set = std::make_unique<plugin::ComponentSet>(
        std::vector<config::ComponentConfig>{{MLPT_COMPONENT_ENGINE, plugin, name, std::move(settings), "test"}}, host);
    engine = std::make_unique<components::Engine>(set->component(MLPT_COMPONENT_ENGINE), set->settings(MLPT_COMPONENT_ENGINE));
  }
};

std::string tiny_checkpoint() {
  const std::string dir = std::string(MLPT_CACHE_DIR) + "/models/tiny";
  if (!fs::exists(dir + "/config.json")) FAIL("missing " << dir << ": run scripts/prepare-tiny.sh");
  return dir;
}

LoadedEngine reference_engine() { return LoadedEngine("libmlpt_reference.so", "qwen35_cpu", {{"checkpoint", tiny_checkpoint()}}); }

LoadedEngine http_engine(const std::string& url, json more = json::object()) {
  more["url"] = url;
  return LoadedEngine("libmlpt_engine_http.so", "http", std::move(more));
}

struct Server {
  fs::path dir;
  std::unique_ptr<e2e::ServedEngine> served;
  explicit Server(const std::string& name) : dir(test_dir(name)) {
    tiny_checkpoint();
    served = std::make_unique<e2e::ServedEngine>(e2e::write_tiny_config(dir, {}), dir / "serve");
  }
  std::string url() const { return served->url(); }
};

std::vector<int32_t> prompt_tokens() {
  std::vector<int32_t> p;
  for (int i = 0; i < 12; ++i) p.push_back((37 * i + 11) % 256);
  return p;
}

components::GenerateRequest request(uint64_t id, const std::vector<int32_t>* tokens, int32_t max_new, uint64_t seed) {
  components::GenerateRequest r;
  r.request_id = id, r.tokens = tokens, r.max_new_tokens = max_new;
  r.sampling = mlpt_sampling_params{MLPT_SAMPLING_PARAMS_STRUCT_SIZE, 1.0f, 1.0f, 0, seed};
  return r;
}

}  // namespace

TEST_CASE("over HTTP the engine gives the in-process engine's tokens, logprobs and routed experts, before and after a weight refresh") {
  Server server("same");
  auto http = http_engine(server.url());
  auto local = reference_engine();
  const auto info = http.engine->model_info();
  const auto local_info = local.engine->model_info();
  CHECK(info.vocab_size == local_info.vocab_size);
  CHECK(info.num_moe_layers == local_info.num_moe_layers);
  CHECK(info.experts_per_token == local_info.experts_per_token);
  CHECK(info.max_sequence_length == local_info.max_sequence_length);
  REQUIRE(info.num_moe_layers > 0);

  const auto prompt = prompt_tokens();
  auto compare = [&](uint64_t version) {
    for (uint64_t seed : {1u, 42u, 777u}) {
      auto r = request(seed, &prompt, 16, seed);
      r.record_routed_experts = true;
      r.routed_experts_from = 4;
      r.stop_tokens = {prompt[3]};
      const auto over_http = http.engine->generate(r);
      const auto in_process = local.engine->generate(r);
      INFO("seed " << seed);
      REQUIRE(!over_http.tokens.empty());
      CHECK(over_http.tokens == in_process.tokens);
      CHECK(over_http.logprobs == in_process.logprobs);  // exact: JSON numbers round-trip a float
      CHECK(over_http.routed_experts == in_process.routed_experts);
      CHECK(over_http.routed_experts.size() ==
            (prompt.size() + over_http.tokens.size() - 4) * static_cast<size_t>(info.num_moe_layers * info.experts_per_token));
      CHECK(over_http.finish_reason == in_process.finish_reason);
      CHECK(over_http.weight_version == version);
    }
  };
  compare(0);

  // Weights through the server's /update_weights_from_disk: the checkpoint's own tensors as version 1.
  serve::WeightsFromDisk weights(tiny_checkpoint() + "/model.safetensors");
  for (auto* e : {http.engine.get(), local.engine.get()}) {
    e->pause();
    e->load_weights(1, weights.tensors().data(), weights.tensors().size());
    e->resume();
  }
  CHECK(http.engine->model_info().weight_version == 1);
  compare(1);
  // A version that does not increase is refused, naming both versions.
  http.engine->pause();
  CHECK_THAT(mlpt_test::error_of([&] { http.engine->load_weights(1, weights.tensors().data(), weights.tensors().size()); }),
             Catch::Contains("not greater than the loaded 1"));
  http.engine->resume();
}

TEST_CASE("mlpt serve answers bad requests with vLLM's error body naming the field") {
  Server server("bad");
  httplib::Client client(server.url());
  auto post = [&](const std::string& path, const json& body) {
    auto res = client.Post(path.c_str(), body.dump(), "application/json");
    REQUIRE(res);
    return std::make_pair(res->status, json::parse(res->body));
  };
  auto [status, body] = post("/v1/completions", {{"prompt", "text, not token ids"}});
  CHECK(status == 400);
  CHECK_THAT(body["error"]["message"].get<std::string>(), Catch::Contains("\"prompt\"") && Catch::Contains("token ids"));
  std::tie(status, body) = post("/v1/completions", {{"prompt", {1, 2, 3}}, {"model", "another"}});
  CHECK(status == 404);
  CHECK_THAT(body["error"]["message"].get<std::string>(), Catch::Contains("another"));
  std::tie(status, body) = post("/v1/completions", {{"prompt", {1, 2, 3}}, {"logprobs", 5}});
  CHECK(status == 400);
  CHECK_THAT(body["error"]["message"].get<std::string>(), Catch::Contains("\"logprobs\""));
  std::tie(status, body) = post("/v1/completions", {{"prompt", {1, 999999}}});
  CHECK(status == 400);
  CHECK_THAT(body["error"]["message"].get<std::string>(), Catch::Contains("999999"));
  std::tie(status, body) = post("/update_weights_from_disk", {{"model_path", "/nonexistent/weights"}});
  CHECK(status == 400);
  CHECK(body["success"] == false);
  CHECK_THAT(body["message"].get<std::string>(), Catch::Contains("/nonexistent/weights"));
  // The model list names the served model with its context length, as vLLM does.
  auto models = client.Get("/v1/models");
  REQUIRE(models);
  const auto list = json::parse(models->body);
  CHECK(list["data"][0]["id"] == "tiny");
  CHECK(list["data"][0]["max_model_len"].get<int64_t>() > 0);
}

TEST_CASE("the http engine conforms: mlpt check plugins configs/tiny-http.toml against mlpt serve") {
  Server server("conformance");
  std::string text = e2e::read_text(fs::path(MLPT_SOURCE_DIR) / "configs" / "tiny-http.toml");
  text = std::regex_replace(text, std::regex("\"\\.\\./tasks/"), "\"" + std::string(MLPT_SOURCE_DIR) + "/tasks/");
  std::ofstream(server.dir / "tiny-http.toml") << text;
  const std::string cmd = "MLPT_ENGINE_URL=" + server.url() + " MLPT_CACHE_DIR=" + MLPT_CACHE_DIR + " MLPT_PLUGIN_PATH=" + MLPT_PLUGIN_DIR +
                          " " + MLPT_BIN + " check plugins " + (server.dir / "tiny-http.toml").string() + " --json 2>&1";
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  const int status = pclose(p);
  INFO(out);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  const auto report = json::parse(out.substr(out.find('{')));
  std::set<std::string> passed;
  for (const auto& c : report["checks"])
    if (c["status"] == "pass") {
      const std::string component = c["component"];
      passed.insert(component.substr(0, component.find(' ')) + "/" + c["id"].get<std::string>());
    }
  // The engine's checks, cancel included, and the trainer's weights accepted through the server.
  for (const char* id : {"same_seed_same_tokens", "logprobs_returned", "concurrent_requests_complete", "cancel"})
    CHECK(passed.count(std::string("engine/") + id));
  CHECK(passed.count("trainer/weight_export_complete"));
}

TEST_CASE("no server: creating the http engine fails within startup_timeout_s, naming the URL") {
  // A port nobody listens on: bound, then closed.
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  const std::string url = "http://127.0.0.1:" + std::to_string(ntohs(a.sin_port));
  close(fd);
  const auto start = std::chrono::steady_clock::now();
  const std::string error = mlpt_test::error_of([&] { http_engine(url, {{"startup_timeout_s", 1}}); });
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK_THAT(error, Catch::Contains(url + "/health") && Catch::Contains("cannot connect") && Catch::Contains("startup_timeout_s"));
  CHECK(took < 15);
}

TEST_CASE("a paused server answers no completion: the request fails after request_timeout_s, naming it and the URL") {
  Server server("slow");
  auto http = http_engine(server.url(), {{"request_timeout_s", 1}});
  httplib::Client control(server.url());
  REQUIRE(control.Post("/pause?mode=wait", "", "application/json")->status == 200);
  const auto prompt = prompt_tokens();
  const auto start = std::chrono::steady_clock::now();
  const std::string error = mlpt_test::error_of([&] { http.engine->generate(request(1, &prompt, 8, 1)); });
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK_THAT(error, Catch::Contains(server.url() + "/v1/completions") && Catch::Contains("request_timeout_s = 1 s"));
  CHECK(took < 15);
  REQUIRE(control.Post("/resume", "", "application/json")->status == 200);
  CHECK(!http.engine->generate(request(2, &prompt, 8, 1)).tokens.empty());  // the engine still works
}

TEST_CASE("pause holds submitted requests until resume, cancel ends a held one") {
  Server server("pause");
  auto http = http_engine(server.url());
  const auto prompt = prompt_tokens();
  http.engine->pause();
  CHECK_THAT(mlpt_test::error_of([&] { http.engine->pause(); }), Catch::Contains("already paused"));
  std::promise<components::Generation> held, cancelled;
  auto done = [](std::promise<components::Generation>& p) {
    return [&p](components::Generation&& g, std::exception_ptr e) { e ? p.set_exception(e) : p.set_value(std::move(g)); };
  };
  http.engine->submit(request(1, &prompt, 8, 1), done(held));
  http.engine->submit(request(2, &prompt, 8, 2), done(cancelled));
  auto held_result = held.get_future(), cancelled_result = cancelled.get_future();
  CHECK(held_result.wait_for(std::chrono::milliseconds(500)) == std::future_status::timeout);
  http.engine->cancel(2);
  REQUIRE(cancelled_result.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
  CHECK(cancelled_result.get().finish_reason == MLPT_FINISH_CANCELLED);
  http.engine->resume();
  REQUIRE(held_result.wait_for(std::chrono::seconds(30)) == std::future_status::ready);
  CHECK(!held_result.get().tokens.empty());
}

TEST_CASE("a server killed mid-request: every request in flight fails promptly with the URL and the cause") {
  Server server("killed");
  auto http = http_engine(server.url(), {{"connections", 4}});
  httplib::Client control(server.url());
  REQUIRE(control.Post("/pause?mode=wait", "", "application/json")->status == 200);  // requests reach it and wait there
  const auto prompt = prompt_tokens();
  std::mutex m;
  std::vector<std::string> errors;
  std::condition_variable cv;
  for (uint64_t i = 0; i < 6; ++i)
    http.engine->submit(request(i, &prompt, 8, i), [&](components::Generation&&, std::exception_ptr e) {
      std::lock_guard l(m);
      errors.push_back(e ? mlpt_test::error_of([&] { std::rethrow_exception(e); }) : "");
      cv.notify_all();
    });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  server.served->kill_now();
  std::unique_lock l(m);
  REQUIRE(cv.wait_for(l, std::chrono::seconds(30), [&] { return errors.size() == 6; }));
  for (const auto& e : errors) {
    INFO(e);
    CHECK_THAT(e, Catch::Contains(server.url()) && (Catch::Contains("closed the connection") || Catch::Contains("cannot connect")));
  }
}

TEST_CASE("the http engine's settings: unknown keys and a missing url are refused by name") {
  CHECK_THAT(mlpt_test::error_of([] { LoadedEngine("libmlpt_engine_http.so", "http", {{"url", "http://127.0.0.1:1"}, {"timeout", 5}}); }),
             Catch::Contains("unknown setting \"timeout\"") && Catch::Contains("request_timeout_s"));
  CHECK_THAT(mlpt_test::error_of([] { LoadedEngine("libmlpt_engine_http.so", "http", json::object()); }), Catch::Contains("\"url\"") && Catch::Contains("required"));
  CHECK_THAT(mlpt_test::error_of([] { LoadedEngine("libmlpt_engine_http.so", "http", {{"url", "127.0.0.1:8000"}}); }), Catch::Contains("http://"));
  CHECK_THAT(mlpt_test::error_of([] { LoadedEngine("libmlpt_engine_http.so", "http", {{"url", "http://127.0.0.1:1"}, {"connections", 0}}); }),
             Catch::Contains("\"connections\" must be an integer >= 1"));
}
