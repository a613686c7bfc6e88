/* appbox-secitem-probe: a keychain client for the broker's end-to-end tests and benchmark.
 * It runs inside the jail (installed as a bundle's executable) and prints one line per check:
 * "<label> ok" or "<label> FAIL <why>"; the tests parse them.
 *
 *   combos               every combination of kSecReturnData, kSecReturnAttributes and
 *                        kSecMatchLimit on SecItemCopyMatching and SecItemAdd
 *   threads N COUNT      N threads, each adding, reading, updating, deleting COUNT items of its own
 *   fork COUNT           the same in a parent and a forked child at once (one inherited door)
 *   hostile              malformed, huge, truncated and misframed messages on raw sessions, and
 *                        junk through the door; the broker must answer and stay up
 *   forge GROUP          requests that claim another identity, or another team's GROUP
 *   descriptors          the descriptors this process has, and the processes it can see
 *   reach PID...         tries /proc/PID/fd/3 for each (host) PID
 *   bench COUNT SECONDS  fills the keychain with COUNT items, then times SecItemCopyMatching
 *
 * Plain C, linked statically (the jail has no Swift runtime). */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "appbox_secitem.h"

void swift_addNewDSOImage(const void *image);
void swift_addNewDSOImage(const void *image) { (void)image; }
int _swift_backtrace_isThunkFunction(const char *name);
int _swift_backtrace_isThunkFunction(const char *name) {
  (void)name;
  return 0;
}

static int failures = 0;

static void report(const char *label, int ok, const char *format, ...) {
  char why[512] = "";
  if (!ok && format != NULL) {
    va_list args;
    va_start(args, format);
    vsnprintf(why, sizeof why, format, args);
    va_end(args);
  }
  if (!ok) failures++;
  printf("%s %s%s%s\n", label, ok ? "ok" : "FAIL", ok ? "" : " ", why);
  fflush(stdout);
}

static appbox_value *query_for(const char *service, const char *account) {
  appbox_value *query = appbox_dictionary_new();
  appbox_dictionary_set_string(query, kSecClass, kSecClassGenericPassword);
  if (service) appbox_dictionary_set_string(query, kSecAttrService, service);
  if (account) appbox_dictionary_set_string(query, kSecAttrAccount, account);
  return query;
}

static int data_equals(const appbox_value *value, const char *text) {
  size_t length;
  const uint8_t *bytes = appbox_value_data(value, &length);
  return bytes != NULL && length == strlen(text) && memcmp(bytes, text, length) == 0;
}

static appbox_status add_item(const char *service, const char *account, const char *secret, const char *label) {
  appbox_value *item = query_for(service, account);
  appbox_dictionary_set_data(item, kSecValueData, secret, strlen(secret));
  if (label) appbox_dictionary_set_string(item, kSecAttrLabel, label);
  appbox_status status = appbox_secitem_add(item, NULL);
  appbox_value_free(item);
  return status;
}

/* ---- combos ---- */

/* Checks one attributes dictionary: the item's account, and its data only when asked for. */
static const char *check_attributes(const appbox_value *item, const char *account, const char *secret,
                                    int with_data) {
  if (appbox_value_get_type(item) != APPBOX_VALUE_DICTIONARY) return "not a dictionary";
  const char *text = appbox_value_string(appbox_dictionary_get(item, kSecAttrAccount));
  if (text == NULL || strcmp(text, account) != 0) return "wrong account";
  text = appbox_value_string(appbox_dictionary_get(item, kSecClass));
  if (text == NULL || strcmp(text, kSecClassGenericPassword) != 0) return "no class";
  if (appbox_value_string(appbox_dictionary_get(item, kSecAttrService)) == NULL) return "no service";
  if (appbox_value_string(appbox_dictionary_get(item, kSecAttrAccessGroup)) == NULL) return "no access group";
  text = appbox_value_string(appbox_dictionary_get(item, kSecAttrAccessible));
  if (text == NULL || strcmp(text, kSecAttrAccessibleWhenUnlocked) != 0) return "wrong accessible";
  if (appbox_value_get_type(appbox_dictionary_get(item, kSecAttrCreationDate)) != APPBOX_VALUE_DATE ||
      appbox_value_get_type(appbox_dictionary_get(item, kSecAttrModificationDate)) != APPBOX_VALUE_DATE) {
    return "no dates";
  }
  if (appbox_dictionary_get(item, kSecAttrComment) != NULL) return "a comment nobody set";
  const appbox_value *data = appbox_dictionary_get(item, kSecValueData);
  if (with_data && !data_equals(data, secret)) return "data missing or wrong";
  if (!with_data && data != NULL) return "data that was not asked for";
  return NULL;
}

