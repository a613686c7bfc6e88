// Reading a serialized tree without allocating: the scanner compares every file's stat with
// the previous snapshot's entry, and for an unchanged file needs nothing more than the
// entry's fixed fields and where its bytes are (to copy them into the next tree unchanged).
//
// The cursor enforces the tree invariants listed in Tree.swift as it goes (bounds, name
// rules, strictly ascending names, flags, digests and targets where required, attribute
// names in the user namespace and ascending), so a tree that passes it is well formed;
// `Tree.materialize` then only builds values.

import AppboxCrypto
import Glibc

/// One entry of a serialized tree: its fixed fields and where its parts are.
package struct EncodedEntry {
  /// The whole entry's bytes in the tree.
  package var range: Range<Int>
  package var nameRange: Range<Int>
  /// Digest, target and attributes: what follows the fixed fields.
  package var tailRange: Range<Int>
  package var type: TreeEntryType
  package var permissions: UInt32
  var uid: UInt32
  var gid: UInt32
  package var size: Int64
  package var modificationTime: Int64
  package var changeTime: Int64
  package var inode: UInt64
  package var linkCount: UInt64
  package var isExcluded: Bool
  package var hasDigest: Bool
  /// The digest is the file's sparse content identity (version 2 trees only).
  package var hasSparseIdentity = false

  /// The digest (content or subtree), read from `buffer`.
  package func digest(in buffer: UnsafeRawBufferPointer) -> Digest? {
    guard hasDigest else { return nil }
    return Digest(
      bytes: UnsafeRawBufferPointer(rebasing: buffer[tailRange.lowerBound..<(tailRange.lowerBound + 32)]))
  }
}

/// Walks the entries of a serialized tree in order, validating each.
package struct TreeCursor {
  private let buffer: UnsafeRawBufferPointer
  private var input: ByteReader
  /// Entries the header announced.
  package let count: Int
  /// The header's length in bytes (version and count): where the first entry starts.
  let headerLength: Int
  /// The tree's format version (1, or 2 when entries may have a sparse identity).
  let version: UInt8
  private var read = 0
  private var previousName: Range<Int>?

  package init(_ buffer: UnsafeRawBufferPointer) throws {
    self.buffer = buffer
    input = ByteReader(buffer)
    version = try input.byte()
    guard version == Tree.version || version == Tree.sparseVersion else {
      throw ByteReader.malformed("unknown tree version")
    }
    count = try input.count(limit: buffer.count)
    headerLength = input.position
  }

  /// The next entry, or nil after the last (when the tree must also end).
  package mutating func next() throws -> EncodedEntry? {
    guard read < count else {
      guard input.isAtEnd else { throw ByteReader.malformed("trailing bytes") }
      return nil
    }
    read += 1
    return try parseEntry()
  }

  /// The entry whose bytes are `range` of a tree that already passed a cursor.
  package static func entry(at range: Range<Int>, in buffer: UnsafeRawBufferPointer) throws -> EncodedEntry {
    var cursor = try TreeCursor(buffer, at: range.lowerBound)
    let entry = try cursor.parseEntry()
    guard entry.range == range else { throw ByteReader.malformed("entry bounds") }
    return entry
  }

  private init(_ buffer: UnsafeRawBufferPointer, at position: Int) throws {
    self.buffer = buffer
    input = ByteReader(buffer)
    _ = try input.raw(position)
    count = 1
    headerLength = 0
    version = Tree.sparseVersion  // the tree already passed a cursor
  }

  private mutating func parseEntry() throws -> EncodedEntry {
    let start = input.position
    let nameLength = try input.count(limit: 4096)
    let nameStart = input.position
    let name = try input.raw(nameLength)
    try checkName(name, nameStart: nameStart)
    guard let type = TreeEntryType(rawValue: try input.byte()) else { throw ByteReader.malformed("bad type") }
    let flags = try input.byte()
    let known =
      Tree.excludedFlag | Tree.digestFlag | Tree.targetFlag
      | (version == Tree.sparseVersion ? Tree.sparseIdentityFlag : 0)
    guard flags & ~known == 0 else { throw ByteReader.malformed("bad flags") }
    let permissions = try input.varint()
    guard permissions <= 0o7777 else { throw ByteReader.malformed("bad permissions") }
    let uid = UInt32(truncatingIfNeeded: try input.varint())
    let gid = UInt32(truncatingIfNeeded: try input.varint())
    let size = Int64(bitPattern: try input.varint())
    guard size >= 0 else { throw ByteReader.malformed("negative size") }
    let modificationTime = try input.signed()
    let changeTime = try input.signed()
    let inode = try input.varint()
    let linkCount = try input.varint()
    let tailStart = input.position
    let isExcluded = flags & Tree.excludedFlag != 0
    let hasDigest = flags & Tree.digestFlag != 0
    let hasTarget = flags & Tree.targetFlag != 0
    let hasSparseIdentity = flags & Tree.sparseIdentityFlag != 0
    guard !hasSparseIdentity || (type == .file && hasDigest) else {
      throw ByteReader.malformed("a sparse identity without a file digest")
    }
    if hasDigest { _ = try input.raw(Digest.byteCount) }
    if hasTarget { _ = try input.raw(try input.count(limit: 4096)) }
    guard hasDigest || !((type == .file || type == .directory) && !isExcluded) else {
      throw ByteReader.malformed("missing digest")
    }
    guard hasTarget == (type == .symlink) else { throw ByteReader.malformed("bad link target") }
    var previousAttribute: UnsafeRawBufferPointer?
    for _ in 0..<(try input.count(limit: 10_000)) {
      let attribute = try input.raw(try input.count(limit: 255))
      guard attribute.starts(with: "user.".utf8),
        previousAttribute.map({ $0.lexicographicallyPrecedes(attribute) }) ?? true
      else { throw ByteReader.malformed("bad attribute name") }
      previousAttribute = attribute
      _ = try input.raw(try input.count(limit: 1 << 16))
    }
    previousName = nameStart..<(nameStart + nameLength)
    return EncodedEntry(
      range: start..<input.position, nameRange: nameStart..<(nameStart + nameLength),
      tailRange: tailStart..<input.position, type: type, permissions: UInt32(permissions), uid: uid, gid: gid,
      size: size, modificationTime: modificationTime, changeTime: changeTime, inode: inode,
      linkCount: linkCount,
      isExcluded: isExcluded, hasDigest: hasDigest, hasSparseIdentity: hasSparseIdentity)
  }

  private func checkName(_ name: UnsafeRawBufferPointer, nameStart: Int) throws {
    let dot = UInt8(ascii: ".")
    guard !name.isEmpty, !name.contains(0), !name.contains(UInt8(ascii: "/")),
      !(name.count == 1 && name[0] == dot), !(name.count == 2 && name[0] == dot && name[1] == dot)
    else { throw ByteReader.malformed("bad entry name") }
    if let previousName,
      !UnsafeRawBufferPointer(rebasing: buffer[previousName]).lexicographicallyPrecedes(name)
    {
      throw ByteReader.malformed("names out of order")
    }
  }
}

/// Orders two byte strings (names, or whole entries) as `[UInt8].lexicographicallyPrecedes`
/// does: <0, 0 or >0, with one memcmp.
package func compareNames(_ a: Slice<UnsafeRawBufferPointer>, _ b: Slice<UnsafeRawBufferPointer>) -> Int {
  let common = min(a.count, b.count)
  if common > 0 {
    let order = memcmp(a.base.baseAddress! + a.startIndex, b.base.baseAddress! + b.startIndex, common)
    if order != 0 { return Int(order) }
  }
  return a.count - b.count
}
