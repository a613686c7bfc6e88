// What the scan learns about one directory, and what the later stages add to it. A directory is
// one object, passed by reference from the scanner to the reader, the archiver and the tree
// builder, and released once its tree is built: a backup holds the directories on the path it
// is working in (and a bounded number scanned ahead), never all of them, so its memory follows
// the largest directory, not the number of files.

import AppboxContainer
import AppboxCore
import AppboxCrypto
import AppboxRepository
import Glibc

/// One entry of a scanned directory.
struct ScannedEntry {
  /// The name: bytes `nameStart ..< nameStart + nameLength` of the directory's `names`.
  var nameStart: Int32
  var nameLength: Int32
  var status: EntryStatus
  var type: TreeEntryType
  /// The previous snapshot's entry of the same name, if any (in the directory's `previousData`).
  var previous: PreviousEntry?
  /// Change detection found the entry unchanged: `previous` stands for it, byte for byte.
  var isReused = false
  /// The stat matches `previous` but is too recent to be trusted: probably unchanged, to be
  /// confirmed by hashing before anything is written.
  var isRacy = false
  /// The target of a changed symlink.
  var linkTarget: [UInt8]?
}

/// Where a previous snapshot's entry sits in its tree, and what the tree builder needs of it.
/// Kept small: a directory holds one per file.
struct PreviousEntry {
  var start: Int32
  var end: Int32
  var size: Int64
  var type: TreeEntryType
  var isExcluded: Bool
  var hasSparseIdentity: Bool

  init(_ entry: EncodedEntry) {
    start = Int32(entry.range.lowerBound)
    end = Int32(entry.range.upperBound)
    size = entry.size
    type = entry.type
    isExcluded = entry.isExcluded
    hasSparseIdentity = entry.hasSparseIdentity
  }

  var range: Range<Int> { Int(start)..<Int(end) }
}

/// What archiving learned about one changed file.
struct FileResult {
  var status: EntryStatus
  var attributes: [ExtendedAttribute]
  var isExcluded: Bool
  var digest: Digest?
  /// Gone by the time it was opened: the file is left out of the snapshot.
  var vanished: Bool
  /// The digest is the sparse content identity (ContentIdentity.swift), not the plain SHA-256.
  var isSparseIdentity = false
}

/// One scanned directory.
final class ScannedDirectory: @unchecked Sendable {
  /// The directory holding this one (nil for the home). Weak: a directory's ancestors are
  /// kept by whoever walks it (a chain of strong references would also be released
  /// recursively, one stack frame per level, when a deep tree is let go).
  private(set) weak var parent: ScannedDirectory?
  /// Its name in the parent (empty for the home), and its entry's position there.
  let name: [UInt8]
  let position: Int32
  /// Levels below the home (0 for the home).
  let depth: Int
  /// The length in bytes of the path from the home (0 for the home).
  let pathLength: Int
  /// The home's top-level `Library` (whose `Caches` is skipped).
  let isTopLibrary: Bool
  /// The bundle directory or something inside it (not counted in files and bytes).
  let isInBundle: Bool
  /// The previous snapshot's entry for this directory, decoded (nil: none, or the home).
  let previous: TreeEntry?

  // Filled by the scan.
  var status: FileStatus?
  var attributes: [ExtendedAttribute] = []
  var isExcluded = false
  /// Could not be listed: recorded without entries, and reported as unreadable.
  var isUnreadable = false
  /// The directory's own entry is unchanged from the previous snapshot's.
  var isUnchanged = false
  var previousDigest: Digest?
  /// The previous tree of this directory, serialized (empty when there is none).
  var previousData: [UInt8] = []
  /// How many entries the previous tree of this directory had (-1: none).
  var previousEntryCount = -1
  /// Every entry's name, each followed by a NUL.
  var names: [UInt8] = []
  var entries: [ScannedEntry] = []
  /// By entry position: the previous entries of subdirectories, decoded (for their scans).
  var previousSubdirectories: [Int32: TreeEntry] = [:]
  /// The directory itself, open, while its files are still to be read or its subdirectories
  /// to be opened (shared with their scans).
  var handle: DirectoryHandle?
  /// Some regular file of it must be read (the reader then needs `handle`).
  var needsReading = false

  // Filled by the archiver, read by the tree builder.
  /// By entry position: what archiving learned about each changed file.
  var results: [Int32: FileResult] = [:]
  /// By entry position: each subdirectory's entry, with its tree digest, once its tree is
  /// built (absent: left out, being excluded with no tree, or gone).
  var subdirectoryEntries: [Int32: TreeEntry] = [:]

  init(parent: ScannedDirectory?, name: [UInt8], position: Int32 = -1, previous: TreeEntry?, rules: ScanRules)
  {
    self.parent = parent
    self.name = name
    self.position = position
    self.previous = previous
    if let parent {
      depth = parent.depth + 1
      pathLength = (parent.depth == 0 ? 0 : parent.pathLength + 1) + name.count
      isTopLibrary = parent.depth == 0 && name.elementsEqual("Library".utf8)
      isInBundle =
        parent.isInBundle || (parent.depth == 0 && name.elementsEqual(rules.bundleDirectoryName.utf8))
    } else {
      depth = 0
      pathLength = 0
      isTopLibrary = false
      isInBundle = false
    }
  }

  func name(of entry: ScannedEntry) -> [UInt8] {
    Array(names[Int(entry.nameStart)..<Int(entry.nameStart + entry.nameLength)])
  }

