// The old-style (OpenStep) property list text that `simctl listapps` and `appinfo` print: what
// Foundation's `-[NSDictionary description]` writes. Dictionaries are `{ key = value; }` with
// keys sorted, arrays `( a, b )`, each entry on its own line indented by four spaces per
// level; a nested container follows its key after " = " and its own level's indentation (as
// Foundation writes it: "key =     {" one level down, "key =         {" two); strings are quoted unless they are letters, digits and '_' only, with '"',
// '\' and control characters escaped as C escapes.

/// A value of an old-style property list.
indirect enum OpenStepValue: Sendable, Equatable {
  case string(String)
  case array([OpenStepValue])
  case dictionary([String: OpenStepValue])

  /// The text, as Foundation's description prints it (no final newline).
  func rendered(level: Int = 0) -> String {
    let indent = String(repeating: "    ", count: level)
    let inner = String(repeating: "    ", count: level + 1)
    switch self {
    case .string(let text): return Self.quoted(text)
    case .array(let items):
      guard !items.isEmpty else { return "(\n\(indent))" }
      return "(\n" + items.map { inner + $0.rendered(level: level + 1) }.joined(separator: ",\n")
        + "\n\(indent))"
    case .dictionary(let entries):
      let lines = entries.keys.sorted().map { key -> String in
        let value = entries[key]!
        let separator: String
        // Foundation indents a nested container's first line too, after the " = ".
        if case .string = value { separator = " = " } else { separator = " = " + inner }
        return inner + Self.quoted(key) + separator + value.rendered(level: level + 1) + ";"
      }
      return "{\n" + lines.map { $0 + "\n" }.joined() + indent + "}"
    }
  }

  /// `text` bare when it is letters, digits and '_' only, else quoted with C escapes.
  static func quoted(_ text: String) -> String {
    if !text.isEmpty,
      text.unicodeScalars.allSatisfy({
        $0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0) || $0 == "_")
      })
    {
      return text
    }
    var result = "\""
    for scalar in text.unicodeScalars {
      switch scalar {
      case "\"": result += "\\\""
      case "\\": result += "\\\\"
      case "\n": result += "\\n"
      case "\t": result += "\\t"
      case "\r": result += "\\r"
      default:
        if scalar.value < 0x20 || scalar.value == 0x7F {
          result += "\\" + octal(scalar.value)
        } else {
          result.unicodeScalars.append(scalar)
        }
      }
    }
    return result + "\""
  }
}

/// Three octal digits, as a C escape has them.
private func octal(_ value: UInt32) -> String {
  let digits = String(value, radix: 8)
  return String(repeating: "0", count: max(0, 3 - digits.count)) + digits
}
