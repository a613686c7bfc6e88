/* The system calls and constants Swift cannot reach through Glibc:
 * variadic syscall() wrappers, <sys/xattr.h>, and dirent field access.
 * No <linux/...> header is included here so the module imports cleanly. */
#ifndef APPBOX_CSYSTEM_H
#define APPBOX_CSYSTEM_H

#include <dirent.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/file.h>
#include <sys/xattr.h>

/* openat2(2) resolve flags (values from <linux/openat2.h>). */
#define APPBOX_RESOLVE_NO_XDEV 0x01
#define APPBOX_RESOLVE_NO_MAGICLINKS 0x02
#define APPBOX_RESOLVE_NO_SYMLINKS 0x04
#define APPBOX_RESOLVE_BENEATH 0x08

/* open(2)'s O_PATH (a _GNU_SOURCE flag the Glibc module does not import): a descriptor
 * that names an inode without opening it for reading; needs only search permission. */
#define APPBOX_O_PATH 010000000

/* renameat2(2) flags (values from <linux/fs.h>). */
#define APPBOX_RENAME_NOREPLACE 1u
#define APPBOX_RENAME_EXCHANGE 2u

/* openat2(2); returns a descriptor or -1 with errno set (ENOSYS when the kernel lacks it). */
int appbox_openat2(int dirfd, const char *path, int flags, unsigned int mode, uint64_t resolve);

/* renameat2(2); returns 0 or -1 with errno set. */
int appbox_renameat2(int olddirfd, const char *oldpath, int newdirfd, const char *newpath, unsigned int flags);

/* syncfs(2): flushes the whole file system holding fd (a _GNU_SOURCE call). */
int appbox_syncfs(int fd);

/* sync_file_range(fd, offset, count, SYNC_FILE_RANGE_WRITE): starts writeback of a range
 * without waiting for it (a _GNU_SOURCE call). */
int appbox_start_writeback(int fd, int64_t offset, int64_t count);

/* getdents64(2): fills buffer with struct linux_dirent64 records (d_ino at 0, d_off at 8,
 * d_reclen at 16, d_type at 18, NUL-terminated d_name at 19); 0 at the end, -1 on error. */
long appbox_getdents64(int fd, void *buffer, size_t size);

/* CRC-32C (Castagnoli) of `length` bytes, continuing from `crc` (start with 0): the
 * archives' whole-file checksum. Uses the CPU's crc32 instruction (SSE 4.2) when it has
 * it, a table otherwise; both give the same values. */
uint32_t appbox_crc32c(uint32_t crc, const void *data, size_t length);
uint32_t appbox_crc32c_software(uint32_t crc, const void *data, size_t length);

/* pipe2(2) with O_CLOEXEC: both ends close-on-exec from the start, so a child spawned by
 * another thread meanwhile cannot inherit them. */
int appbox_pipe_cloexec(int fds[2]);

/* Marks a directory as the top of unrelated hierarchies (FS_TOPDIR_FL, `chattr +T`): ext4
 * then spreads its subdirectories over block groups like top-level directories, so a new
 * home is not built among the inodes an old one just freed. Returns 0, or -1 with errno
 * (EOPNOTSUPP/ENOTTY on file systems without the flag). */
int appbox_mark_top_directory(int fd);

/* Changes the mode of the inode `fd` refers to, which may be an O_PATH descriptor (opened
 * without read permission): fchmodat2(fd, "", mode, AT_EMPTY_PATH), or on kernels before
 * 6.6 chmod of /proc/self/fd/N. Never resolves a name, so a symlink swapped in meanwhile
 * cannot redirect it. Returns 0, or -1 with errno set. */
int appbox_chmod_descriptor(int fd, mode_t mode);

/* The Landlock ABI version the running kernel supports, or 0 when it has none. */
int appbox_landlock_abi(void);

/* flock(2): in Swift the name resolves to `struct flock` first. */
static inline int appbox_flock(int fd, int operation) { return flock(fd, operation); }

/* Field access for struct dirent (d_name is a fixed array that imports as a tuple). */
static inline const char *appbox_dirent_name(const struct dirent *entry) { return entry->d_name; }
static inline unsigned char appbox_dirent_type(const struct dirent *entry) { return entry->d_type; }
static inline uint64_t appbox_dirent_ino(const struct dirent *entry) { return (uint64_t)entry->d_ino; }

#endif
