// The text of XML plist scalar elements: integers, reals, base64 data, and the whitespace
// rules around them. Pure functions of the element text; the reader turns a nil (or an
// out-of-range integer) into an error that names the line.

import Foundation

enum XMLScalars {
  enum ParsedInteger: Equatable {
    case value(Int64)
    /// Above Int64.max, up to UInt64.max.
    case unsigned(UInt64)
    case outOfRange
    case invalid
  }

  /// Decimal or `0x` hexadecimal, with an optional sign, surrounded by optional whitespace;
  /// from Int64.min to UInt64.max.
  static func integer(_ text: String) -> ParsedInteger {
    var digits = Substring(trimmed(text))
    let isNegative = digits.first == "-"
    if isNegative || digits.first == "+" { digits = digits.dropFirst() }
    var radix = 10
    if digits.hasPrefix("0x") || digits.hasPrefix("0X") {
      radix = 16
      digits = digits.dropFirst(2)
    }
    guard !digits.isEmpty, digits.allSatisfy({ radix == 16 ? $0.isHexDigit : ("0"..."9").contains($0) })
    else {
      return .invalid
    }
    // The digits are valid, so the only way left to fail is overflow.
    guard let magnitude = UInt64(digits, radix: radix) else { return .outOfRange }
    let limit = UInt64(Int64.max)
    if isNegative {
      guard magnitude <= limit + 1 else { return .outOfRange }
      return .value(magnitude == limit + 1 ? Int64.min : -Int64(magnitude))
    }
    guard magnitude <= limit else { return .unsigned(magnitude) }
    return .value(Int64(magnitude))
  }

  /// Anything `Double` reads, plus the spellings of infinity Apple writes.
  static func real(_ text: String) -> Double? {
    let value = trimmed(text)
    switch value.lowercased() {
    case "nan": return .nan
    case "inf", "+inf", "infinity", "+infinity": return .infinity
    case "-inf", "-infinity": return -.infinity
    default: return Double(value)
    }
  }

  static func isWhitespace(_ byte: UInt8) -> Bool {
    byte == 0x20 || byte == 0x09 || byte == 0x0A || byte == 0x0D
  }

  static func trimmed(_ text: String) -> String {
    let utf8 = Array(text.utf8)
    guard let first = utf8.firstIndex(where: { !isWhitespace($0) }),
      let last = utf8.lastIndex(where: { !isWhitespace($0) })
    else { return "" }
    return String(decoding: utf8[first...last], as: UTF8.self)
  }

  /// Decodes base64 that may be broken by whitespace; padding is optional but must be final.
  static func base64Decoded(_ text: String) -> Data? {
    var values: [UInt8] = []
    var padding = 0
    for byte in text.utf8 {
      if isWhitespace(byte) { continue }
      if byte == UInt8(ascii: "=") {
        padding += 1
        continue
      }
      guard padding == 0 else { return nil }
      switch byte {
      case UInt8(ascii: "A")...UInt8(ascii: "Z"): values.append(byte - UInt8(ascii: "A"))
      case UInt8(ascii: "a")...UInt8(ascii: "z"): values.append(byte - UInt8(ascii: "a") + 26)
      case UInt8(ascii: "0")...UInt8(ascii: "9"): values.append(byte - UInt8(ascii: "0") + 52)
      case UInt8(ascii: "+"): values.append(62)
      case UInt8(ascii: "/"): values.append(63)
      default: return nil
      }
    }
    let remainder = values.count % 4
    guard remainder != 1, padding <= 2, padding == 0 || (remainder + padding) % 4 == 0 else { return nil }
    var out = Data(capacity: values.count / 4 * 3 + 2)
    var index = 0
    while index < values.count {
      let chunk = values[index..<min(index + 4, values.count)]
      let bits = chunk.enumerated().reduce(UInt32(0)) { $0 | UInt32($1.element) << (18 - 6 * $1.offset) }
      out.append(UInt8(truncatingIfNeeded: bits >> 16))
      if chunk.count > 2 { out.append(UInt8(truncatingIfNeeded: bits >> 8)) }
      if chunk.count > 3 { out.append(UInt8(truncatingIfNeeded: bits)) }
      index += 4
    }
    return out
  }
}
