/* The seccomp filter every app runs under (libseccomp; installed by `confine` after
 * Landlock, as the last step before exec).
 *
 * Default: allow. Denied with EPERM, because each lets a process reach beyond its jail
 * or attack the kernel, and no app needs it:
 *  - terminal injection and takeover: ioctl TIOCSTI (type into a terminal's input),
 *    TIOCLINUX (console selection paste and more), TIOCCONS (redirect the console),
 *    TIOCSETD (line disciplines load kernel modules). The command is matched on its low
 *    32 bits, as the kernel reads it, so high bits cannot slip past (CVE-2017-5226);
 *  - mount, umount2, pivot_root, chroot and the new mount API; unshare, setns, and
 *    clone with any namespace flag (so no new user namespace); clone3 fails with
 *    ENOSYS instead, so that libc falls back to clone, whose flags can be checked;
 *  - ptrace PTRACE_ATTACH and PTRACE_SEIZE (a child may still ask to be traced with
 *    PTRACE_TRACEME), process_vm_readv/writev, pidfd_getfd;
 *  - keyctl, add_key, request_key; bpf; userfaultfd; perf_event_open;
 *  - the fscrypt ioctls that change state: FS_IOC_ADD_ENCRYPTION_KEY,
 *    FS_IOC_REMOVE_ENCRYPTION_KEY, FS_IOC_REMOVE_ENCRYPTION_KEY_ALL_USERS (the device's
 *    class keys live in the file system's keyring, where any user may remove its own
 *    claims and fill its key quota), FS_IOC_SET_ENCRYPTION_POLICY (a folder encrypted under
 *    a key only the app had is one appbox cannot read) and FS_IOC_GET_ENCRYPTION_PWSALT
 *    (which writes a salt into the superblock). Matched on their type and number alone
 *    (the low 16 bits), whatever size or direction bits a caller sets. The fscrypt ioctls
 *    that only read (policy, key status, nonce) stay allowed;
 *  - socket and socketpair of the AF_VSOCK family, under every network mode: vsock
 *    ignores network namespaces and reaches the hypervisor or its other guests. The
 *    family is matched on its low 32 bits, as the kernel reads it;
 *  - init_module, finit_module, delete_module, kexec_load, kexec_file_load;
 *  - io_uring_setup/enter/register (its operations are not seen by seccomp);
 *  - name_to_handle_at, open_by_handle_at; acct, swapon, swapoff, reboot, syslog,
 *    quotactl, vhangup, settimeofday, clock_settime, clock_adjtime.
 * System calls of another architecture (32-bit, x32) kill the process.
 *
 * With a network of its own, a second filter (install_network_gate) holds the app's first
 * uses of that network: socket() of every family but AF_UNIX returns
 * SECCOMP_RET_USER_NOTIF, and appbox, holding the listener, answers once pasta has
 * configured the namespace (see Sources/AppboxContainer/NetworkGate.swift). The answer
 * decides nothing: a call let through runs as if this second filter were not there,
 * under the first one (which still refuses AF_VSOCK: the kernel takes the strictest
 * action of all filters, and EPERM beats a notification), the namespaces and Landlock.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/sched.h>
#include <seccomp.h>
#include <stddef.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/fscrypt.h>
#include <linux/seccomp.h>
#include <sys/ioctl.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "sandbox.h"

#ifndef CLONE_NEWTIME
#define CLONE_NEWTIME 0x00000080
#endif

/* The denied system calls that take no argument check. A name this libseccomp or
 * architecture does not know is skipped. */
static const char *const denied[] = {
    "mount", "umount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen", "fsconfig",
    "fsmount", "fspick", "mount_setattr", "unshare", "setns", "process_vm_readv", "process_vm_writev",
    "pidfd_getfd", "keyctl", "add_key", "request_key", "bpf", "userfaultfd", "perf_event_open",
    "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load", "io_uring_setup",
    "io_uring_enter", "io_uring_register", "name_to_handle_at", "open_by_handle_at", "acct", "swapon",
    "swapoff", "reboot", "syslog", "quotactl", "quotactl_fd", "vhangup", "settimeofday", "clock_settime",
    "clock_adjtime", "adjtimex",
};

#ifndef AF_VSOCK
#define AF_VSOCK 40
#endif

static const unsigned long terminal_requests[] = {TIOCSTI, TIOCLINUX, TIOCCONS, TIOCSETD};

