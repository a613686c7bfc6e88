// Bytes an app chose (file names, link targets, preference keys and values, paths in
// reports and warnings) are hostile input to the user's terminal: an ESC sequence can set
// the clipboard (OSC 52), retitle the window or clear the screen, and a newline in a name
// forges an extra line of output. Everything human output shows goes through
// `Terminal.escape`, the one escaping function; `--json` output is escaped by JSON itself.
//
// The escaped form, which the command line also accepts for paths inside an app (so what
// `files ls` shows can be typed back to `files pull`):
//   \\            a backslash
//   \n \t \r      newline, tab, carriage return
//   \xHH          any other control byte (0x00-0x1F, 0x7F) and every byte that is not part of
//                 valid UTF-8 (a name need not be UTF-8)
//   \u{HHHH}      a Unicode control or direction character: C1 controls (U+0080-U+009F),
//                 bidirectional marks, embeddings, overrides and isolates, line and
//                 paragraph separators
// Everything else is printed as it is.

/// Escaping of app-chosen bytes for the terminal, and its inverse for arguments.
enum Terminal {
  /// `bytes` as text safe to print: controls, invalid UTF-8 and direction characters escaped,
  /// and backslashes doubled, so the result reads back to the same bytes (`unescape`).
  static func escape(_ bytes: [UInt8]) -> String { escape(bytes, reversible: true) }

  /// `text` made safe to print (a String is valid Unicode: only controls and direction
  /// characters change). Reversible, like `escape(_: [UInt8])`.
  static func escape(_ text: String) -> String { escape(Array(text.utf8), reversible: true) }

  /// A message for the terminal (appbox's own words with app-chosen bytes in them, already
  /// escaped or not): every control byte but the newlines and tabs of the layout, and every
  /// direction character, is escaped; backslashes are left alone, so parts escaped
  /// before are not escaped twice.
  static func sanitize(_ text: String) -> String { escape(Array(text.utf8), reversible: false) }

  private static func escape(_ bytes: [UInt8], reversible: Bool) -> String {
    var out = ""
    out.reserveCapacity(bytes.count)
    var index = 0
    while index < bytes.count {
      let byte = bytes[index]
      if byte < 0x80 {
        switch byte {
        case UInt8(ascii: "\\"): out += reversible ? "\\\\" : "\\"
        case UInt8(ascii: "\n"): out += reversible ? "\\n" : "\n"
        case UInt8(ascii: "\t"): out += reversible ? "\\t" : "\t"
        case UInt8(ascii: "\r"): out += "\\r"
        case 0..<0x20, 0x7F: out += hex(byte)
        default: out.unicodeScalars.append(Unicode.Scalar(byte))
        }
        index += 1
        continue
      }
      guard let (scalar, length) = decodeScalar(bytes, at: index) else {
        out += hex(byte)  // not valid UTF-8: the byte itself
        index += 1
        continue
      }
      if isControlOrDirection(scalar) {
        out += "\\u{" + String(scalar.value, radix: 16) + "}"
      } else {
        out.unicodeScalars.append(scalar)
      }
      index += length
    }
    return out
  }

  /// The bytes an escaped argument stands for (the inverse of `escape`). A backslash that
  /// starts no escape above stands for itself.
  static func unescape(_ argument: String) -> [UInt8] {
    let input = Array(argument.utf8)
    var out: [UInt8] = []
    out.reserveCapacity(input.count)
    var index = 0
    while index < input.count {
      let byte = input[index]
      guard byte == UInt8(ascii: "\\"), index + 1 < input.count else {
        out.append(byte)
        index += 1
        continue
      }
      switch input[index + 1] {
      case UInt8(ascii: "\\"):
        out.append(byte)
        index += 2
      case UInt8(ascii: "n"):
        out.append(UInt8(ascii: "\n"))
        index += 2
      case UInt8(ascii: "t"):
        out.append(UInt8(ascii: "\t"))
        index += 2
      case UInt8(ascii: "r"):
        out.append(UInt8(ascii: "\r"))
        index += 2
      case UInt8(ascii: "x")
      where index + 3 < input.count && hexValue(input[index + 2]) != nil && hexValue(input[index + 3]) != nil:
        out.append(hexValue(input[index + 2])! << 4 | hexValue(input[index + 3])!)
        index += 4
      case UInt8(ascii: "u") where index + 2 < input.count && input[index + 2] == UInt8(ascii: "{"):
        guard let close = input[(index + 3)...].firstIndex(of: UInt8(ascii: "}")),
          close > index + 3, close - index - 3 <= 6,
          let value = UInt32(String(decoding: input[(index + 3)..<close], as: UTF8.self), radix: 16),
          let scalar = Unicode.Scalar(value)
        else {
          out.append(byte)
          index += 1
          continue
        }
        out.append(contentsOf: Array(String(Character(scalar)).utf8))
        index = close + 1
      default:
        out.append(byte)
        index += 1
      }
    }
    return out
  }

  private static func hex(_ byte: UInt8) -> String {
    let digits = Array("0123456789abcdef".utf8)
    return "\\x" + String(decoding: [digits[Int(byte >> 4)], digits[Int(byte & 0xF)]], as: UTF8.self)
  }

  private static func hexValue(_ byte: UInt8) -> UInt8? {
    switch byte {
    case UInt8(ascii: "0")...UInt8(ascii: "9"): return byte - UInt8(ascii: "0")
    case UInt8(ascii: "a")...UInt8(ascii: "f"): return byte - UInt8(ascii: "a") + 10
    case UInt8(ascii: "A")...UInt8(ascii: "F"): return byte - UInt8(ascii: "A") + 10
    default: return nil
    }
  }

  /// The scalar a valid, shortest-form UTF-8 sequence at `index` encodes, and its length.
  private static func decodeScalar(_ bytes: [UInt8], at index: Int) -> (Unicode.Scalar, Int)? {
    let first = bytes[index]
    let length: Int
    var value: UInt32
    switch first {
    case 0xC2...0xDF: (length, value) = (2, UInt32(first & 0x1F))
    case 0xE0...0xEF: (length, value) = (3, UInt32(first & 0x0F))
    case 0xF0...0xF4: (length, value) = (4, UInt32(first & 0x07))
    default: return nil
    }
    guard index + length <= bytes.count else { return nil }
    for offset in 1..<length {
      let next = bytes[index + offset]
      guard next & 0xC0 == 0x80 else { return nil }
      value = value << 6 | UInt32(next & 0x3F)
    }
    let minimum: UInt32 = length == 3 ? 0x800 : (length == 4 ? 0x10000 : 0x80)
    guard value >= minimum, let scalar = Unicode.Scalar(value) else { return nil }  // overlong, surrogate
    return (scalar, length)
  }

  private static func isControlOrDirection(_ scalar: Unicode.Scalar) -> Bool {
    switch scalar.value {
    case 0x80...0x9F: return true  // C1 controls (0x9B is CSI on some terminals)
    case 0x061C, 0x200E, 0x200F, 0x202A...0x202E, 0x2066...0x2069: return true  // direction
    case 0x2028, 0x2029: return true  // line and paragraph separators
    default: return false
    }
  }
}
