import AppboxContainer
import AppboxCore
import Foundation

struct InstallCommand: ParsableCommand {
  static let description = CommandDescription(
    name: "install",
    abstract:
      "Validate and seal a bundle, and install it into a new home (creating the device if the root has none).",
    positionals: [.init("BUNDLE.app", help: "The app bundle directory to install.")],
    examples: [
      .init("Install an app and print its container id and home:", "appbox install Notes.app"),
      .init("Install into another device root:", "appbox --root /tmp/ci-device install Notes.app"),
    ],
    exitStatuses: [
      .dataError(
        "The bundle is invalid (Info.plist, entitlements, a seal a file no longer matches) or needs a device "
          + "capability this device lacks."),
      .noInput("No such bundle directory."),
      .cannotCreate("The app is installed already (appbox update replaces it)."),
      .deviceBusy,
    ])
  let bundle: String
  static let createsDevice = true
  init(_ arguments: ParsedArguments) throws { bundle = arguments.positional(0)! }

  func run(_ context: CommandContext) throws -> CommandOutput {
    let session = try context.openDevice(mutating: true, creating: true)
    // An offloaded app of another version goes through the update path (Lifecycle/Offload.swift).
    let result = try session.install(
      bundleAt: bundle,
      updatingOffloaded: { offloaded in
        try session.update(offloaded, toBundleAt: bundle, allowDowngrade: false) { app in
          try context.preUpdateSnapshot(of: app, in: session)
        }
      })
    if let report = result.update {
      for warning in report.warnings { context.warn(warning) }
      return CommandOutput(
        text: updateText(report, verb: "Installed over offloaded"),
        json: .object([
          ("app", .string(report.bundleIdentifier)),
          ("containerID", .string(report.newContainerID)),
          ("home", .string(report.newHome)), ("version", .string(report.newVersion)),
          ("reinstalled", .bool(false)),
          ("update", updateJSON(report)),
        ]))
    }
    let app = result.app
    let groups = try session.groups(of: app).map {
      "\($0.identifier) (\(result.createdGroups.contains($0.identifier) ? "created" : "joined"))"
    }
    return CommandOutput(
      text: """
        \(result.reinstalled ? "Reinstalled" : "Installed") \(app.bundleIdentifier) \(app.version) (\(app.bundleDirectoryName))\
        \(result.reinstalled ? " into its home: the offloaded app's data is kept" : "")
          container  \(app.containerID)
          home       \(result.home)
        """ + (groups.isEmpty ? "" : "\n  groups     " + groups.joined(separator: ", ")),
      json: .object(
        [
          ("app", .string(app.bundleIdentifier)), ("containerID", .string(app.containerID)),
          ("home", .string(result.home)), ("version", .string(app.version)),
        ] + (result.reinstalled ? [("reinstalled", JSONValue.bool(true))] : [])))
  }
}

struct ListCommand: ParsableCommand {
  static let description = CommandDescription(
    name: "list", abstract: "List installed apps.",
    options: [.init("groups", help: "List app group containers with their team and members instead.")],
    examples: [
      .init("The installed apps, then the app groups:", "appbox list", "appbox list --groups"),
      .init(
        "The bundle identifiers alone, for a script:", "appbox --json list | jq -r '.[].app'"),
    ])
  let groups: Bool
  init(_ arguments: ParsedArguments) throws { groups = arguments.flag("groups") }

  func run(_ context: CommandContext) throws -> CommandOutput {
    let session = try context.openDevice(mutating: false)
    if groups { return groupList(try session.registry.groups(), root: session.root) }
    let apps = try session.registry.apps()
    let text =
      apps.isEmpty
      ? "No apps installed."
      : table(
        ["BUNDLE ID", "VERSION", "CONTAINER ID"],
        apps.map {
          [$0.bundleIdentifier, $0.version + ($0.isOffloaded ? " (offloaded)" : ""), $0.containerID]
        })
    return CommandOutput(
      text: text,
      json: .array(
        apps.map { app in
          .object(
            [
              ("app", .string(app.bundleIdentifier)), ("containerID", .string(app.containerID)),
              ("version", .string(app.version)),
            ] + (app.isOffloaded ? [("offloaded", JSONValue.bool(true))] : []))
        }))
  }
}

