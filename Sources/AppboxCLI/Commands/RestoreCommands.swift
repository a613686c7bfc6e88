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
      touched.
      """,
    positionals: [appArgument],
    options: [
      .init("snapshot", value: "ID", help: "The snapshot to restore (default: latest)."), repositoryOption,
    ] + repositoryAccessOptions)
  let app: String
  let snapshot: String
  let arguments: ParsedArguments

  init(_ arguments: ParsedArguments) throws {
    app = arguments.positional(0)!
    snapshot = arguments.value("snapshot") ?? "latest"
    self.arguments = arguments
  }

  func run(_ context: CommandContext) throws -> CommandOutput {
    let session = try context.openDevice(mutating: true)
    let repository = try context.repository(arguments, create: false)
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
          + unreadableSummary(result.snapshot.unreadable, result.snapshot.unreadablePaths))
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
    return CommandOutput(
      text: lines.joined(separator: "\n"),
      json: .object([
        ("app", .string(result.app.bundleIdentifier)), ("snapshot", .string(result.snapshot.id)),
        ("containerID", .string(result.app.containerID)), ("files", .int(result.files)),
        ("bytes", .int(result.bytes)), ("installedBundle", .bool(result.installedBundle)),
        ("keychainRestored", .bool(keychainRestored)), ("keychainReason", .optional(keychainReason)),
      ]))
  }
}
