// Each app's own unprivileged user, and handing its data to that user.
//
// Every installed app gets a uid (its gid is the same number) at install, chosen at
// random from `AppUser.range` among the uids this device has not used, recorded in the
// registry (`apps.uid`, and `app_users`, which keeps it for the bundle identifier after
// an uninstall), and kept across update, revert and a restore that reinstalls the app
// (as Android keeps an app's uid). The range is one systemd leaves unassigned
// (0x70000000-0x70FFFFFF: above the container ranges, below 2^31); choosing at random
// makes two device roots on one machine unlikely to share a uid.
//
// When appbox runs as root the app runs as that host uid, so the app's data (Documents,
// Library, tmp and everything in them) must belong to it, while the home itself, the
// bundle and all of appbox's state stay root's. Every path that puts data into a home
// hands it over: install (the empty directories), update (the directories it creates),
// restore and import (the whole staged tree, in HomeSwap), revert (the materialized
// data), preferences and file sharing (each file they write), launch (a recreated tmp).
// `run` and `launch` check the three top directories first and hand the whole tree over
// when they belong to someone else (a device used before sandbox v2, or by an
// unprivileged appbox). When appbox runs unprivileged, the data stays the caller's:
// bubblewrap maps the app's uid to the caller inside the jail.
//
// The hand-over walks with descriptors and never follows a symlink (fchownat with
// AT_SYMLINK_NOFOLLOW, directories opened with O_NOFOLLOW), one directory open at a time.

import AppboxCore
import Foundation
import Glibc

/// The unprivileged users apps run as.
public enum AppUser {
  /// The uids (and gids) apps get.
  public static let range: ClosedRange<UInt32> = 0x7000_0000...0x70FF_FFFF

  /// A uid from `range` not in `used`, chosen at random.
  static func randomUID(avoiding used: Set<UInt32>) -> UInt32 {
    var generator = SystemRandomNumberGenerator()
    while true {
      let candidate = UInt32.random(in: range, using: &generator)
      if !used.contains(candidate) { return candidate }
    }
  }

  /// Whether appbox runs as a root that can become the apps' uids (root of the initial
  /// user namespace, or of one that maps the whole app range), so that apps run as their
  /// own host uids. Root inside a rootless container is not: its apps run as unprivileged.
  public static let isPrivileged: Bool = {
    guard geteuid() == 0 else { return false }
    guard let map = readSmallFile("/proc/self/uid_map") else { return true }
    return mapsAppRange(map)
  }()

  /// Whether a /proc/self/uid_map text maps every uid of `range` inside the namespace.
  static func mapsAppRange(_ map: String) -> Bool {
    map.split(separator: "\n").contains { line in
      let fields = line.split(separator: " ").compactMap { UInt64($0) }
      guard fields.count == 3 else { return false }
      return fields[0] <= UInt64(range.lowerBound) && UInt64(range.upperBound) < fields[0] + fields[2]
    }
  }

  /// Who owns `app`'s data on disk: its uid when appbox runs as root, nil when it runs
  /// unprivileged (the caller owns everything; the jail maps the app's uid to it).
  public static func dataOwner(of app: AppRecord) -> UInt32? { isPrivileged ? app.uid : nil }
}

/// Handing an app's data to its uid.
public enum DataOwnership {
  /// The directories of a home (or of a staging area shaped like one) that are the
  /// app's data.
  public static let dataDirectories = ["Documents", "Library", "tmp"]

  /// Gives `name` in `parent` (not following it) to `owner`. Uses `fchownat(2)`.
  public static func handOver(_ name: String, in parent: FileDescriptor, to owner: UInt32) throws {
    guard fchownat(parent.rawValue, name, owner, owner, AT_SYMLINK_NOFOLLOW) == 0 else {
      throw SystemError("change the owner of", path: name)
    }
  }

  /// `handOver(_:in:to:)` for an entry named by raw bytes (names need not be UTF-8).
  public static func handOver(rawName: [UInt8], in parent: FileDescriptor, to owner: UInt32) throws {
    let result = withCName(rawName) { fchownat(parent.rawValue, $0, owner, owner, AT_SYMLINK_NOFOLLOW) }
    guard result == 0 else {
      throw SystemError("change the owner of", path: String(decoding: rawName, as: UTF8.self))
    }
  }

