// Reads Apple XML property lists with a hand-written tokenizer and recursive-descent parser.
//
// Invariants: the whole input is valid UTF-8 before parsing starts; the parser recurses once
// per nesting level and checks the depth before recursing, so nesting is bounded by
// `PropertyListLimits.effectiveDepth` (never by the input); every value and key is counted
// against `maxObjects`. Only the plist vocabulary is accepted: an unknown element, a stray
// text run, a mismatched or missing end tag, or anything after the root is an error.
// Entities are the five predefined ones plus numeric references; DTD declarations are
// skipped, never interpreted, so no entity expansion can be smuggled in.

import Foundation

struct XMLPropertyListReader {
  private let bytes: [UInt8]
  private var position = 0
  private let maxDepth: Int
  private let maxObjects: Int
  private var objectsLeft: Int

  init(_ bytes: [UInt8], limits: PropertyListLimits) {
    self.bytes = bytes
    self.maxDepth = limits.effectiveDepth
    self.maxObjects = limits.maxObjects
    self.objectsLeft = limits.maxObjects
  }

  mutating func read() throws -> PropertyList {
    guard String(validating: bytes, as: UTF8.self) != nil else {
      throw PropertyListError(
        .malformed, "malformed XML property list: invalid UTF-8 at line \(invalidLine())")
    }
    if bytes.starts(with: [0xEF, 0xBB, 0xBF]) { position = 3 }
    try skipMarkup(allowingDoctype: true)
    guard position < bytes.count, bytes[position] == UInt8(ascii: "<") else {
      throw PropertyListError(.malformed, "not a property list: neither bplist00 nor XML")
    }
    let root: PropertyList
    guard case .start(let name, let isEmpty) = try readTag() else {
      throw failure("unexpected end tag before the root element")
    }
    if name == "plist" {
      guard !isEmpty else { throw failure("empty <plist> element") }
      guard let child = try nextChild(of: "plist") else { throw failure("<plist> holds no value") }
      root = try element(child.name, isEmpty: child.isEmpty, depth: 1)
      try skipMarkup(allowingDoctype: false)
      try expectEndTag("plist")
    } else {
      root = try element(name, isEmpty: isEmpty, depth: 1)
    }
    try skipMarkup(allowingDoctype: false)
    guard position == bytes.count else { throw failure("unexpected content after the root element") }
    return root
  }

  // MARK: Elements

  private mutating func element(_ name: String, isEmpty: Bool, depth: Int) throws -> PropertyList {
    guard depth <= maxDepth else {
      throw PropertyListError(
        .tooDeep, "XML property list nested deeper than \(maxDepth) levels at line \(line())")
    }
    try spendObject()
    switch name {
    case "array":
      var items: [PropertyList] = []
      while !isEmpty, let next = try nextChild(of: name) {
        items.append(try element(next.name, isEmpty: next.isEmpty, depth: depth + 1))
      }
      return .array(items)
    case "dict":
      return .dictionary(isEmpty ? [:] : try dictionaryBody(depth: depth))
    case "string":
      return .string(isEmpty ? "" : try text(closing: name))
    case "integer":
      let value = isEmpty ? "" : try text(closing: name)
      switch XMLScalars.integer(value) {
      case .value(let number): return .integer(number)
      case .unsigned(let number): return .unsignedInteger(number)
      case .outOfRange: throw failure("integer out of range")
      case .invalid: throw failure("invalid integer \(PropertyListError.quoted(value))")
      }
    case "real":
      let value = isEmpty ? "" : try text(closing: name)
      guard let real = XMLScalars.real(value) else {
        throw failure("invalid real \(PropertyListError.quoted(value))")
      }
      return .real(real)
    case "true", "false":
      if !isEmpty, !XMLScalars.trimmed(try text(closing: name)).isEmpty {
        throw failure("<\(name)> must be empty")
      }
      return .bool(name == "true")
    case "date":
      let value = isEmpty ? "" : try text(closing: name)
      guard let date = PropertyListDate.parse(XMLScalars.trimmed(value)) else {
        throw failure("invalid date \(PropertyListError.quoted(value))")
      }
      return .date(date)
    case "data":
      let value = isEmpty ? "" : try text(closing: name)
      guard let data = XMLScalars.base64Decoded(value) else { throw failure("invalid base64 in <data>") }
      return .data(data)
    case "key":
      throw failure("<key> outside a <dict>")
    default:
      throw failure("unknown element <\(name)>")
    }
  }

