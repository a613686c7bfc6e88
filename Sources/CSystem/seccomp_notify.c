#define _GNU_SOURCE
#include "seccomp_notify.h"

#include <errno.h>
#include <linux/seccomp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef SECCOMP_IOCTL_NOTIF_SET_FLAGS
#define SECCOMP_IOCTL_NOTIF_SET_FLAGS SECCOMP_IOW(4, __u64)
#endif
#ifndef SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP
#define SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP (1UL << 0)
#endif

/* The kernel's struct seccomp_notif may be larger than this header's: the receiving buffer
 * has the size the kernel reports (SECCOMP_GET_NOTIF_SIZES), as seccomp_unotify(2) asks. */
static size_t notification_size(void) {
  static size_t size;
  if (size == 0) {
    struct seccomp_notif_sizes sizes;
    size_t found = sizeof(struct seccomp_notif);
    if (syscall(SYS_seccomp, SECCOMP_GET_NOTIF_SIZES, 0, &sizes) == 0 && sizes.seccomp_notif > found) {
      found = sizes.seccomp_notif;
    }
    size = found;
  }
  return size;
}

int appbox_seccomp_notify_receive(int listener, uint64_t *id, int32_t *syscall_number, uint64_t *argument) {
  union {
    struct seccomp_notif notification;
    unsigned char bytes[512];
  } buffer;
  size_t size = notification_size();
  struct seccomp_notif *notification = &buffer.notification;
  void *allocated = NULL;
  if (size > sizeof buffer) {
    allocated = malloc(size);
    if (allocated == NULL) return -1;
    notification = allocated;
  }
  memset(notification, 0, size); /* the kernel refuses a buffer that is not zeroed */
  int result;
  do {
    result = ioctl(listener, SECCOMP_IOCTL_NOTIF_RECV, notification);
  } while (result < 0 && errno == EINTR);
  if (result == 0) {
    *id = notification->id;
    *syscall_number = notification->data.nr;
    *argument = notification->data.args[0];
  }
  int error = errno;
  free(allocated);
  errno = error;
  return result < 0 ? -1 : 0;
}

int appbox_seccomp_notify_respond(int listener, uint64_t id, int error) {
  struct seccomp_notif_resp response;
  memset(&response, 0, sizeof response);
  response.id = id;
  if (error == 0) {
    response.flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE;
  } else {
    response.error = -error;
  }
  int result;
  do {
    result = ioctl(listener, SECCOMP_IOCTL_NOTIF_SEND, &response);
  } while (result < 0 && errno == EINTR);
  return result < 0 ? -1 : 0;
}

int appbox_seccomp_notify_is_waiting(int listener, uint64_t id) {
  uint64_t cookie = id;
  if (ioctl(listener, SECCOMP_IOCTL_NOTIF_ID_VALID, &cookie) == 0) return 1;
  return errno == ENOENT ? 0 : -1;
}

int appbox_seccomp_notify_wake_synchronously(int listener) {
  uint64_t flags = SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP;
  return ioctl(listener, SECCOMP_IOCTL_NOTIF_SET_FLAGS, flags) < 0 ? -1 : 0;
}
