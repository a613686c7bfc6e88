/* appbox-sandbox: confines itself with Landlock, then execs a command.
 *
 *   appbox-sandbox [--rw DIR]... [--ro DIR]... [--rx DIR]... [--dev FILE]...
 *                  [--lock-fd N] [--chdir DIR] [--allow-unconfined]
 *                  [--assume-no-landlock] -- CMD [ARG...]
 *
 * appbox runs every app process through this helper because Landlock cannot be
 * applied safely from a multithreaded Swift process: not between fork and exec
 * (nothing there may allocate or lock) and not in appbox itself (a restriction
 * cannot be undone). The helper is plain C and links no Swift runtime, so it works
 * wherever appbox is installed.
 *
 * What it does, in order:
 *  1. closes every inherited descriptor above 2 except the --lock-fd one, whose
 *     close-on-exec flag it clears: the command then holds appbox's "app is
 *     running" lock for as long as it (or any child it forks) lives;
 *  2. asks the kernel which Landlock ABI it has and handles every filesystem right
 *     that ABI knows (rights the kernel knows but that are granted by no rule are
 *     denied), plus signal and abstract-socket scoping from ABI 6 on;
 *  3. opens each rule path with O_PATH (paths that do not exist, such as /lib32,
 *     are skipped) and adds a path-beneath rule:
 *       --rw   read, write, create, rename and remove files, directories, FIFOs,
 *              sockets and symlinks; no execution, no device nodes
 *       --ro   read files and list directories
 *       --rx   read, list and execute
 *       --dev  read, write, truncate and ioctl one device file
 *     plus the terminal on stdin, stdout or stderr, if any, like --dev;
 *  4. drops every capability, including from the bounding set: run as root, an
 *     app would otherwise keep powers Landlock does not govern (loading kernel
 *     modules, raw I/O), and exec would hand them back;
 *  5. sets no_new_privs, restricts itself, changes to --chdir and execs CMD
 *     (searched in PATH when it has no slash).
 *
 * Exit statuses before the command runs: 64 bad usage, 69 no Landlock on this
 * kernel (without --allow-unconfined), 71 the restriction could not be applied,
 * 126 the command cannot be executed, 127 it does not exist. Each failure prints
 * one line on stderr. --assume-no-landlock behaves as on a kernel without Landlock
 * (for tests: it can only refuse, or run unconfined with --allow-unconfined).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

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
#define FS_REFER (1ULL << 13)     /* ABI 2 */
#define FS_TRUNCATE (1ULL << 14)  /* ABI 3 */
#define FS_IOCTL_DEV (1ULL << 15) /* ABI 5 */

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
/* Device nodes are left out on purpose: a process running as root could otherwise
 * make a node for the disk and read around the sandbox. Execution is left out too:
 * what an app writes it may not run, as on iOS. */
#define RIGHTS_RW                                                                                  \
  (RIGHTS_RO | FS_WRITE_FILE | FS_REMOVE_DIR | FS_REMOVE_FILE | FS_MAKE_DIR | FS_MAKE_REG |        \
   FS_MAKE_SOCK | FS_MAKE_FIFO | FS_MAKE_SYM | FS_REFER | FS_TRUNCATE)
#define RIGHTS_DEV (FS_READ_FILE | FS_WRITE_FILE | FS_TRUNCATE | FS_IOCTL_DEV)

#define CAPABILITY_VERSION_3 0x20080522

struct rule {
  const char *path;
  uint64_t rights;
};

static void fail(int status, const char *format, ...) __attribute__((noreturn, format(printf, 2, 3)));

static void fail(int status, const char *format, ...) {
  char line[1024];
  va_list args;
  va_start(args, format);
  vsnprintf(line, sizeof line, format, args);
  va_end(args);
  dprintf(2, "appbox-sandbox: %s\n", line);
  _exit(status);
}

/* The lower-case strerror text, matching how appbox words errors. */
static const char *reason(int error) {
  static char text[256];
  snprintf(text, sizeof text, "%s", strerror(error));
  if (text[0] >= 'A' && text[0] <= 'Z') text[0] = (char)(text[0] - 'A' + 'a');
  return text;
}

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
  return rights;
}

/* Closes descriptors `low` through `high` (-1: all above `low`). Uses close_range(2),
 * or a loop up to the descriptor limit on kernels older than 5.9. */
