import AppboxArchive
import AppboxBackup
import AppboxContainer
import AppboxCore
import AppboxRepository
import Foundation

let repositoryOption = CommandDescription.Option(
  "repo", value: "DIR|s3://BUCKET/PREFIX", help: "The backup repository (default: <root>/Backups).")

struct BackupCommand: ParsableCommand {
  static let description = CommandDescription(
    name: "backup",
    abstract: "Take a snapshot of each app's data, storing only what changed since the last one.",
    discussion: """
      Everything in the home is stored except the bundle (stored on an app's first snapshot and
      again only after it changes), Library/Caches, tmp, and files marked 'exclude from backup'.
      An app group's container (name it group.<id>) is a snapshot subject of its own: all of it
      but Library/Caches. Prints one line per app or group: its snapshot id, kind, files, size and
      the bytes added. What the app made unreadable (permission denied) or nested deeper than a
      64 KiB path is left out: the snapshot is
      recorded as incomplete, with a warning naming the paths, and the exit status stays 0 unless
      --strict is given (then 74). A file that kept changing while it was read is stored as last
      read and named as torn: that snapshot is incomplete too. With --all, every app is backed up
      even when one fails; the exit status is 0 only if all succeeded, else that of the first
      failure.
      """,
    positionals: [
      .init(
        "APP", help: "Bundle identifiers or container ids, or app group identifiers (group.<id>).",
        optional: true,
        repeating: true)
    ],
    options: [
      .init("all", help: "Back up every installed app, then every app group."), repositoryOption,
      .init(
        "full",
        help:
          "Re-read and store all the data, not only what changed (the bundle is still stored only when it changed)."
      ),
      .init(
        "compress", value: "METHOD",
        help:
          "zstd: compress what compresses, store the rest as it is, in frames restore reads in place; "
          + "none: a plain tar; gzip: one gzip stream (default: \(BackupOptions.defaultCompression.rawValue)).",
        choices: ["none", "gzip", "zstd"]),
      .init(
        "strict",
        help:
          "Exit 74 when a snapshot is incomplete (entries could not be read, or kept changing as they were)."),
      .init(
        "tag", value: "T",
        help: "Label the snapshots (snapshots --tag T and forget --keep-tag T select them)."),
    ] + repositoryAccessOptions,
    examples: [
      .init(
        "Back up one app, then every app and app group:", "appbox backup com.example.notes",
        "appbox backup --all"),
      .init(
        "Into an S3 bucket, compressed:",
        "appbox backup --all --repo s3://backups/ci --compress zstd"),
      .init(
        "A labelled snapshot before an experiment:", "appbox backup com.example.notes --tag before-migration"),
      .init(
        "The new snapshot's id, for a script:",
        "appbox --json backup com.example.notes | jq -r '.[0].snapshot'"),
    ],
    exitStatuses: [
      ExitCode.ioError(
        "An I/O error, or with --strict a snapshot is incomplete; with --all, the first failure's status."),
      .noInput(
        "No such app or app group, or no such repository: one named by --repo must exist (appbox repo init "
          + "creates it; the device's own is made on first use)."),
      .unavailable(
        "The device is locked (the app's protected files are unavailable), or the S3 store cannot be reached."
      ),
    ] + ExitCode.repository,
    environment: EnvironmentVariable.repository + EnvironmentVariable.progress)
  let apps: [String]
  let all: Bool
  let strict: Bool
  let options: BackupOptions
  let arguments: ParsedArguments

  init(_ arguments: ParsedArguments) throws {
    apps = arguments.positionals
    all = arguments.flag("all")
    strict = arguments.flag("strict")
    if all && !apps.isEmpty { throw arguments.usage("give apps or --all, not both") }
    if !all && apps.isEmpty { throw arguments.usage("name an app to back up, or use --all") }
    let compression =
      arguments.value("compress").flatMap(ArchiveCompression.init(rawValue:))
      ?? BackupOptions.defaultCompression
    options = BackupOptions(
      full: arguments.flag("full"), compression: compression, tag: try arguments.value("tag").map(validTag))
    self.arguments = arguments
  }

