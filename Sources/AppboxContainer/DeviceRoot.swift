import AppboxCore
import Foundation
import Glibc

/// One device: a root directory holding its identity, registry, homes, keychain and
/// default backup repository.
///
///     <root>/device.plist            identity
///     <root>/registry.db             installed apps
///     <root>/ApplicationRoot/<ID>/   homes
///     <root>/Shared/AppGroup/<ID>/   app group containers (AppGroups/)
///     <root>/Keychains/              keychain store and device key (0700)
///     <root>/Backups/                default backup repository
///     <root>/.appbox/                locks, journals, running-app locks
///
/// Locks (flock, released by the kernel however a process ends):
///     .appbox/lock                   the root lock: every mutating command holds it shared
///                                    while it runs; taken exclusive only briefly, to create
///                                    the device and to finish all the work killed appbox
///                                    processes left when no other appbox is active
///     .appbox/locks/<bundle-id>.lock one per app: held exclusive by whatever changes the app
///                                    (its home, registry row, preferences, keychain items,
///                                    backups), so commands on different apps run in parallel
///     .appbox/locks/<group-id>.lock  one per app group (`group.…`; no bundle identifier starts
///                                    so), taken after the app's lock by whatever changes the
///                                    group: its container, members, shared defaults, backups
///     registry.db, keychain.db       SQLite's own write lock, for each short transaction
public struct DeviceRoot: Sendable {
  /// The root's absolute, canonical path: no ".", "..", repeated or trailing slashes, and
  /// no symlink in the part that exists (realpath), so that every comparison of paths
  /// under the root compares like with like.
  public let path: String

  public init(path: String) {
    self.path = DeviceRoot.canonical(DeviceRoot.absolute(path))
  }

  /// The root named by `--root`, else `$APPBOX_ROOT`, else `${XDG_DATA_HOME:-~/.local/share}/appbox`.
  public static func resolve(explicit: String?, environment: [String: String]) -> DeviceRoot {
    if let explicit, !explicit.isEmpty { return DeviceRoot(path: explicit) }
    if let root = environment["APPBOX_ROOT"], !root.isEmpty { return DeviceRoot(path: root) }
    let data: String
    if let xdg = environment["XDG_DATA_HOME"], !xdg.isEmpty {
      data = xdg
    } else {
      data = (environment["HOME"] ?? NSHomeDirectory()) + "/.local/share"
    }
    return DeviceRoot(path: data + "/appbox")
  }

  static func absolute(_ path: String) -> String {
    var result = path.hasPrefix("/") ? path : FileManager.default.currentDirectoryPath + "/" + path
    while result.count > 1 && result.hasSuffix("/") { result.removeLast() }
    return result
  }

  /// `path` (absolute) with the longest part that exists resolved by realpath(3) and the
  /// rest (which does not exist yet, so holds no symlink) cleaned lexically.
  static func canonical(_ path: String) -> String {
    var existing = path
    var rest: [Substring] = []
    while true {
      if let resolved = realpath(existing, nil) {
        defer { free(resolved) }
        var parts = String(cString: resolved).split(separator: "/", omittingEmptySubsequences: true)
        for part in rest.reversed() {
          switch part {
          case ".", "": continue
          case "..": if !parts.isEmpty { parts.removeLast() }
          default: parts.append(part)
          }
        }
        return "/" + parts.joined(separator: "/")
      }
      guard existing != "/", let slash = existing.lastIndex(of: "/") else { return path }
      rest.append(existing[existing.index(after: slash)...])
      existing = slash == existing.startIndex ? "/" : String(existing[..<slash])
    }
  }

  public var deviceFile: String { path + "/device.plist" }
  public var registryFile: String { path + "/registry.db" }
  public var applicationRoot: String { path + "/ApplicationRoot" }
  /// Where app group containers live: `Shared/AppGroup/<CONTAINER-ID>`.
  public var appGroupRoot: String { path + "/Shared/AppGroup" }
  public var keychains: String { path + "/Keychains" }
  public var backups: String { path + "/Backups" }
  public var stateDirectory: String { path + "/.appbox" }
  public var journalDirectory: String { stateDirectory + "/journal" }
  public var runningDirectory: String { stateDirectory + "/running" }
  var lockFile: String { stateDirectory + "/lock" }
  public var locksDirectory: String { stateDirectory + "/locks" }

  /// The lock file of app `bundleIdentifier`; nil for a name that is not a bundle
  /// identifier (it could not name an app, and must not name a path).
  func appLockFile(_ bundleIdentifier: String) -> String? {
    BundleInfo.isValidIdentifier(bundleIdentifier) ? locksDirectory + "/\(bundleIdentifier).lock" : nil
  }

