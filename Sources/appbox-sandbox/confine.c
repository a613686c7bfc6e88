/* `appbox-sandbox confine`: the last step before the app, inside the jail.
 *
 *   appbox-sandbox confine [--rw DIR]... [--ro DIR]... [--rx DIR]... [--dev FILE]...
 *                          [--keep-fd N]... [--max-processes N] [--chdir DIR] [--start-fd N]
 *                          [--network-gate] [--allow-no-landlock] [--assume-no-landlock] -- CMD [ARG...]
 *
 * bubblewrap has already put the process in its jail (the paths here are the jail's).
 * In order, this:
 *  1. closes every descriptor above 2 except the --keep-fd ones (the app inherits its
 *     stdio and nothing else unless appbox asks: appbox never passes its own state in);
 *  2. sets RLIMIT_NPROC to --max-processes: the kernel counts it per user namespace and
 *     uid, and each run has a user namespace of its own, so this bounds every process of
 *     this run (a fork bomb stops there), not those of another run of the same app;
 *  3. drops every capability, including from the bounding set, and sets no_new_privs;
 *  4. restricts itself with Landlock for the ABI the kernel reports: every filesystem
 *     right that ABI knows is handled (denied unless a rule grants it), plus signal and
 *     abstract-socket scoping from ABI 6 and pathname-socket resolution from ABI 9:
 *       --rw   read, write, create, rename and remove (no execution, no device nodes)
 *       --ro   read files and list directories
 *       --rx   read, list and execute
 *       --dev  read, write, truncate and ioctl one device file (or the files below a
 *              directory such as /dev/pts)
 *     Rule paths that do not exist are skipped;
 *  5. installs the seccomp filter (filter.c: terminal injection, mounts, namespaces,
 *     ptrace attach, keyrings, bpf, userfaultfd, perf, modules, io_uring...);
 *  6. with --network-gate (the app has a network of its own, which pasta may still be
 *     configuring), installs the network gate's filter (filter.c: socket() of every family
 *     but AF_UNIX waits for appbox's answer);
 *  7. changes to --chdir and drops the PWD bubblewrap set;
 *  8. with --start-fd (a UNIX socket to appbox), says it is about to exec CMD: one byte, which
 *     carries the network gate's listener (SCM_RIGHTS) when there is one; then closes the
 *     socket and the listener, so the app never holds either and nothing inside the jail
 *     answers for the gate. appbox passes signals on to the app's process group from then
 *     on: this process is in it, so a signal that comes before the exec ends it as it would
 *     the app. Should appbox have closed its end, it decided not to start the app and says
 *     why itself: exit 69 without a word;
 *  9. execs CMD (searched in PATH).
 *
 * Without Landlock (an old kernel, or --assume-no-landlock in tests) it refuses with 69,
 * unless --allow-no-landlock: then it warns and runs the command in the jail without
 * this second wall (namespaces, uid, seccomp and the rest still apply).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "sandbox.h"

#ifndef SYS_landlock_create_ruleset
#define SYS_landlock_create_ruleset 444
#endif
#ifndef SYS_landlock_add_rule
#define SYS_landlock_add_rule 445
#endif
#ifndef SYS_landlock_restrict_self
#define SYS_landlock_restrict_self 446
#endif
#ifndef SYS_close_range
#define SYS_close_range 436
#endif

/* The Landlock interface, defined here rather than taken from <linux/landlock.h>:
 * distribution headers lag the kernels they run on (Debian 12's stop at ABI 2). */
#define CREATE_RULESET_VERSION (1U << 0)
#define RULE_PATH_BENEATH 1

#define FS_EXECUTE (1ULL << 0)
#define FS_WRITE_FILE (1ULL << 1)
#define FS_READ_FILE (1ULL << 2)
#define FS_READ_DIR (1ULL << 3)
#define FS_REMOVE_DIR (1ULL << 4)
#define FS_REMOVE_FILE (1ULL << 5)
#define FS_MAKE_CHAR (1ULL << 6)
#define FS_MAKE_DIR (1ULL << 7)
#define FS_MAKE_REG (1ULL << 8)
#define FS_MAKE_SOCK (1ULL << 9)
#define FS_MAKE_FIFO (1ULL << 10)
#define FS_MAKE_BLOCK (1ULL << 11)
#define FS_MAKE_SYM (1ULL << 12)
#define FS_REFER (1ULL << 13)        /* ABI 2 */
#define FS_TRUNCATE (1ULL << 14)     /* ABI 3 */
#define FS_IOCTL_DEV (1ULL << 15)    /* ABI 5 */
#define FS_RESOLVE_UNIX (1ULL << 16) /* ABI 9: connecting to pathname UNIX sockets */

