#include "seccomp_filter.hpp"

#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <sys/syscall.h>

#include <cerrno>
#include <cstddef>

#include <nlohmann/json.hpp>

#include "mlpt/sdk/error.hpp"

namespace mlpt::sandbox {
namespace {

#if defined(__x86_64__)
constexpr uint32_t kAuditArch = AUDIT_ARCH_X86_64;
constexpr const char* kOciArch = "SCMP_ARCH_X86_64";
constexpr bool kKnownArch = true;
#elif defined(__aarch64__)
constexpr uint32_t kAuditArch = AUDIT_ARCH_AARCH64;
constexpr const char* kOciArch = "SCMP_ARCH_AARCH64";
constexpr bool kKnownArch = true;
#else
constexpr uint32_t kAuditArch = 0;
constexpr const char* kOciArch = "";
constexpr bool kKnownArch = false;
#endif

#define MLPT_DENY(name) {#name, __NR_##name},

std::vector<DeniedSyscall> build_list() {
  std::vector<DeniedSyscall> v = {
  // Mounts and namespaces: the sandbox's filesystem view is fixed by the runtime.
#ifdef __NR_mount
      MLPT_DENY(mount)
#endif
#ifdef __NR_umount2
      MLPT_DENY(umount2)
#endif
#ifdef __NR_pivot_root
      MLPT_DENY(pivot_root)
#endif
#ifdef __NR_open_tree
      MLPT_DENY(open_tree) MLPT_DENY(move_mount) MLPT_DENY(fsopen) MLPT_DENY(fsconfig) MLPT_DENY(fsmount) MLPT_DENY(fspick)
#endif
#ifdef __NR_mount_setattr
      MLPT_DENY(mount_setattr)
#endif
      MLPT_DENY(unshare) MLPT_DENY(setns)
  // Kernel modules, kexec, reboot, swap.
      MLPT_DENY(init_module) MLPT_DENY(finit_module) MLPT_DENY(delete_module) MLPT_DENY(kexec_load)
#ifdef __NR_kexec_file_load
      MLPT_DENY(kexec_file_load)
#endif
      MLPT_DENY(reboot) MLPT_DENY(swapon) MLPT_DENY(swapoff)
  // The kernel keyring.
      MLPT_DENY(add_key) MLPT_DENY(request_key) MLPT_DENY(keyctl)
  // Other processes' memory and execution.
      MLPT_DENY(ptrace) MLPT_DENY(process_vm_readv) MLPT_DENY(process_vm_writev)
#ifdef __NR_pidfd_getfd
      MLPT_DENY(pidfd_getfd)
#endif
  // bpf and perf events.
      MLPT_DENY(bpf) MLPT_DENY(perf_event_open)
  // Host-wide state: clocks, accounting, the kernel log, quotas, handle-based opens.
      MLPT_DENY(settimeofday) MLPT_DENY(clock_settime) MLPT_DENY(clock_adjtime) MLPT_DENY(adjtimex)
      MLPT_DENY(acct) MLPT_DENY(syslog) MLPT_DENY(quotactl) MLPT_DENY(name_to_handle_at) MLPT_DENY(open_by_handle_at)
      MLPT_DENY(vhangup)
  // Kernel attack surface with no use in a coding task.
      MLPT_DENY(userfaultfd) MLPT_DENY(io_uring_setup) MLPT_DENY(io_uring_enter) MLPT_DENY(io_uring_register)
      MLPT_DENY(fanotify_init) MLPT_DENY(lookup_dcookie)
#ifdef __NR_iopl
      MLPT_DENY(iopl) MLPT_DENY(ioperm)
#endif
#ifdef __NR_uselib
      MLPT_DENY(uselib)
#endif
#ifdef __NR__sysctl
      MLPT_DENY(_sysctl)
#endif
  };
  return v;
}

#undef MLPT_DENY

sock_filter stmt(uint16_t code, uint32_t k) { return sock_filter{code, 0, 0, k}; }
sock_filter jump(uint16_t code, uint32_t k, uint8_t jt, uint8_t jf) { return sock_filter{code, jt, jf, k}; }

}  // namespace

const std::vector<DeniedSyscall>& denied_syscalls() {
  static const std::vector<DeniedSyscall> list = kKnownArch ? build_list() : std::vector<DeniedSyscall>{};
  return list;
}

uint64_t denied_namespace_flags() {
  return CLONE_NEWNS | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWCGROUP;
}

std::string seccomp_bpf_program() {
  if (!kKnownArch) throw sdk::Error(MLPT_UNIMPLEMENTED, "no seccomp deny list for this architecture");
  const auto& denied = denied_syscalls();
  std::vector<sock_filter> p;
  p.push_back(stmt(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)));
  p.push_back(jump(BPF_JMP | BPF_JEQ | BPF_K, kAuditArch, 1, 0));
  p.push_back(stmt(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS));
  p.push_back(stmt(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)));
