#include "core/plugin/plugin.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <set>

#include <spdlog/spdlog.h>

#include "core/config/component_kinds.hpp"
#include "core/plugin/kinds/kind.hpp"

namespace mlpt::plugin {
namespace {

std::string str(mlpt_string s) { return s.data ? std::string(s.data, s.size) : std::string(); }

std::string version_text(mlpt_abi_version v) {
  return std::to_string(v.major) + "." + std::to_string(v.minor);
}

// Cheap check before dlopen so that "not a shared object" is said plainly (dlerror's wording
// varies); also catches directories and unreadable files.
void require_elf(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))
    throw Error(MLPT_NOT_FOUND, "plugin " + path.string() + ": file does not exist");
  if (!std::filesystem::is_regular_file(path, ec))
    throw Error(MLPT_INVALID_ARGUMENT, "plugin " + path.string() + ": not a regular file");
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(MLPT_PERMISSION_DENIED, "plugin " + path.string() + ": cannot be read: " + std::strerror(errno));
  unsigned char magic[4] = {0, 0, 0, 0};
  ssize_t n = ::read(fd, magic, sizeof(magic));
  ::close(fd);
  if (n != 4 || std::memcmp(magic, "\x7f" "ELF", 4) != 0)
    throw Error(MLPT_INVALID_ARGUMENT, "plugin " + path.string() + ": not a shared object (no ELF header)");
}

}  // namespace

void check(const mlpt_error_api& errors, mlpt_error* error, const std::string& what) {
  if (!error) return;
  mlpt_error_code code = errors.error_code(error);
  std::string message = str(errors.error_message(error));
  errors.error_destroy(error);
  throw Error(code == MLPT_OK ? MLPT_UNKNOWN : code, what + ": " + message);
}

std::string Plugin::build_info() const {
  return MLPT_HAS_FIELD(descriptor_, mlpt_plugin_descriptor, build_info) ? str(descriptor_->build_info) : std::string();
}

const mlpt_error_api& Component::errors() const { return plugin->errors(); }
uint32_t Component::abi_minor() const { return plugin->negotiated_version().minor; }

mlpt_abi_version Plugin::negotiated_version() const {
  mlpt_abi_version v = descriptor_->abi_version;
  if (v.minor > MLPT_ABI_VERSION_MINOR) v.minor = MLPT_ABI_VERSION_MINOR;
  return v;
}

std::shared_ptr<Plugin> Plugin::load(const std::filesystem::path& path, HostServices& host) {
  require_elf(path);
  std::shared_ptr<Plugin> plugin(new Plugin());
  plugin->path_ = path;
  dlerror();
  plugin->handle_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!plugin->handle_) {
    const char* why = dlerror();
    throw Error(MLPT_INVALID_ARGUMENT, "plugin " + path.string() + ": dlopen failed: " + (why ? why : "unknown reason"));
  }
  void* symbol = dlsym(plugin->handle_, MLPT_PLUGIN_ENTRY_SYMBOL);
  if (!symbol)
    throw Error(MLPT_NOT_FOUND, "plugin " + path.string() + ": no entry point '" MLPT_PLUGIN_ENTRY_SYMBOL
                                "' (is it an mlpt plugin? the symbol must be extern \"C\" and exported)");
  auto init = reinterpret_cast<mlpt_plugin_init_fn>(symbol);

  mlpt_plugin_init_args args{};
  args.struct_size = MLPT_PLUGIN_INIT_ARGS_STRUCT_SIZE;
  args.host_abi_version = mlpt_abi_version{MLPT_ABI_VERSION_MAJOR, MLPT_ABI_VERSION_MINOR};
  args.host = host.table();
  args.extension_start = nullptr;
  host.begin_capture();
  mlpt_error* error = init(&args);
  std::string said = host.end_capture();
  plugin->descriptor_ = args.descriptor;
  const std::string where = "plugin " + path.string();
  const std::string host_abi = version_text(args.host_abi_version);
  if (error) {
    // A refusal or a failure, with a descriptor to destroy the error with (since 1.2 the way to
    // refuse; a 1.0/1.1 plugin may also fail this way).
    if (!plugin->descriptor_ || plugin->descriptor_->struct_size < MLPT_PLUGIN_DESCRIPTOR_STRUCT_SIZE_1_0 ||
        !plugin->descriptor_->errors.error_destroy || !plugin->descriptor_->errors.error_code ||
        !plugin->descriptor_->errors.error_message) {
      plugin->descriptor_ = nullptr;  // nothing of it is usable, not even shutdown
      throw Error(MLPT_INTERNAL, where + ": entry point failed (and returned no descriptor to destroy its error with)");
    }
    const mlpt_error_api& errors = plugin->descriptor_->errors;
    bool refused = errors.error_code(error) == MLPT_FAILED_PRECONDITION;
    check(errors, error, refused ? where + " refused to load with host ABI " + host_abi : where + ": entry point failed");
  }
  if (!plugin->descriptor_)  // the 1.0/1.1 way to refuse: NULL and a reason in the log
    throw Error(MLPT_FAILED_PRECONDITION,
                where + " refused to load with host ABI " + host_abi + (said.empty() ? "" : ": " + said));
  plugin->validate();
  return plugin;
}

