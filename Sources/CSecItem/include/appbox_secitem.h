/* appbox_secitem.h: the keychain client for code running inside an appbox sandbox.
 *
 * A confined app reaches the keychain only through the broker that its supervising
 * `appbox run` or `appbox launch` serves: the app inherits one end of a socket at the
 * descriptor named by APPBOX_SECITEM_FD. The broker knows which app holds that descriptor
 * (the identity is bound to it, never claimed in a message) and applies that app's
 * keychain access groups. See README "The keychain inside the sandbox" for the protocol.
 *
 * The calls mirror the platform's SecItem API: a request is a dictionary with the
 * platform's keys (kSecClass, kSecAttrService, ...; their values here are the platform's
 * own strings, "class", "svce", ...), the answer an OSStatus with the platform's values
 * and, when asked for, a result. No CoreFoundation: dictionaries, arrays, strings, data,
 * numbers, booleans and dates are `appbox_value`s, encoded on the wire as binary
 * property lists.
 *
 * Thread safety: every call may be made from any thread; one process keeps one session
 * with the broker and serializes request/reply pairs on it (a mutex). A child made by
 * fork() opens a session of its own on its first call. Values are not shared between
 * threads unless the caller locks them.
 *
 * Build: compile the .c files of Sources/CSecItem with your program (plain C99 plus POSIX threads and
 * sockets; link statically if the program runs where no shared libraries exist).
 */
#ifndef APPBOX_SECITEM_H
#define APPBOX_SECITEM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The platform's status type. */
typedef int32_t appbox_status;

/* ---- Statuses (the platform's values) ---- */
#define errSecSuccess 0
#define errSecIO (-36)                         /* the broker could not be reached, or hung up */
#define errSecDiskFull (-34)                   /* the app's keychain quota is used up */
#define errSecParam (-50)                      /* a malformed request: unknown key, wrong type, ... */
#define errSecAllocate (-108)                  /* a reply beyond the size limit, or out of memory */
#define errSecInternalComponent (-2070)        /* the broker failed (its message says why) */
#define errSecNotAvailable (-25291)            /* no broker: not running inside appbox */
#define errSecAuthFailed (-25293)              /* when-passcode-set items need a device passcode */
#define errSecDuplicateItem (-25299)           /* the item exists */
#define errSecItemNotFound (-25300)            /* no item matches */
#define errSecInteractionNotAllowed (-25308)   /* the device is locked */
#define errSecDecode (-26275)                  /* the keychain is corrupt or was tampered with */
#define errSecMissingEntitlement (-34018)      /* an access group the app is not entitled to */

/* ---- Keys and values (the platform's strings) ---- */
#define kSecClass "class"
#define kSecClassGenericPassword "genp"
#define kSecClassInternetPassword "inet"
#define kSecAttrService "svce"
#define kSecAttrAccount "acct"
#define kSecAttrAccessGroup "agrp"
#define kSecAttrLabel "labl"
#define kSecAttrComment "icmt"
#define kSecAttrCreationDate "cdat"
#define kSecAttrModificationDate "mdat"
#define kSecAttrAccessible "pdmn"
#define kSecAttrAccessibleWhenUnlocked "ak"
#define kSecAttrAccessibleAfterFirstUnlock "ck"
#define kSecAttrAccessibleWhenPasscodeSetThisDeviceOnly "akpu"
#define kSecAttrAccessibleWhenUnlockedThisDeviceOnly "aku"
#define kSecAttrAccessibleAfterFirstUnlockThisDeviceOnly "cku"
#define kSecValueData "v_Data"
#define kSecReturnData "r_Data"
#define kSecReturnAttributes "r_Attributes"
#define kSecMatchLimit "m_Limit"
#define kSecMatchLimitOne "m_LimitOne"
#define kSecMatchLimitAll "m_LimitAll"

/* The environment variable naming the inherited descriptor. */
#define APPBOX_SECITEM_FD_VARIABLE "APPBOX_SECITEM_FD"

/* ---- Values ---- */
typedef struct appbox_value appbox_value;

typedef enum {
  APPBOX_VALUE_STRING = 1,
  APPBOX_VALUE_DATA,
  APPBOX_VALUE_INTEGER,
  APPBOX_VALUE_BOOL,
  APPBOX_VALUE_DATE, /* seconds since 2001-01-01 00:00:00 UTC, as the platform counts */
  APPBOX_VALUE_REAL,
  APPBOX_VALUE_ARRAY,
  APPBOX_VALUE_DICTIONARY,
} appbox_value_type;

/* Constructors return NULL when out of memory (or, for strings, when `text` is not
 * UTF-8). Every value returned by a constructor, by appbox_plist_decode or as a result of
 * a SecItem call belongs to the caller: free it with appbox_value_free. */
