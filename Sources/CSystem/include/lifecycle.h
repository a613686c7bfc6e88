/* The system calls behind device clones and background apps that Swift cannot reach
 * through Glibc: reflinks and in-kernel copies, special files, and signals by pidfd.
 * No <linux/...> header is included here so the module imports cleanly. */
#ifndef APPBOX_LIFECYCLE_H
#define APPBOX_LIFECYCLE_H

#include <stdint.h>
#include <sys/types.h>

/* ioctl(dest, FICLONE, src): makes `dest` share all of `src`'s extents (a reflink). Returns
 * 0, or -1 with errno (EOPNOTSUPP, EINVAL, EXDEV: the file system cannot share them). */
int appbox_ficlone(int dest_fd, int src_fd);

/* copy_file_range(2) from `in` at *in_offset to `out` at *out_offset, both advanced: the
 * bytes copied (0 at the end of `in`), or -1 with errno. */
int64_t appbox_copy_file_range(int in_fd, int64_t *in_offset, int out_fd, int64_t *out_offset, uint64_t length);

/* mknodat(2) for a FIFO, a socket or a device node. Returns 0, or -1 with errno. */
int appbox_mknodat(int dirfd, const char *name, mode_t mode, uint64_t device);

/* pidfd_send_signal(2): signal `sig` to the process `pidfd` names (no pid reuse). */
int appbox_pidfd_send_signal(int pidfd, int sig);

/* setsid(2), and making the calling process the reaper of its orphaned descendants
 * (PR_SET_CHILD_SUBREAPER) when `subreaper` is nonzero. Returns 0, or -1 with errno. */
int appbox_detach_session(int subreaper);

#endif
