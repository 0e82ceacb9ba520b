#include "core/plugin/call_scope.hpp"

#include <exception>

#include "core/config/component_kinds.hpp"
#include "core/observe/flight_recorder.hpp"

namespace mlpt::plugin {
namespace {
thread_local const CallScope* t_current = nullptr;
}

CallScope::CallScope(const Component& component, const char* call_name, uint64_t request_id)
    : kind(config::kind_name(component.kind)),
      name(component.name.c_str()),
      file(component.plugin ? component.plugin->path().c_str() : ""),
      call(call_name),
      outer(t_current),
      recorded_(observe::FlightRecorder::instance().begin(kind, name, call_name, request_id)),
      uncaught_(std::uncaught_exceptions()) {
  t_current = this;
}

CallScope::~CallScope() {
  t_current = outer;
  observe::FlightRecorder::instance().end(recorded_, std::uncaught_exceptions() > uncaught_);
}

const CallScope* current_call() { return t_current; }

}  // namespace mlpt::plugin
