// Trees: the content-addressed listing of one directory, as git and restic keep them.
//
// A tree is the deterministic binary serialization of a directory's entries sorted by raw
// name bytes; its digest is the SHA-256 of those bytes. A directory entry carries the digest
// of its own subtree, so a snapshot is one root digest, and an unchanged directory (same
// entries, same metadata, same subtrees) serializes to the same bytes and is stored once
// however many snapshots share it.
//
// Format (versions 1 and 2), all integers LEB128 varints, times zigzag-encoded nanoseconds:
//   tree  := version count entry*
//   entry := nameLen name type flags permissions uid gid size mtime ctime inode nlink
//            [digest: 32 bytes if flags & hasDigest] [targetLen target if flags & hasTarget]
//            xattrCount (nameLen name valueLen value)*
//   flags := 1 excluded | 2 hasDigest | 4 hasTarget | 8 sparseIdentity (version 2 only)
// Version 2 differs only by the `sparseIdentity` flag: the file's digest is its sparse content
// identity (ContentIdentity.swift: its data map and data), not the SHA-256 of every byte. A
// tree is written as version 2 exactly when one of its entries has the flag, so every other
// tree keeps the bytes (and the digest) version 1 gave it, and older appbox versions refuse a
// version 2 tree ("unknown tree version") rather than misread it.
// Invariants (enforced by `decode`, which treats its input as untrusted): names are
// non-empty, contain neither `/` nor NUL, are not `.` or `..`, and strictly ascend; a file or
// directory that is not excluded has a digest; only symlinks have targets; attribute names
// start with `user.` and strictly ascend.

import AppboxCrypto

/// What kind of object a tree entry describes.
public enum TreeEntryType: UInt8, Sendable, Equatable {
  case file = 0
  case directory = 1
  case symlink = 2
  case fifo = 3
  case socket = 4
}

/// One user extended attribute.
public struct ExtendedAttribute: Sendable, Equatable, Hashable {
  public var name: String
  public var value: [UInt8]
  public init(name: String, value: [UInt8]) {
    self.name = name
    self.value = value
  }
}

/// One entry of a directory as a snapshot records it.
public struct TreeEntry: Sendable, Equatable {
  public var name: [UInt8]
  public var type: TreeEntryType
  /// `mode & 0o7777`.
  public var permissions: UInt32
  public var uid: UInt32
  public var gid: UInt32
  public var size: Int64
  /// Nanoseconds since the epoch.
  public var modificationTime: Int64
  public var changeTime: Int64
  public var inode: UInt64
  public var linkCount: UInt64
  /// The content digest of a file, or the tree digest of a directory.
  public var digest: Digest?
  /// A symlink's target, byte for byte.
  public var linkTarget: [UInt8]?
  /// `user.*` attributes, sorted by name.
  public var extendedAttributes: [ExtendedAttribute]
  /// Marked "exclude from backup": recorded, but its content (or subtree) is not stored.
  public var isExcluded: Bool
  /// A file whose `digest` is its sparse content identity (ContentIdentity.swift).
  public var hasSparseIdentity = false

  public init(
    name: [UInt8], type: TreeEntryType, permissions: UInt32, uid: UInt32 = 0, gid: UInt32 = 0,
    size: Int64 = 0,
    modificationTime: Int64 = 0, changeTime: Int64 = 0, inode: UInt64 = 0, linkCount: UInt64 = 1,
    digest: Digest? = nil, linkTarget: [UInt8]? = nil, extendedAttributes: [ExtendedAttribute] = [],
    isExcluded: Bool = false
  ) {
    self.name = name
    self.type = type
    self.permissions = permissions
    self.uid = uid
    self.gid = gid
    self.size = size
    self.modificationTime = modificationTime
    self.changeTime = changeTime
    self.inode = inode
    self.linkCount = linkCount
    self.digest = digest
    self.linkTarget = linkTarget
    self.extendedAttributes = extendedAttributes
    self.isExcluded = isExcluded
  }
}

/// A directory listing, sorted by raw name bytes.
public struct Tree: Sendable, Equatable {
  public var entries: [TreeEntry]

  public init(entries: [TreeEntry]) { self.entries = entries }

  static let version: UInt8 = 1
  /// The version of a tree with an entry of sparse identity.
  static let sparseVersion: UInt8 = 2
  static let excludedFlag: UInt8 = 1
  static let digestFlag: UInt8 = 2
  static let targetFlag: UInt8 = 4
  static let sparseIdentityFlag: UInt8 = 8

