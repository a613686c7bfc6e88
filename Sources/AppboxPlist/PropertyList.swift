// AppboxPlist: a safe property-list codec, a module of its own (it was 42% of AppboxCore).
// Owns: the PropertyList value, its XML and binary readers and writers, keyed archives, and
// their limits and errors. Imports AppboxCore only (for `AppboxFailure`) and Foundation; it
// must not import any other appbox module or C library, so that every module that reads
// bundles, preferences or backups can use it.
//
// Bundles, entitlements and code-signature manifests are untrusted input, and Foundation's
// `PropertyListSerialization` is not hardened against hostile files. This codec reads Apple's
// XML and binary (`bplist00`) formats with every read bounds-checked, without integer traps,
// with nesting and object counts limited by `PropertyListLimits`, and reports any defect as
// one `PropertyListError`. It writes both formats deterministically (keys in Unicode scalar
// order) so that the same value always yields the same bytes, which seals and backups rely on.
//
// Dialect choices, made to read what Apple's parser reads (see the README's Compatibility):
// - a key repeated in a dictionary keeps its last value (Apple's parser and Python's plistlib
//   do the same); keys are compared by Unicode scalars, so keys that differ only in
//   normalization (NFC "é" and NFD "e\u{301}") are different keys, as in Foundation;
// - integers run from Int64.min to UInt64.max: values above Int64.max are `.unsignedInteger`
//   (binary plists store them as 128-bit integers, as Apple and plistlib write them);
// - a date must be finite and within the years 1 through 9999, the range the XML format can
//   write; NaN, infinite and farther dates (possible in binary plists) are refused as
//   malformed, rather than printed as nonsense.

import AppboxCore
import Foundation

/// A property-list value: the data model shared by Apple's XML and binary plists.
public indirect enum PropertyList: Equatable, Sendable {
  case string(String)
  case integer(Int64)
  /// An integer above Int64.max; every smaller one is `.integer`.
  case unsignedInteger(UInt64)
  case real(Double)
  case bool(Bool)
  case date(Date)
  case data(Data)
  case array([PropertyList])
  case dictionary(PropertyListDictionary)

  /// A dictionary from Swift dictionary entries.
  public static func dictionary(_ entries: [String: PropertyList]) -> PropertyList {
    .dictionary(PropertyListDictionary(entries))
  }
}

/// Bounds on what `PropertyList.decode(_:limits:)` accepts.
public struct PropertyListLimits: Sendable {
  /// The deepest nesting accepted; a top-level value is at depth 1.
  ///
  /// Readers recurse once per level, so values above `PropertyListLimits.depthCeiling`
  /// are treated as that ceiling: decoded values stay safe to compare, encode and free.
  public var maxDepth: Int
  /// The most values (dictionary keys included) one decode may produce. Shared
  /// sub-objects of a binary plist count each time they are referenced.
  public var maxObjects: Int
  /// The largest input accepted, in bytes.
  public var maxBytes: Int

  /// The nesting no decode exceeds, whatever `maxDepth` says.
  public static let depthCeiling = 512

  public init(maxDepth: Int = 64, maxObjects: Int = 1_000_000, maxBytes: Int = 64 << 20) {
    self.maxDepth = maxDepth
    self.maxObjects = maxObjects
    self.maxBytes = maxBytes
  }

  var effectiveDepth: Int { min(max(maxDepth, 0), Self.depthCeiling) }
}

/// A property list that could not be decoded: malformed, hostile or beyond the limits.
public struct PropertyListError: AppboxFailure, Equatable {
  /// Why decoding stopped.
  public enum Reason: Sendable, Equatable {
    /// The bytes are not a well-formed property list.
    case malformed
    /// The bytes are well formed but use a feature appbox does not accept (UIDs, sets, null).
    case unsupported
    /// Nesting exceeds `PropertyListLimits.maxDepth`.
    case tooDeep
    /// More values than `PropertyListLimits.maxObjects`.
    case tooManyObjects
    /// More bytes than `PropertyListLimits.maxBytes`.
    case tooLarge
    /// A binary object contains itself, directly or through other objects.
    case cyclic
  }

