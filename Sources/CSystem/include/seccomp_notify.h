/* The supervisor's side of a seccomp user notification listener (seccomp_unotify(2)): the
 * ioctls and structures of <linux/seccomp.h>, which do not import into Swift. Used by the
 * network gate, which holds an app's first uses of its network until pasta is up.
 * No <linux/...> header is included here so the module imports cleanly. */
#ifndef APPBOX_SECCOMP_NOTIFY_H
#define APPBOX_SECCOMP_NOTIFY_H

#include <stdint.h>

/* SECCOMP_IOCTL_NOTIF_RECV: takes the next notification from `listener` (blocking when
 * there is none). Writes its cookie, the system call's number and its first argument.
 * Returns 0, or -1 with errno (ENOENT: the caller went away before it was received). */
int appbox_seccomp_notify_receive(int listener, uint64_t *id, int32_t *number, uint64_t *argument);

/* SECCOMP_IOCTL_NOTIF_SEND: with `error` 0, lets the call go on as if the notifying filter
 * had allowed it (SECCOMP_USER_NOTIF_FLAG_CONTINUE); otherwise makes it fail with that errno.
 * Returns 0, or -1 with errno (ENOENT: the call is no longer waiting, say its process was
 * killed or a signal interrupted it). */
int appbox_seccomp_notify_respond(int listener, uint64_t id, int error);

/* SECCOMP_IOCTL_NOTIF_ID_VALID: 1 while the call `id` still waits for an answer, 0 when it
 * does not (ENOENT), -1 with errno on another error. */
int appbox_seccomp_notify_is_waiting(int listener, uint64_t id);

/* SECCOMP_IOCTL_NOTIF_SET_FLAGS with SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP (Linux 6.6): a call
 * that notifies wakes the supervisor with a synchronous wake-up, which hands it the CPU the
 * caller gives up, as a reply to a request would. Returns 0, or -1 with errno (EINVAL on
 * older kernels). */
int appbox_seccomp_notify_wake_synchronously(int listener);

#endif
