/* The session with the broker and the four SecItem calls.
 *
 * Connecting: the inherited descriptor ($APPBOX_SECITEM_FD) is a SOCK_SEQPACKET socket, the
 * broker's door. A client makes a socketpair and sends one end through the door (one
 * message carrying that descriptor, SCM_RIGHTS); the broker serves the other end as a
 * private session, with the identity of the app whose door it came through. One process
 * keeps one session; a mutex serializes each request/reply pair on it, so threads never
 * read each other's replies; a process made by fork() notices that the session belongs to
 * its parent and opens its own, so parent and child never share one either.
 *
 * A request is a frame ("ASQ1", 32-bit big-endian length, a binary property list):
 *   { "operation": "SecItemAdd" | "SecItemCopyMatching" | "SecItemUpdate" | "SecItemDelete",
 *     "query": { kSecClass: ..., ... },  "attributesToUpdate": { ... }  (SecItemUpdate only) }
 * and its reply ("ASP1", length, plist): { "status": OSStatus, "result": ..., "message": ... }. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "appbox_secitem.h"
#include "internal.h"

static pthread_mutex_t session_lock = PTHREAD_MUTEX_INITIALIZER;
static int session_fd = -1;
static pid_t session_owner = 0;
static int chosen_door = -1; /* from appbox_secitem_use_descriptor; -1: the environment's */

static __thread char last_message[512];

static void set_message(const char *text) { snprintf(last_message, sizeof last_message, "%s", text); }

const char *appbox_secitem_message(void) { return last_message; }

const char *appbox_secitem_status_name(appbox_status status) {
  switch (status) {
    case errSecSuccess: return "errSecSuccess";
    case errSecIO: return "errSecIO";
    case errSecDiskFull: return "errSecDiskFull";
    case errSecParam: return "errSecParam";
    case errSecAllocate: return "errSecAllocate";
    case errSecInternalComponent: return "errSecInternalComponent";
    case errSecNotAvailable: return "errSecNotAvailable";
    case errSecAuthFailed: return "errSecAuthFailed";
    case errSecDuplicateItem: return "errSecDuplicateItem";
    case errSecItemNotFound: return "errSecItemNotFound";
    case errSecInteractionNotAllowed: return "errSecInteractionNotAllowed";
    case errSecDecode: return "errSecDecode";
    case errSecMissingEntitlement: return "errSecMissingEntitlement";
    default: return "unknown status";
  }
}

/* The door's descriptor, or -1 (errno ENOENT: no variable; EBADF: not open). */
static int door_descriptor(void) {
  int fd = chosen_door;
  if (fd < 0) {
    const char *text = getenv(APPBOX_SECITEM_FD_VARIABLE);
    if (text == NULL || *text == 0) {
      errno = ENOENT;
      return -1;
    }
    char *end = NULL;
    long number = strtol(text, &end, 10);
    if (*end != 0 || number < 0 || number > 1 << 20) {
      errno = EBADF;
      return -1;
    }
    fd = (int)number;
  }
  if (fcntl(fd, F_GETFD) < 0) return -1;
  return fd;
}

void appbox_secitem_use_descriptor(int fd) {
  pthread_mutex_lock(&session_lock);
  if (session_fd >= 0) close(session_fd);
  session_fd = -1;
  chosen_door = fd;
  pthread_mutex_unlock(&session_lock);
}

/* Opens a session through the door. Called with the lock held. 0, or -1 with errno. */
static int connect_session(void) {
  int door = door_descriptor();
  if (door < 0) return -1;
  int pair[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) return -1;
  char byte = 'C';
  struct iovec iov = {&byte, 1};
  union {
    struct cmsghdr header;
    char space[CMSG_SPACE(sizeof(int))];
  } control;
  memset(&control, 0, sizeof control);
  struct msghdr message;
  memset(&message, 0, sizeof message);
  message.msg_iov = &iov;
  message.msg_iovlen = 1;
  message.msg_control = control.space;
  message.msg_controllen = sizeof control.space;
  struct cmsghdr *header = CMSG_FIRSTHDR(&message);
  header->cmsg_level = SOL_SOCKET;
  header->cmsg_type = SCM_RIGHTS;
  header->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(header), &pair[1], sizeof(int));
  ssize_t sent;
  do {
    sent = sendmsg(door, &message, MSG_NOSIGNAL);
  } while (sent < 0 && errno == EINTR);
  int saved = errno;
  close(pair[1]);
  if (sent != 1) {
    close(pair[0]);
    errno = sent < 0 ? saved : EIO;
    return -1;
  }
  session_fd = pair[0];
  session_owner = getpid();
  return 0;
}

