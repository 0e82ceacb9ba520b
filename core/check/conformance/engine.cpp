#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <future>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "core/check/conformance/checks.hpp"

namespace mlpt::check::conformance {
namespace {

std::string join(const std::vector<int32_t>& v, size_t max = 12) {
  std::ostringstream o;
  for (size_t i = 0; i < v.size() && i < max; ++i) o << (i ? " " : "") << v[i];
  if (v.size() > max) o << " …";
  return o.str();
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
    s.record(en, "engine_group_all_or_none", false,
             "a rank's create in a group of 2 did not return within 120 s");
    s.skip(en, "engine_group_requests_to_rank_0", "the group's create did not return");
    return;
  }
  const bool made[2] = {m->ranks[0].engine != nullptr, m->ranks[1].engine != nullptr};
  auto said = [&](int r) {
    return made[r] ? std::string("created") : "refused (" + m->ranks[r].error.substr(0, 160) + ")";
  };
  s.record(en, "engine_group_all_or_none", made[0] == made[1],
           "two ranks of a group of 2 created at once: rank 0 " + said(0) + "; rank 1 " + said(1));
  if (!made[0] || !made[1]) {
    if (made[0] == made[1])
      s.not_applicable(en, "engine_group_requests_to_rank_0",
                       "the engine refuses a group of 2 in one process with these settings");
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
      ev = "a request to rank 1: code " + std::to_string(code) +
           " (MLPT_FAILED_PRECONDITION = " + std::to_string(MLPT_FAILED_PRECONDITION) + " promised)";
      return code == MLPT_FAILED_PRECONDITION;
    });
  }
  // destroy is collective too: both at once.
  std::thread other([m] { m->ranks[1].engine.reset(); });
  m->ranks[0].engine.reset();
  other.join();
}

}  // namespace

// engine.h's promises, each checked where its capability is declared.
void check_engine(Suite& s, const plugin::ComponentSet& set, EngineUnderCheck& checked) {
  const auto& ec = set.component(MLPT_COMPONENT_ENGINE);
  const std::string en = "engine " + ec.name;
  std::unique_ptr<components::Engine>& engine = checked.engine;
  s.check(en, "create", [&](std::string& ev) {
    engine = std::make_unique<components::Engine>(ec, set.settings(MLPT_COMPONENT_ENGINE));
    auto info = engine->model_info();
    ev = "vocab " + std::to_string(info.vocab_size) + ", " + std::to_string(info.num_moe_layers) +
         " MoE layers, top-" + std::to_string(info.experts_per_token) + ", weight version " +
         std::to_string(info.weight_version);
    return info.vocab_size > 0;
  });
  if (!engine) return;
  checked.info = engine->model_info();
  const auto& info = checked.info;
  const auto& caps = engine->capabilities();
  std::vector<int32_t>& prompt = checked.prompt;
  for (int i = 0; i < 12; ++i)
    prompt.push_back(static_cast<int32_t>((37 * i + 11) % std::min<int64_t>(info.vocab_size, 256)));
  auto request = [&](uint64_t id, uint64_t seed, const std::vector<int32_t>* tokens, int32_t max_new,
                     uint64_t session = 0) {
    components::GenerateRequest r;
    r.request_id = id, r.session_id = session, r.tokens = tokens, r.max_new_tokens = max_new;
    r.sampling = mlpt_sampling_params{MLPT_SAMPLING_PARAMS_STRUCT_SIZE, 1.0f, 1.0f, 0, seed};
    return r;
  };

  components::Generation& first = checked.first;
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
      ev = std::to_string(first.logprobs.size()) + " logprobs for " + std::to_string(first.tokens.size()) +
           " tokens, all finite and <= 0: " + (finite ? "yes" : "no");
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
      engine->submit(
          request(100 + static_cast<uint64_t>(i), i == 0 ? 42 : 500 + static_cast<uint64_t>(i), &prompt, 16),
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
      shapes &= calls[static_cast<size_t>(i)] == 1 && !g.tokens.empty() && g.tokens.size() <= 16 &&
                g.logprobs.size() == g.tokens.size();
    }
    const bool same = !caps.deterministic_seed || got[0].tokens == first.tokens;
    ev = std::string(engine->asynchronous() ? "submit (ABI 1.2)"
                                            : "blocking generate on host threads (ABI < 1.2)") +
         ": " + std::to_string(n) + " completions, shapes " + (shapes ? "right" : "wrong") + ", request 0 [" +
         join(got[0].tokens) + "] vs alone [" + join(first.tokens) + "]" +
         (error.empty() ? "" : "; error: " + error);
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
      engine->submit(request(9, 3, long_prompt.get(), 100000),
                     [result, long_prompt](components::Generation&& g, std::exception_ptr e) {
                       if (e)
                         result->set_exception(e);
                       else
                         result->set_value(std::move(g));
                     });
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      do engine->cancel(9);
      while (running.wait_for(std::chrono::milliseconds(100)) != std::future_status::ready &&
             std::chrono::steady_clock::now() < deadline);
      if (running.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
        ev = "generate did not return within 30 s of cancel";
        return false;
      }
      auto g = running.get();
      ev = "returned after " + std::to_string(g.tokens.size()) + " tokens with finish reason " +
           std::to_string(g.finish_reason);
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
      const size_t layers = static_cast<size_t>(info.num_moe_layers),
                   k = static_cast<size_t>(info.experts_per_token);
      const size_t positions = prompt.size() + g.tokens.size() - 2;
      bool ids_ok = true;
      for (size_t at = 0; ids_ok && at + k <= g.routed_experts.size(); at += k) {
        std::set<int16_t> top(g.routed_experts.begin() + static_cast<std::ptrdiff_t>(at),
                              g.routed_experts.begin() + static_cast<std::ptrdiff_t>(at + k));
        ids_ok = top.size() == k && *top.begin() >= 0;
      }
      ev = std::to_string(g.routed_experts.size()) + " expert ids for " + std::to_string(positions) +
           " positions x " + std::to_string(layers) + " MoE layers x top-" + std::to_string(k) +
           (ids_ok ? ", each position's top-k distinct and >= 0" : ", REPEATED or negative ids");
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
    ev = "pause of a paused engine: code " + std::to_string(paused_again) +
         ", resume of a running one: code " + std::to_string(resumed_again) +
         " (MLPT_FAILED_PRECONDITION = " + std::to_string(MLPT_FAILED_PRECONDITION) + " promised)";
    return paused_again == MLPT_FAILED_PRECONDITION && resumed_again == MLPT_FAILED_PRECONDITION;
  });
  check_engine_group(s, set, en);
}

}  // namespace mlpt::check::conformance
