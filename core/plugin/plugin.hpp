// Loading one plugin shared object: dlopen (RTLD_NOW | RTLD_LOCAL), the entry point, version
// negotiation and validation of everything the descriptor points to. Every failure is an
// mlpt::Error that names the file and what is wrong; nothing a plugin returns is trusted unchecked.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/plugin/host_services.hpp"
#include "mlpt/mlpt.h"

namespace mlpt::plugin {

class Plugin;

// One component of a loaded plugin. Valid while its Plugin is (it holds a reference).
struct Component {
  mlpt_component_kind kind;
  std::string name;
  std::string description;
  const void* api = nullptr;           // the kind's table, validated
  const void* capabilities = nullptr;  // the kind's capability record, validated
  std::shared_ptr<const Plugin> plugin;

  template <class Api>
  const Api* table() const { return static_cast<const Api*>(api); }
  template <class Caps>
  const Caps* caps() const { return static_cast<const Caps*>(capabilities); }
  const mlpt_error_api& errors() const;
  // The ABI minor both sides speak for this component's tables (see Plugin::negotiated_version).
  uint32_t abi_minor() const;
};

class Plugin : public std::enable_shared_from_this<Plugin> {
 public:
  // Loads and validates `path`. `host` must outlive the plugin.
  static std::shared_ptr<Plugin> load(const std::filesystem::path& path, HostServices& host);
  ~Plugin();
  Plugin(const Plugin&) = delete;
  Plugin& operator=(const Plugin&) = delete;

  const std::filesystem::path& path() const { return path_; }
  const std::string& name() const { return name_; }
  const std::string& version() const { return version_; }
  // The version the plugin declares, and the one both sides speak (the smaller, same major).
  mlpt_abi_version abi_version() const { return descriptor_->abi_version; }
  mlpt_abi_version negotiated_version() const;
  // Since ABI 1.1; empty for a 1.0 plugin.
  std::string build_info() const;
  const mlpt_error_api& errors() const { return descriptor_->errors; }
  // Things a user should know that did not stop the load (e.g. a newer minor version).
  const std::vector<std::string>& notes() const { return notes_; }

  std::vector<Component> components() const;
  // The component of `kind` named `name`; with an empty name, the only one of that kind.
  Component component(mlpt_component_kind kind, const std::string& name = "") const;

 private:
  Plugin() = default;
  void validate();

  std::filesystem::path path_;
  void* handle_ = nullptr;
  const mlpt_plugin_descriptor* descriptor_ = nullptr;
  std::string name_, version_;
  std::vector<std::string> notes_;
};

// Converts an error returned by a component into mlpt::Error (destroying it); no-op for NULL.
void check(const mlpt_error_api& errors, mlpt_error* error, const std::string& what);
inline void check(const Component& c, mlpt_error* error, const std::string& what) {
  check(c.errors(), error, c.name + ": " + what);
}

}  // namespace mlpt::plugin
