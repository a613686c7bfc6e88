import AppboxTestSupport
import Foundation

// docs/json.md read as the contract: each `### name` heading (several names joined by " · ")
// opens a section, and the rows of the table under it (`| `field` | type | meaning |`) are
// that section's fields. A document is checked against a section field by field; what it
// printed is remembered, so that fields documented but never printed can be found too.

/// A JSON value decoded strictly: true/false are never numbers, 1.5 is never an integer.
indirect enum JSON: Decodable, Equatable {
  case null
  case bool(Bool)
  case integer(Int64)
  case number(Double)
  case string(String)
  case array([JSON])
  case object([String: JSON])

  init(from decoder: Decoder) throws {
    let container = try decoder.singleValueContainer()
    if container.decodeNil() {
      self = .null
    } else if let value = try? container.decode(Bool.self) {
      self = .bool(value)
    } else if let value = try? container.decode(Int64.self) {
      self = .integer(value)
    } else if let value = try? container.decode(Double.self) {
      self = .number(value)
    } else if let value = try? container.decode(String.self) {
      self = .string(value)
    } else if let value = try? container.decode([JSON].self) {
      self = .array(value)
    } else {
      self = .object(try container.decode([String: JSON].self))
    }
  }

  /// The one document `bytes` holds, or nil when it is not exactly one JSON document.
  static func document(_ bytes: [UInt8]) -> JSON? { try? JSONDecoder().decode(JSON.self, from: Data(bytes)) }

  subscript(key: String) -> JSON? {
    if case .object(let members) = self { return members[key] }
    return nil
  }
  var string: String? {
    if case .string(let value) = self { return value }
    return nil
  }
  var elements: [JSON] {
    if case .array(let items) = self { return items }
    return []
  }
}

/// One row of a field table.
struct ContractField {
  indirect enum Kind: Equatable {
    case string, integer, number, boolean, object, any
    case array(of: Kind)
  }
  var path: String
  var kind: Kind
  var nullable: Bool
  var optional: Bool

  /// The path of the object this field is a member of ("" for the document, "[]" for the
  /// elements of a document that is an array, "a[]" for those of the array `a`).
  var parent: String {
    guard let dot = path.lastIndex(of: ".") else { return path.hasPrefix("[]") ? "[]" : "" }
    return String(path[..<dot])
  }
  var name: String { String(path.split(separator: ".").last ?? "") }

  /// "string", "integer or null", "array of strings (optional)", "object or null".
  init?(path: String, type text: String) {
    self.path = path
    var type = text.trimmingCharacters(in: .whitespaces)
    optional = type.hasSuffix("(optional)")
    if optional { type = String(type.dropLast("(optional)".count)).trimmingCharacters(in: .whitespaces) }
    nullable = type.hasSuffix(" or null")
    if nullable { type = String(type.dropLast(" or null".count)) }
    func base(_ word: String) -> Kind? {
      switch word {
      case "string", "strings": return .string
      case "integer", "integers": return .integer
      case "number", "numbers": return .number
      case "boolean", "booleans": return .boolean
      case "object", "objects": return .object
      case "any": return .any
      default: return nil
      }
    }
    if type.hasPrefix("array of ") {
      guard let element = base(String(type.dropFirst("array of ".count))) else { return nil }
      kind = .array(of: element)
    } else {
      guard let single = base(type) else { return nil }
      kind = single
    }
  }

  func accepts(_ value: JSON) -> Bool {
    if value == .null { return nullable }
    return Self.matches(value, kind)
  }

  static func matches(_ value: JSON, _ kind: Kind) -> Bool {
    switch (kind, value) {
    case (.any, _), (.string, .string), (.integer, .integer), (.boolean, .bool), (.object, .object):
      return true
    case (.number, .number), (.number, .integer): return true
    case (.array(let element), .array(let items)): return items.allSatisfy { matches($0, element) }
    default: return false
    }
  }
}

/// The tables of docs/json.md: each under its heading ("files push · files pull"), and the
/// heading each command name is found under.
struct JSONContract {
  var tables: [String: [ContractField]] = [:]
  var headingOf: [String: String] = [:]
  var malformedRows: [String] = []

  init(markdown: String) {
    var heading: String?
    for line in markdown.split(separator: "\n", omittingEmptySubsequences: false) {
      if line.hasPrefix("### ") {
        let text = String(line.dropFirst(4))
        heading = text
        tables[text] = tables[text] ?? []
        for name in text.components(separatedBy: " · ") {
          headingOf[name.trimmingCharacters(in: CharacterSet(charactersIn: " `"))] = text
        }
        continue
      }
      if line.hasPrefix("## ") { heading = nil }
      guard let heading, line.hasPrefix("| `") else { continue }
      let cells = line.split(separator: "|", omittingEmptySubsequences: false).map {
        $0.trimmingCharacters(in: .whitespaces)
      }
      guard cells.count >= 4,
        let field = ContractField(path: cells[1].trimmingCharacters(in: ["`"]), type: cells[2])
      else {
        malformedRows.append(String(line))
        continue
      }
      tables[heading]!.append(field)
    }
  }

  static func load() throws -> JSONContract {
    JSONContract(markdown: try String(contentsOfFile: repositoryRoot + "/docs/json.md", encoding: .utf8))
  }
}

/// Checks documents against a section, keeping which fields were printed.
struct ContractCheck {
  let section: String
  let fields: [ContractField]
  var printed: Set<String> = []
  var problems: [String] = []

  init(section: String, fields: [ContractField]) {
    self.section = section
    self.fields = fields
  }

  mutating func check(_ document: JSON, context: String) {
    switch document {
    case .array(let items): for item in items { visit(item, at: "[]", context: context) }
    default: visit(document, at: "", context: context)
    }
  }

  /// The members of the object at `path` (or the elements of a document that is an array).
  private mutating func visit(_ value: JSON, at path: String, context: String) {
    guard case .object(let members) = value else {
      problems.append("\(section) \(context): \(path.isEmpty ? "the document" : path) is not an object")
      return
    }
    let children = fields.filter { $0.parent == path }
    for (key, member) in members {
      let full = path.isEmpty ? key : path + "." + key
      let dotted = path == "[]" ? "[]." + key : full
      guard
        let field = children.first(where: { $0.path == dotted }) ?? children.first(where: { $0.name == "*" })
      else {
        problems.append("\(section) \(context): prints \(dotted), which docs/json.md does not list")
        continue
      }
      printed.insert(field.path)
      guard field.accepts(member) else {
        problems.append("\(section) \(context): \(dotted) is \(member), not \(field.kind)")
        continue
      }
      switch (field.kind, member) {
      case (.object, .object): visit(member, at: field.path, context: context)
      case (.array(of: .object), .array(let items)):
        for item in items { visit(item, at: field.path + "[]", context: context) }
      default: break
      }
    }
    for field in children where !field.optional && field.name != "*" && members[field.name] == nil {
      problems.append(
        "\(section) \(context): \(field.path) is missing (docs/json.md says it is always there)")
    }
  }

  /// Documented fields no checked document printed.
  var neverPrinted: [String] { fields.map(\.path).filter { !printed.contains($0) } }
}
