// Reads binary property lists (`bplist00`).
//
// Layout: an 8-byte header, the objects, an offset table (one big-endian offset per
// object), and a 32-byte trailer giving the offset and reference widths, the object count,
// the top object and where the offset table starts. Containers hold object references
// (indices into the offset table), so a file is a graph, not a tree.
//
// Invariants: the trailer is validated before any object is read, and the offset table
// must end exactly where the trailer begins; every offset lies between the header and the
// offset table, and every object's bytes end before the offset table; all sizes are checked
// against the bytes actually present before anything is allocated, with overflow-reporting
// arithmetic. The objects on the current path are tracked, so an object that contains itself
// is reported as a cycle. Shared objects may be referenced many times: each reference counts
// against `maxObjects`, and each string or data reference charges its length against
// `maxBytes` (decoded once, then shared), which bounds what a small file can expand to.

import Foundation

struct BinaryPropertyListReader {
  private let bytes: [UInt8]
  private let offsetWidth: Int
  private let referenceWidth: Int
  private let objectCount: Int
  private let topObject: Int
  private let offsetTableStart: Int
  private let maxDepth: Int
  private let maxObjects: Int
  private var objectsLeft: Int
  private let maxPayload: Int
  private var payloadLeft: Int
  private var onPath: Set<Int> = []
  private var leaves: [Int: PropertyList] = [:]
  /// Whether UID objects (keyed archives) are read, as `{"CF$UID": n}` (PropertyListKeyedArchive.swift).
  private let allowsUIDs: Bool

  init(_ bytes: [UInt8], limits: PropertyListLimits, allowsUIDs: Bool = false) throws {
    self.allowsUIDs = allowsUIDs
    guard bytes.starts(with: Array("bplist00".utf8)) else {
      let version = String(
        decoding: bytes.prefix(8).map { $0 < 0x20 || $0 > 0x7E ? 0x3F : $0 }, as: UTF8.self)
      throw PropertyListError(.unsupported, "binary property list: unsupported version '\(version)'")
    }
    guard bytes.count >= 8 + 1 + 1 + 32 else { throw Self.failure("truncated file") }
    let trailer = bytes.count - 32
    let offsetWidth = Int(bytes[trailer + 6])
    let referenceWidth = Int(bytes[trailer + 7])
    let count = Self.bigEndian(bytes, at: trailer + 8, width: 8)
    let top = Self.bigEndian(bytes, at: trailer + 16, width: 8)
    let tableStart = Self.bigEndian(bytes, at: trailer + 24, width: 8)
    guard (1...8).contains(offsetWidth), (1...8).contains(referenceWidth) else {
      throw Self.failure("invalid trailer (offset or reference width)")
    }
    guard count >= 1, top < count else { throw Self.failure("invalid trailer (object count or top object)") }
    let (tableSize, overflow) = count.multipliedReportingOverflow(by: UInt64(offsetWidth))
    guard tableStart >= 9, tableStart < UInt64(trailer), !overflow, tableSize == UInt64(trailer) - tableStart
    else { throw Self.failure("offset table does not end at the trailer (truncated or corrupt file)") }
    self.bytes = bytes
    self.offsetWidth = offsetWidth
    self.referenceWidth = referenceWidth
    self.objectCount = Int(count)
    self.topObject = Int(top)
    self.offsetTableStart = Int(tableStart)
    self.maxDepth = limits.effectiveDepth
    self.maxObjects = limits.maxObjects
    self.objectsLeft = limits.maxObjects
    self.maxPayload = limits.maxBytes
    self.payloadLeft = limits.maxBytes
  }

  mutating func read() throws -> PropertyList {
    try object(topObject, depth: 1)
  }