void Plugin::validate() {
  const std::string where = "plugin " + path_.string();
  const auto* d = descriptor_;
  if (d->struct_size < MLPT_PLUGIN_DESCRIPTOR_STRUCT_SIZE_1_0)
    throw Error(MLPT_INVALID_ARGUMENT, where + ": descriptor struct_size " + std::to_string(d->struct_size) +
                                           " is smaller than ABI 1.0's " +
                                           std::to_string(MLPT_PLUGIN_DESCRIPTOR_STRUCT_SIZE_1_0));
  if (d->abi_version.major != MLPT_ABI_VERSION_MAJOR)
    throw Error(MLPT_FAILED_PRECONDITION,
                where + ": built for ABI " + version_text(d->abi_version) + ", this host speaks ABI " +
                    std::to_string(MLPT_ABI_VERSION_MAJOR) + ".x (a major mismatch: rebuild the plugin)");
  if (d->abi_version.minor > MLPT_ABI_VERSION_MINOR)
    notes_.push_back("built for ABI " + version_text(d->abi_version) + ", newer than this host's " +
                     std::to_string(MLPT_ABI_VERSION_MAJOR) + "." + std::to_string(MLPT_ABI_VERSION_MINOR) +
                     ": it loads, and features newer than the host are not used");
  if (d->errors.struct_size < MLPT_ERROR_API_STRUCT_SIZE || !d->errors.error_destroy ||
      !d->errors.error_code || !d->errors.error_message)
    throw Error(MLPT_INVALID_ARGUMENT, where + ": descriptor.errors is incomplete (error_destroy, error_code and error_message are required)");
  name_ = str(d->name);
  version_ = str(d->version);
  if (name_.empty()) throw Error(MLPT_INVALID_ARGUMENT, where + ": descriptor has an empty name");
  if (d->num_components > 0 && !d->components)
    throw Error(MLPT_INVALID_ARGUMENT, where + ": num_components is " + std::to_string(d->num_components) + " but components is NULL");
  if (d->num_components > 1024)
    throw Error(MLPT_INVALID_ARGUMENT, where + ": implausible num_components " + std::to_string(d->num_components));

  std::set<std::pair<int, std::string>> names;  // (kind, name): one name may serve several kinds
  for (size_t i = 0; i < d->num_components; ++i) {
    const mlpt_component& c = d->components[i];
    std::string cw = where + ": component #" + std::to_string(i);
    if (c.struct_size < MLPT_COMPONENT_STRUCT_SIZE)
      throw Error(MLPT_INVALID_ARGUMENT, cw + ": struct_size " + std::to_string(c.struct_size) + " is smaller than ABI 1.0's " + std::to_string(MLPT_COMPONENT_STRUCT_SIZE));
    std::string cname = str(c.name);
    if (cname.empty()) throw Error(MLPT_INVALID_ARGUMENT, cw + ": empty name");
    cw = where + ": component '" + cname + "'";
    if (!names.insert({static_cast<int>(c.kind), cname}).second)
      throw Error(MLPT_ALREADY_EXISTS, cw + ": two components of one kind have this name");
    bool known = false;
    for (auto k : config::all_kinds()) known |= (k == c.kind);
    if (!known) {
      notes_.push_back("component '" + cname + "' has kind " + std::to_string(c.kind) +
                       ", unknown to this host: ignored");
      continue;
    }
    const KindSpec& rules = kind_spec(c.kind);
    if (!c.api) throw Error(MLPT_INVALID_ARGUMENT, cw + ": api table is NULL");
    if (!c.capabilities) throw Error(MLPT_INVALID_ARGUMENT, cw + ": capabilities is NULL");
    size_t api_size = *static_cast<const size_t*>(c.api);
    size_t caps_size = *static_cast<const size_t*>(c.capabilities);
    if (api_size < rules.min_api_size || api_size > (1u << 16))
      throw Error(MLPT_INVALID_ARGUMENT, cw + ": " + config::kind_name(c.kind) + " table struct_size " + std::to_string(api_size) +
                                             " is implausible (ABI 1.0 needs at least " + std::to_string(rules.min_api_size) + ")");
    if (caps_size < rules.min_capabilities_size || caps_size > (1u << 16))
      throw Error(MLPT_INVALID_ARGUMENT, cw + ": capabilities struct_size " + std::to_string(caps_size) +
                                             " is implausible (ABI 1.0 needs at least " + std::to_string(rules.min_capabilities_size) + ")");
    auto missing = missing_functions(rules, c.api);
    if (!missing.empty()) {
      std::string list;
      for (const auto& m : missing) list += (list.empty() ? "" : ", ") + m;
      throw Error(MLPT_INVALID_ARGUMENT, cw + ": required function(s) not set: " + list);
    }
  }
  for (const auto& n : notes_) spdlog::info("{}: {}", where, n);
}

