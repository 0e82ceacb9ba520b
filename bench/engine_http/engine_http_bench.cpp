// The HTTP engine path against the in-process engine, in the same run: the tiny reference engine
// called directly (components::Engine), and the same engine behind an EngineServer on loopback
// (as `mlpt serve` runs it, here in a thread of this process) reached through plugins/engine_http.
// Both generate the same requests (a 32-token prompt, 1 or 16 new tokens, the same seeds):
//   - one request at a time: the median time per request and the HTTP overhead (difference and
//     ratio), beside a bare HTTP round trip (GET /health) on the same server;
//   - 32 bare round trips at once, for what HTTP alone costs a batch;
//   - 32 at once: the batch's median wall time and its ratio.
// The two paths alternate call by call, so a busy machine slows both alike.
// Needs ${MLPT_CACHE_DIR}/models/tiny (scripts/prepare-tiny.sh). Usage: bench_engine_http [requests]
#include <algorithm>
#include <chrono>
#include <csignal>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include <httplib.h>

#include "bench_cache.hpp"  // bench/support
#include "core/components/instances.hpp"
#include "core/plugin/component_set.hpp"
#include "core/plugin/host_services.hpp"
#include "core/serve/engine_server.hpp"

using namespace mlpt;
using Clock = std::chrono::steady_clock;

namespace {

std::unique_ptr<components::Engine> load(plugin::HostServices& host, std::unique_ptr<plugin::ComponentSet>& set, const std::string& plugin,
                                         const std::string& name, nlohmann::json settings) {
  set = std::make_unique<plugin::ComponentSet>(
      std::vector<config::ComponentConfig>{{MLPT_COMPONENT_ENGINE, plugin, name, std::move(settings), "bench"}}, host);
  return std::make_unique<components::Engine>(set->component(MLPT_COMPONENT_ENGINE), set->settings(MLPT_COMPONENT_ENGINE));
}

components::GenerateRequest request(uint64_t id, const std::vector<int32_t>* prompt, int32_t new_tokens) {
  components::GenerateRequest r;
  r.request_id = id, r.tokens = prompt, r.max_new_tokens = new_tokens;
  r.sampling = mlpt_sampling_params{MLPT_SAMPLING_PARAMS_STRUCT_SIZE, 1.0f, 1.0f, 0, id};
  return r;
}

double median(std::vector<double> s) {
  std::nth_element(s.begin(), s.begin() + static_cast<std::ptrdiff_t>(s.size() / 2), s.end());
  return s[s.size() / 2];
}

// Times `in_process(i)` and `over_http(i)` n times each, alternating so both see the same load of
// a shared machine; returns their medians (other work lands in the tails, not in the answer).
template <class A, class B>
std::pair<double, double> alternate(int n, A&& in_process, B&& over_http) {
  in_process(0), over_http(0);  // warm
  std::vector<double> a, b;
  for (int i = 1; i <= n; ++i) {
    auto t0 = Clock::now();
    in_process(i);
    a.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    t0 = Clock::now();
    over_http(i);
    b.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return {median(a), median(b)};
}

void one(components::Engine& e, const std::vector<int32_t>& prompt, int32_t new_tokens, int i) {
  e.generate(request(static_cast<uint64_t>(i + 10), &prompt, new_tokens));
}

void batch(components::Engine& e, const std::vector<int32_t>& prompt, int32_t new_tokens, int n) {
  std::mutex m;
  std::condition_variable cv;
  int done = 0;
  for (int i = 0; i < n; ++i)
    e.submit(request(static_cast<uint64_t>(1000 + i), &prompt, new_tokens), [&](components::Generation&&, std::exception_ptr err) {
      if (err) std::rethrow_exception(err);
      std::lock_guard l(m);
      ++done;
      cv.notify_all();
    });
  std::unique_lock l(m);
  cv.wait(l, [&] { return done == n; });
}

}  // namespace

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 200;
  const std::string checkpoint = (mlpt::bench::cache_dir() / "models" / "tiny").string();
  if (!std::filesystem::exists(checkpoint + "/config.json")) {
    std::fprintf(stderr, "bench_engine_http: no tiny model at %s (run scripts/prepare-tiny.sh)\n", checkpoint.c_str());
    return 2;
  }
  setenv("MLPT_PLUGIN_PATH", MLPT_PLUGIN_DIR, 1);
  std::signal(SIGPIPE, SIG_IGN);  // the server in this process outlives a client gone mid-answer
  plugin::HostServices host;
  std::unique_ptr<plugin::ComponentSet> local_set, served_set, http_set;
  auto local = load(host, local_set, "libmlpt_reference.so", "qwen35_cpu", {{"checkpoint", checkpoint}});
  auto served = load(host, served_set, "libmlpt_reference.so", "qwen35_cpu", {{"checkpoint", checkpoint}});
  serve::EngineServer server(*served, {});
  std::thread serving([&] { server.run(); });
  auto http = load(host, http_set, "libmlpt_engine_http.so", "http", {{"url", server.url()}, {"connections", 32}});

  std::vector<int32_t> prompt;
  for (int i = 0; i < 32; ++i) prompt.push_back((37 * i + 11) % 256);
  std::printf("bench_engine_http: tiny reference engine, in-process vs plugins/engine_http -> %s (loopback)\n", server.url().c_str());
  httplib::Client bare(server.url());
  bare.set_tcp_nodelay(true);
  const auto [nothing, round_trip] = alternate(n, [](int) {}, [&](int) { bare.Get("/health"); });
  std::printf("bare HTTP round trip on loopback (GET /health): %.1f us (median of %d)\n", round_trip * 1e6, n);
  std::vector<std::unique_ptr<httplib::Client>> clients;
  for (int i = 0; i < 32; ++i) {
    clients.push_back(std::make_unique<httplib::Client>(server.url()));
    clients.back()->set_tcp_nodelay(true);
    clients.back()->set_keep_alive(true);
  }
  const auto [none, bare_batch] = alternate(std::max(n / 20, 5), [](int) {}, [&](int) {
    std::vector<std::thread> threads;
    for (auto& c : clients) threads.emplace_back([&c] { c->Get("/health"); });
    for (auto& t : threads) t.join();
  });
  std::printf("32 bare HTTP round trips at once (a thread each): %.1f ms (median)\n", bare_batch * 1e3);
  std::printf("%-40s %12s %12s %12s %7s\n", "case (medians, alternating)", "in-process", "over HTTP", "overhead", "ratio");
  for (int32_t new_tokens : {1, 16}) {
    auto [a, b] = alternate(n, [&](int i) { one(*local, prompt, new_tokens, i); }, [&](int i) { one(*http, prompt, new_tokens, i); });
    std::printf("%-40s %9.0f us %9.0f us %9.0f us %6.2fx\n", ("1 request at a time, " + std::to_string(new_tokens) + " new token(s)").c_str(),
                a * 1e6, b * 1e6, (b - a) * 1e6, b / a);
  }
  for (int32_t new_tokens : {1, 16}) {
    auto [a, b] = alternate(std::max(n / 20, 5), [&](int) { batch(*local, prompt, new_tokens, 32); }, [&](int) { batch(*http, prompt, new_tokens, 32); });
    std::printf("%-40s %9.1f ms %9.1f ms %9.1f ms %6.2fx\n", ("32 requests at once, " + std::to_string(new_tokens) + " new token(s)").c_str(),
                a * 1e3, b * 1e3, (b - a) * 1e3, b / a);
  }
  http.reset();
  server.stop();
  serving.join();
  return 0;
}
