/* appbox-sandbox: the two steps around bubblewrap that confine an app.
 *
 *   appbox-sandbox enter   [options] -- BWRAP [BWRAP-ARGS...]     (on the host)
 *   appbox-sandbox confine [options] -- CMD [ARG...]               (inside the jail)
 *   appbox-sandbox network [--user UID:GID] -- PASTA [ARGS...]     (on the host)
 *
 * appbox starts every app as: appbox -> `enter` -> bwrap -> `confine` -> the app.
 *  - `enter` (enter.c; stage.c) stages the directories the jail shows (the bundle, the
 *    data, this helper, /etc) in a private mount namespace so that bubblewrap, which runs unprivileged,
 *    can reach them whatever the permissions above them, with noexec on the data; as
 *    root it then becomes the app's own uid; then it execs bubblewrap.
 *    By default it then enters a network namespace of its own (in a user namespace of its
 *    own), which `network` (network.c) gives an outbound connection through pasta, started
 *    beside the jail rather than before it.
 *  - bubblewrap builds the jail: new user, mount, pid, ipc, uts, cgroup (and, with
 *    --network none, network) namespaces; only /usr, a few /etc files, /proc, a minimal
 *    /dev and the app's own directories in view; a new session; die-with-parent.
 *  - `confine` (confine.c) is the last step before the app: it closes inherited
 *    descriptors, caps the process count, drops every capability, sets no_new_privs,
 *    restricts itself with Landlock (the second wall), installs the seccomp filter
 *    (filter.c; with a network of its own, also the network gate, which holds the app's
 *    sockets until pasta is up), tells appbox that the app starts, and execs the command.
 *
 * Plain C, no Swift runtime: the helper runs inside the jail, where only /usr exists.
 * Every failure prints one line on stderr ("appbox-sandbox: ...") and exits with a
 * sysexits status: 64 usage, 69 a missing piece, 71 a step that failed, 126/127 a
 * command that cannot run / does not exist.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sandbox.h"

void fail(int status, const char *format, ...) {
  char line[1024];
  va_list args;
  va_start(args, format);
  vsnprintf(line, sizeof line, format, args);
  va_end(args);
  dprintf(2, "appbox-sandbox: %s\n", line);
  _exit(status);
}

const char *reason(int error) {
  static char text[256];
  snprintf(text, sizeof text, "%s", strerror(error));
  if (text[0] >= 'A' && text[0] <= 'Z') text[0] = (char)(text[0] - 'A' + 'a');
  return text;
}

long parse_number(const char *text, long max, const char *option) {
  char *end = NULL;
  errno = 0;
  long value = strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || value < 0 || value > max) {
    fail(64, "%s takes a number from 0 to %ld, not '%s'", option, max, text);
  }
  return value;
}

/* SwiftPM links every executable with the Swift driver, whose start-up object registers
 * the image with the Swift runtime and refers to its backtracer. This program has no
 * Swift code: no-ops stand in for both, which keeps the runtime (megabytes to map and
 * relocate on every start, twice per app start) out of the binary. */
void swift_addNewDSOImage(const void *image);
void swift_addNewDSOImage(const void *image) { (void)image; }
int _swift_backtrace_isThunkFunction(const char *name);
int _swift_backtrace_isThunkFunction(const char *name) {
  (void)name;
  return 0;
}

int main(int argc, char **argv) {
  if (argc >= 2 && strcmp(argv[1], "enter") == 0) return enter_main(argc - 1, argv + 1);
  if (argc >= 2 && strcmp(argv[1], "confine") == 0) return confine_main(argc - 1, argv + 1);
  if (argc >= 2 && strcmp(argv[1], "network") == 0) return network_main(argc - 1, argv + 1);
  fail(64, "usage: appbox-sandbox enter|confine|network [OPTIONS] -- COMMAND [ARG...]");
}
