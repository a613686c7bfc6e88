// A backup repository: a directory holding `catalog.db`, `archives/` and `locks/`.
//
// Locking (flock, released by the kernel however a process ends):
// - `locks/<bundle-id>.lock`, exclusive: one writer (backup, forget) per app at a time;
// - `locks/repository.lock`: every writer holds it shared while it works; removing debris,
//   `forget` and rebuilding the catalog need it exclusive, so no archive being written by
//   someone else can be mistaken for debris.
// Debris is what a killed writer leaves: `archives/.tmp-*` files, and archive files the
// catalog does not name (renamed into place, but the catalog commit never happened, or
// dropped by a `forget` that died before deleting them). It is removed under the exclusive
// lock by the next writer that can take it.

import AppboxArchive
import AppboxContainer
import AppboxCore
import Foundation
import Glibc

/// An open repository and its catalog.
public final class Repository {
  public let path: String
  public let catalog: Catalog
  let environment: [String: String]

  public var archivesPath: String { path + "/archives" }
  public var catalogPath: String { path + "/catalog.db" }
  var locksPath: String { path + "/locks" }

  static let temporaryPrefix = ".tmp-"

  /// Opens the repository at `path`, creating it (and its parents) when `create` is true.
  /// A missing repository without `create` is `.snapshotNotFound` (exit 66).
  public init(
    path: String, create: Bool = true, environment: [String: String] = ProcessInfo.processInfo.environment
  )
    throws
  {
    var trimmed = path
    while trimmed.count > 1 && trimmed.hasSuffix("/") { trimmed.removeLast() }
    if !trimmed.hasPrefix("/") { trimmed = FileManager.default.currentDirectoryPath + "/" + trimmed }
    self.path = trimmed
    self.environment = environment
    if !create && !FileManager.default.fileExists(atPath: trimmed + "/catalog.db") {
      throw BackupError(.snapshotNotFound, "No backup repository at '\(trimmed)'")
    }
    for directory in [trimmed, trimmed + "/archives", trimmed + "/locks"] {
      try Repository.makeDirectories(directory)
    }
    catalog = try Catalog(path: trimmed + "/catalog.db")
  }

  /// Creates `path` and any missing parents (mode 0700). Uses `mkdir(2)`, reading errno
  /// right after each call (Foundation's errors do not carry it reliably).
  static func makeDirectories(_ path: String) throws {
    if Glibc.mkdir(path, 0o700) == 0 { return }
    let errno = Errno.current
    switch errno {
    case .exists:
      var isDirectory: ObjCBool = false
      guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory), isDirectory.boolValue
      else {
        throw SystemError("create directory", path: path, errno: .notDirectory)
      }
    case .noEntry:
      let parent = splitPath(path).directory
      guard parent != path, parent != "/" else {
        throw SystemError("create directory", path: path, errno: errno)
      }
      try makeDirectories(parent)
      guard Glibc.mkdir(path, 0o700) == 0 || Errno.current == .exists else {
        throw SystemError("create directory", path: path)
      }
    default:
      throw SystemError("create directory", path: path, errno: errno)
    }
  }

  /// How long to wait for an app's writer lock: `$APPBOX_LOCK_TIMEOUT` (`--wait`), else not
  /// at all. The repository-wide lock is held exclusively only for maintenance (debris,
  /// `forget`), so waiting for it is waiting for that: at least 5 seconds.
  private var lockTimeout: Duration { DeviceRoot.lockTimeout(environment: environment) }
  private var repositoryLockTimeout: Duration { max(.seconds(5), lockTimeout) }

  /// The per-app writer lock; busy (exit 75) unless it frees within `lockTimeout`.
  public func lockApp(_ bundleIdentifier: String) throws -> FileLock {
    try FileLock.acquire(
      locksPath + "/\(bundleIdentifier).lock", exclusive: true, timeout: lockTimeout,
      what: "Backups of \(bundleIdentifier) in '\(path)'")
  }

  /// The repository-wide lock, shared for writers and exclusive for maintenance.
  public func lockRepository(exclusive: Bool) throws -> FileLock {
    try FileLock.acquire(
      locksPath + "/repository.lock", exclusive: exclusive, timeout: repositoryLockTimeout,
      what: "Repository '\(path)'")
  }

  /// Takes the repository lock shared for a writer, removing debris first when no other
  /// writer is active (that needs it exclusive for a moment).
  public func lockForWriting() throws -> FileLock {
    if let lock = try FileLock.attempt(locksPath + "/repository.lock", exclusive: true) {
      try removeDebris()
      try lock.convert(exclusive: false)
      return lock
    }
    return try lockRepository(exclusive: false)
  }

  /// Removes temp files and archives the catalog does not know. Call holding the repository
  /// lock exclusively. Returns the names removed.
  @discardableResult
  public func removeDebris() throws -> [String] {
    let known = Set(try catalog.archives().map(\.name))
    let directory = try FileDescriptor.open(archivesPath, O_RDONLY | O_DIRECTORY)
    defer { directory.close() }
    var removed: [String] = []
    for entry in try directory.entries() {
      let name = entry.nameString
      if known.contains(name) { continue }
      try FileTree.remove(name, in: directory)
      removed.append(name)
    }
    if !removed.isEmpty { try directory.sync() }
    return removed
  }

  /// Files in `archives/` the catalog does not name (debris not yet removed).
  public func unknownArchiveFiles() throws -> [String] {
    let known = Set(try catalog.archives().map(\.name))
    let names = try FileManager.default.contentsOfDirectory(atPath: archivesPath)
    return names.filter { !known.contains($0) }.sorted()
  }

  /// A fresh snapshot id: 8 lowercase hex digits, unused by any snapshot or archive file.
  func newSnapshotID() throws -> String {
    let existing = Set(try FileManager.default.contentsOfDirectory(atPath: archivesPath))
    while true {
      let id = String(format: "%08x", UInt32.random(in: 0...UInt32.max))
      if try catalog.snapshot(id: id) != nil { continue }
      if existing.contains(where: { $0.hasPrefix(id + ".") || $0.hasPrefix(Repository.temporaryPrefix + id) })
      {
        continue
      }
      return id
    }
  }

  /// The absolute path of archive `name`.
  public func archivePath(_ name: String) -> String { archivesPath + "/" + name }

  /// The app's most recent snapshot, or its most recent one carrying `tag` ("pre-update").
  public func latestSnapshot(app: String, tag: String? = nil) throws -> Snapshot? {
    try catalog.snapshots(app: app).last { tag == nil || $0.tag == tag }
  }

  /// Looks up a snapshot by id (or `latest` of `app`); exit 66 when there is none.
  public func snapshot(_ id: String, app: String? = nil) throws -> Snapshot {
    if id == "latest" {
      guard let app else { throw BackupError(.invalidRequest, "'latest' needs an app") }
      guard let last = try catalog.snapshots(app: app).last else {
        throw BackupError(.snapshotNotFound, "No snapshots of '\(app)' in '\(path)'")
      }
      return last
    }
    guard let snapshot = try catalog.snapshot(id: id), app.map({ $0 == snapshot.app }) ?? true else {
      throw BackupError(
        .snapshotNotFound, "No snapshot '\(id)'\(app.map { " of '\($0)'" } ?? "") in '\(path)'")
    }
    return snapshot
  }
}