  /// The path from the home ("" for the home), built from the ancestors' names: for messages
  /// and for a directory that must be opened by path.
  var path: [UInt8] {
    var parts: [[UInt8]] = []
    var current: ScannedDirectory? = self
    while let directory = current, directory.depth > 0 {
      parts.append(directory.name)
      current = directory.parent
    }
    var path: [UInt8] = []
    path.reserveCapacity(pathLength)
    for part in parts.reversed() {
      if !path.isEmpty { path.append(UInt8(ascii: "/")) }
      path.append(contentsOf: part)
    }
    return path
  }
}

extension ScannedDirectory {
  /// What the previous snapshot recorded for `entry`'s content: its digest, size and inode
  /// (nil: no previous entry, or one without a digest).
  func previousContent(of entry: ScannedEntry) -> (digest: Digest, size: Int64, inode: UInt64)? {
    guard let previous = entry.previous else { return nil }
    return previousData.withUnsafeBytes { old in
      guard let decoded = try? TreeCursor.entry(at: previous.range, in: old), let digest = decoded.digest(in: old)
      else { return nil }
      return (digest, decoded.size, decoded.inode)
    }
  }
}

/// Something the scan or the archiver could not read; the snapshot records it as incomplete.
struct UnreadableEntry: Sendable, Equatable {
  var path: [UInt8]
  /// Why, for people: "permission denied", "its path is longer than 65536 bytes".
  var reason: String
}

/// Which names the scan leaves out.
struct ScanRules: Sendable {
  /// The bundle directory's name, skipped at the top unless `includeBundle`.
  var bundleDirectoryName: String
  var includeBundle: Bool
  /// For export: scan only these top-level names (nil: everything not skipped).
  var onlyTopLevel: Set<[UInt8]>? = nil
  /// Whether a top-level `tmp` is left out (a home's; an app group's container has none, so
  /// a `tmp` there is data).
  var skipsTemporaryDirectory = true

  /// The longest path (bytes, relative to the home) a snapshot stores: deeper entries are
  /// left out and reported. PATH_MAX is no limit (the walk uses descriptors), but every tar
  /// member repeats its whole path, so an unbounded depth would let an app grow an archive
  /// quadratically; 64 KiB is also the longest path a manifest records.
  static let maximumPathLength = 65_536

  /// Whether an entry with `attributes` (its `user.*` attributes, as a backup records them)
  /// carries the exclude-from-backup mark: the one test the scanner, the content reader, `why`
  /// and a restore's account of what it drops all apply.
  static func marksExcluded(_ attributes: [ExtendedAttribute]) -> Bool {
    attributes.contains { $0.name == excludeFromBackupAttribute }
  }

  /// The attributes the backup records for the open directory `directory`.
  static func directoryAttributes(of directory: FileDescriptor) throws -> [ExtendedAttribute] {
    try directory.userExtendedAttributes().map { ExtendedAttribute(name: $0.name, value: $0.value) }
  }

  /// Whether the scan leaves out entry `name` by name: in the home (`isRoot`) the bundle
  /// (unless `includeBundle`) and `tmp`; in the top-level Library, `Caches`.
  func skips(_ name: UnsafeRawBufferPointer, inRoot isRoot: Bool, inTopLibrary isTopLibrary: Bool) -> Bool {
    if isRoot {
      if let onlyTopLevel { return !onlyTopLevel.contains(Array(name)) }
      if skipsTemporaryDirectory && name.elementsEqual("tmp".utf8) { return true }
      if !includeBundle && name.elementsEqual(bundleDirectoryName.utf8) { return true }
      return false
    }
    return isTopLibrary && name.elementsEqual("Caches".utf8)
  }
}

/// A directory descriptor shared by whoever still needs it (the reader, for the directory's
/// files; the scans of its subdirectories, to open them by name); closed when the last lets go.
final class DirectoryHandle: Sendable {
  let descriptor: FileDescriptor
  private let live: LiveCount

  init(_ descriptor: FileDescriptor, live: LiveCount) {
    self.descriptor = descriptor
    self.live = live
    live.count.add(1, ordering: .relaxed)
  }

  deinit {
    descriptor.close()
    live.count.subtract(1, ordering: .relaxed)
  }
}

/// A file or symlink of a scanned directory: the directory and the entry's position.
struct ItemReference {
  let directory: ScannedDirectory
  let position: Int32

  var entry: ScannedEntry { directory.entries[Int(position)] }
  var name: [UInt8] { directory.name(of: entry) }
}

/// The path of the directory a stage is in, kept as the walk enters directories in
/// depth-first order: entering one costs its name, whatever the depth.
struct DirectoryPath {
  private(set) var bytes: [UInt8] = []
  private var ends: [Int] = []

  /// Makes `directory` (entered after its parent, in depth-first order) the current one.
  mutating func enter(_ directory: ScannedDirectory) {
    let depth = directory.depth
    if depth == 0 {
      bytes.removeAll(keepingCapacity: true)
      ends.removeAll(keepingCapacity: true)
      return
    }
    if ends.count >= depth {
      ends.removeSubrange((depth - 1)...)
      bytes.removeSubrange((ends.last ?? 0)...)
    }
    if !bytes.isEmpty { bytes.append(UInt8(ascii: "/")) }
    bytes.append(contentsOf: directory.name)
    ends.append(bytes.count)
  }

  /// The path of `name` in the current directory.
  func path(of name: [UInt8]) -> [UInt8] { joinPath(bytes, name) }
}
