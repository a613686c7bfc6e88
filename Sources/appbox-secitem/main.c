/* appbox-secitem: the keychain from shell scripts inside the sandbox.
 *
 *   appbox-secitem add    --service S --account A (--data D | --data-file F) [--class C] [--group G]
 *                         [--label L] [--comment C] [--accessible A]
 *   appbox-secitem get    [--service S] [--account A] [--class C] [--group G]
 *                         [--return data|attributes|both|none] [--limit one|all|N] [--json]
 *   appbox-secitem update --service S --account A [--class C] [--group G]
 *                         [--data D | --data-file F] [--label L] [--comment C]
 *   appbox-secitem delete --service S --account A [--class C] [--group G]
 *   appbox-secitem list   [--class C] [--group G] [--json]
 *
 * Each command is one SecItem call through the broker of the supervising `appbox run` or
 * `appbox launch` (libCSecItem, over the descriptor APPBOX_SECITEM_FD names). `get` prints
 * the data as stored (no newline added) when it asks for the data of one item, and JSON
 * otherwise (or with --json): an object per item (class, service, account, accessGroup,
 * label, comment, accessible, created, modified, and data in base64), an array of them with
 * a limit other than one, a base64 string for data alone. `list` prints attributes, never
 * data. Failures print one line on stderr and exit as `appbox keychain` does: 64 usage or
 * errSecParam, 65 errSecDecode, 66 errSecItemNotFound, 69 locked device (errSecInteraction-
 * NotAllowed), no passcode (errSecAuthFailed) or no broker, 73 errSecDuplicateItem or the app's
 * keychain quota used up (errSecDiskFull), 74 I/O,
 * 77 errSecMissingEntitlement.
 *
 * Plain C, linked statically: it runs inside the jail, where only /usr exists.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "appbox_secitem.h"

/* See Sources/appbox-sandbox/main.c: SwiftPM links executables with the Swift driver, whose
 * start-up object expects these two; this program has no Swift code. */
void swift_addNewDSOImage(const void *image);
void swift_addNewDSOImage(const void *image) { (void)image; }
int _swift_backtrace_isThunkFunction(const char *name);
int _swift_backtrace_isThunkFunction(const char *name) {
  (void)name;
  return 0;
}

#define MAX_DATA (1 << 20)

static const char *usage_text =
    "usage: appbox-secitem add --service S --account A (--data D | --data-file F) [--class generic|internet]\n"
    "                          [--group G] [--label L] [--comment C] [--accessible A]\n"
    "       appbox-secitem get [--service S] [--account A] [--class C] [--group G]\n"
    "                          [--return data|attributes|both|none] [--limit one|all|N] [--json]\n"
    "       appbox-secitem update --service S --account A [--class C] [--group G]\n"
    "                          [--data D | --data-file F] [--label L] [--comment C]\n"
    "       appbox-secitem delete --service S --account A [--class C] [--group G]\n"
    "       appbox-secitem list [--class C] [--group G] [--json]\n"
    "\n"
    "The app's keychain, from inside its sandbox: each command is one SecItem call through the\n"
    "broker of the supervising 'appbox run' or 'appbox launch' (descriptor $APPBOX_SECITEM_FD),\n"
    "with the app's own access groups. get prints the data as stored for one item, JSON otherwise\n"
    "(or with --json); list prints attributes, never data. --data-file - reads the secret from\n"
    "standard input (--data shows in the process list). A (--accessible) is when-unlocked (the\n"
    "default), after-first-unlock, when-passcode-set-this-device-only, when-unlocked-this-device-only\n"
    "or after-first-unlock-this-device-only.\n"
    "Exit status: 0 ok, 64 usage or errSecParam, 65 errSecDecode, 66 errSecItemNotFound, 69 device\n"
    "locked, no passcode or no broker, 73 errSecDuplicateItem or quota used up (errSecDiskFull), 74 I/O,\n"
    "77 errSecMissingEntitlement.\n";

static void fail(int status, const char *format, ...) {
  char line[1024];
  va_list args;
  va_start(args, format);
  vsnprintf(line, sizeof line, format, args);
  va_end(args);
  dprintf(2, "appbox-secitem: %s\n", line);
  exit(status);
}

static void usage(const char *problem) {
  dprintf(2, "appbox-secitem: %s\n%s", problem, usage_text);
  exit(64);
}