struct InspectCommand: ParsableCommand {
  static let description = CommandDescription(
    name: "inspect",
    abstract:
      "Show an app's home, version, seal, each standard directory's files, bytes and backup policy, and the backup advisor's top finding.",
    positionals: [appArgument],
    examples: [
      .init("An app's home, seal and backup policy:", "appbox inspect com.example.notes"),
      .init(
        "Whether its seal holds, for a script:", "appbox --json inspect com.example.notes | jq .seal.valid"),
    ],
    exitStatuses: [.noApp])
  let app: String
  init(_ arguments: ParsedArguments) throws { app = arguments.positional(0)! }

  func run(_ context: CommandContext) throws -> CommandOutput {
    let session = try context.openDevice(mutating: false)
    let report = try session.inspect(try session.app(app))
    let record = report.app
    var lines = [
      "\(record.bundleIdentifier) (\(record.displayName)) version \(record.version)"
        + (record.shortVersion.map { " (\($0))" } ?? ""),
      "  container     \(record.containerID)",
      "  home          \(report.home)",
      "  bundle        \(record.bundleDirectoryName)",
      "  installed     \(timestamp(record.installedAt))",
      "  seal          " + (record.isOffloaded ? "none: the bundle is offloaded" : report.seal.summary),
      "  file sharing  \(record.fileSharingEnabled ? "enabled" : "disabled")",
    ]
    if let updated = record.updatedAt { lines.insert("  updated       \(timestamp(updated))", at: 5) }
    if let offloaded = record.offloadedAt {
      lines.insert("  offloaded     \(timestamp(offloaded)) (install the bundle again to launch it)", at: 4)
    }
    let crash = session.crashes(of: record).first
    if let crash {
      lines.append(
        "  last crash    \(crash.signalName) at \(timestamp(crash.time)), exit status \(crash.exitStatus) "
          + "(appbox logs \(record.bundleIdentifier) --launch \(crash.launchID))")
    }
    if let team = record.teamIdentifier { lines.append("  team          \(team)") }
    if !record.keychainAccessGroups.isEmpty {
      lines.append("  keychain      \(record.keychainAccessGroups.joined(separator: ", "))")
    }
    // Best effort: a keychain that cannot be opened does not stop the rest of the report.
    let keychainUsage = try? session.keychainUsage(of: record)
    if let usage = keychainUsage {
      lines.append(
        "  keychain use  \(usage.items) of \(usage.quota.items) items, \(byteCount(usage.bytes)) of "
          + "\(byteCount(usage.quota.bytes))")
    }
    for (index, usage) in report.groups.enumerated() {
      lines.append(
        (index == 0 ? "  app groups    " : "                ")
          + "\(usage.group.identifier)  \(usage.files) files, \(byteCount(usage.bytes)) "
          + "(\(byteCount(usage.backedUpBytes)) backed up)  \(usage.path)")
    }
    let advice = context.topAdvice(for: record)
    lines.append("  advice        \(advice.line)")
    lines.append("")
    lines.append(
      table(
        ["LOCATION", "FILES", "BYTES", "EXCLUDED", "BACKUP"],
        report.locations.map {
          [$0.name, String($0.files), byteCount($0.bytes), String($0.excludedItems), $0.policy]
        }))
    var seal: [(String, JSONValue)] = [("valid", .bool(report.seal.isValid))]
    if case .broken(let path, let reason) = report.seal {
      seal += [("path", .string(path)), ("reason", .string(reason))]
    }
    return CommandOutput(
      text: lines.joined(separator: "\n"),
      json: .object([
        ("app", .string(record.bundleIdentifier)), ("containerID", .string(record.containerID)),
        ("version", .string(record.version)), ("shortVersion", .optional(record.shortVersion)),
        ("name", .string(record.displayName)), ("home", .string(report.home)),
        ("bundle", .string(record.bundleDirectoryName)),
        ("installedAt", .string(timestamp(record.installedAt))),
        ("updatedAt", record.updatedAt.map { .string(timestamp($0)) } ?? .null),
        ("fileSharingEnabled", .bool(record.fileSharingEnabled)),
        ("teamIdentifier", .optional(record.teamIdentifier)),
        ("keychainAccessGroups", .array(record.keychainAccessGroups.map(JSONValue.string))),
        (
          "keychainUsage",
          keychainUsage.map { usage in
            .object([
              ("items", .int(usage.items)), ("bytes", .int(usage.bytes)),
              ("maximumItems", .int(usage.quota.items)), ("maximumBytes", .int(usage.quota.bytes)),
            ])
          } ?? .null
        ),
        (
          "groups",
          .array(
            report.groups.map { usage in
              .object([
                ("group", .string(usage.group.identifier)),
                ("containerID", .string(usage.group.containerID)), ("path", .string(usage.path)),
                ("files", .int(usage.files)), ("bytes", .int(usage.bytes)),
                ("backedUpBytes", .int(usage.backedUpBytes)),
              ])
            })
        ),
        ("seal", .object(seal)),
        ("offloadedAt", record.offloadedAt.map { .string(timestamp($0)) } ?? .null),
        ("lastCrash", crash.map(crashJSON) ?? .null),
        ("advice", advice.finding.map(findingJSON) ?? .null),
        (
          "locations",
          .array(
            report.locations.map { location in
              .object([
                ("name", .string(location.name)), ("files", .int(location.files)),
                ("bytes", .int(location.bytes)),
                ("backedUp", .bool(location.backedUp)), ("policy", .string(location.policy)),
                ("excludedItems", .int(location.excludedItems)),
              ])
            })
        ),
      ]))
  }
}

