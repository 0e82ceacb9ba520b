// Which plugin call a thread is in. The core marks every call into a component with a CallScope,
// so that when a plugin crashes the process (a signal), the crash report can name the component
// and the call the crashing thread was in. Reading it is async-signal-safe: a plain thread-local
// pointer to a scope whose strings outlive it.
#pragma once

#include "core/plugin/plugin.hpp"

namespace mlpt::plugin {

class CallScope {
 public:
  // `call` is the ABI function's name, e.g. "train_step"; it must be a string literal.
  CallScope(const Component& component, const char* call);
  ~CallScope();
  CallScope(const CallScope&) = delete;
  CallScope& operator=(const CallScope&) = delete;

  const char* kind;    // "trainer", ...
  const char* name;    // the component's name
  const char* file;    // the plugin's file name
  const char* call;
  const CallScope* outer;  // a call made from inside another (e.g. a reward using a sandbox)
};

// The innermost plugin call of this thread; null outside any.
const CallScope* current_call();

}  // namespace mlpt::plugin
