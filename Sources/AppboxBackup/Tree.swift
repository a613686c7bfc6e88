// Trees: the content-addressed listing of one directory, as git and restic keep them.
//
// A tree is the deterministic binary serialization of a directory's entries sorted by raw
// name bytes; its digest is the SHA-256 of those bytes. A directory entry carries the digest
// of its own subtree, so a snapshot is one root digest, and an unchanged directory (same
// entries, same metadata, same subtrees) serializes to the same bytes and is stored once
// however many snapshots share it.
//
// Format (version 1), all integers LEB128 varints, times zigzag-encoded nanoseconds:
//   tree  := 0x01 count entry*
//   entry := nameLen name type flags permissions uid gid size mtime ctime inode nlink
//            [digest: 32 bytes if flags & hasDigest] [targetLen target if flags & hasTarget]
//            xattrCount (nameLen name valueLen value)*
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

  public init(
    name: [UInt8], type: TreeEntryType, permissions: UInt32, uid: UInt32 = 0, gid: UInt32 = 0, size: Int64 = 0,
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
  private static let excludedFlag: UInt8 = 1
  private static let digestFlag: UInt8 = 2
  private static let targetFlag: UInt8 = 4

  /// The serialization (entries must already be sorted by name).
  public func encoded() -> [UInt8] {
    var out = ByteWriter()
    out.bytes.reserveCapacity(16 + entries.count * 96)
    out.byte(Tree.version)
    out.varint(UInt64(entries.count))
    for entry in entries {
      out.data(entry.name)
      out.byte(entry.type.rawValue)
      var flags: UInt8 = 0
      if entry.isExcluded { flags |= Tree.excludedFlag }
      if entry.digest != nil { flags |= Tree.digestFlag }
      if entry.linkTarget != nil { flags |= Tree.targetFlag }
      out.byte(flags)
      out.varint(UInt64(entry.permissions))
      out.varint(UInt64(entry.uid))
      out.varint(UInt64(entry.gid))
      out.varint(UInt64(bitPattern: entry.size))
      out.signed(entry.modificationTime)
      out.signed(entry.changeTime)
      out.varint(entry.inode)
      out.varint(entry.linkCount)
      if let digest = entry.digest { digest.withUnsafeBytes { out.bytes.append(contentsOf: $0) } }
      if let target = entry.linkTarget { out.data(target) }
      out.varint(UInt64(entry.extendedAttributes.count))
      for attribute in entry.extendedAttributes {
        out.data(Array(attribute.name.utf8))
        out.data(attribute.value)
      }
    }
    return out.bytes
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
    var input = ByteReader(buffer)
    guard try input.byte() == version else { throw ByteReader.malformed("unknown tree version") }
    let count = try input.count(limit: buffer.count)
    var entries: [TreeEntry] = []
    entries.reserveCapacity(count)
    for _ in 0..<count {
      let name = try input.data(limit: 4096)
      try checkName(name, after: entries.last?.name)
      guard let type = TreeEntryType(rawValue: try input.byte()) else { throw ByteReader.malformed("bad type") }
      let flags = try input.byte()
      guard flags & ~(excludedFlag | digestFlag | targetFlag) == 0 else { throw ByteReader.malformed("bad flags") }
      var entry = TreeEntry(name: name, type: type, permissions: 0)
      let permissions = try input.varint()
      guard permissions <= 0o7777 else { throw ByteReader.malformed("bad permissions") }
      entry.permissions = UInt32(permissions)
      entry.uid = UInt32(truncatingIfNeeded: try input.varint())
      entry.gid = UInt32(truncatingIfNeeded: try input.varint())
      entry.size = Int64(bitPattern: try input.varint())
      guard entry.size >= 0 else { throw ByteReader.malformed("negative size") }
      entry.modificationTime = try input.signed()
      entry.changeTime = try input.signed()
      entry.inode = try input.varint()
      entry.linkCount = try input.varint()
      entry.isExcluded = flags & excludedFlag != 0
      if flags & digestFlag != 0 { entry.digest = Digest(bytes: try input.raw(Digest.byteCount)) }
      if flags & targetFlag != 0 { entry.linkTarget = try input.data(limit: 4096) }
      let needsDigest = (type == .file || type == .directory) && !entry.isExcluded
      guard entry.digest != nil || !needsDigest else { throw ByteReader.malformed("missing digest") }
      guard (entry.linkTarget != nil) == (type == .symlink) else { throw ByteReader.malformed("bad link target") }
      let attributeCount = try input.count(limit: 10_000)
      var previous: String?
      for _ in 0..<attributeCount {
        let nameBytes = try input.data(limit: 255)
        guard let attributeName = String(validating: nameBytes, as: UTF8.self), attributeName.hasPrefix("user."),
          previous.map({ $0 < attributeName }) ?? true
        else { throw ByteReader.malformed("bad attribute name") }
        previous = attributeName
        entry.extendedAttributes.append(ExtendedAttribute(name: attributeName, value: try input.data(limit: 1 << 16)))
      }
      entries.append(entry)
    }
    guard input.isAtEnd else { throw ByteReader.malformed("trailing bytes") }
    return Tree(entries: entries)
  }

  private static func checkName(_ name: [UInt8], after previous: [UInt8]?) throws {
    guard !name.isEmpty, !name.contains(0), !name.contains(UInt8(ascii: "/")),
      name != [UInt8(ascii: ".")], name != [UInt8(ascii: "."), UInt8(ascii: ".")]
    else { throw ByteReader.malformed("bad entry name") }
    if let previous, !previous.lexicographicallyPrecedes(name) { throw ByteReader.malformed("names out of order") }
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

/// Appends varints and length-prefixed byte strings.
struct ByteWriter {
  var bytes: [UInt8] = []

  mutating func byte(_ value: UInt8) { bytes.append(value) }

  mutating func varint(_ value: UInt64) {
    var value = value
    while value >= 0x80 {
      bytes.append(UInt8(truncatingIfNeeded: value) | 0x80)
      value >>= 7
    }
    bytes.append(UInt8(value))
  }

  mutating func signed(_ value: Int64) { varint(UInt64(bitPattern: (value << 1) ^ (value >> 63))) }

  mutating func data(_ value: [UInt8]) {
    varint(UInt64(value.count))
    bytes.append(contentsOf: value)
  }

  mutating func digest(_ value: Digest) { value.withUnsafeBytes { bytes.append(contentsOf: $0) } }
}

/// Reads what `ByteWriter` writes, bounds-checked: malformed input throws, never traps.
struct ByteReader {
  private let buffer: UnsafeRawBufferPointer
  private(set) var position = 0

  init(_ buffer: UnsafeRawBufferPointer) { self.buffer = buffer }

  var isAtEnd: Bool { position == buffer.count }

  static func malformed(_ what: String) -> BackupError {
    BackupError(.corruptCatalog, "Malformed catalog record: \(what)")
  }

  mutating func byte() throws -> UInt8 {
    guard position < buffer.count else { throw ByteReader.malformed("truncated") }
    defer { position += 1 }
    return buffer[position]
  }

  mutating func varint() throws -> UInt64 {
    var result: UInt64 = 0
    var shift: UInt64 = 0
    while true {
      let byte = try self.byte()
      guard shift < 64 else { throw ByteReader.malformed("varint too long") }
      result |= UInt64(byte & 0x7F) << shift
      if byte & 0x80 == 0 { return result }
      shift += 7
    }
  }

  mutating func signed() throws -> Int64 {
    let raw = try varint()
    return Int64(bitPattern: (raw >> 1) ^ (0 &- (raw & 1)))
  }

  /// A count that cannot exceed `limit` (callers pass the bytes left or a sane cap).
  mutating func count(limit: Int) throws -> Int {
    let value = try varint()
    guard value <= UInt64(limit) else { throw ByteReader.malformed("count too large") }
    return Int(value)
  }

  mutating func raw(_ count: Int) throws -> UnsafeRawBufferPointer {
    guard count >= 0, buffer.count - position >= count else { throw ByteReader.malformed("truncated") }
    defer { position += count }
    return UnsafeRawBufferPointer(rebasing: buffer[position..<(position + count)])
  }

  mutating func data(limit: Int) throws -> [UInt8] {
    let count = try self.count(limit: limit)
    return Array(try raw(count))
  }

  mutating func digest() throws -> Digest { Digest(bytes: try raw(Digest.byteCount)) }
}
