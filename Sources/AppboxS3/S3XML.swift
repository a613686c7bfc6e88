// The few XML documents S3 answers with (listings, errors, multipart results), read by a
// small scanner: elements, their text, and the five predefined entities plus numeric
// references. Attributes, comments, processing instructions and the declaration are
// skipped; CDATA sections are taken as text. The input is the store's answer, which is
// trusted no further than this: the scanner never traps, and a document it cannot follow
// is simply missing the elements asked for.

/// One XML element: its name (without namespace prefix), text, and child elements.
struct XMLElement {
  var name: String
  var text: String = ""
  var children: [XMLElement] = []

  /// The first child named `name`.
  func child(_ name: String) -> XMLElement? { children.first { $0.name == name } }
  /// Every child named `name`.
  func all(_ name: String) -> [XMLElement] { children.filter { $0.name == name } }
  /// The text of the first child named `name`.
  func value(_ name: String) -> String? { child(name)?.text }

  /// Parses `bytes`; nil when there is no root element.
  static func parse(_ bytes: [UInt8]) -> XMLElement? {
    var stack: [XMLElement] = [XMLElement(name: "")]
    var index = 0
    var text: [UInt8] = []
    func flushText() {
      guard !text.isEmpty else { return }
      stack[stack.count - 1].text += decodeEntities(text)
      text.removeAll()
    }
    func find(_ pattern: [UInt8], from start: Int) -> Int? {
      guard pattern.count <= bytes.count else { return nil }
      var position = start
      while position + pattern.count <= bytes.count {
        if bytes[position] == pattern[0] && Array(bytes[position..<(position + pattern.count)]) == pattern {
          return position
        }
        position += 1
      }
      return nil
    }
    while index < bytes.count {
      let byte = bytes[index]
      guard byte == UInt8(ascii: "<") else {
        text.append(byte)
        index += 1
        continue
      }
      if bytes[index...].starts(with: Array("<![CDATA[".utf8)) {
        guard let end = find(Array("]]>".utf8), from: index + 9) else { break }
        stack[stack.count - 1].text += String(decoding: bytes[(index + 9)..<end], as: UTF8.self)
        index = end + 3
        continue
      }
      if bytes[index...].starts(with: Array("<!--".utf8)) {
        guard let end = find(Array("-->".utf8), from: index + 4) else { break }
        index = end + 3
        continue
      }
      guard let close = find([UInt8(ascii: ">")], from: index) else { break }
      let tag = Array(bytes[(index + 1)..<close])
      index = close + 1
      guard let first = tag.first, first != UInt8(ascii: "?"), first != UInt8(ascii: "!") else { continue }
      flushText()
      if first == UInt8(ascii: "/") {
        guard stack.count > 1 else { continue }
        let element = stack.removeLast()
        stack[stack.count - 1].children.append(element)
        continue
      }
      let selfClosing = tag.last == UInt8(ascii: "/")
      let nameBytes = tag.prefix {
        ![
          UInt8(ascii: " "), UInt8(ascii: "\t"), UInt8(ascii: "\n"),
          UInt8(ascii: "\r"), UInt8(ascii: "/"),
        ].contains($0)
      }
      var name = String(decoding: nameBytes, as: UTF8.self)
      if let colon = name.lastIndex(of: ":") { name = String(name[name.index(after: colon)...]) }
      if selfClosing {
        stack[stack.count - 1].children.append(XMLElement(name: name))
      } else {
        stack.append(XMLElement(name: name))
      }
    }
    // An unterminated document keeps what was complete.
    while stack.count > 1 {
      let element = stack.removeLast()
      stack[stack.count - 1].children.append(element)
    }
    return stack[0].children.first
  }

  static func decodeEntities(_ bytes: [UInt8]) -> String {
    guard bytes.contains(UInt8(ascii: "&")) else { return String(decoding: bytes, as: UTF8.self) }
    var result = ""
    var index = 0
    var plain: [UInt8] = []
    while index < bytes.count {
      if bytes[index] == UInt8(ascii: "&"), let end = bytes[index...].firstIndex(of: UInt8(ascii: ";")),
        end - index <= 12
      {
        let entity = String(decoding: bytes[(index + 1)..<end], as: UTF8.self)
        var scalar: Unicode.Scalar?
        switch entity {
        case "amp": scalar = "&"
        case "lt": scalar = "<"
        case "gt": scalar = ">"
        case "quot": scalar = "\""
        case "apos": scalar = "'"
        default:
          if entity.hasPrefix("#x") || entity.hasPrefix("#X") {
            scalar = UInt32(entity.dropFirst(2), radix: 16).flatMap(Unicode.Scalar.init)
          } else if entity.hasPrefix("#") {
            scalar = UInt32(entity.dropFirst()).flatMap(Unicode.Scalar.init)
          }
        }
        if let scalar {
          result += String(decoding: plain, as: UTF8.self)
          plain.removeAll()
          result.unicodeScalars.append(scalar)
          index = end + 1
          continue
        }
      }
      plain.append(bytes[index])
      index += 1
    }
    return result + String(decoding: plain, as: UTF8.self)
  }
}
