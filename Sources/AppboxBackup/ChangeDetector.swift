// Change detection: a pure function of (current stat, previous tree entry).
//
// A file is unchanged when its type, permission bits, size, modification time (ns), change
// time (ns) and inode all equal what the previous snapshot recorded. Its content digest,
// extended attributes and "exclude from backup" flag are then reused without reading the
// file: writing data moves mtime and ctime, and setting an xattr, chmod, chown, link and
// rename-over all move ctime, so none of them can happen without the stat changing.
//
// One exception keeps this sound on a clock with coarse ticks ("racily clean" entries, as
// git calls them): a file whose ctime is not safely before the moment the previous snapshot
// started reading could have been changed again within the same tick after it was read, and
// its stat would not show it. Such entries count as changed, so they are read once more.

import AppboxCore

/// Decides whether a previous snapshot's entry can stand for a file as it is now.
public enum ChangeDetector {
  /// How far before the previous snapshot's start an entry's ctime must be for its stat to
  /// be trusted: more than a kernel timestamp tick, with a wide margin.
  public static let racyWindowNanoseconds: Int64 = 1_000_000_000

  /// Whether `status` matches `previous` (see the file comment). `trustedBefore` is the
  /// previous snapshot's start time in nanoseconds since the epoch.
  public static func isUnchanged(_ status: FileStatus, previous: TreeEntry?, trustedBefore: Int64) -> Bool {
    guard let previous else { return false }
    guard let type = TreeEntryType(status.type), type == previous.type else { return false }
    return previous.size == status.size
      && previous.modificationTime == status.modificationTime.totalNanoseconds
      && previous.changeTime == status.changeTime.totalNanoseconds
      && previous.inode == status.inode
      && previous.permissions == UInt32(status.permissions)
      && previous.changeTime < trustedBefore - racyWindowNanoseconds
  }
}

extension TreeEntryType {
  /// The tree type of a file system object; nil for devices and unknown types, which a home
  /// must not hold.
  init?(_ type: FileType) {
    switch type {
    case .regular: self = .file
    case .directory: self = .directory
    case .symlink: self = .symlink
    case .fifo: self = .fifo
    case .socket: self = .socket
    case .characterDevice, .blockDevice, .unknown: return nil
    }
  }
}

extension TreeEntry {
  /// An entry describing `status` (digest, target and attributes to be filled in).
  init(name: [UInt8], status: FileStatus, type: TreeEntryType) {
    self.init(
      name: name, type: type, permissions: UInt32(status.permissions), uid: status.uid, gid: status.gid,
      size: status.size,
      modificationTime: status.modificationTime.totalNanoseconds, changeTime: status.changeTime.totalNanoseconds,
      inode: status.inode, linkCount: status.linkCount)
  }
}