  /// The serialization (entries must already be sorted by name).
  public func encoded() -> [UInt8] {
    var out = ByteWriter()
    out.bytes.reserveCapacity(16 + entries.count * 96)
    Tree.encodeHeader(count: entries.count, sparse: entries.contains { $0.hasSparseIdentity }, into: &out)
    for entry in entries { Tree.encode(entry, into: &out) }
    return out.bytes
  }

  /// A tree's header; `sparse`: one of its entries has a sparse identity (version 2).
  package static func encodeHeader(count: Int, sparse: Bool = false, into out: inout ByteWriter) {
    out.byte(sparse ? Tree.sparseVersion : Tree.version)
    out.varint(UInt64(count))
  }

  /// Appends one entry's encoding; a tree is its header followed by its entries' encodings,
  /// so an unchanged entry can be copied byte for byte from the previous tree.
  package static func encode(_ entry: TreeEntry, into out: inout ByteWriter) {
    out.data(entry.name)
    out.byte(entry.type.rawValue)
    var flags: UInt8 = 0
    if entry.isExcluded { flags |= excludedFlag }
    if entry.digest != nil { flags |= digestFlag }
    if entry.linkTarget != nil { flags |= targetFlag }
    if entry.hasSparseIdentity { flags |= sparseIdentityFlag }
    out.byte(flags)
    out.varint(UInt64(entry.permissions))
    out.varint(UInt64(entry.uid))
    out.varint(UInt64(entry.gid))
    out.varint(UInt64(bitPattern: entry.size))
    out.signed(entry.modificationTime)
    out.signed(entry.changeTime)
    out.varint(entry.inode)
    out.varint(entry.linkCount)
    if let digest = entry.digest { out.digest(digest) }
    if let target = entry.linkTarget { out.data(target) }
    out.varint(UInt64(entry.extendedAttributes.count))
    for attribute in entry.extendedAttributes {
      out.data(Array(attribute.name.utf8))
      out.data(attribute.value)
    }
  }

  /// The serialization and its SHA-256.
  public func encodedWithDigest() -> (data: [UInt8], digest: Digest) {
    let data = encoded()
    return (data, SHA256.hash(data))
  }

  /// Parses a serialization; throws `.corruptCatalog` for anything malformed.
  public static func decode(_ data: [UInt8]) throws -> Tree {
    try data.withUnsafeBytes { try decode($0) }
  }

  public static func decode(_ buffer: UnsafeRawBufferPointer) throws -> Tree {
    var cursor = try TreeCursor(buffer)
    var entries: [TreeEntry] = []
    entries.reserveCapacity(cursor.count)
    while let encoded = try cursor.next() { entries.append(try materialize(encoded, in: buffer)) }
    return Tree(entries: entries)
  }

  /// The full entry a cursor found, with its name, digest, target and attributes.
  package static func materialize(_ encoded: EncodedEntry, in buffer: UnsafeRawBufferPointer) throws
    -> TreeEntry
  {
    var entry = TreeEntry(
      name: Array(buffer[encoded.nameRange]), type: encoded.type, permissions: encoded.permissions,
      uid: encoded.uid,
      gid: encoded.gid, size: encoded.size, modificationTime: encoded.modificationTime,
      changeTime: encoded.changeTime, inode: encoded.inode, linkCount: encoded.linkCount,
      isExcluded: encoded.isExcluded)
    entry.hasSparseIdentity = encoded.hasSparseIdentity
    var input = ByteReader(UnsafeRawBufferPointer(rebasing: buffer[encoded.tailRange]))
    if encoded.hasDigest { entry.digest = try input.digest() }
    if encoded.type == .symlink { entry.linkTarget = try input.data(limit: 4096) }
    let count = try input.count(limit: 10_000)
    var previous: String?
    for _ in 0..<count {
      guard let name = String(validating: try input.data(limit: 255), as: UTF8.self),
        previous.map({ $0 < name }) ?? true
      else { throw ByteReader.malformed("bad attribute name") }
      previous = name
      entry.extendedAttributes.append(ExtendedAttribute(name: name, value: try input.data(limit: 1 << 16)))
    }
    return entry
  }

  /// The entry named `name` (binary search over the sorted entries).
  public func entry(named name: [UInt8]) -> TreeEntry? {
    var low = 0
    var high = entries.count
    while low < high {
      let middle = (low + high) / 2
      let candidate = entries[middle].name
      if candidate == name { return entries[middle] }
      if candidate.lexicographicallyPrecedes(name) { low = middle + 1 } else { high = middle }
    }
    return nil
  }
}