std::vector<Component> Plugin::components() const {
  std::vector<Component> out;
  for (size_t i = 0; i < descriptor_->num_components; ++i) {
    const mlpt_component& c = descriptor_->components[i];
    bool known = false;
    for (auto k : config::all_kinds()) known |= (k == c.kind);
    if (!known) continue;
    out.push_back(Component{c.kind, str(c.name), str(c.description), c.api, c.capabilities, shared_from_this()});
  }
  return out;
}

Component Plugin::component(mlpt_component_kind kind, const std::string& name) const {
  std::vector<Component> of_kind;
  std::string available;
  for (auto& c : components()) {
    if (c.kind != kind) continue;
    available += (available.empty() ? "" : ", ") + c.name;
    if (!name.empty() && c.name == name) return c;
    of_kind.push_back(c);
  }
  std::string where = "plugin " + path_.string();
  if (name.empty() && of_kind.size() == 1) return of_kind.front();
  if (of_kind.empty())
    throw Error(MLPT_NOT_FOUND, where + " has no " + config::kind_name(kind) + " component");
  if (name.empty())
    throw Error(MLPT_INVALID_ARGUMENT, where + " has several " + std::string(config::kind_name(kind)) +
                                           " components (" + available + "): name one");
  throw Error(MLPT_NOT_FOUND, where + " has no " + std::string(config::kind_name(kind)) + " component '" + name +
                                  "' (it has: " + available + ")");
}

Plugin::~Plugin() {
  if (descriptor_ && descriptor_->shutdown) descriptor_->shutdown();
  // Sanitizer builds keep the object mapped so leak reports can still symbolize plugin frames.
#if !defined(__SANITIZE_ADDRESS__)
  if (handle_) dlclose(handle_);
#endif
}

}  // namespace mlpt::plugin
