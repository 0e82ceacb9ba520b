// Where plugins are found by file name: $MLPT_PLUGIN_PATH (colon-separated), then beside the
// running executable (<bin>/../lib/mlpt/plugins when installed, <build>/plugins in a build tree).
// A name with a '/' is a path and is used as it is.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace mlpt::plugin {

std::vector<std::filesystem::path> plugin_dirs();
// Resolves `name_or_path`; throws mlpt::Error listing the folders searched when not found.
std::filesystem::path resolve_plugin(const std::string& name_or_path);

}  // namespace mlpt::plugin
