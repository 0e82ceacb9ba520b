// One process of the distributed tests, started by mpirun (distributed_test.cpp starts it):
//   dist_peer rendezvous OUT_DIR           the MPI key-value store and barrier, seen from each rank
//   dist_peer trainer PLUGIN BATCH SETTINGS [ACTIONS] OUT_DIR
//                                           a trainer group of every rank, each on its share of
//                                           BATCH (JSON), doing ACTIONS in order (comma-separated;
//                                           default "step,export"): step (one train step),
//                                           save=DIR / load=DIR (save_state / load_state), export
//                                           (weights to OUT_DIR/rank<r>.weights, the tensors' names,
//                                           shapes and shard boxes in the report), export=NAME
//                                           (weights to OUT_DIR/rank<r>.NAME.weights), publish=NAME
//                                           (publish_weights into a recording sender: the weights
//                                           sent to rank<r>.NAME.weights, the change list's masks
//                                           to rank<r>.NAME.masks); the ranks of a
//                                           model-parallel group (SETTINGS tensor_parallel ×
//                                           expert_parallel) share one share, as the trainer requires
//   dist_peer engine PLUGIN SETTINGS SCRIPT OUT_DIR
//                                           an engine group of every rank (SETTINGS tensor_parallel ×
//                                           expert_parallel; one rank: an engine alone; the engine
//                                           component MLPT_TEST_ENGINE, qwen35_cpu): rank 0
//                                           generates SCRIPT's requests (JSON) and a session's second
//                                           turn, the others try a request (refused); every rank
//                                           then takes part in a load whose versions disagree and
//                                           one that misses a shard (a group: refused on all),
//                                           fetches checkpoint_b's weights
//                                           (its shards, cut by the in-process transport from a
//                                           one-rank trainer's export) and rank 0 generates again;
//                                           then all load the first checkpoint as whole tensors
//                                           and rank 0 generates a third time
// Each rank writes OUT_DIR/rank<r>.json with what it saw; errors go there too, never lost.
#include <atomic>
#include <cstdlib>
#include <fstream>
#include <future>
#include <iostream>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "batch_file.hpp"
#include "core/components/instances.hpp"
#include "core/dist/mpi/rendezvous.hpp"
#include "core/dist/mpi/session.hpp"
#include "core/error.hpp"
#include "core/plugin/host_services.hpp"
#include "core/plugin/plugin.hpp"
#include "core/rl/batch_share.hpp"
#include "mlpt/sdk/changed_elements.hpp"
#ifdef DIST_PEER_CUDA
#include <cuda_runtime_api.h>
#endif

using nlohmann::json;

namespace {

json rendezvous(mlpt::plugin::Rendezvous& r) {
  const auto& p = r.process();
  const std::string me = std::to_string(p.rank);
  std::atomic<bool> never{false};
  json out = {{"rank", p.rank}, {"world_size", p.world_size}, {"local_rank", p.local_rank}, {"local_size", p.local_size},
              {"node_index", p.node_index}, {"num_nodes", p.num_nodes}, {"role", p.role}};
  r.put("peer/" + me, "hello from " + me);
  r.put("peer/" + me, "hello from " + me);  // the same value again is fine
  try {
    r.put("peer/" + me, "another value");
  } catch (const mlpt::Error& e) {
    out["second_put"] = {{"code", e.code()}, {"message", e.what()}};
  }
  // Every rank reads every other rank's key, put in any order.
  json seen = json::array();
  for (int k = 0; k < p.world_size; ++k) seen.push_back(r.get("peer/" + std::to_string((p.rank + k) % p.world_size), 60000, never));
  out["seen"] = seen;
  r.barrier("after-gets", 60000, never);
  try {
    r.get("never/put", 300, never);
  } catch (const mlpt::Error& e) {
    out["missing"] = {{"code", e.code()}, {"message", e.what()}};
  }
  std::atomic<bool> cancelled{true};
  try {
    r.get("never/put", -1, cancelled);
  } catch (const mlpt::Error& e) {
    out["cancelled"] = {{"code", e.code()}, {"message", e.what()}};
  }
  // A barrier that only rank 0 enters times out there (the others never come).
  if (p.rank == 0) {
    try {
      r.barrier("rank0-alone", 300, never);
    } catch (const mlpt::Error& e) {
      out["lonely_barrier"] = {{"code", e.code()}, {"message", e.what()}};
    }
  }
  r.barrier("end", 60000, never);
  return out;
}

int64_t numel(const DLTensor& t) {
  int64_t n = 1;
  for (int k = 0; k < t.ndim; ++k) n *= t.shape[k];
  return n;
}

// An exported tensor's bytes written to `file`.
void write_tensor(const DLTensor& t, std::ofstream& file) {
  const size_t bytes = static_cast<size_t>(numel(t)) * (t.dtype.bits / 8);
  std::vector<char> host;
  const char* data = static_cast<const char*>(t.data) + t.byte_offset;
  if (t.device.device_type == kDLCUDA) {  // qwen35_cuda's export of a whole model: device memory
#ifdef DIST_PEER_CUDA
    host.resize(bytes);
    if (cudaMemcpy(host.data(), data, bytes, cudaMemcpyDeviceToHost) != cudaSuccess)
      throw mlpt::Error("export: copying a CUDA tensor to the host failed");
    data = host.data();
#else
    throw mlpt::Error("export: a CUDA tensor, and dist_peer was built without CUDA");
#endif
  }
  file.write(data, static_cast<std::streamsize>(bytes));
}

// The sender a publish=NAME action binds (transport.h, Binding): this process's own endpoint, so
// that the test sees what the trainer's publish_weights hands a transport, the change list
// included (a private extension, mlpt/sdk/changed_elements.hpp, that a real transport reads and
// keeps to itself). It writes the tensors' bytes to `weights`, each tensor's mask words to `masks`
// and the send's version and change list's since_version to `out`.
struct RecordingSender {
  std::string weights, masks;
  json out;
  std::string error;

