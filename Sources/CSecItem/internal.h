/* What the client's source files share; not part of the public header. */
#ifndef APPBOX_SECITEM_INTERNAL_H
#define APPBOX_SECITEM_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "appbox_secitem.h"

struct appbox_value {
  appbox_value_type type;
  int64_t integer;            /* integers and booleans */
  double real;                /* dates and reals */
  uint8_t *bytes;             /* strings (NUL-terminated) and data */
  size_t length;              /* of bytes, without the NUL */
  appbox_value **items;       /* array elements, dictionary values */
  appbox_value **keys;        /* dictionary keys (strings), parallel to items */
  size_t count;
  size_t capacity;
};

int appbox_utf8_is_valid(const uint8_t *bytes, size_t length);
/* A string value of exactly these bytes (UTF-8 without NUL), or NULL. */
appbox_value *appbox_string_from_bytes(const uint8_t *bytes, size_t length);
/* Sets `key` (a string value, owned) to `item` (owned). */
int appbox_dictionary_set_key(appbox_value *dictionary, appbox_value *key, appbox_value *item);

/* Frames on a session: an 8-byte header (4 magic bytes, a 32-bit big-endian length), then
 * the binary property list. */
#define APPBOX_FRAME_HEADER 8
#define APPBOX_REQUEST_MAGIC "ASQ1"
#define APPBOX_REPLY_MAGIC "ASP1"
#define APPBOX_MAX_REQUEST (4u << 20)
#define APPBOX_MAX_REPLY (64u << 20)

#endif
