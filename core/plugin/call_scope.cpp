#include "core/plugin/call_scope.hpp"

namespace mlpt::plugin {
namespace {
thread_local const CallScope* t_current = nullptr;
}

CallScope::CallScope(const Component& component, const char* call_name)
    : kind(kind_name(component.kind)),
      name(component.name.c_str()),
      file(component.plugin ? component.plugin->path().c_str() : ""),
      call(call_name),
      outer(t_current) {
  t_current = this;
}

CallScope::~CallScope() { t_current = outer; }

const CallScope* current_call() { return t_current; }

}  // namespace mlpt::plugin
