/* enter's staging (stage.c): what it mounts in its private namespace for bubblewrap. */
#ifndef APPBOX_STAGE_H
#define APPBOX_STAGE_H

#include <sys/types.h>

#define MAX_STAGED 64
#define MAX_ETC 32

/* Where the jail's /etc is built (one tree, bound once). */
#define ETC_STAGING STAGING_DIRECTORY "/etc"

enum access { READ_WRITE, READ_ONLY, READ_EXECUTE };

struct staged {
  const char *path;
  enum access access;
  int fd;
  /* For `shared=OWNER`: the on-disk owner shown as --user's own (0: not idmapped). */
  unsigned long owner;
};

/* The --user identity, parsed before staging (an idmapped stage maps to it). */
struct identity {
  uid_t uid;
  gid_t gid;
};

/* A file of the jail's /etc: the host's /etc/NAME, or NAME written from `fd`. */
struct etc_entry {
  const char *name;
  int fd; /* -1: the host's file */
};

/* Writes `text` to the existing file `path` (a /proc file), or fails with 71. */
void write_file(const char *path, const char *text);

/* Mounts a tmpfs on STAGING_DIRECTORY and stages `items` there (see enter.c, step 3). */
void stage(struct staged *items, int count, const struct identity *user);

/* Builds the jail's /etc on ETC_STAGING (see enter.c, step 3). */
void stage_etc(const struct etc_entry *entries, int count);

#endif
