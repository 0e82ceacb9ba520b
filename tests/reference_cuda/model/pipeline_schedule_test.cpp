// The 1F1B pipeline schedule (trainer/pipeline_schedule.hpp) for every small layout: each stage
// runs each micro-batch's forward and backward once, forward first, backwards in micro-batch
// order; its activations in flight stay within P - s; and all stages' lists, executed together
// with blocking messages (a send waits for the matching receive, a send_recv for both halves),
// finish without deadlock, each message received as what was sent.
#include "trainer/pipeline_schedule.hpp"

#include <algorithm>
#include <catch2/catch.hpp>
#include <optional>
#include <string>
#include <vector>

#include "mlpt/sdk/error.hpp"

namespace {

using mlpt::ref::PipelineAction;
using mlpt::ref::PipelineStep;
using A = PipelineAction;

// One message half of a step: to or from a neighbouring stage, a forward's activation or a
// backward's gradient of one micro-batch.
struct Half {
  bool sends;
  int peer;
  bool gradient;
  int64_t micro_batch;
  bool done = false;
};

std::vector<Half> halves(const PipelineStep& s, int stage) {
  switch (s.action) {
    case A::recv_forward:
      return {{false, stage - 1, false, s.micro_batch}};
    case A::send_forward:
      return {{true, stage + 1, false, s.micro_batch}};
    case A::recv_backward:
      return {{false, stage + 1, true, s.micro_batch}};
    case A::send_backward:
      return {{true, stage - 1, true, s.micro_batch}};
    case A::send_forward_recv_backward:
      return {{true, stage + 1, false, s.micro_batch}, {false, stage + 1, true, s.received}};
    case A::send_backward_recv_forward:
      return {{true, stage - 1, true, s.micro_batch}, {false, stage - 1, false, s.received}};
    default:
      return {};  // forward, backward: no message
  }
}

// Runs every stage's list in lock step, each message rendezvous (a send completes only when its
// receiver is at the matching receive: the strictest blocking semantics). Returns an empty
// string when all finish, else what went wrong: a deadlock (no stage can move) or a message
// received as something else than was sent.
std::string execute(const std::vector<std::vector<PipelineStep>>& lists) {
  const int P = static_cast<int>(lists.size());
  std::vector<size_t> at(static_cast<size_t>(P), 0);
  std::vector<std::vector<Half>> pending(static_cast<size_t>(P));
  auto load = [&](int s) {
    if (at[s] < lists[s].size()) pending[s] = halves(lists[s][at[s]], s);
  };
  for (int s = 0; s < P; ++s) load(s);
  for (;;) {
    bool moved = false, finished = true;
    for (int s = 0; s < P; ++s) {
      if (at[s] >= lists[s].size()) continue;
      finished = false;
      for (Half& h : pending[s]) {
        if (h.done || !h.sends) continue;
        if (h.peer < 0 || h.peer >= P)
          return "stage " + std::to_string(s) + " sends to stage " + std::to_string(h.peer);
        if (at[h.peer] >= lists[h.peer].size()) continue;
        for (Half& r : pending[h.peer])
          if (!r.done && !r.sends && r.peer == s) {
            if (r.gradient != h.gradient || r.micro_batch != h.micro_batch)
              return "stage " + std::to_string(h.peer) + " receives " +
                     mlpt::ref::describe(lists[h.peer][at[h.peer]]) + " while stage " + std::to_string(s) +
                     " sends " + mlpt::ref::describe(lists[s][at[s]]);
            h.done = r.done = true;
            moved = true;
          }
      }
    }
    for (int s = 0; s < P; ++s) {
      if (at[s] >= lists[s].size()) continue;
      if (std::all_of(pending[s].begin(), pending[s].end(), [](const Half& h) { return h.done; })) {
        ++at[s], moved = true;
        load(s);
      }
    }
    if (finished) return "";
    if (!moved) {
      std::string where = "deadlock:";
      for (int s = 0; s < P; ++s)
        where += " stage " + std::to_string(s) + " at " +
                 (at[s] < lists[s].size() ? mlpt::ref::describe(lists[s][at[s]]) : std::string("end")) + ";";
      return where;
    }
  }
}

}  // namespace

