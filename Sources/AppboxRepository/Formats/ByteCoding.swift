// Varints and length-prefixed byte strings: the encoding of trees and manifests. The reader
// treats its input as untrusted: every read is bounds-checked and throws, never traps.

import AppboxCrypto

/// Appends varints and length-prefixed byte strings.
package struct ByteWriter {
  package var bytes: [UInt8] = []

  package init(bytes: [UInt8] = []) { self.bytes = bytes }

  mutating func byte(_ value: UInt8) { bytes.append(value) }

  /// How many bytes `varint(value)` appends.
  static func varintSize(_ value: UInt64) -> Int {
    var size = 1
    var rest = value >> 7
    while rest != 0 {
      size += 1
      rest >>= 7
    }
    return size
  }

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
package struct ByteReader {
  private let buffer: UnsafeRawBufferPointer
  private(set) var position = 0
  /// Whether a read failed only because the buffer ended: a reader of pieces then knows the
  /// record may be whole once more bytes come (RecordReader), and any other failure is final.
  private(set) var ranShort = false

  init(_ buffer: UnsafeRawBufferPointer) { self.buffer = buffer }

  var isAtEnd: Bool { position == buffer.count }

  static func malformed(_ what: String) -> RepositoryError {
    RepositoryError(.corruptCatalog, "Malformed catalog record: \(what)")
  }

  private mutating func short() -> RepositoryError {
    ranShort = true
    return ByteReader.malformed("truncated")
  }

  mutating func byte() throws -> UInt8 {
    guard position < buffer.count else { throw short() }
    defer { position += 1 }
    return buffer[position]
  }

  mutating func varint() throws -> UInt64 {
    // Fast path, taken for nearly every varint of a tree: ten bytes (the longest varint) are
    // in bounds, so they are read without a check each.
    if buffer.count - position >= 10 {
      var result: UInt64 = 0
      var shift: UInt64 = 0
      var at = position
      while shift < 70 {
        let byte = buffer[at]
        at += 1
        result |= UInt64(byte & 0x7F) << shift
        if byte & 0x80 == 0 {
          position = at
          return result
        }
        shift += 7
      }
      throw ByteReader.malformed("varint too long")
    }
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
    guard count >= 0 else { throw ByteReader.malformed("negative length") }
    guard buffer.count - position >= count else { throw short() }
    defer { position += count }
    return UnsafeRawBufferPointer(rebasing: buffer[position..<(position + count)])
  }

  mutating func data(limit: Int) throws -> [UInt8] {
    let count = try self.count(limit: limit)
    return Array(try raw(count))
  }

  mutating func digest() throws -> Digest { Digest(bytes: try raw(Digest.byteCount)) }
}
