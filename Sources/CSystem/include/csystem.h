/* The system calls and constants Swift cannot reach through Glibc:
 * variadic syscall() wrappers, <sys/xattr.h>, and dirent field access.
 * No <linux/...> header is included here so the module imports cleanly. */
#ifndef APPBOX_CSYSTEM_H
#define APPBOX_CSYSTEM_H

#include <dirent.h>
#include <spawn.h>
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

/* The width in columns of the terminal fd is (TIOCGWINSZ), or -1 with errno set (ENOTTY
 * when fd is no terminal); 0 when the terminal does not know its size. */
int appbox_terminal_columns(int fd);

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

/* posix_spawn_file_actions_addclosefrom_np(3) (glibc 2.34), which <spawn.h> declares for
 * _GNU_SOURCE only: the child closes every descriptor from `low` up. */
int appbox_spawn_close_from(posix_spawn_file_actions_t *actions, int low);

/* Marks a directory as the top of unrelated hierarchies (FS_TOPDIR_FL, `chattr +T`): ext4
 * then spreads its subdirectories over block groups like top-level directories, so a new
 * home is not built among the inodes an old one just freed. Returns 0, or -1 with errno
 * (EOPNOTSUPP/ENOTTY on file systems without the flag). */
int appbox_mark_top_directory(int fd);

/* pidfd_open(2): a descriptor that becomes readable when process `pid` exits; -1 with
 * errno set. */
int appbox_pidfd_open(int pid);
/* fscrypt, the kernel's per-file encryption (values from <linux/fscrypt.h>): v2 policies
 * (AES-256-XTS contents, AES-256-CTS names, 16-byte name padding) naming a 64-byte master
 * key by its 16-byte identifier, the keys kept in the file system's own keyring. */
#define APPBOX_FSCRYPT_KEY_SIZE 64
#define APPBOX_FSCRYPT_IDENTIFIER_SIZE 16
#define APPBOX_FSCRYPT_KEY_ABSENT 1
#define APPBOX_FSCRYPT_KEY_PRESENT 2
#define APPBOX_FSCRYPT_KEY_INCOMPLETELY_REMOVED 3
#define APPBOX_FSCRYPT_REMOVAL_FILES_BUSY 1u
#define APPBOX_FSCRYPT_REMOVAL_OTHER_USERS 2u

/* FS_IOC_ADD_ENCRYPTION_KEY on any descriptor of the file system: adds `key` (64 bytes) and
 * writes its identifier. Returns 0, or -1 with errno. */
int appbox_fscrypt_add_key(int fd, const uint8_t *key, uint8_t *identifier);

/* FS_IOC_REMOVE_ENCRYPTION_KEY (FS_IOC_REMOVE_ENCRYPTION_KEY_ALL_USERS when `all_users`):
 * returns 0 and the removal status flags (files busy, other users), or -1 with errno. */
int appbox_fscrypt_remove_key(int fd, const uint8_t *identifier, int all_users, uint32_t *status_flags);

/* FS_IOC_GET_ENCRYPTION_KEY_STATUS: returns 0 and one of APPBOX_FSCRYPT_KEY_*, or -1. */
int appbox_fscrypt_key_status(int fd, const uint8_t *identifier, uint32_t *status);

/* FS_IOC_SET_ENCRYPTION_POLICY with the v2 policy above on an empty directory. */
int appbox_fscrypt_set_policy(int fd, const uint8_t *identifier);

/* FS_IOC_GET_ENCRYPTION_POLICY_EX: returns 1 and the key identifier of a v2 policy, 0 when
 * the file is not encrypted (ENODATA), or -1 with errno (EOPNOTSUPP: the file system lacks
 * the encrypt feature; ENOTTY: it has no fscrypt at all; EINVAL: a v1 policy). */
int appbox_fscrypt_get_policy(int fd, uint8_t *identifier);

/* Whether entry `name` of directory `dirfd` is encrypted (statx STATX_ATTR_ENCRYPTED), without
 * opening it or following a symlink: 1, 0, or -1 with errno. */
int appbox_is_encrypted(int dirfd, const char *name);

/* lseek(2) with SEEK_DATA / SEEK_HOLE: the next data or hole offset at or after `offset`,
 * or -1 with errno (ENXIO: no data there). */
int64_t appbox_seek_data(int fd, int64_t offset);
int64_t appbox_seek_hole(int fd, int64_t offset);
/* Changes the mode of the inode `fd` refers to, which may be an O_PATH descriptor (opened
 * without read permission): fchmodat2(fd, "", mode, AT_EMPTY_PATH), or on kernels before
 * 6.6 chmod of /proc/self/fd/N. Never resolves a name, so a symlink swapped in meanwhile
 * cannot redirect it. Returns 0, or -1 with errno set. */
int appbox_chmod_descriptor(int fd, mode_t mode);

/* Whether `path` is the root of a cgroup v2 mount (statfs f_type CGROUP2_SUPER_MAGIC):
 * 1, 0, or -1 with errno. */
int appbox_is_cgroup2(const char *path);

/* The Landlock ABI version the running kernel supports, or 0 when it has none. */
int appbox_landlock_abi(void);

/* flock(2): in Swift the name resolves to `struct flock` first. */
static inline int appbox_flock(int fd, int operation) { return flock(fd, operation); }

/* Field access for struct dirent (d_name is a fixed array that imports as a tuple). */
static inline const char *appbox_dirent_name(const struct dirent *entry) { return entry->d_name; }
static inline unsigned char appbox_dirent_type(const struct dirent *entry) { return entry->d_type; }
static inline uint64_t appbox_dirent_ino(const struct dirent *entry) { return (uint64_t)entry->d_ino; }

/* memmem(3) and memrchr(3), GNU extensions the Glibc module does not import. */
const void *appbox_memmem(const void *haystack, size_t haystack_length, const void *needle, size_t needle_length);
const void *appbox_memrchr(const void *bytes, int byte, size_t length);

#endif