  /// One app's outcome: its snapshot, or the error that stopped it.
  private enum Outcome {
    case done(BackupResult)
    case failed(app: String, error: Error)
  }

  func run(_ context: CommandContext) throws -> CommandOutput {
    let session = try context.openDevice(mutating: true)
    let names =
      all
      ? try session.registry.apps().map(\.bundleIdentifier) + session.registry.groups().map(\.identifier)
      : apps
    // The device's own repository is made on first use; any other must exist (repo init).
    let repository = try context.repository(arguments, create: arguments.value("repo") == nil)
    var options = self.options
    options.keychain = context.keychainSnapshotter
    if let framing = context.environment["APPBOX_FRAMES"] { options.framing = try frameOptions(framing) }
    let progress = ProgressBar(context)
    var outcomes: [Outcome] = []
    var firstFailure: Int32?
    for name in names {
      do {
        // Each app (or group) under its own lock, taken in turn and released after its snapshot.
        let result: BackupResult
        if namesGroup(name) {
          let group = try lockedGroup(name, in: session)
          defer { session.unlockGroup(group.identifier) }
          result = try repository.backup(
            .group(group, in: session), in: session, options: options, observer: progress)
        } else {
          let app = try session.lockApp(name)
          defer { session.unlockApp(app) }
          result = try repository.backup(app, in: session, options: options, observer: progress)
        }
        let snapshot = result.snapshot
        if snapshot.isIncomplete {
          context.warn(
            "snapshot \(snapshot.id) of \(snapshot.app) is incomplete: " + incompleteSummary(snapshot))
          if strict { firstFailure = firstFailure ?? ExitStatus.ioError }
        }
        outcomes.append(.done(result))
      } catch {
        // One stderr line per app that failed; with --all or several apps the others still run.
        guard all || names.count > 1 else { throw error }
        let status = ExitStatus.of(error)
        firstFailure = firstFailure ?? status
        context.report(error, prefix: "backup of \(name) failed: ")
        outcomes.append(.failed(app: name, error: error))
      }
    }
    // The summary is the command's human output (stdout); warnings and progress stay on stderr.
    return CommandOutput(
      text: outcomes.compactMap {
        guard case .done(let result) = $0 else { return nil }
        let snapshot = result.snapshot
        return "\(snapshot.app): snapshot \(snapshot.id) (\(snapshot.kind.rawValue)), "
          + "\(snapshot.files) files, \(byteCount(snapshot.bytes)); \(byteCount(snapshot.bytesAdded)) added"
      }
      .joined(separator: "\n"),
      json: .array(
        outcomes.map { outcome in
          switch outcome {
          case .done(let result):
            return .object(
              [
                ("snapshot", .string(result.snapshot.id)), ("app", .string(result.snapshot.app)),
              ] + snapshotLabels(result.snapshot) + [
                ("kind", .string(result.snapshot.kind.rawValue)), ("files", .int(result.snapshot.files)),
                ("bytesAdded", .int(result.snapshot.bytesAdded)), ("archive", .string(result.archivePath)),
              ] + incompleteMembers(result.snapshot))
          case .failed(let app, let error):
            return .object([("app", .string(app)), ("error", errorJSON(error))])
          }
        }),
      exitStatus: firstFailure ?? 0)
  }
}

/// "2 entries could not be read and were left out: 'Documents/a', 'Documents/b'" (app-chosen
/// bytes escaped; a count of more than the paths kept ends with "and N more").
func unreadableSummary(_ count: Int, _ paths: [[UInt8]]) -> String {
  let shown = paths.map { "'" + Terminal.escape($0) + "'" }.joined(separator: ", ")
  let more = count > paths.count ? (paths.isEmpty ? "" : " and \(count - paths.count) more") : ""
  return
    "\(count) entr\(count == 1 ? "y" : "ies") could not be read and \(count == 1 ? "was" : "were") left out"
    + (shown.isEmpty ? "" : ": " + shown + more)
}

