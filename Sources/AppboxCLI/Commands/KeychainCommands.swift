import AppboxContainer
import AppboxCore
import AppboxKeychain
import Foundation
import Glibc

struct KeychainCommand: CommandGroup {
  static let description = CommandDescription(
    name: "keychain", abstract: "Add, read, change and delete an app's keychain items.",
    discussion: """
      Items live outside the sandbox, encrypted under the device key. An app sees the items of its
      access groups: its entitlements' keychain-access-groups, then its application identifier.
      Each item has an accessibility class (add --accessible): when-unlocked items cannot be read or
      written while the device is locked (exit 69), after-first-unlock ones from the first unlock after
      a reboot on; when-passcode-set-this-device-only needs a passcode and is deleted when it is
      cleared. No item restores to another device.
      """,
    subcommands: [
      KeychainAdd.self, KeychainGet.self, KeychainUpdate.self, KeychainDelete.self, KeychainList.self,
      KeychainReset.self,
    ],
    groupPositionals: [appArgument])

  /// What every `keychain` subcommand can end in.
  static let exitCodes: [ExitCode] = [
    .noInput("No such app, or no such item among those the app can see."),
    .unavailable("The item is when-unlocked (or needs a passcode) and the device is locked."),
    .denied("The app's entitlements do not list that access group."),
  ]
}

// MARK: Shared options and output

private enum KeychainOptions {
  static let service = CommandDescription.Option(
    "service", value: "S", help: "The item's service (usually a bundle identifier).", required: true)
  static let account = CommandDescription.Option(
    "account", value: "A", help: "The item's account.", required: true)
  static let group = CommandDescription.Option(
    "group", value: "G", help: "Only this access group (default: every group the app can see).")
  static let addGroup = CommandDescription.Option(
    "group", value: "G", help: "The access group to add to (default: the app's first group).")
  static let data = CommandDescription.Option(
    "data", value: "D", help: "The secret, as text (it shows in the process list: prefer --data-file).")
  static let dataFile = CommandDescription.Option(
    "data-file", value: "F", help: "Read the secret from file F, or from standard input when F is '-'.")
  static let label = CommandDescription.Option("label", value: "L", help: "A label for people.")
  static let comment = CommandDescription.Option("comment", value: "C", help: "A comment.")
}

extension ParsedArguments {
  /// The APP before the keychain subcommand.
  fileprivate var app: String { groupPositionals.first ?? "" }

  /// A required `--name` (the parser has checked that it is there).
  fileprivate func required(_ name: String) throws -> String {
    guard let value = value(name) else { throw usage("missing --\(name)") }
    return value
  }

  /// The secret's source: `--data` or `--data-file`, never both; nil when neither is given.
  fileprivate func secretSource() throws -> SecretSource? {
    switch (value("data"), value("data-file")) {
    case (let text?, nil): return .text(text)
    case (nil, let path?): return .file(path)
    case (nil, nil): return nil
    default: throw usage("give the secret with --data or --data-file, not both")
    }
  }
}

/// Where a secret comes from. Read when the command runs, not while parsing.
private enum SecretSource: Sendable {
  case text(String)
  case file(String)

  /// The bytes, read in full (stdin for "-"), refusing more than an item can hold.
  func read() throws -> [UInt8] {
    let limit = Keychain.maximumDataByteCount
    do {
      switch self {
      case .text(let text): return Array(text.utf8)
      case .file("-"): return try FileDescriptor(rawValue: 0).readAll(limit: limit)
      case .file(let path):
        return try FileDescriptor.open(path, O_RDONLY).closeAfter { try $0.readAll(limit: limit) }
      }
    } catch let error as SystemError where error.errno == Errno(rawValue: EFBIG) {
      throw UsageError("the secret is larger than the \(limit) bytes an item can hold")
    }
  }
}

extension CommandContext {
  /// Runs `body` with the app and the device's keychain, holding the device session (and,
  /// when mutating, the device lock) until it returns.
  fileprivate func withKeychain<T>(
    of name: String, mutating: Bool, _ body: (AppRecord, Keychain) throws -> T
  ) throws -> T {
    let session = try openDevice(mutating: mutating)
    return try withExtendedLifetime(session) {
      try body(try mutating ? session.lockApp(name) : session.app(name), try session.openKeychain())
    }
  }
}

