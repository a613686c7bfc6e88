/* appbox-hostile: a hostile app for the sandbox tests. Each attack tries to do something
 * an app must not, and prints one line per attempt:
 *
 *   <label> ok            it worked (for an escape: the sandbox failed)
 *   <label> <ERRNO>       refused, with the errno's name (EPERM, ENOENT, EROFS...)
 *
 * followed by attack-specific values ("forks 255 EAGAIN", "uid 1879...").
 * Usage: appbox-hostile ATTACK [ARG...]; see main() for the attacks.
 *
 * One mode is not an attack but the tests' terminal, run on the host:
 *   appbox-hostile pty-run raw|cooked[:COLUMNS] INPUT -- COMMAND [ARG...]
 * runs COMMAND in a new session whose controlling terminal (and stdio) is a fresh pty
 * (COLUMNS wide when given),
 * as a user's shell would, types INPUT into it, copies what COMMAND writes there to
 * stdout, and ends with "pty-pending N" (bytes left in the terminal's input queue: what
 * the user's shell would read next, such as injected keystrokes) and "pty-status N".
 * Plain C, no Swift runtime: it runs inside the jail, where only /usr exists.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/fscrypt.h>
#include <linux/filter.h>
#include <linux/sched.h>
#include <linux/seccomp.h>
#include <netinet/in.h>
#include <poll.h>
#include <arpa/inet.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

static const char *errno_name(int error) {
  switch (error) {
  case EPERM: return "EPERM";
  case ENOENT: return "ENOENT";
  case ESRCH: return "ESRCH";
  case EIO: return "EIO";
  case ENXIO: return "ENXIO";
  case EBADF: return "EBADF";
  case EAGAIN: return "EAGAIN";
  case EACCES: return "EACCES";
  case EEXIST: return "EEXIST";
  case ENOTDIR: return "ENOTDIR";
  case EINVAL: return "EINVAL";
  case ENOTTY: return "ENOTTY";
  case EROFS: return "EROFS";
  case ENOSYS: return "ENOSYS";
  case ENOTSUP: return "ENOTSUP";
  case ECONNREFUSED: return "ECONNREFUSED";
  case ENETUNREACH: return "ENETUNREACH";
  case EXDEV: return "EXDEV";
  case ELOOP: return "ELOOP";
  case ENOKEY: return "ENOKEY";
  case EAFNOSUPPORT: return "EAFNOSUPPORT";
  case ENODATA: return "ENODATA";
  case EDQUOT: return "EDQUOT";
  case ENOSPC: return "ENOSPC";
  case ETIMEDOUT: return "ETIMEDOUT";
  case EHOSTUNREACH: return "EHOSTUNREACH";
  case ENETDOWN: return "ENETDOWN";
  case EBUSY: return "EBUSY";
  default: {
    static char text[32];
    snprintf(text, sizeof text, "E%d", error);
    return text;
  }
  }
}

/* Prints "<label> ok" or "<label> <ERRNO>" for a call's result (negative: failed). */
static void report(const char *label, long result) {
  if (result < 0) {
    printf("%s %s\n", label, errno_name(errno));
  } else {
    printf("%s ok\n", label);
  }
  fflush(stdout);
}

static void labelled(char *buffer, size_t size, const char *what, const char *path) {
  snprintf(buffer, size, "%s:%s", what, path);
}

/* chmod, chown, utime and setxattr on each path, none of them followed if a symlink. */
static void metadata(int count, char **paths) {
  char label[4200];
  for (int i = 0; i < count; i++) {
    const char *path = paths[i];
    labelled(label, sizeof label, "chmod", path);
    report(label, fchmodat(AT_FDCWD, path, 06777, 0));
    labelled(label, sizeof label, "chown", path);
    report(label, lchown(path, getuid(), getgid()));
    labelled(label, sizeof label, "utime", path);
    report(label, utimensat(AT_FDCWD, path, NULL, AT_SYMLINK_NOFOLLOW));
    labelled(label, sizeof label, "setxattr", path);
    report(label, lsetxattr(path, "user.appbox.exclude-from-backup", "1", 1, 0));
  }
}