  private mutating func object(_ index: Int, depth: Int) throws -> PropertyList {
    guard depth <= maxDepth else {
      throw PropertyListError(.tooDeep, "binary property list: nested deeper than \(maxDepth) levels")
    }
    guard !onPath.contains(index) else {
      throw PropertyListError(.cyclic, "binary property list: object \(index) contains itself")
    }
    objectsLeft -= 1
    guard objectsLeft >= 0 else {
      throw PropertyListError(.tooManyObjects, "binary property list: more than \(maxObjects) objects")
    }
    if let leaf = leaves[index] {
      try charge(leaf)
      return leaf
    }
    let start = try offset(of: index)
    let marker = bytes[start]
    let low = Int(marker & 0x0F)
    switch marker >> 4 {
    case 0x0:
      switch marker {
      case 0x08: return .bool(false)
      case 0x09: return .bool(true)
      case 0x00: throw PropertyListError(.unsupported, "binary property list: null objects are not supported")
      default: throw Self.failure("unknown object marker 0x\(String(marker, radix: 16))")
      }
    case 0x1:
      return try integer(at: start)
    case 0x2:
      guard low == 2 || low == 3 else { throw Self.failure("invalid real width") }
      let bits = try read(at: start + 1, width: 1 << low)
      return .real(
        low == 2 ? Double(Float(bitPattern: UInt32(truncatingIfNeeded: bits))) : Double(bitPattern: bits))
    case 0x3:
      guard marker == 0x33 else { throw Self.failure("invalid date marker") }
      let seconds = Double(bitPattern: try read(at: start + 1, width: 8))
      let date = Date(timeIntervalSinceReferenceDate: seconds)
      // NaN, infinity and dates before year 1 or after 9999 have no meaning a property list
      // can carry (the XML format cannot even write them): refused, not printed as nonsense.
      guard seconds.isFinite, date.timeIntervalSince1970 >= Double(PropertyListDate.earliest),
        date.timeIntervalSince1970 < Double(PropertyListDate.latest) + 1
      else {
        throw Self.failure("date \(seconds) seconds from 2001 is not a date between the years 1 and 9999")
      }
      return .date(date)
    case 0x4, 0x5, 0x6:
      let leaf = try stringOrData(at: start)
      leaves[index] = leaf
      try charge(leaf)
      return leaf
    case 0x8:
      guard allowsUIDs else {
        throw PropertyListError(
          .unsupported, "binary property list: UID objects (keyed archives) are not supported")
      }
      return try KeyedArchiveUID.decoded(width: low + 1) { try read(at: start + 1, width: $0) }
    case 0xA:
      let (body, length) = try counted(at: start, unitWidth: referenceWidth)
      onPath.insert(index)
      defer { onPath.remove(index) }
      var items: [PropertyList] = []
      items.reserveCapacity(min(length / referenceWidth, max(objectsLeft, 0)))
      for position in stride(from: body, to: body + length, by: referenceWidth) {
        items.append(try object(try reference(at: position), depth: depth + 1))
      }
      return .array(items)
    case 0xD:
      let (body, length) = try counted(at: start, unitWidth: 2 * referenceWidth)
      onPath.insert(index)
      defer { onPath.remove(index) }
      // A repeated key keeps its last value, as Apple's parser and plistlib do.
      var result = PropertyListDictionary()
      let valuesStart = body + length / 2
      for position in stride(from: body, to: valuesStart, by: referenceWidth) {
        guard case .string(let key) = try object(try reference(at: position), depth: depth + 1) else {
          throw Self.failure("dictionary key is not a string")
        }
        let valueReference = try reference(at: position - body + valuesStart)
        result[key] = try object(valueReference, depth: depth + 1)
      }
      return .dictionary(result)
    default:
      throw Self.failure("unsupported object marker 0x\(String(marker, radix: 16))")
    }
  }

  private func stringOrData(at start: Int) throws -> PropertyList {
    switch bytes[start] >> 4 {
    case 0x4:
      let (body, length) = try counted(at: start, unitWidth: 1)
      return .data(Data(bytes[body..<body + length]))
    case 0x5:
      let (body, length) = try counted(at: start, unitWidth: 1)
      let ascii = bytes[body..<body + length]
      guard ascii.allSatisfy({ $0 < 0x80 }) else { throw Self.failure("non-ASCII byte in an ASCII string") }
      return .string(String(decoding: ascii, as: UTF8.self))
    default:
      let (body, length) = try counted(at: start, unitWidth: 2)
      return .string(try utf16String(bytes[body..<body + length]))
    }
  }