/// An item's attributes as JSON (never its data: `get` adds that itself).
private func attributes(_ item: KeychainItem) -> [(String, JSONValue)] {
  [
    ("class", .string(item.itemClass.rawValue)), ("service", .string(item.service)),
    ("account", .string(item.account)), ("accessGroup", .optional(item.accessGroup)),
    ("label", .optional(item.label)), ("comment", .optional(item.comment)),
    ("accessible", .string(item.accessibility.rawValue)),
    ("created", item.created.map { .string(timestamp($0)) } ?? .null),
    ("modified", item.modified.map { .string(timestamp($0)) } ?? .null),
  ]
}

// MARK: Subcommands

struct KeychainAdd: ParsableCommand {
  static let description = CommandDescription(
    name: "add",
    abstract:
      "Add an item (an existing one is a duplicate: exit 73; so is one beyond the app's quota of 1,000 items and 16 MiB).",
    options: [
      KeychainOptions.service, KeychainOptions.account, KeychainOptions.data, KeychainOptions.dataFile,
      .init("class", help: "The item's class (default: generic).", choices: ["generic", "internet"]),
      KeychainOptions.addGroup, KeychainOptions.label, KeychainOptions.comment,
      .init(
        "accessible", help: "When the item can be read (default: when-unlocked).",
        choices: KeychainAccessibility.allCases.map(\.rawValue)),
    ],
    examples: [
      .init(
        "Add a password from a file, then from standard input into the team's shared group:",
        "appbox keychain com.example.notes add --service sync --account ada --data-file token.txt",
        "printf %s \"$token\" | appbox keychain com.example.notes add --service sync --account ada "
          + "--group ABCDE12345.shared --data-file -")
    ],
    exitStatuses: KeychainCommand.exitCodes + [
      .cannotCreate(
        "An item with that class, service and account exists in the group, or the app's quota is full."),
      .appBusy,
    ])
  let app: String
  let item: KeychainItem
  fileprivate let secret: SecretSource

  init(_ arguments: ParsedArguments) throws {
    app = arguments.app
    guard let secret = try arguments.secretSource() else {
      throw arguments.usage("missing --data or --data-file")
    }
    self.secret = secret
    item = KeychainItem(
      itemClass: KeychainItemClass(rawValue: arguments.value("class") ?? "generic") ?? .generic,
      service: try arguments.required("service"), account: try arguments.required("account"),
      accessGroup: arguments.value("group"), label: arguments.value("label"),
      comment: arguments.value("comment"),
      accessibility: arguments.value("accessible").flatMap(KeychainAccessibility.init(rawValue:))
        ?? .whenUnlocked)
  }

  func run(_ context: CommandContext) throws -> CommandOutput {
    var item = self.item
    item.data = try secret.read()  // before taking the device lock: stdin may be slow
    let (record, added) = try context.withKeychain(of: app, mutating: true) { record, keychain in
      (record, try keychain.add(item, for: record.keychainClient))
    }
    return CommandOutput(
      text: "Added \(added.summary) for \(record.bundleIdentifier)", json: .object(attributes(added)))
  }
}

struct KeychainGet: ParsableCommand {
  static let description = CommandDescription(
    name: "get", abstract: "Print an item's data as stored (with --json: attributes and base64 data).",
    options: [KeychainOptions.service, KeychainOptions.account, KeychainOptions.group],
    examples: [
      .init(
        "Print a secret, then its attributes and data as JSON:",
        "appbox keychain com.example.notes get --service sync --account ada",
        "appbox --json keychain com.example.notes get --service sync --account ada")
    ],
    exitStatuses: KeychainCommand.exitCodes)
  let app: String
  let query: KeychainQuery

  init(_ arguments: ParsedArguments) throws {
    app = arguments.app
    query = KeychainQuery(
      service: try arguments.required("service"), account: try arguments.required("account"),
      accessGroup: arguments.value("group"), limit: .one, returnsData: true)
  }

  func run(_ context: CommandContext) throws -> CommandOutput {
    let item = try context.withKeychain(of: app, mutating: false) { record, keychain in
      try keychain.find(query, for: record.keychainClient)[0]
    }
    let data = item.data ?? []
    return CommandOutput(
      json: .object(attributes(item) + [("data", .string(Data(data).base64EncodedString()))]), raw: data)
  }
}

