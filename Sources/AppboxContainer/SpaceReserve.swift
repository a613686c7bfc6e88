// appbox's own headroom on the file system of a device root.
//
// An app writes into its home, on the file system that holds appbox's own state (registry,
// keychain, journals, preferences, the default repository). Where the kernel bounds each
// app (project or user quotas, see docs/threat-model.md) this is headroom for the case no
// bound covers; where it cannot (no quota support, an unprivileged appbox), it is what keeps
// appbox working after an app used every free inode or block: SQLite cannot even open a
// database then (it needs its -wal and -shm files), nor can a preference be rewritten.
//
// Algorithm: `.appbox/reserve/` holds `inodeCount` empty files and one file of `byteCount`
// allocated bytes (fallocate), and the marker `complete` once all are there. Every session
// (DeviceSession.open) first looks at the file system (one statvfs): when fewer inodes or
// bytes are free to this process than the reserve holds, the file system is full, and the
// reserve is released (its files unlinked: the kernel hands their inodes and blocks to
// whoever asks next, which is this command in the common case of an app that stopped
// writing). A mutating session refills it when the file system has room again (at least
// four reserves' worth free), in the same place.
// Invariants: the reserve holds no data (empty files, or zeroes); releasing it never fails
// a command (a file already gone is fine); it is appbox's only use of space on its own
// behalf, and costs one statvfs and one stat per session while it is complete.

import AppboxCore
import Foundation
import Glibc

/// The headroom appbox keeps for itself in a device root.
public struct SpaceReserve: Sendable {
  /// Empty files held for appbox's own use: enough for the SQLite databases' -wal and -shm
  /// files, a preference's temporary file and a small install's directories.
  public static let inodeCount = 64
  /// Bytes held, as one allocated file.
  public static let byteCount: Int64 = 1 << 20

  public let directory: String

  public init(root: DeviceRoot) { directory = root.stateDirectory + "/reserve" }

  var marker: String { directory + "/complete" }
  var bytesFile: String { directory + "/bytes" }
  func inodeFile(_ index: Int) -> String { directory + "/inode-\(index)" }

  /// What this process may still use on the file system holding the reserve (root may use
  /// the blocks ext4 keeps for it), or nil when that cannot be told. Uses `statvfs(3)`.
  func free() -> (inodes: UInt64, bytes: UInt64)? {
    var info = statvfs()
    guard statvfs(splitPath(directory).directory, &info) == 0 else { return nil }
    let blocks = geteuid() == 0 ? UInt64(info.f_bfree) : UInt64(info.f_bavail)
    // A file system without an inode table (btrfs, tmpfs unbounded) reports 0 of 0.
    let inodes = info.f_files == 0 ? UInt64.max : UInt64(geteuid() == 0 ? info.f_ffree : info.f_favail)
    return (inodes, blocks * UInt64(info.f_frsize))
  }

  /// What `balance` did.
  public enum Outcome: Sendable, Equatable {
    case unchanged
    /// The file system was full: the reserve was released for this command.
    case released(freeInodes: UInt64, freeBytes: UInt64)
    case refilled
  }

  /// Releases the reserve when the file system is full; with `refill`, rebuilds it when the
  /// file system has room again.
  @discardableResult
  public func balance(refill: Bool) -> Outcome {
    guard let free = free() else { return .unchanged }
    let isComplete = access(marker, F_OK) == 0
    if free.inodes < UInt64(Self.inodeCount) || free.bytes < UInt64(Self.byteCount) {
      guard isComplete || access(directory, F_OK) == 0 else { return .unchanged }
      guard release() else { return .unchanged }
      return .released(freeInodes: free.inodes, freeBytes: free.bytes)
    }
    guard refill, !isComplete, free.inodes >= 4 * UInt64(Self.inodeCount),
      free.bytes >= 4 * UInt64(Self.byteCount)
    else { return .unchanged }
    return fill() ? .refilled : .unchanged
  }

  /// Unlinks the reserve's files; whether there were any.
  func release() -> Bool {
    var released = unlink(marker) == 0
    if unlink(bytesFile) == 0 { released = true }
    for index in 0..<Self.inodeCount where unlink(inodeFile(index)) == 0 { released = true }
    return released
  }

  /// Creates the reserve's files (those missing), the marker last. Gives up quietly (false)
  /// when the file system refuses: the reserve is a best effort, never a reason to fail.
  func fill() -> Bool {
    guard mkdir(directory, 0o700) == 0 || Errno.current == .exists else { return false }
    for index in 0..<Self.inodeCount {
      let fd = open(inodeFile(index), O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o600)
      guard fd >= 0 else { return false }
      close(fd)
    }
    let fd = open(bytesFile, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o600)
    guard fd >= 0 else { return false }
    let allocated = posix_fallocate(fd, 0, off_t(Self.byteCount))
    close(fd)
    // A file system without fallocate keeps the inodes only.
    guard allocated == 0 || allocated == EOPNOTSUPP else { return false }
    let made = open(marker, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o600)
    guard made >= 0 else { return false }
    close(made)
    return true
  }
}
