import AppboxContainer
import AppboxCore
import Foundation
import Glibc

// `reset`, `offload` and `device erase`: an app or a device back to an earlier state, all or
// nothing (docs/lifecycle.md). Each refuses a running app with 75 unless --terminate.

/// `--terminate`, as the commands that change a running app's home take it.
let terminateOption = CommandDescription.Option(
  "terminate",
  help: "If the app runs (in the foreground or detached), terminate it first (SIGTERM, then SIGKILL after 5 "
    + "seconds), instead of exiting 75.")

/// What a command that refuses running apps can end in.
let appRunning = ExitCode.busy(
  "The app runs (give --terminate to end it first), or another appbox holds its or the device's lock.")

extension CommandContext {
  /// With `terminate`, ends every run of `app` first and says so on stderr.
  func terminateIfAsked(_ session: DeviceSession, _ app: AppRecord, _ terminate: Bool) throws {
    guard terminate else { return }
    let report = try session.terminate(app)
    if !report.runs.isEmpty {
      note(
        "Terminated \(app.bundleIdentifier) (\(report.runs.count) run\(report.runs.count == 1 ? "" : "s")"
          + (report.killed ? ", killed after the grace period" : "") + ")")
    }
  }
}

struct ResetCommand: ParsableCommand {
  static let description = CommandDescription(
    name: "reset",
    abstract: "Empty an app's Documents, Library and tmp, keeping its bundle, container id and groups.",
    discussion: """
      The app as just installed, as Android's 'pm clear' leaves it: Documents, Library (Preferences and \
      Caches with it) and tmp are emptied; the bundle, the container id, the app's groups and their \
      containers stay. With --keychain, the keychain items only this app can see go too (as at \
      uninstall). All or nothing: the old data is renamed aside in one step, journaled, and deleted \
      after the command has reported, so the reset costs the same for any amount of data and a kill at \
      any moment leaves the old data or an empty home.
      """,
    positionals: [appArgument],
    options: [
      .init("keychain", help: "Also delete the keychain items only this app can see."), terminateOption,
    ],
    examples: [
      .init("Clear an app's data, as a fresh install has it:", "appbox reset com.example.notes"),
      .init(
        "Clear its keychain items too, ending it first if it runs:",
        "appbox reset com.example.notes --keychain --terminate"),
    ],
    exitStatuses: [.noApp, appRunning])
  let app: String
  let keychain: Bool
  let terminate: Bool

  init(_ arguments: ParsedArguments) throws {
    app = arguments.positional(0)!
    keychain = arguments.flag("keychain")
    terminate = arguments.flag("terminate")
  }

  func run(_ context: CommandContext) throws -> CommandOutput {
    let session = try context.openDevice(mutating: true)
    let record = try session.lockApp(app)
    try context.terminateIfAsked(session, record, terminate)
    let report = try session.reset(record, keychain: keychain)
    for warning in report.warnings { context.warn(warning) }
    var text =
      "Reset \(record.bundleIdentifier): Documents, Library and tmp emptied (container \(record.containerID) kept)"
    if let deleted = report.keychainItemsDeleted {
      text += "\n  keychain  \(deleted) item\(deleted == 1 ? "" : "s") deleted"
    }
    return CommandOutput(
      text: text,
      json: .object([
        ("app", .string(record.bundleIdentifier)), ("containerID", .string(record.containerID)),
        ("home", .string(report.home)), ("emptied", .array(report.emptied.map(JSONValue.string))),
        ("deletedKeychainItems", report.keychainItemsDeleted.map(JSONValue.int) ?? .null),
      ]))
  }
}

struct OffloadCommand: ParsableCommand {
  static let description = CommandDescription(
    name: "offload",
    abstract: "Remove an app's bundle, keeping its data and keychain items (the platform's Offload App).",
    discussion: """
      The bundle goes; the home with Documents and Library, the container id, the app's groups and its \
      keychain items stay, and 'list' shows the app offloaded. launch and run of an offloaded app exit \
      69. Installing the same bundle again puts it back into the same home; a newer version goes \
      through the update path (a new home, the data moved). The bundle is renamed aside in one step, \
      journaled, and deleted after the command has reported.
      """,
    positionals: [appArgument], options: [terminateOption],
    examples: [
      .init(
        "Offload an app, then bring it back with its data:", "appbox offload com.example.notes",
        "appbox install Notes.app")
    ],
    exitStatuses: [.noApp, .cannotCreate("The app is offloaded already."), appRunning])
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
    let report = try session.offload(record)
    for warning in report.warnings { context.warn(warning) }
    return CommandOutput(
      text:
        "Offloaded \(record.bundleIdentifier) \(record.version): its bundle is gone, its data and keychain "
        + "items stay (install \(report.bundle) again to bring it back)",
      json: .object([
        ("app", .string(record.bundleIdentifier)), ("containerID", .string(record.containerID)),
        ("home", .string(report.home)), ("version", .string(record.version)), ("offloaded", .bool(true)),
      ]))
  }
}

