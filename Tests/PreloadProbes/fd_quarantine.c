/*
 * The descriptor quarantine (appbox-preload-probes): finds double closes. A test preloads it
 * (LD_PRELOAD) into the programs it runs; in a process whose executable's name is
 * APPBOX_FD_QUARANTINE_EXE ("appbox" by default) it keeps every descriptor number that
 * close(2) frees occupied for a while: close(N) replaces N with a placeholder (dup3 of a memfd
 * of its own, close-on-exec), which only leaves N, really closed, after 1,024 further closes
 * (a quarter of the descriptor limit when that is lower). So a second close of N in that
 * window meets the placeholder instead of whatever file an open took N for next, and is
 * written to APPBOX_FD_QUARANTINE_LOG with the stacks of both closes; a close of a number
 * that is not open is written there too. A double close that lands on a reused number closes
 * somebody else's file (a catalog, a pipe another thread reads): the bug this finds, which
 * otherwise shows only when two threads race.
 *
 * Only close(2) called through the dynamic linker is seen (not glibc's own closes, as in
 * fclose or closedir, which never double close). Not part of appbox: built for the tests.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <execinfo.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#define QUARANTINE 1024
#define FRAMES 24

struct closed {
  int fd;
  pid_t thread;
  int depth;
  void *frames[FRAMES];
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int (*real_close)(int);
static int state = -1; /* -1 unknown, 0 off, 1 on */
static int log_fd = -1;
static int placeholder = -1;
static dev_t placeholder_device;
static ino_t placeholder_inode;
static struct closed ring[QUARANTINE];
static int first, count;
static int capacity = QUARANTINE;

/* Decides once whether this process is watched, and opens the log and the placeholder. */
static void set_up(void) {
  if (state >= 0) return;
  state = 0;
  real_close = (int (*)(int))dlsym(RTLD_NEXT, "close");
  const char *log_path = getenv("APPBOX_FD_QUARANTINE_LOG");
  const char *wanted = getenv("APPBOX_FD_QUARANTINE_EXE");
  if (log_path == NULL || real_close == NULL) return;
  if (wanted == NULL) wanted = "appbox";
  char exe[4096];
  ssize_t length = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (length <= 0) return;
  exe[length] = 0;
  const char *name = strrchr(exe, '/');
  if (strcmp(name ? name + 1 : exe, wanted) != 0) return;
  log_fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  int memory = memfd_create("appbox-fd-quarantine", MFD_CLOEXEC);
  if (log_fd < 0 || memory < 0) return;
  /* Far above the numbers in use, so that it never takes a number a program expects; under a
     low descriptor limit, the quarantine holds at most a quarter of it. */
  struct rlimit limit;
  int top = 4000;
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY &&
      limit.rlim_cur <= 4000) {
    top = (int)limit.rlim_cur - 1;
    capacity = (int)limit.rlim_cur / 4 < QUARANTINE ? (int)limit.rlim_cur / 4 : QUARANTINE;
  }
  placeholder = fcntl(memory, F_DUPFD_CLOEXEC, top);
  real_close(memory);
  struct stat status;
  if (placeholder < 0 || fstat(placeholder, &status) != 0) return;
  placeholder_device = status.st_dev;
  placeholder_inode = status.st_ino;
  state = 1;
}

static int is_placeholder(int fd) {
  struct stat status;
  return fstat(fd, &status) == 0 && status.st_dev == placeholder_device &&
         status.st_ino == placeholder_inode;
}

/* Writes `what` and this thread's stack to the log, then the stacks of the earlier closes of
   `fd` the quarantine remembers. */
static void report(int fd, const char *what) {
  char line[200];
  const char *format = "%s of descriptor %d in pid %d, thread %d, here:\n";
  int length = snprintf(line, sizeof line, format, what, fd, getpid(), gettid());
  write(log_fd, line, (size_t)length);
  void *frames[FRAMES];
  backtrace_symbols_fd(frames, backtrace(frames, FRAMES), log_fd);
  for (int i = 0; i < count; i++) {
    struct closed *entry = &ring[(first + i) % QUARANTINE];
    if (entry->fd != fd) continue;
    length = snprintf(line, sizeof line, "first closed by thread %d, here:\n", entry->thread);
    write(log_fd, line, (size_t)length);
    backtrace_symbols_fd(entry->frames, entry->depth, log_fd);
  }
}

int close(int fd) {
  pthread_mutex_lock(&lock);
  set_up();
  if (state != 1 || fd < 3 || fd == placeholder || fd == log_fd) {
    pthread_mutex_unlock(&lock);
    return real_close ? real_close(fd) : (errno = ENOSYS, -1);
  }
  /* Closed already within the window, or not open at all (a double close past the window, or
     a bad number). */
  int closed_twice = is_placeholder(fd);
  if (closed_twice || fcntl(fd, F_GETFD) < 0) {
    report(fd, closed_twice ? "double close" : "close (not open)");
    pthread_mutex_unlock(&lock);
    errno = EBADF;
    return -1;
  }
  if (count >= capacity) {
    int oldest = ring[first].fd;
    if (is_placeholder(oldest)) real_close(oldest);
    first = (first + 1) % QUARANTINE;
    count--;
  }
  struct closed *entry = &ring[(first + count) % QUARANTINE];
  entry->fd = fd;
  entry->thread = gettid();
  entry->depth = backtrace(entry->frames, FRAMES);
  count++;
  /* Closes the file as close(2) would (the last reference: EOF for a pipe's reader), keeps the
     number. */
  int result = dup3(placeholder, fd, O_CLOEXEC);
  pthread_mutex_unlock(&lock);
  return result < 0 ? -1 : 0;
}