typedef struct {
  const char *service, *account, *class_name, *group, *label, *comment, *accessible;
  const char *data, *data_file, *returns, *limit;
  int json;
} options;

static const char *const accessible_names[][2] = {
    {"when-unlocked", kSecAttrAccessibleWhenUnlocked},
    {"after-first-unlock", kSecAttrAccessibleAfterFirstUnlock},
    {"when-passcode-set-this-device-only", kSecAttrAccessibleWhenPasscodeSetThisDeviceOnly},
    {"when-unlocked-this-device-only", kSecAttrAccessibleWhenUnlockedThisDeviceOnly},
    {"after-first-unlock-this-device-only", kSecAttrAccessibleAfterFirstUnlockThisDeviceOnly},
};

static void parse(int argc, char **argv, options *o, const char *allowed) {
  memset(o, 0, sizeof *o);
  for (int i = 0; i < argc; i++) {
    const char *name = argv[i];
    if (strcmp(name, "--json") == 0 && strstr(allowed, " json ")) {
      o->json = 1;
      continue;
    }
    if (strncmp(name, "--", 2) != 0) usage("unexpected argument");
    char word[32];
    snprintf(word, sizeof word, " %s ", name + 2);
    if (strstr(allowed, word) == NULL || strcmp(name + 2, "json") == 0) {
      char problem[128];
      snprintf(problem, sizeof problem, "unknown option '%.60s' for this command", name);
      usage(problem);
    }
    if (i + 1 >= argc) usage("an option is missing its value");
    const char *value = argv[++i];
    const char **slot = NULL;
    if (strcmp(name, "--service") == 0) slot = &o->service;
    else if (strcmp(name, "--account") == 0) slot = &o->account;
    else if (strcmp(name, "--class") == 0) slot = &o->class_name;
    else if (strcmp(name, "--group") == 0) slot = &o->group;
    else if (strcmp(name, "--label") == 0) slot = &o->label;
    else if (strcmp(name, "--comment") == 0) slot = &o->comment;
    else if (strcmp(name, "--accessible") == 0) slot = &o->accessible;
    else if (strcmp(name, "--data") == 0) slot = &o->data;
    else if (strcmp(name, "--data-file") == 0) slot = &o->data_file;
    else if (strcmp(name, "--return") == 0) slot = &o->returns;
    else if (strcmp(name, "--limit") == 0) slot = &o->limit;
    if (slot == NULL) usage("unknown option");
    if (*slot != NULL) usage("an option is given twice");
    *slot = value;
  }
  if (o->data != NULL && o->data_file != NULL) usage("give the secret with --data or --data-file, not both");
}

