// NSKeyedArchiver archives in the property-list codec: the subset an iOS device backup needs
// (Manifest.db's MBFile records: one object of a named class whose fields are scalars or
// references to strings and NSData/NSMutableData objects).
//
// Format: a binary property list `{$archiver: "NSKeyedArchiver", $version: 100000,
// $top: {root: UID}, $objects: ["$null", …]}`. Objects refer to each other by UID (binary
// marker 0x8 and a 1-8 byte big-endian index into `$objects`); an object of a class is a
// dictionary whose `$class` is the UID of `{$classname, $classes}`; UID 0 is nil.
//
// Representation: a UID is the value `{"CF$UID": n}`, the spelling Apple's XML property lists
// use for one. Only `KeyedArchive.decode` reads UIDs (`PropertyList.decode` still refuses
// them: a bundle's plist holding one is malformed input to appbox), and only
// `KeyedArchiveBuilder` writes them as UID objects.
//
// Invariants: decoding is the codec's own reader with the caller's limits (size, depth,
// object count) and its checks; every UID is checked against the number of objects before
// it is followed; `resolve` follows exactly one reference, so references that form a cycle
// cannot make a reader loop; anything not of the expected shape is a `PropertyListError`
// (`.malformed`), which callers report as bad data (exit 65).

import Foundation

/// A UID of a keyed archive, as the property-list model holds one.
public enum KeyedArchiveUID {
  /// The model's spelling of a UID.
  public static func uid(_ index: Int) -> PropertyList {
    .dictionary(PropertyListDictionary(["CF$UID": .integer(Int64(index))]))
  }

  /// The index `value` refers to, when it is a UID.
  public static func index(of value: PropertyList) -> Int? {
    guard case .dictionary(let entries) = value, entries.count == 1,
      case .integer(let index)? = entries["CF$UID"], index >= 0, index <= Int64(UInt32.max)
    else { return nil }
    return Int(index)
  }

  /// Reads a binary UID object's value of `width` bytes (the marker's low nibble plus one).
  static func decoded(width: Int, read: (Int) throws -> UInt64) throws -> PropertyList {
    guard [1, 2, 4, 8].contains(width) else {
      throw PropertyListError(.malformed, "binary property list: invalid UID width \(width)")
    }
    let value = try read(width)
    guard value <= UInt64(UInt32.max) else {
      throw PropertyListError(.malformed, "binary property list: UID \(value) out of range")
    }
    return uid(Int(value))
  }

  /// The binary encoding of `entries` when they are a UID (marker 0x8, 1, 2 or 4 bytes).
  static func encoded(_ entries: PropertyListDictionary) -> [UInt8]? {
    guard let index = index(of: .dictionary(entries)) else { return nil }
    let width = index <= 0xFF ? 1 : index <= 0xFFFF ? 2 : 4
    var bytes: [UInt8] = [0x80 | UInt8(width - 1)]
    for shift in stride(from: (width - 1) * 8, through: 0, by: -8) {
      bytes.append(UInt8(truncatingIfNeeded: index >> shift))
    }
    return bytes
  }
}

/// A decoded NSKeyedArchiver archive: its objects, and the root object's fields.
public struct KeyedArchive: Sendable {
  /// `$objects`, UIDs unresolved.
  public let objects: [PropertyList]
  /// The root object (a dictionary for an object of a class).
  public let root: PropertyList

  static let archiverName = "NSKeyedArchiver"
  static let version: Int64 = 100_000

  /// Decodes a keyed archive (binary, or XML with `CF$UID` dictionaries) within `limits`.
  public static func decode(_ bytes: Data, limits: PropertyListLimits = .init()) throws -> KeyedArchive {
    guard bytes.count <= limits.maxBytes else {
      throw PropertyListError(
        .tooLarge, "keyed archive is \(bytes.count) bytes, more than the limit of \(limits.maxBytes)")
    }
    let input = [UInt8](bytes)
    let top: PropertyList
    if input.starts(with: Array("bplist".utf8)) {
      var reader = try BinaryPropertyListReader(input, limits: limits, allowsUIDs: true)
      top = try reader.read()
    } else {
      var reader = XMLPropertyListReader(input, limits: limits)
      top = try reader.read()
    }
    guard top["$archiver"]?.string == archiverName else {
      throw failure("it is not an NSKeyedArchiver archive ($archiver)")
    }
    guard top["$version"]?.integer == version else { throw failure("unsupported $version") }
    guard case .array(let objects)? = top["$objects"], !objects.isEmpty else { throw failure("no $objects") }
    guard let rootReference = top["$top"]?["root"], let rootIndex = KeyedArchiveUID.index(of: rootReference)
    else { throw failure("no $top root UID") }
    guard rootIndex > 0, rootIndex < objects.count else { throw failure("the root UID is out of range") }
    return KeyedArchive(objects: objects, root: objects[rootIndex])
  }

