/* Shared by the two steps of appbox-sandbox (see main.c). */
#ifndef APPBOX_SANDBOX_H
#define APPBOX_SANDBOX_H

#include <stdint.h>

/* Where `enter` mounts the sources it stages, in its private mount namespace. */
#define STAGING_DIRECTORY "/mnt"

/* Prints "appbox-sandbox: <message>" on stderr and exits with `status`. */
void fail(int status, const char *format, ...) __attribute__((noreturn, format(printf, 2, 3)));

/* The lower-case strerror text, matching how appbox words errors. */
const char *reason(int error);

/* A non-negative decimal number no larger than `max`, or fail(64) naming `option`. */
long parse_number(const char *text, long max, const char *option);

/* The two steps, and the network's start (network.c). */
int enter_main(int argc, char **argv);
int confine_main(int argc, char **argv);
int network_main(int argc, char **argv);

/* Installs the seccomp filter (filter.c) on the calling thread; needs no_new_privs.
 * Returns 0, or an errno value. */
int install_syscall_filter(void);

/* Installs the network gate's filter (filter.c) on the calling thread, after
 * install_syscall_filter. Returns the listener (close-on-exec), or -errno. */
int install_network_gate(void);

#endif