/* The secret: --data's text, or --data-file's bytes (stdin for '-'). *present is 0 without. */
static uint8_t *read_secret(const options *o, size_t *length, int *present) {
  *present = 0;
  *length = 0;
  if (o->data != NULL) {
    *present = 1;
    *length = strlen(o->data);
    return (uint8_t *)strdup(o->data);
  }
  if (o->data_file == NULL) return NULL;
  *present = 1;
  int fd = strcmp(o->data_file, "-") == 0 ? 0 : open(o->data_file, O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(66, "cannot open '%s': %s", o->data_file, strerror(errno));
  uint8_t *bytes = malloc(MAX_DATA + 1);
  if (bytes == NULL) fail(74, "out of memory");
  size_t total = 0;
  while (total <= MAX_DATA) {
    ssize_t count = read(fd, bytes + total, MAX_DATA + 1 - total);
    if (count < 0 && errno == EINTR) continue;
    if (count < 0) fail(74, "cannot read '%s': %s", o->data_file, strerror(errno));
    if (count == 0) break;
    total += (size_t)count;
  }
  if (total > MAX_DATA) usage("the secret is larger than the 1048576 bytes an item can hold");
  if (fd != 0) close(fd);
  *length = total;
  return bytes;
}

static void set(appbox_value *query, const char *key, const char *text) {
  if (text != NULL && appbox_dictionary_set_string(query, key, text) != 0) {
    usage("an option's value is not UTF-8 text");
  }
}

/* A dictionary with kSecClass and the matching attributes the options give. */
static appbox_value *base_query(const options *o) {
  appbox_value *query = appbox_dictionary_new();
  if (query == NULL) fail(74, "out of memory");
  const char *class_code = kSecClassGenericPassword;
  if (o->class_name != NULL) {
    if (strcmp(o->class_name, "internet") == 0) class_code = kSecClassInternetPassword;
    else if (strcmp(o->class_name, "generic") != 0) usage("--class is generic or internet");
  }
  set(query, kSecClass, class_code);
  set(query, kSecAttrService, o->service);
  set(query, kSecAttrAccount, o->account);
  set(query, kSecAttrAccessGroup, o->group);
  return query;
}

static int exit_status(appbox_status status) {
  switch (status) {
    case errSecSuccess: return 0;
    case errSecParam: return 64;
    case errSecDecode: return 65;
    case errSecItemNotFound: return 66;
    case errSecInteractionNotAllowed:
    case errSecAuthFailed:
    case errSecNotAvailable: return 69;
    case errSecDuplicateItem:
    case errSecDiskFull: return 73;
    case errSecMissingEntitlement: return 77;
    default: return 74;
  }
}

static void check(appbox_status status) {
  if (status == errSecSuccess) return;
  const char *message = appbox_secitem_message();
  fail(exit_status(status), "%s (%s, %d)", *message ? message : "the keychain refused", appbox_secitem_status_name(status),
       (int)status);
}

/* ---- JSON output ---- */

static void json_string(FILE *out, const char *text) {
  fputc('"', out);
  for (const unsigned char *p = (const unsigned char *)text; *p; p++) {
    if (*p == '"' || *p == '\\') fprintf(out, "\\%c", *p);
    else if (*p == '\n') fputs("\\n", out);
    else if (*p == '\t') fputs("\\t", out);
    else if (*p == '\r') fputs("\\r", out);
    else if (*p < 0x20 || *p == 0x7F) fprintf(out, "\\u%04x", *p);
    else fputc(*p, out);
  }
  fputc('"', out);
}

static void json_base64(FILE *out, const uint8_t *bytes, size_t length) {
  static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  fputc('"', out);
  for (size_t i = 0; i < length; i += 3) {
    uint32_t chunk = (uint32_t)bytes[i] << 16;
    if (i + 1 < length) chunk |= (uint32_t)bytes[i + 1] << 8;
    if (i + 2 < length) chunk |= bytes[i + 2];
    fputc(alphabet[(chunk >> 18) & 63], out);
    fputc(alphabet[(chunk >> 12) & 63], out);
    fputc(i + 1 < length ? alphabet[(chunk >> 6) & 63] : '=', out);
    fputc(i + 2 < length ? alphabet[chunk & 63] : '=', out);
  }
  fputc('"', out);
}

static void json_date(FILE *out, double seconds_since_2001) {
  time_t seconds = (time_t)(seconds_since_2001 + 978307200.0);
  struct tm utc;
  char text[64];
  gmtime_r(&seconds, &utc);
  strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
  json_string(out, text);
}

static const char *accessible_name(const char *code) {
  for (size_t i = 0; i < sizeof accessible_names / sizeof *accessible_names; i++) {
    if (code != NULL && strcmp(accessible_names[i][1], code) == 0) return accessible_names[i][0];
  }
  return code;
}

/* One item's attributes dictionary, with the names `appbox keychain --json` uses. */
static void json_item(FILE *out, const appbox_value *item) {
  static const char *const names[][2] = {
      {kSecClass, "class"},          {kSecAttrService, "service"}, {kSecAttrAccount, "account"},
      {kSecAttrAccessGroup, "accessGroup"}, {kSecAttrLabel, "label"}, {kSecAttrComment, "comment"},
      {kSecAttrAccessible, "accessible"}, {kSecAttrCreationDate, "created"}, {kSecAttrModificationDate, "modified"},
      {kSecValueData, "data"},
  };
  fputc('{', out);
  int first = 1;
  for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
    const appbox_value *value = appbox_dictionary_get(item, names[i][0]);
    if (value == NULL) continue;
    fprintf(out, "%s\"%s\": ", first ? "" : ", ", names[i][1]);
    first = 0;
    const char *text = appbox_value_string(value);
    size_t length;
    const uint8_t *bytes = appbox_value_data(value, &length);
    if (i == 0) json_string(out, strcmp(text ? text : "", kSecClassInternetPassword) == 0 ? "internet" : "generic");
    else if (strcmp(names[i][0], kSecAttrAccessible) == 0) json_string(out, accessible_name(text) ? accessible_name(text) : "");
    else if (appbox_value_get_type(value) == APPBOX_VALUE_DATE) json_date(out, appbox_value_double(value));
    else if (bytes != NULL) json_base64(out, bytes, length);
    else json_string(out, text ? text : "");
  }
  fputc('}', out);
}