static int write_all(int fd, const uint8_t *bytes, size_t length) {
  while (length > 0) {
    ssize_t written = send(fd, bytes, length, MSG_NOSIGNAL);
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0) return -1;
    bytes += written;
    length -= (size_t)written;
  }
  return 0;
}

static int read_exact(int fd, uint8_t *bytes, size_t length) {
  while (length > 0) {
    ssize_t count = recv(fd, bytes, length, 0);
    if (count < 0 && errno == EINTR) continue;
    if (count == 0) errno = ECONNRESET;
    if (count <= 0) return -1;
    bytes += count;
    length -= (size_t)count;
  }
  return 0;
}

static void frame_header(uint8_t header[APPBOX_FRAME_HEADER], const char *magic, size_t length) {
  memcpy(header, magic, 4);
  header[4] = (uint8_t)(length >> 24);
  header[5] = (uint8_t)(length >> 16);
  header[6] = (uint8_t)(length >> 8);
  header[7] = (uint8_t)length;
}

/* Sends one request frame and reads its reply, on this process's session (opened or
 * reopened as needed). A failure to send on a session that already existed (the broker
 * closed it) is retried once on a new one: the broker did not get the request. */
int appbox_secitem_exchange_raw(const uint8_t *request, size_t length, uint8_t **reply, size_t *reply_length) {
  if (length > 0xFFFFFFFFu) {
    errno = EMSGSIZE;
    return -1;
  }
  uint8_t header[APPBOX_FRAME_HEADER];
  frame_header(header, APPBOX_REQUEST_MAGIC, length);
  pthread_mutex_lock(&session_lock);
  int result = -1;
  if (session_fd >= 0 && session_owner != getpid()) {
    close(session_fd); /* the parent's session, inherited through fork(): not ours to use */
    session_fd = -1;
  }
  for (int attempt = 0; attempt < 2; attempt++) {
    int fresh = session_fd < 0;
    if (fresh && connect_session() != 0) break;
    if (write_all(session_fd, header, sizeof header) == 0 && write_all(session_fd, request, length) == 0) {
      uint8_t answer[APPBOX_FRAME_HEADER];
      if (read_exact(session_fd, answer, sizeof answer) == 0) {
        size_t size = ((size_t)answer[4] << 24) | ((size_t)answer[5] << 16) | ((size_t)answer[6] << 8) | answer[7];
        if (memcmp(answer, APPBOX_REPLY_MAGIC, 4) != 0 || size > APPBOX_MAX_REPLY) {
          errno = EPROTO;
        } else {
          uint8_t *body = malloc(size > 0 ? size : 1);
          if (body == NULL) {
            errno = ENOMEM;
          } else if (read_exact(session_fd, body, size) == 0) {
            *reply = body;
            *reply_length = size;
            result = 0;
          } else {
            free(body);
          }
        }
      }
      if (result != 0) {
        int saved = errno;
        close(session_fd);
        session_fd = -1;
        errno = saved;
      }
      break; /* sent: never sent twice, whatever happened to the reply */
    }
    int saved = errno;
    close(session_fd);
    session_fd = -1;
    errno = saved;
    if (fresh) break;
  }
  pthread_mutex_unlock(&session_lock);
  return result;
}

/* A dictionary that borrows its entries (never freed with appbox_value_free). */
typedef struct {
  appbox_value value;
  appbox_value *keys[3];
  appbox_value *items[3];
} borrowed_dictionary;

static appbox_value borrowed_string(const char *text) {
  appbox_value value;
  memset(&value, 0, sizeof value);
  value.type = APPBOX_VALUE_STRING;
  value.bytes = (uint8_t *)text;
  value.length = strlen(text);
  return value;
}

