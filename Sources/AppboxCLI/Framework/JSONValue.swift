import Foundation

/// A JSON document with keys kept in the order written, so output is stable and reads
/// in the order the spec lists fields.
public indirect enum JSONValue: Sendable, Equatable {
  case null
  case bool(Bool)
  case integer(Int64)
  case unsignedInteger(UInt64)
  case number(Double)
  case string(String)
  case array([JSONValue])
  case object([(String, JSONValue)])

  public static func == (a: JSONValue, b: JSONValue) -> Bool { a.serialized() == b.serialized() }

  public static func int<I: BinaryInteger>(_ value: I) -> JSONValue { .integer(Int64(value)) }
  public static func optional(_ value: String?) -> JSONValue { value.map(JSONValue.string) ?? .null }

  /// The document as text, pretty-printed with two-space indentation.
  public func serialized(indent: Int = 0) -> String {
    let pad = String(repeating: "  ", count: indent)
    let inner = String(repeating: "  ", count: indent + 1)
    switch self {
    case .null: return "null"
    case .bool(let value): return value ? "true" : "false"
    case .integer(let value): return String(value)
    case .unsignedInteger(let value): return String(value)
    case .number(let value):
      guard value.isFinite else { return "null" }
      if value == value.rounded(), abs(value) < 1e15 { return String(Int64(value)) }
      return String(value)
    case .string(let value): return Self.quote(value)
    case .array(let items):
      if items.isEmpty { return "[]" }
      return "[\n" + items.map { inner + $0.serialized(indent: indent + 1) }.joined(separator: ",\n")
        + "\n\(pad)]"
    case .object(let members):
      if members.isEmpty { return "{}" }
      return "{\n"
        + members.map { inner + Self.quote($0.0) + ": " + $0.1.serialized(indent: indent + 1) }
        .joined(separator: ",\n") + "\n\(pad)}"
    }
  }

  /// The document on one line, with no spaces between tokens (for JSON lines).
  public func serializedOnOneLine() -> String {
    switch self {
    case .array(let items): return "[" + items.map { $0.serializedOnOneLine() }.joined(separator: ",") + "]"
    case .object(let members):
      return "{" + members.map { Self.quote($0.0) + ":" + $0.1.serializedOnOneLine() }.joined(separator: ",")
        + "}"
    default: return serialized()
    }
  }

  static func quote(_ text: String) -> String {
    var result = "\""
    for scalar in text.unicodeScalars {
      switch scalar {
      case "\"": result += "\\\""
      case "\\": result += "\\\\"
      case "\n": result += "\\n"
      case "\r": result += "\\r"
      case "\t": result += "\\t"
      // Controls (C0, DEL, C1) and direction characters as \u escapes, so JSON printed on a
      // terminal is as safe as text (see Terminal).
      case _
      where scalar.value < 0x20 || (0x7F...0x9F).contains(scalar.value) || scalar.value == 0x061C
        || (0x200E...0x200F).contains(scalar.value) || (0x2028...0x202E).contains(scalar.value)
        || (0x2066...0x2069).contains(scalar.value):
        result += String(format: "\\u%04x", scalar.value)
      default: result.unicodeScalars.append(scalar)
      }
    }
    return result + "\""
  }
}
