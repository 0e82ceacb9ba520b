#include "group_registry.hpp"

namespace mlpt::transport::inprocess {

std::shared_ptr<Group> group_named(const std::string& name) {
  static std::mutex mutex;
  static std::map<std::string, std::shared_ptr<Group>> groups;
  std::lock_guard lock(mutex);
  auto& g = groups[name];
  if (!g) g = std::make_shared<Group>();
  return g;
}

}  // namespace mlpt::transport::inprocess