/// Why a snapshot is incomplete: what could not be read, and what kept changing as it was.
func incompleteSummary(_ snapshot: Snapshot) -> String {
  var parts: [String] = []
  if snapshot.unreadable > 0 {
    parts.append(unreadableSummary(snapshot.unreadable, snapshot.unreadablePaths))
  }
  if snapshot.torn > 0 { parts.append(tornSummary(snapshot.torn, snapshot.tornPaths)) }
  return parts.joined(separator: "; ")
}

/// "1 file kept changing while it was read, so its copy may be torn: 'Documents/db'".
func tornSummary(_ count: Int, _ paths: [[UInt8]]) -> String {
  let shown = paths.map { "'" + Terminal.escape($0) + "'" }.joined(separator: ", ")
  let more = count > paths.count ? (paths.isEmpty ? "" : " and \(count - paths.count) more") : ""
  return
    "\(count) file\(count == 1 ? "" : "s") kept changing while \(count == 1 ? "it was" : "they were") read, "
    + "so \(count == 1 ? "its copy" : "their copies") may be torn"
    + (shown.isEmpty ? "" : ": " + shown + more)
}

/// The JSON members of an incomplete snapshot: "incomplete": true, with "unreadable" and
/// "unreadablePaths", and "torn" and "tornPaths" (files that kept changing as they were read),
/// each pair when there are any.
func incompleteMembers(_ snapshot: Snapshot) -> [(String, JSONValue)] {
  guard snapshot.isIncomplete else { return [] }
  var members = incompleteMembers(snapshot.unreadable, snapshot.unreadablePaths)
  if members.isEmpty { members.append(("incomplete", .bool(true))) }
  if snapshot.torn > 0 {
    members.append(("torn", .int(snapshot.torn)))
    members.append(("tornPaths", .array(snapshot.tornPaths.map { .string(Terminal.escape($0)) })))
  }
  return members
}

/// The JSON members of an incomplete snapshot ("incomplete": true, "unreadable": N,
/// "unreadablePaths": the first paths, shortened and escaped as text); none for a complete
/// one. With a prefix, the keys are prefixed ("preUpdateIncomplete", ...).
func incompleteMembers(_ count: Int, _ paths: [[UInt8]], prefix: String = "") -> [(String, JSONValue)] {
  guard count > 0 else { return [] }
  func key(_ name: String) -> String {
    prefix.isEmpty ? name : prefix + name.prefix(1).uppercased() + name.dropFirst()
  }
  return [
    (key("incomplete"), .bool(true)), (key("unreadable"), .int(count)),
    (key("unreadablePaths"), .array(paths.map { .string(Terminal.escape($0)) })),
  ]
}

/// What every description of a snapshot carries: `tag` (null for an ordinary backup) and
/// `appVersion`, the app's version when it was taken (null for an app group's).
func snapshotLabels(_ snapshot: Snapshot) -> [(String, JSONValue)] {
  [
    ("tag", .optional(snapshot.tag)),
    ("appVersion", .optional(snapshot.version.isEmpty ? nil : snapshot.version)),
  ]
}

struct SnapshotsCommand: ParsableCommand {
  static let description = CommandDescription(
    name: "snapshots", abstract: "List snapshots: id, app, app version, time, kind, files, bytes, tag.",
    positionals: [
      .init(
        "APP", help: "Only this app's (or app group's) snapshots: a bundle or group identifier.",
        optional: true)
    ],
    options: [.init("tag", value: "T", help: "Only the snapshots labelled T."), repositoryOption]
      + repositoryAccessOptions,
    examples: [
      .init("Every snapshot, then one app's:", "appbox snapshots", "appbox snapshots com.example.notes"),
      .init("The safety snapshots update took:", "appbox snapshots com.example.notes --tag pre-update"),
      .init(
        "The snapshots of an encrypted repository:",
        "appbox snapshots --repo /srv/vault --password-file pw.txt"),
    ],
    exitStatuses: [ExitCode.noSnapshot] + ExitCode.repository,
    environment: EnvironmentVariable.repository)
  let app: String?
  let tag: String?
  let arguments: ParsedArguments
  init(_ arguments: ParsedArguments) throws {
    app = arguments.positional(0)
    tag = arguments.value("tag")
    self.arguments = arguments
  }

