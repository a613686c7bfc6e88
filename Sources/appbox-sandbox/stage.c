/* enter's staging (step 3 of enter.c): the sources bubblewrap binds, mounted in enter's
 * private mount namespace where bubblewrap, unprivileged, can reach them, with the flags
 * the jail must keep, and the jail's /etc. Every failure is one line and an exit status
 * (fail()). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sandbox.h"
#include "stage.h"

void write_file(const char *path, const char *text) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) fail(71, "cannot open '%s': %s", path, reason(errno));
  size_t length = strlen(text);
  if (write(fd, text, length) != (ssize_t)length) fail(71, "cannot write '%s': %s", path, reason(errno));
  close(fd);
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

void stage(struct staged *items, int count, const struct identity *user) {
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
    } else {
      if (mount(source, target, NULL, MS_BIND, NULL) != 0) {
        fail(71, "cannot stage '%s': %s", items[i].path, reason(errno));
      }
      unsigned long flags = kept_flags(target) | MS_NOSUID | MS_NODEV;
      if (items[i].access != READ_EXECUTE) flags |= MS_NOEXEC;
      if (items[i].access != READ_WRITE) flags |= MS_RDONLY;
      if (mount(NULL, target, NULL, MS_REMOUNT | MS_BIND | flags, NULL) != 0) {
        fail(71, "cannot restrict the mount of '%s': %s", items[i].path, reason(errno));
      }
    }
    close(items[i].fd);
  }
}

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
void stage_etc(const struct etc_entry *entries, int count) {
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
