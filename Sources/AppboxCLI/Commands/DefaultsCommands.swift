import AppboxContainer
import AppboxCore
import AppboxPlist
import Foundation

struct DefaultsCommand: CommandGroup {
  static let description = CommandDescription(
    name: "defaults",
    abstract: "Read and change an app's preferences (Library/Preferences/<bundle-id>.plist).",
    discussion: """
      With --suite group.<id>, the app group's shared defaults instead: Library/Preferences/<group-id>.plist
      in the group's container, which every member app reads and writes. Keys are case-sensitive. Dates are ISO 8601 in UTC (2024-01-02T03:04:05Z); data is base64, in and
      out. The file is written as a binary property list, atomically. A preferences file that is not a
      property-list dictionary is bad data (exit 65); one the app replaced by a symbolic link is refused
      (exit 77).
      """,
    subcommands: [DefaultsRead.self, DefaultsWrite.self, DefaultsDelete.self], groupPositionals: [appArgument]
  )

  /// What every `defaults` subcommand can end in.
  static let exitCodes: [ExitCode] = [
    .dataError("The preferences file is not a property-list dictionary."),
    .denied("The file is a symbolic link the app planted, or the app is not a member of the --suite group."),
  ]
}

struct DefaultsRead: ParsableCommand {
  static let description = CommandDescription(
    name: "read", abstract: "Print one preference, or all of them as 'key = value' lines.",
    positionals: [.init("KEY", help: "The preference to print (missing: exit 66).", optional: true)],
    options: [suiteOption],
    examples: [
      .init(
        "Every preference, then one:", "appbox defaults com.example.notes read",
        "appbox defaults com.example.notes read launchCount"),
      .init(
        "An app group's shared defaults:",
        "appbox defaults com.example.notes read --suite group.com.example.shared"),
    ],
    exitStatuses: DefaultsCommand.exitCodes + [
      .noInput("No such app, or no such preference."), .protectedData,
    ])
  let app: String
  let key: String?
  let suite: String?
  init(_ arguments: ParsedArguments) throws {
    app = arguments.groupPositionals[0]
    key = arguments.positional(0)
    suite = try suiteName(arguments)
  }

  func run(_ context: CommandContext) throws -> CommandOutput {
    let session = try context.openDevice(mutating: false)
    let preferences = try session.defaultsPreferences(of: try session.app(app), suite: suite, locking: false)
    if let key {
      let value = try preferences.value(forKey: key)
      return CommandOutput(
        text: Terminal.sanitize(render(value, nested: false)),
        json: .object([("key", .string(key)), ("type", .string(typeName(value))), ("value", json(value))]))
    }
    let dictionary = try preferences.dictionary()
    let keys = dictionary.keys.sorted { $0.unicodeScalars.lexicographicallyPrecedes($1.unicodeScalars) }
    return CommandOutput(
      text: keys.map { "\(Terminal.escape($0)) = \(render(dictionary[$0]!, nested: true))" }.joined(
        separator: "\n"),
      json: json(.dictionary(dictionary)))
  }
}

struct DefaultsWrite: ParsableCommand {
  static let description = CommandDescription(
    name: "write", abstract: "Set a preference.",
    positionals: [
      .init("KEY", help: "The preference to set."), .init("VALUE", help: "Its value, as --type says."),
    ],
    options: [
      .init(
        "type", help: "How to read VALUE (default: string).", choices: PreferenceType.allCases.map(\.rawValue)
      ),
      suiteOption,
    ],
    examples: [
      .init(
        "Set a number, then a string in the app group's shared defaults:",
        "appbox defaults com.example.notes write launchCount 3 --type int",
        "appbox defaults com.example.notes write theme dark --suite group.com.example.shared")
    ],
    exitStatuses: DefaultsCommand.exitCodes + [.noApp, .protectedData, .appBusy])
  let app: String
  let key: String
  let text: String
  let type: PreferenceType
  let suite: String?
  init(_ arguments: ParsedArguments) throws {
    app = arguments.groupPositionals[0]
    key = arguments.positional(0)!
    text = arguments.positional(1)!
    type = arguments.value("type").flatMap(PreferenceType.init(rawValue:)) ?? .string
    suite = try suiteName(arguments)
  }

