/* Values of the keychain client: strings (UTF-8, checked), data, integers, booleans, dates,
 * reals, arrays and dictionaries (keys in insertion order, unique). Small and plain: a
 * dictionary is two parallel arrays searched linearly, as SecItem queries hold a dozen keys. */
#include <stdlib.h>
#include <string.h>

#include "appbox_secitem.h"
#include "internal.h"

static appbox_value *make(appbox_value_type type) {
  appbox_value *value = calloc(1, sizeof *value);
  if (value != NULL) value->type = type;
  return value;
}

int appbox_utf8_is_valid(const uint8_t *bytes, size_t length) {
  size_t i = 0;
  while (i < length) {
    uint8_t byte = bytes[i];
    size_t extra;
    uint32_t scalar;
    if (byte < 0x80) {
      i++;
      continue;
    } else if ((byte & 0xE0) == 0xC0) {
      extra = 1;
      scalar = byte & 0x1F;
    } else if ((byte & 0xF0) == 0xE0) {
      extra = 2;
      scalar = byte & 0x0F;
    } else if ((byte & 0xF8) == 0xF0) {
      extra = 3;
      scalar = byte & 0x07;
    } else {
      return 0;
    }
    if (length - i <= extra) return 0;
    for (size_t k = 1; k <= extra; k++) {
      if ((bytes[i + k] & 0xC0) != 0x80) return 0;
      scalar = (scalar << 6) | (bytes[i + k] & 0x3F);
    }
    static const uint32_t minimum[4] = {0, 0x80, 0x800, 0x10000};
    if (scalar < minimum[extra] || scalar > 0x10FFFF || (scalar >= 0xD800 && scalar <= 0xDFFF)) return 0;
    i += extra + 1;
  }
  return 1;
}

appbox_value *appbox_string_from_bytes(const uint8_t *bytes, size_t length) {
  if (!appbox_utf8_is_valid(bytes, length) || memchr(bytes, 0, length) != NULL) return NULL;
  appbox_value *value = make(APPBOX_VALUE_STRING);
  if (value == NULL) return NULL;
  value->bytes = malloc(length + 1);
  if (value->bytes == NULL) {
    free(value);
    return NULL;
  }
  if (length > 0) memcpy(value->bytes, bytes, length);
  value->bytes[length] = 0;
  value->length = length;
  return value;
}

appbox_value *appbox_dictionary_new(void) { return make(APPBOX_VALUE_DICTIONARY); }
appbox_value *appbox_array_new(void) { return make(APPBOX_VALUE_ARRAY); }

appbox_value *appbox_string_new(const char *text) {
  if (text == NULL) return NULL;
  return appbox_string_from_bytes((const uint8_t *)text, strlen(text));
}

appbox_value *appbox_data_new(const void *bytes, size_t length) {
  appbox_value *value = make(APPBOX_VALUE_DATA);
  if (value == NULL) return NULL;
  value->bytes = malloc(length > 0 ? length : 1);
  if (value->bytes == NULL) {
    free(value);
    return NULL;
  }
  if (length > 0) memcpy(value->bytes, bytes, length);
  value->length = length;
  return value;
}

appbox_value *appbox_integer_new(int64_t number) {
  appbox_value *value = make(APPBOX_VALUE_INTEGER);
  if (value != NULL) value->integer = number;
  return value;
}

appbox_value *appbox_bool_new(int flag) {
  appbox_value *value = make(APPBOX_VALUE_BOOL);
  if (value != NULL) value->integer = flag ? 1 : 0;
  return value;
}

appbox_value *appbox_date_new(double seconds) {
  appbox_value *value = make(APPBOX_VALUE_DATE);
  if (value != NULL) value->real = seconds;
  return value;
}

appbox_value *appbox_real_new(double number) {
  appbox_value *value = make(APPBOX_VALUE_REAL);
  if (value != NULL) value->real = number;
  return value;
}

void appbox_value_free(appbox_value *value) {
  if (value == NULL) return;
  for (size_t i = 0; i < value->count; i++) {
    appbox_value_free(value->items[i]);
    if (value->keys != NULL) appbox_value_free(value->keys[i]);
  }
  free(value->items);
  free(value->keys);
  free(value->bytes);
  free(value);
}

/* Makes room for one more entry. */
static int grow(appbox_value *container) {
  if (container->count < container->capacity) return 0;
  size_t capacity = container->capacity == 0 ? 8 : container->capacity * 2;
  appbox_value **items = realloc(container->items, capacity * sizeof *items);
  if (items == NULL) return -1;
  container->items = items;
  if (container->type == APPBOX_VALUE_DICTIONARY) {
    appbox_value **keys = realloc(container->keys, capacity * sizeof *keys);
    if (keys == NULL) return -1;
    container->keys = keys;
  }
  container->capacity = capacity;
  return 0;
}

