/* `appbox-sandbox enter`: the host-side step between appbox and bubblewrap.
 *
 *   appbox-sandbox enter [--user UID:GID] [--groups GID,...] [--cgroup DIR] [--network-namespace FD]
 *                        [--stage rw|ro|rx|shared=OWNER:PATH]... [--etc NAME]... [--etc-data NAME:FD]...
 *                        -- BWRAP [BWRAP-ARGS...]
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
 *       shared=OWNER  like rw, through an idmapped mount (Linux 5.12+): what belongs to
 *           OWNER (uid and gid) on disk appears as --user's own, and what --user creates
 *           is written as OWNER's. Several apps (each with a uid of its own) so share one
 *           container as if each were its only user: an app group's container, whose
 *           files belong to the group's own uid. Needs --user (as root only);
 *     bubblewrap keeps these flags (and the idmapping) when it binds the staged paths
 *     into the jail;
 *     with --etc or --etc-data, also the jail's whole /etc as one tree, which bubblewrap binds
 *     with one --ro-bind (one bind costs it a parse of the mount table, so twelve files bound
 *     one by one cost it twelve): a tmpfs (nosuid, nodev, noexec) on STAGING_DIRECTORY/etc
 *     holding, for --etc NAME, the host's /etc/NAME when it exists (symlinks followed, as
 *     bubblewrap's --ro-bind-try does), bound read-only, nosuid, nodev, noexec, and for
 *     --etc-data NAME:FD a file NAME (0644) with what descriptor FD holds (closed then);
 *  4. with --user (given when appbox runs as root), keeps only GID and the --groups as its
 *     groups (say the group owning a container several apps share) and becomes UID:GID
 *     (all capabilities go with it);
 *  5. with --network-namespace, enters a network namespace of its own (an empty one, with
 *     only a loopback) owned by a user namespace of its own that maps only its uid and gid
 *     (so as root, this is after step 4: neither namespace is root's), then writes one byte
 *     on descriptor FD and closes it. appbox, reading that byte, opens both namespaces
 *     (/proc/PID/ns/user and net of this process, which stay those of bubblewrap's first
 *     process) and starts pasta as this uid to join them and give that network its outbound
 *     connection, while bubblewrap, run with --share-net, builds the jail inside it. The app cannot
 *     administer that network: its own user namespace (bubblewrap's) is a child of the one
 *     owning it;
 *  6. execs BWRAP with its arguments; descriptors it was given stay open for it.
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
#include <sys/prctl.h>
#include <sys/stat.h>
#include <stdint.h>
#include <unistd.h>

#include "sandbox.h"
#include "stage.h"

#define MAX_GROUPS 32

static void join_cgroup(const char *directory) {
  char path[4096], pid[32];
  snprintf(path, sizeof path, "%s/cgroup.procs", directory);
  snprintf(pid, sizeof pid, "%d", (int)getpid());
  write_file(path, pid);
}

/* A private mount namespace. Unprivileged, that takes a user namespace of our own,
 * in which we map only ourselves. Returns whether it made one. */
static int unshare_mounts(void) {
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
  return (flags & CLONE_NEWUSER) != 0;
}

/* Step 5: a network namespace of its own, in a user namespace of its own unless the staging
 * (unprivileged) made one already, whose creator this process is and so holds every
 * capability in it until it execs. Then says so on `ready`. */
static void unshare_network(int ready, int has_user_namespace) {
  uid_t uid = getuid();
  gid_t gid = getgid();
  int flags = CLONE_NEWNET | (has_user_namespace ? 0 : CLONE_NEWUSER);
  /* After becoming the app's uid this process is not dumpable, so its /proc files are root's
   * and it could not write its own maps. It holds nothing the app's uid may not see (exec
   * makes bubblewrap dumpable again anyway). */
  if (!has_user_namespace && prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) != 0) {
    fail(71, "cannot make the process dumpable again: %s", reason(errno));
  }
  if (unshare(flags) != 0) {
    int error = errno;
    if (error == EPERM || error == ENOSPC || error == EUSERS) {
      fail(69, "cannot create a network namespace for the app (%s): user namespaces are disabled for this user",
           reason(error));
    }
    fail(71, "cannot create a network namespace for the app: %s", reason(error));
  }
  if (flags & CLONE_NEWUSER) {
    char map[64];
    write_file("/proc/self/setgroups", "deny");
    snprintf(map, sizeof map, "%u %u 1", (unsigned)uid, (unsigned)uid);
    write_file("/proc/self/uid_map", map);
    snprintf(map, sizeof map, "%u %u 1", (unsigned)gid, (unsigned)gid);
    write_file("/proc/self/gid_map", map);
  }
  char byte = 'n';
  ssize_t written;
  do {
    written = write(ready, &byte, 1);
  } while (written < 0 && errno == EINTR);
  if (written != 1) fail(71, "cannot report the app's network namespace: %s", reason(errno));
  close(ready);
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