static void combos(void) {
  static const char *const accounts[] = {"a", "b"};
  static const char *const secrets[] = {"secret-a", "secret-b"};
  for (int i = 0; i < 2; i++) add_item("combo", accounts[i], secrets[i], i == 0 ? "Label A" : NULL);
  /* 0: key absent, 1: false, 2: true */
  static const char *const flag_names[] = {"absent", "false", "true"};
  static const char *const limits[] = {"absent", "one", "all", "1", "2"};
  for (int d = 0; d < 3; d++) {
    for (int a = 0; a < 3; a++) {
      for (int l = 0; l < 5; l++) {
        char label[128];
        snprintf(label, sizeof label, "combo data=%s attributes=%s limit=%s", flag_names[d], flag_names[a], limits[l]);
        appbox_value *query = query_for("combo", NULL);
        if (d > 0) appbox_dictionary_set_bool(query, kSecReturnData, d == 2);
        if (a > 0) appbox_dictionary_set_bool(query, kSecReturnAttributes, a == 2);
        if (l == 1) appbox_dictionary_set_string(query, kSecMatchLimit, kSecMatchLimitOne);
        if (l == 2) appbox_dictionary_set_string(query, kSecMatchLimit, kSecMatchLimitAll);
        if (l >= 3) appbox_dictionary_set_integer(query, kSecMatchLimit, l == 3 ? 1 : 2);
        appbox_value *result = NULL;
        appbox_status status = appbox_secitem_copy_matching(query, &result);
        appbox_value_free(query);
        int data = d == 2, attributes = a == 2, many = l == 2 || l == 4;
        const char *problem = NULL;
        if (status != errSecSuccess) {
          problem = "status";
        } else if (!data && !attributes) {
          if (result != NULL) problem = "a result nobody asked for";
        } else {
          int count = many ? 2 : 1;
          if (many && (appbox_value_get_type(result) != APPBOX_VALUE_ARRAY || appbox_value_count(result) != 2)) {
            problem = "not an array of 2";
          }
          for (int i = 0; problem == NULL && i < count; i++) {
            const appbox_value *item = many ? appbox_array_get(result, (size_t)i) : result;
            if (attributes) {
              problem = check_attributes(item, accounts[i], secrets[i], data);
              if (problem == NULL && i == 0) {
                const char *text = appbox_value_string(appbox_dictionary_get(item, kSecAttrLabel));
                if (text == NULL || strcmp(text, "Label A") != 0) problem = "label missing";
              }
            } else if (!data_equals(item, secrets[i])) {
              problem = "not the item's data";
            }
          }
        }
        report(label, problem == NULL, "%s (status %d)", problem, (int)status);
        appbox_value_free(result);
      }
    }
  }
  /* SecItemAdd's own results. */
  for (int d = 0; d < 2; d++) {
    for (int a = 0; a < 2; a++) {
      char account[32], label[96];
      snprintf(account, sizeof account, "added-%d%d", d, a);
      snprintf(label, sizeof label, "combo add data=%s attributes=%s", d ? "true" : "absent", a ? "true" : "absent");
      appbox_value *item = query_for("combo", account);
      appbox_dictionary_set_data(item, kSecValueData, "fresh", 5);
      if (d) appbox_dictionary_set_bool(item, kSecReturnData, 1);
      if (a) appbox_dictionary_set_bool(item, kSecReturnAttributes, 1);
      appbox_value *result = NULL;
      appbox_status status = appbox_secitem_add(item, &result);
      appbox_value_free(item);
      const char *problem = NULL;
      if (status != errSecSuccess) problem = "status";
      else if (!d && !a && result != NULL) problem = "a result nobody asked for";
      else if (a) problem = check_attributes(result, account, "fresh", d);
      else if (d && !data_equals(result, "fresh")) problem = "not the data";
      report(label, problem == NULL, "%s (status %d)", problem, (int)status);
      appbox_value_free(result);
    }
  }
  appbox_value *all = query_for("combo", NULL);
  appbox_status status = appbox_secitem_delete(all);
  report("combo cleanup", status == errSecSuccess, "status %d", (int)status);
  status = appbox_secitem_copy_matching(all, NULL);
  report("combo gone", status == errSecItemNotFound, "status %d", (int)status);
  appbox_value_free(all);
}

/* ---- threads and fork ---- */

typedef struct {
  int index;
  int count;
  int errors;
  char first_error[256];
} worker;

static void worker_error(worker *w, const char *step, appbox_status status) {
  if (w->errors++ == 0) {
    snprintf(w->first_error, sizeof w->first_error, "worker %d: %s: status %d (%s)", w->index, step, (int)status,
             appbox_secitem_message());
  }
}

