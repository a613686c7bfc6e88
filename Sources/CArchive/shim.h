#ifndef APPBOX_CARCHIVE_SHIM_H
#define APPBOX_CARCHIVE_SHIM_H
#include <archive.h>
#include <archive_entry.h>

/* archive_set_error is variadic, which Swift cannot call: I/O callbacks report
 * their errno and a fixed message through this. */
static inline void appbox_archive_set_error(struct archive *a, int code, const char *message) {
  archive_set_error(a, code, "%s", message);
}
#endif
