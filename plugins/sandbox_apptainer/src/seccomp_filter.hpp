// The system calls a coding agent never needs, denied to every sandbox command: mounting and
// namespaces (mount, pivot_root, the new mount API, unshare/setns, clone with namespace flags),
// kernel modules and kexec, the keyring, ptrace and cross-process memory access, bpf, perf events,
// reboot, swap, clocks, accounting, syslog, handle-based opens (a classic container escape),
// userfaultfd and io_uring. One list feeds both runtimes: a classic BPF program for bwrap
// (`--seccomp FD`) and an OCI seccomp profile for apptainer (`--security seccomp:FILE`).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mlpt::sandbox {

struct DeniedSyscall {
  const char* name;
  long nr;  // on the build architecture
};

// The deny list for this architecture (x86_64 or aarch64; empty elsewhere).
const std::vector<DeniedSyscall>& denied_syscalls();

// Namespace-creating clone/unshare flags the filter refuses.
uint64_t denied_namespace_flags();

// The classic BPF program (struct sock_filter[] as bytes) bwrap loads with --seccomp: a foreign
// architecture (or the x32 ABI) kills the process, a denied call fails with EPERM, clone3 fails
// with ENOSYS (its flags live in memory the filter cannot read; libc then falls back to clone,
// whose flags it can), everything else is allowed. Throws sdk::Error(UNIMPLEMENTED) on an
// architecture without a list.
std::string seccomp_bpf_program();

// The same policy as an OCI seccomp profile (JSON), for apptainer.
std::string seccomp_oci_profile();

}  // namespace mlpt::sandbox
