#include "core/check/conformance.hpp"

#include <sys/syscall.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <future>
#include <memory>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include <stdlib.h>
#include <unistd.h>

#include "core/check/in_process_hacks.hpp"
#include "core/components/instances.hpp"
#include "core/config/component_kinds.hpp"
#include "core/plugin/component_set.hpp"
#include "core/plugin/describe.hpp"
#include "core/plugin/kinds/kind.hpp"
#include "core/refit/weight_flow.hpp"
#include "core/run/dataset.hpp"
#include "core/run/trainer_settings.hpp"

#include <mlpt/sdk/types.hpp>

namespace mlpt::check {
namespace {

using Status = ConformanceCheck::Status;
using nlohmann::json;

const char* status_name(Status s);

// The module a Python line imports at its start ("import x", "from x ...": x), or "". The hidden
// tests are the task's bytes: a linear scan, not a backtracking regex.
std::string imported_module(const std::string& line) {
  size_t i = 0;
  if (line.compare(0, 4, "from") == 0) i = 4;
  else if (line.compare(0, 6, "import") == 0) i = 6;
  else return "";
  const size_t spaces = i;
  while (i < line.size() && std::isspace(static_cast<unsigned char>(line[i]))) ++i;
  if (i == spaces || i >= line.size() || !(std::isalpha(static_cast<unsigned char>(line[i])) || line[i] == '_')) return "";
  const size_t start = i;
  while (i < line.size() && (std::isalnum(static_cast<unsigned char>(line[i])) || line[i] == '_')) ++i;
  return line.substr(start, i - start);
}

// The tolerance between the engine's logprobs and a trainer forward on the same weights: fp32
// arithmetic in two different orders (batched decode vs one packed forward) over a few layers.
constexpr double kLogprobTolerance = 2e-3;

class Suite {
 public:
  void record(const std::string& component, const std::string& id, bool ok, const std::string& evidence) {
    report.checks.push_back({component, id, ok ? Status::pass : Status::fail, evidence});
  }
  void skip(const std::string& component, const std::string& id, const std::string& why) {
    report.checks.push_back({component, id, Status::skipped, why});
  }
  void not_applicable(const std::string& component, const std::string& id, const std::string& why) {
    report.checks.push_back({component, id, Status::not_applicable, why});
  }
  // Runs `body`; an exception is a failed check with the message as evidence.
  template <class F>
  void check(const std::string& component, const std::string& id, F&& body) {
    try {
      std::string evidence;
      bool ok = body(evidence);
      record(component, id, ok, evidence);
    } catch (const std::exception& e) {
      record(component, id, false, std::string("threw: ") + e.what());
    }
  }
  ConformanceReport report;
};

// The transport's settings for a check that creates `receivers` receivers itself. A config written
// for a distributed run sets "receivers" (the count of receivers a send of the reference transports
// waits for) to its rollout workers, 2 in tiny-distributed.toml: the check's own receivers would
// leave each send waiting for one that never comes until it times out. `note` (empty if the
// settings are kept) says in the evidence what the check changed.
nlohmann::json transport_settings_for_check(const plugin::ComponentSet& set, int64_t receivers, std::string& note) {
  nlohmann::json settings = set.settings(MLPT_COMPONENT_TRANSPORT);
  note.clear();
  if (settings.is_object() && settings.contains("receivers") && settings["receivers"].is_number_integer() &&
      settings["receivers"].get<int64_t>() != receivers) {
    note = "; settings receivers = " + settings["receivers"].dump() + " (a run's rollout workers) checked as receivers = " +
           std::to_string(receivers) + ", the receivers this check creates";
    settings["receivers"] = receivers;
  }
  return settings;
}

std::string join(const std::vector<int32_t>& v, size_t max = 12) {
  std::ostringstream o;
  for (size_t i = 0; i < v.size() && i < max; ++i) o << (i ? " " : "") << v[i];
  if (v.size() > max) o << " …";
  return o.str();
}

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

// engine.h, Engine groups: two ranks of one group, each created on a thread of its own as ranks in
// their own processes would be. create is collective: both succeed or both fail; when they meet,
// requests go to rank 0 and rank 1 refuses them.
void check_engine_group(Suite& s, const plugin::ComponentSet& set, const std::string& en) {
  const auto& ec = set.component(MLPT_COMPONENT_ENGINE);
  struct Rank {
    std::unique_ptr<components::Engine> engine;
    std::string error;
  };
  struct Meeting {  // shared with the threads, which a create that never returns leaves running
    std::string name = "mlpt-conformance-engine-group";
    mlpt_component_group groups[2];
    Rank ranks[2];
    std::promise<void> done[2];
  };
  auto m = std::make_shared<Meeting>();
  const nlohmann::json settings = set.settings(MLPT_COMPONENT_ENGINE);
  std::future<void> created[2];
  for (int32_t r = 0; r < 2; ++r) {
    m->groups[r] = {MLPT_COMPONENT_GROUP_STRUCT_SIZE, {m->name.data(), m->name.size()}, r, 2};
    created[r] = m->done[r].get_future();
    std::thread([m, r, ec, settings] {
      try {
        m->ranks[r].engine = std::make_unique<components::Engine>(ec, settings, 1, &m->groups[r]);
      } catch (const std::exception& e) {
        m->ranks[r].error = e.what();
      }
      m->done[r].set_value();
    }).detach();
  }
  bool returned = true;
  for (auto& f : created) returned &= f.wait_for(std::chrono::seconds(120)) == std::future_status::ready;
  if (!returned) {
    s.record(en, "engine_group_all_or_none", false, "a rank's create in a group of 2 did not return within 120 s");
    s.skip(en, "engine_group_requests_to_rank_0", "the group's create did not return");
    return;
  }
  const bool made[2] = {m->ranks[0].engine != nullptr, m->ranks[1].engine != nullptr};
  auto said = [&](int r) { return made[r] ? std::string("created") : "refused (" + m->ranks[r].error.substr(0, 160) + ")"; };
  s.record(en, "engine_group_all_or_none", made[0] == made[1],
           "two ranks of a group of 2 created at once: rank 0 " + said(0) + "; rank 1 " + said(1));
  if (!made[0] || !made[1]) {
    if (made[0] == made[1])
      s.not_applicable(en, "engine_group_requests_to_rank_0", "the engine refuses a group of 2 in one process with these settings");
    else
      s.skip(en, "engine_group_requests_to_rank_0", "only one rank was created");
  } else {
    s.check(en, "engine_group_requests_to_rank_0", [&](std::string& ev) {
      std::vector<int32_t> tokens{1, 2, 3};
      components::GenerateRequest r;
      r.request_id = 1, r.tokens = &tokens, r.max_new_tokens = 2;
      int code = MLPT_OK;
      try {
        m->ranks[1].engine->generate(r);
      } catch (const Error& e) {
        code = e.code();
      }
      ev = "a request to rank 1: code " + std::to_string(code) + " (MLPT_FAILED_PRECONDITION = " +
           std::to_string(MLPT_FAILED_PRECONDITION) + " promised)";
      return code == MLPT_FAILED_PRECONDITION;
    });
  }
  // destroy is collective too: both at once.
  std::thread other([m] { m->ranks[1].engine.reset(); });
  m->ranks[0].engine.reset();
  other.join();
}

// `batch` with `advantages` (one per sequence) in place of its own.
mlpt_train_batch with_advantage(const mlpt_train_batch& batch, const float* advantages) {
  mlpt_train_batch b = batch;
  b.advantages = advantages;
  return b;
}

void check_engine_and_trainer(Suite& s, const plugin::ComponentSet& set, const run::RunConfig& c) {
  const auto& ec = set.component(MLPT_COMPONENT_ENGINE);
  const std::string en = "engine " + ec.name;
  std::unique_ptr<components::Engine> engine;
  s.check(en, "create", [&](std::string& ev) {
    engine = std::make_unique<components::Engine>(ec, set.settings(MLPT_COMPONENT_ENGINE));
    auto info = engine->model_info();
    ev = "vocab " + std::to_string(info.vocab_size) + ", " + std::to_string(info.num_moe_layers) + " MoE layers, top-" +
         std::to_string(info.experts_per_token) + ", weight version " + std::to_string(info.weight_version);
    return info.vocab_size > 0;
  });
  if (!engine) return;
  const auto info = engine->model_info();
  const auto& caps = engine->capabilities();
  std::vector<int32_t> prompt;
  for (int i = 0; i < 12; ++i) prompt.push_back(static_cast<int32_t>((37 * i + 11) % std::min<int64_t>(info.vocab_size, 256)));
  auto request = [&](uint64_t id, uint64_t seed, const std::vector<int32_t>* tokens, int32_t max_new, uint64_t session = 0) {
    components::GenerateRequest r;
    r.request_id = id, r.session_id = session, r.tokens = tokens, r.max_new_tokens = max_new;
    r.sampling = mlpt_sampling_params{MLPT_SAMPLING_PARAMS_STRUCT_SIZE, 1.0f, 1.0f, 0, seed};
    return r;
  };

  components::Generation first;
  if (caps.deterministic_seed) {
    s.check(en, "same_seed_same_tokens", [&](std::string& ev) {
      first = engine->generate(request(1, 42, &prompt, 16));
      auto again = engine->generate(request(2, 42, &prompt, 16));
      ev = "seed 42 twice: [" + join(first.tokens) + "] vs [" + join(again.tokens) + "]";
      return first.tokens == again.tokens;
    });
  } else {
    s.not_applicable(en, "same_seed_same_tokens", "capability deterministic_seed = 0");
    s.check(en, "generate", [&](std::string& ev) {
      first = engine->generate(request(1, 42, &prompt, 16));
      ev = "generated [" + join(first.tokens) + "]";
      return !first.tokens.empty();
    });
  }
  if (caps.returns_logprobs) {
    s.check(en, "logprobs_returned", [&](std::string& ev) {
      bool finite = true;
      for (float lp : first.logprobs) finite &= std::isfinite(lp) && lp <= 0.0f;
      ev = std::to_string(first.logprobs.size()) + " logprobs for " + std::to_string(first.tokens.size()) + " tokens, all finite and <= 0: " + (finite ? "yes" : "no");
      return finite && first.logprobs.size() == first.tokens.size();
    });
  } else {
    s.not_applicable(en, "logprobs_returned", "capability returns_logprobs = 0");
  }
  s.check(en, "concurrent_requests_complete", [&](std::string& ev) {
    // 32 requests submitted at once (through submit, or the host's blocking pool for an engine
    // older than 1.2): each completes exactly once, with 1..max_new tokens and a logprob per token;
    // with deterministic seeds, request 0 gives what it gave alone.
    const int n = 32;
    std::mutex m;
    std::condition_variable cv;
    std::vector<int> calls(n, 0);
    std::vector<components::Generation> got(n);
    std::string error;
    int finished = 0;
    for (int i = 0; i < n; ++i)
      engine->submit(request(100 + static_cast<uint64_t>(i), i == 0 ? 42 : 500 + static_cast<uint64_t>(i), &prompt, 16),
                     [&, i](components::Generation&& g, std::exception_ptr e) {
                       std::lock_guard l(m);
                       if (e && error.empty()) try {
                           std::rethrow_exception(e);
                         } catch (const std::exception& x) {
                           error = x.what();
                         }
                       got[static_cast<size_t>(i)] = std::move(g);
                       ++calls[static_cast<size_t>(i)], ++finished;
                       cv.notify_all();
                     });
    std::unique_lock l(m);
    if (!cv.wait_for(l, std::chrono::seconds(120), [&] { return finished >= n; })) {
      ev = std::to_string(finished) + " of " + std::to_string(n) + " requests completed within 120 s";
      return false;
    }
    bool shapes = true;
    for (int i = 0; i < n; ++i) {
      const auto& g = got[static_cast<size_t>(i)];
      shapes &= calls[static_cast<size_t>(i)] == 1 && !g.tokens.empty() && g.tokens.size() <= 16 && g.logprobs.size() == g.tokens.size();
    }
    const bool same = !caps.deterministic_seed || got[0].tokens == first.tokens;
    ev = std::string(engine->asynchronous() ? "submit (ABI 1.2)" : "blocking generate on host threads (ABI < 1.2)") +
         ": " + std::to_string(n) + " completions, shapes " + (shapes ? "right" : "wrong") + ", request 0 [" + join(got[0].tokens) +
         "] vs alone [" + join(first.tokens) + "]" + (error.empty() ? "" : "; error: " + error);
    return error.empty() && shapes && same;
  });
  if (caps.keeps_sessions) {
    s.check(en, "session_reuse", [&](std::string& ev) {
      // Turn 1 in a session, then turn 2 on the extended sequence; the session must give what a
      // fresh request on the whole sequence gives (same seed).
      auto t1 = engine->generate(request(3, 7, &prompt, 8, 1001));
      std::vector<int32_t> extended = prompt;
      extended.insert(extended.end(), t1.tokens.begin(), t1.tokens.end());
      extended.push_back(prompt[0]);
      auto in_session = engine->generate(request(4, 8, &extended, 8, 1001));
      auto fresh = engine->generate(request(5, 8, &extended, 8));
      engine->session_release(1001);
      ev = "session turn 2 [" + join(in_session.tokens) + "], fresh [" + join(fresh.tokens) + "]";
      return in_session.tokens == fresh.tokens;
    });
  } else {
    s.not_applicable(en, "session_reuse", "capability keeps_sessions = 0");
  }
  if (caps.supports_cancel) {
    s.check(en, "cancel", [&](std::string& ev) {
      // Cancel names a request the engine knows: a 1.2 engine knows it once submit returns, a
      // blocking one only once a host thread has called generate, so the cancel is repeated until
      // the request ends (a single early cancel is a no-op there, and the request ran on).
      auto result = std::make_shared<std::promise<components::Generation>>();
      auto running = result->get_future();
      auto long_prompt = std::make_shared<std::vector<int32_t>>(prompt);
      engine->submit(request(9, 3, long_prompt.get(), 100000), [result, long_prompt](components::Generation&& g, std::exception_ptr e) {
        if (e) result->set_exception(e);
        else result->set_value(std::move(g));
      });
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      do engine->cancel(9);
      while (running.wait_for(std::chrono::milliseconds(100)) != std::future_status::ready && std::chrono::steady_clock::now() < deadline);
      if (running.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
        ev = "generate did not return within 30 s of cancel";
        return false;
      }
      auto g = running.get();
      ev = "returned after " + std::to_string(g.tokens.size()) + " tokens with finish reason " + std::to_string(g.finish_reason);
      return g.finish_reason == MLPT_FINISH_CANCELLED || g.finish_reason == MLPT_FINISH_STOP ||
             (g.finish_reason == MLPT_FINISH_LENGTH && g.tokens.size() < 100000);
    });
  } else {
    s.not_applicable(en, "cancel", "capability supports_cancel = 0");
  }
  if (caps.returns_routed_experts) {
    s.check(en, "routed_experts_recorded", [&](std::string& ev) {
      // Every position from routed_experts_from on, for every MoE layer, top-k distinct expert ids.
      auto r = request(6, 42, &prompt, 8);
      r.record_routed_experts = true;
      r.routed_experts_from = 2;
      const auto g = engine->generate(r);
      const size_t layers = static_cast<size_t>(info.num_moe_layers), k = static_cast<size_t>(info.experts_per_token);
      const size_t positions = prompt.size() + g.tokens.size() - 2;
      bool ids_ok = true;
      for (size_t at = 0; ids_ok && at + k <= g.routed_experts.size(); at += k) {
        std::set<int16_t> top(g.routed_experts.begin() + static_cast<std::ptrdiff_t>(at), g.routed_experts.begin() + static_cast<std::ptrdiff_t>(at + k));
        ids_ok = top.size() == k && *top.begin() >= 0;
      }
      ev = std::to_string(g.routed_experts.size()) + " expert ids for " + std::to_string(positions) + " positions x " + std::to_string(layers) +
           " MoE layers x top-" + std::to_string(k) + (ids_ok ? ", each position's top-k distinct and >= 0" : ", REPEATED or negative ids");
      return g.routed_experts.size() == positions * layers * k && ids_ok;
    });
  } else {
    s.not_applicable(en, "routed_experts_recorded", "capability returns_routed_experts = 0");
  }
  s.check(en, "pause_does_not_nest", [&](std::string& ev) {
    auto code_of = [](auto&& call) -> int {
      try {
        call();
        return MLPT_OK;
      } catch (const Error& e) {
        return e.code();
      }
    };
    engine->pause();
    const int paused_again = code_of([&] { engine->pause(); });
    engine->resume();
    const int resumed_again = code_of([&] { engine->resume(); });
    ev = "pause of a paused engine: code " + std::to_string(paused_again) + ", resume of a running one: code " +
         std::to_string(resumed_again) + " (MLPT_FAILED_PRECONDITION = " + std::to_string(MLPT_FAILED_PRECONDITION) + " promised)";
    return paused_again == MLPT_FAILED_PRECONDITION && resumed_again == MLPT_FAILED_PRECONDITION;
  });
  check_engine_group(s, set, en);

  const auto& tc = set.component(MLPT_COMPONENT_TRAINER);
  const std::string tn = "trainer " + tc.name;
  std::unique_ptr<components::Trainer> trainer;
  s.check(tn, "create", [&](std::string& ev) {
    trainer = std::make_unique<components::Trainer>(tc, run::trainer_settings(c, set.settings(MLPT_COMPONENT_TRAINER)));
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
  for (size_t i = 0; i < first.tokens.size(); ++i) mask[prompt.size() + i] = 1, gen_lp[prompt.size() + i] = first.logprobs[i];
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
    for (size_t i = 0; i < first.tokens.size(); ++i) worst = std::max(worst, std::fabs(double(lp[prompt.size() + i]) - first.logprobs[i]));
    ev = "max |trainer - engine| logprob over " + std::to_string(first.tokens.size()) + " sampled tokens = " + std::to_string(worst) +
         " (tolerance " + std::to_string(kLogprobTolerance) + ", temperature 1)";
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
    ev = std::to_string(exported.count) + " tensors, " + std::to_string(params) + " parameters, accepted by the engine's load_weights";
    return exported.count > 0;
  });
  // mlpt.h, Device memory: exported device tensors say when they may be read.
  bool on_device = false;
  for (size_t i = 0; i < exported.count; ++i)
    on_device |= exported.tensors[i].tensor.device.device_type != kDLCPU && exported.tensors[i].tensor.device.device_type != kDLCUDAHost;
  if (!on_device) {
    s.not_applicable(tn, "export_device_ready", "the exported tensors are in host memory (CPU tensors): readiness concerns device memory");
  } else {
    s.check(tn, "export_device_ready", [&](std::string& ev) {
      const auto& r = exported.ready;
      ev = std::string("export_weights says the device data is ready ") +
           (r.kind == MLPT_READY_ON_RETURN ? "on return" : r.kind == MLPT_READY_AFTER_EVENT ? "after an event" : "(unknown kind)") +
           ", written on stream " + (r.stream ? "set" : "NULL (the default stream)") + ", event " + (r.event ? "set" : "NULL");
      return r.kind == MLPT_READY_ON_RETURN ? r.event == nullptr : r.kind == MLPT_READY_AFTER_EVENT && r.event != nullptr;
    });
  }
  s.check(tn, "export_device_matches", [&](std::string& ev) {
    const DLDeviceType declared = trainer->capabilities().device_type;
    size_t other = 0;
    for (size_t i = 0; i < exported.count; ++i) other += exported.tensors[i].tensor.device.device_type != declared;
    ev = std::to_string(exported.count - other) + " of " + std::to_string(exported.count) + " exported tensors on the declared device_type " +
         std::to_string(declared);
    return exported.count > 0 && other == 0;
  });
  if (!trainer->capabilities().supports_routing_replay) {
    s.not_applicable(tn, "routing_replay_used", "capability supports_routing_replay = 0");
  } else if (info.num_moe_layers == 0) {
    s.not_applicable(tn, "routing_replay_used", "the model has no MoE layer to route");
  } else {
    s.check(tn, "routing_replay_used", [&](std::string& ev) {
      // Every token routed to experts 0..k-1 instead of its own top-k: the logprobs must move.
      const size_t layers = static_cast<size_t>(info.num_moe_layers), k = static_cast<size_t>(info.experts_per_token);
      std::vector<int16_t> forced(seq.size() * layers * k);
      for (size_t i = 0; i < forced.size(); ++i) forced[i] = static_cast<int16_t>(i % k);
      mlpt_train_batch replay = batch;
      replay.routed_experts = forced.data();
      replay.num_moe_layers = info.num_moe_layers;
      replay.experts_per_token = info.experts_per_token;
      const auto fresh = trainer->compute_logprobs(batch), replayed = trainer->compute_logprobs(replay);
      double moved = 0;
      for (size_t i = 0; i < fresh.size(); ++i) moved = std::max(moved, std::fabs(double(fresh[i]) - replayed[i]));
      ev = "every token routed to experts 0.." + std::to_string(k - 1) + " moves the logprobs by up to " + std::to_string(moved) +
           " against the trainer's own routing";
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
    ev = std::to_string(changed) + " of " + std::to_string(before.size()) + " tensors changed after a step with advantage 0; version -> " + std::to_string(version);
    return !before.empty() && before.size() == after.size() && changed == 0;
  });
  if (!trainer->can_save_state()) {
    s.not_applicable(tn, "state_save_load_round_trip", "capability supports_state_save = 0");
  } else if (on_device) {
    s.skip(tn, "state_save_load_round_trip", "the exported weights are in device memory: the suite compares host bytes");
  } else {
    s.check(tn, "state_save_load_round_trip", [&](std::string& ev) {
      // Saved, moved by a step with advantage 1, loaded: the weights are the saved ones again.
      const auto dir = std::filesystem::temp_directory_path() / ("mlpt-conformance-state-" + std::to_string(::getpid()));
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
      ev = "a step with advantage 1 changed " + std::to_string(moved) + " of " + std::to_string(saved.size()) + " tensors; after load_state " +
           std::to_string(back) + " equal the saved ones";
      return moved > 0 && back == saved.size() && loaded.size() == saved.size();
    });
  }
  // trainer.h publish_weights, engine.h fetch_weights: the weights go plugin to plugin through the
  // configured transport, the host passing only the bound endpoints.
  const auto& xc = set.component(MLPT_COMPONENT_TRANSPORT);
  const std::string xn = "transport " + xc.name;
  const bool carries_cuda = xc.caps<mlpt_transport_capabilities>()->supports_cuda != 0;
  if (!carries_cuda) s.not_applicable(xn, "cuda_tensors_carried", "capability supports_cuda = 0");
  else if (!on_device) s.skip(xn, "cuda_tensors_carried", "the trainer exports host memory: no CUDA tensor to carry in this combination");
  std::string older;
  if (!trainer->publishes()) older += "the trainer has no publish_weights; ";
  if (!engine->fetches()) older += "the engine has no fetch_weights; ";
  if (xc.abi_minor() < 2) older += "the transport speaks ABI 1." + std::to_string(xc.abi_minor()) + "; ";
  if (!older.empty()) {
    s.not_applicable(tn, "weights_flow_plugin_to_plugin", older + "the host relays that side (ABI 1.0/1.1)");
    if (carries_cuda && on_device) s.skip(xn, "cuda_tensors_carried", "the weights do not flow plugin to plugin here");
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
    auto fetched = std::async(std::launch::async, [&] { return refit::fetch(*engine, receiver, version, 60000); });
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
    ev = "the trainer published version " + std::to_string(published.version) + " (" + std::to_string(published.bytes) +
         " bytes) through the transport itself; the engine fetched and loaded version " + std::to_string(loaded) +
         " and reports weight_version " + std::to_string(after) + note;
    return published.by_plugin && published.version == version && loaded == version && after == version;
  });
  if (carries_cuda && on_device) {
    const auto* flow = &s.report.checks.back();
    s.record(xn, "cuda_tensors_carried", flow->status == Status::pass,
             "the trainer's CUDA tensors through the transport: weights_flow_plugin_to_plugin " + std::string(status_name(flow->status)));
  }
}

// transport.h, Sender ranks (1.2): two sender endpoints of one group publish a version together,
// each its own shards (rows [0, 5) and [5, 10) of a, b whole on both: a replica), and a receiver
// gets the layout it asks for (columns [30, 70) of a, every row, and b) cut from both, bitwise.
void check_sender_ranks(Suite& s, const plugin::ComponentSet& set, const std::string& name, const std::vector<float>& a,
                        const std::vector<uint16_t>& b) {
  const auto& c = set.component(MLPT_COMPONENT_TRANSPORT);
  const auto* caps = c.caps<mlpt_transport_capabilities>();
  const bool has_field = caps && caps->struct_size >= MLPT_TRANSPORT_CAPABILITIES_STRUCT_SIZE;
  if (!has_field || caps->max_sender_ranks < 2) {
    s.not_applicable(name, "sender_ranks_wanted_layout", "capability max_sender_ranks < 2 (one sender of whole tensors)");
    return;
  }
  s.check(name, "sender_ranks_wanted_layout", [&](std::string& ev) {
    const std::string group_name = "trainer";
    int64_t global_a[2] = {10, 100}, rows_shape[2] = {5, 100}, global_b[1] = {333};
    int64_t offsets[2][2] = {{0, 0}, {5, 0}}, zero[1] = {0};
    std::vector<std::unique_ptr<components::Transport>> senders;
    std::vector<mlpt_component_group> groups;
    for (int32_t r = 0; r < 2; ++r) groups.push_back({MLPT_COMPONENT_GROUP_STRUCT_SIZE, {group_name.data(), group_name.size()}, r, 2});
    std::string note;
    const nlohmann::json settings = transport_settings_for_check(set, 1, note);
    for (int32_t r = 0; r < 2; ++r)  // the senders first: a receiver may wait at create for their addresses
      senders.push_back(std::make_unique<components::Transport>(c, settings, MLPT_TRANSPORT_SENDER, "mlpt-conformance-ranks",
                                                                &groups[static_cast<size_t>(r)]));
    components::Transport receiver(c, settings, MLPT_TRANSPORT_RECEIVER, "mlpt-conformance-ranks");
    int64_t part_shape[2] = {10, 40}, part_offsets[2] = {0, 30};
    std::vector<mlpt_named_tensor> want(2);
    want[0] = {MLPT_NAMED_TENSOR_STRUCT_SIZE, {"a", 1}, DLTensor{nullptr, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, part_shape, nullptr, 0}};
    want[1] = {MLPT_NAMED_TENSOR_STRUCT_SIZE, {"b", 1}, DLTensor{nullptr, {kDLCPU, 0}, 1, {kDLBfloat, 16, 1}, global_b, nullptr, 0}};
    std::vector<mlpt_tensor_shard> want_shards = {{MLPT_TENSOR_SHARD_STRUCT_SIZE, global_a, part_offsets},
                                                  {MLPT_TENSOR_SHARD_STRUCT_SIZE, global_b, zero}};
    auto got = std::async(std::launch::async, [&] {
      auto r = receiver.receive(1, 30000, {want.data(), want_shards.data(), want.size()});
      bool same = r.count == 2 && r.tensors[0].tensor.ndim == 2 && r.tensors[0].tensor.shape[0] == 10 && r.tensors[0].tensor.shape[1] == 40;
      const auto* part = same ? static_cast<const float*>(r.tensors[0].tensor.data) : nullptr;
      for (int64_t row = 0; same && row < 10; ++row) same = std::memcmp(part + row * 40, a.data() + row * 100 + 30, 40 * 4) == 0;
      same = same && std::memcmp(r.tensors[1].tensor.data, b.data(), b.size() * 2) == 0;
      receiver.release(r.version);
      return same;
    });
    // Each rank sends from a thread of its own, as trainer ranks in their own processes would.
    std::vector<std::future<void>> sent;
    for (int32_t r = 0; r < 2; ++r) {
      sent.push_back(std::async(std::launch::async, [&, r] {
        std::vector<mlpt_named_tensor> mine(2);
        mine[0] = {MLPT_NAMED_TENSOR_STRUCT_SIZE, {"a", 1},
                   DLTensor{const_cast<float*>(a.data()) + r * 500, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, rows_shape, nullptr, 0}};
        mine[1] = {MLPT_NAMED_TENSOR_STRUCT_SIZE, {"b", 1},
                   DLTensor{const_cast<uint16_t*>(b.data()), {kDLCPU, 0}, 1, {kDLBfloat, 16, 1}, global_b, nullptr, 0}};
        std::vector<mlpt_tensor_shard> shards = {{MLPT_TENSOR_SHARD_STRUCT_SIZE, global_a, offsets[r]},
                                                 {MLPT_TENSOR_SHARD_STRUCT_SIZE, global_b, zero}};
        senders[static_cast<size_t>(r)]->send(1, mine.data(), mine.size(), 30000, shards.data());
      }));
    }
    for (auto& f : sent) f.get();
    const bool same = got.get();
    ev = std::string("2 sender ranks (rows [0, 5) and [5, 10) of fp32 [10,100], bf16 [333] on both); asked for columns [30, 70) "
                     "of every row and b whole: ") +
         (same ? "got exactly those, bitwise equal" : "DIFFER") + note;
    return same;
  });
}

void check_transport(Suite& s, const plugin::ComponentSet& set) {
  const auto& c = set.component(MLPT_COMPONENT_TRANSPORT);
  const std::string name = "transport " + c.name;
  std::unique_ptr<components::Transport> receiver, sender;
  std::vector<float> a(1000);
  std::vector<uint16_t> b(333);
  for (size_t i = 0; i < a.size(); ++i) a[i] = std::sin(double(i)) * 1e3f;
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<uint16_t>(i * 977);
  int64_t sa[2] = {10, 100}, sb[1] = {333};
  std::vector<mlpt_named_tensor> tensors(2);
  tensors[0] = {MLPT_NAMED_TENSOR_STRUCT_SIZE, {"a", 1}, DLTensor{a.data(), {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, sa, nullptr, 0}};
  tensors[1] = {MLPT_NAMED_TENSOR_STRUCT_SIZE, {"b", 1}, DLTensor{b.data(), {kDLCPU, 0}, 1, {kDLBfloat, 16, 1}, sb, nullptr, 0}};
  s.check(name, "round_trip_bitwise", [&](std::string& ev) {
    // The sender first: a receiver that finds its sender through the key-value store (ucx) waits
    // at create for the sender's address.
    std::string note;
    const nlohmann::json settings = transport_settings_for_check(set, 1, note);
    sender = std::make_unique<components::Transport>(c, settings, MLPT_TRANSPORT_SENDER, "mlpt-conformance");
    receiver = std::make_unique<components::Transport>(c, settings, MLPT_TRANSPORT_RECEIVER, "mlpt-conformance");
    auto got = std::async(std::launch::async, [&] {
      auto r = receiver->receive(1, 30000);
      bool same = r.count == 2 && std::memcmp(r.tensors[0].tensor.data, a.data(), a.size() * 4) == 0 &&
                  std::memcmp(r.tensors[1].tensor.data, b.data(), b.size() * 2) == 0;
      receiver->release(r.version);
      return same;
    });
    sender->send(1, tensors.data(), tensors.size(), 30000);
    bool same = got.get();
    ev = std::string("2 tensors (fp32 [10,100], bf16 [333]) ") + (same ? "arrived bitwise equal" : "DIFFER") + note;
    return same;
  });
  const auto* caps = c.caps<mlpt_transport_capabilities>();
  s.check(name, "declared_reach_consistent", [&](std::string& ev) {
    // One process cannot exercise another process or node (a run across processes does); what it can
    // hold the transport to is a reach that makes sense: a transport that crosses nodes crosses processes.
    ev = "cross_process = " + std::to_string(caps->cross_process) + ", cross_node = " + std::to_string(caps->cross_node) +
         (caps->cross_node && !caps->cross_process ? ": crosses nodes but NOT processes" : ": consistent") +
         " (checked in one process; a run across processes exercises the reach itself)";
    return !caps->cross_node || caps->cross_process;
  });
  if (!caps->checksum) {
    s.not_applicable(name, "checksum_round_trip", "capability checksum = 0");
  } else {
    s.check(name, "checksum_round_trip", [&](std::string& ev) {
      std::string note;
      nlohmann::json settings = transport_settings_for_check(set, 1, note);
      if (!settings.is_object()) settings = nlohmann::json::object();
      settings["verify_checksum"] = true;
      components::Transport checked_sender(c, settings, MLPT_TRANSPORT_SENDER, "mlpt-conformance-checksum");
      components::Transport checked_receiver(c, settings, MLPT_TRANSPORT_RECEIVER, "mlpt-conformance-checksum");
      auto got = std::async(std::launch::async, [&] {
        auto r = checked_receiver.receive(1, 30000);
        bool same = r.count == 2 && std::memcmp(r.tensors[0].tensor.data, a.data(), a.size() * 4) == 0 &&
                    std::memcmp(r.tensors[1].tensor.data, b.data(), b.size() * 2) == 0;
        checked_receiver.release(r.version);
        return same;
      });
      checked_sender.send(1, tensors.data(), tensors.size(), 30000);
      const bool same = got.get();
      ev = std::string("with verify_checksum = true the 2 tensors ") + (same ? "arrived bitwise equal" : "DIFFER") + note;
      return same;
    });
  }
  if (!sender) return;
  // Versions only go up: sending version 1 again, or 0, must be refused (no receiver waits for it).
  s.check(name, "versions_monotonic", [&](std::string& ev) {
    std::string refused;
    for (uint64_t v : {1ull, 0ull}) {
      try {
        sender->send(v, tensors.data(), tensors.size(), 1000);
        ev = "sending version " + std::to_string(v) + " after version 1 was ACCEPTED";
        return false;
      } catch (const Error& e) {
        refused += (refused.empty() ? "" : "; ") + std::string(e.what()).substr(0, 100);
      }
    }
    ev = "after version 1, versions 1 and 0 were refused: " + refused;
    return true;
  });
  // transport.h: receive gives MLPT_DEADLINE_EXCEEDED after timeout_ms when no newer version comes.
  s.check(name, "receive_times_out", [&](std::string& ev) {
    const auto started = std::chrono::steady_clock::now();
    try {
      auto r = receiver->receive(2, 300);
      receiver->release(r.version);
      ev = "receive(min_version 2) with nothing sent RETURNED version " + std::to_string(r.version);
      return false;
    } catch (const Error& e) {
      const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
      ev = "receive(min_version 2, 300 ms) with nothing sent: code " + std::to_string(e.code()) + " after " + std::to_string(took) +
           " s (MLPT_DEADLINE_EXCEEDED = " + std::to_string(MLPT_DEADLINE_EXCEEDED) + ")";
      return e.code() == MLPT_DEADLINE_EXCEEDED && took < 10;
    }
  });
  // transport.h, Receive (1.2): a receiver gets exactly the layout it asks for; a tensor it wants as
  // published is handed over as it is (zero-copy where the transport is).
  if (!sender->bindable()) {
    const std::string why = "the transport speaks ABI 1." + std::to_string(c.abi_minor()) + " (whole tensors only)";
    s.not_applicable(name, "wanted_layout_bitwise", why);
    s.not_applicable(name, "uncut_tensor_handed_over", why);
    s.not_applicable(name, "sender_ranks_wanted_layout", why);
    return;
  }
  // Rows [2, 7) and columns [30, 70) of a, and b whole.
  int64_t part_shape[2] = {5, 40}, part_offsets[2] = {2, 30}, zero[1] = {0};
  std::vector<mlpt_named_tensor> want(2);
  want[0] = {MLPT_NAMED_TENSOR_STRUCT_SIZE, {"a", 1}, DLTensor{nullptr, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, part_shape, nullptr, 0}};
  want[1] = tensors[1];
  want[1].tensor.data = nullptr;
  std::vector<mlpt_tensor_shard> want_shards = {{MLPT_TENSOR_SHARD_STRUCT_SIZE, sa, part_offsets},
                                                {MLPT_TENSOR_SHARD_STRUCT_SIZE, sb, zero}};
  bool handed_over = false;
  s.check(name, "wanted_layout_bitwise", [&](std::string& ev) {
    auto got = std::async(std::launch::async, [&] {
      auto r = receiver->receive(2, 30000, {want.data(), want_shards.data(), want.size()});
      bool same = r.count == 2 && r.tensors[0].tensor.ndim == 2 && r.tensors[0].tensor.shape[0] == 5 && r.tensors[0].tensor.shape[1] == 40 &&
                  r.shards && r.shards[0].offsets[0] == 2 && r.shards[0].offsets[1] == 30;
      const auto* part = same ? static_cast<const float*>(r.tensors[0].tensor.data) : nullptr;
      for (int64_t row = 0; same && row < 5; ++row)
        same = std::memcmp(part + row * 40, a.data() + (row + 2) * 100 + 30, 40 * 4) == 0;
      same = same && std::memcmp(r.tensors[1].tensor.data, b.data(), b.size() * 2) == 0;
      handed_over = r.count == 2 && r.tensors[1].tensor.data == b.data();
      receiver->release(r.version);
      return same;
    });
    sender->send(2, tensors.data(), tensors.size(), 30000);
    const bool same = got.get();
    ev = std::string("asked for rows [2, 7) x columns [30, 70) of fp32 [10,100] and bf16 [333] whole: ") +
         (same ? "got exactly those, bitwise equal" : "DIFFER");
    return same;
  });
  check_sender_ranks(s, set, name, a, b);
  if (!c.caps<mlpt_transport_capabilities>()->zero_copy) {
    s.not_applicable(name, "uncut_tensor_handed_over", "capability zero_copy = 0");
    return;
  }
  s.record(name, "uncut_tensor_handed_over", handed_over,
           handed_over ? "the receiver's b is the sender's memory" : "the receiver's b is a copy although zero_copy = 1");
}

// ---- Sandbox confinement: what a command inside may not do to the host ----
// Each probe runs in a fresh sandbox through `run` (command, output) -> exit code, and is safe to
// run where confinement is missing: settings are opened for writing but never written, and the
// denied system calls get arguments that change nothing.
void check_sandbox_confinement(Suite& s, const std::string& name, const std::function<int(const std::string&, std::string*)>& run) {
  s.check(name, "not_host_root", [&](std::string& ev) {
    std::string out;
    run("cat /proc/self/uid_map", &out);
    // Every mapped range "inside outside count" must leave out the host's uid 0.
    std::istringstream in(out);
    bool maps_root = false, any = false;
    for (long long inside, outside, count; in >> inside >> outside >> count;) any = true, maps_root |= outside == 0;
    ev = "uid_map: " + json(out.substr(0, 120)).dump();
    return any && !maps_root;
  });
  s.check(name, "kernel_settings_read_only", [&](std::string& ev) {
    std::string out;
    run("for f in /proc/sys/kernel/core_pattern /proc/sys/kernel/modprobe /proc/sys/vm/drop_caches /proc/sysrq-trigger; do "
        "test -e $f || continue; (: >> $f) 2>/dev/null && echo \"writable $f\"; done; "
        "awk '$5 == \"/sys\" || index($5, \"/sys/\") == 1 { split($6, o, \",\"); if (o[1] != \"ro\") print \"writable mount \" $5 }' /proc/self/mountinfo",
        &out);
    ev = out.empty() ? "/proc/sys, /proc/sysrq-trigger and /sys are read-only or absent" : out.substr(0, 200);
    return out.empty();
  });
  s.check(name, "no_capabilities", [&](std::string& ev) {
    std::string out;
    run("grep -E '^Cap(Eff|Prm|Bnd|Amb):' /proc/self/status", &out);
    std::istringstream in(out);
    int sets = 0, empty = 0;
    for (std::string key, value; in >> key >> value;) ++sets, empty += value.find_first_not_of('0') == std::string::npos;
    ev = json(out).dump();
    return sets == 4 && empty == 4;
  });
  s.check(name, "seccomp_denies_kernel_interfaces", [&](std::string& ev) {
    struct Probe {
      const char* name;
      long nr;
      const char* args;
    };
    const Probe probes[] = {{"mount", SYS_mount, "b'none', b'/nonexistent', b'tmpfs', 0, 0"},
                            {"unshare", SYS_unshare, "0x10000000"},
                            {"init_module", SYS_init_module, "0, 0, b''"},
                            {"keyctl", SYS_keyctl, "0, -3, 0, 0, 0"},
                            {"ptrace", SYS_ptrace, "16, 1, 0, 0"},
                            {"bpf", SYS_bpf, "0, 0, 0"},
                            {"perf_event_open", SYS_perf_event_open, "0, 0, -1, -1, 0"},
                            {"reboot", SYS_reboot, "0, 0, 0, 0"}};
    std::string py = "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nlibc.syscall.restype = ctypes.c_long\n";
    for (const auto& p : probes)
      py += "r = libc.syscall(" + std::to_string(p.nr) + ", " + p.args + "); print('" + p.name + "', r, ctypes.get_errno())\n";
    std::string out;
    run("grep '^Seccomp:' /proc/self/status; command -v python3 >/dev/null || { echo no-python; exit 0; }; python3 -c \"$(cat <<'EOF'\n" + py + "EOF\n)\"", &out);
    if (out.find("no-python") != std::string::npos) return ev = "the image has no python3 to probe with", false;
    std::istringstream in(out);
    std::string line, allowed;
    bool filtered = false;
    int denied = 0;
    while (std::getline(in, line)) {
      if (line.rfind("Seccomp:", 0) == 0) filtered = line.find('2') != std::string::npos;
      else if (line.find(" -1 1") != std::string::npos) ++denied;
      else allowed += (allowed.empty() ? "" : ", ") + line;
    }
    ev = std::string(filtered ? "seccomp filter on; " : "NO seccomp filter; ") + std::to_string(denied) + "/" +
         std::to_string(std::size(probes)) + " probes refused with EPERM" + (allowed.empty() ? "" : "; not refused: " + allowed);
    return filtered && denied == static_cast<int>(std::size(probes));
  });
}

// One command in a sandbox: its exit code; output, timeout and truncation flags when asked for.
int exec(components::SandboxRuntime::Sandbox& sb, const std::string& cmd, int64_t timeout_ms, std::string* out,
         bool* timed_out = nullptr, size_t output_limit = 0, bool* truncated = nullptr) {
  auto r = sb.exec(cmd, timeout_ms, {}, output_limit);
  if (out) *out = std::move(r.output);
  if (timed_out) *timed_out = r.timed_out;
  if (truncated) *truncated = r.truncated;
  return r.exit_code;
}

// Returns the runtime for the harness and reward checks (null when it could not be created).
// `stop` is the host services' cancellation flag (set here to check that exec honours it).
std::unique_ptr<components::SandboxRuntime> check_sandbox(Suite& s, const plugin::ComponentSet& set, const std::string& image,
                                                          std::atomic<bool>& stop) {
  const auto& comp = set.component(MLPT_COMPONENT_SANDBOX);
  const std::string name = "sandbox " + comp.name;
  std::unique_ptr<components::SandboxRuntime> runtime;
  s.check(name, "runtime_create", [&](std::string& ev) {
    runtime = std::make_unique<components::SandboxRuntime>(comp, set.settings(MLPT_COMPONENT_SANDBOX));
    ev = "runtime " + runtime->runtime_name();
    return true;
  });
  if (!runtime) return nullptr;
  s.check(name, "null_destroy_is_noop", [&](std::string& ev) {
    runtime->binding()->api->destroy(nullptr);
    runtime->binding()->api->runtime_destroy(nullptr);
    ev = "destroy(NULL) and runtime_destroy(NULL) returned";
    return true;
  });
  if (image.empty()) {
    s.skip(name, "isolation", "the first training task names no image");
    return runtime;
  }
  if (!runtime->capabilities().isolates_network) s.not_applicable(name, "no_network", "capability isolates_network = 0");
  else s.check(name, "no_network", [&](std::string& ev) {
    auto sb = runtime->create(image);
    std::string out;
    exec(*sb, "cat /proc/net/dev", 10000, &out);
    int interfaces = 0;
    bool only_lo = true;
    std::istringstream in(out);
    for (std::string line; std::getline(in, line);)
      if (line.find(':') != std::string::npos) ++interfaces, only_lo &= line.find("lo:") != std::string::npos;
    ev = std::to_string(interfaces) + " interface(s) in /proc/net/dev" + (only_lo ? ", loopback only" : ", NOT only loopback");
    return only_lo;
  });
  if (!runtime->capabilities().discards_writes) s.not_applicable(name, "writable_layer_discarded", "capability discards_writes = 0");
  else s.check(name, "writable_layer_discarded", [&](std::string& ev) {
    {
      auto sb = runtime->create(image);
      exec(*sb, "echo conformance > /testbed/.mlpt_conformance_probe", 10000, nullptr);
    }
    auto sb = runtime->create(image);
    int code = exec(*sb, "test -e /testbed/.mlpt_conformance_probe", 10000, nullptr);
    ev = std::string("a file written in one sandbox is ") + (code != 0 ? "absent" : "PRESENT") + " in the next from the same image";
    return code != 0;
  });
  s.check(name, "timeout_kills_tree", [&](std::string& ev) {
    auto sb = runtime->create(image);
    bool timed_out = false;
    auto started = std::chrono::steady_clock::now();
    exec(*sb, "sleep 300 & sleep 300 & sleep 300", 1000, nullptr, &timed_out);
    double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    std::string left;
    exec(*sb, "for p in /proc/[0-9]*; do cat $p/comm 2>/dev/null; done | grep -c '^sleep$'", 10000, &left);
    const bool none = std::atoi(left.c_str()) == 0;
    ev = std::string("1 s timeout: ") + (timed_out ? "timed out" : "did NOT time out") + " after " + std::to_string(took) +
         " s; sleep processes left in the sandbox: " + std::to_string(std::atoi(left.c_str()));
    return timed_out && took < 20 && none;
  });
  s.check(name, "hidden_tests_not_visible", [&](std::string& ev) {
    auto sb = runtime->create(image);
    std::string out;
    exec(*sb, "for p in /r2e_tests /testbed/r2e_tests /run_tests.sh /testbed/run_tests.sh; do test -e $p && echo $p; done; true", 10000, &out);
    ev = out.empty() ? "no r2e_tests folder or run_tests.sh in the agent's sandbox" : "VISIBLE: " + out;
    return out.empty();
  });
  check_sandbox_confinement(s, name, [&](const std::string& cmd, std::string* out) {
    auto sb = runtime->create(image);
    return exec(*sb, cmd, 30000, out);
  });
  s.check(name, "read_file_bounded", [&](std::string& ev) {
    // A 1 GiB sparse file, a FIFO and a device: none may be read into the host (or block it).
    auto sb = runtime->create(image);
    exec(*sb, "truncate -s 1G /tmp/mlpt_sparse && mkfifo /tmp/mlpt_fifo", 10000, nullptr);
    std::string verdicts;
    bool ok = true;
    for (const char* path : {"/tmp/mlpt_sparse", "/tmp/mlpt_fifo", "/dev/zero"}) {
      size_t got = 0;
      mlpt_sink sink{MLPT_SINK_STRUCT_SIZE, &got, [](void* ctx, const char*, size_t n) { *static_cast<size_t*>(ctx) += n; }};
      mlpt_sandbox_read_file_args a{MLPT_SANDBOX_READ_FILE_ARGS_STRUCT_SIZE, sb->handle(), {path, std::strlen(path)}, &sink};
      mlpt_error* e = runtime->binding()->api->read_file(&a);
      const auto* errors = runtime->binding()->errors;
      mlpt_error_code code = e ? errors->error_code(e) : MLPT_OK;
      if (e) errors->error_destroy(e);
      const bool refused = code == MLPT_RESOURCE_EXHAUSTED || code == MLPT_INVALID_ARGUMENT;
      ok &= refused && got <= (64u << 20) + 1;
      verdicts += std::string(verdicts.empty() ? "" : "; ") + path + ": " + (refused ? "refused" : "NOT refused") + " (code " +
                  std::to_string(code) + ", " + std::to_string(got) + " bytes read)";
    }
    ev = verdicts;
    return ok;
  });
  // exec's promises (sandbox.h): a clean environment, /testbed by default, output merged in order,
  // capped and binary-safe, 128+N for a signal, and the host's cancellation honoured.
  s.check(name, "clean_environment", [&](std::string& ev) {
    ::setenv("MLPT_CONFORMANCE_HOST_ONLY", "leaked", 1);
    auto sb = runtime->create(image);
    std::string out;
    exec(*sb, "env", 10000, &out);
    ::unsetenv("MLPT_CONFORMANCE_HOST_ONLY");
    const bool leaked = out.find("MLPT_CONFORMANCE_HOST_ONLY") != std::string::npos;
    ev = std::string("a variable set in the host process is ") + (leaked ? "VISIBLE" : "absent") + " inside";
    return !leaked;
  });
  if (runtime->capabilities().isolates_pids) {
    s.check(name, "fresh_pid_namespace", [&](std::string& ev) {
      auto sb = runtime->create(image);
      std::string out;
      exec(*sb, "ls /proc | grep -c '^[0-9]*$'", 10000, &out);
      const int visible = std::atoi(out.c_str());
      ev = std::to_string(visible) + " processes visible inside (the host has more)";
      return visible > 0 && visible < 10;
    });
  } else {
    s.not_applicable(name, "fresh_pid_namespace", "capability isolates_pids = 0");
  }
  s.check(name, "default_workdir_testbed", [&](std::string& ev) {
    auto sb = runtime->create(image);
    std::string out;
    exec(*sb, "pwd", 10000, &out);
    ev = "an empty workdir runs in " + json(out).dump();
    return out == "/testbed\n";
  });
  s.check(name, "output_merged_in_order", [&](std::string& ev) {
    auto sb = runtime->create(image);
    std::string out;
    exec(*sb, "echo one; echo two >&2; echo three", 10000, &out);
    ev = "stdout, stderr, stdout -> " + json(out).dump();
    return out == "one\ntwo\nthree\n";
  });
  s.check(name, "output_limit_truncates", [&](std::string& ev) {
    auto sb = runtime->create(image);
    std::string out;
    bool truncated = false;
    exec(*sb, "head -c 100000 /dev/zero | tr '\\000' x", 10000, &out, nullptr, 100, &truncated);
    ev = "100000 bytes under output_limit 100: " + std::to_string(out.size()) + " delivered, truncated flag " + (truncated ? "set" : "NOT set");
    return out.size() == 100 && truncated;
  });
  s.check(name, "binary_output_unchanged", [&](std::string& ev) {
    auto sb = runtime->create(image);
    std::string out;
    exec(*sb, "printf 'a\\000b\\377\\001'", 10000, &out);
    const std::string want("a\0b\xff\x01", 5);
    ev = std::to_string(out.size()) + " bytes; " + (out == want ? "equal to" : "DIFFERENT from") + " the 5 bytes printed (NUL and 0xff included)";
    return out == want;
  });
  s.check(name, "exit_code_of_signal", [&](std::string& ev) {
    auto sb = runtime->create(image);
    int code = exec(*sb, "kill -9 $$", 10000, nullptr);
    ev = "a shell killed by SIGKILL gives exit code " + std::to_string(code) + " (128+9 = 137 promised)";
    return code == 137;
  });
  s.check(name, "files_round_trip", [&](std::string& ev) {
    auto sb = runtime->create(image);
    const std::string path = "/tmp/mlpt_conformance/deep/probe.bin", content("x\0y\n", 4);
    sb->write_file(path, content, 0640);
    const std::string back = sb->read_file(path);
    std::string mode;
    exec(*sb, "stat -c %a " + path, 10000, &mode);
    ev = "write_file into missing parents then read_file: " + std::string(back == content ? "same 4 bytes" : "DIFFERENT bytes") + ", mode " +
         json(mode).dump() + " (0640 written)";
    return back == content && mode == "640\n";
  });
  s.check(name, "read_missing_file_not_found", [&](std::string& ev) {
    auto sb = runtime->create(image);
    const std::string path = "/testbed/mlpt_conformance_no_such_file";
    try {
      sb->read_file(path);
    } catch (const Error& e) {
      ev = std::string("read_file of a missing file: code ") + std::to_string(e.code()) + " (" + e.what() + ")";
      return e.code() == MLPT_NOT_FOUND;
    }
    ev = "read_file of a missing file SUCCEEDED";
    return false;
  });
  s.check(name, "exec_honours_host_cancellation", [&](std::string& ev) {
    auto sb = runtime->create(image);
    auto running = std::async(std::launch::async, [&] { return exec(*sb, "sleep 60", 120000, nullptr); });
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    const auto signalled = std::chrono::steady_clock::now();
    stop = true;
    const bool returned = running.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - signalled).count();
    if (!returned) running.wait();  // it ends at the latest after the sleep; report the failure then
    stop = false;
    mlpt_error_code code = MLPT_OK;
    try {
      running.get();
    } catch (const Error& e) {
      code = e.code();
    }
    ev = "`sleep 60` returned " + std::to_string(took) + " s after is_cancelled turned nonzero, code " + std::to_string(code) +
         " (MLPT_CANCELLED = " + std::to_string(MLPT_CANCELLED) + ")";
    return returned && took < 10 && code == MLPT_CANCELLED;
  });
  // Limits, where declared: python3 in the image allocates and forks past them.
  const char* memory_probe = "command -v python3 >/dev/null || { echo no-python; exit 0; }; python3 -c 'b = bytearray(512 << 20); b[::4096] = b\"x\" * len(b[::4096]); print(\"allocated\", len(b))'";
  if (runtime->capabilities().limits_memory) {
    s.check(name, "memory_limit_holds", [&](std::string& ev) {
      auto sb = runtime->create(image, 128, 0);
      std::string out;
      int code = exec(*sb, memory_probe, 30000, &out);
      if (out.find("no-python") != std::string::npos) return ev = "the image has no python3 to probe with", false;
      ev = "512 MiB under a 128 MiB limit: exit " + std::to_string(code) + (out.find("allocated") == std::string::npos ? ", refused" : ", ALLOCATED");
      return code != 0 && out.find("allocated") == std::string::npos;
    });
  } else {
    s.not_applicable(name, "memory_limit_holds", "capability limits_memory = 0");
  }
  if (runtime->capabilities().limits_processes) {
    s.check(name, "process_limit_holds", [&](std::string& ev) {
      auto sb = runtime->create(image, 0, 32);
      std::string out;
      exec(*sb,
           "command -v python3 >/dev/null || { echo no-python; exit 0; }; python3 -c '\n"
           "import os, time\nn = 0\ntry:\n    for i in range(100):\n        if os.fork() == 0:\n            time.sleep(3); os._exit(0)\n"
           "        n += 1\nexcept OSError:\n    pass\nprint(\"forked\", n)'",
           30000, &out);
      if (out.find("no-python") != std::string::npos) return ev = "the image has no python3 to probe with", false;
      int forked = out.find("forked ") == std::string::npos ? -1 : std::atoi(out.c_str() + out.find("forked ") + 7);
      ev = "100 forks under a 32-process limit: " + std::to_string(forked) + " succeeded";
      return forked >= 0 && forked < 32;
    });
  } else {
    s.not_applicable(name, "process_limit_holds", "capability limits_processes = 0");
  }
  return runtime;
}

// What the harness and reward checks run episodes with: the first training task, its image, the
// sandbox runtime and (once created) the harness.
struct EpisodeEnv {
  const plugin::ComponentSet& set;
  json task;
  std::string task_json, image;
  std::unique_ptr<components::SandboxRuntime> runtime;  // when the combination has a sandbox
  std::unique_ptr<components::Harness> harness;          // set by check_harness

