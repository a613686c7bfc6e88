// How `why` and `advise` put sizes, paths and commands into sentences. Paths are raw bytes an
// app chose: shown with control characters and invalid UTF-8 escaped, so a name can neither
// forge a line nor send a terminal escape, and quoted for a shell when they go into a command.

import AppboxRepository
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
/// as `\xNN`), backslashes (doubled), and Unicode controls, direction marks, embeddings,
/// overrides, isolates and line separators (as `\u{HHHH}`, as the terminal output escapes
/// them: U+202E would show a name reversed); each byte of invalid UTF-8 as `\xNN`.
public func printablePath(_ path: [UInt8]) -> String {
  var result = ""
  var index = 0
  func escape(_ byte: UInt8) {
    let digits = Array("0123456789abcdef")
    result += "\\x" + String(digits[Int(byte >> 4)]) + String(digits[Int(byte & 15)])
  }
  while index < path.count {
    let byte = path[index]
    guard let (scalar, length) = scalar(in: path, at: index) else {
      escape(byte)
      index += 1
      continue
    }
    if scalar.value < 0x20 || scalar.value == 0x7F {
      escape(byte)
    } else if isControlOrDirection(scalar) {
      result += "\\u{" + String(scalar.value, radix: 16) + "}"
    } else if scalar == "\\" {
      result += "\\\\"
    } else {
      result.unicodeScalars.append(scalar)
    }
    index += length
  }
  return result
}

/// The Unicode scalar that starts at `index` of `bytes` and its length in bytes, or nil when
/// the bytes there are not valid UTF-8.
private func scalar(in bytes: [UInt8], at index: Int) -> (Unicode.Scalar, Int)? {
  let length: Int
  switch bytes[index] {
  case 0..<0x80: return (Unicode.Scalar(bytes[index]), 1)
  case 0xC2...0xDF: length = 2
  case 0xE0...0xEF: length = 3
  case 0xF0...0xF4: length = 4
  default: return nil
  }
  guard index + length <= bytes.count,
    let text = String(validating: bytes[index..<(index + length)], as: UTF8.self),
    let scalar = text.unicodeScalars.first, text.unicodeScalars.count == 1
  else { return nil }
  return (scalar, length)
}

/// C1 controls, direction marks, embeddings, overrides and isolates, line and paragraph
/// separators: characters that change how a line displays (the CLI's `Terminal` escapes the
/// same set).
private func isControlOrDirection(_ scalar: Unicode.Scalar) -> Bool {
  switch scalar.value {
  case 0x80...0x9F: return true
  case 0x061C, 0x200E, 0x200F, 0x202A...0x202E, 0x2066...0x2069: return true
  case 0x2028, 0x2029: return true
  default: return false
  }
}

/// `words` (raw bytes each) as one command line for a POSIX shell (dash, bash, zsh), to be
/// shown and pasted. A word of safe characters stays as it is; one that displays as it is
/// goes in single quotes (a quote inside as `'\''`); one with a control or direction
/// character is made by `printf` from octal escapes into a variable first, so the line shows
/// and carries no such byte: `p1=$(printf 'x\012y.'); cmd "${p1%.}"` (the final '.' keeps a
/// trailing newline from being dropped by `$(…)`, and `%.` removes it). Nothing in the line
/// is expanded but those variables: no `$'…'`, which dash does not know (it reads the `\'`
/// inside as the end of a quote, and runs what follows).
public func shellCommand(_ words: [[UInt8]]) -> String {
  let safe = Set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-/+@%,=:".utf8)
  var assignments: [String] = []
  var parts: [String] = []
  for word in words {
    if !word.isEmpty && word.allSatisfy({ safe.contains($0) }) {
      parts.append(String(decoding: word, as: UTF8.self))
    } else if isDisplayable(word) {
      parts.append(
        "'" + String(decoding: word, as: UTF8.self).replacingOccurrences(of: "'", with: "'\\''") + "'")
    } else {
      let name = "p\(assignments.count + 1)"
      assignments.append("\(name)=$(printf '\(printfFormat(word)).')")
      parts.append("\"${\(name)%.}\"")
    }
  }
  return (assignments + [parts.joined(separator: " ")]).joined(separator: "; ")
}

/// Whether `word` is valid UTF-8 without control or direction characters (so it shows as it is).
private func isDisplayable(_ word: [UInt8]) -> Bool {
  var index = 0
  while index < word.count {
    guard let (scalar, length) = scalar(in: word, at: index), scalar.value >= 0x20, scalar.value != 0x7F,
      !isControlOrDirection(scalar)
    else { return false }
    index += length
  }
  return true
}

/// `bytes` as a printf format inside single quotes that prints them: printable ASCII as it
/// is (`%` and `\` doubled, `'` as `'\''`), every other byte as a three-digit octal escape.
private func printfFormat(_ bytes: [UInt8]) -> String {
  var result = ""
  for byte in bytes {
    switch byte {
    case UInt8(ascii: "'"): result += "'\\''"
    case UInt8(ascii: "\\"): result += "\\\\"
    case UInt8(ascii: "%"): result += "%%"
    case 0x20..<0x7F: result.unicodeScalars.append(Unicode.Scalar(byte))
    default:
      result += "\\" + String(byte >> 6) + String((byte >> 3) & 7) + String(byte & 7)
    }
  }
  return result
}

/// "1 backup", "3 backups".
package func counted(_ count: Int, _ noun: String) -> String { "\(count) \(noun)\(count == 1 ? "" : "s")" }