static void read_files(int count, char **paths) {
  char label[4200], buffer[256];
  for (int i = 0; i < count; i++) {
    labelled(label, sizeof label, "read", paths[i]);
    int fd = open(paths[i], O_RDONLY | O_NONBLOCK);
    if (fd < 0) {
      report(label, -1);
      continue;
    }
    long n = read(fd, buffer, sizeof buffer);
    report(label, n);
    close(fd);
  }
}

static void stat_files(int count, char **paths) {
  char label[4200];
  struct stat st;
  for (int i = 0; i < count; i++) {
    labelled(label, sizeof label, "stat", paths[i]);
    report(label, lstat(paths[i], &st));
  }
}

static void write_files(int count, char **paths) {
  char label[4200];
  for (int i = 0; i < count; i++) {
    labelled(label, sizeof label, "write", paths[i]);
    int fd = open(paths[i], O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW, 0644);
    if (fd < 0) {
      report(label, -1);
      continue;
    }
    report(label, write(fd, "hostile\n", 8));
    close(fd);
  }
}

static void connect_unix(const char *label, const char *path, int abstract) {
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  struct sockaddr_un address = {.sun_family = AF_UNIX};
  socklen_t length;
  if (abstract) {
    address.sun_path[0] = '\0';
    strncpy(address.sun_path + 1, path, sizeof address.sun_path - 2);
    length = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + strlen(path));
  } else {
    strncpy(address.sun_path, path, sizeof address.sun_path - 1);
    length = sizeof address;
  }
  report(label, connect(fd, (struct sockaddr *)&address, length));
  close(fd);
}

/* Connects to `host` (IPv4) at `port`, giving up after 5 s; prints "<label> ok" only when the
 * peer answered with a byte (so that a connection some relay accepted on its behalf does
 * not count as reaching it). */
static void connect_tcp_to(const char *label, const char *host, const char *port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in address = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(port))};
  inet_pton(AF_INET, host, &address.sin_addr);
  struct timeval timeout = {.tv_sec = 5};
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof timeout);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  if (connect(fd, (struct sockaddr *)&address, sizeof address) != 0) {
    report(label, -1);
    close(fd);
    return;
  }
  char byte;
  long n = read(fd, &byte, 1);
  if (n == 0) errno = ECONNREFUSED; /* accepted, then closed without a word: not the peer */
  report(label, n == 1 ? 0 : -1);
  close(fd);
}

static void connect_tcp(const char *port) { connect_tcp_to("connect-tcp", "127.0.0.1", port); }

/* Whether /proc/net/unix (the sockets of this network namespace) lists `path`, and how many
 * sockets it lists. */
static void proc_net_unix(const char *path) {
  FILE *file = fopen("/proc/net/unix", "r");
  if (file == NULL) {
    report("proc-net-unix", -1);
    return;
  }
  char line[4608];
  int count = 0, found = 0;
  while (fgets(line, sizeof line, file) != NULL) {
    if (count++ == 0) continue; /* the header */
    line[strcspn(line, "\n")] = '\0';
    size_t length = strlen(line), wanted = strlen(path);
    if (length >= wanted && strcmp(line + length - wanted, path) == 0) found = 1;
  }
  fclose(file);
  printf("proc-net-unix %s\nproc-net-unix-sockets %d\n", found ? "listed" : "absent", count - 1);
}

/* Creates empty files DIR/f0, DIR/f1, ... until the file system refuses one; prints
 * "fill N ERRNO" (N files made). With `bytes`, then writes 1 MiB blocks to DIR/big until
 * that fails too: "fill-bytes N ERRNO" (N MiB written). */
static void fill(const char *directory, int bytes) {
  char path[4200];
  int count = 0;
  for (;; count++) {
    snprintf(path, sizeof path, "%s/f%d", directory, count);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
    if (fd < 0) break;
    close(fd);
  }
  printf("fill %d %s\n", count, errno_name(errno));
  if (!bytes) return;
  snprintf(path, sizeof path, "%s/big", directory);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  static char block[1 << 20];
  memset(block, 'x', sizeof block);
  long written = 0;
  while (fd >= 0 && write(fd, block, sizeof block) == (long)sizeof block) written++;
  printf("fill-bytes %ld %s\n", written, errno_name(errno));
  if (fd >= 0) close(fd);
}