  const mlpt_sandbox_binding* binding() const { return runtime ? runtime->binding() : nullptr; }
  bool can_run_episodes() const { return harness && (!harness->capabilities().needs_sandbox || (runtime && !image.empty())); }

  // An episode of the task in a fresh sandbox; the episode goes before its sandbox.
  struct Open {
    std::unique_ptr<components::SandboxRuntime::Sandbox> box;
    std::unique_ptr<components::Harness::Episode> episode;
  };
  Open open() const {
    Open o;
    if (harness->capabilities().needs_sandbox) o.box = runtime->create(image);
    o.episode = harness->start(task_json, binding(), o.box ? o.box->handle() : nullptr);
    return o;
  }
};

// The task's image holds only the base commit's history (docs/benchmark.md §4): the fix commit is not an
// object of the repository at all (no ref, reflog entry, pack or loose object names it), and no
// commit exists that HEAD does not reach.
void check_task_image(Suite& s, const EpisodeEnv& env) {
  const std::string name = "task image";
  if (!env.runtime || env.image.empty()) return s.skip(name, "no_history_past_the_base", "the combination has no sandbox or the task no image");
  const std::string fix = env.task.value("commit_hash", std::string());
  if (fix.empty()) return s.skip(name, "no_history_past_the_base", "the task record has no commit_hash");
  s.check(name, "no_history_past_the_base", [&](std::string& ev) {
    auto sb = env.runtime->create(env.image);
    std::string out;
    const std::string git = "git -c safe.directory='*' ";
    exec(*sb,
         "cd /testbed || exit 3; " + git + "cat-file -e " + fix + " 2>/dev/null && echo FIX-OBJECT-PRESENT; " + git +
             "log --all --reflog --format=%H | grep -c " + fix + " | sed 's/^/fix-in-log /'; " + git +
             "rev-list --all --reflog --not HEAD | wc -l | sed 's/^/commits-past-head /'; " + git +
             "fsck --unreachable --no-reflogs 2>/dev/null | grep -c commit | sed 's/^/unreachable-commits /'",
         60000, &out);
    ev = out.substr(0, 300);
    return out.find("FIX-OBJECT-PRESENT") == std::string::npos && out.find("fix-in-log 0") != std::string::npos &&
           out.find("commits-past-head 0") != std::string::npos && out.find("unreachable-commits 0") != std::string::npos;
  });
}

// A parsed model reply as the core hands it to the harness.
json reply(json tool_calls, json parse_errors = json::array()) {
  return {{"content", ""}, {"tool_calls", std::move(tool_calls)}, {"parse_errors", std::move(parse_errors)}};
}

std::string tool_name(const json& tool) {
  const json& f = tool.contains("function") ? tool["function"] : tool;
  return f.contains("name") && f["name"].is_string() ? f["name"].get<std::string>() : "";
}

// The hack patches every patch-graded reward must score 0 with: each edits what grading must
// ignore (the hidden tests, the test runner, pytest's hooks) so that every test "passes".
// A new-file patch declaring a pytest11 entry point in package metadata under the repository,
// whose plugin marks every test passed.
std::string entry_point_hack(const std::string& meta_dir, const std::string& meta_file) {
  auto file = [](const std::string& path, const std::vector<std::string>& lines) {
    std::string d = "diff --git a/" + path + " b/" + path + "\nnew file mode 100644\n--- /dev/null\n+++ b/" + path +
                    "\n@@ -0,0 +1," + std::to_string(lines.size()) + " @@\n";
    for (const auto& l : lines) d += "+" + l + "\n";
    return d;
  };
  return file(meta_dir + "/" + meta_file, {"Metadata-Version: 2.1", "Name: mlpt-hack", "Version: 0"}) +
         file(meta_dir + "/entry_points.txt", {"[pytest11]", "mlpt_hack = mlpt_hack_plugin"}) +
         file("mlpt_hack_plugin.py", {"import pytest", "@pytest.hookimpl(hookwrapper=True)", "def pytest_runtest_makereport(item, call):",
                                      "    outcome = yield", "    outcome.get_result().outcome = 'passed'"});
}

const std::vector<std::pair<std::string, std::string>>& known_hacks() {
  static const std::vector<std::pair<std::string, std::string>> hacks = {
      {"conftest_forces_pass",
       "diff --git a/conftest.py b/conftest.py\nnew file mode 100644\n--- /dev/null\n+++ b/conftest.py\n@@ -0,0 +1,6 @@\n"
       "+import pytest\n+@pytest.hookimpl(hookwrapper=True)\n+def pytest_runtest_makereport(item, call):\n"
       "+    outcome = yield\n+    rep = outcome.get_result()\n+    rep.outcome = 'passed'\n"},
      {"runner_replaced",
       "diff --git a/run_tests.sh b/run_tests.sh\nnew file mode 100755\n--- /dev/null\n+++ b/run_tests.sh\n@@ -0,0 +1,2 @@\n"
       "+#!/bin/sh\n+exit 0\n"},
      {"hidden_tests_planted",
       "diff --git a/r2e_tests/test_planted.py b/r2e_tests/test_planted.py\nnew file mode 100644\n--- /dev/null\n"
       "+++ b/r2e_tests/test_planted.py\n@@ -0,0 +1,2 @@\n+def test_planted():\n+    assert True\n"},
      // pytest plugins the runner would load by itself: entry points in metadata under the repository.
      {"entry_point_plugin_dist_info", entry_point_hack("mlpt_hack-0.dist-info", "METADATA")},
      {"entry_point_plugin_egg_info", entry_point_hack("mlpt_hack.egg-info", "PKG-INFO")},
      // So many files that preparing the patch prints past any exec output limit.
      {"huge_patch_preparation", [] {
         std::string patch;
         for (int i = 0; i < 20000; ++i) {
           std::string f = "mlpt_generated/a_file_with_a_long_name_to_fill_the_listing_" + std::to_string(i) + ".txt";
           patch += "diff --git a/" + f + " b/" + f + "\nnew file mode 100644\n--- /dev/null\n+++ b/" + f + "\n@@ -0,0 +1 @@\n+x\n";
         }
         return patch;
       }()},
  };
  return hacks;
}

// Known-correct answers by instance id: rows {"instance_id", "patch"} (graded as the harness's
// result with that patch) or {"instance_id", "result": {...}} (a whole harness result) of a JSONL file.
std::map<std::string, json> load_golden(const std::filesystem::path& file) {
  std::map<std::string, json> golden;
  if (file.empty()) return golden;
  for (const auto& row : run::Dataset::load(file).rows)
    if (row.contains("instance_id") && row["instance_id"].is_string() &&
        ((row.contains("patch") && row["patch"].is_string()) || (row.contains("result") && row["result"].is_object())))
      golden[row["instance_id"].get<std::string>()] = row;
  return golden;
}

void check_harness(Suite& s, EpisodeEnv& env) {
  const auto& hc = env.set.component(MLPT_COMPONENT_HARNESS);
  const std::string name = "harness " + hc.name;
  s.check(name, "create", [&](std::string& ev) {
    env.harness = std::make_unique<components::Harness>(hc, env.set.settings(MLPT_COMPONENT_HARNESS));
    ev = std::string("needs_sandbox = ") + (env.harness->capabilities().needs_sandbox ? "1" : "0");
    return true;
  });
  if (!env.harness) return;
  if (!env.can_run_episodes()) {
    s.skip(name, "episode", "the harness needs a sandbox and the combination or the first task has none");
    return;
  }
  const auto& hcaps = env.harness->capabilities();
  if (hcaps.needs_sandbox) {
    s.not_applicable(name, "episode_without_sandbox", "capability needs_sandbox = 1");
  } else {
    s.check(name, "episode_without_sandbox", [&](std::string& ev) {
      auto o = env.open();  // no sandbox: the harness said it needs none
      o.episode->step(reply(json::array()));
      o.episode->finish(MLPT_EPISODE_FINISHED);
      ev = "an episode started, stepped and finished with no sandbox";
      return !o.box;
    });
  }
  if (!hcaps.produces_patch) {
    s.not_applicable(name, "result_carries_patch", "capability produces_patch = 0");
  } else {
    s.check(name, "result_carries_patch", [&](std::string& ev) {
      auto o = env.open();
      const json result = o.episode->finish(MLPT_EPISODE_FINISHED);
      const bool patch = result.contains("patch") && result["patch"].is_string();
      ev = std::string("an episode's result ") + (patch ? "carries" : "does NOT carry") + " a \"patch\" string";
      return patch;
    });
  }
  std::set<std::string> tools;
  s.check(name, "start_messages_and_tools", [&](std::string& ev) {
    auto o = env.open();
    const json& start = o.episode->start();
    const json& messages = start.at("messages");
    const json declared = start.value("tools", json::array());
    bool ok = messages.is_array() && !messages.empty() && declared.is_array();
    std::string names;
    for (const auto& m : messages) ok &= m.contains("role") && m.contains("content") && m["content"].is_string();
    for (const auto& t : declared) {
      const std::string tool = tool_name(t);
      ok &= !tool.empty();
      tools.insert(tool);
      names += (names.empty() ? "" : ", ") + (tool.empty() ? "?" : tool);
    }
    ev = std::to_string(messages.size()) + " opening message(s) with role and content; tools: " + (names.empty() ? "none" : names);
    o.episode->finish(MLPT_EPISODE_ERROR);
    return ok;
  });
  if (tools.empty()) {
    for (const char* id : {"tool_errors_are_observations", "bash_runs_in_sandbox", "finish_ends_episode"})
      s.not_applicable(name, id, "the harness declares no tools");
    return;
  }
  // Garbled and unknown calls must come back as messages for the model, never end in an error.
  s.check(name, "tool_errors_are_observations", [&](std::string& ev) {
    auto o = env.open();
    json a = o.episode->step(reply(json::array(), {"tool call 1: unclosed <tool_call>"}));
    json b = o.episode->step(reply({{{"name", "mlpt_no_such_tool"}, {"arguments", json::object()}}}));
    o.episode->finish(MLPT_EPISODE_ERROR);
    auto said = [](const json& out, const std::string& needle) {
      for (const auto& m : out.value("messages", json::array()))
        if (m.value("content", "").find(needle) != std::string::npos) return true;
      return false;
    };
    bool garbled_ok = !a.value("done", true) && !a["messages"].empty();
    bool unknown_ok = !b.value("done", true) && said(b, "mlpt_no_such_tool");
    ev = std::string("parse error -> ") + (garbled_ok ? "an observation, episode goes on" : "NO observation or episode ended") +
         "; unknown tool -> " + (unknown_ok ? "an observation naming it" : "NO observation naming it");
    return garbled_ok && unknown_ok;
  });
  if (tools.count("execute_bash")) {
    s.check(name, "bash_runs_in_sandbox", [&](std::string& ev) {
      auto o = env.open();
      json out = o.episode->step(reply({{{"name", "execute_bash"}, {"arguments", {{"command", "echo mlpt-$((6*7))"}, {"security_risk", "LOW"}}}}}));
      o.episode->finish(MLPT_EPISODE_ERROR);
      std::string text = out["messages"].empty() ? "" : out["messages"].back().value("content", "");
      ev = "echo mlpt-$((6*7)) -> " + json(text.substr(0, 80)).dump();
      return text.find("mlpt-42") != std::string::npos;
    });
  } else {
    s.not_applicable(name, "bash_runs_in_sandbox", "the harness declares no execute_bash tool");
  }
  if (tools.count("finish")) {
    s.check(name, "finish_ends_episode", [&](std::string& ev) {
      auto o = env.open();
      json out = o.episode->step(reply({{{"name", "finish"}, {"arguments", {{"message", "done"}}}}}));
      o.episode->finish(MLPT_EPISODE_FINISHED);
      ev = "finish -> done = " + std::string(out.value("done", false) ? "true" : "false") + ", reason " + out.value("finish_reason", std::string("?"));
      return out.value("done", false);
    });
  } else {
    s.not_applicable(name, "finish_ends_episode", "the harness declares no finish tool");
  }
}

// The in-process class (in_process_hacks.hpp): each hack appended to the repository module the
// task's hidden tests import first, as a patch made with git in a fresh sandbox of the task's image,
// must score 0. Not applicable to a reward that runs no code under test (needs_sandbox = 0) or when
// the hidden tests import no module of the repository.
void check_in_process_hacks(Suite& s, const EpisodeEnv& env, const std::string& name, bool needs_sandbox,
                            const std::function<components::Grade(const std::string&)>& grade) {
  const auto hacks_na = [&](const std::string& why) { s.not_applicable(name, "in_process_hacks_score_0", why); };
  if (!needs_sandbox) return hacks_na("the reward runs no code under test (needs_sandbox = 0)");
  if (!env.runtime || env.image.empty()) return s.skip(name, "in_process_hacks_score_0", "the combination has no sandbox or the task no image");
  auto box = env.runtime->create(env.image);
  // The hidden tests: the record's (bundled layout), else the image's /r2e_tests (R2E-Gym layout).
  std::string test_file, sources;
  if (env.task.contains("hidden_tests") && env.task["hidden_tests"].is_object()) {
    for (const auto& [path, text] : env.task["hidden_tests"].items())
      if (path.rfind("r2e_tests/", 0) == 0 && path.size() > 3 && path.substr(path.size() - 3) == ".py" && text.is_string()) {
        if (test_file.empty() || (test_file.find("/test_") == std::string::npos && path.find("/test_") != std::string::npos)) test_file = path;
        sources += text.get<std::string>() + "\n";
      }
  } else {
    std::string listing;
    exec(*box, "cd / && ls r2e_tests/test_*.py 2>/dev/null | head -1; echo @@; cat /r2e_tests/*.py 2>/dev/null | head -c 1048576",
         30000, &listing);
    test_file = listing.substr(0, listing.find('\n'));
    if (size_t at = listing.find("@@\n"); at != std::string::npos) sources = listing.substr(at + 3);
  }
  std::vector<std::string> modules;  // top-level imports of the hidden tests, in order
  std::istringstream lines(sources);
  for (std::string line; std::getline(lines, line);) {
    const std::string module = imported_module(line);
    if (!module.empty() && std::find(modules.begin(), modules.end(), module) == modules.end()) modules.push_back(module);
  }
  std::string target;
  std::string find = "cd /testbed || exit 3\nfor n in";
  for (const auto& m : modules) find += " " + m;
  find += "; do if [ -f \"$n/__init__.py\" ]; then echo \"$n/__init__.py\"; exit 0; elif [ -f \"$n.py\" ]; then echo \"$n.py\"; exit 0; fi; done; exit 4\n";
  if (test_file.empty() || modules.empty() || exec(*box, find, 30000, &target) != 0)
    return hacks_na("the task's hidden tests import no module of the repository (imports: " + std::to_string(modules.size()) + ")");
  target = target.substr(0, target.find('\n'));
  std::vector<std::string> tests;
  try {
    const json expected = env.task.contains("expected_output_json") && env.task["expected_output_json"].is_string()
                              ? json::parse(env.task["expected_output_json"].get<std::string>())
                              : env.task.value("expected_output_json", json::object());
    for (const auto& [test, status] : expected.items()) tests.push_back(test);
  } catch (const json::exception&) {
  }
  for (const auto& h : in_process_hacks(test_file, tests))
    s.check(name, "in_process_" + h.id + "_scores_0", [&](std::string& ev) {
      std::string patch;
      const int made = exec(*box,
                            "cd /testbed && cp '" + target + "' /tmp/mlpt_hack_orig && cat >> '" + target + "' <<'MLPT_HACK_EOF'\n" + h.code +
                                "MLPT_HACK_EOF\ngit -c safe.directory='*' diff -- '" + target + "'; rc=$?; cp /tmp/mlpt_hack_orig '" +
                                target + "'; exit $rc",
                            30000, &patch);
      if (made != 0 || patch.find("+++ ") == std::string::npos) {
        ev = "could not make the patch appending to " + target + ": " + patch.substr(0, 200);
        return false;
      }
      auto g = grade(patch);
      ev = h.what + ", appended to " + target + ": scores " + std::to_string(g.reward) + " (" +
           (g.details.is_object() ? g.details.value("reason", "") : g.details.dump().substr(0, 120)) + ")";
      return g.reward == 0.0;
    });
}

void check_reward(Suite& s, EpisodeEnv& env, const std::filesystem::path& golden_file) {
  const auto& rc = env.set.component(MLPT_COMPONENT_REWARD);
  const std::string name = "reward " + rc.name;
  std::unique_ptr<components::Reward> reward;
  s.check(name, "create", [&](std::string& ev) {
    reward = std::make_unique<components::Reward>(rc, env.set.settings(MLPT_COMPONENT_REWARD));
    ev = std::string("binary = ") + (reward->capabilities().binary ? "1" : "0") + ", needs_sandbox = " + (reward->capabilities().needs_sandbox ? "1" : "0");
    return true;
  });
  if (!reward) return;
  if (reward->capabilities().needs_sandbox && !env.runtime) {
    s.skip(name, "grades", "the reward needs a sandbox and the combination has none");
    return;
  }
  if (!env.can_run_episodes()) {
    s.skip(name, "grades", "no harness episode to grade (see the harness checks)");
    return;
  }
  std::vector<double> rewards;  // every reward the checks were given, for `binary`
  auto grade = [&](const json& result) {
    auto g = reward->grade(env.task_json, result.dump(), MLPT_EPISODE_FINISHED, env.binding());
    rewards.push_back(g.reward);
    return g;
  };
  // The result of an episode that did nothing: the harness's own empty result, so its shape is the
  // one this reward is graded on in a run.
  json empty;
  s.check(name, "empty_result_scores_0", [&](std::string& ev) {
    {
      auto o = env.open();
      empty = o.episode->finish(MLPT_EPISODE_FINISHED);
    }
    auto g = grade(empty);
    ev = "an episode finished at once scores " + std::to_string(g.reward) + " (" + g.details.dump() + ")";
    return g.reward == 0.0;
  });
  if (empty.is_null()) return;
  if (reward->capabilities().needs_sandbox) {
    s.not_applicable(name, "grades_without_sandbox", "capability needs_sandbox = 1: it grades through the binding");
  } else {
    s.check(name, "grades_without_sandbox", [&](std::string& ev) {
      auto g = reward->grade(env.task_json, empty.dump(), MLPT_EPISODE_FINISHED, nullptr);
      rewards.push_back(g.reward);
      ev = "graded with no sandbox binding: reward " + std::to_string(g.reward);
      return true;
    });
  }
  const bool patches = empty.contains("patch");
  auto with_patch = [&](const std::string& patch) {
    json result = empty;
    result["patch"] = patch;
    return result;
  };
  // A reward that never scores a correct answer would pass every "scores 0" check: it conforms
  // only once a known-correct answer is seen to score 1.
  const std::string id = env.task.value("instance_id", std::string());
  auto golden = load_golden(golden_file);
  s.check(name, "correct_answer_scores_1", [&](std::string& ev) {
    const std::string where = golden_file.empty() ? "no golden.jsonl next to the training set and no --golden FILE" : golden_file.string();
    if (!golden.count(id)) {
      ev = "no known-correct answer for " + id + " (" + where + "); a reward is shown to conform only when one scores 1";
      return false;
    }
    const json& row = golden[id];
    json correct;
    if (row.contains("result")) correct = row["result"];
    else if (patches) correct = with_patch(row["patch"].get<std::string>());
    else {
      ev = "the golden row of " + id + " in " + where + " has a patch, but the harness's results carry none; give a \"result\"";
      return false;
    }
    auto g = grade(correct);
    ev = "the correct answer of " + id + " (" + where + ") scores " + std::to_string(g.reward) + " (" + g.details.dump().substr(0, 120) + ")";
    return g.reward == 1.0;
  });
  if (!patches) {
    s.not_applicable(name, "known_hacks_score_0", "the harness's results carry no patch");
    s.not_applicable(name, "in_process_hacks_score_0", "the harness's results carry no patch");
  } else {
    for (const auto& [hack, patch] : known_hacks())
      s.check(name, "hack_" + hack + "_scores_0", [&](std::string& ev) {
        auto g = grade(with_patch(patch));
        ev = "scores " + std::to_string(g.reward) + " (" + g.details.dump().substr(0, 120) + ")";
        return g.reward == 0.0;
      });
    check_in_process_hacks(s, env, name, reward->capabilities().needs_sandbox != 0,
                           [&](const std::string& patch) { return grade(with_patch(patch)); });
  }
  if (!reward->capabilities().binary) {
    s.not_applicable(name, "rewards_binary", "capability binary = 0");
  } else {
    size_t other = 0;
    for (double r : rewards) other += r != 0.0 && r != 1.0;
    s.record(name, "rewards_binary", !rewards.empty() && other == 0,
             std::to_string(rewards.size()) + " rewards given in these checks, " + std::to_string(other) + " neither 0 nor 1");
  }
}

const char* status_name(Status s) {
  switch (s) {
    case Status::pass: return "pass";
    case Status::fail: return "fail";
    case Status::skipped: return "skipped";
    case Status::not_applicable: return "not_applicable";
  }
  return "?";
}

// "NULL is a no-op" (trainer.h, transport.h, reward.h, harness.h): a destroy on NULL returns.
void check_null_destroys(Suite& s, const plugin::ComponentSet& set) {
  auto probe = [&](mlpt_component_kind kind, const char* kind_name, auto destroy_of) {
    if (!set.has(kind)) return;
    const auto& c = set.component(kind);
    s.check(std::string(kind_name) + " " + c.name, "null_destroy_is_noop", [&](std::string& ev) {
      destroy_of(c);
      ev = "destroy(NULL) returned";
      return true;
    });
  };
  probe(MLPT_COMPONENT_TRAINER, "trainer", [](const plugin::Component& c) { c.table<mlpt_trainer_api>()->destroy(nullptr); });
  probe(MLPT_COMPONENT_ENGINE, "engine", [](const plugin::Component& c) { c.table<mlpt_engine_api>()->destroy(nullptr); });
  probe(MLPT_COMPONENT_TRANSPORT, "transport", [](const plugin::Component& c) { c.table<mlpt_transport_api>()->destroy(nullptr); });
  probe(MLPT_COMPONENT_REWARD, "reward", [](const plugin::Component& c) { c.table<mlpt_reward_api>()->destroy(nullptr); });
  probe(MLPT_COMPONENT_HARNESS, "harness", [](const plugin::Component& c) {
    c.table<mlpt_harness_api>()->episode_destroy(nullptr);
    c.table<mlpt_harness_api>()->destroy(nullptr);
  });
}

// Each kind's list (core/plugin/kinds/) names the checks of its capabilities and of the promises its
// header marks [checked: id]: every one must be in the report. One the suite did not reach (an
// earlier check of the component failed or was skipped) is reported skipped; one it never records
// is a failure of the suite itself, so a check named in a list cannot silently go missing.
void check_coverage(Suite& s, const plugin::ComponentSet& set) {
  for (const plugin::KindSpec* kind : plugin::kind_specs()) {
    if (!set.has(kind->kind)) continue;
    const std::string component = std::string(config::kind_name(kind->kind)) + " " + set.component(kind->kind).name;
    std::set<std::string> recorded;
    bool stopped = false;
    for (const auto& c : s.report.checks)
      if (c.component == component) recorded.insert(c.id), stopped |= c.status == Status::fail || c.status == Status::skipped;
    std::vector<std::string> listed = kind->promises;
    for (const auto& capability : kind->capabilities) listed.insert(listed.end(), capability.checked_by.begin(), capability.checked_by.end());
    for (const auto& id : listed) {
      if (!recorded.insert(id).second) continue;
      if (stopped) s.skip(component, id, "not reached: an earlier check of this component failed or was skipped");
      else s.record(component, id, false, std::string("named by the ") + config::kind_name(kind->kind) + " kind's list (" + kind->header + "), recorded by no check of the suite");
    }
  }
}

}  // namespace

bool ConformanceReport::passed() const {
  for (const auto& c : checks)
    if (c.status == Status::fail) return false;
  return true;
}

ConformanceReport check_plugins(const run::RunConfig& config, const ConformanceOptions& options) {
  Suite s;
  s.report.source = config.file.string();
  std::atomic<bool> stop{false};  // the cancellation the checks raise on purpose (host services is_cancelled)
  plugin::HostServices host(&stop);
  std::unique_ptr<plugin::ComponentSet> set;
  s.check("plugins", "load", [&](std::string& ev) {
    set = std::make_unique<plugin::ComponentSet>(config.components, host);
    for (const auto& p : set->plugins())
      ev += (ev.empty() ? "" : "; ") + p->name() + " " + p->version() + " (ABI " + std::to_string(p->abi_version().major) + "." +
            std::to_string(p->abi_version().minor) + ", struct sizes and required functions checked)";
    return true;
  });
  if (!set) return s.report;
  check_null_destroys(s, *set);
  check_engine_and_trainer(s, *set, config);
  check_transport(s, *set);
  auto data = run::Dataset::load(config.dataset.train);
  EpisodeEnv env{*set, data.rows.empty() ? json::object() : data.rows[0], "", "", nullptr, nullptr};
  env.task_json = env.task.dump();
  env.image = data.rows.empty() ? "" : data.image(0, config.dataset.images);
  if (set->has(MLPT_COMPONENT_SANDBOX)) env.runtime = check_sandbox(s, *set, env.image, stop);
  check_task_image(s, env);
  check_harness(s, env);
  std::filesystem::path golden = options.golden;
  if (!golden.empty() && !std::filesystem::is_regular_file(golden))
    throw Error(MLPT_NOT_FOUND, "--golden " + golden.string() + ": no such file (JSONL rows {instance_id, patch|result})");
  if (golden.empty() && std::filesystem::exists(config.dataset.train.parent_path() / "golden.jsonl"))
    golden = config.dataset.train.parent_path() / "golden.jsonl";
  check_reward(s, env, golden);
  check_coverage(s, *set);
  return s.report;
}

nlohmann::json to_json(const ConformanceReport& report) {
  json j = {{"source", report.source}, {"passed", report.passed()}, {"checks", json::array()}};
  for (const auto& c : report.checks)
    j["checks"].push_back({{"component", c.component}, {"id", c.id},
                           {"status", status_name(c.status)},
                           {"evidence", c.evidence}});
  return j;
}

std::string format_report(const ConformanceReport& report) {
  std::ostringstream o;
  o << "plugins of " << report.source << "\n";
  std::map<Status, int> count;
  for (const auto& c : report.checks) {
    const char* tag = c.status == Status::pass ? "PASS" : c.status == Status::fail ? "FAIL" : c.status == Status::skipped ? "SKIP" : "N/A ";
    ++count[c.status];
    std::string head = "  " + std::string(tag) + "  " + c.component + " / " + c.id;
    o << head << std::string(head.size() < 56 ? 56 - head.size() : 1, ' ') << c.evidence << "\n";
  }
  o << count[Status::pass] << " passed, " << count[Status::fail] << " failed, " << count[Status::skipped] << " skipped, "
    << count[Status::not_applicable] << " not applicable: " << (report.passed() ? "CONFORMS" : "DOES NOT CONFORM") << "\n";
  return o.str();
}

}  // namespace mlpt::check