  /// The home of container `id`.
  public func home(_ containerID: String) -> String { applicationRoot + "/" + containerID }

  /// Creates the root's directories if missing (mode 0700 for the private ones).
  public func createLayout() throws {
    try makeDirectory(path, mode: 0o755)
    try makeDirectory(applicationRoot, mode: 0o755)
    // Homes are unrelated trees, created and deleted wholesale (install, restore, update):
    // spread them over the disk, so building one never crawls through inodes another just
    // freed (ext4 skips recently deleted inodes one by one; a restore ran 6x slower).
    if let fd = try? FileDescriptor.open(applicationRoot, O_RDONLY | O_DIRECTORY | O_NOFOLLOW) {
      fd.markAsTopDirectory()
      fd.close()
    }
    try makeDirectory(path + "/Shared", mode: 0o755)
    try makeDirectory(appGroupRoot, mode: 0o755)
    try makeDirectory(keychains, mode: 0o700)
    try makeDirectory(backups, mode: 0o700)
    try makeDirectory(stateDirectory, mode: 0o700)
    try makeDirectory(journalDirectory, mode: 0o700)
    try makeDirectory(runningDirectory, mode: 0o700)
    try makeDirectory(locksDirectory, mode: 0o700)
  }

  private func makeDirectory(_ path: String, mode: mode_t) throws {
    if Glibc.mkdir(path, mode) == 0 { return }
    let errno = Errno.current
    if errno == .noEntry {
      // A missing parent: create the chain (the root may be a new nested path).
      try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
      return
    }
    guard errno == .exists else { throw SystemError("create directory", path: path, errno: errno) }
    var st = stat()
    guard lstat(path, &st) == 0, FileStatus(st).type == .directory else {
      throw ContainerError(.invalidDevice, "Device root is unusable: '\(path)' is not a directory")
    }
  }

  /// The prefix of temporary directories in `.appbox/` holding a bundle extracted from a
  /// backup (restore, revert) until it is installed.
  public static let temporaryBundlePrefix = "restore-bundle-"

  /// Whether a killed appbox left work behind (or a live one is at work): journal entries,
  /// staging and trash directories in ApplicationRoot and Shared/AppGroup, extracted
  /// bundles, an erase's discard directory. Four directory reads.
  public func hasPendingRecovery() -> Bool {
    let fileManager = FileManager.default
    if let journal = try? fileManager.contentsOfDirectory(atPath: journalDirectory), !journal.isEmpty {
      return true
    }
    let homes = (try? fileManager.contentsOfDirectory(atPath: applicationRoot)) ?? []
    if homes.contains(where: { $0.hasPrefix(".") }) { return true }
    let groups = (try? fileManager.contentsOfDirectory(atPath: appGroupRoot)) ?? []
    if groups.contains(where: { $0.hasPrefix(".") }) { return true }
    let state = (try? fileManager.contentsOfDirectory(atPath: stateDirectory)) ?? []
    return state.contains {
      $0.hasPrefix(DeviceRoot.temporaryBundlePrefix) || $0.hasPrefix(Lifecycle.stateDiscardPrefix)
    }
  }

  /// Takes the root lock, exclusive (creating the device) or shared (a mutating command,
  /// for as long as it runs). The root lock is only ever held exclusively for short work, so
  /// it waits at least 5 seconds (longer when `lockWait`, the command line's `--wait`, says
  /// so), then fails as busy (exit 75).
  public func lock(exclusive: Bool = true, lockWait: LockWait = .none) throws -> FileLock {
    try FileLock.acquire(
      lockFile, exclusive: exclusive, timeout: lockWait.atLeast(.seconds(5)),
      what: "Device root '\(path)'")
  }

  /// The root lock, exclusive, if no other appbox holds it in any way right now.
  func attemptExclusiveLock() throws -> FileLock? { try FileLock.attempt(lockFile, exclusive: true) }

  /// Takes app `bundleIdentifier`'s lock, waiting as long as `lockWait` says (not at all when
  /// none was given); busy (exit 75) naming the app when another appbox holds it.
  func lockApp(_ bundleIdentifier: String, lockWait: LockWait) throws -> FileLock {
    guard let file = appLockFile(bundleIdentifier) else {
      throw ContainerError(.appNotFound, "No app '\(bundleIdentifier)' is installed")
    }
    return try FileLock.acquire(
      file, exclusive: true, timeout: lockWait.duration,
      what: (AppGroupIdentifier.hasGroupPrefix(bundleIdentifier) ? "App group " : "App ") + bundleIdentifier)
  }
}