/* AF_VSOCK sockets: they ignore network namespaces. */
static void vsock(void) {
  int fd = socket(40 /* AF_VSOCK */, SOCK_STREAM, 0);
  report("vsock-socket", fd);
  if (fd >= 0) close(fd);
  fd = (int)syscall(SYS_socket, (1L << 32) | 40, SOCK_STREAM, 0);
  report("vsock-socket-highbits", fd);
  if (fd >= 0) close(fd);
  int pair[2];
  report("vsock-socketpair", socketpair(40, SOCK_STREAM, 0, pair));
}

/* The fscrypt attacks, on the file system holding `protected` (a file the device encrypted
 * with a class key; the device is unlocked): read its policy (allowed: reading changes
 * nothing), remove its key (for this user, for every user, and with high bits in the
 * request), add keys until the user's key quota is full, give the empty directory `own` a
 * policy of the app's own, and ask for the file system's password salt (which writes one). */
static void fscrypt(const char *protected, const char *own) {
  int fd = open(protected, O_RDONLY | O_NONBLOCK);
  if (fd < 0) {
    report("open-protected", -1);
    return;
  }
  struct fscrypt_get_policy_ex_arg policy = {.policy_size = sizeof policy.policy};
  report("get-policy", ioctl(fd, FS_IOC_GET_ENCRYPTION_POLICY_EX, &policy));
  struct fscrypt_remove_key_arg removal;
  memset(&removal, 0, sizeof removal);
  removal.key_spec.type = FSCRYPT_KEY_SPEC_TYPE_IDENTIFIER;
  memcpy(removal.key_spec.u.identifier, policy.policy.v2.master_key_identifier, FSCRYPT_KEY_IDENTIFIER_SIZE);
  report("remove-key", ioctl(fd, FS_IOC_REMOVE_ENCRYPTION_KEY, &removal));
  report("remove-key-highbits", syscall(SYS_ioctl, fd, (1UL << 32) | FS_IOC_REMOVE_ENCRYPTION_KEY, &removal));
  report("remove-key-all-users", ioctl(fd, FS_IOC_REMOVE_ENCRYPTION_KEY_ALL_USERS, &removal));

  union {
    struct fscrypt_add_key_arg arg;
    __u8 bytes[sizeof(struct fscrypt_add_key_arg) + 64];
  } key;
  __u8 own_identifier[FSCRYPT_KEY_IDENTIFIER_SIZE] = {1};
  int added = 0;
  for (int i = 0; i < 250; i++) {
    memset(&key, 0, sizeof key);
    key.arg.key_spec.type = FSCRYPT_KEY_SPEC_TYPE_IDENTIFIER;
    key.arg.raw_size = 64;
    for (size_t j = 0; j < 64; j++) key.arg.raw[j] = (__u8)(rand() & 0xFF);
    long result = ioctl(fd, FS_IOC_ADD_ENCRYPTION_KEY, &key);
    if (i == 0) report("add-key", result);
    if (result != 0) break;
    if (added++ == 0) memcpy(own_identifier, key.arg.key_spec.u.identifier, sizeof own_identifier);
  }
  printf("add-key-count %d\n", added);

  mkdir(own, 0700);
  int directory = open(own, O_RDONLY | O_DIRECTORY);
  struct fscrypt_policy_v2 mine = {
      .version = FSCRYPT_POLICY_V2,
      .contents_encryption_mode = FSCRYPT_MODE_AES_256_XTS,
      .filenames_encryption_mode = FSCRYPT_MODE_AES_256_CTS,
      .flags = FSCRYPT_POLICY_FLAGS_PAD_16,
  };
  memcpy(mine.master_key_identifier, own_identifier, sizeof own_identifier);
  report("set-policy", directory < 0 ? -1 : ioctl(directory, FS_IOC_SET_ENCRYPTION_POLICY, &mine));
  if (directory >= 0) close(directory);
  __u8 salt[16];
  report("get-pwsalt", ioctl(fd, FS_IOC_GET_ENCRYPTION_PWSALT, salt));
  close(fd);
}

