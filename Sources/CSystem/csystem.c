#define _GNU_SOURCE
#include "csystem.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/landlock.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef SYS_openat2
#define SYS_openat2 437
#endif
#ifndef SYS_landlock_create_ruleset
#define SYS_landlock_create_ruleset 444
#endif

int appbox_openat2(int dirfd, const char *path, int flags, unsigned int mode, uint64_t resolve) {
  struct open_how how;
  memset(&how, 0, sizeof how);
  how.flags = (uint64_t)(unsigned int)flags;
  /* openat2 rejects a mode unless O_CREAT or O_TMPFILE is given. O_TMPFILE includes
   * O_DIRECTORY's bit, so it must be tested whole: O_DIRECTORY alone takes no mode. */
  if ((flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE) how.mode = mode;
  how.resolve = resolve;
  long fd;
  do {
    fd = syscall(SYS_openat2, dirfd, path, &how, sizeof how);
  } while (fd < 0 && errno == EINTR);
  return (int)fd;
}

int appbox_renameat2(int olddirfd, const char *oldpath, int newdirfd, const char *newpath, unsigned int flags) {
  return (int)syscall(SYS_renameat2, olddirfd, oldpath, newdirfd, newpath, flags);
}

int appbox_landlock_abi(void) {
  long abi = syscall(SYS_landlock_create_ruleset, NULL, 0, LANDLOCK_CREATE_RULESET_VERSION);
  return abi < 0 ? 0 : (int)abi;
}

int appbox_syncfs(int fd) { return syncfs(fd); }

int appbox_start_writeback(int fd, int64_t offset, int64_t count) {
  return sync_file_range(fd, (off_t)offset, (off_t)count, SYNC_FILE_RANGE_WRITE);
}

long appbox_getdents64(int fd, void *buffer, size_t size) {
  long n;
  do {
    n = syscall(SYS_getdents64, fd, buffer, size);
  } while (n < 0 && errno == EINTR);
  return n;
}
