// The archive's view of one member, in plain Swift values: nothing here refers to libarchive, so
// modules above AppboxArchive never see its types.
//
// Paths and link targets are raw bytes: Linux names need not be UTF-8, and a backup must give back
// exactly the name it stored. Conversion to and from libarchive's `struct archive_entry` lives in
// ArchiveEntry+Libarchive.swift.

/// How the tar stream is compressed.
public enum ArchiveCompression: String, Sendable, CaseIterable {
  case none
  case gzip
  case zstd

  /// The conventional file name suffix: `.tar`, `.tar.gz` or `.tar.zst`.
  public var fileSuffix: String {
    switch self {
    case .none: return ".tar"
    case .gzip: return ".tar.gz"
    case .zstd: return ".tar.zst"
    }
  }
}

/// What kind of file a member describes.
public enum ArchiveEntryType: Sendable, Equatable, Hashable {
  case regular
  case directory
  case symlink
  /// A hard link to an earlier member; `ArchiveEntry.linkTarget` names that member.
  case hardlink
  /// A FIFO, character or block device, or socket: the `S_IF*` file type bits (`mode & S_IFMT`).
  case other(UInt32)
}

/// A point in time as stored in the archive: seconds since the epoch and nanoseconds.
public struct ArchiveTimestamp: Sendable, Equatable, Hashable {
  public var seconds: Int64
  /// 0 ..< 1_000_000_000.
  public var nanoseconds: Int32

  public init(seconds: Int64, nanoseconds: Int32 = 0) {
    self.seconds = seconds
    self.nanoseconds = nanoseconds
  }
}

/// One extended attribute, e.g. `user.com.apple.exclude` with a binary value.
public struct ArchiveExtendedAttribute: Sendable, Equatable, Hashable {
  public var name: String
  public var value: [UInt8]

  public init(name: String, value: [UInt8]) {
    self.name = name
    self.value = value
  }
}

/// A run of data bytes inside a sparse member: everything between runs is a hole (zeros that
/// take no space in the archive, and none on disk when extracted).
public struct ArchiveDataRegion: Sendable, Equatable, Hashable {
  public var offset: Int64
  public var length: Int64

  public init(offset: Int64, length: Int64) {
    self.offset = offset
    self.length = length
  }

  public var end: Int64 { offset + length }
}

/// One archive member's metadata.
///
/// The reader normalises `path` (see `ArchiveReader.nextEntry()`); the writer stores what it is given.
public struct ArchiveEntry: Sendable, Equatable, Hashable {
  /// Relative path, raw bytes, without a leading `./` or trailing `/`.
  public var path: [UInt8]
  public var type: ArchiveEntryType
  /// `mode & 0o7777`. The reader reports setuid, setgid and sticky bits as found.
  public var permissions: UInt32
  public var uid: UInt32
  public var gid: UInt32
  /// Owner and group names; `nil` writes none (archives move between devices, names do not).
  public var userName: String?
  public var groupName: String?
  /// Bytes of data that follow the header; meaningful for `.regular` only, 0 for everything else.
  public var size: Int64
  public var modificationTime: ArchiveTimestamp
  /// The target of a symbolic link (stored verbatim, never resolved) or the earlier member a hard
  /// link points to.
  public var linkTarget: [UInt8]?
  public var extendedAttributes: [ArchiveExtendedAttribute]
  /// For a sparse regular file, its data regions in ascending order (possibly none: all hole);
  /// nil for a dense file. `size` stays the file's apparent size. The writer stores such a
  /// member in GNU's pax sparse format 1.0 (what GNU tar, bsdtar and Python read), with each
  /// region widened to 512-byte boundaries (file systems report block-aligned regions anyway);
  /// the reader reports the map libarchive found (GNU old, pax 0.0/0.1/1.0, Solaris).
  public var sparseRegions: [ArchiveDataRegion]?

  public init(
    path: [UInt8], type: ArchiveEntryType, permissions: UInt32, uid: UInt32 = 0, gid: UInt32 = 0,
    userName: String? = nil, groupName: String? = nil, size: Int64 = 0,
    modificationTime: ArchiveTimestamp = ArchiveTimestamp(seconds: 0),
    linkTarget: [UInt8]? = nil, extendedAttributes: [ArchiveExtendedAttribute] = [],
    sparseRegions: [ArchiveDataRegion]? = nil
  ) {
    self.path = path
    self.type = type
    self.permissions = permissions
    self.uid = uid
    self.gid = gid
    self.userName = userName
    self.groupName = groupName
    self.size = size
    self.modificationTime = modificationTime
    self.linkTarget = linkTarget
    self.extendedAttributes = extendedAttributes
    self.sparseRegions = sparseRegions
  }

  /// A regular file of `size` bytes.
  public static func file(
    _ path: [UInt8], size: Int64, permissions: UInt32 = 0o644,
    modificationTime: ArchiveTimestamp = ArchiveTimestamp(seconds: 0)
  ) -> ArchiveEntry {
    ArchiveEntry(
      path: path, type: .regular, permissions: permissions, size: size, modificationTime: modificationTime)
  }

  /// A directory.
  public static func directory(
    _ path: [UInt8], permissions: UInt32 = 0o755,
    modificationTime: ArchiveTimestamp = ArchiveTimestamp(seconds: 0)
  ) -> ArchiveEntry {
    ArchiveEntry(path: path, type: .directory, permissions: permissions, modificationTime: modificationTime)
  }

  /// A symbolic link whose target is stored byte for byte.
  public static func symlink(
    _ path: [UInt8], target: [UInt8],
    modificationTime: ArchiveTimestamp = ArchiveTimestamp(seconds: 0)
  ) -> ArchiveEntry {
    ArchiveEntry(
      path: path, type: .symlink, permissions: 0o777, modificationTime: modificationTime, linkTarget: target)
  }

  /// A hard link to the earlier member `target`.
  public static func hardlink(
    _ path: [UInt8], target: [UInt8], permissions: UInt32 = 0o644,
    modificationTime: ArchiveTimestamp = ArchiveTimestamp(seconds: 0)
  ) -> ArchiveEntry {
    ArchiveEntry(
      path: path, type: .hardlink, permissions: permissions, modificationTime: modificationTime,
      linkTarget: target)
  }
}

extension ArchiveEntry {
  /// The path decoded as UTF-8 for display; invalid sequences show as U+FFFD.
  public var displayPath: String { String(decoding: path, as: UTF8.self) }
}