static void *work(void *argument) {
  worker *w = argument;
  for (int j = 0; j < w->count; j++) {
    char account[64], secret[64], updated[64];
    snprintf(account, sizeof account, "w%d-%d", w->index, j);
    snprintf(secret, sizeof secret, "value-%d-%d", w->index, j);
    snprintf(updated, sizeof updated, "updated-%d-%d", w->index, j);
    appbox_status status = add_item("concurrent", account, secret, NULL);
    if (status != errSecSuccess) worker_error(w, "add", status);
    appbox_value *query = query_for("concurrent", account);
    appbox_dictionary_set_bool(query, kSecReturnData, 1);
    appbox_value *result = NULL;
    status = appbox_secitem_copy_matching(query, &result);
    if (status != errSecSuccess || !data_equals(result, secret)) worker_error(w, "read back", status);
    appbox_value_free(result);
    appbox_value *changes = appbox_dictionary_new();
    appbox_dictionary_set_data(changes, kSecValueData, updated, strlen(updated));
    appbox_value *match = query_for("concurrent", account);
    status = appbox_secitem_update(match, changes);
    if (status != errSecSuccess) worker_error(w, "update", status);
    appbox_value_free(changes);
    result = NULL;
    status = appbox_secitem_copy_matching(query, &result);
    if (status != errSecSuccess || !data_equals(result, updated)) worker_error(w, "read the update", status);
    appbox_value_free(result);
    status = appbox_secitem_delete(match);
    if (status != errSecSuccess) worker_error(w, "delete", status);
    status = appbox_secitem_copy_matching(query, NULL);
    if (status != errSecItemNotFound) worker_error(w, "gone", status);
    appbox_value_free(query);
    appbox_value_free(match);
  }
  return NULL;
}

static void threads(int count, int items, int base) {
  pthread_t ids[64];
  worker workers[64];
  if (count > 64) count = 64;
  for (int i = 0; i < count; i++) {
    memset(&workers[i], 0, sizeof workers[i]);
    workers[i].index = base + i;
    workers[i].count = items;
    pthread_create(&ids[i], NULL, work, &workers[i]);
  }
  int errors = 0;
  const char *first = NULL;
  for (int i = 0; i < count; i++) {
    pthread_join(ids[i], NULL);
    errors += workers[i].errors;
    if (first == NULL && workers[i].errors) first = workers[i].first_error;
  }
  char label[64];
  snprintf(label, sizeof label, "threads %d x %d", count, items);
  report(label, errors == 0, "%d errors, first: %s", errors, first ? first : "");
}

static void forked(int items) {
  /* A session first, so the child inherits one it must not use. */
  appbox_secitem_copy_matching(query_for("warm-up", "x"), NULL);
  fflush(stdout);
  pid_t child = fork();
  if (child == 0) {
    threads(2, items, 100);
    _exit(failures ? 1 : 0);
  }
  threads(2, items, 200);
  int status = 0;
  waitpid(child, &status, 0);
  report("fork", WIFEXITED(status) && WEXITSTATUS(status) == 0, "child exit status %d", status);
}

/* ---- raw sessions ---- */

static int door(void) {
  const char *text = getenv(APPBOX_SECITEM_FD_VARIABLE);
  return text ? atoi(text) : -1;
}

static int send_fds(int socket, const int *fds, int count, const void *bytes, size_t length) {
  struct iovec iov = {(void *)bytes, length};
  char space[CMSG_SPACE(sizeof(int) * 4)];
  memset(space, 0, sizeof space);
  struct msghdr message;
  memset(&message, 0, sizeof message);
  message.msg_iov = &iov;
  message.msg_iovlen = 1;
  if (count > 0) {
    message.msg_control = space;
    message.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)count);
    struct cmsghdr *header = CMSG_FIRSTHDR(&message);
    header->cmsg_level = SOL_SOCKET;
    header->cmsg_type = SCM_RIGHTS;
    header->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)count);
    memcpy(CMSG_DATA(header), fds, sizeof(int) * (size_t)count);
  }
  return sendmsg(socket, &message, MSG_NOSIGNAL) < 0 ? -1 : 0;
}