#if defined(__x86_64__)
  // The x32 ABI reaches the same kernel entry points under other numbers.
  p.push_back(jump(BPF_JMP | BPF_JSET | BPF_K, 0x40000000u, 0, 1));
  p.push_back(stmt(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS));
#endif
  p.push_back(jump(BPF_JMP | BPF_JEQ | BPF_K, static_cast<uint32_t>(__NR_clone3), 0, 1));
  p.push_back(stmt(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS));
  // Then: one compare per denied call jumping to EPERM, clone's flags, allow, EPERM.
  const size_t first = p.size(), n = denied.size();
  const size_t clone_at = first + n, allow_at = clone_at + 3, eperm_at = allow_at + 1;
  if (eperm_at - first > 255) throw sdk::Error(MLPT_INTERNAL, "seccomp deny list too long for one jump");
  for (size_t i = 0; i < n; ++i)
    p.push_back(jump(BPF_JMP | BPF_JEQ | BPF_K, static_cast<uint32_t>(denied[i].nr),
                     static_cast<uint8_t>(eperm_at - (first + i) - 1), 0));
  p.push_back(jump(BPF_JMP | BPF_JEQ | BPF_K, static_cast<uint32_t>(__NR_clone), 0,
                   static_cast<uint8_t>(allow_at - clone_at - 1)));
  // The flags are clone's first argument on both architectures; every namespace flag is in the low word.
  p.push_back(stmt(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, args)));
  p.push_back(jump(BPF_JMP | BPF_JSET | BPF_K, static_cast<uint32_t>(denied_namespace_flags()), 1, 0));
  p.push_back(stmt(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
  p.push_back(stmt(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM));
  return std::string(reinterpret_cast<const char*>(p.data()), p.size() * sizeof(sock_filter));
}

std::string seccomp_oci_profile() {
  if (!kKnownArch) throw sdk::Error(MLPT_UNIMPLEMENTED, "no seccomp deny list for this architecture");
  nlohmann::json names = nlohmann::json::array();
  for (auto& d : denied_syscalls()) names.push_back(d.name);
  nlohmann::json rules = nlohmann::json::array();
  rules.push_back({{"names", names}, {"action", "SCMP_ACT_ERRNO"}, {"errnoRet", EPERM}});
  rules.push_back({{"names", {"clone3"}}, {"action", "SCMP_ACT_ERRNO"}, {"errnoRet", ENOSYS}});
  // One rule per namespace flag: (flags & F) == F.
  for (uint64_t f = 1; f; f <<= 1)
    if (denied_namespace_flags() & f)
      rules.push_back({{"names", {"clone"}},
                       {"action", "SCMP_ACT_ERRNO"},
                       {"errnoRet", EPERM},
                       {"args", {{{"index", 0}, {"value", f}, {"valueTwo", f}, {"op", "SCMP_CMP_MASKED_EQ"}}}}});
  nlohmann::json profile = {{"defaultAction", "SCMP_ACT_ALLOW"}, {"architectures", {kOciArch}}, {"syscalls", rules}};
  return profile.dump(1);
}

}  // namespace mlpt::sandbox