  static mlpt_error* send(mlpt_transport_send_args* a) {
    auto* self = reinterpret_cast<RecordingSender*>(a->transport);
    try {
      std::ofstream weights(self->weights, std::ios::binary), masks(self->masks, std::ios::binary);
      const bool has_chain = MLPT_HAS_FIELD(a, mlpt_transport_send_args, extension_start);
      const auto* changes = mlpt::sdk::find_changed_elements(has_chain ? a->extension_start : nullptr);
      self->out = {{"version", a->version}, {"tensors", a->num_tensors}, {"changes", changes != nullptr}};
      if (changes) {
        self->out["since_version"] = changes->since_version;
        self->out["mask_tensors"] = changes->num_tensors;
      }
      for (size_t i = 0; i < a->num_tensors; ++i) {
        write_tensor(a->tensors[i].tensor, weights);
        if (!changes || i >= changes->num_tensors) continue;
        if (!changes->masks[i]) throw mlpt::Error("tensor " + std::to_string(i) + ": no mask");
        const size_t words = mlpt::sdk::changed_mask_words(numel(a->tensors[i].tensor));
        masks.write(reinterpret_cast<const char*>(changes->masks[i]), std::streamsize(words * 8));
      }
    } catch (const std::exception& e) {
      self->error = e.what();  // reported by the action (this send cannot make an mlpt_error)
    }
    return nullptr;
  }
  static mlpt_error* release(mlpt_transport_release_args*) { return nullptr; }
  // Never called: send returns no error.
  static void error_destroy(mlpt_error*) {}
  static mlpt_error_code error_code(const mlpt_error*) { return MLPT_INTERNAL; }
  static mlpt_string error_message(const mlpt_error*) { return mlpt_string{}; }

