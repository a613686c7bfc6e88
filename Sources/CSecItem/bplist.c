/* Binary property lists (bplist00), the subset the keychain protocol uses: strings
 * (ASCII or UTF-16BE), data, integers, booleans, dates, reals, arrays and dictionaries.
 *
 * Layout: "bplist00", the objects, an offset table (one big-endian offset per object) and a
 * 32-byte trailer (offset width, reference width, object count, top object, table offset).
 *
 * Encoding numbers the objects depth first (a container, then its keys, then its values)
 * and writes them in that order; references are as narrow as the object count allows.
 * Decoding validates the trailer and every offset before reading an object, bounds every
 * length by the bytes actually present, and limits depth (APPBOX_PLIST_MAX_DEPTH, which
 * also stops cycles) and the number of objects produced (shared references count each
 * time), so a hostile or corrupt reply cannot make it read out of bounds or expand
 * without limit. */
#include <stdlib.h>
#include <string.h>

#include "appbox_secitem.h"
#include "internal.h"

/* ---- Encoding ---- */

typedef struct {
  uint8_t *bytes;
  size_t length;
  size_t capacity;
  int failed;
} buffer;

static void put(buffer *out, const void *bytes, size_t length) {
  if (out->failed) return;
  if (out->capacity - out->length < length) {
    size_t capacity = out->capacity == 0 ? 256 : out->capacity;
    while (capacity - out->length < length) {
      if (capacity > SIZE_MAX / 2) {
        out->failed = 1;
        return;
      }
      capacity *= 2;
    }
    uint8_t *grown = realloc(out->bytes, capacity);
    if (grown == NULL) {
      out->failed = 1;
      return;
    }
    out->bytes = grown;
    out->capacity = capacity;
  }
  if (length > 0) memcpy(out->bytes + out->length, bytes, length);
  out->length += length;
}

static void put_big_endian(buffer *out, uint64_t number, int width) {
  uint8_t bytes[8];
  for (int i = 0; i < width; i++) bytes[i] = (uint8_t)(number >> (8 * (width - 1 - i)));
  put(out, bytes, (size_t)width);
}

static void put_integer(buffer *out, int64_t number) {
  uint8_t marker;
  int width;
  if (number >= 0 && number <= 0xFF) {
    marker = 0x10;
    width = 1;
  } else if (number >= 0 && number <= 0xFFFF) {
    marker = 0x11;
    width = 2;
  } else if (number >= 0 && number <= 0xFFFFFFFFLL) {
    marker = 0x12;
    width = 4;
  } else {
    marker = 0x13;
    width = 8;
  }
  put(out, &marker, 1);
  put_big_endian(out, (uint64_t)number, width);
}

/* A marker with a count: in the low nibble, or 0xF followed by an integer object. */
static void put_header(buffer *out, uint8_t type, size_t count) {
  if (count < 15) {
    uint8_t marker = (uint8_t)(type | count);
    put(out, &marker, 1);
  } else {
    uint8_t marker = (uint8_t)(type | 0x0F);
    put(out, &marker, 1);
    put_integer(out, (int64_t)count);
  }
}

static void put_double(buffer *out, uint8_t marker, double number) {
  uint64_t bits;
  memcpy(&bits, &number, sizeof bits);
  put(out, &marker, 1);
  put_big_endian(out, bits, 8);
}

static void put_string(buffer *out, const uint8_t *text, size_t length) {
  int ascii = 1;
  for (size_t i = 0; i < length; i++) {
    if (text[i] >= 0x80) ascii = 0;
  }
  if (ascii) {
    put_header(out, 0x50, length);
    put(out, text, length);
    return;
  }
  /* UTF-16BE, counted in code units. The text was checked as UTF-8 when the value was made. */
  size_t units = 0;
  for (size_t i = 0; i < length;) {
    uint8_t byte = text[i];
    size_t size = byte < 0x80 ? 1 : (byte & 0xE0) == 0xC0 ? 2 : (byte & 0xF0) == 0xE0 ? 3 : 4;
    units += size == 4 ? 2 : 1;
    i += size;
  }
  put_header(out, 0x60, units);
  for (size_t i = 0; i < length;) {
    uint8_t byte = text[i];
    uint32_t scalar;
    size_t size;
    if (byte < 0x80) {
      scalar = byte;
      size = 1;
    } else if ((byte & 0xE0) == 0xC0) {
      scalar = byte & 0x1F;
      size = 2;
    } else if ((byte & 0xF0) == 0xE0) {
      scalar = byte & 0x0F;
      size = 3;
    } else {
      scalar = byte & 0x07;
      size = 4;
    }
    for (size_t k = 1; k < size && i + k < length; k++) scalar = (scalar << 6) | (text[i + k] & 0x3F);
    if (scalar >= 0x10000) {
      scalar -= 0x10000;
      put_big_endian(out, 0xD800 + (scalar >> 10), 2);
      put_big_endian(out, 0xDC00 + (scalar & 0x3FF), 2);
    } else {
      put_big_endian(out, scalar, 2);
    }
    i += size;
  }
}

