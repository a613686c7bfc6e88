#define _GNU_SOURCE
#include "descriptor_passing.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

int appbox_send_descriptor(int socket, int fd) {
  char byte = 'C';
  struct iovec iov = {&byte, 1};
  union {
    struct cmsghdr header;
    char space[CMSG_SPACE(sizeof(int))];
  } control;
  memset(&control, 0, sizeof control);
  struct msghdr message;
  memset(&message, 0, sizeof message);
  message.msg_iov = &iov;
  message.msg_iovlen = 1;
  message.msg_control = control.space;
  message.msg_controllen = sizeof control.space;
  struct cmsghdr *header = CMSG_FIRSTHDR(&message);
  header->cmsg_level = SOL_SOCKET;
  header->cmsg_type = SCM_RIGHTS;
  header->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(header), &fd, sizeof(int));
  ssize_t sent;
  do {
    sent = sendmsg(socket, &message, MSG_NOSIGNAL);
  } while (sent < 0 && errno == EINTR);
  if (sent < 0) return -1;
  if (sent != 1) {
    errno = EIO;
    return -1;
  }
  return 0;
}

ssize_t appbox_receive_descriptor(int socket, void *buffer, size_t size, int *received, int *truncated) {
  *received = -1;
  *truncated = 0;
  struct iovec iov = {buffer, size};
  /* Room for a few descriptors, so that extra ones arrive (and are closed here) rather than
   * being dropped silently; more than that sets MSG_CTRUNC and the kernel discards them. */
  union {
    struct cmsghdr header;
    char space[CMSG_SPACE(8 * sizeof(int))];
  } control;
  memset(&control, 0, sizeof control);
  struct msghdr message;
  memset(&message, 0, sizeof message);
  message.msg_iov = &iov;
  message.msg_iovlen = 1;
  message.msg_control = control.space;
  message.msg_controllen = sizeof control.space;
  ssize_t count;
  do {
    count = recvmsg(socket, &message, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  } while (count < 0 && errno == EINTR);
  if (count < 0) return -1;
  if (message.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) *truncated = 1;
  for (struct cmsghdr *header = CMSG_FIRSTHDR(&message); header != NULL; header = CMSG_NXTHDR(&message, header)) {
    if (header->cmsg_level != SOL_SOCKET || header->cmsg_type != SCM_RIGHTS) continue;
    size_t bytes = header->cmsg_len - CMSG_LEN(0);
    size_t descriptors = bytes / sizeof(int);
    for (size_t i = 0; i < descriptors; i++) {
      int fd;
      memcpy(&fd, CMSG_DATA(header) + i * sizeof(int), sizeof(int));
      if (*received < 0) {
        *received = fd;
      } else {
        close(fd);
        *truncated = 1;
      }
    }
  }
  return count;
}

int appbox_socketpair(int seqpacket, int fds[2]) {
  return socketpair(AF_UNIX, (seqpacket ? SOCK_SEQPACKET : SOCK_STREAM) | SOCK_CLOEXEC, 0, fds);
}

int appbox_socket_type(int fd) {
  int value = 0;
  socklen_t length = sizeof value;
  if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &value, &length) != 0) return -1;
  return value;
}

int appbox_socket_domain(int fd) {
  int value = 0;
  socklen_t length = sizeof value;
  if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &value, &length) != 0) return -1;
  return value;
}