/* Listens on a pathname socket for `seconds`, accepting and closing connections. */
static void listen_unix(const char *path, int seconds) {
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  struct sockaddr_un address = {.sun_family = AF_UNIX};
  strncpy(address.sun_path, path, sizeof address.sun_path - 1);
  unlink(path);
  if (bind(fd, (struct sockaddr *)&address, sizeof address) != 0 || listen(fd, 8) != 0) {
    report("listen", -1);
    return;
  }
  report("listen", 0);
  alarm((unsigned)seconds);
  for (;;) {
    int client = accept(fd, NULL, NULL);
    if (client >= 0) close(client);
  }
}

/* TIOCSTI on descriptors 0-2 and on /dev/tty; with the command's high bits set too. */
static void terminal(void) {
  char c = '#';
  char label[64];
  for (int fd = 0; fd <= 2; fd++) {
    snprintf(label, sizeof label, "tiocsti-fd%d", fd);
    if (!isatty(fd)) {
      printf("%s not-a-tty\n", label);
      continue;
    }
    report(label, ioctl(fd, TIOCSTI, &c));
    snprintf(label, sizeof label, "tiocsti-highbits-fd%d", fd);
    report(label, syscall(SYS_ioctl, fd, (1UL << 32) | TIOCSTI, &c));
    snprintf(label, sizeof label, "tioclinux-fd%d", fd);
    char subcode = 2; /* TIOCL_SETSEL */
    report(label, ioctl(fd, TIOCLINUX, &subcode));
  }
  int tty = open("/dev/tty", O_RDWR);
  report("open-dev-tty", tty);
  if (tty >= 0) report("tiocsti-dev-tty", ioctl(tty, TIOCSTI, &c));
  printf("has-controlling-terminal %s\n", tcgetpgrp(0) >= 0 || errno != ENOTTY ? "maybe" : "no");
}

/* TIOCSTI on a pty the app makes its own controlling terminal: the kernel would allow it;
 * only the seccomp filter refuses. */
static void own_pty(void) {
  pid_t child = fork();
  if (child == 0) {
    setsid();
    int master = posix_openpt(O_RDWR | O_NOCTTY);
    if (master < 0 || grantpt(master) != 0 || unlockpt(master) != 0) {
      report("own-pty", -1);
      _exit(0);
    }
    int slave = open(ptsname(master), O_RDWR);
    report("own-pty", slave);
    char c = '#';
    if (slave >= 0) report("tiocsti-own-pty", ioctl(slave, TIOCSTI, &c));
    _exit(0);
  }
  waitpid(child, NULL, 0);
}

/* A daemon that outlives its parent: touches `path` every 50 ms for 20 s. */
static void daemonise(const char *path) {
  pid_t child = fork();
  if (child == 0) {
    setsid();
    if (fork() == 0) {
      for (int i = 0; i < 400; i++) {
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
          dprintf(fd, "%d\n", i);
          close(fd);
        }
        usleep(50000);
      }
      _exit(0);
    }
    _exit(0);
  }
  waitpid(child, NULL, 0);
  printf("daemonised ok\n");
}

static void descriptors(void) {
  DIR *directory = opendir("/proc/self/fd");
  if (directory == NULL) {
    report("list-fds", -1);
    return;
  }
  int own = dirfd(directory);
  struct dirent *entry;
  while ((entry = readdir(directory)) != NULL) {
    if (entry->d_name[0] == '.') continue;
    int fd = atoi(entry->d_name);
    if (fd <= 2 || fd == own) continue;
    char label[64];
    snprintf(label, sizeof label, "write-fd%d", fd);
    report(label, write(fd, "x", 1));
  }
  closedir(directory);
  printf("fds-listed ok\n");
}

/* "fd N TARGET" for every descriptor this process holds (what /proc/self/fd links to). */
static void fd_links(void) {
  DIR *directory = opendir("/proc/self/fd");
  if (directory == NULL) {
    report("fd-links", -1);
    return;
  }
  int own = dirfd(directory);
  struct dirent *entry;
  while ((entry = readdir(directory)) != NULL) {
    if (entry->d_name[0] == '.' || atoi(entry->d_name) == own) continue;
    char path[300], target[4096];
    snprintf(path, sizeof path, "/proc/self/fd/%s", entry->d_name);
    ssize_t length = readlink(path, target, sizeof target - 1);
    target[length < 0 ? 0 : length] = '\0';
    printf("fd %s %s\n", entry->d_name, target);
  }
  closedir(directory);
  printf("fd-links ok\n");
}