/* A new session: our end of a stream pair whose other end went through the door. */
static int open_session(void) {
  int pair[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) return -1;
  int sent = send_fds(door(), &pair[1], 1, "C", 1);
  close(pair[1]);
  if (sent != 0) {
    close(pair[0]);
    return -1;
  }
  struct timeval timeout = {20, 0};
  setsockopt(pair[0], SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  return pair[0];
}

static int write_all(int fd, const void *bytes, size_t length) {
  const uint8_t *p = bytes;
  while (length > 0) {
    ssize_t n = send(fd, p, length, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    p += n;
    length -= (size_t)n;
  }
  return 0;
}

static void header(uint8_t out[8], const char *magic, uint32_t length) {
  memcpy(out, magic, 4);
  out[4] = (uint8_t)(length >> 24);
  out[5] = (uint8_t)(length >> 16);
  out[6] = (uint8_t)(length >> 8);
  out[7] = (uint8_t)length;
}

static int send_frame(int fd, const char *magic, const void *body, size_t length) {
  uint8_t head[8];
  header(head, magic, (uint32_t)length);
  return write_all(fd, head, 8) == 0 && write_all(fd, body, length) == 0 ? 0 : -1;
}

/* Reads one reply frame: its status, and the message in `message`; -1 on end of file or error. */
static int read_reply(int fd, appbox_status *status, char *message, size_t size) {
  uint8_t head[8];
  size_t have = 0;
  while (have < 8) {
    ssize_t n = recv(fd, head + have, 8 - have, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    have += (size_t)n;
  }
  if (memcmp(head, "ASP1", 4) != 0) return -1;
  size_t length = ((size_t)head[4] << 24) | ((size_t)head[5] << 16) | ((size_t)head[6] << 8) | head[7];
  uint8_t *body = malloc(length + 1);
  have = 0;
  while (have < length) {
    ssize_t n = recv(fd, body + have, length - have, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      free(body);
      return -1;
    }
    have += (size_t)n;
  }
  appbox_value *reply = appbox_plist_decode(body, length);
  free(body);
  const appbox_value *code = appbox_dictionary_get(reply, "status");
  if (code == NULL) {
    appbox_value_free(reply);
    return -1;
  }
  *status = (appbox_status)appbox_value_integer(code);
  const char *text = appbox_value_string(appbox_dictionary_get(reply, "message"));
  if (message) snprintf(message, size, "%s", text ? text : "");
  appbox_value_free(reply);
  return 0;
}

/* The encoded request {operation, query}. */
static uint8_t *encode_request(const char *operation, appbox_value *query, size_t *length) {
  appbox_value *request = appbox_dictionary_new();
  appbox_dictionary_set_string(request, "operation", operation);
  appbox_dictionary_set(request, "query", query);
  uint8_t *bytes = NULL;
  appbox_plist_encode(request, &bytes, length);
  appbox_value_free(request);
  return bytes;
}

/* Whether `fd` still answers a valid request (a lookup of a missing item: -25300). */
static int session_answers(int fd) {
  size_t length;
  uint8_t *bytes = encode_request("SecItemCopyMatching", query_for("probe-alive", "x"), &length);
  appbox_status status = 0;
  int ok = send_frame(fd, "ASQ1", bytes, length) == 0 && read_reply(fd, &status, NULL, 0) == 0 &&
           status == errSecItemNotFound;
  free(bytes);
  return ok;
}

static int broker_answers(void) {
  int fd = open_session();
  int ok = fd >= 0 && session_answers(fd);
  if (fd >= 0) close(fd);
  return ok;
}

/* Sends `body` as a request frame on a new session; reports the status and whether the same
 * session still answers. */
static void expect_refusal(const char *label, const void *body, size_t length, appbox_status expected,
                           const char *in_message) {
  int fd = open_session();
  appbox_status status = 0;
  char message[512] = "";
  int replied = fd >= 0 && send_frame(fd, "ASQ1", body, length) == 0 && read_reply(fd, &status, message, sizeof message) == 0;
  int alive = replied && session_answers(fd);
  int named = in_message == NULL || strstr(message, in_message) != NULL;
  char full[128];
  snprintf(full, sizeof full, "hostile %s", label);
  report(full, replied && status == expected && alive && named, "replied=%d status=%d alive=%d message='%s'", replied,
         (int)status, alive, message);
  if (fd >= 0) close(fd);
}

/* A binary plist of `depth` nested one-element arrays (hand-built: the encoder refuses it). */
static uint8_t *deep_plist(int depth, size_t *length) {
  size_t size = 8 + (size_t)depth * 2 + 1 + (size_t)(depth + 1) * 2 + 32;
  uint8_t *p = calloc(1, size);
  memcpy(p, "bplist00", 8);
  size_t at = 8;
  size_t *offsets = calloc((size_t)depth + 1, sizeof *offsets);
  for (int i = 0; i < depth; i++) {
    offsets[i] = at;
    p[at++] = 0xA1;
    p[at++] = (uint8_t)(i + 1);
  }
  offsets[depth] = at;
  p[at++] = 0x08;
  size_t table = at;
  for (int i = 0; i <= depth; i++) {
    p[at++] = (uint8_t)(offsets[i] >> 8);
    p[at++] = (uint8_t)offsets[i];
  }
  uint8_t *trailer = p + at;
  trailer[6] = 2;
  trailer[7] = 1;
  trailer[15] = (uint8_t)(depth + 1);
  trailer[30] = (uint8_t)(table >> 8);
  trailer[31] = (uint8_t)table;
  *length = at + 32;
  free(offsets);
  return p;
}

/* Shared references: 12 levels of 16-element arrays, each element the next level (16^12
 * values when expanded, in a few hundred bytes). */
static uint8_t *bomb_plist(size_t *length) {
  int levels = 12, width = 16;
  size_t size = 8 + (size_t)levels * (1 + (size_t)width) + 1 + (size_t)(levels + 1) * 2 + 32;
  uint8_t *p = calloc(1, size);
  memcpy(p, "bplist00", 8);
  size_t at = 8, offsets[16];
  for (int i = 0; i < levels; i++) {
    offsets[i] = at;
    p[at++] = 0xAF; /* an array whose count follows as an integer object */
    p[at++] = 0x10;
    p[at++] = (uint8_t)width;
    for (int k = 0; k < width; k++) p[at++] = (uint8_t)(i + 1);
  }
  offsets[levels] = at;
  p[at++] = 0x09;
  size_t table = at;
  for (int i = 0; i <= levels; i++) {
    p[at++] = (uint8_t)(offsets[i] >> 8);
    p[at++] = (uint8_t)offsets[i];
  }
  uint8_t *trailer = p + at;
  trailer[6] = 2;
  trailer[7] = 1;
  trailer[15] = (uint8_t)(levels + 1);
  trailer[30] = (uint8_t)(table >> 8);
  trailer[31] = (uint8_t)table;
  *length = at + 32;
  return p;
}

static int interleave_fd = -1;

/* Sends 20 requests of 300 KiB each on the shared session, ignoring every error. */
static void *interleave(void *unused) {
  (void)unused;
  size_t size = 300u << 10;
  char *blob = calloc(1, size);
  appbox_value *query = query_for("interleave", "x");
  appbox_dictionary_set_data(query, kSecValueData, blob, size);
  size_t length;
  uint8_t *bytes = encode_request("SecItemAdd", query, &length);
  for (int i = 0; i < 20; i++) {
    if (send_frame(interleave_fd, "ASQ1", bytes, length) != 0) break;
  }
  free(bytes);
  free(blob);
  return NULL;
}

/* Reads the shared session until the broker ends it. */
static void *drain(void *unused) {
  (void)unused;
  char buffer[65536];
  while (recv(interleave_fd, buffer, sizeof buffer, 0) > 0) {
  }
  return NULL;
}

static void hostile(void) {
  const char *garbage = "hello, this is not a property list";
  expect_refusal("garbage", garbage, strlen(garbage), errSecParam, "not a binary property list");

  size_t length;
  uint8_t *valid = encode_request("SecItemCopyMatching", query_for("svc", "acct"), &length);
  expect_refusal("truncated-plist", valid, length / 2, errSecParam, "not a valid property list");
  expect_refusal("empty-frame", valid, 0, errSecParam, NULL);
  free(valid);

  appbox_value *array = appbox_array_new();
  uint8_t *bytes;
  appbox_plist_encode(array, &bytes, &length);
  appbox_value_free(array);
  expect_refusal("not-a-dictionary", bytes, length, errSecParam, "not a dictionary");
  free(bytes);

  appbox_value *query = query_for("svc", "acct");
  appbox_dictionary_set_string(query, "bogus", "x");
  bytes = encode_request("SecItemCopyMatching", query, &length);
  expect_refusal("unknown-key", bytes, length, errSecParam, "'bogus'");
  free(bytes);

  query = query_for(NULL, "acct");
  appbox_dictionary_set_integer(query, kSecAttrService, 7);
  bytes = encode_request("SecItemCopyMatching", query, &length);
  expect_refusal("wrong-type", bytes, length, errSecParam, "must be a string");
  free(bytes);

  query = query_for("svc", "acct");
  bytes = encode_request("SecItemFrobnicate", query, &length);
  expect_refusal("unknown-operation", bytes, length, errSecParam, "operation must be one of");
  free(bytes);

  query = appbox_dictionary_new();
  appbox_dictionary_set_string(query, kSecAttrService, "svc");
  bytes = encode_request("SecItemCopyMatching", query, &length);
  expect_refusal("no-class", bytes, length, errSecParam, "needs kSecClass");
  free(bytes);

  bytes = deep_plist(200, &length);
  expect_refusal("deep", bytes, length, errSecParam, NULL);
  free(bytes);

  bytes = bomb_plist(&length);
  expect_refusal("shared-reference-bomb", bytes, length, errSecParam, NULL);
  free(bytes);

  /* An item bigger than the keychain takes (but within the frame limit). */
  size_t big = (1u << 20) + 1;
  char *blob = calloc(1, big);
  query = query_for("svc", "big");
  appbox_dictionary_set_data(query, kSecValueData, blob, big);
  bytes = encode_request("SecItemAdd", query, &length);
  expect_refusal("oversized-item", bytes, length, errSecParam, "1048576");
  free(bytes);
  free(blob);

  /* A frame longer than the broker reads: refused, and the body is skipped. */
  {
    int fd = open_session();
    size_t huge = 5u << 20;
    uint8_t head[8];
    header(head, "ASQ1", (uint32_t)huge);
    char *zeros = calloc(1, huge);
    appbox_status status = 0;
    char message[256] = "";
    int ok = fd >= 0 && write_all(fd, head, 8) == 0;
    /* The broker answers as soon as it reads the header; read the reply while sending. */
    ok = ok && read_reply(fd, &status, message, sizeof message) == 0;
    ok = ok && write_all(fd, zeros, huge) == 0;
    int alive = ok && session_answers(fd);
    report("hostile huge-frame", ok && status == errSecParam && alive && strstr(message, "MiB"),
           "ok=%d status=%d alive=%d message='%s'", ok, (int)status, alive, message);
    free(zeros);
    if (fd >= 0) close(fd);
  }

  /* A frame cut short: that session ends, the broker stays. */
  {
    int fd = open_session();
    uint8_t head[8];
    header(head, "ASQ1", 1000);
    int ok = fd >= 0 && write_all(fd, head, 8) == 0 && write_all(fd, "bplist00", 8) == 0;
    shutdown(fd, SHUT_WR);
    char byte;
    ssize_t n = recv(fd, &byte, 1, 0);
    close(fd);
    report("hostile truncated-frame", ok && n == 0 && broker_answers(), "ok=%d read=%zd", ok, n);
  }

  /* Not a request frame: the broker closes that session. */
  {
    int fd = open_session();
    int ok = fd >= 0;
    /* The broker may close the session as soon as it has read the magic, before the body is
     * written: a write that fails with EPIPE or ECONNRESET is that close, seen early. */
    int sent = ok && send_frame(fd, "XXXX", "abc", 3) == 0;
    int closed_early = ok && !sent && (errno == EPIPE || errno == ECONNRESET);
    ok = ok && (sent || closed_early);
    char byte;
    /* Closed with our bytes unread: end of file, or ECONNRESET. */
    ssize_t n = closed_early ? 0 : recv(fd, &byte, 1, 0);
    int closed = n == 0 || (n < 0 && errno == ECONNRESET);
    close(fd);
    report("hostile bad-magic", ok && closed && broker_answers(), "ok=%d read=%zd", ok, n);
  }

  /* Both ends of one pair given to the broker: its reply would come back to it as a request.
   * A reply frame is not a request frame, so that session ends instead of looping. */
  {
    int pair[2];
    socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair);
    send_fds(door(), &pair[0], 1, "C", 1);
    send_fds(door(), &pair[1], 1, "C", 1);
    size_t n;
    uint8_t *request = encode_request("SecItemCopyMatching", query_for("loop", "x"), &n);
    send_frame(pair[1], "ASQ1", request, n);
    free(request);
    close(pair[0]);
    close(pair[1]);
    usleep(200000);
    report("hostile loop", broker_answers(), "the broker stopped answering");
  }

  /* Junk through the door: no descriptor, a pipe, the door itself, two descriptors, an oversized
   * message. Each is ignored (its descriptors closed); the door keeps working. */
  {
    int pipe_fds[2];
    pipe(pipe_fds);
    int d = door();
    int ok = send_fds(d, NULL, 0, "no descriptor", 13) == 0;
    ok = ok && send_fds(d, &pipe_fds[0], 1, "C", 1) == 0;
    ok = ok && send_fds(d, &d, 1, "C", 1) == 0;
    int pair[2], pair2[2];
    socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair);
    socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair2);
    int two[2] = {pair[1], pair2[1]};
    ok = ok && send_fds(d, two, 2, "C", 1) == 0;
    char *large = calloc(1, 60000);
    int pair3[2];
    socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair3);
    ok = ok && send_fds(d, &pair3[1], 1, large, 60000) == 0;
    free(large);
    /* The refused sessions must see their ends closed by the broker (end of file), not served. */
    struct timeval timeout = {10, 0};
    int refused = 1;
    for (int i = 0; i < 3; i++) {
      int mine = i == 0 ? pair[0] : i == 1 ? pair2[0] : pair3[0];
      int theirs = i == 0 ? pair[1] : i == 1 ? pair2[1] : pair3[1];
      close(theirs);
      setsockopt(mine, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
      char byte;
      if (recv(mine, &byte, 1, 0) != 0) refused = 0; /* end of file: the broker closed its end */
      close(mine);
    }
    /* The pipe's write end: the broker closed its copy of the read end, so writing still works
     * only while we hold the read end; just close both. */
    close(pipe_fds[0]);
    close(pipe_fds[1]);
    report("hostile door-junk", ok && refused && broker_answers(), "sent=%d refused=%d", ok, refused);
  }

  /* Two threads writing whole frames on one session without a lock (what the library's mutex
   * prevents): their bytes interleave, so the broker sees misframed requests and ends that
   * session, or answers garbled ones with errSecParam. Either way it keeps answering others. */
  {
    interleave_fd = open_session();
    struct timeval timeout = {10, 0};
    setsockopt(interleave_fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof timeout);
    pthread_t writers[2], reader;
    pthread_create(&reader, NULL, drain, NULL); /* replies must be read, or the broker waits */
    for (int i = 0; i < 2; i++) pthread_create(&writers[i], NULL, interleave, NULL);
    for (int i = 0; i < 2; i++) pthread_join(writers[i], NULL);
    shutdown(interleave_fd, SHUT_WR);
    pthread_join(reader, NULL);
    close(interleave_fd);
    appbox_value *leftover = query_for("interleave", NULL);
    appbox_secitem_delete(leftover);
    appbox_value_free(leftover);
    report("hostile interleaved-writers", broker_answers(), "the broker stopped answering");
  }

  /* A stalled session (half a header) does not hold up others. */
  {
    int stalled = open_session();
    int ok = stalled >= 0 && write_all(stalled, "ASQ", 3) == 0;
    report("hostile stalled-session", ok && broker_answers(), "ok=%d", ok);
    close(stalled);
  }

  /* More sessions than the broker serves at once: the first ones answer; the rest wait their
   * turn in the door and are served once others close. */
  {
    int fds[80], opened = 0;
    for (int i = 0; i < 80; i++) {
      fds[i] = open_session();
      if (fds[i] >= 0) opened++;
    }
    int first = session_answers(fds[0]);
    for (int i = 0; i < 40; i++) close(fds[i]);
    int last = session_answers(fds[79]);
    for (int i = 40; i < 80; i++) close(fds[i]);
    report("hostile many-sessions", opened == 80 && first && last, "opened=%d first=%d last=%d", opened, first, last);
  }
}