static void json_result(FILE *out, const appbox_value *result) {
  switch (appbox_value_get_type(result)) {
    case APPBOX_VALUE_DATA: {
      size_t length;
      const uint8_t *bytes = appbox_value_data(result, &length);
      json_base64(out, bytes, length);
      break;
    }
    case APPBOX_VALUE_DICTIONARY: json_item(out, result); break;
    case APPBOX_VALUE_ARRAY:
      fputc('[', out);
      for (size_t i = 0; i < appbox_value_count(result); i++) {
        if (i > 0) fputs(", ", out);
        json_result(out, appbox_array_get(result, i));
      }
      fputc(']', out);
      break;
    default: fputs("null", out); break;
  }
}

/* ---- Commands ---- */

static int add(int argc, char **argv) {
  options o;
  parse(argc, argv, &o, " service account data data-file class group label comment accessible ");
  if (o.service == NULL || o.account == NULL) usage("add needs --service and --account");
  size_t length;
  int present;
  uint8_t *secret = read_secret(&o, &length, &present);
  if (!present) usage("add needs --data or --data-file");
  appbox_value *query = base_query(&o);
  set(query, kSecAttrLabel, o.label);
  set(query, kSecAttrComment, o.comment);
  if (o.accessible != NULL) {
    const char *code = NULL;
    for (size_t i = 0; i < sizeof accessible_names / sizeof *accessible_names; i++) {
      if (strcmp(accessible_names[i][0], o.accessible) == 0) code = accessible_names[i][1];
    }
    if (code == NULL) usage("unknown --accessible class");
    set(query, kSecAttrAccessible, code);
  }
  if (appbox_dictionary_set_data(query, kSecValueData, secret, length) != 0) fail(74, "out of memory");
  memset(secret, 0, length);
  free(secret);
  check(appbox_secitem_add(query, NULL));
  appbox_value_free(query);
  return 0;
}

static int get(int argc, char **argv) {
  options o;
  parse(argc, argv, &o, " service account class group return limit json ");
  int data = 1, attributes = 0;
  if (o.returns != NULL) {
    if (strcmp(o.returns, "data") == 0) data = 1, attributes = 0;
    else if (strcmp(o.returns, "attributes") == 0) data = 0, attributes = 1;
    else if (strcmp(o.returns, "both") == 0) data = 1, attributes = 1;
    else if (strcmp(o.returns, "none") == 0) data = 0, attributes = 0;
    else usage("--return is data, attributes, both or none");
  }
  appbox_value *query = base_query(&o);
  if (data) appbox_dictionary_set_bool(query, kSecReturnData, 1);
  if (attributes) appbox_dictionary_set_bool(query, kSecReturnAttributes, 1);
  int one = 1;
  if (o.limit != NULL) {
    char *end = NULL;
    long count = strtol(o.limit, &end, 10);
    if (strcmp(o.limit, "one") == 0) {
      set(query, kSecMatchLimit, kSecMatchLimitOne);
    } else if (strcmp(o.limit, "all") == 0) {
      set(query, kSecMatchLimit, kSecMatchLimitAll);
      one = 0;
    } else if (*o.limit != 0 && *end == 0 && count >= 1) {
      appbox_dictionary_set_integer(query, kSecMatchLimit, count);
      one = count == 1;
    } else {
      usage("--limit is one, all or a positive number");
    }
  }
  appbox_value *result = NULL;
  check(appbox_secitem_copy_matching(query, &result));
  if (result == NULL) {
    if (o.json) puts("null");
  } else if (data && !attributes && one && !o.json) {
    size_t length;
    const uint8_t *bytes = appbox_value_data(result, &length);
    if (bytes != NULL && fwrite(bytes, 1, length, stdout) != length) fail(74, "cannot write the data");
  } else {
    json_result(stdout, result);
    fputc('\n', stdout);
  }
  appbox_value_free(result);
  appbox_value_free(query);
  if (fflush(stdout) != 0) fail(74, "cannot write the result: %s", strerror(errno));
  return 0;
}

