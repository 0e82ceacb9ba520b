// `mlpt serve CONFIG.toml [--host H] [--port N] [--port-file PATH] [--threads N] [--model-name NAME]`:
// the config's engine (its [components.engine] table, any plugin) behind the OpenAI-compatible HTTP
// API, until SIGINT or SIGTERM. Port 0 takes a free port; --port-file receives the port once it
// listens (for scripts and tests that start a server and then talk to it).
#include <csignal>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

#include "core/cli/args.hpp"
#include "core/cli/command.hpp"
#include "core/plugin/component_set.hpp"
#include "core/plugin/host_services.hpp"
#include "core/run/run_config.hpp"
#include "core/serve/engine_server.hpp"

namespace mlpt::cli {
namespace {

int positive(const std::string& text, const char* option, int minimum) {
  size_t used = 0;
  int v = -1;
  try {
    v = std::stoi(text, &used);
  } catch (const std::exception&) {
  }
  if (used != text.size() || v < minimum) throw Error(std::string("option ") + option + " must be an integer >= " + std::to_string(minimum) + ", got '" + text + "'");
  return v;
}

int serve(const std::vector<std::string>& argv) {
  Args args(argv, {}, {"--host", "--port", "--port-file", "--threads", "--model-name"});
  const auto config = run::read_run_config(args.positional(0, "CONFIG.toml"));
  std::vector<config::ComponentConfig> engine_only;
  for (const auto& c : config.components)
    if (c.kind == MLPT_COMPONENT_ENGINE) engine_only.push_back(c);
  if (engine_only.empty()) throw Error(config.file.string() + " has no [components.engine] table to serve");
  serve::ServeOptions options;
  options.host = args.option_or("--host", options.host);
  options.port = positive(args.option_or("--port", "0"), "--port", 0);
  options.threads = positive(args.option_or("--threads", std::to_string(options.threads)), "--threads", 2);
  options.model_name = args.option_or("--model-name", config.run.name.empty() ? options.model_name : config.run.name);

  // SIGINT/SIGTERM are taken by one thread (sigwait) that stops the server; every other thread,
  // the engine's included, is created with them blocked.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  // A client that goes away mid-answer is that request's end, not the server's.
  std::signal(SIGPIPE, SIG_IGN);

  plugin::HostServices host;
  plugin::ComponentSet set(engine_only, host);
  components::Engine engine(set.component(MLPT_COMPONENT_ENGINE), set.settings(MLPT_COMPONENT_ENGINE));
  serve::EngineServer server(engine, options);
  if (auto port_file = args.option("--port-file")) {  // written whole (rename), so a reader never sees half
    const std::string tmp = *port_file + ".tmp";
    std::ofstream(tmp) << server.port() << "\n";
    std::filesystem::rename(tmp, *port_file);
  }
  std::cout << "mlpt serve: engine " << set.component(MLPT_COMPONENT_ENGINE).name << " as model \"" << options.model_name
            << "\" at " << server.url() << " (/v1/completions, /v1/models; Ctrl-C stops)" << std::endl;
  std::thread stopper([&] {
    int signal = 0;
    sigwait(&stop_signals, &signal);
    server.stop();
  });
  server.run();
  pthread_kill(stopper.native_handle(), SIGTERM);  // run() ended on its own: end the waiting thread too
  stopper.join();
  std::cout << "mlpt serve: stopped" << std::endl;
  return 0;
}

}  // namespace

MLPT_COMMAND("serve", "CONFIG.toml [--host 127.0.0.1] [--port 0] [--port-file PATH] [--threads 64] [--model-name NAME]",
             "serve the config's engine over an OpenAI-compatible HTTP API (vLLM/SGLang schemas)", &serve,
             "The engine of CONFIG.toml's [components.engine] answers POST /v1/completions with token ids\n"
             "(prompt as token ids; token_ids, logprobs and routed_experts back), GET /v1/models, GET /health,\n"
             "and the control endpoints of vLLM (/pause, /resume, /is_paused, /abort_requests) and SGLang\n"
             "(/pause_generation, /continue_generation, /abort_request, /update_weights_from_disk).\n"
             "It listens on loopback unless --host says otherwise; --port 0 (the default) takes a free port,\n"
             "which --port-file receives. Each request in progress holds one of --threads (a request held by a\n"
             "paused engine too): keep it above the clients' connections so control calls get through.\n"
             "SIGINT or SIGTERM stop it (exit 0).");

}  // namespace mlpt::cli
