// A C++ plugin built with the SDK whose engine behaves in known ways, so the adapter's translation of
// C++ behaviour into the C ABI (errors from exceptions, struct-size checks, out fields) can be
// checked from the host side. Config: {"fail": "create"} makes creation throw.
#include <mlpt/sdk.hpp>

#include <new>

#include <nlohmann/json.hpp>

namespace {

class ProbeEngine final : public mlpt::sdk::Engine {
 public:
  explicit ProbeEngine(std::string_view config) {
    if (config.find("\"create\"") != std::string_view::npos)
      throw mlpt::sdk::Error(MLPT_FAILED_PRECONDITION, "asked to fail in create");
  }
  void model_info(mlpt_engine_model_info& info) override {
    info.vocab_size = 7;
    info.num_moe_layers = 0;
    info.experts_per_token = 0;
    info.max_sequence_length = 32;
    info.weight_version = version_;
  }
  // Echoes the prompt back, one token per step, with logprob -1 per token; a prompt starting with
  // token 666 throws std::out_of_range, 777 throws bad_alloc, 888 throws a non-std exception.
  // Completes before submit returns.
  void submit(std::shared_ptr<mlpt::sdk::GenerationRequest> r) override {
    if (r->tokens[0] == 666) throw std::out_of_range("token 666 is out of range");
    if (r->tokens[0] == 777) throw std::bad_alloc();
    if (r->tokens[0] == 888) throw 42;
    size_t n = std::min<size_t>(r->tokens.size(), static_cast<size_t>(r->max_new_tokens));
    r->out_tokens.assign(r->tokens.begin(), r->tokens.begin() + static_cast<std::ptrdiff_t>(n));
    r->out_logprobs.assign(n, -1.0f);
    r->out_weight_version = version_;
    r->finish(MLPT_FINISH_LENGTH);
  }
  void cancel(uint64_t) override {}
  void session_release(uint64_t) override {}
  void pause() override {}
  void resume() override {}
  void load_weights(const mlpt_load_weights_args& a) override {
    if (a.version <= version_)
      throw mlpt::sdk::Error(MLPT_INVALID_ARGUMENT, "version " + std::to_string(a.version) + " is not newer than " + std::to_string(version_));
    version_ = a.version;
  }

 private:
  uint64_t version_ = 0;
};

// A transport that truly needs the host's key-value store: it puts a key and reads it back in
// create, so it works in a 1.2 host and is refused by an older one. Moves no tensors.
class RendezvousTransport final : public mlpt::sdk::Transport {
 public:
  RendezvousTransport(std::string_view, mlpt_transport_role role, std::string_view group) {
    std::string key = "probe.rendezvous/" + std::string(group) + (role == MLPT_TRANSPORT_SENDER ? "/sender" : "/receiver");
    mlpt::sdk::kv_put("probe.rendezvous", key, "here");
    if (mlpt::sdk::kv_get("probe.rendezvous", key, 1000) != "here")
      throw mlpt::sdk::Error(MLPT_DATA_LOSS, "the key-value store returned another value for " + key);
  }
  void send(const mlpt_transport_send_args&) override {}
  void receive(mlpt_transport_receive_args&) override {
    throw mlpt::sdk::Error(MLPT_UNIMPLEMENTED, "the rendezvous probe moves no tensors");
  }
  void release(uint64_t) override {}
};

// A trainer whose ranks pair up into replicas as a tensor-parallel trainer's of two would: it tells
// the host its data-parallel replica (group rank / 2 of group size / 2). {"replica": [r, s]} reports
// that replica instead. Trains nothing.
class PairedTrainer final : public mlpt::sdk::Trainer {
 public:
  PairedTrainer(std::string_view config, const mlpt_component_group* group) {
    if (group && group->size > 1) replica_ = {group->rank / 2, group->size / 2};
    const auto settings = nlohmann::json::parse(config);
    if (settings.contains("replica")) replica_ = {settings["replica"][0].get<int32_t>(), settings["replica"][1].get<int32_t>()};
  }
  DataParallel data_parallel() const override { return replica_; }
  void train_step(mlpt_train_step_args&) override { refuse(); }
  void compute_logprobs(mlpt_compute_logprobs_args&) override { refuse(); }
  void export_weights(mlpt_export_weights_args&) override { refuse(); }
  void save_state(std::string_view) override { refuse(); }
  void load_state(std::string_view) override { refuse(); }

 private:
  [[noreturn]] static void refuse() { throw mlpt::sdk::Error(MLPT_UNIMPLEMENTED, "the paired probe trainer trains nothing"); }
  DataParallel replica_;
};

const mlpt_trainer_capabilities kTrainerCaps = {MLPT_TRAINER_CAPABILITIES_STRUCT_SIZE, 0, 0, kDLCPU};

const mlpt_transport_capabilities kTransportCaps = {MLPT_TRANSPORT_CAPABILITIES_STRUCT_SIZE, 0, 1, 1, 0, 0};

const mlpt_engine_capabilities kCaps = {MLPT_ENGINE_CAPABILITIES_STRUCT_SIZE, 1, 0, 0, 0, 1};

}  // namespace

MLPT_SDK_PLUGIN("sdk-probe", "0.0.1",
                mlpt::sdk::engine_component<ProbeEngine>("probe", "echoes its prompt", &kCaps),
                mlpt::sdk::transport_component<RendezvousTransport>("rendezvous", "needs the host's key-value store",
                                                                    &kTransportCaps),
                mlpt::sdk::trainer_component<PairedTrainer>("paired", "two ranks per data-parallel replica", &kTrainerCaps))