typedef struct {
  buffer out;
  uint64_t *offsets;
  size_t next;
  int reference_width;
} encoder;

/* How many objects `value` takes (keys included); 0 when nested too deep. */
static size_t count_objects(const appbox_value *value, int depth) {
  if (depth > APPBOX_PLIST_MAX_DEPTH) return 0;
  size_t total = 1;
  for (size_t i = 0; i < value->count; i++) {
    size_t items = count_objects(value->items[i], depth + 1);
    if (items == 0) return 0;
    total += items + (value->type == APPBOX_VALUE_DICTIONARY ? 1 : 0);
  }
  return total;
}

/* The number of objects `value` takes: itself, then (for a dictionary) its keys, then its
 * items' subtrees. Must follow the order `emit` writes in. */
static size_t subtree_size(const appbox_value *value) { return count_objects(value, 0); }

static void emit(encoder *state, const appbox_value *value) {
  size_t index = state->next++;
  state->offsets[index] = state->out.length;
  switch (value->type) {
    case APPBOX_VALUE_STRING:
      put_string(&state->out, value->bytes, value->length);
      return;
    case APPBOX_VALUE_DATA:
      put_header(&state->out, 0x40, value->length);
      put(&state->out, value->bytes, value->length);
      return;
    case APPBOX_VALUE_INTEGER:
      put_integer(&state->out, value->integer);
      return;
    case APPBOX_VALUE_BOOL: {
      uint8_t marker = value->integer ? 0x09 : 0x08;
      put(&state->out, &marker, 1);
      return;
    }
    case APPBOX_VALUE_DATE:
      put_double(&state->out, 0x33, value->real);
      return;
    case APPBOX_VALUE_REAL:
      put_double(&state->out, 0x23, value->real);
      return;
    case APPBOX_VALUE_ARRAY:
    case APPBOX_VALUE_DICTIONARY:
      break;
  }
  int dictionary = value->type == APPBOX_VALUE_DICTIONARY;
  put_header(&state->out, dictionary ? 0xD0 : 0xA0, value->count);
  /* References: keys take the next indices, then each item's subtree in turn. */
  size_t next = index + 1;
  if (dictionary) {
    for (size_t i = 0; i < value->count; i++) put_big_endian(&state->out, next++, state->reference_width);
  }
  for (size_t i = 0; i < value->count; i++) {
    put_big_endian(&state->out, next, state->reference_width);
    next += subtree_size(value->items[i]);
  }
  if (dictionary) {
    for (size_t i = 0; i < value->count; i++) emit(state, value->keys[i]);
  }
  for (size_t i = 0; i < value->count; i++) emit(state, value->items[i]);
}

int appbox_plist_encode(const appbox_value *value, uint8_t **bytes, size_t *length) {
  if (value == NULL || bytes == NULL || length == NULL) return -1;
  size_t count = count_objects(value, 1);
  if (count == 0) return -1;
  encoder state = {{NULL, 0, 0, 0}, NULL, 0, count <= 0xFF ? 1 : count <= 0xFFFF ? 2 : 4};
  state.offsets = calloc(count, sizeof *state.offsets);
  if (state.offsets == NULL) return -1;
  put(&state.out, "bplist00", 8);
  emit(&state, value);
  uint64_t table = state.out.length;
  int offset_width = table <= 0xFF ? 1 : table <= 0xFFFF ? 2 : table <= 0xFFFFFFFFULL ? 4 : 8;
  for (size_t i = 0; i < count; i++) put_big_endian(&state.out, state.offsets[i], offset_width);
  uint8_t trailer[8] = {0, 0, 0, 0, 0, 0, (uint8_t)offset_width, (uint8_t)state.reference_width};
  put(&state.out, trailer, sizeof trailer);
  put_big_endian(&state.out, count, 8);
  put_big_endian(&state.out, 0, 8);
  put_big_endian(&state.out, table, 8);
  free(state.offsets);
  if (state.out.failed) {
    free(state.out.bytes);
    return -1;
  }
  *bytes = state.out.bytes;
  *length = state.out.length;
  return 0;
}