struct KeychainUpdate: ParsableCommand {
  static let description = CommandDescription(
    name: "update",
    abstract: "Change an item's data, comment or label (in every group of the app that has it).",
    options: [
      KeychainOptions.service, KeychainOptions.account, KeychainOptions.data, KeychainOptions.dataFile,
      KeychainOptions.comment, KeychainOptions.label,
    ],
    examples: [
      .init(
        "Replace a secret from a file, then change only the label:",
        "appbox keychain com.example.notes update --service sync --account ada --data-file new.txt",
        "appbox keychain com.example.notes update --service sync --account ada --label \"Sync token\"")
    ],
    exitStatuses: KeychainCommand.exitCodes + [.appBusy])
  let app: String
  let query: KeychainQuery
  let label: String?
  let comment: String?
  fileprivate let secret: SecretSource?

  init(_ arguments: ParsedArguments) throws {
    app = arguments.app
    query = KeychainQuery(
      service: try arguments.required("service"), account: try arguments.required("account"))
    secret = try arguments.secretSource()
    label = arguments.value("label")
    comment = arguments.value("comment")
    if secret == nil && label == nil && comment == nil {
      throw arguments.usage("nothing to update: give --data, --data-file, --comment or --label")
    }
  }

  func run(_ context: CommandContext) throws -> CommandOutput {
    let changes = KeychainChanges(data: try secret?.read(), label: label, comment: comment)
    let (record, count) = try context.withKeychain(of: app, mutating: true) { record, keychain in
      (record, try keychain.update(query, changes: changes, for: record.keychainClient))
    }
    return CommandOutput(
      text: "Updated \(count) keychain item\(count == 1 ? "" : "s") of \(record.bundleIdentifier)",
      json: .object([("updated", .int(count))]))
  }
}

struct KeychainDelete: ParsableCommand {
  static let description = CommandDescription(
    name: "delete", abstract: "Delete an item (in every group of the app that has it, unless --group).",
    options: [KeychainOptions.service, KeychainOptions.account, KeychainOptions.group],
    examples: [
      .init("Delete an item:", "appbox keychain com.example.notes delete --service sync --account ada")
    ],
    exitStatuses: KeychainCommand.exitCodes + [.appBusy])
  let app: String
  let query: KeychainQuery

  init(_ arguments: ParsedArguments) throws {
    app = arguments.app
    query = KeychainQuery(
      service: try arguments.required("service"), account: try arguments.required("account"),
      accessGroup: arguments.value("group"))
  }

  func run(_ context: CommandContext) throws -> CommandOutput {
    let (record, count) = try context.withKeychain(of: app, mutating: true) { record, keychain in
      (record, try keychain.delete(query, for: record.keychainClient))
    }
    return CommandOutput(
      text: "Deleted \(count) keychain item\(count == 1 ? "" : "s") of \(record.bundleIdentifier)",
      json: .object([("deleted", .int(count))]))
  }
}

struct KeychainList: ParsableCommand {
  static let description = CommandDescription(
    name: "list", abstract: "List the items the app can see: attributes only, never secrets.",
    examples: [.init("The items an app can see:", "appbox keychain com.example.notes list")],
    exitStatuses: [.noApp])
  let app: String
  init(_ arguments: ParsedArguments) throws { app = arguments.app }

  func run(_ context: CommandContext) throws -> CommandOutput {
    let (record, items) = try context.withKeychain(of: app, mutating: false) { record, keychain in
      (record, try keychain.items(for: record.keychainClient))
    }
    let text =
      items.isEmpty
      ? "No keychain items for \(record.bundleIdentifier)."
      : table(
        ["CLASS", "SERVICE", "ACCOUNT", "GROUP", "ACCESSIBLE", "LABEL", "MODIFIED"],
        items.map {
          [
            $0.itemClass.rawValue, $0.service, $0.account, $0.accessGroup ?? "", $0.accessibility.rawValue,
            $0.label ?? "", $0.modified.map(timestamp) ?? "",
          ]
        })
    return CommandOutput(text: text, json: .array(items.map { .object(attributes($0)) }))
  }
}

struct KeychainReset: ParsableCommand {
  static let description = CommandDescription(
    name: "reset",
    abstract: "Delete every item only this app can see (items of groups another installed app lists stay).",
    examples: [.init("Start the app's keychain afresh:", "appbox keychain com.example.notes reset")],
    exitStatuses: [.noApp, .appBusy])
  let app: String
  init(_ arguments: ParsedArguments) throws { app = arguments.app }

  func run(_ context: CommandContext) throws -> CommandOutput {
    let session = try context.openDevice(mutating: true)
    let record = try session.lockApp(app)
    let count = try session.deleteKeychainItems(of: record)
    return CommandOutput(
      text:
        "Deleted \(count) keychain item\(count == 1 ? "" : "s") only \(record.bundleIdentifier) could see",
      json: .object([("deleted", .int(count))]))
  }
}
