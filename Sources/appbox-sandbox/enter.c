/* `appbox-sandbox enter`: the host-side step between appbox and bubblewrap.
 *
 *   appbox-sandbox enter [--user UID:GID] [--groups GID,...] [--cgroup DIR]
 *                        [--stage rw|ro|rx:PATH]... -- BWRAP [BWRAP-ARGS...]
 *
 * bubblewrap always runs unprivileged here (as the app's uid when appbox is root, as
 * the caller otherwise), and it resolves every bind source by path as that user. The
 * app's directories live in a home that is root-owned 0700 (or under a device root
 * nobody else may traverse), so they are staged first:
 *  1. with --cgroup, joins that (delegated) cgroup: everything started from here on is
 *     counted against its pids.max and memory.max;
 *  2. enters a private mount namespace (as an unprivileged caller, inside a new user
 *     namespace mapping only its own uid and gid), with all mounts private, so nothing
 *     done here is seen on the host;
 *  3. opens every --stage PATH (the final component never followed), mounts a tmpfs on
 *     STAGING_DIRECTORY, and bind-mounts the N-th staged path (from 0) at
 *     STAGING_DIRECTORY/N, a directory or a file like its source, with
 *       rw  nosuid, nodev, noexec          (the app's data: what it writes never runs)
 *       ro  read-only, nosuid, nodev, noexec
 *       rx  read-only, nosuid, nodev       (the bundle, this helper, tools on PATH)
 *     bubblewrap keeps these flags when it binds the staged paths into the jail;
 *  4. with --user (given when appbox runs as root), keeps only GID and the --groups as its
 *     groups (say the group owning a container several apps share) and becomes UID:GID
 *     (all capabilities go with it);
 *  5. execs BWRAP with its arguments; descriptors it was given stay open for it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "sandbox.h"

#define MAX_STAGED 64
#define MAX_GROUPS 32

enum access { READ_WRITE, READ_ONLY, READ_EXECUTE };

struct staged {
  const char *path;
  enum access access;
  int fd;
};

static void write_file(const char *path, const char *text) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) fail(71, "cannot open '%s': %s", path, reason(errno));
  size_t length = strlen(text);
  if (write(fd, text, length) != (ssize_t)length) fail(71, "cannot write '%s': %s", path, reason(errno));
  close(fd);
}

static void join_cgroup(const char *directory) {
  char path[4096], pid[32];
  snprintf(path, sizeof path, "%s/cgroup.procs", directory);
  snprintf(pid, sizeof pid, "%d", (int)getpid());
  write_file(path, pid);
}

/* A private mount namespace. Unprivileged, that takes a user namespace of our own,
 * in which we map only ourselves. */
static void unshare_mounts(void) {
  uid_t uid = getuid();
  gid_t gid = getgid();
  int flags = CLONE_NEWNS | (geteuid() == 0 ? 0 : CLONE_NEWUSER);
  if (unshare(flags) != 0) {
    int error = errno;
    if (error == EPERM || error == ENOSPC || error == EUSERS) {
      fail(69, "cannot create a %s namespace (%s): user namespaces are disabled for this user",
           geteuid() == 0 ? "mount" : "user", reason(error));
    }
    fail(71, "cannot create a private mount namespace: %s", reason(error));
  }
  if (flags & CLONE_NEWUSER) {
    char map[64];
    write_file("/proc/self/setgroups", "deny");
    snprintf(map, sizeof map, "%u %u 1", (unsigned)uid, (unsigned)uid);
    write_file("/proc/self/uid_map", map);
    snprintf(map, sizeof map, "%u %u 1", (unsigned)gid, (unsigned)gid);
    write_file("/proc/self/gid_map", map);
  }
  if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) {
    fail(71, "cannot make the mounts private: %s", reason(errno));
  }
}

/* Mount flags a remount of a bind must keep (locked ones cannot be cleared anyway). */
static unsigned long kept_flags(const char *path) {
  struct statvfs info;
  if (statvfs(path, &info) != 0) fail(71, "cannot inspect the mount at '%s': %s", path, reason(errno));
  unsigned long flags = 0;
  if (info.f_flag & ST_RDONLY) flags |= MS_RDONLY;
  if (info.f_flag & ST_NOSUID) flags |= MS_NOSUID;
  if (info.f_flag & ST_NODEV) flags |= MS_NODEV;
  if (info.f_flag & ST_NOEXEC) flags |= MS_NOEXEC;
  if (info.f_flag & ST_NOATIME) flags |= MS_NOATIME;
  if (info.f_flag & ST_NODIRATIME) flags |= MS_NODIRATIME;
  if (info.f_flag & ST_RELATIME) flags |= MS_RELATIME;
  return flags;
}

