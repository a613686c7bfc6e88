// Writes binary property lists (`bplist00`).
//
// Two passes: flatten the value into a numbered object list (containers first, then their
// keys, then their values, dictionary keys in Unicode scalar order; scalars with identical
// encodings stored once), then emit the objects with references as narrow as the object
// count allows, the offset table as narrow as the largest offset allows, and the trailer.
// The output depends only on the value, never on dictionary iteration order.

import Foundation

struct BinaryPropertyListWriter {
  private enum Object {
    case scalar([UInt8])
    case array([Int])
    case dictionary(keys: [Int], values: [Int])
  }

  private var objects: [Object] = []
  private var scalarIndex: [[UInt8]: Int] = [:]
  /// Whether `{"CF$UID": n}` dictionaries are written as UID objects (keyed archives).
  var writesUIDs = false

  mutating func document(for value: PropertyList) -> Data {
    _ = add(value)
    let referenceWidth = Self.width(for: UInt64(objects.count - 1))
    var out = Array("bplist00".utf8)
    var offsets: [UInt64] = []
    offsets.reserveCapacity(objects.count)
    for object in objects {
      offsets.append(UInt64(out.count))
      switch object {
      case .scalar(let encoded):
        out.append(contentsOf: encoded)
      case .array(let references):
        Self.appendHeader(0xA0, count: references.count, to: &out)
        for reference in references {
          Self.appendBigEndian(UInt64(reference), width: referenceWidth, to: &out)
        }
      case .dictionary(let keys, let values):
        Self.appendHeader(0xD0, count: keys.count, to: &out)
        for reference in keys + values {
          Self.appendBigEndian(UInt64(reference), width: referenceWidth, to: &out)
        }
      }
    }
    let tableStart = UInt64(out.count)
    let offsetWidth = Self.width(for: offsets.last ?? 0)
    for offset in offsets { Self.appendBigEndian(offset, width: offsetWidth, to: &out) }
    out.append(contentsOf: [0, 0, 0, 0, 0, 0, UInt8(offsetWidth), UInt8(referenceWidth)])
    Self.appendBigEndian(UInt64(objects.count), width: 8, to: &out)
    Self.appendBigEndian(0, width: 8, to: &out)  // the top object is always the first
    Self.appendBigEndian(tableStart, width: 8, to: &out)
    return Data(out)
  }

  /// Numbers `value` and everything in it; returns its object index.
  private mutating func add(_ value: PropertyList) -> Int {
    switch value {
    case .array(let items):
      let index = objects.count
      objects.append(.array([]))
      objects[index] = .array(items.map { add($0) })
      return index
    case .dictionary(let entries):
      if writesUIDs, let uid = KeyedArchiveUID.encoded(entries) { return addScalar(uid) }
      let index = objects.count
      objects.append(.array([]))
      let keys = entries.sortedKeys
      let keyReferences = keys.map { addScalar(Self.encodedString($0)) }
      let valueReferences = keys.map { key in entries[key].map { add($0) } ?? 0 }
      objects[index] = .dictionary(keys: keyReferences, values: valueReferences)
      return index
    case .string(let text):
      return addScalar(Self.encodedString(text))
    case .integer(let number):
      return addScalar(Self.encodedInteger(number))
    case .unsignedInteger(let number):
      // Beyond Int64: a 128-bit integer, as Apple writes it.
      var encoded: [UInt8] = [0x14]
      Self.appendBigEndian(0, width: 8, to: &encoded)
      Self.appendBigEndian(number, width: 8, to: &encoded)
      return addScalar(encoded)
    case .real(let number):
      var encoded: [UInt8] = [0x23]
      Self.appendBigEndian(number.bitPattern, width: 8, to: &encoded)
      return addScalar(encoded)
    case .bool(let flag):
      return addScalar([flag ? 0x09 : 0x08])
    case .date(let date):
      var encoded: [UInt8] = [0x33]
      Self.appendBigEndian(date.timeIntervalSinceReferenceDate.bitPattern, width: 8, to: &encoded)
      return addScalar(encoded)
    case .data(let data):
      var encoded: [UInt8] = []
      Self.appendHeader(0x40, count: data.count, to: &encoded)
      encoded.append(contentsOf: data)
      return addScalar(encoded)
    }
  }

  private mutating func addScalar(_ encoded: [UInt8]) -> Int {
    if let index = scalarIndex[encoded] { return index }
    objects.append(.scalar(encoded))
    scalarIndex[encoded] = objects.count - 1
    return objects.count - 1
  }

  /// ASCII strings as single bytes (marker 0x5), all others as UTF-16BE (marker 0x6).
  private static func encodedString(_ text: String) -> [UInt8] {
    var encoded: [UInt8] = []
    if text.utf8.allSatisfy({ $0 < 0x80 }) {
      appendHeader(0x50, count: text.utf8.count, to: &encoded)
      encoded.append(contentsOf: text.utf8)
    } else {
      appendHeader(0x60, count: text.utf16.count, to: &encoded)
      for unit in text.utf16 { appendBigEndian(UInt64(unit), width: 2, to: &encoded) }
    }
    return encoded
  }

  /// Non-negative integers in the fewest of 1, 2, 4 or 8 bytes; negative ones in 8.
  private static func encodedInteger(_ number: Int64) -> [UInt8] {
    let width = number < 0 ? 8 : self.width(for: UInt64(number))
    var encoded: [UInt8] = [0x10 | UInt8(width.trailingZeroBitCount)]
    appendBigEndian(UInt64(bitPattern: number), width: width, to: &encoded)
    return encoded
  }

  /// A marker with the count in its low nibble, or 0xF and the count as an integer object.
  private static func appendHeader(_ marker: UInt8, count: Int, to out: inout [UInt8]) {
    if count < 15 {
      out.append(marker | UInt8(count))
    } else {
      out.append(marker | 0x0F)
      out.append(contentsOf: encodedInteger(Int64(count)))
    }
  }

  private static func width(for value: UInt64) -> Int {
    switch value {
    case 0...0xFF: return 1
    case 0...0xFFFF: return 2
    case 0...0xFFFF_FFFF: return 4
    default: return 8
    }
  }

  private static func appendBigEndian(_ value: UInt64, width: Int, to out: inout [UInt8]) {
    for shift in stride(from: (width - 1) * 8, through: 0, by: -8) {
      out.append(UInt8(truncatingIfNeeded: value >> UInt64(shift)))
    }
  }
}
