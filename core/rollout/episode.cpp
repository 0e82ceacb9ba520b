#include "core/rollout/episode.hpp"

#include <algorithm>
#include <chrono>

#include "core/exec/coroutine.hpp"

namespace mlpt::rollout {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Appends non-trainable tokens (prompt, observations, template glue).
void append_context(Trajectory& t, const std::vector<int32_t>& tokens) {
  t.tokens.insert(t.tokens.end(), tokens.begin(), tokens.end());
  t.loss_mask.insert(t.loss_mask.end(), tokens.size(), 0);
  t.generation_logprobs.insert(t.generation_logprobs.end(), tokens.size(), 0.0f);
}

// `co_await Generate{...}`: submits to the engine and resumes on the executor with the result.
struct Generate {
  components::Engine& engine;
  const components::GenerateRequest& request;
  exec::Executor& executor;
  components::Generation result;
  std::exception_ptr error;

  bool await_ready() const noexcept { return false; }
  bool await_suspend(std::coroutine_handle<> h) {
    try {
      engine.submit(request, [this, h](components::Generation&& g, std::exception_ptr e) {
        result = std::move(g);
        error = e;
        executor.post([h] { h.resume(); });  // nothing touches *this after this line
      });
    } catch (...) {
      error = std::current_exception();  // refused: continue at once, and throw there
      return false;
    }
    return true;
  }
  components::Generation await_resume() {
    if (error) std::rethrow_exception(error);
    return std::move(result);
  }
};

// The episode itself. Locals that hold components (sandbox, harness episode) live inside `try`, so
// they are gone before `done` runs.
exec::Detached episode(const EpisodeEnvironment& env, EpisodeRequest req, exec::Executor& executor, EpisodeDone done) {
  co_await exec::resume_on(executor);
  Trajectory t;
  std::exception_ptr failure;
  try {
    const auto started = Clock::now();
    t.prompt_index = req.prompt_index;
    t.sample_index = req.sample_index;
    t.min_weight_version = UINT64_MAX;
    const std::string task_json = (req.task->is_object() ? task_with_limits(*req.task, req.limits) : *req.task).dump();
    const bool needs_sandbox = env.harness->capabilities().needs_sandbox != 0;

    // The agent's sandbox lives until the harness has extracted its result.
    std::unique_ptr<components::SandboxRuntime::Sandbox> sandbox;
    auto env_started = Clock::now();
    if (needs_sandbox) {
      if (!env.sandboxes) throw Error(MLPT_FAILED_PRECONDITION, "the harness needs a sandbox but the config has no [components.sandbox]");
      sandbox = env.sandboxes->create(req.image);
    }
    auto episode = env.harness->start(task_json, env.sandboxes ? env.sandboxes->binding() : nullptr,
                                      sandbox ? sandbox->handle() : nullptr);
    t.environment_s += seconds_since(env_started);

    auto core_started = Clock::now();
    const nlohmann::json tools = episode->start().value("tools", nlohmann::json::array());
    append_context(t, env.chat->render_prompt(episode->start().at("messages"), episode->tools()));
    t.transcript.start_messages = episode->start().at("messages");
    t.core_s += seconds_since(core_started);

    mlpt_episode_end end = MLPT_EPISODE_MAX_TURNS;
    size_t routing_known = 0;  // tokens whose routing the trajectory holds
    // Observation tokens wait here until the next generation: a sequence ends with the model's last
    // turn (trailing context would train nothing and would have no routing for replay).
    std::vector<int32_t> pending;
    while (true) {
      if (env.cancelled && env.cancelled->load()) throw Error(MLPT_CANCELLED, "rollout cancelled");
      if (t.actions >= req.limits.max_turns) { end = MLPT_EPISODE_MAX_TURNS; break; }
      if (seconds_since(started) > req.limits.agent_timeout_s) { end = MLPT_EPISODE_TIMEOUT; break; }
      append_context(t, pending);
      pending.clear();
      const int64_t room = req.limits.max_sequence_length - static_cast<int64_t>(t.tokens.size());
      if (room <= 0) { end = MLPT_EPISODE_MAX_CONTEXT; break; }  // a first prompt that fills the context

      components::GenerateRequest g;
      g.request_id = req.id;
      g.session_id = req.id;
      g.tokens = &t.tokens;
      g.sampling = req.sampling;
      g.max_new_tokens = static_cast<int32_t>(std::min(room, req.limits.max_new_tokens_per_turn));
      g.stop_tokens = env.stop_tokens;
      g.record_routed_experts = env.record_routed_experts;
      g.routed_experts_from = routing_known;
      TranscriptTurn turn;
      turn.context_tokens = static_cast<int64_t>(t.tokens.size());
      auto gen_started = Clock::now();
      turn.start_s = std::chrono::duration<double>(gen_started - started).count();
      auto out = co_await Generate{*env.engine, g, executor, {}, {}};
      turn.generation_s = seconds_since(gen_started);
      turn.generated_tokens = static_cast<int64_t>(out.tokens.size());
      turn.weight_version = out.weight_version;
      t.generation_s += turn.generation_s;
      ++t.turns;
      if (out.finish_reason == MLPT_FINISH_CANCELLED) throw Error(MLPT_CANCELLED, "generation cancelled");

      core_started = Clock::now();
      t.min_weight_version = std::min(t.min_weight_version, out.weight_version);
      t.max_weight_version = std::max(t.max_weight_version, out.weight_version);
      t.tokens.insert(t.tokens.end(), out.tokens.begin(), out.tokens.end());
      t.loss_mask.insert(t.loss_mask.end(), out.tokens.size(), 1);
      t.generation_logprobs.insert(t.generation_logprobs.end(), out.logprobs.begin(), out.logprobs.end());
      if (env.record_routed_experts) {
        t.routed_experts.insert(t.routed_experts.end(), out.routed_experts.begin(), out.routed_experts.end());
        routing_known = t.tokens.size();
      }
      const bool stopped = !out.tokens.empty() && std::find(env.stop_tokens.begin(), env.stop_tokens.end(),
                                                            out.tokens.back()) != env.stop_tokens.end();
      // Truncated (overlong) only when generation filled the context exactly (§3).
      if (static_cast<int64_t>(t.tokens.size()) >= req.limits.max_sequence_length) {
        end = MLPT_EPISODE_MAX_CONTEXT;
        t.truncated = true;
        t.core_s += seconds_since(core_started);
        turn.reply = {{"content", env.tokenizer->decode(out.tokens)}, {"cut_by", "context limit"}};
        t.transcript.turns.push_back(std::move(turn));
        break;
      }
      std::span<const int32_t> reply_ids(out.tokens.data(), out.tokens.size() - (stopped ? 1 : 0));
      nlohmann::json reply = env.chat->parse_reply(env.tokenizer->decode(reply_ids), tools).to_json();
      // Iterations as the reference counts them: each tool call is one; a reply without any, or with
      // a malformed call (the harness then drops all of its calls), is one.
      const bool malformed = !reply.value("parse_errors", nlohmann::json::array()).empty();
      const auto calls = reply.value("tool_calls", nlohmann::json::array()).size();
      t.actions += malformed ? 1 : static_cast<int32_t>(std::max<size_t>(1, calls));
      t.core_s += seconds_since(core_started);

      env_started = Clock::now();
      nlohmann::json observation = episode->step(reply);
      turn.environment_s = seconds_since(env_started);
      t.environment_s += turn.environment_s;
      turn.reply = std::move(reply);
      turn.observation = observation;
      t.transcript.turns.push_back(std::move(turn));
      if (observation.value("done", false)) { end = MLPT_EPISODE_FINISHED; break; }

      core_started = Clock::now();
      // The chat format closes the assistant turn (if the engine stopped on length), then renders the
      // new messages and the next generation prompt, never re-tokenizing what is in the sequence.
      auto next = env.chat->append_turns(t.tokens, observation.value("messages", nlohmann::json::array()));
      t.core_s += seconds_since(core_started);
      // The next observation does not fit: a normal ending that trains (not truncated).
      if (static_cast<int64_t>(t.tokens.size() + next.size()) >= req.limits.max_sequence_length) {
        end = MLPT_EPISODE_MAX_CONTEXT;
        break;
      }
      pending = std::move(next);
    }
    if (t.min_weight_version == UINT64_MAX) t.min_weight_version = t.max_weight_version;
    // An agent past its wall-clock limit gets reward 0, however it ended (its patch is not graded).
    const bool timed_out = end == MLPT_EPISODE_TIMEOUT || seconds_since(started) > req.limits.agent_timeout_s;
    if (timed_out) end = MLPT_EPISODE_TIMEOUT;
    t.end = end;

    env_started = Clock::now();
    nlohmann::json result = episode->finish(end);
    episode.reset();
    sandbox.reset();
    t.environment_s += seconds_since(env_started);
    if (env.engine->capabilities().keeps_sessions) env.engine->session_release(req.id);

    if (timed_out) {
      t.reward = 0.0;
      t.reward_flags = MLPT_REWARD_FLAG_AGENT_TIMEOUT;
      t.reward_reason = "agent timeout: past agent_timeout_s = " + std::to_string(req.limits.agent_timeout_s) + " s, not graded";
    } else {
      auto reward_started = Clock::now();
      auto grade_patch = [&] {
        return env.reward->grade(task_json, result.dump(), end, env.sandboxes ? env.sandboxes->binding() : nullptr);
      };
      // A hidden-test run takes as long as the tests: on the grading threads, not the episode's.
      components::Grade grade;
      if (env.grading) grade = co_await exec::call_on(*env.grading, executor, grade_patch);
      else grade = grade_patch();
      t.reward_s = seconds_since(reward_started);
      t.reward = grade.reward;
      t.reward_flags = grade.flags;
      t.transcript.result = std::move(result);
      t.transcript.reward_details = grade.details;
      if (grade.details.is_object() && grade.details.contains("reason") && grade.details["reason"].is_string())
        t.reward_reason = grade.details["reason"].get<std::string>();
    }
    t.wall_s = seconds_since(started);
  } catch (...) {
    failure = std::current_exception();
    t = Trajectory{};
  }
  done(std::move(t), failure);
}

}  // namespace