  json publish(mlpt::components::Trainer& trainer) {
    static const mlpt_transport_api api = [] {
      mlpt_transport_api t{};
      t.struct_size = MLPT_TRANSPORT_API_STRUCT_SIZE;
      t.send = &RecordingSender::send;
      t.release_received = &RecordingSender::release;
      return t;
    }();
    static const mlpt_error_api errors{MLPT_ERROR_API_STRUCT_SIZE, &error_destroy, &error_code,
                                       &error_message};
    const mlpt_transport_binding binding{MLPT_TRANSPORT_BINDING_STRUCT_SIZE, &api, &errors,
                                         reinterpret_cast<mlpt_transport*>(this)};
    const auto published = trainer.publish_weights(binding, 10000);
    if (!error.empty()) throw mlpt::Error("publish: " + error);
    out["published_version"] = published.version;
    return out;
  }
};

// The trainer's exported tensors, raw, into `file`; their names, shapes and boxes into out["tensors"].
void export_weights(mlpt::components::Trainer& trainer, const std::string& file, json& out) {
  auto w = trainer.export_weights();
  std::ofstream weights(file, std::ios::binary);
  for (size_t i = 0; i < w.count; ++i) {
    const DLTensor& t = w.tensors[i].tensor;
    write_tensor(t, weights);
    const std::vector<int64_t> shape(t.shape, t.shape + t.ndim);
    json entry = {{"name", std::string(w.tensors[i].name.data, w.tensors[i].name.size)}, {"shape", shape},
                  {"global_shape", shape}, {"offsets", std::vector<int64_t>(shape.size(), 0)}};
    if (w.shards) {
      entry["global_shape"] = std::vector<int64_t>(w.shards[i].global_shape, w.shards[i].global_shape + t.ndim);
      entry["offsets"] = std::vector<int64_t>(w.shards[i].offsets, w.shards[i].offsets + t.ndim);
    }
    out["tensors"].push_back(entry);
  }
}

json train(mlpt::plugin::HostServices& host, const std::string& plugin_path, const std::string& batch_file,
           const std::string& settings, const std::string& actions, const std::string& out_dir, int rank, int ranks) {
  auto plugin = mlpt::plugin::Plugin::load(plugin_path, host);
  const std::string name = "trainer";
  const mlpt_component_group group{MLPT_COMPONENT_GROUP_STRUCT_SIZE, {name.data(), name.size()}, rank, ranks};
  // MLPT_TEST_TRAINER: another trainer component of the plugin (the GPU tests' qwen35_cuda).
  const char* component = std::getenv("MLPT_TEST_TRAINER") ? std::getenv("MLPT_TEST_TRAINER") : "qwen35_cpu";
  mlpt::components::Trainer trainer(plugin->component(MLPT_COMPONENT_TRAINER, component), json::parse(settings), &group);
  const dist_test::BatchFile batch(batch_file);
  const mlpt_train_batch& whole = batch.abi;
  // The share of the replica the trainer reports, as the host splits the batch (under MoE parallel
  // folding the expert-parallel ranks cut it themselves). MLPT_TEST_SHARE_PER_RANK: a share per
  // group rank even under model parallelism (the mistake the trainer must refuse).
  const bool per_rank = std::getenv("MLPT_TEST_SHARE_PER_RANK") != nullptr;
  const auto replica = trainer.data_parallel();
  mlpt::rl::BatchShare share(whole, per_rank ? rank : replica.rank, per_rank ? ranks : replica.size);
  json out = {{"rank", rank}, {"replica", replica.rank}, {"sequences", share.abi()->num_sequences}};
  std::stringstream list(actions);
  for (std::string action; std::getline(list, action, ',');) {
    out["done"].push_back(action);
    if (action.rfind("save=", 0) == 0) {
      trainer.save_state(action.substr(5));
    } else if (action.rfind("load=", 0) == 0) {
      trainer.load_state(action.substr(5));
    } else if (action == "step") {
      uint64_t version = 0;
      auto metrics = trainer.train_step(*share.abi(), &version, mlpt::rl::global_loss_tokens(whole));
      out["version"] = version;
      for (const auto& m : metrics) out["metrics"][m.name] = m.value;
    } else if (action == "score") {  // the share's logprobs, as the step's logp_prev pass scores them
      const std::vector<float> logprobs = trainer.compute_logprobs(*share.abi());
      std::ofstream(out_dir + "/rank" + std::to_string(rank) + ".logprobs", std::ios::binary)
          .write(reinterpret_cast<const char*>(logprobs.data()), std::streamsize(logprobs.size() * 4));
    } else if (action == "export") {
      export_weights(trainer, out_dir + "/rank" + std::to_string(rank) + ".weights", out);
    } else if (action.rfind("export=", 0) == 0) {  // to rank<r>.NAME.weights
      json listed;
      export_weights(trainer, out_dir + "/rank" + std::to_string(rank) + "." + action.substr(7) + ".weights",
                     listed);
    } else if (action.rfind("publish=", 0) == 0) {
      const std::string name = action.substr(8), file = out_dir + "/rank" + std::to_string(rank) + "." + name;
      RecordingSender sender{file + ".weights", file + ".masks", json::object(), ""};
      out["published"][name] = sender.publish(trainer);
    } else {
      throw mlpt::Error("unknown action '" + action +
                        "' (step, save=DIR, load=DIR, score, export, export=NAME, publish=NAME)");
    }
  }
  return out;
}

mlpt::components::GenerateRequest engine_request(const json& r, const std::vector<int32_t>& tokens) {
  mlpt::components::GenerateRequest q;
  q.request_id = r.value("id", uint64_t{0});
  q.session_id = r.value("session", uint64_t{0});
  q.tokens = &tokens;
  q.sampling.temperature = r.value("temperature", 1.0f);
  q.sampling.top_k = r.value("top_k", 0);
  q.sampling.seed = r.value("seed", uint64_t{0});
  q.max_new_tokens = r.value("max_new_tokens", 6);
  q.record_routed_experts = true;
  q.routed_experts_from = r.value("record_from", size_t{0});
  return q;
}

json generation_json(const mlpt::components::Generation& g) {
  return {{"tokens", g.tokens}, {"logprobs", g.logprobs}, {"routed", g.routed_experts},
          {"finish", static_cast<int>(g.finish_reason)}, {"version", g.weight_version}};
}

// Rank 0: every request of the script, `together` at once (they batch, as timing has it, and two
// share a prompt) or one after the other (every step holds one request: the same steps in every
// run), then the second turn of the session request.
json generate_script(mlpt::components::Engine& engine, const json& script, bool together) {
  json out;
  std::vector<std::vector<int32_t>> tokens;
  for (const json& r : script["requests"]) tokens.push_back(r["tokens"].get<std::vector<int32_t>>());
  std::vector<std::future<mlpt::components::Generation>> running;
  for (size_t i = 0; i < tokens.size(); ++i) {
    running.push_back(std::async(std::launch::async, [&, i] { return engine.generate(engine_request(script["requests"][i], tokens[i])); }));
    if (!together) running.back().wait();
  }
  for (size_t i = 0; i < running.size(); ++i) out[script["requests"][i]["name"].get<std::string>()] = generation_json(running[i].get());
  const json& turn = script["second_turn"];
  const json first = out[turn["of"].get<std::string>()];
  std::vector<int32_t> whole;
  for (const json& r : script["requests"])
    if (r["name"] == turn["of"]) whole = r["tokens"].get<std::vector<int32_t>>();
  for (int32_t t : first["tokens"]) whole.push_back(t);
  const size_t known = whole.size();
  for (int32_t t : turn["extra"]) whole.push_back(t);
  json second = turn;
  second["record_from"] = known;
  for (const json& r : script["requests"])
    if (r["name"] == turn["of"]) second["session"] = r["session"], second["seed"] = r.value("seed", 0);
  out["second_turn"] = generation_json(engine.generate(engine_request(second, whole)));
  engine.session_release(second["session"].get<uint64_t>());
  return out;
}

json serve_engine(mlpt::plugin::HostServices& host, const std::string& plugin_path, const std::string& settings,
                  const std::string& script_file, int rank, int ranks) {
  // The bytes the transport hands this rank's fetch (cut for it, or handed over whole).
  struct Received {
    std::mutex mutex;
    double bytes = 0;
  };
  auto received = std::make_shared<Received>();
  host.set_metric_sink([received](const std::string& name, double value) {
    if (name != "transport/receive_bytes_cut" && name != "transport/receive_bytes_handed_over") return;
    std::lock_guard lk(received->mutex);
    received->bytes += value;
  });
  auto plugin = mlpt::plugin::Plugin::load(plugin_path, host);
  const json script = json::parse(std::ifstream(script_file));
  auto transport = mlpt::plugin::Plugin::load(script["transport_plugin"].get<std::string>(), host);
  const std::string name = "engine";
  const mlpt_component_group group{MLPT_COMPONENT_GROUP_STRUCT_SIZE, {name.data(), name.size()}, rank, ranks};
  json engine_settings = json::parse(settings);
  // MLPT_TEST_RANK1_SETTINGS: JSON merged into rank 1's settings (a create that fails on one rank).
  if (const char* extra = std::getenv("MLPT_TEST_RANK1_SETTINGS"); extra && rank == 1) engine_settings.update(json::parse(extra));
  // MLPT_TEST_ENGINE: another engine component of the plugin (the GPU tests' qwen35_cuda).
  const char* component = std::getenv("MLPT_TEST_ENGINE") ? std::getenv("MLPT_TEST_ENGINE") : "qwen35_cpu";
  mlpt::components::Engine engine(plugin->component(MLPT_COMPONENT_ENGINE, component), engine_settings, 16, &group);
  json out = {{"rank", rank}, {"shards", engine.weight_shards().count}};
  if (rank == 0) {
    out["before"] = generate_script(engine, script, true);
  } else {
    try {
      const json& r = script["requests"][0];
      const auto tokens = r["tokens"].get<std::vector<int32_t>>();
      engine.generate(engine_request(r, tokens));
      out["follower_generate"] = "accepted";
    } catch (const mlpt::Error& e) {
      out["follower_generate"] = {{"code", e.code()}, {"message", e.what()}};
    }
  }
  // Checkpoint B's whole tensors, from a one-rank trainer in this process.
  mlpt::components::Trainer source(plugin->component(MLPT_COMPONENT_TRAINER, "qwen35_cpu"),
                                   json{{"checkpoint", script["checkpoint_b"]}});
  const auto weights = source.export_weights();
  double model_bytes = 0;
  for (size_t i = 0; i < weights.count; ++i) model_bytes += static_cast<double>(mlpt::sdk::nbytes(weights.tensors[i].tensor));
  out["model_bytes"] = model_bytes;
  engine.pause();
  if (ranks > 1) {  // rank 1 is told another version than the others: no rank may load
    try {
      engine.load_weights(rank == 1 ? 2 : 1, weights.tensors, weights.count);
      out["mismatch"] = "loaded";
    } catch (const mlpt::Error& e) {
      out["mismatch"] = {{"code", e.code()}, {"message", e.what()}};
    }
    out["version_after_mismatch"] = engine.model_info().weight_version;
    // Each rank is given its shard boxes, cut from the whole tensors, but rank 0 misses its last.
    const mlpt::sdk::LayoutCut cut({{weights.tensors, weights.shards, weights.count}}, engine.weight_shards());
    try {
      engine.load_weights(1, cut.tensors().data(), cut.tensors().size() - (rank == 0 ? 1 : 0), cut.shards().data());
      out["missing_shard"] = "loaded";
    } catch (const mlpt::Error& e) {
      out["missing_shard"] = {{"code", e.code()}, {"message", e.what()}};
    }
  }
  // The refit: this rank's layout (its shard boxes) cut by the transport from the whole tensors.
  const auto tc = transport->component(MLPT_COMPONENT_TRANSPORT, "inprocess");
  const std::string refit = "refit-" + std::to_string(rank);
  mlpt::components::Transport sender(tc, json::object(), MLPT_TRANSPORT_SENDER, refit);
  mlpt::components::Transport receiver(tc, json::object(), MLPT_TRANSPORT_RECEIVER, refit);
  sender.send(1, weights.tensors, weights.count, 10000);
  out["fetched"] = engine.fetch_weights(receiver, 1, 60000);
  {
    std::lock_guard lk(received->mutex);
    out["received_bytes"] = received->bytes;
  }
  engine.resume();
  out["weight_version"] = engine.model_info().weight_version;
  if (rank == 0) out["after"] = generate_script(engine, script, false);
  // Back to the first checkpoint, handed over as whole tensors (each rank slices its shard).
  mlpt::components::Trainer first(plugin->component(MLPT_COMPONENT_TRAINER, "qwen35_cpu"),
                                  json{{"checkpoint", json::parse(settings)["checkpoint"]}});
  const auto whole = first.export_weights();
  engine.pause();
  engine.load_weights(2, whole.tensors, whole.count);
  engine.resume();
  if (rank == 0) out["again"] = generate_script(engine, script, true);
  return out;  // the engine's destroy is collective: the other ranks wait here for rank 0's
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: dist_peer rendezvous OUT_DIR | trainer PLUGIN BATCH SETTINGS [ACTIONS] OUT_DIR | engine PLUGIN SETTINGS SCRIPT OUT_DIR\n";
    return 2;
  }
  const std::string mode = argv[1];
  mlpt::dist::MpiSession mpi;
  const std::string out_dir = argv[argc - 1];
  json out;
  try {
    auto role = mode == "trainer" ? MLPT_PROCESS_ROLE_TRAINER : MLPT_PROCESS_ROLE_ALL;
    mlpt::plugin::HostServices host;
    host.set_rendezvous(std::make_unique<mlpt::dist::MpiRendezvous>(role));
    if (mode == "rendezvous") out = rendezvous(host.rendezvous());
    else if (mode == "trainer" && (argc == 6 || argc == 7))
      out = train(host, argv[2], argv[3], argv[4], argc == 7 ? argv[5] : "step,export", out_dir, mpi.rank(), mpi.world_size());
    else if (mode == "engine" && argc == 6) out = serve_engine(host, argv[2], argv[3], argv[4], mpi.rank(), mpi.world_size());
    else throw mlpt::Error("unknown mode " + mode);
  } catch (const std::exception& e) {
    out["error"] = e.what();
    // Also on stderr: mpirun forwards it, so a test that fails on the exit status shows why.
    std::cerr << "dist_peer rank " << mpi.rank() << " of " << mpi.world_size() << ": " << e.what() << std::endl;
  }
  std::ofstream(out_dir + "/rank" + std::to_string(mpi.rank()) + ".json") << out.dump(2) << "\n";
  return out.contains("error") ? 1 : 0;
}
