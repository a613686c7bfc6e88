#ifndef APPBOX_CARCHIVE_SHIM_H
#define APPBOX_CARCHIVE_SHIM_H
#include <archive.h>
#include <archive_entry.h>
#endif