static void stage(struct staged *items, int count) {
  for (int i = 0; i < count; i++) {
    items[i].fd = open(items[i].path, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    if (items[i].fd < 0) fail(71, "cannot open '%s' to show it to the app: %s", items[i].path, reason(errno));
  }
  struct stat st;
  if (stat(STAGING_DIRECTORY, &st) != 0 || !S_ISDIR(st.st_mode)) {
    fail(69, "the directory %s, where the sandbox stages its mounts privately, is missing", STAGING_DIRECTORY);
  }
  if (mount("appbox-staging", STAGING_DIRECTORY, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755") != 0) {
    fail(71, "cannot mount a private tmpfs on %s: %s", STAGING_DIRECTORY, reason(errno));
  }
  for (int i = 0; i < count; i++) {
    char target[64], source[64];
    snprintf(target, sizeof target, "%s/%d", STAGING_DIRECTORY, i);
    snprintf(source, sizeof source, "/proc/self/fd/%d", items[i].fd);
    if (fstat(items[i].fd, &st) != 0) fail(71, "cannot stat '%s': %s", items[i].path, reason(errno));
    int made = S_ISDIR(st.st_mode) ? mkdir(target, 0755) : mknod(target, S_IFREG | 0644, 0);
    if (made != 0) fail(71, "cannot create the mount point '%s': %s", target, reason(errno));
    if (mount(source, target, NULL, MS_BIND, NULL) != 0) {
      fail(71, "cannot stage '%s': %s", items[i].path, reason(errno));
    }
    unsigned long flags = kept_flags(target) | MS_NOSUID | MS_NODEV;
    if (items[i].access != READ_EXECUTE) flags |= MS_NOEXEC;
    if (items[i].access != READ_WRITE) flags |= MS_RDONLY;
    if (mount(NULL, target, NULL, MS_REMOUNT | MS_BIND | flags, NULL) != 0) {
      fail(71, "cannot restrict the mount of '%s': %s", items[i].path, reason(errno));
    }
    close(items[i].fd);
  }
}

/* Parses "GID,GID,..." into `groups`; returns how many. */
static int parse_groups(const char *text, gid_t *groups) {
  int count = 0;
  const char *cursor = text;
  while (*cursor != '\0') {
    char *end = NULL;
    errno = 0;
    unsigned long gid = strtoul(cursor, &end, 10);
    if (errno != 0 || end == cursor || gid == 0 || gid >= 0xFFFFFFFFUL || count == MAX_GROUPS ||
        (*end != ',' && *end != '\0')) {
      fail(64, "--groups takes up to %d GIDs (above 0) separated by commas, not '%s'", MAX_GROUPS, text);
    }
    groups[count++] = (gid_t)gid;
    cursor = *end == ',' ? end + 1 : end;
  }
  return count;
}

static void become(const char *user, const gid_t *extra, int extra_count) {
  char *end = NULL;
  errno = 0;
  unsigned long uid = strtoul(user, &end, 10);
  unsigned long gid = 0;
  if (errno == 0 && end != user && *end == ':') {
    const char *text = end + 1;
    gid = strtoul(text, &end, 10);
    if (end == text) errno = EINVAL;
  }
  if (errno != 0 || *end != '\0' || uid == 0 || gid == 0 || uid >= 0xFFFFFFFFUL || gid >= 0xFFFFFFFFUL) {
    fail(64, "--user takes UID:GID (both above 0), not '%s'", user);
  }
  gid_t groups[MAX_GROUPS + 1];
  groups[0] = (gid_t)gid;
  for (int i = 0; i < extra_count; i++) groups[i + 1] = extra[i];
  if (setgroups((size_t)extra_count + 1, groups) != 0) fail(71, "cannot set the groups: %s", reason(errno));
  if (setresgid((gid_t)gid, (gid_t)gid, (gid_t)gid) != 0) fail(71, "cannot become gid %lu: %s", gid, reason(errno));
  if (setresuid((uid_t)uid, (uid_t)uid, (uid_t)uid) != 0) fail(71, "cannot become uid %lu: %s", uid, reason(errno));
  if (getuid() != (uid_t)uid || geteuid() != (uid_t)uid || setuid(0) == 0) {
    fail(71, "could not drop root privileges");
  }
}

int enter_main(int argc, char **argv) {
  struct staged items[MAX_STAGED];
  gid_t groups[MAX_GROUPS];
  int count = 0, group_count = 0;
  const char *user = NULL, *cgroup = NULL;
  int index = 1;
  for (; index < argc; index++) {
    const char *option = argv[index];
    if (strcmp(option, "--") == 0) {
      index++;
      break;
    }
    if (index + 1 >= argc) fail(64, "%s needs a value", option);
    const char *value = argv[++index];
    if (strcmp(option, "--user") == 0) {
      user = value;
    } else if (strcmp(option, "--groups") == 0) {
      group_count = parse_groups(value, groups);
    } else if (strcmp(option, "--cgroup") == 0) {
      cgroup = value;
    } else if (strcmp(option, "--stage") == 0) {
      if (count == MAX_STAGED) fail(64, "more than %d --stage options", MAX_STAGED);
      enum access access;
      if (strncmp(value, "rw:", 3) == 0) {
        access = READ_WRITE;
      } else if (strncmp(value, "ro:", 3) == 0) {
        access = READ_ONLY;
      } else if (strncmp(value, "rx:", 3) == 0) {
        access = READ_EXECUTE;
      } else {
        fail(64, "--stage takes rw:PATH, ro:PATH or rx:PATH, not '%s'", value);
      }
      if (value[3] != '/') fail(64, "--stage needs an absolute path, not '%s'", value + 3);
      items[count++] = (struct staged){value + 3, access, -1};
    } else {
      fail(64, "unknown option '%s'", option);
    }
  }
  if (index >= argc) fail(64, "no bubblewrap command given after '--'");

  if (cgroup != NULL) join_cgroup(cgroup);
  if (count > 0) {
    unshare_mounts();
    stage(items, count);
  }
  if (user != NULL) become(user, groups, group_count);
  execv(argv[index], &argv[index]);
  int error = errno;
  fail(error == ENOENT ? 69 : 126, "cannot run bubblewrap '%s': %s", argv[index], reason(error));
}
