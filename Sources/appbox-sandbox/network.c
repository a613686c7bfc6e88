/* `appbox-sandbox network`: starts pasta, the user-mode network of an app that has a
 * network namespace of its own, as the user owning that namespace.
 *
 *   appbox-sandbox network [--user UID:GID] [--nice N] -- PASTA [PASTA-ARGS...]     (on the host)
 *
 * appbox runs it right after `enter` reported the app's new network namespace (see
 * enter.c, step 5). In order, this:
 *  1. with --user (appbox is root), keeps GID as its only group and becomes UID:GID, the
 *     app's own uid, which owns the user namespace that owns the app's network namespace
 *     (pasta joins both, and needs no other privilege: it never runs as root);
 *  2. with --nice, lowers its own priority to that nice value (1 to 19): the app starts
 *     beside pasta, and on a busy CPU pasta's start (tens of milliseconds of its own work)
 *     would otherwise slow the jail's; appbox, as root, raises pasta back to nice 0 once it
 *     is ready (an unprivileged appbox could not, and does not ask for this);
 *  3. asks the kernel to kill it (SIGKILL) when appbox, its parent, ends, so that pasta
 *     never outlives the run that started it, even when appbox itself is killed; the
 *     setting survives exec, and pasta, not being root, changes no identity that would
 *     clear it;
 *  4. execs PASTA with its arguments. appbox chose them: in the foreground, joining the
 *     app's user and network namespaces (open on descriptors 4 and 5, which appbox holds
 *     too), configuring the interface, addresses and routes from the host's, with no port
 *     forwarded either way and without mapping the gateway to the host's loopback; it writes
 *     its pid on descriptor 3 once it is ready.
 *     pasta's first act on a CPU with AVX2 is to exec its AVX2 build, the file its
 *     executable's real path names with ".avx2" appended, with the same arguments (passt's
 *     arch.c); this execs that build directly when it is there and the CPU has AVX2, which
 *     saves pasta one exec on the path an app's first socket waits on (what pasta runs is
 *     the same).
 */
#define _GNU_SOURCE
#include <cpuid.h>
#include <errno.h>
#include <grp.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include "sandbox.h"

/* Whether the CPU has AVX2 and the kernel saves its registers (the AVX and OSXSAVE bits of
 * CPUID leaf 1, the SSE and AVX state bits of XCR0, the AVX2 bit of leaf 7). Asked directly
 * rather than with __builtin_cpu_supports, whose libgcc constructor would run its own CPUID
 * probe at every start of this helper (enter and confine too), each CPUID a VM exit of some
 * microseconds on a virtual machine. */
static int has_avx2(void) {
  unsigned int eax, ebx, ecx, edx;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return 0;
  if (!(ecx & bit_OSXSAVE) || !(ecx & bit_AVX)) return 0;
  unsigned int low, high;
  __asm__("xgetbv" : "=a"(low), "=d"(high) : "c"(0));
  if ((low & 6) != 6) return 0;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return 0;
  return (ebx & bit_AVX2) != 0;
}

/* What pasta would do first (step 4): exec the AVX2 build beside its real executable, with
 * the same arguments, when the CPU has AVX2 and that build is there; returns otherwise. */
static void exec_avx2_build(const char *pasta, char *const *arguments) {
  if (!has_avx2()) return;
  char real[PATH_MAX];
  if (realpath(pasta, real) == NULL) return;
  size_t length = strlen(real);
  const char *suffix = ".avx2";
  if (length >= strlen(suffix) && strcmp(real + length - strlen(suffix), suffix) == 0) return;
  char build[PATH_MAX + 8];
  if (snprintf(build, sizeof build, "%s%s", real, suffix) >= (int)sizeof build) return;
  if (access(build, X_OK) != 0) return;
  execv(build, arguments); /* on failure, pasta's own executable runs, as without this */
}

int network_main(int argc, char **argv) {
  const char *user = NULL;
  long nice_value = 0;
  int index = 1;
  for (; index < argc; index++) {
    const char *option = argv[index];
    if (strcmp(option, "--") == 0) {
      index++;
      break;
    }
    if (index + 1 >= argc) fail(64, "%s needs a value", option);
    const char *value = argv[++index];
    if (strcmp(option, "--user") == 0) {
      user = value;
    } else if (strcmp(option, "--nice") == 0) {
      nice_value = parse_number(value, 19, "--nice");
    } else {
      fail(64, "unknown option '%s'", option);
    }
  }
  if (index >= argc) fail(64, "no pasta command given after '--'");
  pid_t parent = getppid();
  if (user != NULL) {
    char *end = NULL;
    errno = 0;
    unsigned long uid = strtoul(user, &end, 10), gid = 0;
    if (errno == 0 && end != user && *end == ':') {
      const char *text = end + 1;
      gid = strtoul(text, &end, 10);
      if (end == text) errno = EINVAL;
    }
    if (errno != 0 || *end != '\0' || uid == 0 || gid == 0 || uid >= 0xFFFFFFFFUL || gid >= 0xFFFFFFFFUL) {
      fail(64, "--user takes UID:GID (both above 0), not '%s'", user);
    }
    gid_t group = (gid_t)gid;
    if (setgroups(1, &group) != 0) fail(71, "cannot set the groups: %s", reason(errno));
    if (setresgid(group, group, group) != 0) fail(71, "cannot become gid %lu: %s", gid, reason(errno));
    if (setresuid((uid_t)uid, (uid_t)uid, (uid_t)uid) != 0) {
      fail(71, "cannot become uid %lu: %s", uid, reason(errno));
    }
    if (getuid() != (uid_t)uid || geteuid() != (uid_t)uid || setuid(0) == 0) {
      fail(71, "could not drop root privileges");
    }
  }
  if (nice_value > 0 && setpriority(PRIO_PROCESS, 0, (int)nice_value) != 0) {
    fail(71, "cannot lower pasta's priority: %s", reason(errno));
  }
  if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0) {
    fail(71, "cannot ask to end with appbox: %s", reason(errno));
  }
  if (getppid() != parent) _exit(0); /* appbox ended already: nothing to serve */
  exec_avx2_build(argv[index], &argv[index]);
  execv(argv[index], &argv[index]);
  int error = errno;
  fail(error == ENOENT ? 69 : 126, "cannot run pasta '%s': %s", argv[index], reason(error));
}