nlohmann::json task_with_limits(const nlohmann::json& row, const EpisodeLimits& limits) {
  nlohmann::json task = row;
  task["mlpt_limits"] = {{"command_timeout_s", limits.command_timeout_s},
                         {"test_timeout_s", limits.test_timeout_s},
                         {"agent_timeout_s", limits.agent_timeout_s}};
  return task;
}

Trajectory failed_rollout(const EpisodeRequest& req, int32_t context_token, uint64_t weight_version,
                          const std::string& reason) {
  Trajectory t;
  t.prompt_index = req.prompt_index;
  t.sample_index = req.sample_index;
  append_context(t, {context_token});
  t.failed = true;
  t.end = MLPT_EPISODE_ERROR;
  t.reward_reason = reason;
  t.min_weight_version = t.max_weight_version = weight_version;
  return t;
}

void start_episode(const EpisodeEnvironment& env, EpisodeRequest request, exec::Executor& executor, EpisodeDone done) {
  episode(env, std::move(request), executor, std::move(done));
}

Trajectory run_episode(const EpisodeEnvironment& env, const EpisodeRequest& request) {
  exec::RunLoop here;
  Trajectory out;
  std::exception_ptr error;
  start_episode(env, request, here, [&](Trajectory&& t, std::exception_ptr e) {
    out = std::move(t);
    error = e;
    here.quit();
  });
  here.run();
  if (error) std::rethrow_exception(error);
  return out;
}

}  // namespace mlpt::rollout
