#ifndef APPBOX_CCURL_SHIM_H
#define APPBOX_CCURL_SHIM_H
#include <curl/curl.h>
#include <dlfcn.h>
#include <stddef.h>

// libcurl is loaded when the first S3 request needs it (dlopen), not when appbox starts:
// linked, its dependency tree (TLS, LDAP, Kerberos, SSH, IDN and PSL libraries) cost every
// appbox command about 3.6 ms of dynamic loading, half of a small command's run time, for a
// library only S3 repositories use (Benchmarks/results/HISTORY.md). Only the headers come
// from libcurl-dev; the functions are looked up once each and called through pointers.

static inline void *appbox_curl_library(void) {
  static void *library;
  void *loaded = __atomic_load_n(&library, __ATOMIC_ACQUIRE);
  if (loaded == NULL) {
    loaded = dlopen("libcurl.so.4", RTLD_NOW | RTLD_LOCAL);
    if (loaded != NULL) __atomic_store_n(&library, loaded, __ATOMIC_RELEASE);
  }
  return loaded;
}

// Declares `function`, the libcurl function `name` of type `type`, NULL when libcurl is missing.
#define APPBOX_CURL_LOOKUP(type, name)                                         \
  static type cached_##name;                                                   \
  type function = __atomic_load_n(&cached_##name, __ATOMIC_ACQUIRE);          \
  if (function == NULL) {                                                      \
    void *library = appbox_curl_library();                                     \
    function = library == NULL ? NULL : (type)dlsym(library, #name);           \
    if (function != NULL) __atomic_store_n(&cached_##name, function, __ATOMIC_RELEASE); \
  }

typedef CURLcode (*appbox_curl_global_init_function)(long);
typedef CURL *(*appbox_curl_easy_init_function)(void);
typedef void (*appbox_curl_handle_function)(CURL *);
typedef CURLcode (*appbox_curl_perform_function)(CURL *);
typedef const char *(*appbox_curl_strerror_function)(CURLcode);
typedef struct curl_slist *(*appbox_curl_slist_append_function)(struct curl_slist *, const char *);
typedef void (*appbox_curl_slist_free_function)(struct curl_slist *);
typedef CURLcode (*appbox_curl_setopt_function)(CURL *, CURLoption, ...);
typedef CURLcode (*appbox_curl_getinfo_function)(CURL *, CURLINFO, ...);

static inline CURLcode appbox_curl_global_init(long flags) {
  APPBOX_CURL_LOOKUP(appbox_curl_global_init_function, curl_global_init)
  return function == NULL ? CURLE_FAILED_INIT : function(flags);
}
static inline CURL *appbox_curl_easy_init(void) {
  APPBOX_CURL_LOOKUP(appbox_curl_easy_init_function, curl_easy_init)
  return function == NULL ? NULL : function();
}
static inline void appbox_curl_easy_cleanup(CURL *handle) {
  APPBOX_CURL_LOOKUP(appbox_curl_handle_function, curl_easy_cleanup)
  if (function != NULL) function(handle);
}
static inline void appbox_curl_easy_reset(CURL *handle) {
  APPBOX_CURL_LOOKUP(appbox_curl_handle_function, curl_easy_reset)
  if (function != NULL) function(handle);
}
static inline CURLcode appbox_curl_easy_perform(CURL *handle) {
  APPBOX_CURL_LOOKUP(appbox_curl_perform_function, curl_easy_perform)
  return function == NULL ? CURLE_FAILED_INIT : function(handle);
}
static inline const char *appbox_curl_easy_strerror(CURLcode code) {
  APPBOX_CURL_LOOKUP(appbox_curl_strerror_function, curl_easy_strerror)
  return function == NULL ? "libcurl (libcurl.so.4) could not be loaded" : function(code);
}
static inline struct curl_slist *appbox_curl_slist_append(struct curl_slist *list, const char *line) {
  APPBOX_CURL_LOOKUP(appbox_curl_slist_append_function, curl_slist_append)
  return function == NULL ? list : function(list, line);
}
static inline void appbox_curl_slist_free_all(struct curl_slist *list) {
  APPBOX_CURL_LOOKUP(appbox_curl_slist_free_function, curl_slist_free_all)
  if (function != NULL) function(list);
}

// curl_easy_setopt and curl_easy_getinfo are variadic, which Swift cannot call: one typed
// wrapper per kind of argument.
typedef size_t (*appbox_curl_data_callback)(char *data, size_t size, size_t count, void *context);

static inline appbox_curl_setopt_function appbox_curl_setopt(void) {
  APPBOX_CURL_LOOKUP(appbox_curl_setopt_function, curl_easy_setopt)
  return function;
}
static inline CURLcode appbox_curl_set_long(CURL *handle, CURLoption option, long value) {
  appbox_curl_setopt_function setopt = appbox_curl_setopt();
  return setopt == NULL ? CURLE_FAILED_INIT : setopt(handle, option, value);
}
static inline CURLcode appbox_curl_set_offset(CURL *handle, CURLoption option, curl_off_t value) {
  appbox_curl_setopt_function setopt = appbox_curl_setopt();
  return setopt == NULL ? CURLE_FAILED_INIT : setopt(handle, option, value);
}
static inline CURLcode appbox_curl_set_string(CURL *handle, CURLoption option, const char *value) {
  appbox_curl_setopt_function setopt = appbox_curl_setopt();
  return setopt == NULL ? CURLE_FAILED_INIT : setopt(handle, option, value);
}
static inline CURLcode appbox_curl_set_pointer(CURL *handle, CURLoption option, void *value) {
  appbox_curl_setopt_function setopt = appbox_curl_setopt();
  return setopt == NULL ? CURLE_FAILED_INIT : setopt(handle, option, value);
}
static inline CURLcode appbox_curl_set_callback(CURL *handle, CURLoption option,
                                                appbox_curl_data_callback callback) {
  appbox_curl_setopt_function setopt = appbox_curl_setopt();
  return setopt == NULL ? CURLE_FAILED_INIT : setopt(handle, option, callback);
}
static inline CURLcode appbox_curl_get_long(CURL *handle, CURLINFO info, long *value) {
  APPBOX_CURL_LOOKUP(appbox_curl_getinfo_function, curl_easy_getinfo)
  return function == NULL ? CURLE_FAILED_INIT : function(handle, info, value);
}
#endif