static appbox_status call(const char *operation, const appbox_value *query, const appbox_value *changes,
                          appbox_value **result) {
  last_message[0] = 0;
  if (result != NULL) *result = NULL;
  if (query == NULL || query->type != APPBOX_VALUE_DICTIONARY ||
      (changes != NULL && changes->type != APPBOX_VALUE_DICTIONARY)) {
    set_message("the query (and the attributes to update) must be dictionaries");
    return errSecParam;
  }
  appbox_value operation_key = borrowed_string("operation");
  appbox_value operation_value = borrowed_string(operation);
  appbox_value query_key = borrowed_string("query");
  appbox_value changes_key = borrowed_string("attributesToUpdate");
  borrowed_dictionary request;
  memset(&request, 0, sizeof request);
  request.value.type = APPBOX_VALUE_DICTIONARY;
  request.value.keys = request.keys;
  request.value.items = request.items;
  request.keys[0] = &operation_key;
  request.items[0] = &operation_value;
  request.keys[1] = &query_key;
  request.items[1] = (appbox_value *)query;
  request.value.count = 2;
  if (changes != NULL) {
    request.keys[2] = &changes_key;
    request.items[2] = (appbox_value *)changes;
    request.value.count = 3;
  }
  request.value.capacity = 3;
  uint8_t *bytes = NULL;
  size_t length = 0;
  if (appbox_plist_encode(&request.value, &bytes, &length) != 0) {
    set_message("the request could not be encoded (out of memory, or nested too deep)");
    return errSecParam;
  }
  if (length > APPBOX_MAX_REQUEST) {
    free(bytes);
    set_message("the request is larger than the broker accepts (4 MiB)");
    return errSecParam;
  }
  uint8_t *reply = NULL;
  size_t reply_length = 0;
  int exchanged = appbox_secitem_exchange_raw(bytes, length, &reply, &reply_length);
  int saved = errno;
  free(bytes);
  if (exchanged != 0) {
    if (saved == ENOENT || saved == EBADF) {
      snprintf(last_message, sizeof last_message,
               "no keychain broker: %s is %s (run this inside 'appbox run' or 'appbox launch')",
               APPBOX_SECITEM_FD_VARIABLE, saved == ENOENT ? "not set" : "not an open descriptor");
      return errSecNotAvailable;
    }
    snprintf(last_message, sizeof last_message, "the keychain broker could not be reached: %s", strerror(saved));
    return errSecIO;
  }
  appbox_value *answer = appbox_plist_decode(reply, reply_length);
  free(reply);
  const appbox_value *status = appbox_dictionary_get(answer, "status");
  if (status == NULL || status->type != APPBOX_VALUE_INTEGER) {
    appbox_value_free(answer);
    set_message("the keychain broker sent a malformed reply");
    return errSecIO;
  }
  appbox_status code = (appbox_status)status->integer;
  const char *message = appbox_value_string(appbox_dictionary_get(answer, "message"));
  if (message != NULL) set_message(message);
  if (result != NULL && answer->count > 0) {
    /* Take the result out of the reply instead of copying it. */
    for (size_t i = 0; i < answer->count; i++) {
      if (strcmp((const char *)answer->keys[i]->bytes, "result") == 0) {
        *result = answer->items[i];
        answer->items[i] = appbox_bool_new(0);
        break;
      }
    }
  }
  appbox_value_free(answer);
  return code;
}

appbox_status appbox_secitem_add(const appbox_value *attributes, appbox_value **result) {
  return call("SecItemAdd", attributes, NULL, result);
}

appbox_status appbox_secitem_copy_matching(const appbox_value *query, appbox_value **result) {
  return call("SecItemCopyMatching", query, NULL, result);
}

appbox_status appbox_secitem_update(const appbox_value *query, const appbox_value *attributes_to_update) {
  if (attributes_to_update == NULL) {
    last_message[0] = 0;
    set_message("SecItemUpdate needs the attributes to update");
    return errSecParam;
  }
  return call("SecItemUpdate", query, attributes_to_update, NULL);
}

appbox_status appbox_secitem_delete(const appbox_value *query) { return call("SecItemDelete", query, NULL, NULL); }