/* ---- identity ---- */

static void forge(const char *other_group) {
  /* Keys claiming an identity are not part of the protocol. */
  static const char *const claims[] = {"bundleIdentifier", "application-identifier", "team", "client", "uid"};
  for (size_t i = 0; i < sizeof claims / sizeof *claims; i++) {
    appbox_value *query = query_for("forge", "x");
    appbox_dictionary_set_string(query, claims[i], "com.example.journal");
    appbox_value *result = NULL;
    appbox_status status = appbox_secitem_copy_matching(query, &result);
    char label[96];
    snprintf(label, sizeof label, "forge query-key %s", claims[i]);
    report(label, status == errSecParam && result == NULL, "status %d", (int)status);
    appbox_value_free(query);
    appbox_value_free(result);
    /* ...and at the top of the request. */
    appbox_value *request = appbox_dictionary_new();
    appbox_dictionary_set_string(request, "operation", "SecItemCopyMatching");
    appbox_dictionary_set(request, "query", query_for("forge", "x"));
    appbox_dictionary_set_string(request, claims[i], "com.example.journal");
    uint8_t *bytes;
    size_t length;
    appbox_plist_encode(request, &bytes, &length);
    appbox_value_free(request);
    uint8_t *reply = NULL;
    size_t reply_length = 0;
    status = 0;
    if (appbox_secitem_exchange_raw(bytes, length, &reply, &reply_length) == 0) {
      appbox_value *answer = appbox_plist_decode(reply, reply_length);
      status = (appbox_status)appbox_value_integer(appbox_dictionary_get(answer, "status"));
      appbox_value_free(answer);
    }
    free(reply);
    free(bytes);
    snprintf(label, sizeof label, "forge request-key %s", claims[i]);
    report(label, status == errSecParam, "status %d", (int)status);
  }
  /* Another team's group: refused, for every operation. */
  static const char *const operations[] = {"add", "copy", "update", "delete"};
  for (int op = 0; op < 4; op++) {
    appbox_value *query = query_for("forge", "x");
    appbox_dictionary_set_string(query, kSecAttrAccessGroup, other_group);
    appbox_status status;
    appbox_value *result = NULL;
    if (op == 0) {
      appbox_dictionary_set_data(query, kSecValueData, "x", 1);
      status = appbox_secitem_add(query, NULL);
    } else if (op == 1) {
      appbox_dictionary_set_bool(query, kSecReturnData, 1);
      status = appbox_secitem_copy_matching(query, &result);
    } else if (op == 2) {
      appbox_value *changes = appbox_dictionary_new();
      appbox_dictionary_set_data(changes, kSecValueData, "y", 1);
      status = appbox_secitem_update(query, changes);
      appbox_value_free(changes);
    } else {
      status = appbox_secitem_delete(query);
    }
    char label[64];
    snprintf(label, sizeof label, "forge group %s", operations[op]);
    report(label, status == errSecMissingEntitlement && result == NULL, "status %d", (int)status);
    appbox_value_free(query);
    appbox_value_free(result);
  }
  /* What this app sees: its own groups only. */
  appbox_value *query = query_for(NULL, NULL);
  appbox_dictionary_set_bool(query, kSecReturnAttributes, 1);
  appbox_dictionary_set_string(query, kSecMatchLimit, kSecMatchLimitAll);
  appbox_value *result = NULL;
  appbox_status status = appbox_secitem_copy_matching(query, &result);
  appbox_value_free(query);
  printf("visible-groups");
  for (size_t i = 0; i < appbox_value_count(result); i++) {
    const appbox_value *item = appbox_array_get(result, i);
    printf(" %s/%s", appbox_value_string(appbox_dictionary_get(item, kSecAttrAccessGroup)),
           appbox_value_string(appbox_dictionary_get(item, kSecAttrService)));
  }
  printf(" (status %d)\n", (int)status);
  appbox_value_free(result);
}

