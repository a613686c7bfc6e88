import AppboxCore
import Foundation
import Glibc

/// One device: a root directory holding its identity, registry, homes, keychain and
/// default backup repository.
///
///     <root>/device.plist            identity
///     <root>/registry.db             installed apps
///     <root>/ApplicationRoot/<ID>/   homes
///     <root>/Keychains/              keychain store and device key (0700)
///     <root>/Backups/                default backup repository
///     <root>/.appbox/                locks, journals, running-app locks
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
  public var keychains: String { path + "/Keychains" }
  public var backups: String { path + "/Backups" }
  public var stateDirectory: String { path + "/.appbox" }
  public var journalDirectory: String { stateDirectory + "/journal" }
  public var runningDirectory: String { stateDirectory + "/running" }
  var lockFile: String { stateDirectory + "/lock" }

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
    try makeDirectory(keychains, mode: 0o700)
    try makeDirectory(backups, mode: 0o700)
    try makeDirectory(stateDirectory, mode: 0o700)
    try makeDirectory(journalDirectory, mode: 0o700)
    try makeDirectory(runningDirectory, mode: 0o700)
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

  /// Whether a killed appbox left work behind: journal entries, or staging and trash
  /// directories in ApplicationRoot. Two directory reads.
  public func hasPendingRecovery() -> Bool {
    let fileManager = FileManager.default
    if let journal = try? fileManager.contentsOfDirectory(atPath: journalDirectory), !journal.isEmpty {
      return true
    }
    let homes = (try? fileManager.contentsOfDirectory(atPath: applicationRoot)) ?? []
    return homes.contains { $0.hasPrefix(".") }
  }

  /// Takes the root's exclusive lock: one mutating appbox command at a time. Waits up to
  /// `$APPBOX_LOCK_TIMEOUT` seconds (default 5), then fails as busy (exit 75).
  public func lock(environment: [String: String] = ProcessInfo.processInfo.environment) throws -> FileLock {
    let seconds = environment["APPBOX_LOCK_TIMEOUT"].flatMap(Double.init) ?? 5
    return try FileLock.acquire(
      lockFile, exclusive: true, timeout: .milliseconds(Int(seconds * 1000)), what: "Device root '\(path)'")
  }
}
