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
// its stat would not show it. Such entries count as changed, so they are read once more;
// the archiver then hashes them before writing anything and stores nothing when the digest
// is the one recorded (which it almost always is). File timestamps come from the kernel's
// coarse clock, one tick (at most 10 ms) behind; the window allows ten times that.

import AppboxCore
import AppboxRepository
import Glibc

/// What differs between a file's stat now and a previous snapshot's entry for it, as change
/// detection sees it: any member means the file is read again.
public struct StatChanges: OptionSet, Sendable, Hashable {
  public let rawValue: UInt8
  public init(rawValue: UInt8) { self.rawValue = rawValue }

  /// It is another kind of object now (a file became a directory, a link...).
  public static let type = StatChanges(rawValue: 1 << 0)
  public static let size = StatChanges(rawValue: 1 << 1)
  public static let modificationTime = StatChanges(rawValue: 1 << 2)
  public static let changeTime = StatChanges(rawValue: 1 << 3)
  public static let inode = StatChanges(rawValue: 1 << 4)
  /// The permission bits (`mode & 0o7777`).
  public static let mode = StatChanges(rawValue: 1 << 5)
  /// Every field matches, but its ctime is too close to the previous snapshot's start to be
  /// trusted (see the racy window): it is read again and stored only if its content differs.
  public static let tooRecent = StatChanges(rawValue: 1 << 6)
}

/// Decides whether a previous snapshot's entry can stand for a file as it is now.
public enum ChangeDetector {
  /// How far before the previous snapshot's start an entry's ctime must be for its stat to
  /// be trusted: more than a kernel timestamp tick, with a wide margin.
  public static let racyWindowNanoseconds: Int64 = 100_000_000

  /// Whether `status` matches `previous` (see the file comment). `trustedBefore` is the
  /// previous snapshot's start time in nanoseconds since the epoch.
  public static func isUnchanged(_ status: FileStatus, previous: TreeEntry?, trustedBefore: Int64) -> Bool {
    guard let previous else { return false }
    return changes(status, previous: previous, trustedBefore: trustedBefore).isEmpty
  }

  /// What differs between `status` and `previous`: the same decision as `isUnchanged`, with
  /// its reasons (`appbox why` reports them). Empty exactly when `isUnchanged` is true.
  public static func changes(_ status: FileStatus, previous: TreeEntry, trustedBefore: Int64) -> StatChanges {
    changes(
      status, type: previous.type, permissions: previous.permissions, size: previous.size,
      modificationTime: previous.modificationTime, changeTime: previous.changeTime, inode: previous.inode,
      trustedBefore: trustedBefore)
  }

  /// The same decision, from a previous entry read in place (no allocation).
  static func isUnchanged(_ status: FileStatus, previous: EncodedEntry, trustedBefore: Int64) -> Bool {
    changes(
      status, type: previous.type, permissions: previous.permissions, size: previous.size,
      modificationTime: previous.modificationTime, changeTime: previous.changeTime, inode: previous.inode,
      trustedBefore: trustedBefore
    ).isEmpty
  }

  /// The one comparison every caller goes through.
  @inline(__always)
  static func changes(
    _ status: FileStatus, type: TreeEntryType, permissions: UInt32, size: Int64, modificationTime: Int64,
    changeTime: Int64, inode: UInt64, trustedBefore: Int64
  ) -> StatChanges {
    guard TreeEntryType(status.type) == type else { return .type }
    var result: StatChanges = []
    if size != status.size { result.insert(.size) }
    if modificationTime != status.modificationTime.totalNanoseconds { result.insert(.modificationTime) }
    if changeTime != status.changeTime.totalNanoseconds { result.insert(.changeTime) }
    if inode != status.inode { result.insert(.inode) }
    if permissions != UInt32(status.permissions) { result.insert(.mode) }
    if result.isEmpty && !(changeTime < trustedBefore - racyWindowNanoseconds) { result.insert(.tooRecent) }
    return result
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
      modificationTime: status.modificationTime.totalNanoseconds,
      changeTime: status.changeTime.totalNanoseconds,
      inode: status.inode, linkCount: status.linkCount)
  }
}

/// The part of a stat a snapshot records, in 48 bytes instead of `FileStatus`'s 88: the scan of
/// a large home holds one per file.
struct EntryStatus: Equatable {
  var mode: UInt32
  var uid: UInt32
  var gid: UInt32
  var linkCount: UInt32
  var size: Int64
  var inode: UInt64
  var modificationNanoseconds: Int64
  var changeNanoseconds: Int64

  init(_ status: FileStatus) {
    mode = UInt32(status.mode)
    uid = status.uid
    gid = status.gid
    linkCount = UInt32(truncatingIfNeeded: status.linkCount)
    size = status.size
    inode = status.inode
    modificationNanoseconds = status.modificationTime.totalNanoseconds
    changeNanoseconds = status.changeTime.totalNanoseconds
  }

  static let placeholder = EntryStatus(FileStatus(stat()))

  var permissions: UInt32 { mode & 0o7777 }
  var modificationTime: Timespec { Timespec(totalNanoseconds: modificationNanoseconds) }
}

extension TreeEntry {
  /// An entry describing `status` (digest, target and attributes to be filled in).
  init(name: [UInt8], status: EntryStatus, type: TreeEntryType) {
    self.init(
      name: name, type: type, permissions: status.permissions, uid: status.uid, gid: status.gid,
      size: status.size,
      modificationTime: status.modificationNanoseconds, changeTime: status.changeNanoseconds,
      inode: status.inode,
      linkCount: UInt64(status.linkCount))
  }
}