static int update(int argc, char **argv) {
  options o;
  parse(argc, argv, &o, " service account class group data data-file label comment ");
  if (o.service == NULL || o.account == NULL) usage("update needs --service and --account");
  size_t length;
  int present;
  uint8_t *secret = read_secret(&o, &length, &present);
  if (!present && o.label == NULL && o.comment == NULL) {
    usage("nothing to update: give --data, --data-file, --label or --comment");
  }
  appbox_value *changes = appbox_dictionary_new();
  if (changes == NULL) fail(74, "out of memory");
  if (present && appbox_dictionary_set_data(changes, kSecValueData, secret, length) != 0) fail(74, "out of memory");
  if (secret != NULL) memset(secret, 0, length);
  free(secret);
  set(changes, kSecAttrLabel, o.label);
  set(changes, kSecAttrComment, o.comment);
  appbox_value *query = base_query(&o);
  check(appbox_secitem_update(query, changes));
  appbox_value_free(changes);
  appbox_value_free(query);
  return 0;
}

static int delete_item(int argc, char **argv) {
  options o;
  parse(argc, argv, &o, " service account class group ");
  if (o.service == NULL || o.account == NULL) usage("delete needs --service and --account");
  appbox_value *query = base_query(&o);
  check(appbox_secitem_delete(query));
  appbox_value_free(query);
  return 0;
}

static int list(int argc, char **argv) {
  options o;
  parse(argc, argv, &o, " class group json ");
  const char *classes[2] = {"generic", "internet"};
  int first_class = 0, last_class = 1;
  if (o.class_name != NULL) {
    if (strcmp(o.class_name, "generic") == 0) last_class = 0;
    else if (strcmp(o.class_name, "internet") == 0) first_class = 1;
    else usage("--class is generic or internet");
  }
  appbox_value *results[2] = {NULL, NULL};
  size_t total = 0;
  for (int c = first_class; c <= last_class; c++) {
    options per_class = o;
    per_class.class_name = classes[c];
    appbox_value *query = base_query(&per_class);
    appbox_dictionary_set_bool(query, kSecReturnAttributes, 1);
    set(query, kSecMatchLimit, kSecMatchLimitAll);
    appbox_status status = appbox_secitem_copy_matching(query, &results[c]);
    appbox_value_free(query);
    if (status == errSecItemNotFound) continue;
    check(status);
    total += appbox_value_count(results[c]);
  }
  if (o.json) fputc('[', stdout);
  else if (total == 0) puts("No keychain items.");
  else printf("%-8s  %-24s  %-16s  %-32s  %s\n", "CLASS", "SERVICE", "ACCOUNT", "GROUP", "ACCESSIBLE");
  size_t printed = 0;
  for (int c = 0; c < 2; c++) {
    for (size_t i = 0; i < appbox_value_count(results[c]); i++) {
      const appbox_value *item = appbox_array_get(results[c], i);
      if (o.json) {
        if (printed++ > 0) fputs(", ", stdout);
        json_item(stdout, item);
        continue;
      }
      const char *text[4] = {kSecAttrService, kSecAttrAccount, kSecAttrAccessGroup, kSecAttrAccessible};
      for (int k = 0; k < 4; k++) {
        text[k] = appbox_value_string(appbox_dictionary_get(item, text[k]));
        if (text[k] == NULL) text[k] = "";
      }
      printf("%-8s  %-24s  %-16s  %-32s  %s\n", classes[c], text[0], text[1], text[2], accessible_name(text[3]));
    }
    appbox_value_free(results[c]);
  }
  if (o.json) fputs("]\n", stdout);
  if (fflush(stdout) != 0) fail(74, "cannot write the list: %s", strerror(errno));
  return 0;
}

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      fputs(usage_text, stdout);
      return 0;
    }
  }
  if (argc < 2) usage("missing command");
  const char *command = argv[1];
  if (strcmp(command, "add") == 0) return add(argc - 2, argv + 2);
  if (strcmp(command, "get") == 0) return get(argc - 2, argv + 2);
  if (strcmp(command, "update") == 0) return update(argc - 2, argv + 2);
  if (strcmp(command, "delete") == 0) return delete_item(argc - 2, argv + 2);
  if (strcmp(command, "list") == 0) return list(argc - 2, argv + 2);
  usage("unknown command (add, get, update, delete or list)");
  return 64;
}