int appbox_array_append(appbox_value *array, appbox_value *item) {
  if (array == NULL || item == NULL || array->type != APPBOX_VALUE_ARRAY || grow(array) != 0) {
    appbox_value_free(item);
    return -1;
  }
  array->items[array->count++] = item;
  return 0;
}

/* The index of `key` (given as bytes) in `dictionary`, or -1. */
static long find(const appbox_value *dictionary, const char *key, size_t length) {
  for (size_t i = 0; i < dictionary->count; i++) {
    const appbox_value *candidate = dictionary->keys[i];
    if (candidate->length == length && memcmp(candidate->bytes, key, length) == 0) return (long)i;
  }
  return -1;
}

int appbox_dictionary_set_key(appbox_value *dictionary, appbox_value *key, appbox_value *item) {
  if (dictionary == NULL || key == NULL || item == NULL || dictionary->type != APPBOX_VALUE_DICTIONARY ||
      key->type != APPBOX_VALUE_STRING) {
    appbox_value_free(key);
    appbox_value_free(item);
    return -1;
  }
  long existing = find(dictionary, (const char *)key->bytes, key->length);
  if (existing >= 0) {
    appbox_value_free(dictionary->items[existing]);
    dictionary->items[existing] = item;
    appbox_value_free(key);
    return 0;
  }
  if (grow(dictionary) != 0) {
    appbox_value_free(key);
    appbox_value_free(item);
    return -1;
  }
  dictionary->keys[dictionary->count] = key;
  dictionary->items[dictionary->count] = item;
  dictionary->count++;
  return 0;
}

int appbox_dictionary_set(appbox_value *dictionary, const char *key, appbox_value *item) {
  return appbox_dictionary_set_key(dictionary, key == NULL ? NULL : appbox_string_new(key), item);
}

int appbox_dictionary_set_string(appbox_value *dictionary, const char *key, const char *text) {
  return appbox_dictionary_set(dictionary, key, appbox_string_new(text));
}

int appbox_dictionary_set_data(appbox_value *dictionary, const char *key, const void *bytes, size_t length) {
  return appbox_dictionary_set(dictionary, key, appbox_data_new(bytes, length));
}

int appbox_dictionary_set_integer(appbox_value *dictionary, const char *key, int64_t number) {
  return appbox_dictionary_set(dictionary, key, appbox_integer_new(number));
}

int appbox_dictionary_set_bool(appbox_value *dictionary, const char *key, int flag) {
  return appbox_dictionary_set(dictionary, key, appbox_bool_new(flag));
}

appbox_value_type appbox_value_get_type(const appbox_value *value) {
  return value == NULL ? (appbox_value_type)0 : value->type;
}

const appbox_value *appbox_dictionary_get(const appbox_value *dictionary, const char *key) {
  if (dictionary == NULL || key == NULL || dictionary->type != APPBOX_VALUE_DICTIONARY) return NULL;
  long index = find(dictionary, key, strlen(key));
  return index < 0 ? NULL : dictionary->items[index];
}

size_t appbox_value_count(const appbox_value *value) {
  if (value == NULL || (value->type != APPBOX_VALUE_ARRAY && value->type != APPBOX_VALUE_DICTIONARY)) return 0;
  return value->count;
}

const appbox_value *appbox_array_get(const appbox_value *array, size_t index) {
  if (array == NULL || array->type != APPBOX_VALUE_ARRAY || index >= array->count) return NULL;
  return array->items[index];
}

const char *appbox_dictionary_key_at(const appbox_value *dictionary, size_t index) {
  if (dictionary == NULL || dictionary->type != APPBOX_VALUE_DICTIONARY || index >= dictionary->count) return NULL;
  return (const char *)dictionary->keys[index]->bytes;
}

const appbox_value *appbox_dictionary_value_at(const appbox_value *dictionary, size_t index) {
  if (dictionary == NULL || dictionary->type != APPBOX_VALUE_DICTIONARY || index >= dictionary->count) return NULL;
  return dictionary->items[index];
}

const char *appbox_value_string(const appbox_value *value) {
  if (value == NULL || value->type != APPBOX_VALUE_STRING) return NULL;
  return (const char *)value->bytes;
}

const uint8_t *appbox_value_data(const appbox_value *value, size_t *length) {
  if (value == NULL || value->type != APPBOX_VALUE_DATA) {
    if (length != NULL) *length = 0;
    return NULL;
  }
  if (length != NULL) *length = value->length;
  return value->bytes;
}

int64_t appbox_value_integer(const appbox_value *value) {
  return value != NULL && value->type == APPBOX_VALUE_INTEGER ? value->integer : 0;
}

int appbox_value_bool(const appbox_value *value) {
  return value != NULL && value->type == APPBOX_VALUE_BOOL ? (int)value->integer : 0;
}

double appbox_value_double(const appbox_value *value) {
  if (value == NULL || (value->type != APPBOX_VALUE_DATE && value->type != APPBOX_VALUE_REAL)) return 0;
  return value->real;
}