/* ---- descriptors and processes ---- */

static void descriptors(void) {
  printf("open-descriptors");
  for (int fd = 0; fd < 65536; fd++) {
    if (fcntl(fd, F_GETFD) >= 0) printf(" %d", fd);
  }
  printf("\n");
  int type = 0;
  socklen_t size = sizeof type;
  int d = door();
  int is_door = getsockopt(d, SOL_SOCKET, SO_TYPE, &type, &size) == 0 && type == SOCK_SEQPACKET;
  report("door-is-seqpacket", is_door, "fd %d type %d", d, type);
  printf("visible-processes");
  DIR *proc = opendir("/proc");
  struct dirent *entry;
  while (proc && (entry = readdir(proc)) != NULL) {
    if (entry->d_name[0] < '0' || entry->d_name[0] > '9') continue;
    char path[300];
    snprintf(path, sizeof path, "/proc/%s", entry->d_name);
    struct stat st;
    if (stat(path, &st) == 0) printf(" %s:%u", entry->d_name, (unsigned)st.st_uid);
  }
  if (proc) closedir(proc);
  printf("\n");
}

static void reach(int count, char **pids) {
  for (int i = 0; i < count; i++) {
    char path[64], target[256] = "";
    snprintf(path, sizeof path, "/proc/%s/fd/3", pids[i]);
    int fd = open(path, O_RDWR);
    ssize_t n = readlink(path, target, sizeof target - 1);
    int reached = fd >= 0 || n >= 0;
    printf("reach %s %s%s%s\n", pids[i], reached ? "REACHED " : "refused ", reached ? target : strerror(errno), "");
    if (fd >= 0) close(fd);
  }
}