#define SCOPE_ABSTRACT_UNIX_SOCKET (1ULL << 0) /* ABI 6 */
#define SCOPE_SIGNAL (1ULL << 1)               /* ABI 6 */

/* The largest layout this file knows (ABI 6); older kernels accept it as long as
 * the fields they do not know are zero. */
struct ruleset_attr {
  uint64_t handled_access_fs;
  uint64_t handled_access_net;
  uint64_t scoped;
};

struct path_beneath_attr {
  uint64_t allowed_access;
  int32_t parent_fd;
} __attribute__((packed));

/* Rights a rule on a file (not a directory) may carry. */
#define FILE_RIGHTS (FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV)

#define RIGHTS_RO (FS_READ_FILE | FS_READ_DIR)
#define RIGHTS_RX (RIGHTS_RO | FS_EXECUTE)
/* Device nodes are left out on purpose, and so is execution: what an app writes it may
 * not run, as on iOS. Sockets the app makes in its own data it may connect to. */
#define RIGHTS_RW                                                                                  \
  (RIGHTS_RO | FS_WRITE_FILE | FS_REMOVE_DIR | FS_REMOVE_FILE | FS_MAKE_DIR | FS_MAKE_REG |        \
   FS_MAKE_SOCK | FS_MAKE_FIFO | FS_MAKE_SYM | FS_REFER | FS_TRUNCATE | FS_RESOLVE_UNIX)
#define RIGHTS_DEV (FS_READ_FILE | FS_WRITE_FILE | FS_TRUNCATE | FS_IOCTL_DEV)

#define CAPABILITY_VERSION_3 0x20080522
#define MAX_KEPT 64

struct rule {
  const char *path;
  uint64_t rights;
};

static int landlock_abi(void) {
  long abi = syscall(SYS_landlock_create_ruleset, NULL, 0, CREATE_RULESET_VERSION);
  return abi < 0 ? 0 : (int)abi;
}

static uint64_t handled_fs_rights(int abi) {
  uint64_t rights = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_READ_DIR | FS_REMOVE_DIR |
                    FS_REMOVE_FILE | FS_MAKE_CHAR | FS_MAKE_DIR | FS_MAKE_REG | FS_MAKE_SOCK |
                    FS_MAKE_FIFO | FS_MAKE_BLOCK | FS_MAKE_SYM;
  if (abi >= 2) rights |= FS_REFER;
  if (abi >= 3) rights |= FS_TRUNCATE;
  if (abi >= 5) rights |= FS_IOCTL_DEV;
  if (abi >= 9) rights |= FS_RESOLVE_UNIX;
  return rights;
}

/* Closes descriptors `low` through `high` (`high` included). Uses close_range(2), or a
 * loop up to the descriptor limit on kernels older than 5.9. */
static void close_between(int low, unsigned int high) {
  if (syscall(SYS_close_range, (unsigned int)low, high, 0) == 0) return;
  struct rlimit limit;
  long max = 65536;
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) max = (long)limit.rlim_cur;
  if ((long)high < max) max = (long)high + 1;
  for (long fd = low; fd < max; fd++) close((int)fd);
}

static int compare_ints(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

/* Closes every descriptor from 3 up except the `count` ones in `kept`. */
static void close_inherited(int *kept, int count) {
  qsort(kept, (size_t)count, sizeof *kept, compare_ints);
  int low = 3;
  for (int i = 0; i < count; i++) {
    if (kept[i] > low) close_between(low, (unsigned int)kept[i] - 1);
    if (kept[i] >= low) low = kept[i] + 1;
  }
  close_between(low, ~0U);
}

static void add_rule(int ruleset, const struct rule *rule, uint64_t handled) {
  int fd = open(rule->path, O_PATH | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT || errno == ENOTDIR) return; /* not in this jail: nothing to allow */
    fail(71, "cannot open '%s' to allow it: %s", rule->path, reason(errno));
  }
  struct stat st;
  if (fstat(fd, &st) != 0) fail(71, "cannot stat '%s': %s", rule->path, reason(errno));
  struct path_beneath_attr attr = {.allowed_access = rule->rights & handled, .parent_fd = fd};
  if (!S_ISDIR(st.st_mode)) attr.allowed_access &= FILE_RIGHTS;
  if (attr.allowed_access != 0 &&
      syscall(SYS_landlock_add_rule, ruleset, RULE_PATH_BENEATH, &attr, 0) != 0) {
    fail(71, "cannot add a Landlock rule for '%s': %s", rule->path, reason(errno));
  }
  close(fd);
}

