import AppboxBackup
import AppboxContainer
import AppboxCore
import Foundation

struct RestoreCommand: ParsableCommand {
  static let description = CommandDescription(
    name: "restore",
    abstract: "Restore an app's data from a snapshot (installing its bundle from the backup if absent).",
    discussion: """
      Documents, Library and the other data of the snapshot replace the home's, all or nothing;
      Library/Caches and tmp end up empty. Every archive and file is verified before the home is
      touched. An app group (group.<id>) is restored the same way into its container, which must
      exist (it comes with its first member app); its running members: exit 75. When the restore
      installs the app and so creates an app group the device lacked, that group's latest
      snapshot is restored too.
      """,
    positionals: [
      .init("APP", help: "A bundle identifier or container id, or an app group identifier (group.<id>).")
    ],
    options: [
      .init("snapshot", value: "ID", help: "The snapshot to restore (default: latest)."),
      .init(
        "include", value: "PATH",
        help: "Replace only this path of the home (Documents/a.txt; repeat for more), all or nothing."),
      .init(
        "target", value: "DIR",
        help: "Write the snapshot's data as a plain tree under DIR (new or empty) and leave the app alone."),
      repositoryOption,
    ] + repositoryAccessOptions,
    examples: [
      .init(
        "Restore the latest snapshot, then an older one:", "appbox restore com.example.notes",
        "appbox restore com.example.notes --snapshot 1a2b3c4d"),
      .init("Restore an app group's container:", "appbox restore group.com.example.shared"),
      .init(
        "Bring back one file, then look at a whole snapshot elsewhere:",
        "appbox restore com.example.notes --snapshot 1a2b --include Documents/notes.db",
        "appbox restore com.example.notes --snapshot 1a2b --target /tmp/notes-then"),
    ],
    exitStatuses: [
      .noInput("No such snapshot of the app (or group), or no such repository."),
      .dataError("A damaged archive or catalog, or restored data that does not match its recorded hash."),
      .unavailable(
        "The device is locked (the app's protected files are unavailable), or the S3 store cannot be reached."
      ),
      .busy("The app (or a member of the group) is running, or another appbox holds its lock (--wait)."),
      .cannotCreate(
        "The --target directory is not empty, or a folder on an --include path is a file or symlink in the home."
      ),
    ] + ExitCode.repository,
    environment: EnvironmentVariable.repository + EnvironmentVariable.progress)
  let app: String
  let snapshot: String
  let include: [[UInt8]]
  let target: String?
  let arguments: ParsedArguments

  init(_ arguments: ParsedArguments) throws {
    app = arguments.positional(0)!
    snapshot = arguments.value("snapshot") ?? "latest"
    include = (arguments.values["include"] ?? []).map(Terminal.unescape)
    target = arguments.value("target")
    if include.contains(where: { $0.isEmpty }) {
      throw arguments.usage("--include needs a path such as Documents/a.txt")
    }
    self.arguments = arguments
  }

  func run(_ context: CommandContext) throws -> CommandOutput {
    if target != nil || !include.isEmpty { return try restorePart(context) }
    let session = try context.openDevice(mutating: true)
    let repository = try context.repository(arguments, create: false, readOnly: true)
    if namesGroup(app) { return try restoreGroup(session: session, repository: repository, context: context) }
    // The app may be missing (the restore installs it): its lock is taken by identifier.
    let identifier = try session.registry.appIfPresent(app)?.bundleIdentifier ?? app
    try session.lockApp(bundleIdentifier: identifier)
    let result = try repository.restore(
      identifier, snapshot: snapshot, in: session, keychain: context.keychainSnapshotter,
      observer: ProgressBar(context))
    var keychainRestored = false
    var keychainReason: String?
    switch result.keychain {
    case .restored?: keychainRestored = true
    case .otherDevice(let reason)?:
      keychainReason = reason
      context.warn("keychain items were not restored: \(reason)")
    case .restoredFromElsewhere(_, let notes)?:
      keychainRestored = true
      for note in notes { context.warn("keychain: \(note)") }
    case nil:
      keychainReason =
        result.snapshot.keychainOffset == nil
        ? "the snapshot holds no keychain items" : "no keychain is available"
    }
    for warning in result.warnings { context.warn(warning) }
    if result.snapshot.isIncomplete {
      context.warn(
        "snapshot \(result.snapshot.id) is incomplete: when it was taken, "
          + incompleteSummary(result.snapshot))
    }
    var lines = [
      "Restored \(result.app.bundleIdentifier) from snapshot \(result.snapshot.id) "
        + "(\(timestamp(result.snapshot.time))): \(result.files) files, \(byteCount(result.bytes))"
    ]
    if result.installedBundle {
      lines.append(
        "Installed \(result.app.bundleDirectoryName) \(result.app.version) from the backup "
          + "(container \(result.app.containerID))")
    }
    for group in result.groups {
      for warning in group.warnings { context.warn(warning) }
      lines.append(
        "Restored the app group \(group.group.identifier) from snapshot \(group.snapshot.id) "
          + "(\(timestamp(group.snapshot.time))): \(group.files) files, \(byteCount(group.bytes))")
    }
    return CommandOutput(
      text: lines.joined(separator: "\n"),
      json: .object([
        ("app", .string(result.app.bundleIdentifier)), ("snapshot", .string(result.snapshot.id)),
        ("containerID", .string(result.app.containerID)), ("files", .int(result.files)),
        ("bytes", .int(result.bytes)), ("installedBundle", .bool(result.installedBundle)),
        ("keychainRestored", .bool(keychainRestored)), ("keychainReason", .optional(keychainReason)),
        (
          "groups",
          .array(
            result.groups.map {
              .object([
                ("group", .string($0.group.identifier)), ("snapshot", .string($0.snapshot.id)),
                ("files", .int($0.files)), ("bytes", .int($0.bytes)),
              ])
            })
        ),
      ]))
  }

