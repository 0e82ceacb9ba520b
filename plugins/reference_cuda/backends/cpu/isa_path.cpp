#include "backends/cpu/isa_path.hpp"

#include <cstdlib>
#include <stdexcept>
#include <string>

namespace mlpt::ref::cpu {

const char* isa_path_name(IsaPath path) {
  switch (path) {
    case IsaPath::avx512:
      return "avx512";
    case IsaPath::avx2:
      return "avx2";
    default:
      return "baseline";
  }
}

bool isa_path_supported(IsaPath path) {
#if defined(__x86_64__) && defined(__GNUC__)
  switch (path) {  // the features GCC's arch=skylake-avx512 and arch=haswell builds use
    case IsaPath::avx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
             __builtin_cpu_supports("bmi2");
    case IsaPath::avx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
             __builtin_cpu_supports("bmi2");
    default:
      return true;
  }
#else
  return path == IsaPath::baseline;
#endif
}

namespace {
IsaPath choose() {
  const char* forced = std::getenv("MLPT_CPU_PATH");
  if (forced && *forced) {
    for (IsaPath p : {IsaPath::avx512, IsaPath::avx2, IsaPath::baseline}) {
      if (std::string(forced) != isa_path_name(p)) continue;
      if (!isa_path_supported(p))
        throw std::runtime_error(std::string("MLPT_CPU_PATH=") + forced + ": this CPU cannot run the " +
                                 forced + " kernels");
      return p;
    }
    throw std::runtime_error(std::string("MLPT_CPU_PATH=") + forced + ": not avx512, avx2 or baseline");
  }
  for (IsaPath p : {IsaPath::avx512, IsaPath::avx2})
    if (isa_path_supported(p)) return p;
  return IsaPath::baseline;
}
}  // namespace

IsaPath isa_path() {
  static const IsaPath path = choose();
  return path;
}

}  // namespace mlpt::ref::cpu
