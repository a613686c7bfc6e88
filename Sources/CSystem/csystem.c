#define _GNU_SOURCE
#include "csystem.h"

#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <linux/fscrypt.h>
#include <linux/landlock.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/vfs.h>
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

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif

int appbox_pidfd_open(int pid) { return (int)syscall(SYS_pidfd_open, pid, 0); }

int appbox_pipe_cloexec(int fds[2]) { return pipe2(fds, O_CLOEXEC); }

int appbox_spawn_close_from(posix_spawn_file_actions_t *actions, int low) {
  return posix_spawn_file_actions_addclosefrom_np(actions, low);
}

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

/* CRC-32C: reflected polynomial 0x82F63B78. The hardware path runs three independent
 * streams over thirds of each 24 KiB block to hide the instruction's latency, then joins
 * them by shifting with the table-free "multiply by x^n" method below. */
static uint32_t crc32c_table[8][256];
#if defined(__x86_64__)
#define CRC32C_LANE 8192
static uint32_t crc32c_lane_shift;
#endif
/* Built once, whichever thread computes the first checksum: two threads must never fill
 * the tables at the same time (one could read a half-built table). */
static pthread_once_t crc32c_once = PTHREAD_ONCE_INIT;

static uint32_t crc32c_zeros_operator(size_t n);
static void crc32c_init(void);
static void crc32c_prepare(void) { pthread_once(&crc32c_once, crc32c_init); }

static void crc32c_init(void) {
  for (uint32_t n = 0; n < 256; n++) {
    uint32_t c = n;
    for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    crc32c_table[0][n] = c;
  }
  for (uint32_t n = 0; n < 256; n++)
    for (int t = 1; t < 8; t++)
      crc32c_table[t][n] = (crc32c_table[t - 1][n] >> 8) ^ crc32c_table[0][crc32c_table[t - 1][n] & 0xFF];
#if defined(__x86_64__)
  crc32c_lane_shift = crc32c_zeros_operator(CRC32C_LANE);
#endif
}

static uint32_t crc32c_software(uint32_t crc, const unsigned char *p, size_t n) {
  while (n >= 8) {
    uint64_t v;
    memcpy(&v, p, 8);
    v ^= crc;
    crc = crc32c_table[7][v & 0xFF] ^ crc32c_table[6][(v >> 8) & 0xFF] ^ crc32c_table[5][(v >> 16) & 0xFF] ^
          crc32c_table[4][(v >> 24) & 0xFF] ^ crc32c_table[3][(v >> 32) & 0xFF] ^
          crc32c_table[2][(v >> 40) & 0xFF] ^ crc32c_table[1][(v >> 48) & 0xFF] ^ crc32c_table[0][v >> 56];
    p += 8;
    n -= 8;
  }
  while (n--) crc = (crc >> 8) ^ crc32c_table[0][(crc ^ *p++) & 0xFF];
  return crc;
}

/* Multiplies a and b modulo the CRC polynomial (bit-reflected). */
static uint32_t crc32c_multiply(uint32_t a, uint32_t b) {
  uint32_t product = 0;
  for (int i = 0; i < 32; i++) {
    if (a & 0x80000000u) product ^= b;
    a <<= 1;
    b = b & 1 ? (b >> 1) ^ 0x82F63B78u : b >> 1;
  }
  return product;
}