/* The fscrypt requests that change state. */
static const unsigned long fscrypt_requests[] = {
    FS_IOC_SET_ENCRYPTION_POLICY, FS_IOC_GET_ENCRYPTION_PWSALT, FS_IOC_ADD_ENCRYPTION_KEY,
    FS_IOC_REMOVE_ENCRYPTION_KEY, FS_IOC_REMOVE_ENCRYPTION_KEY_ALL_USERS,
};

static const unsigned long namespace_flags[] = {
    CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET,
    CLONE_NEWTIME,
};

int install_syscall_filter(void) {
  scmp_filter_ctx filter = seccomp_init(SCMP_ACT_ALLOW);
  if (filter == NULL) return ENOMEM;
  int result = seccomp_attr_set(filter, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
  const uint32_t deny = SCMP_ACT_ERRNO(EPERM);
  for (size_t i = 0; result == 0 && i < sizeof denied / sizeof *denied; i++) {
    int number = seccomp_syscall_resolve_name(denied[i]);
    if (number == __NR_SCMP_ERROR) continue;
    result = seccomp_rule_add(filter, deny, number, 0);
  }
  for (size_t i = 0; result == 0 && i < sizeof terminal_requests / sizeof *terminal_requests; i++) {
    result = seccomp_rule_add(filter, deny, SCMP_SYS(ioctl), 1,
                              SCMP_A1(SCMP_CMP_MASKED_EQ, 0xFFFFFFFFu, terminal_requests[i]));
  }
  for (size_t i = 0; result == 0 && i < sizeof fscrypt_requests / sizeof *fscrypt_requests; i++) {
    result = seccomp_rule_add(filter, deny, SCMP_SYS(ioctl), 1,
                              SCMP_A1(SCMP_CMP_MASKED_EQ, 0xFFFFu, fscrypt_requests[i] & 0xFFFFu));
  }
  if (result == 0) {
    result = seccomp_rule_add(filter, deny, SCMP_SYS(socket), 1, SCMP_A0(SCMP_CMP_MASKED_EQ, 0xFFFFFFFFu, AF_VSOCK));
  }
  if (result == 0) {
    result =
        seccomp_rule_add(filter, deny, SCMP_SYS(socketpair), 1, SCMP_A0(SCMP_CMP_MASKED_EQ, 0xFFFFFFFFu, AF_VSOCK));
  }
  for (size_t i = 0; result == 0 && i < sizeof namespace_flags / sizeof *namespace_flags; i++) {
    result = seccomp_rule_add(filter, deny, SCMP_SYS(clone), 1,
                              SCMP_A0(SCMP_CMP_MASKED_EQ, namespace_flags[i], namespace_flags[i]));
  }
  if (result == 0) result = seccomp_rule_add(filter, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
  if (result == 0) {
    result = seccomp_rule_add(filter, deny, SCMP_SYS(ptrace), 1, SCMP_A0(SCMP_CMP_EQ, PTRACE_ATTACH));
  }
  if (result == 0) {
    result = seccomp_rule_add(filter, deny, SCMP_SYS(ptrace), 1, SCMP_A0(SCMP_CMP_EQ, PTRACE_SEIZE));
  }
  if (result == 0) result = seccomp_load(filter);
  seccomp_release(filter);
  return result < 0 ? -result : result;
}

#ifndef SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV
#define SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV (1UL << 5)
#endif

#if defined(__x86_64__)
#define NATIVE_AUDIT_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define NATIVE_AUDIT_ARCH AUDIT_ARCH_AARCH64
#else
#error "the network gate knows x86_64 and aarch64 only"
#endif

int install_network_gate(void) {
  /* socket(family, ...): AF_UNIX goes on at once (local, and the same in every network
   * namespace); every other family waits for appbox's answer. The family is the low 32
   * bits of the first argument, as the kernel reads it (the low word comes first on these
   * little-endian architectures). Other architectures' calls pass here: the first filter
   * kills them. */
  struct sock_filter program[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, NATIVE_AUDIT_ARCH, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_socket, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0])),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AF_UNIX, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_USER_NOTIF),
  };
  struct sock_fprog filter = {.len = sizeof program / sizeof *program, .filter = program};
  /* WAIT_KILLABLE_RECV (Linux 5.19): once appbox has received a held call, only a fatal
   * signal interrupts it, so a handled signal meanwhile cannot make socket() fail with
   * EINTR, which no program expects of it. Older kernels go without. */
  long listener = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER,
                          SECCOMP_FILTER_FLAG_NEW_LISTENER | SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV, &filter);
  if (listener < 0 && errno == EINVAL) {
    listener = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, &filter);
  }
  return listener < 0 ? -errno : (int)listener;
}
