// Tree deltas: a changed directory stored as the few bytes that differ from its previous
// version, git-pack style.
//
// A 1% change spread over a large home touches about a third of its directories, and each
// changed directory used to be stored whole (about 100 bytes per entry, names, stat fields and
// digests that do not compress well: zstd -3 only halves them). A delta copies every unchanged
// entry from the base tree by reference and carries only the new entries' bytes, so a directory
// where one file changed costs that entry, not the listing. The tree's digest is still the
// SHA-256 of its full serialization: deltas are a storage form, invisible to everything that
// reads trees through the catalog.
//
// Format, integers as LEB128 varints:
//   delta := 0xDE targetLength op*
//   op    := (length << 1 | 1) sourceOffset     copy `length` bytes of the base from sourceOffset
//          | (length << 1)     byte{length}      insert these bytes
// Invariants (checked by `apply`, which treats a delta as untrusted): every copy lies inside the
// base, every op has a non-zero length, the ops produce exactly `targetLength` bytes (at most
// `maximumLength`), nothing follows the last op. The caller then checks the result's SHA-256
// against the tree's digest, so a delta against the wrong base cannot pass for the tree.

import AppboxCrypto

package enum TreeDelta {
  static let tag: UInt8 = 0xDE
  /// The largest tree a delta may produce (a directory of several million entries).
  static let maximumLength = 1 << 30

  /// The delta that turns `base` into `target`, both serialized trees: every entry of `target`
  /// whose bytes equal the entry of the same name in `base` is copied from it, adjacent copies
  /// merged; the rest (the header when the count changed, new and changed entries) is inserted.
  static func make(from base: [UInt8], to target: [UInt8]) throws -> [UInt8] {
    var ops = OpWriter()
    try base.withUnsafeBytes { old in
      try target.withUnsafeBytes { new in
        var oldCursor = try TreeCursor(old)
        var newCursor = try TreeCursor(new)
        let oldHeader = oldCursor.headerLength
        let newHeader = newCursor.headerLength
        if oldHeader == newHeader && old[0..<oldHeader].elementsEqual(new[0..<newHeader]) {
          ops.copy(0..<oldHeader)
        } else {
          ops.insert(new[0..<newHeader])
        }
        var candidate = try oldCursor.next()
        while let entry = try newCursor.next() {
          let name = new[entry.nameRange]
          while let current = candidate, compareNames(old[current.nameRange], name) < 0 {
            candidate = try oldCursor.next()
          }
          if let current = candidate, old[current.range].elementsEqual(new[entry.range]) {
            ops.copy(current.range)
            candidate = try oldCursor.next()
          } else {
            ops.insert(new[entry.range])
          }
        }
      }
    }
    return ops.finish(targetLength: target.count)
  }

  /// The tree `delta` makes of `base`; `.corruptCatalog` when the delta is malformed.
  static func apply(_ delta: [UInt8], to base: [UInt8]) throws -> [UInt8] {
    try delta.withUnsafeBytes { raw in
      var input = ByteReader(raw)
      guard try input.byte() == tag else { throw ByteReader.malformed("not a tree delta") }
      let length = try input.count(limit: maximumLength)
      var output: [UInt8] = []
      output.reserveCapacity(length)
      while !input.isAtEnd {
        let header = try input.varint()
        guard header >> 1 > 0, header >> 1 <= UInt64(length - output.count) else {
          throw ByteReader.malformed("a delta op is out of range")
        }
        let count = Int(header >> 1)
        if header & 1 == 1 {
          let offset = try input.varint()
          guard offset <= UInt64(base.count), UInt64(count) <= UInt64(base.count) - offset else {
            throw ByteReader.malformed("a delta copies from outside its base")
          }
          output.append(contentsOf: base[Int(offset)..<(Int(offset) + count)])
        } else {
          output.append(contentsOf: try input.raw(count))
        }
      }
      guard output.count == length else { throw ByteReader.malformed("a delta ends short of its length") }
      return output
    }
  }

  /// Appends ops, merging a copy that continues the previous one and adjacent inserts.
  private struct OpWriter {
    var out = ByteWriter()
    /// The pending op: a copy of base[range], or inserted bytes.
    var pendingCopy: Range<Int>?
    var pendingInsert: [UInt8] = []

    init() { out.byte(TreeDelta.tag) }

    mutating func copy(_ range: Range<Int>) {
      guard !range.isEmpty else { return }
      flushInsert()
      if let pending = pendingCopy, pending.upperBound == range.lowerBound {
        pendingCopy = pending.lowerBound..<range.upperBound
      } else {
        flushCopy()
        pendingCopy = range
      }
    }

    mutating func insert(_ bytes: UnsafeRawBufferPointer.SubSequence) {
      guard !bytes.isEmpty else { return }
      flushCopy()
      pendingInsert.append(contentsOf: bytes)
    }

    private mutating func flushCopy() {
      guard let range = pendingCopy else { return }
      out.varint(UInt64(range.count) << 1 | 1)
      out.varint(UInt64(range.lowerBound))
      pendingCopy = nil
    }

    private mutating func flushInsert() {
      guard !pendingInsert.isEmpty else { return }
      out.varint(UInt64(pendingInsert.count) << 1)
      out.bytes.append(contentsOf: pendingInsert)
      pendingInsert.removeAll(keepingCapacity: true)
    }

    mutating func finish(targetLength: Int) -> [UInt8] {
      flushCopy()
      flushInsert()
      // The length goes right after the tag: rebuild with it in place.
      var result = ByteWriter()
      result.byte(TreeDelta.tag)
      result.varint(UInt64(targetLength))
      result.bytes.append(contentsOf: out.bytes[1...])
      return result.bytes
    }
  }
}
