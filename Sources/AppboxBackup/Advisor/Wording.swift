// How `why` and `advise` put sizes, paths and commands into sentences. Paths are raw bytes an
// app chose: shown with control characters and invalid UTF-8 escaped, so a name can neither
// forge a line nor send a terminal escape, and quoted for a shell when they go into a command.

import Foundation

/// "1.2 MB"-style sizes (powers of 1000, as `appbox` prints them everywhere).
public func formattedByteCount(_ bytes: Int64) -> String {
  let units = ["B", "KB", "MB", "GB", "TB"]
  var value = Double(bytes)
  var unit = 0
  while abs(value) >= 1000 && unit < units.count - 1 {
    value /= 1000
    unit += 1
  }
  if unit == 0 { return "\(bytes) B" }
  let tenths = (value * 10).rounded() / 10
  let whole = tenths.rounded(.towardZero)
  let fraction = Int((abs(tenths - whole) * 10).rounded())
  return "\(Int(whole)).\(fraction) \(units[unit])"
}

/// A raw path for people: valid UTF-8 as is, except control characters (`\n`, `\t`, `\e`...
/// as `\xNN`) and backslashes (doubled); each byte of invalid UTF-8 as `\xNN`.
public func printablePath(_ path: [UInt8]) -> String {
  var result = ""
  var index = 0
  func escape(_ byte: UInt8) {
    let digits = Array("0123456789abcdef")
    result += "\\x" + String(digits[Int(byte >> 4)]) + String(digits[Int(byte & 15)])
  }
  while index < path.count {
    let byte = path[index]
    let length: Int
    switch byte {
    case 0..<0x80: length = 1
    case 0xC2...0xDF: length = 2
    case 0xE0...0xEF: length = 3
    case 0xF0...0xF4: length = 4
    default: length = 0
    }
    if length == 0 || index + length > path.count {
      escape(byte)
      index += 1
      continue
    }
    let sequence = Array(path[index..<(index + length)])
    guard let text = String(validating: sequence, as: UTF8.self), let scalar = text.unicodeScalars.first
    else {
      escape(byte)
      index += 1
      continue
    }
    if scalar.value < 0x20 || scalar.value == 0x7F || (0x80...0x9F).contains(scalar.value) {
      escape(byte)
    } else if scalar == "\\" {
      result += "\\\\"
    } else {
      result += text
    }
    index += length
  }
  return result
}

/// A raw path as one shell word: plain when it is only safe characters, else single-quoted,
/// with control characters and invalid UTF-8 in a `$'\xNN'` part.
public func shellQuoted(_ path: [UInt8]) -> String {
  let safe = Set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-/+@%,=:".utf8)
  if !path.isEmpty && path.allSatisfy({ safe.contains($0) }) { return String(decoding: path, as: UTF8.self) }
  let printable = printablePath(path)
  if printable == String(decoding: path, as: UTF8.self) {
    return "'" + printable.replacingOccurrences(of: "'", with: "'\\''") + "'"
  }
  // ANSI-C quoting: every byte outside printable ASCII as \xNN.
  var result = "$'"
  for byte in path {
    switch byte {
    case UInt8(ascii: "'"): result += "\\'"
    case UInt8(ascii: "\\"): result += "\\\\"
    case 0x20..<0x7F: result += String(UnicodeScalar(byte))
    default:
      let digits = Array("0123456789abcdef")
      result += "\\x" + String(digits[Int(byte >> 4)]) + String(digits[Int(byte & 15)])
    }
  }
  return result + "'"
}

/// "1 backup", "3 backups".
func counted(_ count: Int, _ noun: String) -> String { "\(count) \(noun)\(count == 1 ? "" : "s")" }