  /// `restore group.<id>`: the group's container from one of its snapshots.
  private func restoreGroup(session: DeviceSession, repository: Repository, context: CommandContext) throws
    -> CommandOutput
  {
    let group = try lockedGroup(app, in: session)
    let result = try repository.restore(
      group: group, snapshot: snapshot, in: session, observer: ProgressBar(context))
    for warning in result.warnings { context.warn(warning) }
    if result.snapshot.isIncomplete {
      context.warn(
        "snapshot \(result.snapshot.id) is incomplete: when it was taken, "
          + incompleteSummary(result.snapshot))
    }
    return CommandOutput(
      text: "Restored the app group \(group.identifier) from snapshot \(result.snapshot.id) "
        + "(\(timestamp(result.snapshot.time))): \(result.files) files, \(byteCount(result.bytes))",
      json: .object([
        ("app", .string(group.identifier)), ("snapshot", .string(result.snapshot.id)),
        ("containerID", .string(group.containerID)), ("files", .int(result.files)),
        ("bytes", .int(result.bytes)),
      ]))
  }

  /// `--include` (into the live home) and `--target` (a plain tree elsewhere).
  private func restorePart(_ context: CommandContext) throws -> CommandOutput {
    if namesGroup(app) { throw arguments.usage("--include and --target restore apps, not app groups") }
    let repository = try context.repository(arguments, create: false, readOnly: true)
    let result: PartialRestoreResult
    if let target {
      // The app need not be installed: a container id is looked up when there is a device.
      var name = app
      if UUID(uuidString: app) != nil,
        let record = try? context.openDevice(mutating: false).registry.appIfPresent(app)
      {
        name = record.bundleIdentifier
      }
      let chosen = try repository.snapshot(snapshot, app: name)
      result = try repository.restore(
        chosen, paths: include, toTarget: RepositoryLocation.absoluteForOutput(target),
        observer: ProgressBar(context))
    } else {
      let session = try context.openDevice(mutating: true)
      let record = try session.lockApp(app)
      let chosen = try repository.snapshot(snapshot, app: record.bundleIdentifier)
      result = try repository.restore(
        chosen, paths: include, into: record, in: session, observer: ProgressBar(context))
    }
    for warning in result.warnings { context.warn(warning) }
    let what = include.isEmpty ? "the data" : include.map { Terminal.escape($0) }.joined(separator: ", ")
    return CommandOutput(
      text: "Restored \(what) of \(result.snapshot.app) from snapshot \(result.snapshot.id) "
        + "(\(timestamp(result.snapshot.time)))\(target.map { " into \($0)" } ?? ""): \(result.files) files, "
        + byteCount(result.bytes),
      json: .object([
        ("app", .string(result.snapshot.app)), ("snapshot", .string(result.snapshot.id)),
        ("paths", .array(include.map { .string(String(decoding: $0, as: UTF8.self)) })),
        ("target", .optional(target)), ("files", .int(result.files)), ("bytes", .int(result.bytes)),
      ]))
  }
}
