import AppboxBackup
import AppboxContainer
import AppboxCore
import AppboxRepository
import Foundation

struct RestoreCommand: ParsableCommand {
  static let description = CommandDescription(
    name: "restore",
    abstract: "Restore an app's data from a snapshot (installing its bundle from the backup if absent).",
    discussion: """
      Documents, Library and the other data of the snapshot replace the home's, all or nothing;
      Library/Caches and tmp end up empty, and files marked exclude-from-backup go (one line
      counts what was dropped). Every archive and file is verified before the home is touched.
      Without --snapshot, the newest snapshot of the installed version is restored; when that
      version has none, or the app is not installed, nothing is guessed: the command names the
      version the newest snapshot would bring and asks for --snapshot (66). --dry-run lists what
      the restore would add, replace and remove, and what it would drop, and changes nothing. An app group (group.<id>) is restored the same way into its container, which must
      exist (it comes with its first member app); its running members: exit 75. When the restore
      installs the app and so creates an app group the device lacked, that group's latest
      snapshot is restored too.
      """,
    positionals: [
      .init("APP", help: "A bundle identifier or container id, or an app group identifier (group.<id>).")
    ],
    options: [
      .init(
        "snapshot", value: "ID",
        help:
          "The snapshot to restore, or latest (the newest of all); default: the newest of the installed version."
      ),
      .init("dry-run", help: "List what the restore would add, replace, remove and drop; change nothing."),
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
        "Restore the installed version's newest snapshot, then an older one:",
        "appbox restore com.example.notes",
        "appbox restore com.example.notes --snapshot 1a2b3c4d"),
      .init(
        "See first what a restore would change:",
        "appbox restore com.example.notes --snapshot 1a2b3c4d --dry-run"),
      .init("Restore an app group's container:", "appbox restore group.com.example.shared"),
      .init(
        "Bring back one file, then look at a whole snapshot elsewhere:",
        "appbox restore com.example.notes --snapshot 1a2b --include Documents/notes.db",
        "appbox restore com.example.notes --snapshot 1a2b --target /tmp/notes-then"),
    ],
    exitStatuses: [
      .noInput(
        "No such snapshot of the app (or group), or no such repository; without --snapshot, no snapshot of the "
          + "installed version, or the app is not installed (the message names the version --snapshot would bring)."
      ),
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
  /// The snapshot named by --snapshot; nil: the newest of the installed version.
  let snapshot: String?
  let dryRun: Bool
  let include: [[UInt8]]
  let target: String?
  let arguments: ParsedArguments

  init(_ arguments: ParsedArguments) throws {
    app = arguments.positional(0)!
    snapshot = arguments.value("snapshot")
    dryRun = arguments.flag("dry-run")
    include = (arguments.values["include"] ?? []).map(Terminal.unescape)
    target = arguments.value("target")
    if include.contains(where: { $0.isEmpty }) {
      throw arguments.usage("--include needs a path such as Documents/a.txt")
    }
    if dryRun && (target != nil || !include.isEmpty) {
      throw arguments.usage("--dry-run lists a whole restore; it does not combine with --include or --target")
    }
    self.arguments = arguments
  }

  func run(_ context: CommandContext) throws -> CommandOutput {
    if dryRun { return try rehearse(context) }
    if target != nil || !include.isEmpty { return try restorePart(context) }
    let session = try context.openDevice(mutating: true)
    let repository = try context.repository(arguments, create: false, readOnly: true)
    if namesGroup(app) { return try restoreGroup(session: session, repository: repository, context: context) }
    // The app may be missing (the restore installs it): its lock is taken by identifier.
    let identifier = try session.registry.appIfPresent(app)?.bundleIdentifier ?? app
    try session.lockApp(bundleIdentifier: identifier)
    let chosen = try snapshot ?? repository.defaultRestoreSnapshot(of: identifier, in: session).id
    let result = try repository.restore(
      identifier, snapshot: chosen, in: session, keychain: context.keychainSnapshotter,
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
      "Restored \(result.app.bundleIdentifier) from snapshot \(describe(result.snapshot)): "
        + "\(result.files) files, \(byteCount(result.bytes))"
    ]
    if result.dropped.total.files > 0 { lines.append(droppedLine(result.dropped, verb: "Dropped")) }
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
      json: .object(
        [
          ("app", .string(result.app.bundleIdentifier)), ("snapshot", .string(result.snapshot.id)),
        ] + snapshotLabels(result.snapshot) + [
          ("containerID", .string(result.app.containerID)), ("files", .int(result.files)),
          ("bytes", .int(result.bytes)), ("dropped", droppedJSON(result.dropped)),
          ("installedBundle", .bool(result.installedBundle)),
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
      group: group, snapshot: snapshot ?? "latest", in: session, observer: ProgressBar(context))
    for warning in result.warnings { context.warn(warning) }
    if result.snapshot.isIncomplete {
      context.warn(
        "snapshot \(result.snapshot.id) is incomplete: when it was taken, "
          + incompleteSummary(result.snapshot))
    }
    return CommandOutput(
      text: "Restored the app group \(group.identifier) from snapshot \(result.snapshot.id) "
        + "(\(timestamp(result.snapshot.time))): \(result.files) files, \(byteCount(result.bytes))",
      json: .object(
        [
          ("app", .string(group.identifier)), ("snapshot", .string(result.snapshot.id)),
        ] + snapshotLabels(result.snapshot) + [
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
      let chosen = try repository.snapshot(snapshot ?? "latest", app: name)
      result = try repository.restore(
        chosen, paths: include, toTarget: RepositoryLocation.absoluteForOutput(target),
        observer: ProgressBar(context))
    } else {
      let session = try context.openDevice(mutating: true)
      let record = try session.lockApp(app)
      let chosen =
        try snapshot.map { try repository.snapshot($0, app: record.bundleIdentifier) }
        ?? repository.defaultRestoreSnapshot(of: record.bundleIdentifier, in: session)
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
        ("output", .optional(target)), ("files", .int(result.files)), ("bytes", .int(result.bytes)),
      ]))
  }
}

extension RestoreCommand {
  /// `restore --dry-run`: the snapshot the restore would take, and what it would add, replace,
  /// remove and drop in the home, read without a lock and without writing anything.
  func rehearse(_ context: CommandContext) throws -> CommandOutput {
    let session = try context.openDevice(mutating: false)
    let repository = try context.repository(arguments, create: false, readOnly: true)
    let chosen: Snapshot
    let home: String?
    var bundle: String?
    var installs = false
    if namesGroup(app) {
      let group = try session.registry.groupIfPresent(app)
      guard let group else {
        throw ContainerError(.appNotFound, "No app group '\(app)' on this device")
      }
      chosen = try repository.snapshot(snapshot ?? "latest", app: group.identifier)
      home = session.root.groupContainer(group.containerID)
    } else {
      let installed = try session.registry.appIfPresent(app)
      let identifier = installed?.bundleIdentifier ?? app
      chosen =
        try snapshot.map { try repository.snapshot($0, app: identifier) }
        ?? repository.defaultRestoreSnapshot(of: identifier, in: session)
      home = installed.map { session.home(of: $0).path }
      bundle = installed?.bundleDirectoryName ?? chosen.bundleDirectoryName
      installs = installed == nil
    }
    let bundleName = namesGroup(app) ? nil : bundle
    // Streamed (StreamedOutput): text is one walk, every change as it is found; JSON too unless
    // `replaced` and `removed` outgrow StreamedJSON.addArrays's budget (then a walk per array,
    // and the counts are the last walk's).
    let output = context.stream()
    if context.globals.json {
      var json = StreamedJSON(output)
      try json.open(array: false)
      for (key, value) in [("app", .string(chosen.app)), ("snapshot", .string(chosen.id))]
        + snapshotLabels(chosen)
        + [("dryRun", .bool(true)), ("installsBundle", .bool(installs))]
      {
        try json.add(key, value)
      }
      var preview = RestorePreview()
      // One read of the catalog for every walk (the home is read without a lock, as always).
      let kinds: [RestoreChange.Kind] = [.added, .replaced, .removed]
      try repository.catalog.reading {
        try json.addArrays(["added", "replaced", "removed"]) { wanted, emit in
          preview = try repository.previewRestore(
            of: chosen, into: home, bundleDirectoryName: bundleName, kinds: Set(wanted.map { kinds[$0] })
          ) { try emit(kinds.firstIndex(of: $0.kind)!, .string(String(decoding: $0.path, as: UTF8.self))) }
        }
      }
      try json.add("unchanged", .int(preview.unchanged))
      try json.add("dropped", droppedJSON(preview.dropped))
      try json.close()
      return CommandOutput()
    }
    try output.line(
      "Would restore \(chosen.app) from snapshot \(describe(chosen)): \(chosen.files) files, "
        + "\(byteCount(chosen.bytes))")
    if installs {
      try output.line("Would install \(chosen.bundleDirectoryName) \(chosen.version) from the backup")
    }
    let marks: [RestoreChange.Kind: String] = [.added: "+ ", .replaced: "~ ", .removed: "- "]
    var counts: [RestoreChange.Kind: Int] = [:]
    let preview = try repository.previewRestore(
      of: chosen, into: home, bundleDirectoryName: bundleName, kinds: Set(RestoreChange.Kind.allCases)
    ) { change in
      counts[change.kind, default: 0] += 1
      try output.line(marks[change.kind]! + Terminal.escape(change.path))
    }
    try output.line(
      "\(counts[.added] ?? 0) added, \(counts[.replaced] ?? 0) replaced, \(counts[.removed] ?? 0) removed, "
        + "\(preview.unchanged) unchanged")
    if preview.dropped.total.files > 0 { try output.line(droppedLine(preview.dropped, verb: "Would drop")) }
    try output.line("Dry run: nothing was changed.")
    return CommandOutput()
  }
}

/// "1a2b3c4d (Notes 1.0, pre-update, 2026-01-02T03:04:05Z)": a snapshot as restore names it.
func describe(_ snapshot: Snapshot) -> String {
  let labels = [
    snapshot.version.isEmpty ? nil : "version \(snapshot.version)", snapshot.tag, timestamp(snapshot.time),
  ]
  return "\(snapshot.id) (\(labels.compactMap { $0 }.joined(separator: ", ")))"
}

/// "Dropped 3 files (3.0 MB) no snapshot keeps: 1 excluded from backup (3.0 MB), 1 in
/// Library/Caches (1.0 KB), 1 in tmp (10 B)".
func droppedLine(_ dropped: DroppedData, verb: String) -> String {
  func counted(_ count: FileCount) -> String {
    "\(count.files) file\(count.files == 1 ? "" : "s") (\(byteCount(count.bytes)))"
  }
  let parts = [
    (dropped.excluded, "excluded from backup"), (dropped.caches, "in Library/Caches"),
    (dropped.temporary, "in tmp"),
  ].filter { $0.0.files > 0 }.map { "\($0.0.files) \($0.1) (\(byteCount($0.0.bytes)))" }
  return "\(verb) \(counted(dropped.total)) no snapshot keeps: " + parts.joined(separator: ", ")
}

/// `{"files", "bytes", "excluded": {"files", "bytes"}, "caches": {…}, "tmp": {…}}`.
func droppedJSON(_ dropped: DroppedData) -> JSONValue {
  func count(_ count: FileCount) -> JSONValue {
    .object([("files", .int(count.files)), ("bytes", .int(count.bytes))])
  }
  return .object([
    ("files", .int(dropped.total.files)), ("bytes", .int(dropped.total.bytes)),
    ("excluded", count(dropped.excluded)), ("caches", count(dropped.caches)),
    ("tmp", count(dropped.temporary)),
  ])
}