static void close_range_of(int low, int high) {
  unsigned int last = high < 0 ? ~0U : (unsigned int)high;
  if (syscall(SYS_close_range, (unsigned int)low, last, 0) == 0) return;
  struct rlimit limit;
  long max = 65536;
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) max = (long)limit.rlim_cur;
  if (high >= 0 && high < max) max = high + 1;
  for (long fd = low; fd < max; fd++) close((int)fd);
}

/* Closes every descriptor from 3 up, except `keep`. */
static void close_inherited(int keep) {
  if (keep < 3) {
    close_range_of(3, -1);
    return;
  }
  if (keep > 3) close_range_of(3, keep - 1);
  close_range_of(keep + 1, -1);
}

static void add_rule(int ruleset, const struct rule *rule, uint64_t handled) {
  int fd = open(rule->path, O_PATH | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT || errno == ENOTDIR) return; /* not on this system: nothing to allow */
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
  /* The terminal the command was given stays usable through its own name too. */
  for (int fd = 0; fd <= 2; fd++) {
    char *name = isatty(fd) ? ttyname(fd) : NULL;
    if (name != NULL) {
      struct rule tty = {.path = name, .rights = RIGHTS_DEV};
      add_rule(ruleset, &tty, handled);
    }
  }
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) fail(71, "cannot set no_new_privs: %s", reason(errno));
  if (syscall(SYS_landlock_restrict_self, ruleset, 0) != 0) {
    fail(71, "cannot restrict itself with Landlock: %s", reason(errno));
  }
  close(ruleset);
}

/* Empties the bounding, ambient, effective, permitted and inheritable capability
 * sets, so that neither this process nor anything it execs holds a capability. */
static void drop_capabilities(void) {
  for (int cap = 0; cap < 64; cap++) {
    if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) == 0) continue;
    if (errno == EINVAL) break; /* past the last capability this kernel knows */
    if (errno == EPERM && geteuid() != 0) break; /* nothing to drop without CAP_SETPCAP */
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

static int parse_fd(const char *text) {
  char *end = NULL;
  errno = 0;
  long value = strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || value < 3 || value > 1 << 20) {
    fail(64, "--lock-fd takes a descriptor number of 3 or more, not '%s'", text);
  }
  return (int)value;
}

int main(int argc, char **argv) {
  struct rule *rules = calloc((size_t)argc, sizeof *rules);
  if (rules == NULL) fail(71, "out of memory");
  int count = 0, lock_fd = -1, allow_unconfined = 0, assume_no_landlock = 0;
  const char *directory = NULL;
  int index = 1;
  for (; index < argc; index++) {
    const char *option = argv[index];
    if (strcmp(option, "--") == 0) {
      index++;
      break;
    }
    if (strcmp(option, "--allow-unconfined") == 0) {
      allow_unconfined = 1;
      continue;
    }
    if (strcmp(option, "--assume-no-landlock") == 0) {
      assume_no_landlock = 1;
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
    } else if (strcmp(option, "--lock-fd") == 0) {
      lock_fd = parse_fd(value);
    } else if (strcmp(option, "--chdir") == 0) {
      directory = value;
    } else {
      fail(64, "unknown option '%s'", option);
    }
  }
  if (index >= argc) fail(64, "no command given after '--'");
  char **command = &argv[index];

  if (lock_fd >= 0) {
    int flags = fcntl(lock_fd, F_GETFD);
    if (flags < 0) fail(64, "--lock-fd %d is not an open descriptor", lock_fd);
    if (fcntl(lock_fd, F_SETFD, flags & ~FD_CLOEXEC) != 0) fail(71, "cannot keep the lock descriptor");
  }
  close_inherited(lock_fd);

  drop_capabilities();
  int abi = assume_no_landlock ? 0 : landlock_abi();
  if (abi > 0) {
    restrict_self(abi, rules, count);
  } else if (allow_unconfined) {
    dprintf(2, "appbox-sandbox: warning: this kernel has no Landlock; running '%s' UNCONFINED\n", command[0]);
  } else {
    fail(69, "this kernel has no Landlock, so '%s' cannot be confined; refusing to run it", command[0]);
  }
  free(rules);

  if (directory != NULL && chdir(directory) != 0) {
    fail(71, "cannot change to '%s': %s", directory, reason(errno));
  }
  execvp(command[0], command);
  int error = errno;
  fail(error == ENOENT ? 127 : 126, "cannot run '%s': %s", command[0], reason(error));
}
