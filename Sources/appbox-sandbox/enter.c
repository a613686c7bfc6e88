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
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <signal.h>
#include <stdint.h>
#include <unistd.h>

#include "sandbox.h"

#define MAX_STAGED 64
#define MAX_GROUPS 32
#define MAX_ETC 32
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

/* A user namespace mapping `owner` (as uid and gid) to `user`, for an idmapped mount:
 * an on-disk id is read as an id inside the namespace and shown as the outside one.
 * A child enters a new user namespace; we (root) write its maps, keep a descriptor of
 * it, and let it go. Returns the namespace's descriptor. */
static int idmap_namespace(unsigned long owner, const struct identity *user) {
  int ready[2];
  if (pipe2(ready, O_CLOEXEC) != 0) fail(71, "cannot make a pipe: %s", reason(errno));
  pid_t child = fork();
  if (child < 0) fail(71, "cannot fork: %s", reason(errno));
  if (child == 0) {
    char byte = 0;
    close(ready[0]);
    if (unshare(CLONE_NEWUSER) != 0) _exit(1);
    if (write(ready[1], &byte, 1) != 1) _exit(1);
    pause();  /* until killed below */
    _exit(0);
  }
  close(ready[1]);
  char byte;
  ssize_t got = read(ready[0], &byte, 1);
  close(ready[0]);
  if (got != 1) {
    waitpid(child, NULL, 0);
    fail(71, "cannot create a user namespace for an idmapped mount");
  }
  char path[64], map[64];
  snprintf(map, sizeof map, "%lu %u 1", owner, (unsigned)user->uid);
  snprintf(path, sizeof path, "/proc/%d/uid_map", (int)child);
  write_file(path, map);
  snprintf(path, sizeof path, "/proc/%d/setgroups", (int)child);
  write_file(path, "deny");
  snprintf(map, sizeof map, "%lu %u 1", owner, (unsigned)user->gid);
  snprintf(path, sizeof path, "/proc/%d/gid_map", (int)child);
  write_file(path, map);
  snprintf(path, sizeof path, "/proc/%d/ns/user", (int)child);
  int namespace = open(path, O_RDONLY | O_CLOEXEC);
  int error = errno;
  kill(child, SIGKILL);
  waitpid(child, NULL, 0);
  if (namespace < 0) fail(71, "cannot open the user namespace of an idmapped mount: %s", reason(error));
  return namespace;
}

/* Mounts the directory open at `fd` on `target`, read-write, nosuid, nodev, noexec, with
 * its `owner` shown as `user`. A file system that cannot be idmapped is exit 69. */
static void stage_shared(const struct staged *item, const char *target, const struct identity *user) {
  int namespace = idmap_namespace(item->owner, user);
  int tree = open_tree(item->fd, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH);
  if (tree < 0) fail(71, "cannot stage '%s': %s", item->path, reason(errno));
  struct mount_attr attributes = {
      .attr_set = MOUNT_ATTR_IDMAP | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC,
      .userns_fd = (uint64_t)namespace,
  };
  if (mount_setattr(tree, "", AT_EMPTY_PATH, &attributes, sizeof attributes) != 0) {
    int error = errno;
    fail(error == EINVAL || error == EPERM || error == ENOSYS ? 69 : 71,
         "cannot share '%s' between apps: its file system cannot be idmapped (%s; idmapped mounts need "
         "Linux 5.12 or later and ext4, xfs, btrfs or, from Linux 6.3, tmpfs)",
         item->path, reason(error));
  }
  close(namespace);
  if (move_mount(tree, "", AT_FDCWD, target, MOVE_MOUNT_F_EMPTY_PATH) != 0) {
    fail(71, "cannot stage '%s': %s", item->path, reason(errno));
  }
  close(tree);
}

static void stage(struct staged *items, int count, const struct identity *user) {
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
    if (items[i].owner != 0) {
      if (!S_ISDIR(st.st_mode)) fail(64, "a shared stage must be a directory, not '%s'", items[i].path);
      stage_shared(&items[i], target, user);
      close(items[i].fd);
      continue;
    }
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

/* A file of the jail's /etc (step 3): the host's /etc/NAME, or NAME written from `fd`. */
struct etc_entry {
  const char *name;
  int fd; /* -1: the host's file */
};

/* Mounts `path`'s inode (open at `fd`) on `target`, read-only, nosuid, nodev, noexec. */
static void bind_read_only(int fd, const char *path, const char *target) {
  char source[64];
  snprintf(source, sizeof source, "/proc/self/fd/%d", fd);
  if (mount(source, target, NULL, MS_BIND, NULL) != 0) fail(71, "cannot stage '%s': %s", path, reason(errno));
  unsigned long flags = kept_flags(target) | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC;
  if (mount(NULL, target, NULL, MS_REMOUNT | MS_BIND | flags, NULL) != 0) {
    fail(71, "cannot restrict the mount of '%s': %s", path, reason(errno));
  }
}

/* Step 3's /etc: a tmpfs on ETC_STAGING with the host's files bound and the given ones written. */
static void stage_etc(const struct etc_entry *entries, int count) {
  if (mkdir(ETC_STAGING, 0755) != 0) fail(71, "cannot create '%s': %s", ETC_STAGING, reason(errno));
  if (mount("appbox-etc", ETC_STAGING, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0755,size=1m") != 0) {
    fail(71, "cannot mount a private tmpfs on %s: %s", ETC_STAGING, reason(errno));
  }
  for (int i = 0; i < count; i++) {
    char target[256], host[256];
    snprintf(target, sizeof target, "%s/%s", ETC_STAGING, entries[i].name);
    if (entries[i].fd >= 0) {
      int out = open(target, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
      if (out < 0) fail(71, "cannot create '%s': %s", target, reason(errno));
      char buffer[4096];
      ssize_t got;
      while ((got = read(entries[i].fd, buffer, sizeof buffer)) != 0) {
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) fail(71, "cannot read the jail's /etc/%s: %s", entries[i].name, reason(errno));
        if (write(out, buffer, (size_t)got) != got) fail(71, "cannot write '%s': %s", target, reason(errno));
      }
      close(out);
      close(entries[i].fd);
      continue;
    }
    snprintf(host, sizeof host, "/etc/%s", entries[i].name);
    int fd = open(host, O_PATH | O_CLOEXEC);
    if (fd < 0) {
      if (errno == ENOENT || errno == ENOTDIR) continue; /* not on this host: not in the jail */
      fail(71, "cannot open '%s' to show it to the app: %s", host, reason(errno));
    }
    struct stat st;
    if (fstat(fd, &st) != 0) fail(71, "cannot stat '%s': %s", host, reason(errno));
    int made = S_ISDIR(st.st_mode) ? mkdir(target, 0755) : mknod(target, S_IFREG | 0644, 0);
    if (made != 0) fail(71, "cannot create the mount point '%s': %s", target, reason(errno));
    bind_read_only(fd, host, target);
    close(fd);
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