  /// The object `value` refers to when it is a UID (nil for UID 0, `$null`); otherwise
  /// `value` itself. Follows one reference only.
  public func resolve(_ value: PropertyList) throws -> PropertyList? {
    guard let index = KeyedArchiveUID.index(of: value) else { return value }
    guard index < objects.count else { throw Self.failure("UID \(index) is out of range") }
    return index == 0 ? nil : objects[index]
  }

  /// The class name of an object (`$class` → `$classname`), or nil for a plain value.
  public func className(of object: PropertyList) throws -> String? {
    guard let reference = object["$class"] else { return nil }
    guard let descriptor = try resolve(reference), KeyedArchiveUID.index(of: reference) != nil,
      let name = descriptor["$classname"]?.string
    else { throw Self.failure("an object's $class is not a class") }
    return name
  }

  /// The string a field holds, directly or by reference.
  public func string(_ value: PropertyList?) throws -> String? {
    guard let value, let resolved = try resolve(value) else { return nil }
    guard let string = resolved.string else { throw Self.failure("a field that should be a string is not") }
    return string
  }

  /// The bytes a field holds: plain data, or an NSData/NSMutableData object (`NS.data`).
  public func data(_ value: PropertyList?) throws -> Data? {
    guard let value, let resolved = try resolve(value) else { return nil }
    if let data = resolved.data { return data }
    guard let name = try className(of: resolved), name == "NSMutableData" || name == "NSData",
      let bytes = resolved["NS.data"]?.data
    else { throw Self.failure("a field that should hold data does not") }
    return bytes
  }

  static func failure(_ what: String) -> PropertyListError {
    PropertyListError(.malformed, "keyed archive: \(what)")
  }
}

/// Builds a keyed archive the way NSKeyedArchiver lays one out: `$null`, the root object,
/// then what it refers to in the order added, class descriptors once each.
public struct KeyedArchiveBuilder {
  private var objects: [PropertyList] = [.string("$null"), .string("$null")]
  private var classes: [String: Int] = [:]

  public init() {}

  /// Adds a string or data value; returns its UID.
  public mutating func add(_ value: PropertyList) -> PropertyList {
    objects.append(value)
    return KeyedArchiveUID.uid(objects.count - 1)
  }

  /// Adds an NSMutableData object holding `bytes`; returns its UID.
  public mutating func addMutableData(_ bytes: Data) -> PropertyList {
    let index = objects.count
    objects.append(.string("$null"))
    let classUID = classReference("NSMutableData", ancestors: ["NSMutableData", "NSData", "NSObject"])
    objects[index] = .dictionary(PropertyListDictionary(["NS.data": .data(bytes), "$class": classUID]))
    return KeyedArchiveUID.uid(index)
  }

  /// The archive with the root object `fields` of class `className` (and its `ancestors`,
  /// itself first), as a binary property list with real UID objects.
  public mutating func archive(root fields: PropertyListDictionary, className: String, ancestors: [String])
    -> Data
  {
    var root = fields
    root["$class"] = classReference(className, ancestors: ancestors)
    objects[1] = .dictionary(root)
    let top: PropertyList = .dictionary(
      PropertyListDictionary([
        "$archiver": .string(KeyedArchive.archiverName), "$version": .integer(KeyedArchive.version),
        "$top": .dictionary(PropertyListDictionary(["root": KeyedArchiveUID.uid(1)])),
        "$objects": .array(objects),
      ]))
    var writer = BinaryPropertyListWriter()
    writer.writesUIDs = true
    return writer.document(for: top)
  }

  private mutating func classReference(_ name: String, ancestors: [String]) -> PropertyList {
    if let index = classes[name] { return KeyedArchiveUID.uid(index) }
    objects.append(
      .dictionary(
        PropertyListDictionary([
          "$classname": .string(name), "$classes": .array(ancestors.map(PropertyList.string)),
        ])
      ))
    classes[name] = objects.count - 1
    return KeyedArchiveUID.uid(objects.count - 1)
  }
}
