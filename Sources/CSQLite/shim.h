#ifndef APPBOX_CSQLITE_SHIM_H
#define APPBOX_CSQLITE_SHIM_H
#include <sqlite3.h>

/* SQLITE_TRANSIENT is a casting macro and does not import into Swift. */
static inline sqlite3_destructor_type appbox_sqlite_transient(void) {
  return SQLITE_TRANSIENT;
}
#endif