appbox_value *appbox_dictionary_new(void);
appbox_value *appbox_array_new(void);
appbox_value *appbox_string_new(const char *text);
appbox_value *appbox_data_new(const void *bytes, size_t length);
appbox_value *appbox_integer_new(int64_t number);
appbox_value *appbox_bool_new(int flag);
appbox_value *appbox_date_new(double seconds_since_2001);
appbox_value *appbox_real_new(double number);
void appbox_value_free(appbox_value *value);

/* Dictionary setters: replace any value under `key`. Return 0, or -1 (out of memory, not a
 * dictionary, or text that is not UTF-8). appbox_dictionary_set takes ownership of `item`,
 * also when it fails. */
int appbox_dictionary_set(appbox_value *dictionary, const char *key, appbox_value *item);
int appbox_dictionary_set_string(appbox_value *dictionary, const char *key, const char *text);
int appbox_dictionary_set_data(appbox_value *dictionary, const char *key, const void *bytes, size_t length);
int appbox_dictionary_set_integer(appbox_value *dictionary, const char *key, int64_t number);
int appbox_dictionary_set_bool(appbox_value *dictionary, const char *key, int flag);
/* Appends to an array, taking ownership of `item`; 0 or -1. */
int appbox_array_append(appbox_value *array, appbox_value *item);

/* Readers. A value of another type reads as NULL / 0. */
appbox_value_type appbox_value_get_type(const appbox_value *value);
const appbox_value *appbox_dictionary_get(const appbox_value *dictionary, const char *key);
/* Entries of an array or dictionary. */
size_t appbox_value_count(const appbox_value *value);
const appbox_value *appbox_array_get(const appbox_value *array, size_t index);
const char *appbox_dictionary_key_at(const appbox_value *dictionary, size_t index);
const appbox_value *appbox_dictionary_value_at(const appbox_value *dictionary, size_t index);
const char *appbox_value_string(const appbox_value *value);
/* The bytes of a data value (and its length in *length); NULL for other types. */
const uint8_t *appbox_value_data(const appbox_value *value, size_t *length);
int64_t appbox_value_integer(const appbox_value *value);
int appbox_value_bool(const appbox_value *value);
double appbox_value_double(const appbox_value *value); /* a date's seconds or a real */

/* ---- Binary property lists (bplist00) ---- */
/* Encodes `value`; *bytes is malloc'ed (free it). Returns 0, or -1 (out of memory, or a
 * value nested deeper than APPBOX_PLIST_MAX_DEPTH). */
int appbox_plist_encode(const appbox_value *value, uint8_t **bytes, size_t *length);
/* Decodes a binary property list; NULL when it is malformed or beyond the limits (depth,
 * object count, size). Never reads outside [bytes, bytes + length). */
appbox_value *appbox_plist_decode(const uint8_t *bytes, size_t length);
#define APPBOX_PLIST_MAX_DEPTH 32

/* ---- SecItem ---- */
/* SecItemAdd: `attributes` holds kSecClass, kSecAttrService, kSecAttrAccount, kSecValueData
 * and optionally kSecAttrAccessGroup, kSecAttrLabel, kSecAttrComment, kSecAttrAccessible,
 * kSecReturnData, kSecReturnAttributes. `result` may be NULL. */
appbox_status appbox_secitem_add(const appbox_value *attributes, appbox_value **result);
/* SecItemCopyMatching: kSecClass and any of service, account, access group, label,
 * comment, accessible to match; kSecReturnData / kSecReturnAttributes / kSecMatchLimit
 * (kSecMatchLimitOne, the default, kSecMatchLimitAll, or a positive integer) choose the
 * result: data, an attributes dictionary, or with a limit other than one an array of them;
 * nothing when neither return key is true. */
appbox_status appbox_secitem_copy_matching(const appbox_value *query, appbox_value **result);
/* SecItemUpdate: changes kSecValueData, kSecAttrLabel and/or kSecAttrComment of every
 * matching item. */
appbox_status appbox_secitem_update(const appbox_value *query, const appbox_value *attributes_to_update);
/* SecItemDelete: deletes every matching item. */
appbox_status appbox_secitem_delete(const appbox_value *query);

/* The broker's one-line explanation of this thread's last failed call ("" after a
 * success). Never contains a secret. */
const char *appbox_secitem_message(void);
/* The platform's name of a status ("errSecItemNotFound"), or "unknown status". */
const char *appbox_secitem_status_name(appbox_status status);

/* Uses descriptor `fd` instead of $APPBOX_SECITEM_FD (say, one end of a socketpair in a
 * test); -1 goes back to the environment. Closes the current session. */
void appbox_secitem_use_descriptor(int fd);

/* One raw exchange on this process's session: sends `length` bytes as one request frame and
 * returns the reply frame's bytes (malloc'ed) in *reply. 0, or -1 with errno. For tests of
 * the broker's handling of hostile messages. */
int appbox_secitem_exchange_raw(const uint8_t *request, size_t length, uint8_t **reply, size_t *reply_length);

#ifdef __cplusplus
}
#endif
#endif