static void restrict_self(int abi, struct rule *rules, int count) {
  uint64_t handled = handled_fs_rights(abi);
  struct ruleset_attr attr = {.handled_access_fs = handled};
  if (abi >= 6) attr.scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL;
  int ruleset = (int)syscall(SYS_landlock_create_ruleset, &attr, sizeof attr, 0);
  if (ruleset < 0) fail(71, "cannot create a Landlock ruleset (ABI %d): %s", abi, reason(errno));
  for (int i = 0; i < count; i++) add_rule(ruleset, &rules[i], handled);
  if (syscall(SYS_landlock_restrict_self, ruleset, 0) != 0) {
    fail(71, "cannot restrict itself with Landlock: %s", reason(errno));
  }
  close(ruleset);
}

/* Empties the bounding, ambient, effective, permitted and inheritable capability
 * sets, so that neither this process nor anything it execs holds a capability (in
 * the jail's user namespace bubblewrap has dropped them already; this makes sure). */
static void drop_capabilities(void) {
  for (int cap = 0; cap < 64; cap++) {
    if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) == 0) continue;
    if (errno == EINVAL) break; /* past the last capability this kernel knows */
    if (errno == EPERM) break;  /* without CAP_SETPCAP: the set is already what it can be */
    fail(71, "cannot drop capability %d: %s", cap, reason(errno));
  }
  prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); /* EINVAL before Linux 4.3: none to clear */
  struct {
    uint32_t version;
    int pid;
  } header = {CAPABILITY_VERSION_3, 0};
  struct {
    uint32_t effective, permitted, inheritable;
  } data[2];
  memset(data, 0, sizeof data);
  if (syscall(SYS_capset, &header, data) != 0) fail(71, "cannot drop capabilities: %s", reason(errno));
}

/* Step 6: the network gate's filter; returns its listener. */
static int install_gate(void) {
  int listener = install_network_gate();
  if (listener < 0) {
    fail(listener == -EINVAL || listener == -ENOSYS ? 69 : 71,
         "cannot hold the app's network until it is up (seccomp user notification, Linux 5.5 or later): %s; "
         "run with --network none or --network host",
         reason(-listener));
  }
  return listener;
}

/* Step 8: one byte on `channel`, with `listener` riding on it (SCM_RIGHTS) when there is one.
 * (Written here rather than taken from CSystem's appbox_send_descriptor: linking CSystem
 * brings libgcc's CPU-model constructor, a CPUID probe run at every start of this helper.) */
static void announce_start(int channel, int listener) {
  char byte = 's';
  struct iovec iov = {&byte, 1};
  union {
    struct cmsghdr header;
    char space[CMSG_SPACE(sizeof(int))];
  } control;
  memset(&control, 0, sizeof control);
  struct msghdr message;
  memset(&message, 0, sizeof message);
  message.msg_iov = &iov;
  message.msg_iovlen = 1;
  if (listener >= 0) {
    message.msg_control = control.space;
    message.msg_controllen = sizeof control.space;
    struct cmsghdr *header = CMSG_FIRSTHDR(&message);
    header->cmsg_level = SOL_SOCKET;
    header->cmsg_type = SCM_RIGHTS;
    header->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(header), &listener, sizeof(int));
  }
  ssize_t written;
  do {
    written = sendmsg(channel, &message, MSG_NOSIGNAL);
  } while (written < 0 && errno == EINTR);
  if (written != 1) {
    if (errno == EPIPE || errno == ECONNRESET) _exit(69);
    fail(71, "cannot tell appbox that the app starts: %s", reason(errno));
  }
  if (listener >= 0) close(listener);
  close(channel);
}

