// Which instruction set the CPU kernels that come in several builds run (attention's float tasks
// today): AVX-512, AVX2+FMA or baseline x86-64. By default the best the CPU has; MLPT_CPU_PATH=
// avx512|avx2|baseline forces one, so CI runs every path a machine can run and results on one
// path can be compared with another's. Chosen once per process.
#pragma once

namespace mlpt::ref::cpu {

enum class IsaPath { baseline, avx2, avx512 };

const char* isa_path_name(IsaPath path);
// Whether this CPU can run `path`.
bool isa_path_supported(IsaPath path);
// The path the kernels run: MLPT_CPU_PATH when set (throws std::runtime_error naming the variable
// when the value is unknown or the CPU cannot run it), else the best supported.
IsaPath isa_path();

}  // namespace mlpt::ref::cpu