/* ---- Decoding ---- */

typedef struct {
  const uint8_t *bytes;
  size_t length;
  int offset_width;
  int reference_width;
  uint64_t count;
  uint64_t table;
  uint64_t objects_left;
  uint64_t bytes_left;
} decoder;

#define APPBOX_PLIST_MAX_OBJECTS 1000000u
/* Bytes of strings and data one decode may produce (shared objects count each time). */
#define APPBOX_PLIST_MAX_PAYLOAD (256u << 20)

static uint64_t big_endian(const uint8_t *bytes, int width) {
  uint64_t number = 0;
  for (int i = 0; i < width; i++) number = (number << 8) | bytes[i];
  return number;
}

/* Reads a count from the marker's low nibble, or the integer object after it. `position`
 * points after the marker and moves past any integer. 0 on success. */
static int read_count(const decoder *state, uint8_t marker, uint64_t *position, uint64_t *count) {
  if ((marker & 0x0F) != 0x0F) {
    *count = marker & 0x0F;
    return 0;
  }
  if (*position >= state->table) return -1;
  uint8_t integer = state->bytes[*position];
  if ((integer & 0xF0) != 0x10 || (integer & 0x0F) > 3) return -1;
  int width = 1 << (integer & 0x0F);
  if (state->table - *position - 1 < (uint64_t)width) return -1;
  *count = big_endian(state->bytes + *position + 1, width);
  *position += 1 + (uint64_t)width;
  return 0;
}

static appbox_value *decode_object(decoder *state, uint64_t index, int depth);

static appbox_value *decode_utf16(const uint8_t *bytes, uint64_t units) {
  /* At most 3 UTF-8 bytes per UTF-16 unit (a surrogate pair's 4 bytes come from 2 units). */
  uint8_t *text = malloc((size_t)units * 3 + 1);
  if (text == NULL) return NULL;
  size_t length = 0;
  for (uint64_t i = 0; i < units; i++) {
    uint32_t unit = (uint32_t)big_endian(bytes + 2 * i, 2);
    uint32_t scalar = unit;
    if (unit >= 0xD800 && unit <= 0xDBFF) {
      if (i + 1 >= units) goto invalid;
      uint32_t low = (uint32_t)big_endian(bytes + 2 * (i + 1), 2);
      if (low < 0xDC00 || low > 0xDFFF) goto invalid;
      scalar = 0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00);
      i++;
    } else if (unit >= 0xDC00 && unit <= 0xDFFF) {
      goto invalid;
    }
    if (scalar < 0x80) {
      text[length++] = (uint8_t)scalar;
    } else if (scalar < 0x800) {
      text[length++] = (uint8_t)(0xC0 | (scalar >> 6));
      text[length++] = (uint8_t)(0x80 | (scalar & 0x3F));
    } else if (scalar < 0x10000) {
      text[length++] = (uint8_t)(0xE0 | (scalar >> 12));
      text[length++] = (uint8_t)(0x80 | ((scalar >> 6) & 0x3F));
      text[length++] = (uint8_t)(0x80 | (scalar & 0x3F));
    } else {
      text[length++] = (uint8_t)(0xF0 | (scalar >> 18));
      text[length++] = (uint8_t)(0x80 | ((scalar >> 12) & 0x3F));
      text[length++] = (uint8_t)(0x80 | ((scalar >> 6) & 0x3F));
      text[length++] = (uint8_t)(0x80 | (scalar & 0x3F));
    }
  }
  appbox_value *value = appbox_string_from_bytes(text, length);
  free(text);
  return value;
invalid:
  free(text);
  return NULL;
}

static appbox_value *decode_container(decoder *state, uint8_t type, uint64_t position, uint64_t count,
                                      int depth) {
  int dictionary = type == 0xD0;
  uint64_t references = dictionary ? count * 2 : count;
  if (count > state->count || references > (state->table - position) / (uint64_t)state->reference_width) {
    return NULL;
  }
  appbox_value *container = dictionary ? appbox_dictionary_new() : appbox_array_new();
  if (container == NULL) return NULL;
  const uint8_t *refs = state->bytes + position;
  for (uint64_t i = 0; i < count; i++) {
    uint64_t value_ref = big_endian(refs + (dictionary ? count + i : i) * (uint64_t)state->reference_width,
                                    state->reference_width);
    appbox_value *item = decode_object(state, value_ref, depth + 1);
    if (item == NULL) goto failed;
    if (dictionary) {
      uint64_t key_ref = big_endian(refs + i * (uint64_t)state->reference_width, state->reference_width);
      appbox_value *key = decode_object(state, key_ref, depth + 1);
      if (key == NULL || key->type != APPBOX_VALUE_STRING ||
          appbox_dictionary_get(container, (const char *)key->bytes) != NULL) {
        /* A key that is not a string, or one given twice: malformed. */
        appbox_value_free(key);
        appbox_value_free(item);
        goto failed;
      }
      if (appbox_dictionary_set_key(container, key, item) != 0) goto failed;
    } else if (appbox_array_append(container, item) != 0) {
      goto failed;
    }
  }
  return container;
failed:
  appbox_value_free(container);
  return NULL;
}