  /// A repeated key keeps its last value, as Apple's parser and plistlib do.
  private mutating func dictionaryBody(depth: Int) throws -> PropertyListDictionary {
    var result = PropertyListDictionary()
    while let keyTag = try nextChild(of: "dict") {
      guard keyTag.name == "key" else { throw failure("expected <key> in <dict>, found <\(keyTag.name)>") }
      let key = keyTag.isEmpty ? "" : try text(closing: "key")
      try spendObject()
      guard let valueTag = try nextChild(of: "dict"), valueTag.name != "key" else {
        throw failure("key \(PropertyListError.quoted(key)) has no value")
      }
      result[key] = try element(valueTag.name, isEmpty: valueTag.isEmpty, depth: depth + 1)
    }
    return result
  }

  /// The next child element's start tag, or nil after consuming the container's end tag.
  private mutating func nextChild(of container: String) throws -> (name: String, isEmpty: Bool)? {
    try skipMarkup(allowingDoctype: false)
    guard position < bytes.count else { throw failure("unexpected end of data in <\(container)>") }
    guard bytes[position] == UInt8(ascii: "<") else { throw failure("unexpected text in <\(container)>") }
    switch try readTag() {
    case .start(let name, let isEmpty):
      return (name, isEmpty)
    case .end(let name):
      guard name == container else { throw failure("</\(name)> does not close <\(container)>") }
      return nil
    }
  }

  // MARK: Tokens

  private enum Tag {
    case start(String, isEmpty: Bool)
    case end(String)
  }

  /// Reads `<name attr="v">`, `<name/>` or `</name>`; attributes are checked for form and ignored.
  private mutating func readTag() throws -> Tag {
    guard position < bytes.count else { throw failure("unexpected end of data") }
    position += 1
    let isEnd = position < bytes.count && bytes[position] == UInt8(ascii: "/")
    if isEnd { position += 1 }
    let name = try readName()
    while true {
      skipWhitespace()
      guard position < bytes.count else { throw failure("unexpected end of data in tag <\(name)>") }
      switch bytes[position] {
      case UInt8(ascii: ">"):
        position += 1
        return isEnd ? .end(name) : .start(name, isEmpty: false)
      case UInt8(ascii: "/") where !isEnd:
        guard position + 1 < bytes.count, bytes[position + 1] == UInt8(ascii: ">") else {
          throw failure("malformed tag <\(name)>")
        }
        position += 2
        return .start(name, isEmpty: true)
      default:
        guard !isEnd else { throw failure("malformed end tag </\(name)>") }
        _ = try readName()
        skipWhitespace()
        guard position < bytes.count, bytes[position] == UInt8(ascii: "=") else {
          throw failure("malformed attribute in <\(name)>")
        }
        position += 1
        skipWhitespace()
        let quote = position < bytes.count ? bytes[position] : 0
        guard quote == UInt8(ascii: "\"") || quote == UInt8(ascii: "'") else {
          throw failure("unquoted attribute value in <\(name)>")
        }
        position += 1
        while position < bytes.count, bytes[position] != quote, bytes[position] != UInt8(ascii: "<") {
          position += 1
        }
        guard position < bytes.count, bytes[position] == quote else {
          throw failure("unterminated attribute value in <\(name)>")
        }
        position += 1
      }
    }
  }

  private mutating func readName() throws -> String {
    let start = position
    while position < bytes.count, position - start < 64, Self.isNameByte(bytes[position]) { position += 1 }
    guard position > start else { throw failure("malformed tag") }
    return String(decoding: bytes[start..<position], as: UTF8.self)
  }