/* What holds this process's sockets: how many seccomp filters it runs under, whether it may
 * make a seccomp listener of its own (not while a filter above it has one: EBUSY), and
 * whether socket(AF_INET) works. */
static void network_gate(void) {
  FILE *status = fopen("/proc/self/status", "r");
  char line[256];
  while (status != NULL && fgets(line, sizeof line, status) != NULL) {
    if (strncmp(line, "Seccomp_filters:", 16) == 0) printf("seccomp-filters %d\n", atoi(line + 16));
  }
  if (status != NULL) fclose(status);
  struct sock_filter allow[] = {BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)};
  struct sock_fprog program = {.len = 1, .filter = allow};
  long listener = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, &program);
  report("own-listener", listener);
  if (listener >= 0) close((int)listener);
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  report("socket-inet", fd);
  if (fd >= 0) close(fd);
}

/* socket(AF_INET): "socket-report ok" or its errno's name, also written to `path` (whole or
 * not at all: through a temporary file renamed into place, since the app may be killed). */
static void socket_report(const char *path) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  const char *result = fd >= 0 ? "ok" : errno_name(errno);
  char temporary[4200];
  snprintf(temporary, sizeof temporary, "%s.tmp", path);
  int out = open(temporary, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (out >= 0) {
    dprintf(out, "%s\n", result);
    close(out);
    rename(temporary, path);
  }
  printf("socket-report %s\n", result);
}

static long elapsed_ns(const struct timespec *start) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (now.tv_sec - start->tv_sec) * 1000000000L + (now.tv_nsec - start->tv_nsec);
}

/* Creates and closes `count` AF_INET sockets, then as many AF_UNIX ones; prints the mean time
 * of one socket() + close() of each family, in nanoseconds (for the benchmark). */
static void sockets(int count) {
  int families[] = {AF_INET, AF_UNIX};
  const char *labels[] = {"sockets-inet-ns", "sockets-unix-ns"};
  for (int f = 0; f < 2; f++) {
    struct timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (int i = 0; i < count; i++) {
      int fd = socket(families[f], SOCK_STREAM, 0);
      if (fd < 0) {
        report(labels[f], -1);
        return;
      }
      close(fd);
    }
    printf("%s %ld\n", labels[f], elapsed_ns(&start) / (count > 0 ? count : 1));
  }
}

static void fork_bomb(void) {
  int forks = 0;
  for (;;) {
    pid_t child = fork();
    if (child < 0) {
      printf("forks %d %s\n", forks, errno_name(errno));
      fflush(stdout);
      return; /* the children die with the jail */
    }
    if (child == 0) {
      pause();
      _exit(0);
    }
    if (++forks >= 100000) {
      printf("forks %d unbounded\n", forks);
      return;
    }
  }
}

/* Copies this program into `directory`, then tries to run the copy directly and
 * through the dynamic loader. */
static void exec_written(const char *directory) {
  char copy[4096];
  snprintf(copy, sizeof copy, "%s/written", directory);
  int in = open("/proc/self/exe", O_RDONLY), out = open(copy, O_WRONLY | O_CREAT | O_TRUNC, 0755);
  if (in < 0 || out < 0) {
    report("copy", -1);
    return;
  }
  char buffer[65536];
  long n;
  while ((n = read(in, buffer, sizeof buffer)) > 0) {
    if (write(out, buffer, (size_t)n) != n) break;
  }
  close(in);
  close(out);
  report("chmod-written", chmod(copy, 0755));
  const char *loaders[] = {"/lib64/ld-linux-x86-64.so.2", "/lib/ld-linux-aarch64.so.1", NULL};
  const char *loader = NULL;
  for (int i = 0; loaders[i] != NULL; i++) {
    if (access(loaders[i], X_OK) == 0) loader = loaders[i];
  }
  pid_t child = fork();
  if (child == 0) {
    char *argv[] = {copy, "id", NULL};
    execv(copy, argv);
    printf("exec-written %s\n", errno_name(errno));
    fflush(stdout);
    _exit(127);
  }
  int status = 0;
  waitpid(child, &status, 0);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) printf("exec-written ok\n");
  if (loader == NULL) {
    printf("ldso-written no-loader\n");
    return;
  }
  child = fork();
  if (child == 0) {
    int null = open("/dev/null", O_WRONLY);
    dup2(null, 2);
    char *argv[] = {(char *)loader, copy, "id", NULL};
    execv(loader, argv);
    _exit(126);
  }
  waitpid(child, &status, 0);
  printf("ldso-written %s\n", WIFEXITED(status) && WEXITSTATUS(status) == 0 ? "ok" : "refused");
}