/* x^(8n) modulo the polynomial: what appending n zero bytes multiplies a CRC by. */
static uint32_t crc32c_zeros_operator(size_t n) {
  uint32_t result = 0x80000000u; /* x^0 */
  uint32_t square = 0x00800000u; /* x^8: one zero byte */
  while (n) {
    if (n & 1) result = crc32c_multiply(result, square);
    square = crc32c_multiply(square, square);
    n >>= 1;
  }
  return result;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t crc32c_hardware(uint32_t crc, const unsigned char *p, size_t n) {
  uint64_t c0 = crc;
  while (n >= 3 * CRC32C_LANE) {
    uint64_t c1 = 0, c2 = 0;
    const unsigned char *a = p, *b = p + CRC32C_LANE, *d = p + 2 * CRC32C_LANE;
    for (size_t i = 0; i < CRC32C_LANE; i += 8) {
      uint64_t va, vb, vd;
      memcpy(&va, a + i, 8);
      memcpy(&vb, b + i, 8);
      memcpy(&vd, d + i, 8);
      c0 = __builtin_ia32_crc32di(c0, va);
      c1 = __builtin_ia32_crc32di(c1, vb);
      c2 = __builtin_ia32_crc32di(c2, vd);
    }
    /* crc(A B D) = shift(shift(c0) ^ c1) ^ c2, where shift appends a lane of zeros. */
    c0 = crc32c_multiply((uint32_t)c0, crc32c_lane_shift) ^ (uint32_t)c1;
    c0 = crc32c_multiply((uint32_t)c0, crc32c_lane_shift) ^ (uint32_t)c2;
    p += 3 * CRC32C_LANE;
    n -= 3 * CRC32C_LANE;
  }
  while (n >= 8) {
    uint64_t v;
    memcpy(&v, p, 8);
    c0 = __builtin_ia32_crc32di(c0, v);
    p += 8;
    n -= 8;
  }
  uint32_t c = (uint32_t)c0;
  while (n--) c = __builtin_ia32_crc32qi(c, *p++);
  return c;
}
#endif

uint32_t appbox_crc32c(uint32_t crc, const void *data, size_t length) {
  crc32c_prepare();
  crc = ~crc;
#if defined(__x86_64__)
  if (__builtin_cpu_supports("sse4.2")) return ~crc32c_hardware(crc, data, length);
#endif
  return ~crc32c_software(crc, data, length);
}

/* For tests: the table-driven result, whatever the CPU has. */
uint32_t appbox_crc32c_software(uint32_t crc, const void *data, size_t length) {
  crc32c_prepare();
  return ~crc32c_software(~crc, data, length);
}

#ifndef SYS_fchmodat2
#define SYS_fchmodat2 452
#endif

int appbox_chmod_descriptor(int fd, mode_t mode) {
  if (syscall(SYS_fchmodat2, fd, "", mode, AT_EMPTY_PATH) == 0) return 0;
  if (errno != ENOSYS && errno != EINVAL) return -1;
  char path[32];
  snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  return chmod(path, mode);
}

int appbox_mark_top_directory(int fd) {
  int flags = 0;
  if (ioctl(fd, FS_IOC_GETFLAGS, &flags) != 0) return -1;
  if (flags & FS_TOPDIR_FL) return 0;
  flags |= FS_TOPDIR_FL;
  return ioctl(fd, FS_IOC_SETFLAGS, &flags);
}

int appbox_terminal_columns(int fd) {
  struct winsize size;
  if (ioctl(fd, TIOCGWINSZ, &size) != 0) return -1;
  return size.ws_col;
}

static void appbox_key_specifier(struct fscrypt_key_specifier *spec, const uint8_t *identifier) {
  memset(spec, 0, sizeof *spec);
  spec->type = FSCRYPT_KEY_SPEC_TYPE_IDENTIFIER;
  memcpy(spec->u.identifier, identifier, FSCRYPT_KEY_IDENTIFIER_SIZE);
}

int appbox_fscrypt_add_key(int fd, const uint8_t *key, uint8_t *identifier) {
  struct {
    struct fscrypt_add_key_arg arg;
    uint8_t raw[APPBOX_FSCRYPT_KEY_SIZE];
  } request;
  memset(&request, 0, sizeof request);
  request.arg.key_spec.type = FSCRYPT_KEY_SPEC_TYPE_IDENTIFIER;
  request.arg.raw_size = APPBOX_FSCRYPT_KEY_SIZE;
  memcpy(request.raw, key, APPBOX_FSCRYPT_KEY_SIZE);
  int result;
  do {
    result = ioctl(fd, FS_IOC_ADD_ENCRYPTION_KEY, &request);
  } while (result < 0 && errno == EINTR);
  if (result == 0) memcpy(identifier, request.arg.key_spec.u.identifier, FSCRYPT_KEY_IDENTIFIER_SIZE);
  /* The raw key must not linger on this stack frame. */
  explicit_bzero(&request, sizeof request);
  return result;
}

int appbox_fscrypt_remove_key(int fd, const uint8_t *identifier, int all_users, uint32_t *status_flags) {
  struct fscrypt_remove_key_arg arg;
  memset(&arg, 0, sizeof arg);
  appbox_key_specifier(&arg.key_spec, identifier);
  int result;
  do {
    result = ioctl(fd, all_users ? FS_IOC_REMOVE_ENCRYPTION_KEY_ALL_USERS : FS_IOC_REMOVE_ENCRYPTION_KEY, &arg);
  } while (result < 0 && errno == EINTR);
  if (result == 0) *status_flags = arg.removal_status_flags;
  return result;
}

int appbox_fscrypt_key_status(int fd, const uint8_t *identifier, uint32_t *status) {
  struct fscrypt_get_key_status_arg arg;
  memset(&arg, 0, sizeof arg);
  appbox_key_specifier(&arg.key_spec, identifier);
  if (ioctl(fd, FS_IOC_GET_ENCRYPTION_KEY_STATUS, &arg) != 0) return -1;
  *status = arg.status;
  return 0;
}

int appbox_fscrypt_set_policy(int fd, const uint8_t *identifier) {
  struct fscrypt_policy_v2 policy;
  memset(&policy, 0, sizeof policy);
  policy.version = FSCRYPT_POLICY_V2;
  policy.contents_encryption_mode = FSCRYPT_MODE_AES_256_XTS;
  policy.filenames_encryption_mode = FSCRYPT_MODE_AES_256_CTS;
  policy.flags = FSCRYPT_POLICY_FLAGS_PAD_16;
  memcpy(policy.master_key_identifier, identifier, FSCRYPT_KEY_IDENTIFIER_SIZE);
  return ioctl(fd, FS_IOC_SET_ENCRYPTION_POLICY, &policy);
}

int appbox_fscrypt_get_policy(int fd, uint8_t *identifier) {
  struct fscrypt_get_policy_ex_arg arg;
  memset(&arg, 0, sizeof arg);
  arg.policy_size = sizeof arg.policy;
  if (ioctl(fd, FS_IOC_GET_ENCRYPTION_POLICY_EX, &arg) != 0) return errno == ENODATA ? 0 : -1;
  if (arg.policy.version != FSCRYPT_POLICY_V2) {
    errno = EINVAL;
    return -1;
  }
  memcpy(identifier, arg.policy.v2.master_key_identifier, FSCRYPT_KEY_IDENTIFIER_SIZE);
  return 1;
}

int appbox_is_encrypted(int dirfd, const char *name) {
  struct statx sx;
  if (statx(dirfd, name, AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT, 0, &sx) != 0) return -1;
  if (!(sx.stx_attributes_mask & STATX_ATTR_ENCRYPTED)) return 0;
  return (sx.stx_attributes & STATX_ATTR_ENCRYPTED) ? 1 : 0;
}

int64_t appbox_seek_data(int fd, int64_t offset) { return (int64_t)lseek(fd, (off_t)offset, SEEK_DATA); }

int64_t appbox_seek_hole(int fd, int64_t offset) { return (int64_t)lseek(fd, (off_t)offset, SEEK_HOLE); }

const void *appbox_memmem(const void *haystack, size_t haystack_length, const void *needle, size_t needle_length) {
  return memmem(haystack, haystack_length, needle, needle_length);
}

const void *appbox_memrchr(const void *bytes, int byte, size_t length) { return memrchr(bytes, byte, length); }

int appbox_is_cgroup2(const char *path) {
  struct statfs info;
  if (statfs(path, &info) != 0) return -1;
  return info.f_type == 0x63677270 /* CGROUP2_SUPER_MAGIC */ ? 1 : 0;
}