static appbox_value *decode_object(decoder *state, uint64_t index, int depth) {
  if (depth > APPBOX_PLIST_MAX_DEPTH || index >= state->count || state->objects_left == 0) return NULL;
  state->objects_left--;
  uint64_t offset = big_endian(state->bytes + state->table + index * (uint64_t)state->offset_width,
                               state->offset_width);
  if (offset < 8 || offset >= state->table) return NULL;
  uint8_t marker = state->bytes[offset];
  uint64_t position = offset + 1;
  uint64_t available = state->table - position;
  uint8_t type = marker & 0xF0;
  uint64_t count;
  switch (type) {
    case 0x00:
      if (marker == 0x08 || marker == 0x09) return appbox_bool_new(marker == 0x09);
      return NULL;
    case 0x10: {
      int width = 1 << (marker & 0x0F);
      if ((marker & 0x0F) > 3 || available < (uint64_t)width) return NULL;
      return appbox_integer_new((int64_t)big_endian(state->bytes + position, width));
    }
    case 0x20:
    case 0x30: {
      if ((type == 0x30 && marker != 0x33) || (type == 0x20 && marker != 0x23 && marker != 0x22)) return NULL;
      int width = marker == 0x22 ? 4 : 8;
      if (available < (uint64_t)width) return NULL;
      double number;
      if (width == 4) {
        uint32_t bits = (uint32_t)big_endian(state->bytes + position, 4);
        float single;
        memcpy(&single, &bits, sizeof single);
        number = single;
      } else {
        uint64_t bits = big_endian(state->bytes + position, 8);
        memcpy(&number, &bits, sizeof number);
      }
      return type == 0x30 ? appbox_date_new(number) : appbox_real_new(number);
    }
    case 0x40:
    case 0x50:
    case 0x60: {
      if (read_count(state, marker, &position, &count) != 0) return NULL;
      available = state->table - position;
      uint64_t size = type == 0x60 ? count * 2 : count;
      if (count > available || size > available || size > state->bytes_left) return NULL;
      state->bytes_left -= size;
      if (type == 0x40) return appbox_data_new(state->bytes + position, (size_t)count);
      if (type == 0x50) {
        for (uint64_t i = 0; i < count; i++) {
          if (state->bytes[position + i] >= 0x80) return NULL;
        }
        return appbox_string_from_bytes(state->bytes + position, (size_t)count);
      }
      return decode_utf16(state->bytes + position, count);
    }
    case 0xA0:
    case 0xD0:
      if (read_count(state, marker, &position, &count) != 0) return NULL;
      return decode_container(state, type, position, count, depth);
    default:
      return NULL; /* UIDs, sets and reserved markers are not part of the protocol */
  }
}

appbox_value *appbox_plist_decode(const uint8_t *bytes, size_t length) {
  if (bytes == NULL || length < 8 + 1 + 32 || memcmp(bytes, "bplist00", 8) != 0) return NULL;
  const uint8_t *trailer = bytes + length - 32;
  decoder state;
  state.bytes = bytes;
  state.length = length;
  state.offset_width = trailer[6];
  state.reference_width = trailer[7];
  state.count = big_endian(trailer + 8, 8);
  uint64_t top = big_endian(trailer + 16, 8);
  state.table = big_endian(trailer + 24, 8);
  state.objects_left = APPBOX_PLIST_MAX_OBJECTS;
  state.bytes_left = APPBOX_PLIST_MAX_PAYLOAD;
  if (state.offset_width < 1 || state.offset_width > 8 || state.reference_width < 1 ||
      state.reference_width > 8) {
    return NULL;
  }
  uint64_t trailer_start = length - 32;
  if (state.count == 0 || top >= state.count || state.table < 9 || state.table >= trailer_start) return NULL;
  if (state.count > (trailer_start - state.table) / (uint64_t)state.offset_width ||
      state.count * (uint64_t)state.offset_width != trailer_start - state.table) {
    return NULL;
  }
  return decode_object(&state, top, 1);
}