/* ---- benchmark ---- */

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void bench(int count, double seconds) {
  char account[64], secret[40];
  double start = now();
  int added = 0;
  for (int i = 0; i < count; i++) {
    snprintf(account, sizeof account, "item-%06d", i);
    snprintf(secret, sizeof secret, "secret-%06d-xxxxxxxxxxxxxxxxxxxx", i);
    appbox_status status = add_item("bench", account, secret, NULL);
    if (status == errSecSuccess) added++;
    else if (status != errSecDuplicateItem) report("bench add", 0, "status %d: %s", (int)status, appbox_secitem_message());
  }
  double fill = now() - start;
  if (added > 0) printf("bench adds=%d seconds=%.3f adds_per_second=%.0f\n", added, fill, added / fill);
  unsigned seed = 12345;
  int trips = 0, wrong = 0;
  start = now();
  double elapsed = 0;
  while (elapsed < seconds) {
    for (int k = 0; k < 100; k++) {
      seed = seed * 1103515245u + 12345u;
      int i = (int)((seed >> 8) % (unsigned)count);
      snprintf(account, sizeof account, "item-%06d", i);
      snprintf(secret, sizeof secret, "secret-%06d-xxxxxxxxxxxxxxxxxxxx", i);
      appbox_value *query = query_for("bench", account);
      appbox_dictionary_set_bool(query, kSecReturnData, 1);
      appbox_value *result = NULL;
      if (appbox_secitem_copy_matching(query, &result) != errSecSuccess || !data_equals(result, secret)) wrong++;
      appbox_value_free(result);
      appbox_value_free(query);
      trips++;
    }
    elapsed = now() - start;
  }
  printf("bench items=%d round_trips=%d seconds=%.3f round_trips_per_second=%.0f wrong=%d\n", count, trips, elapsed,
         trips / elapsed, wrong);
  if (wrong) failures++;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc < 2) {
    fprintf(stderr, "usage: appbox-secitem-probe combos|threads N COUNT|fork COUNT|hostile|forge GROUP|descriptors|"
                    "reach PID...|bench COUNT SECONDS\n");
    return 64;
  }
  const char *mode = argv[1];
  if (strcmp(mode, "combos") == 0) combos();
  else if (strcmp(mode, "threads") == 0 && argc == 4) threads(atoi(argv[2]), atoi(argv[3]), 0);
  else if (strcmp(mode, "fork") == 0 && argc == 3) forked(atoi(argv[2]));
  else if (strcmp(mode, "hostile") == 0) hostile();
  else if (strcmp(mode, "forge") == 0 && argc == 3) forge(argv[2]);
  else if (strcmp(mode, "descriptors") == 0) descriptors();
  else if (strcmp(mode, "reach") == 0) reach(argc - 2, argv + 2);
  else if (strcmp(mode, "bench") == 0 && argc == 4) bench(atoi(argv[2]), atof(argv[3]));
  else {
    fprintf(stderr, "appbox-secitem-probe: unknown mode or arguments\n");
    return 64;
  }
  printf("done failures=%d\n", failures);
  return failures ? 1 : 0;
}