  func run(_ context: CommandContext) throws -> CommandOutput {
    let value = try type.value(parsing: text)
    let session = try context.openDevice(mutating: true)
    let preferences = try session.defaultsPreferences(
      of: try session.lockApp(app), suite: suite, locking: true)
    try preferences.set(value, forKey: key)
    return CommandOutput(
      text: "Set \(Terminal.escape(key)) = \(render(value, nested: true)) in \(preferences.relativePath)",
      json: .object([("key", .string(key)), ("type", .string(typeName(value))), ("value", json(value))]))
  }
}

struct DefaultsDelete: ParsableCommand {
  static let description = CommandDescription(
    name: "delete", abstract: "Remove a preference (missing: exit 66).",
    positionals: [.init("KEY", help: "The preference to remove.")], options: [suiteOption],
    examples: [.init("Remove a preference:", "appbox defaults com.example.notes delete launchCount")],
    exitStatuses: DefaultsCommand.exitCodes + [
      .noInput("No such app, or no such preference."), .protectedData, .appBusy,
    ])
  let app: String
  let key: String
  let suite: String?
  init(_ arguments: ParsedArguments) throws {
    app = arguments.groupPositionals[0]
    key = arguments.positional(0)!
    suite = try suiteName(arguments)
  }

  func run(_ context: CommandContext) throws -> CommandOutput {
    let session = try context.openDevice(mutating: true)
    let preferences = try session.defaultsPreferences(
      of: try session.lockApp(app), suite: suite, locking: true)
    try preferences.removeValue(forKey: key)
    return CommandOutput(
      text: "Deleted \(Terminal.escape(key)) from \(preferences.relativePath)",
      json: .object([("key", .string(key)), ("deleted", .bool(true))]))
  }
}

/// The `--suite` value, checked to be a group identifier (usage error otherwise).
private func suiteName(_ arguments: ParsedArguments) throws -> String? {
  guard let suite = arguments.value("suite") else { return nil }
  guard AppGroupIdentifier.isValid(suite) else {
    throw arguments.usage("--suite takes an app group identifier (group.<reverse-DNS name>), not '\(suite)'")
  }
  return suite
}

/// The `--type` name of a value ("array" and "dictionary" for containers).
private func typeName(_ value: PropertyList) -> String {
  switch value {
  case .string: return "string"
  case .integer, .unsignedInteger: return "int"
  case .real: return "float"
  case .bool: return "bool"
  case .date: return "date"
  case .data: return "data"
  case .array: return "array"
  case .dictionary: return "dictionary"
  }
}

/// A value as text: strings as they are at the top level (quoted inside containers or
/// when they would be ambiguous), dates ISO 8601, data base64, arrays `(a, b)` and
/// dictionaries `{k = v; ...}`.
private func render(_ value: PropertyList, nested: Bool) -> String {
  switch value {
  case .string(let text):
    let plain = text.unicodeScalars.allSatisfy {
      CharacterSet.alphanumerics.contains($0) || "._/:@+-".unicodeScalars.contains($0)
    }
    return !nested || (plain && !text.isEmpty) ? text : Terminal.sanitize(JSONValue.string(text).serialized())
  case .integer(let number): return String(number)
  case .unsignedInteger(let number): return String(number)
  case .real(let number): return String(number)
  case .bool(let flag): return flag ? "true" : "false"
  case .date(let date): return timestamp(date)
  case .data(let data): return data.base64EncodedString()
  case .array(let items): return "(" + items.map { render($0, nested: true) }.joined(separator: ", ") + ")"
  case .dictionary(let members):
    let keys = members.keys.sorted { $0.unicodeScalars.lexicographicallyPrecedes($1.unicodeScalars) }
    return "{"
      + keys.map { "\(render(.string($0), nested: true)) = \(render(members[$0]!, nested: true))" }
      .joined(separator: "; ") + "}"
  }
}

/// A value as JSON: dates ISO 8601, data base64.
private func json(_ value: PropertyList) -> JSONValue {
  switch value {
  case .string(let text): return .string(text)
  case .integer(let number): return .integer(number)
  case .unsignedInteger(let number): return .unsignedInteger(number)
  case .real(let number): return .number(number)
  case .bool(let flag): return .bool(flag)
  case .date(let date): return .string(timestamp(date))
  case .data(let data): return .string(data.base64EncodedString())
  case .array(let items): return .array(items.map(json))
  case .dictionary(let members):
    let keys = members.keys.sorted { $0.unicodeScalars.lexicographicallyPrecedes($1.unicodeScalars) }
    return .object(keys.map { ($0, json(members[$0]!)) })
  }
}
