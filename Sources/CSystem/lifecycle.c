#define _GNU_SOURCE
#include "lifecycle.h"

#include <errno.h>
#include <linux/fs.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#ifndef FICLONE
#define FICLONE _IOW(0x94, 9, int)
#endif
#ifndef SYS_pidfd_send_signal
#define SYS_pidfd_send_signal 424
#endif

int appbox_ficlone(int dest_fd, int src_fd) { return ioctl(dest_fd, FICLONE, src_fd); }

int64_t appbox_copy_file_range(int in_fd, int64_t *in_offset, int out_fd, int64_t *out_offset, uint64_t length) {
  loff_t in = (loff_t)*in_offset, out = (loff_t)*out_offset;
  ssize_t copied;
  do {
    copied = copy_file_range(in_fd, &in, out_fd, &out, (size_t)length, 0);
  } while (copied < 0 && errno == EINTR);
  if (copied >= 0) {
    *in_offset = (int64_t)in;
    *out_offset = (int64_t)out;
  }
  return (int64_t)copied;
}

int appbox_mknodat(int dirfd, const char *name, mode_t mode, uint64_t device) {
  return mknodat(dirfd, name, mode, (dev_t)device);
}

int appbox_pidfd_send_signal(int pidfd, int sig) {
  return (int)syscall(SYS_pidfd_send_signal, pidfd, sig, NULL, 0);
}

int appbox_detach_session(int subreaper) {
  if (setsid() < 0 && errno != EPERM) return -1;
  if (subreaper && prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0) return -1;
  return 0;
}