static void processes(void) {
  pid_t child = fork();
  if (child == 0) {
    pause();
    _exit(0);
  }
  report("ptrace-attach-child", ptrace(PTRACE_ATTACH, child, NULL, NULL));
  report("ptrace-seize-child", ptrace(PTRACE_SEIZE, child, NULL, NULL));
  report("ptrace-attach-init", ptrace(PTRACE_ATTACH, 1, NULL, NULL));
  report("kill-init", kill(1, SIGTERM));
  kill(child, SIGKILL);
  waitpid(child, NULL, 0);
}

static void syscalls(void) {
  report("unshare-user", unshare(CLONE_NEWUSER));
  report("unshare-mount", unshare(CLONE_NEWNS));
  report("clone-newuser", syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0));
  report("clone3", syscall(SYS_clone3, NULL, 0));
  report("mount", mount("none", "/tmp", "tmpfs", 0, NULL));
  report("keyctl", syscall(SYS_keyctl, 0 /* KEYCTL_GET_KEYRING_ID */, -3, 0));
  report("add_key", syscall(SYS_add_key, "user", "x", "y", 1, -3));
  report("bpf", syscall(SYS_bpf, 0, NULL, 0));
  report("userfaultfd", syscall(SYS_userfaultfd, 0));
  report("perf_event_open", syscall(SYS_perf_event_open, NULL, 0, -1, -1, 0));
  report("init_module", syscall(SYS_init_module, NULL, 0, ""));
  report("io_uring_setup", syscall(SYS_io_uring_setup, 1, NULL));
  report("chroot", chroot("/tmp"));
}

/* No Swift runtime in this C program (see appbox-sandbox's main.c): the Swift driver's
 * start-up object refers to these two. */
void swift_addNewDSOImage(const void *image);
void swift_addNewDSOImage(const void *image) { (void)image; }
int _swift_backtrace_isThunkFunction(const char *name);
int _swift_backtrace_isThunkFunction(const char *name) {
  (void)name;
  return 0;
}

