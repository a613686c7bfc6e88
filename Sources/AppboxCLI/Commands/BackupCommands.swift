import AppboxArchive
import AppboxBackup
import AppboxContainer
import AppboxCore
import Foundation

let repositoryOption = CommandDescription.Option(
  "repo", value: "DIR", help: "The backup repository (default: <root>/Backups).")

extension CommandContext {
  /// The repository named by --repo, else the device root's `Backups`.
  func repository(_ arguments: ParsedArguments, create: Bool) throws -> Repository {
    let path = arguments.value("repo") ?? deviceRoot.backups
    return try Repository(path: path, create: create, environment: environment)
  }

  /// The device's keychain as backups see it: snapshots carry the app's items, sealed
  /// under the device key.
  var keychainSnapshotter: (any KeychainSnapshotting)? { DeviceKeychainSnapshotter(root: deviceRoot) }
}

struct BackupCommand: ParsableCommand {
  static let description = CommandDescription(
    name: "backup",
    abstract: "Take a snapshot of each app's data, storing only what changed since the last one.",
    discussion: """
      Everything in the home is stored except the bundle (stored on an app's first snapshot and
      again only after it changes), Library/Caches, tmp, and files marked 'exclude from backup'.
      Prints one snapshot id per app.
      """,
    positionals: [
      .init("APP", help: "Bundle identifiers or container ids.", optional: true, repeating: true)
    ],
    options: [
      .init("all", help: "Back up every installed app."), repositoryOption,
      .init(
        "full",
        help:
          "Re-read and store all the data, not only what changed (the bundle is still stored only when it changed)."
      ),
      .init(
        "compress", value: "METHOD", help: "Compress the archive (default: none).",
        choices: ["none", "gzip", "zstd"]),
    ])
  let apps: [String]
  let all: Bool
  let options: BackupOptions
  let arguments: ParsedArguments

  init(_ arguments: ParsedArguments) throws {
    apps = arguments.positionals
    all = arguments.flag("all")
    if all && !apps.isEmpty { throw arguments.usage("give apps or --all, not both") }
    if !all && apps.isEmpty { throw arguments.usage("name an app to back up, or use --all") }
    let compression = ArchiveCompression(rawValue: arguments.value("compress") ?? "none") ?? .none
    options = BackupOptions(full: arguments.flag("full"), compression: compression)
    self.arguments = arguments
  }

  func run(_ context: CommandContext) throws -> CommandOutput {
    let session = try context.openDevice(mutating: true)
    let records = all ? try session.registry.apps() : try apps.map { try session.app($0) }
    let repository = try context.repository(arguments, create: true)
    var options = self.options
    options.keychain = context.keychainSnapshotter
    let progress = ProgressBar(context)
    var results: [BackupResult] = []
    for app in records {
      let result = try repository.backup(app, in: session, options: options, observer: progress)
      let snapshot = result.snapshot
      context.note(
        "\(app.bundleIdentifier): snapshot \(snapshot.id) (\(snapshot.kind.rawValue)), \(snapshot.files) files, "
          + "\(byteCount(snapshot.bytes)); \(byteCount(snapshot.bytesAdded)) added")
      results.append(result)
    }
    return CommandOutput(
      text: results.map(\.snapshot.id).joined(separator: "\n"),
      json: .array(
        results.map { result in
          .object([
            ("snapshot", .string(result.snapshot.id)), ("app", .string(result.snapshot.app)),
            ("kind", .string(result.snapshot.kind.rawValue)), ("files", .int(result.snapshot.files)),
            ("bytesAdded", .int(result.snapshot.bytesAdded)), ("archive", .string(result.archivePath)),
          ])
        }))
  }
}

struct SnapshotsCommand: ParsableCommand {
  static let description = CommandDescription(
    name: "snapshots", abstract: "List snapshots: id, app, time, kind, files, bytes.",
    positionals: [.init("APP", help: "Only this app's snapshots (a bundle identifier).", optional: true)],
    options: [repositoryOption])
  let app: String?
  let arguments: ParsedArguments
  init(_ arguments: ParsedArguments) throws {
    app = arguments.positional(0)
    self.arguments = arguments
  }

  func run(_ context: CommandContext) throws -> CommandOutput {
    let repository = try context.repository(arguments, create: false)
    var name = app
    if let app, UUID(uuidString: app) != nil,
      let record = try? context.openDevice(mutating: false).registry.appIfPresent(app)
    {
      name = record.bundleIdentifier
    }
    let snapshots = try repository.catalog.snapshots(app: name)
    let tagged = snapshots.contains { $0.tag != nil }
    let text =
      snapshots.isEmpty
      ? "No snapshots."
      : table(
        ["ID", "APP", "TIME", "KIND", "FILES", "SIZE"] + (tagged ? ["TAG"] : []),
        snapshots.map {
          [$0.id, $0.app, timestamp($0.time), $0.kind.rawValue, String($0.files), byteCount($0.bytes)]
            + (tagged ? [$0.tag ?? ""] : [])
        })
    return CommandOutput(
      text: text,
      json: .array(
        snapshots.map { snapshot in
          .object([
            ("snapshot", .string(snapshot.id)), ("app", .string(snapshot.app)),
            ("time", .string(timestamp(snapshot.time))),
            ("kind", .string(snapshot.kind.rawValue)), ("files", .int(snapshot.files)),
            ("bytes", .int(snapshot.bytes)),
          ])
        }))
  }
}