/* Parses --user's "UID:GID" (both above 0). */
static struct identity parse_user(const char *user) {
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
  return (struct identity){(uid_t)uid, (gid_t)gid};
}

static void become(const struct identity *user, const gid_t *extra, int extra_count) {
  unsigned long uid = user->uid, gid = user->gid;
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
  struct etc_entry etc[MAX_ETC];
  gid_t groups[MAX_GROUPS];
  int count = 0, group_count = 0, etc_count = 0;
  const char *user = NULL, *cgroup = NULL;
  int network_ready = -1;
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
    } else if (strcmp(option, "--network-namespace") == 0) {
      network_ready = (int)parse_number(value, 1 << 20, "--network-namespace");
      if (network_ready < 3 || fcntl(network_ready, F_GETFD) < 0) {
        fail(64, "--network-namespace takes an open descriptor of 3 or more, not %d", network_ready);
      }
    } else if (strcmp(option, "--etc") == 0 || strcmp(option, "--etc-data") == 0) {
      if (etc_count == MAX_ETC) fail(64, "more than %d /etc files", MAX_ETC);
      int fd = -1;
      char *name = strdup(value);
      if (name == NULL) fail(71, "out of memory");
      if (strcmp(option, "--etc-data") == 0) {
        char *colon = strrchr(name, ':');
        if (colon == NULL) fail(64, "--etc-data takes NAME:FD, not '%s'", value);
        *colon = '\0';
        fd = (int)parse_number(colon + 1, 1 << 20, "--etc-data");
        if (fd < 3 || fcntl(fd, F_GETFD) < 0) fail(64, "--etc-data takes an open descriptor of 3 or more: '%s'", value);
      }
      if (name[0] == '\0' || name[0] == '.' || strchr(name, '/') != NULL) {
        fail(64, "%s takes a file name of /etc, not '%s'", option, value);
      }
      etc[etc_count++] = (struct etc_entry){name, fd};
    } else if (strcmp(option, "--stage") == 0) {
      if (count == MAX_STAGED) fail(64, "more than %d --stage options", MAX_STAGED);
      enum access access;
      if (strncmp(value, "rw:", 3) == 0) {
        access = READ_WRITE;
      } else if (strncmp(value, "ro:", 3) == 0) {
        access = READ_ONLY;
      } else if (strncmp(value, "rx:", 3) == 0) {
        access = READ_EXECUTE;
      } else if (strncmp(value, "shared=", 7) == 0) {
        char *end = NULL;
        errno = 0;
        unsigned long owner = strtoul(value + 7, &end, 10);
        if (errno != 0 || end == value + 7 || *end != ':' || owner == 0 || owner >= 0xFFFFFFFFUL) {
          fail(64, "--stage shared= takes an owner above 0: shared=OWNER:PATH, not '%s'", value);
        }
        if (end[1] != '/') fail(64, "--stage needs an absolute path, not '%s'", end + 1);
        items[count++] = (struct staged){end + 1, READ_WRITE, -1, owner};
        continue;
      } else {
        fail(64, "--stage takes rw:PATH, ro:PATH, rx:PATH or shared=OWNER:PATH, not '%s'", value);
      }
      if (value[3] != '/') fail(64, "--stage needs an absolute path, not '%s'", value + 3);
      items[count++] = (struct staged){value + 3, access, -1, 0};
    } else {
      fail(64, "unknown option '%s'", option);
    }
  }
  if (index >= argc) fail(64, "no bubblewrap command given after '--'");

  struct identity identity = {0, 0};
  if (user != NULL) identity = parse_user(user);
  for (int i = 0; i < count; i++) {
    if (items[i].owner != 0 && (user == NULL || geteuid() != 0)) {
      fail(64, "--stage shared= needs --user, as root: '%s'", items[i].path);
    }
  }
  if (cgroup != NULL) join_cgroup(cgroup);
  int has_user_namespace = 0;
  if (count > 0 || etc_count > 0) {
    has_user_namespace = unshare_mounts();
    stage(items, count, &identity);
    if (etc_count > 0) stage_etc(etc, etc_count);
  }
  if (user != NULL) become(&identity, groups, group_count);
  if (network_ready >= 0) unshare_network(network_ready, has_user_namespace);
  execv(argv[index], &argv[index]);
  int error = errno;
  fail(error == ENOENT ? 69 : 126, "cannot run bubblewrap '%s': %s", argv[index], reason(error));
}