int confine_main(int argc, char **argv) {
  struct rule *rules = calloc((size_t)argc, sizeof *rules);
  if (rules == NULL) fail(71, "out of memory");
  int kept[MAX_KEPT];
  int count = 0, kept_count = 0, allow_no_landlock = 0, assume_no_landlock = 0;
  long max_processes = -1;
  int start_fd = -1, network_gate = 0;
  const char *directory = NULL;
  int index = 1;
  for (; index < argc; index++) {
    const char *option = argv[index];
    if (strcmp(option, "--") == 0) {
      index++;
      break;
    }
    if (strcmp(option, "--allow-no-landlock") == 0) {
      allow_no_landlock = 1;
      continue;
    }
    if (strcmp(option, "--assume-no-landlock") == 0) {
      assume_no_landlock = 1;
      continue;
    }
    if (strcmp(option, "--network-gate") == 0) {
      network_gate = 1;
      continue;
    }
    if (index + 1 >= argc) fail(64, "%s needs a value", option);
    const char *value = argv[++index];
    if (strcmp(option, "--rw") == 0) {
      rules[count++] = (struct rule){value, RIGHTS_RW};
    } else if (strcmp(option, "--ro") == 0) {
      rules[count++] = (struct rule){value, RIGHTS_RO};
    } else if (strcmp(option, "--rx") == 0) {
      rules[count++] = (struct rule){value, RIGHTS_RX};
    } else if (strcmp(option, "--dev") == 0) {
      rules[count++] = (struct rule){value, RIGHTS_DEV};
    } else if (strcmp(option, "--keep-fd") == 0) {
      if (kept_count == MAX_KEPT) fail(64, "more than %d --keep-fd options", MAX_KEPT);
      int fd = (int)parse_number(value, 1 << 20, "--keep-fd");
      if (fd < 3) fail(64, "--keep-fd takes a descriptor of 3 or more, not %d", fd);
      if (fcntl(fd, F_GETFD) < 0) fail(64, "--keep-fd %d is not an open descriptor", fd);
      kept[kept_count++] = fd;
    } else if (strcmp(option, "--max-processes") == 0) {
      max_processes = parse_number(value, 1 << 22, "--max-processes");
    } else if (strcmp(option, "--chdir") == 0) {
      directory = value;
    } else if (strcmp(option, "--start-fd") == 0) {
      if (kept_count == MAX_KEPT) fail(64, "more than %d descriptors to keep", MAX_KEPT);
      start_fd = (int)parse_number(value, 1 << 20, "--start-fd");
      if (start_fd < 3 || fcntl(start_fd, F_GETFD) < 0) {
        fail(64, "--start-fd takes an open descriptor of 3 or more, not %d", start_fd);
      }
      kept[kept_count++] = start_fd;
    } else {
      fail(64, "unknown option '%s'", option);
    }
  }
  if (index >= argc) fail(64, "no command given after '--'");
  if (network_gate && start_fd < 0) fail(64, "--network-gate needs --start-fd, which carries its listener");
  char **command = &argv[index];

  close_inherited(kept, kept_count);
  if (max_processes >= 0) {
    struct rlimit limit = {(rlim_t)max_processes, (rlim_t)max_processes};
    if (setrlimit(RLIMIT_NPROC, &limit) != 0) fail(71, "cannot limit the process count: %s", reason(errno));
  }
  drop_capabilities();
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) fail(71, "cannot set no_new_privs: %s", reason(errno));

  int abi = assume_no_landlock ? 0 : landlock_abi();
  if (abi > 0) {
    restrict_self(abi, rules, count);
  } else if (allow_no_landlock) {
    dprintf(2,
            "appbox-sandbox: warning: this kernel has no Landlock; running '%s' WITHOUT LANDLOCK "
            "(in the namespaces, with its own uid and the seccomp filter only)\n",
            command[0]);
  } else {
    fail(69, "this kernel has no Landlock, so '%s' cannot be fully confined; refusing to run it", command[0]);
  }
  free(rules);

  int error = install_syscall_filter();
  if (error != 0) fail(71, "cannot install the seccomp filter: %s", reason(error));

  int listener = network_gate ? install_gate() : -1;

  if (directory != NULL && chdir(directory) != 0) {
    fail(71, "cannot change to '%s': %s", directory, reason(errno));
  }
  unsetenv("PWD");
  if (start_fd >= 0) announce_start(start_fd, listener);
  execvp(command[0], command);
  error = errno;
  fail(error == ENOENT ? 127 : 126, "cannot run '%s': %s", command[0], reason(error));
}