  /// Charges a string's or data's size against the payload budget, so that one large
  /// object referenced many times cannot expand without bound.
  private mutating func charge(_ leaf: PropertyList) throws {
    let size: Int
    switch leaf {
    case .string(let text): size = text.utf8.count
    case .data(let data): size = data.count
    default: size = 0
    }
    payloadLeft -= size
    guard payloadLeft >= 0 else {
      throw PropertyListError(
        .tooLarge, "binary property list: strings and data expand beyond \(maxPayload) bytes")
    }
  }

  // MARK: Structure

  private func offset(of index: Int) throws -> Int {
    guard index >= 0, index < objectCount else { throw Self.failure("object reference out of range") }
    let value = Self.bigEndian(bytes, at: offsetTableStart + index * offsetWidth, width: offsetWidth)
    guard value >= 8, value < UInt64(offsetTableStart) else {
      throw Self.failure("offset of object \(index) out of range")
    }
    return Int(value)
  }

  private func reference(at position: Int) throws -> Int {
    let value = try read(at: position, width: referenceWidth)
    guard value < UInt64(objectCount) else { throw Self.failure("object reference out of range") }
    return Int(value)
  }

  /// The start and byte length of a counted object's body. The count is in the marker's low
  /// nibble, or in a following integer object when the nibble is 0xF.
  private func counted(at start: Int, unitWidth: Int) throws -> (body: Int, length: Int) {
    var body = start + 1
    var count = UInt64(bytes[start] & 0x0F)
    if count == 0x0F {
      guard body < offsetTableStart, bytes[body] & 0xF0 == 0x10, bytes[body] & 0x0F <= 3 else {
        throw Self.failure("invalid object count")
      }
      let width = 1 << Int(bytes[body] & 0x0F)
      count = try read(at: body + 1, width: width)
      body += 1 + width
    }
    let (length, overflow) = count.multipliedReportingOverflow(by: UInt64(unitWidth))
    guard !overflow, length <= UInt64(offsetTableStart - body) else {
      throw Self.failure("object count \(count) larger than the data")
    }
    return (body, Int(length))
  }

  private func integer(at start: Int) throws -> PropertyList {
    let width = 1 << Int(bytes[start] & 0x0F)
    switch width {
    case 1, 2, 4:
      return .integer(Int64(try read(at: start + 1, width: width)))
    case 8:
      return .integer(Int64(bitPattern: try read(at: start + 1, width: 8)))
    case 16:
      // 128-bit integers are how Apple and plistlib store values beyond Int64 (unsigned ones
      // up to UInt64.max, mostly); accept those that fit Int64 or UInt64.
      let high = try read(at: start + 1, width: 8)
      let low = try read(at: start + 9, width: 8)
      if high == 0 { return low <= UInt64(Int64.max) ? .integer(Int64(low)) : .unsignedInteger(low) }
      guard high == UInt64.max, Int64(bitPattern: low) < 0 else {
        throw PropertyListError(.unsupported, "binary property list: integer out of the 64-bit range")
      }
      return .integer(Int64(bitPattern: low))
    default:
      throw Self.failure("invalid integer width")
    }
  }

  private func utf16String(_ raw: ArraySlice<UInt8>) throws -> String {
    var units: [UInt16] = []
    units.reserveCapacity(raw.count / 2)
    for position in stride(from: raw.startIndex, to: raw.endIndex, by: 2) {
      units.append(UInt16(raw[position]) << 8 | UInt16(raw[position + 1]))
    }
    var result = String.UnicodeScalarView()
    var decoder = UTF16()
    var iterator = units.makeIterator()
    while true {
      switch decoder.decode(&iterator) {
      case .scalarValue(let scalar): result.append(scalar)
      case .emptyInput: return String(result)
      case .error: throw Self.failure("invalid UTF-16 in a string")
      }
    }
  }

  /// Reads `width` big-endian bytes that must lie before the offset table.
  private func read(at position: Int, width: Int) throws -> UInt64 {
    guard position >= 0, width <= offsetTableStart - position else {
      throw Self.failure("object extends past the object data (truncated or corrupt file)")
    }
    return Self.bigEndian(bytes, at: position, width: width)
  }

  private static func bigEndian(_ bytes: [UInt8], at position: Int, width: Int) -> UInt64 {
    bytes[position..<position + width].reduce(0) { $0 << 8 | UInt64($1) }
  }

  private static func failure(_ what: String) -> PropertyListError {
    PropertyListError(.malformed, "binary property list: \(what)")
  }
}