  func run(_ context: CommandContext) throws -> CommandOutput {
    let repository = try context.repository(arguments, create: false, readOnly: true)
    var name = app
    if let app, UUID(uuidString: app) != nil, let registry = try? context.openDevice(mutating: false).registry
    {
      name =
        (try? registry.appIfPresent(app)?.bundleIdentifier) ?? (try? registry.groupIfPresent(app)?.identifier)
        ?? app
    }
    let listed = try repository.listing(app: name).filter { tag == nil || $0.snapshot.tag == tag }
    let snapshots = listed.map(\.snapshot)
    let incomplete = snapshots.contains { $0.isIncomplete }
    let damaged = listed.contains { $0.damage != nil }
    for (snapshot, why) in listed {
      if let why { context.warn("snapshot \(snapshot.id) cannot be restored: \(why)") }
    }
    let text =
      snapshots.isEmpty
      ? "No snapshots."
      : table(
        ["ID", "APP", "VERSION", "TIME", "KIND", "FILES", "SIZE", "TAG"]
          + (incomplete ? ["INCOMPLETE"] : []) + (damaged ? ["DAMAGED"] : []),
        listed.map { snapshot, why in
          [
            snapshot.id, snapshot.app, snapshot.version.isEmpty ? "-" : snapshot.version,
            timestamp(snapshot.time), snapshot.kind.rawValue, String(snapshot.files),
            byteCount(snapshot.bytes),
            snapshot.tag ?? "-",
          ]
            + (incomplete ? [incompleteColumn(snapshot)] : [])
            + (damaged ? [why == nil ? "" : "damaged"] : [])
        })
    return CommandOutput(
      text: text,
      json: .array(
        listed.map { snapshot, why in
          .object(
            [
              ("snapshot", .string(snapshot.id)), ("app", .string(snapshot.app)),
            ] + snapshotLabels(snapshot) + [
              ("time", .string(timestamp(snapshot.time))),
              ("kind", .string(snapshot.kind.rawValue)), ("files", .int(snapshot.files)),
              ("bytes", .int(snapshot.bytes)),
            ] + incompleteMembers(snapshot)
              + (why.map { [("damaged", JSONValue.bool(true)), ("damage", .string($0))] } ?? []))
        }))
  }
}

/// "2 unreadable", "1 torn", "2 unreadable, 1 torn", or empty for a complete snapshot.
func incompleteColumn(_ snapshot: Snapshot) -> String {
  var parts: [String] = []
  if snapshot.unreadable > 0 { parts.append("\(snapshot.unreadable) unreadable") }
  if snapshot.torn > 0 { parts.append("\(snapshot.torn) torn") }
  return parts.joined(separator: ", ")
}

/// A snapshot tag as given on the command line: 1 to 64 characters, none of them a control
/// character, a comma or a slash.
func validTag(_ text: String) throws -> String {
  guard !text.isEmpty, text.count <= 64,
    !text.unicodeScalars.contains(where: {
      $0.properties.generalCategory == .control || $0 == "," || $0 == "/"
    })
  else {
    throw UsageError(
      "--tag takes 1 to 64 characters without controls, ',' or '/', not '\(text)'", commandPath: "backup")
  }
  return text
}

/// `APPBOX_FRAMES` (a test hook, for measuring): how framed archives are cut and compressed,
/// as `level=N,frame=BYTES,stored=BYTES,stored-minimum=BYTES` (any of them; the others keep
/// their standard values).
func frameOptions(_ text: String) throws -> FrameOptions {
  var options = FrameOptions.standard
  for item in text.split(separator: ",") {
    let parts = item.split(separator: "=", maxSplits: 1).map(String.init)
    guard parts.count == 2, let value = Int(parts[1]) else {
      throw UsageError("APPBOX_FRAMES: '\(item)' is not KEY=NUMBER")
    }
    switch parts[0] {
    case "level": options.level = value
    case "frame": options.frameSize = value
    case "stored": options.storedFrameSize = value
    case "stored-minimum": options.storedMinimum = value
    default:
      throw UsageError("APPBOX_FRAMES: unknown key '\(parts[0])' (level, frame, stored, stored-minimum)")
    }
  }
  return options
}