  /// Gives the standard directories of the home open at `home` to `owner`, without
  /// looking inside them (after an update, whose moved data already is the app's).
  public static func handOverStandardDirectories(in home: FileDescriptor, to owner: UInt32) throws {
    for path in Home.standardDirectories where try home.statusIfPresent(of: path)?.type == .directory {
      try handOver(path, in: home, to: owner)
    }
  }

  /// Gives Documents, Library and tmp below `home` (a home or a staging directory), and
  /// everything inside them, to `owner`.
  public static func handOverData(in home: FileDescriptor, to owner: UInt32) throws {
    for name in dataDirectories {
      guard let status = try home.statusIfPresent(of: name) else { continue }
      try handOver(name, in: home, to: owner)
      if status.type == .directory {
        let directory = try home.open(name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
        try handOverTree(startingAt: directory, to: owner)
      }
    }
  }

  /// Gives the directory open at `directory` and everything below it to `owner` (an app
  /// group's container, which is all data); `directory` stays open.
  public static func handOverTree(of directory: FileDescriptor, to owner: UInt32) throws {
    guard fchown(directory.rawValue, owner, owner) == 0 else {
      throw SystemError("change the owner of", path: "a shared container")
    }
    try handOverTree(startingAt: try directory.duplicate(), to: owner)
  }

  /// Whether the data directories of the home open at `home` all belong to `owner`.
  public static func dataBelongs(in home: FileDescriptor, to owner: UInt32) throws -> Bool {
    for name in dataDirectories {
      if let status = try home.statusIfPresent(of: name), status.uid != owner { return false }
    }
    return true
  }

  /// Gives everything below the directory `start` (consumed) to `owner`, depth first,
  /// keeping one directory open: it climbs back with "..", checking that it lands on the
  /// directory it came from.
  private static func handOverTree(startingAt start: FileDescriptor, to owner: UInt32) throws {
    // Each level: its inode (to check the climb), and the names still to visit.
    var stack: [(inode: UInt64, pending: [[UInt8]])] = []
    var current = start
    defer { current.close() }
    stack.append((try current.status().inode, try current.entries().map(\.name)))
    while !stack.isEmpty {
      guard let name = stack[stack.count - 1].pending.popLast() else {
        stack.removeLast()
        if stack.isEmpty { break }
        let parent = try current.open("..", O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
        current.close()
        current = parent
        guard try current.status().inode == stack[stack.count - 1].inode else {
          throw SystemError("change owners below", path: "a directory that moved", errno: .ioError)
        }
        continue
      }
      let isDirectory = try withCName(name) { cName -> Bool in
        var st = stat()
        guard fstatat(current.rawValue, cName, &st, AT_SYMLINK_NOFOLLOW) == 0 else {
          throw SystemError("stat", path: String(decoding: name, as: UTF8.self))
        }
        guard fchownat(current.rawValue, cName, owner, owner, AT_SYMLINK_NOFOLLOW) == 0 else {
          throw SystemError("change the owner of", path: String(decoding: name, as: UTF8.self))
        }
        return FileStatus(st).type == .directory
      }
      if isDirectory {
        let child = try current.open(rawName: name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
        current.close()
        current = child
        stack.append((try current.status().inode, try current.entries().map(\.name)))
      }
    }
  }
}

extension DeviceSession {
  /// Makes sure `app`'s data belongs to the uid it will run as: as root, hands it over
  /// when the top directories belong to someone else; unprivileged, refuses (exit 77)
  /// data a root appbox gave to the app's uid, which the jail could not map.
  func prepareDataOwnership(of app: AppRecord) throws {
    let home = try FileDescriptor.open(root.home(app.containerID), O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
    defer { home.close() }
    if let owner = AppUser.dataOwner(of: app) {
      if try !DataOwnership.dataBelongs(in: home, to: owner) {
        try DataOwnership.handOverData(in: home, to: owner)
      }
    } else if try !DataOwnership.dataBelongs(in: home, to: geteuid()) {
      throw ContainerError(
        .denied,
        "Cannot run \(app.bundleIdentifier) as uid \(geteuid()): its data belongs to another user (a root "
          + "appbox gave it to the app's uid \(app.uid)); run appbox as root for this device")
    }
    try prepareGroupDataOwnership(of: app)
  }
}