  public let reason: Reason
  /// One line naming what is wrong and where.
  public let description: String
  public var kind: FailureKind { .badData }

  init(_ reason: Reason, _ description: String) {
    self.reason = reason
    self.description = description
  }

  /// Renders untrusted text (a key, a tag name) for a one-line message.
  static func quoted(_ text: String) -> String {
    var result = ""
    for scalar in text.unicodeScalars.prefix(60) {
      if scalar.value < 0x20 || scalar.value == 0x7F {
        result += "\\u{\(String(scalar.value, radix: 16))}"
      } else {
        result.unicodeScalars.append(scalar)
      }
    }
    if text.unicodeScalars.count > 60 { result += "..." }
    return "'\(result)'"
  }
}

extension PropertyList {
  /// Decodes a binary (`bplist00`) or XML property list, detected from its first bytes.
  ///
  /// Throws `PropertyListError` for anything malformed, unsupported or beyond `limits`;
  /// never traps, whatever the input.
  public static func decode(_ bytes: Data, limits: PropertyListLimits = .init()) throws -> PropertyList {
    guard bytes.count <= limits.maxBytes else {
      throw PropertyListError(
        .tooLarge, "property list is \(bytes.count) bytes, more than the limit of \(limits.maxBytes)")
    }
    let input = [UInt8](bytes)
    if input.starts(with: Array("bplist".utf8)) {
      var reader = try BinaryPropertyListReader(input, limits: limits)
      return try reader.read()
    }
    var reader = XMLPropertyListReader(input, limits: limits)
    return try reader.read()
  }

  /// The value as an Apple XML property list: standard prolog and DOCTYPE, dictionary keys
  /// in Unicode scalar order, one tab per nesting level.
  ///
  /// Dates are written to whole seconds (the XML format has no finer unit), clamped to the
  /// years 1 through 9999.
  public func xmlData() -> Data {
    var writer = XMLPropertyListWriter()
    return writer.document(for: self)
  }

  /// The value as a binary (`bplist00`) property list. Deterministic: keys in Unicode scalar
  /// order and equal scalars stored once.
  public func binaryData() -> Data {
    var writer = BinaryPropertyListWriter()
    return writer.document(for: self)
  }

  /// The value for `key` when this is a dictionary.
  public subscript(key: String) -> PropertyList? {
    dictionary?[key]
  }

  public var string: String? {
    if case .string(let value) = self { return value }
    return nil
  }

  public var integer: Int64? {
    if case .integer(let value) = self { return value }
    return nil
  }

  /// The value of an integer that is not negative, whether or not it fits Int64.
  public var unsignedInteger: UInt64? {
    switch self {
    case .integer(let value) where value >= 0: return UInt64(value)
    case .unsignedInteger(let value): return value
    default: return nil
    }
  }

  public var real: Double? {
    if case .real(let value) = self { return value }
    return nil
  }

  public var bool: Bool? {
    if case .bool(let value) = self { return value }
    return nil
  }

  public var date: Date? {
    if case .date(let value) = self { return value }
    return nil
  }

  public var data: Data? {
    if case .data(let value) = self { return value }
    return nil
  }

  public var array: [PropertyList]? {
    if case .array(let value) = self { return value }
    return nil
  }

  public var dictionary: PropertyListDictionary? {
    if case .dictionary(let value) = self { return value }
    return nil
  }
}

extension String {
  /// Orders strings by Unicode scalar values, not by Swift's canonical-equivalence order, so
  /// that distinct keys always sort the same way.
  static func scalarOrder(_ lhs: String, _ rhs: String) -> Bool {
    lhs.unicodeScalars.lexicographicallyPrecedes(rhs.unicodeScalars)
  }
}