/* The tests' terminal (see the header). */
static int pty_run(int raw, int columns, const char *input, char **command) {
  int master = posix_openpt(O_RDWR | O_NOCTTY);
  if (master < 0 || grantpt(master) != 0 || unlockpt(master) != 0) {
    perror("pty");
    return 71;
  }
  if (columns > 0) {
    struct winsize size = {.ws_row = 24, .ws_col = (unsigned short)columns};
    if (ioctl(master, TIOCSWINSZ, &size) != 0) perror("TIOCSWINSZ");
  }
  char slave_path[256];
  snprintf(slave_path, sizeof slave_path, "%s", ptsname(master));
  if (raw) {
    int slave = open(slave_path, O_RDWR | O_NOCTTY);
    struct termios settings;
    tcgetattr(slave, &settings);
    cfmakeraw(&settings);
    tcsetattr(slave, TCSANOW, &settings);
    close(slave);
  }
  pid_t child = fork();
  if (child == 0) {
    setsid();
    int slave = open(slave_path, O_RDWR); /* a session leader's first terminal: its own */
    dup2(slave, 0);
    dup2(slave, 1);
    dup2(slave, 2);
    if (slave > 2) close(slave);
    close(master);
    execvp(command[0], command);
    _exit(127);
  }
  if (write(master, input, strlen(input)) < 0) perror("type");
  char buffer[4096];
  int status = 0, exited = 0;
  /* Reads the terminal until the command has ended and nothing is left: the master reads
   * EIO whenever no process holds the slave, before the command opened it too. */
  for (;;) {
    struct pollfd entry = {.fd = master, .events = POLLIN};
    int ready = poll(&entry, 1, 20);
    long n = ready > 0 ? read(master, buffer, sizeof buffer) : 0;
    if (n > 0) {
      fwrite(buffer, 1, (size_t)n, stdout);
      continue;
    }
    if (!exited && waitpid(child, &status, WNOHANG) == child) {
      exited = 1;
      continue; /* one more pass for what is still buffered */
    }
    if (exited) break;
    if (n < 0) usleep(5000);
  }
  fflush(stdout);
  int slave = open(slave_path, O_RDWR | O_NOCTTY | O_NONBLOCK);
  long pending = slave < 0 ? -1 : read(slave, buffer, sizeof buffer);
  printf("\npty-pending %ld\npty-status %d\n", pending < 0 ? 0 : pending,
         WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
  return 0;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc >= 6 && strcmp(argv[1], "pty-run") == 0 && strcmp(argv[4], "--") == 0) {
    const char *colon = strchr(argv[2], ':');
    return pty_run(strncmp(argv[2], "raw", 3) == 0, colon ? atoi(colon + 1) : 0, argv[3], argv + 5);
  }
  if (argc < 2) {
    fprintf(stderr, "usage: appbox-hostile ATTACK [ARG...]\n");
    return 64;
  }
  const char *attack = argv[1];
  if (strcmp(attack, "id") == 0) {
    gid_t groups[64];
    int count = getgroups(64, groups);
    printf("uid %u\ngid %u\neuid %u\ngroups %d\n", getuid(), getgid(), geteuid(), count);
  } else if (strcmp(attack, "terminal") == 0) {
    terminal();
  } else if (strcmp(attack, "own-pty") == 0) {
    own_pty();
  } else if (strcmp(attack, "metadata") == 0) {
    metadata(argc - 2, argv + 2);
  } else if (strcmp(attack, "read") == 0) {
    read_files(argc - 2, argv + 2);
  } else if (strcmp(attack, "stat") == 0) {
    stat_files(argc - 2, argv + 2);
  } else if (strcmp(attack, "write") == 0) {
    write_files(argc - 2, argv + 2);
  } else if (strcmp(attack, "connect") == 0 && argc >= 3) {
    for (int i = 2; i < argc; i++) {
      char label[4200];
      labelled(label, sizeof label, "connect", argv[i]);
      connect_unix(label, argv[i], 0);
    }
  } else if (strcmp(attack, "connect-abstract") == 0 && argc >= 3) {
    connect_unix("connect-abstract", argv[2], 1);
  } else if (strcmp(attack, "connect-tcp") == 0 && argc >= 3) {
    connect_tcp(argv[2]);
  } else if (strcmp(attack, "connect-tcp-to") == 0 && argc >= 4) {
    connect_tcp_to("connect-tcp-to", argv[2], argv[3]);
  } else if (strcmp(attack, "proc-net-unix") == 0 && argc >= 3) {
    proc_net_unix(argv[2]);
  } else if (strcmp(attack, "fill") == 0 && argc >= 3) {
    fill(argv[2], argc >= 4 && strcmp(argv[3], "bytes") == 0);
  } else if (strcmp(attack, "vsock") == 0) {
    vsock();
  } else if (strcmp(attack, "fscrypt") == 0 && argc >= 4) {
    fscrypt(argv[2], argv[3]);
  } else if (strcmp(attack, "listen") == 0 && argc >= 4) {
    listen_unix(argv[2], atoi(argv[3]));
  } else if (strcmp(attack, "daemon") == 0 && argc >= 3) {
    daemonise(argv[2]);
  } else if (strcmp(attack, "fds") == 0) {
    descriptors();
  } else if (strcmp(attack, "fd-links") == 0) {
    fd_links();
  } else if (strcmp(attack, "network-gate") == 0) {
    network_gate();
  } else if (strcmp(attack, "socket-report") == 0 && argc >= 3) {
    socket_report(argv[2]);
  } else if (strcmp(attack, "sockets") == 0 && argc >= 3) {
    sockets(atoi(argv[2]));
  } else if (strcmp(attack, "forkbomb") == 0) {
    fork_bomb();
  } else if (strcmp(attack, "exec-written") == 0 && argc >= 3) {
    exec_written(argv[2]);
  } else if (strcmp(attack, "processes") == 0) {
    processes();
  } else if (strcmp(attack, "syscalls") == 0) {
    syscalls();
  } else {
    fprintf(stderr, "appbox-hostile: unknown attack '%s'\n", attack);
    return 64;
  }
  return 0;
}
