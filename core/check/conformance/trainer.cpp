#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <future>
#include <mlpt/sdk/types.hpp>
#include <string>
#include <vector>

#include "core/check/conformance/checks.hpp"
#include "core/refit/weight_flow.hpp"
#include "core/run/trainer_settings.hpp"

namespace mlpt::check::conformance {
namespace {

// The tolerance between the engine's logprobs and a trainer forward on the same weights: fp32
// arithmetic in two different orders (batched decode vs one packed forward) over a few layers.
constexpr double kLogprobTolerance = 2e-3;

// Bytes of every exported tensor (CPU tensors), to compare weights before and after a step.
std::vector<std::string> snapshot(const components::Trainer::Weights& w) {
  std::vector<std::string> out;
  for (size_t i = 0; i < w.count; ++i) {
    const DLTensor& t = w.tensors[i].tensor;
    if (t.device.device_type != kDLCPU) return {};
    out.emplace_back(static_cast<const char*>(t.data) + t.byte_offset, sdk::nbytes(t));
  }
  return out;
}

// `batch` with `advantages` (one per sequence) in place of its own.
mlpt_train_batch with_advantage(const mlpt_train_batch& batch, const float* advantages) {
  mlpt_train_batch b = batch;
  b.advantages = advantages;
  return b;
}

}  // namespace

void check_trainer(Suite& s, const plugin::ComponentSet& set, const run::RunConfig& c,
                   EngineUnderCheck& checked) {
  auto& engine = checked.engine;
  const auto& info = checked.info;
  const auto& prompt = checked.prompt;
  const auto& first = checked.first;
  const auto& tc = set.component(MLPT_COMPONENT_TRAINER);
  const std::string tn = "trainer " + tc.name;
  std::unique_ptr<components::Trainer> trainer;
  s.check(tn, "create", [&](std::string& ev) {
    trainer = std::make_unique<components::Trainer>(
        tc, run::trainer_settings(c, set.settings(MLPT_COMPONENT_TRAINER)));
    ev = "created";
    return true;
  });
  if (!trainer) return;

  // The generated sequence as a one-sequence batch.
  std::vector<int32_t> seq = prompt;
  seq.insert(seq.end(), first.tokens.begin(), first.tokens.end());
  std::vector<int64_t> offsets{0, static_cast<int64_t>(seq.size())};
  std::vector<uint8_t> mask(seq.size(), 0), truncated{0};
  std::vector<float> gen_lp(seq.size(), 0.0f), adv{0.0f};
  for (size_t i = 0; i < first.tokens.size(); ++i)
    mask[prompt.size() + i] = 1, gen_lp[prompt.size() + i] = first.logprobs[i];
  mlpt_train_batch batch{};
  batch.struct_size = MLPT_TRAIN_BATCH_STRUCT_SIZE;
  batch.num_sequences = 1;
  batch.offsets = offsets.data();
  batch.tokens = seq.data();
  batch.loss_mask = mask.data();
  batch.generation_logprobs = gen_lp.data();
  batch.advantages = adv.data();
  batch.truncated = truncated.data();

  s.check(tn, "logprobs_match_engine", [&](std::string& ev) {
    auto lp = trainer->compute_logprobs(batch);
    double worst = 0;
    for (size_t i = 0; i < first.tokens.size(); ++i)
      worst = std::max(worst, std::fabs(double(lp[prompt.size() + i]) - first.logprobs[i]));
    ev = "max |trainer - engine| logprob over " + std::to_string(first.tokens.size()) +
         " sampled tokens = " + std::to_string(worst) + " (tolerance " + std::to_string(kLogprobTolerance) +
         ", temperature 1)";
    return worst <= kLogprobTolerance;
  });
  components::Trainer::Weights exported{};
  s.check(tn, "weight_export_complete", [&](std::string& ev) {
    exported = trainer->export_weights();
    int64_t params = 0;
    for (size_t i = 0; i < exported.count; ++i) {
      int64_t n = 1;
      for (int d = 0; d < exported.tensors[i].tensor.ndim; ++d) n *= exported.tensors[i].tensor.shape[d];
      params += n;
    }
    // The engine must accept exactly this set (names, shapes, dtypes) as its weights.
    engine->pause();
    engine->load_weights(info.weight_version + 1, exported.tensors, exported.count);
    engine->resume();
    ev = std::to_string(exported.count) + " tensors, " + std::to_string(params) +
         " parameters, accepted by the engine's load_weights";
    return exported.count > 0;
  });
  // mlpt.h, Device memory: exported device tensors say when they may be read.
  bool on_device = false;
  for (size_t i = 0; i < exported.count; ++i)
    on_device |= exported.tensors[i].tensor.device.device_type != kDLCPU &&
                 exported.tensors[i].tensor.device.device_type != kDLCUDAHost;
  if (!on_device) {
    s.not_applicable(
        tn, "export_device_ready",
        "the exported tensors are in host memory (CPU tensors): readiness concerns device memory");
  } else {
    s.check(tn, "export_device_ready", [&](std::string& ev) {
      const auto& r = exported.ready;
      ev = std::string("export_weights says the device data is ready ") +
           (r.kind == MLPT_READY_ON_RETURN     ? "on return"
            : r.kind == MLPT_READY_AFTER_EVENT ? "after an event"
                                               : "(unknown kind)") +
           ", written on stream " + (r.stream ? "set" : "NULL (the default stream)") + ", event " +
           (r.event ? "set" : "NULL");
      return r.kind == MLPT_READY_ON_RETURN ? r.event == nullptr
                                            : r.kind == MLPT_READY_AFTER_EVENT && r.event != nullptr;
    });
  }
  s.check(tn, "export_device_matches", [&](std::string& ev) {
    const DLDeviceType declared = trainer->capabilities().device_type;
    size_t other = 0;
    for (size_t i = 0; i < exported.count; ++i)
      other += exported.tensors[i].tensor.device.device_type != declared;
    ev = std::to_string(exported.count - other) + " of " + std::to_string(exported.count) +
         " exported tensors on the declared device_type " + std::to_string(declared);
    return exported.count > 0 && other == 0;
  });
  if (!trainer->capabilities().supports_routing_replay) {
    s.not_applicable(tn, "routing_replay_used", "capability supports_routing_replay = 0");
  } else if (info.num_moe_layers == 0) {
    s.not_applicable(tn, "routing_replay_used", "the model has no MoE layer to route");
  } else {
    s.check(tn, "routing_replay_used", [&](std::string& ev) {
      // Every token routed to experts 0..k-1 instead of its own top-k: the logprobs must move.
      const size_t layers = static_cast<size_t>(info.num_moe_layers),
                   k = static_cast<size_t>(info.experts_per_token);
      std::vector<int16_t> forced(seq.size() * layers * k);
      for (size_t i = 0; i < forced.size(); ++i) forced[i] = static_cast<int16_t>(i % k);
      mlpt_train_batch replay = batch;
      replay.routed_experts = forced.data();
      replay.num_moe_layers = info.num_moe_layers;
      replay.experts_per_token = info.experts_per_token;
      const auto fresh = trainer->compute_logprobs(batch), replayed = trainer->compute_logprobs(replay);
      double moved = 0;
      for (size_t i = 0; i < fresh.size(); ++i)
        moved = std::max(moved, std::fabs(double(fresh[i]) - replayed[i]));
      ev = "every token routed to experts 0.." + std::to_string(k - 1) + " moves the logprobs by up to " +
           std::to_string(moved) + " against the trainer's own routing";
      return moved > 1e-6;
    });
  }
  s.check(tn, "zero_advantage_step_keeps_weights", [&](std::string& ev) {
    auto before = snapshot(trainer->export_weights());
    uint64_t version = 0;
    trainer->train_step(batch, &version);
    auto after = snapshot(trainer->export_weights());
    size_t changed = 0;
    for (size_t i = 0; i < before.size() && i < after.size(); ++i) changed += before[i] != after[i];
    ev = std::to_string(changed) + " of " + std::to_string(before.size()) +
         " tensors changed after a step with advantage 0; version -> " + std::to_string(version);
    return !before.empty() && before.size() == after.size() && changed == 0;
  });
  if (!trainer->can_save_state()) {
    s.not_applicable(tn, "state_save_load_round_trip", "capability supports_state_save = 0");
  } else if (on_device) {
    s.skip(tn, "state_save_load_round_trip",
           "the exported weights are in device memory: the suite compares host bytes");
  } else {
    s.check(tn, "state_save_load_round_trip", [&](std::string& ev) {
      // Saved, moved by a step with advantage 1, loaded: the weights are the saved ones again.
      const auto dir =
          std::filesystem::temp_directory_path() / ("mlpt-conformance-state-" + std::to_string(::getpid()));
      std::filesystem::remove_all(dir);
      std::filesystem::create_directories(dir);
      const auto saved = snapshot(trainer->export_weights());
      trainer->save_state(dir.string());
      const float one = 1.0f;
      uint64_t version = 0;
      trainer->train_step(with_advantage(batch, &one), &version);
      const auto stepped = snapshot(trainer->export_weights());
      trainer->load_state(dir.string());
      const auto loaded = snapshot(trainer->export_weights());
      std::filesystem::remove_all(dir);
      size_t moved = 0, back = 0;
      for (size_t i = 0; i < saved.size() && i < stepped.size() && i < loaded.size(); ++i)
        moved += saved[i] != stepped[i], back += saved[i] == loaded[i];
      ev = "a step with advantage 1 changed " + std::to_string(moved) + " of " +
           std::to_string(saved.size()) + " tensors; after load_state " + std::to_string(back) +
           " equal the saved ones";
      return moved > 0 && back == saved.size() && loaded.size() == saved.size();
    });
  }
  // trainer.h publish_weights, engine.h fetch_weights: the weights go plugin to plugin through the
  // configured transport, the host passing only the bound endpoints.
  const auto& xc = set.component(MLPT_COMPONENT_TRANSPORT);
  const std::string xn = "transport " + xc.name;
  const bool carries_cuda = xc.caps<mlpt_transport_capabilities>()->supports_cuda != 0;
  if (!carries_cuda)
    s.not_applicable(xn, "cuda_tensors_carried", "capability supports_cuda = 0");
  else if (!on_device)
    s.skip(xn, "cuda_tensors_carried",
           "the trainer exports host memory: no CUDA tensor to carry in this combination");
  std::string older;
  if (!trainer->publishes()) older += "the trainer has no publish_weights; ";
  if (!engine->fetches()) older += "the engine has no fetch_weights; ";
  if (xc.abi_minor() < 2) older += "the transport speaks ABI 1." + std::to_string(xc.abi_minor()) + "; ";
  if (!older.empty()) {
    s.not_applicable(tn, "weights_flow_plugin_to_plugin", older + "the host relays that side (ABI 1.0/1.1)");
    if (carries_cuda && on_device)
      s.skip(xn, "cuda_tensors_carried", "the weights do not flow plugin to plugin here");
    return;
  }
  s.check(tn, "weights_flow_plugin_to_plugin", [&](std::string& ev) {
    uint64_t version = 0;
    trainer->train_step(batch, &version);  // advantage 0: a new version of the same weights
    // The sender first: a receiver of a transport that finds its sender through the key-value store
    // (ucx) waits at create for the sender's address.
    std::string note;
    const nlohmann::json settings = transport_settings_for_check(set, 1, note);
    components::Transport sender(xc, settings, MLPT_TRANSPORT_SENDER, "mlpt-conformance-flow");
    components::Transport receiver(xc, settings, MLPT_TRANSPORT_RECEIVER, "mlpt-conformance-flow");
    engine->pause();
    auto fetched =
        std::async(std::launch::async, [&] { return refit::fetch(*engine, receiver, version, 60000); });
    refit::PublishResult published;
    try {
      published = refit::publish(*trainer, sender, 60000);
    } catch (...) {
      try {
        fetched.get();
      } catch (...) {
      }
      engine->resume();
      throw;
    }
    const uint64_t loaded = fetched.get();
    engine->resume();
    const auto after = engine->model_info().weight_version;
    ev = "the trainer published version " + std::to_string(published.version) + " (" +
         std::to_string(published.bytes) +
         " bytes) through the transport itself; the engine fetched and loaded version " +
         std::to_string(loaded) + " and reports weight_version " + std::to_string(after) + note;
    return published.by_plugin && published.version == version && loaded == version && after == version;
  });
  if (carries_cuda && on_device) {
    const auto* flow = &s.report.checks.back();
    s.record(xn, "cuda_tensors_carried", flow->status == Status::pass,
             "the trainer's CUDA tensors through the transport: weights_flow_plugin_to_plugin " +
                 std::string(status_name(flow->status)));
  }
}

}  // namespace mlpt::check::conformance
