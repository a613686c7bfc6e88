// Per-app cgroup v2 limits, where the machine delegates a cgroup to appbox.
//
// A cgroup can hold limits for the app (pids.max, memory.max) only when its parent lets
// children use the pids and memory controllers, which cgroup v2 allows only for a parent
// with no processes of its own ("no internal processes"), and only when appbox may write
// there. So appbox uses:
//   1. the directory in $APPBOX_CGROUP, when set: a cgroup v2 directory delegated to the
//      user appbox runs as (for instance by systemd with Delegate=yes), whose
//      cgroup.subtree_control lists pids and memory;
//   2. otherwise its own cgroup, when that already passes the same test (appbox runs in
//      a cgroup v2 root, as in many containers);
//   3. otherwise none: the app is limited by RLIMIT_NPROC only, and memory is not capped.
//      This machine kind (a cgroup v1 and v2 hybrid whose v2 hierarchy has no pids or
//      memory controller) is in this case.
// For each run appbox makes `appbox-<CONTAINER-ID>-<pid>` below that directory, writes
// pids.max and memory.max, has the helper move itself there before it starts bubblewrap
// (everything the app starts stays inside), and removes it once the app's pid namespace
// is gone.

import AppboxCore
import CSystem
import Foundation
import Glibc

/// A cgroup v2 directory whose children may limit pids and memory.
public struct DelegatedCgroup: Sendable, Equatable {
  public let path: String

  /// The delegated cgroup to use, or nil (see the file's header for how it is chosen).
  public static func locate(environment: [String: String]) -> DelegatedCgroup? {
    if let explicit = environment["APPBOX_CGROUP"], !explicit.isEmpty {
      return usable(explicit) ? DelegatedCgroup(path: explicit) : nil
    }
    guard let own = ownCgroup(), usable(own) else { return nil }
    return DelegatedCgroup(path: own)
  }

  /// This process's cgroup v2 directory, from /proc/self/cgroup and the cgroup2 mount: one of
  /// the two usual places when it is there (unified, or a v1/v2 hybrid), else the first
  /// cgroup2 mount of /proc/self/mountinfo (a text of every mount, which the kernel writes
  /// out, on every start: the usual places are asked first). Uses `statfs(2)`.
  static func ownCgroup() -> String? {
    guard let cgroups = readSmallFile("/proc/self/cgroup"), let relative = cgroupPath(cgroupFile: cgroups)
    else {
      return nil
    }
    let mountPoint =
      ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"].first { appbox_is_cgroup2($0) == 1 }
      ?? readSmallFile("/proc/self/mountinfo").flatMap { cgroup2MountPoint(mountInfo: $0) }
    return mountPoint.map { relative == "/" ? $0 : $0 + relative }
  }

  /// The cgroup v2 directory named by a /proc/self/cgroup text ("0::/path") below the
  /// first cgroup2 mount of a /proc/self/mountinfo text, or nil.
  static func ownCgroup(cgroupFile: String, mountInfo: String) -> String? {
    guard let relative = cgroupPath(cgroupFile: cgroupFile),
      let mountPoint = cgroup2MountPoint(mountInfo: mountInfo)
    else { return nil }
    return relative == "/" ? mountPoint : mountPoint + relative
  }

  /// The path of the "0::/path" line of a /proc/self/cgroup text.
  private static func cgroupPath(cgroupFile: String) -> String? {
    cgroupFile.split(separator: "\n").first(where: { $0.hasPrefix("0::") }).map { String($0.dropFirst(3)) }
  }

  /// The mount point of the first cgroup2 mount of a /proc/self/mountinfo text.
  private static func cgroup2MountPoint(mountInfo: String) -> String? {
    for entry in mountInfo.split(separator: "\n") {
      // "<id> <parent> <dev> <root> <mount point> <options> ... - <fstype> <source> <super options>"
      // (split by hand, cheaper than Foundation's components(separatedBy:)).
      let fields = entry.split(separator: " ")
      guard let separator = fields.firstIndex(of: "-"), separator >= 5, separator + 1 < fields.count,
        fields[separator + 1] == "cgroup2"
      else { continue }
      return String(fields[4])
    }
    return nil
  }

  /// Whether `path` lets children limit pids and memory, and this process may make them.
  static func usable(_ path: String) -> Bool {
    guard let control = readSmallFile(path + "/cgroup.subtree_control") else {
      return false
    }
    let enabled = Set(control.split(whereSeparator: { $0 == " " || $0 == "\n" }).map(String.init))
    return enabled.contains("pids") && enabled.contains("memory") && access(path, W_OK | X_OK) == 0
  }

  /// Makes the cgroup of one run, with the limits written. Uses `mkdir(2)`.
  func makeChild(named name: String, limits: JailLimits) throws -> String {
    let child = path + "/" + name
    guard mkdir(child, 0o755) == 0 else { throw SystemError("create cgroup", path: child) }
    do {
      try write(String(limits.processes), to: child + "/pids.max")
      try write(String(limits.memoryBytes), to: child + "/memory.max")
    } catch {
      rmdir(child)
      throw error
    }
    return child
  }

  /// Removes a run's cgroup once its processes are gone (best effort).
  func removeChild(_ child: String) { rmdir(child) }

  private func write(_ text: String, to file: String) throws {
    let fd = try FileDescriptor.open(file, O_WRONLY)
    try fd.closeAfter { try $0.writeAll(Array(text.utf8)) }
  }
}