  private static func isNameByte(_ byte: UInt8) -> Bool {
    switch byte {
    case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
      UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "_"), UInt8(ascii: "."),
      UInt8(ascii: ":"):
      return true
    default:
      return false
    }
  }

  private mutating func expectEndTag(_ name: String) throws {
    guard position < bytes.count else { throw failure("unexpected end of data, expected </\(name)>") }
    guard bytes[position] == UInt8(ascii: "<"), case .end(let found) = try readTag(), found == name else {
      throw failure("expected </\(name)>")
    }
  }

  /// Character data up to `</closing>`, with entities, character references and CDATA
  /// resolved and comments dropped. Any nested element is an error.
  private mutating func text(closing name: String) throws -> String {
    var out: [UInt8] = []
    while true {
      guard position < bytes.count else { throw failure("unexpected end of data in <\(name)>") }
      let byte = bytes[position]
      if byte == UInt8(ascii: "&") {
        try appendReference(to: &out)
      } else if byte != UInt8(ascii: "<") {
        out.append(byte)
        position += 1
      } else if startsHere("<![CDATA[") {
        position += 9
        let end = try find("]]>", what: "CDATA section")
        out.append(contentsOf: bytes[position..<end])
        position = end + 3
      } else if startsHere("<!--") {
        try skipComment()
      } else if startsHere("</") {
        try expectEndTag(name)
        // Input was validated as UTF-8 and cut only at ASCII bytes; references add whole scalars.
        return String(decoding: out, as: UTF8.self)
      } else {
        throw failure("unexpected markup inside <\(name)>")
      }
    }
  }

  private mutating func appendReference(to out: inout [UInt8]) throws {
    let ampersand = position
    position += 1
    let start = position
    while position < bytes.count, position - start < 12, bytes[position] != UInt8(ascii: ";") {
      position += 1
    }
    guard position < bytes.count, bytes[position] == UInt8(ascii: ";") else {
      position = ampersand
      throw failure("unterminated entity reference")
    }
    let name = String(decoding: bytes[start..<position], as: UTF8.self)
    position += 1
    let named: [String: UInt8] = ["amp": 0x26, "lt": 0x3C, "gt": 0x3E, "quot": 0x22, "apos": 0x27]
    if let byte = named[name] {
      out.append(byte)
      return
    }
    var code: UInt32?
    if name.hasPrefix("#x") || name.hasPrefix("#X") {
      code = UInt32(name.dropFirst(2), radix: 16)
    } else if name.hasPrefix("#") {
      code = UInt32(name.dropFirst(), radix: 10)
    }
    guard name.count > 1, let code, name.dropFirst().first != "+", let scalar = Unicode.Scalar(code) else {
      throw failure("unknown entity reference \(PropertyListError.quoted("&" + name + ";"))")
    }
    out.append(contentsOf: String(Character(scalar)).utf8)
  }

  /// Skips whitespace, comments and processing instructions, and a DOCTYPE when allowed.
  private mutating func skipMarkup(allowingDoctype: Bool) throws {
    while true {
      skipWhitespace()
      if startsHere("<!--") {
        try skipComment()
      } else if startsHere("<?") {
        position = try find("?>", what: "processing instruction") + 2
      } else if allowingDoctype, startsHere("<!DOCTYPE") {
        try skipDoctype()
      } else {
        return
      }
    }
  }

  private mutating func skipComment() throws {
    position += 4
    position = try find("-->", what: "comment") + 3
  }

  /// Skips `<!DOCTYPE ...>`, including a bracketed internal subset, without interpreting it.
  private mutating func skipDoctype() throws {
    var quote: UInt8?
    var inSubset = false
    while position < bytes.count {
      let byte = bytes[position]
      position += 1
      if let open = quote {
        if byte == open { quote = nil }
      } else if byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "'") {
        quote = byte
      } else if byte == UInt8(ascii: "[") {
        inSubset = true
      } else if byte == UInt8(ascii: "]") {
        inSubset = false
      } else if byte == UInt8(ascii: ">"), !inSubset {
        return
      }
    }
    throw failure("unterminated DOCTYPE")
  }

  private mutating func skipWhitespace() {
    while position < bytes.count, XMLScalars.isWhitespace(bytes[position]) { position += 1 }
  }

  private func startsHere(_ literal: StaticString) -> Bool {
    let count = literal.utf8CodeUnitCount
    guard bytes.count - position >= count else { return false }
    return literal.withUTF8Buffer { literalBytes in
      literalBytes.elementsEqual(bytes[position..<position + count])
    }
  }

  /// The index where `terminator` starts, at or after the current position.
  private func find(_ terminator: StaticString, what: String) throws -> Int {
    let pattern = terminator.withUTF8Buffer { Array($0) }
    var index = position
    while index + pattern.count <= bytes.count {
      if bytes[index] == pattern[0], bytes[index..<index + pattern.count].elementsEqual(pattern) {
        return index
      }
      index += 1
    }
    throw failure("unterminated \(what)")
  }

  // MARK: Errors

  private mutating func spendObject() throws {
    objectsLeft -= 1
    guard objectsLeft >= 0 else {
      throw PropertyListError(
        .tooManyObjects, "XML property list has more than \(maxObjects) objects at line \(line())")
    }
  }

  private func failure(_ what: String) -> PropertyListError {
    PropertyListError(.malformed, "malformed XML property list: \(what) at line \(line())")
  }

  private func line() -> Int {
    bytes[..<min(position, bytes.count)].reduce(1) { $1 == 0x0A ? $0 + 1 : $0 }
  }

  /// The line of the first byte that does not begin a valid UTF-8 sequence.
  private func invalidLine() -> Int {
    var good = 0
    var iterator = bytes.makeIterator()
    var decoder = UTF8()
    loop: while true {
      switch decoder.decode(&iterator) {
      case .scalarValue(let scalar): good += scalar.utf8.count
      case .emptyInput, .error: break loop
      }
    }
    return bytes[..<min(good, bytes.count)].reduce(1) { $1 == 0x0A ? $0 + 1 : $0 }
  }
}