TEST_CASE(
    "1F1B: every stage runs each forward and backward once, forward first, backwards in micro-batch order") {
  for (int P = 1; P <= 8; ++P)
    for (int64_t m = 1; m <= 12; ++m)
      for (int s = 0; s < P; ++s) {
        INFO("stages " << P << " stage " << s << " micro-batches " << m);
        const auto steps = mlpt::ref::one_forward_one_backward(P, s, m);
        std::vector<int64_t> forwards, backwards;
        int64_t in_flight = 0, peak = 0;
        for (const PipelineStep& step : steps) {
          if (step.action == A::forward) {
            forwards.push_back(step.micro_batch);
            peak = std::max(peak, ++in_flight);
          }
          if (step.action != A::backward) continue;
          // Its forward ran on this stage before.
          CHECK(std::find(forwards.begin(), forwards.end(), step.micro_batch) != forwards.end());
          backwards.push_back(step.micro_batch);
          --in_flight;
        }
        std::vector<int64_t> each(static_cast<size_t>(m));
        for (int64_t k = 0; k < m; ++k) each[size_t(k)] = k;
        CHECK(forwards == each);
        CHECK(backwards == each);  // the gradient accumulation order of one micro-batch at a time
        CHECK(peak <= P - s);
        CHECK(peak == std::min<int64_t>(P - s, m));  // and it does overlap where it can
        // The ends of the pipeline talk to one neighbour only.
        for (const PipelineStep& step : steps) {
          if (s == 0)
            CHECK((step.action != A::recv_forward && step.action != A::send_backward &&
                   step.action != A::send_backward_recv_forward));
          if (s == P - 1)
            CHECK((step.action != A::send_forward && step.action != A::recv_backward &&
                   step.action != A::send_forward_recv_backward));
        }
      }
}

TEST_CASE("1F1B: all stages' lists executed with blocking messages finish, each message received as sent") {
  for (int P = 1; P <= 8; ++P)
    for (int64_t m = 1; m <= 12; ++m) {
      INFO("stages " << P << " micro-batches " << m);
      std::vector<std::vector<PipelineStep>> lists;
      for (int s = 0; s < P; ++s) lists.push_back(mlpt::ref::one_forward_one_backward(P, s, m));
      CHECK(execute(lists).empty());
    }
}

TEST_CASE("1F1B: the checker finds a deadlock and a mismatched message") {
  // Both stages send first with blocking sends: the cycle the paired exchanges avoid.
  const std::vector<std::vector<PipelineStep>> cycle = {{{A::send_forward, 0}, {A::recv_backward, 0}},
                                                        {{A::send_backward, 0}, {A::recv_forward, 0}}};
  CHECK(execute(cycle).find("deadlock") == 0);
  const std::vector<std::vector<PipelineStep>> crossed = {{{A::send_forward, 1}}, {{A::recv_forward, 0}}};
  CHECK(execute(crossed).find("receives recv_forward 0") != std::string::npos);
}

TEST_CASE("1F1B: PP2 over five micro-batches is warm-up, steady state and cool-down") {
  const std::vector<PipelineStep> first = {{A::forward, 0},
                                           {A::send_forward, 0},
                                           {A::forward, 1},
                                           {A::send_forward_recv_backward, 1, 0},
                                           {A::backward, 0},
                                           {A::forward, 2},
                                           {A::send_forward_recv_backward, 2, 1},
                                           {A::backward, 1},
                                           {A::forward, 3},
                                           {A::send_forward_recv_backward, 3, 2},
                                           {A::backward, 2},
                                           {A::forward, 4},
                                           {A::send_forward_recv_backward, 4, 3},
                                           {A::backward, 3},
                                           {A::recv_backward, 4},
                                           {A::backward, 4}};
  CHECK(mlpt::ref::one_forward_one_backward(2, 0, 5) == first);
  const auto last = mlpt::ref::one_forward_one_backward(2, 1, 5);
  REQUIRE(last.size() == 16);
  CHECK(last.front() == PipelineStep{A::recv_forward, 0});
  CHECK(last[3] == PipelineStep{A::send_backward_recv_forward, 0, 1});
  CHECK(last.back() == PipelineStep{A::send_backward, 4});
}

TEST_CASE("1F1B: a stage outside the pipeline or a negative count is refused naming it") {
  CHECK_THROWS_WITH(mlpt::ref::one_forward_one_backward(2, 2, 3),
                    Catch::Contains("stage 2 is outside the 2 stages"));
  CHECK_THROWS_WITH(mlpt::ref::one_forward_one_backward(2, -1, 3), Catch::Contains("stage -1"));
  CHECK_THROWS_WITH(mlpt::ref::one_forward_one_backward(2, 0, -1),
                    Catch::Contains("micro_batches -1 is negative"));
  CHECK(mlpt::ref::one_forward_one_backward(3, 1, 0).empty());
}