struct DeviceErase: ParsableCommand {
  static let description = CommandDescription(
    name: "erase",
    abstract:
      "Erase all content and settings: no apps, groups, keychain items or passcode; the UDID and name stay.",
    discussion: """
      As 'simctl erase' does: every app and app group, their data, every keychain item, the passcode \
      and its keys, launch logs and crash records, and the device's own backups (Backups/, unless \
      --keep-backups) go; the identity (UDID, name, capabilities) and the device key stay, so backups \
      kept elsewhere still restore their keychain items here. Repositories elsewhere (--repo) are not \
      touched. All or nothing: journaled, the old content renamed aside in one step and deleted after \
      the command has reported.
      """,
    options: [
      .init("keep-backups", help: "Keep the device's own backup repository (Backups/) and its caches."),
      .init(
        "terminate",
        help:
          "Terminate every running app first (SIGTERM, then SIGKILL after 5 seconds), instead of exiting 75."),
    ],
    examples: [
      .init(
        "Back to a fresh device, keeping its snapshots:", "appbox device erase --keep-backups",
        "appbox device show")
    ],
    exitStatuses: [
      .busy("An app runs (give --terminate to end it first), or another appbox is at work on the device.")
    ])
  let keepBackups: Bool
  let terminate: Bool

  init(_ arguments: ParsedArguments) throws {
    keepBackups = arguments.flag("keep-backups")
    terminate = arguments.flag("terminate")
  }

  func run(_ context: CommandContext) throws -> CommandOutput {
    let session = try context.openDevice(mutating: true)
    if terminate {
      for app in try session.registry.apps() { try context.terminateIfAsked(session, app, true) }
    }
    let report = try session.erase(keepBackups: keepBackups)
    let identity = report.identity
    return CommandOutput(
      text: """
        Erased device \(identity.name) (\(identity.udid))
          removed  \(report.apps.count) app\(report.apps.count == 1 ? "" : "s"), \(report.groups.count) app \
        group\(report.groups.count == 1 ? "" : "s"), every keychain item
          backups  \(keepBackups ? "kept" : "removed")
        """,
      json: .object([
        ("udid", .string(identity.udid)), ("name", .string(identity.name)),
        ("apps", .array(report.apps.map(JSONValue.string))),
        ("groups", .array(report.groups.map(JSONValue.string))),
        ("keptBackups", .bool(keepBackups)),
      ]))
  }
}

struct DeviceClone: ParsableCommand {
  static let description = CommandDescription(
    name: "clone",
    abstract: "Copy the whole device root to DEST: the same device (a CI template) or a new one.",
    discussion: """
      DEST (which must not exist) becomes a copy of the device root: apps, homes, groups, keychain, \
      backups and history. --same-device (the default) keeps the UDID and the device key, as a CI \
      template's copies should; --new-device gives the copy a new UDID and device key, its keychain items \
      re-sealed under the new key and those marked this-device-only dropped, as a restore onto another \
      device does. Files share their extents with the source where the file system can (FICLONE: XFS, \
      btrfs), else the kernel copies them (copy_file_range), holes kept. The copy is made beside DEST and \
      renamed into place: a kill at any moment leaves DEST complete or absent. No app may run meanwhile; \
      a device with file protection keys (a passcode) is refused.
      """,
    positionals: [.init("DEST", help: "The new device root (its parent must exist).")],
    options: [
      .init("same-device", help: "Keep the UDID and device key (the default)."),
      .init("new-device", help: "A new UDID and device key; this-device-only keychain items are dropped."),
    ],
    examples: [
      .init(
        "A template for parallel CI jobs, then a job on its copy:", "appbox device clone /tmp/job-1",
        "appbox --root /tmp/job-1 launch com.example.notes"),
      .init("A second device made from this one:", "appbox device clone /srv/devices/qa-2 --new-device"),
    ],
    exitStatuses: [
      .noInput("DEST's parent directory does not exist."), .cannotCreate("DEST exists already."),
      .unavailable("The device has file protection keys (a passcode)."),
      .busy("An app runs, or another appbox is at work on the device."),
    ])
  let destination: String
  let newDevice: Bool

  init(_ arguments: ParsedArguments) throws {
    destination = arguments.positional(0)!
    if arguments.flag("same-device") && arguments.flag("new-device") {
      throw arguments.usage("--same-device and --new-device exclude each other")
    }
    newDevice = arguments.flag("new-device")
  }

  func run(_ context: CommandContext) throws -> CommandOutput {
    let session = try context.openDevice(mutating: true)
    let report = try session.clone(to: destination, newDevice: newDevice)
    var lines = [
      "Cloned device \(report.source.name) (\(report.source.udid)) to \(report.destination)",
      "  udid      \(report.identity.udid)" + (report.newDevice ? " (a new device)" : " (the same device)"),
      "  files     \(report.files) (\(report.reflinked) reflinked), \(byteCount(report.bytes))",
    ]
    if let keychain = report.keychain {
      lines.append(
        "  keychain  \(keychain.resealed) items re-sealed, \(keychain.dropped) this-device-only dropped")
    }
    return CommandOutput(
      text: lines.joined(separator: "\n"),
      json: .object([
        ("output", .string(report.destination)), ("udid", .string(report.identity.udid)),
        ("sourceUDID", .string(report.source.udid)), ("name", .string(report.identity.name)),
        ("newDevice", .bool(report.newDevice)), ("files", .int(report.files)), ("bytes", .int(report.bytes)),
        ("reflinked", .int(report.reflinked)),
        ("keychainResealed", report.keychain.map { .int($0.resealed) } ?? .null),
        ("keychainDropped", report.keychain.map { .int($0.dropped) } ?? .null),
      ]))
  }
}
