/* Passing descriptors over UNIX sockets (SCM_RIGHTS): the CMSG_* macros do not import into
 * Swift. Used by the keychain broker and its Swift client. */
#ifndef APPBOX_DESCRIPTOR_PASSING_H
#define APPBOX_DESCRIPTOR_PASSING_H

#include <stddef.h>
#include <sys/types.h>

/* Sends one byte carrying descriptor `fd` on socket `socket` (MSG_NOSIGNAL; retried on
 * EINTR). Returns 0, or -1 with errno. */
int appbox_send_descriptor(int socket, int fd);

/* Receives one message from `socket` without blocking (MSG_DONTWAIT): its bytes (up to
 * `size`) into `buffer`, and the first descriptor it carried into *received (-1 when none),
 * close-on-exec. Any further descriptors are closed at once. *truncated is set when the
 * message or its descriptors did not fit. Returns the byte count (0: the peer closed), or
 * -1 with errno (EAGAIN: nothing to read). *truncated is also set when the message carried
 * more than one descriptor. */
ssize_t appbox_receive_descriptor(int socket, void *buffer, size_t size, int *received, int *truncated);

/* socketpair(AF_UNIX, type | SOCK_CLOEXEC): `seqpacket` chooses SOCK_SEQPACKET over
 * SOCK_STREAM. Returns 0, or -1 with errno. */
int appbox_socketpair(int seqpacket, int fds[2]);

/* The socket's type (SOCK_STREAM = 1, SOCK_SEQPACKET = 5) and domain (AF_UNIX = 1), or -1
 * with errno (ENOTSOCK for other descriptors). */
int appbox_socket_type(int fd);
int appbox_socket_domain(int fd);

#endif
