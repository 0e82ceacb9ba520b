// Which plugin call a thread is in. The core marks every call into a component with a CallScope,
// so that when a plugin crashes the process (a signal), the crash report can name the component
// and the call the crashing thread was in. Reading it is async-signal-safe: a plain thread-local
// pointer to a scope whose strings outlive it. Every scope is also a call in the flight recorder
// (core/observe/flight_recorder.hpp): when it began, how long it took, whether it failed.
#pragma once

#include "core/plugin/plugin.hpp"

namespace mlpt::plugin {

class CallScope {
 public:
  // `call` is the ABI function's name, e.g. "train_step"; it must be a string literal.
  // `request_id`: the engine request (or rollout) the call serves, 0 when none.
  CallScope(const Component& component, const char* call, uint64_t request_id = 0);
  ~CallScope();
  CallScope(const CallScope&) = delete;
  CallScope& operator=(const CallScope&) = delete;

  const char* kind;    // "trainer", ...
  const char* name;    // the component's name
  const char* file;    // the plugin's file name
  const char* call;
  const CallScope* outer;  // a call made from inside another (e.g. a reward using a sandbox)

 private:
  uint32_t recorded_;      // the flight recorder's token
  int uncaught_;           // exceptions in flight when the call began: more at its end = it failed
};

// The innermost plugin call of this thread; null outside any.
const CallScope* current_call();

}  // namespace mlpt::plugin
