// Writes Apple XML property lists in the layout Apple's own writer produces: the standard
// prolog and DOCTYPE, one tab per level, empty containers as `<array/>` and `<dict/>`, data
// as base64 lines that shrink by 8 columns per level. Keys are sorted by Unicode scalar
// value, so the output is a pure function of the value.
//
// Text escapes `&`, `<` and `>` as Apple does, and also writes control characters other
// than tab and newline as character references, so that reading the output back yields
// the same scalars (a raw carriage return would not survive every XML reader).

import Foundation

struct XMLPropertyListWriter {
  private var out: [UInt8] = []

  mutating func document(for value: PropertyList) -> Data {
    append(
      """
      <?xml version="1.0" encoding="UTF-8"?>
      <!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
      <plist version="1.0">

      """)
    write(value, indent: 0)
    append("</plist>\n")
    return Data(out)
  }

  private mutating func write(_ value: PropertyList, indent: Int) {
    tabs(indent)
    switch value {
    case .string(let text):
      element("string", escaped: text)
    case .integer(let number):
      append("<integer>\(number)</integer>\n")
    case .unsignedInteger(let number):
      append("<integer>\(number)</integer>\n")
    case .real(let number):
      append("<real>\(Self.realText(number))</real>\n")
    case .bool(let flag):
      append(flag ? "<true/>\n" : "<false/>\n")
    case .date(let date):
      append("<date>\(PropertyListDate.format(date))</date>\n")
    case .data(let data):
      append("<data>\n")
      let encoded = Array(data.base64EncodedString().utf8)
      let width = 76 - 8 * min(indent, 8)
      for start in stride(from: 0, to: encoded.count, by: width) {
        tabs(indent)
        out.append(contentsOf: encoded[start..<min(start + width, encoded.count)])
        append("\n")
      }
      tabs(indent)
      append("</data>\n")
    case .array(let items):
      guard !items.isEmpty else { return append("<array/>\n") }
      append("<array>\n")
      for item in items { write(item, indent: indent + 1) }
      tabs(indent)
      append("</array>\n")
    case .dictionary(let entries):
      guard !entries.isEmpty else { return append("<dict/>\n") }
      append("<dict>\n")
      for key in entries.sortedKeys {
        tabs(indent + 1)
        element("key", escaped: key)
        if let entry = entries[key] { write(entry, indent: indent + 1) }
      }
      tabs(indent)
      append("</dict>\n")
    }
  }

  /// Zero and integral reals below 10^17 as Apple writes them (`0.0`, `5`); others in the
  /// shortest form that reads back to the same bits, where Apple would print 17 digits.
  /// Negative zero keeps its sign, which Apple's writer drops.
  static func realText(_ number: Double) -> String {
    if number.isNaN { return "nan" }
    if number.isInfinite { return number < 0 ? "-infinity" : "+infinity" }
    if number == 0 { return number.sign == .minus ? "-0.0" : "0.0" }
    if number == number.rounded(), abs(number) < 1e17 { return String(Int64(number)) }
    return "\(number)"
  }

  private mutating func element(_ name: String, escaped text: String) {
    append("<\(name)>")
    for scalar in text.unicodeScalars {
      switch scalar {
      case "&": append("&amp;")
      case "<": append("&lt;")
      case ">": append("&gt;")
      case "\t", "\n": out.append(UInt8(scalar.value))
      case _ where scalar.value < 0x20 || scalar.value == 0x7F: append("&#\(scalar.value);")
      default: UTF8.encode(scalar) { out.append($0) }
      }
    }
    append("</\(name)>\n")
  }

  private mutating func tabs(_ count: Int) {
    out.append(contentsOf: repeatElement(0x09, count: count))
  }

  private mutating func append(_ text: String) {
    out.append(contentsOf: text.utf8)
  }
}