struct PathCommand: ParsableCommand {
  static let description = CommandDescription(
    name: "path", abstract: "Print one absolute path of an app's home.",
    positionals: [
      appArgument,
      .init(
        "LOCATION",
        help:
          "bundle, data (the home; the default), documents, library, preferences, caches or tmp; or "
          + "group.<id>: the container of an app group the app is a member of (else exit 77).",
        optional: true),
    ],
    examples: [
      .init(
        "The home, then its Documents folder:", "appbox path com.example.notes",
        "appbox path com.example.notes documents"),
      .init(
        "The container of an app group the app is a member of:",
        "appbox path com.example.notes group.com.example.shared"),
    ],
    exitStatuses: [.noApp, .denied("The app is not a member of that app group.")])
  let app: String
  let location: HomeLocation
  let group: String?

  init(_ arguments: ParsedArguments) throws {
    app = arguments.positional(0)!
    let name = arguments.positional(1) ?? "data"
    group = namesGroup(name) ? name : nil
    if group != nil {
      location = .data
      return
    }
    guard let location = HomeLocation(rawValue: name) else {
      throw arguments.usage(
        "unknown location '\(name)' (expected one of: \(HomeLocation.allCases.map(\.rawValue).joined(separator: ", ")))"
      )
    }
    self.location = location
  }

  func run(_ context: CommandContext) throws -> CommandOutput {
    let session = try context.openDevice(mutating: false)
    let record = try session.app(app)
    if let group {
      let path = session.root.groupContainer(try session.group(group, usedBy: record).containerID)
      return CommandOutput(
        text: path, json: .object([("path", .string(path)), ("location", .string(group))]))
    }
    let path = session.home(of: record).path(of: location)
    return CommandOutput(
      text: path, json: .object([("path", .string(path)), ("location", .string(location.rawValue))]))
  }
}

struct UninstallCommand: ParsableCommand {
  static let description = CommandDescription(
    name: "uninstall", abstract: "Remove an app: its home, its registry entry and its keychain items.",
    positionals: [appArgument], options: [terminateOption],
    examples: [
      .init("Remove an app (its snapshots stay in the repository):", "appbox uninstall com.example.notes")
    ],
    exitStatuses: [.noApp, appRunning])
  let app: String
  let terminate: Bool
  init(_ arguments: ParsedArguments) throws {
    app = arguments.positional(0)!
    terminate = arguments.flag("terminate")
  }

  func run(_ context: CommandContext) throws -> CommandOutput {
    let session = try context.openDevice(mutating: true)
    let record = try session.lockApp(app)
    try context.terminateIfAsked(session, record, terminate)
    for warning in try session.uninstall(record) { context.warn(warning) }
    return CommandOutput(
      text: "Uninstalled \(record.bundleIdentifier) (container \(record.containerID))",
      json: .object([
        ("app", .string(record.bundleIdentifier)), ("containerID", .string(record.containerID)),
        ("uninstalled", .bool(true)),
      ]))
  }
}
