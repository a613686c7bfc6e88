import AppboxBackup
import AppboxContainer
import AppboxCore
import AppboxRepository
import Foundation

struct UpdateCommand: ParsableCommand {
  static let description = CommandDescription(
    name: "update",
    abstract: "Update an app to a new bundle: a new home, the data moved over, a migration report.",
    discussion: """
      The new bundle must have the same CFBundleIdentifier and a higher CFBundleVersion. A pre-update \
      snapshot is taken first, and one of each app group the app is a member of; Documents and Library \
      (Caches included) are moved into the new home with rename(2); tmp and anything else in the old home \
      are dropped. Keychain items and app group containers are not touched; the app's groups become those \
      the new bundle lists (a group it no longer lists is kept, hidden from it, until it is uninstalled).
      """,
    positionals: [appArgument, .init("BUNDLE.app", help: "The new version of the app's bundle.")],
    options: [
      .init(
        "allow-downgrade", help: "Accept a bundle whose version is not higher (a downgrade or reinstall)."),
      terminateOption,
    ],
    examples: [
      .init(
        "Update to version 2.0 (a snapshot of 1.0's data is taken first):",
        "appbox update com.example.notes Notes-2.0/Notes.app"),
      .init(
        "Reinstall the same version into a fresh home, keeping the data:",
        "appbox update com.example.notes Notes.app --allow-downgrade"),
    ],
    exitStatuses: [
      .dataError("The new bundle is invalid, or its version is not higher (see --allow-downgrade)."),
      .noInput("No such app, or no such bundle directory."),
      .unavailable("The app's protected files are unavailable while the device is locked."), .appBusy,
      .denied("The device's own repository is encrypted and its password is wrong."),
    ],
    environment: [.passwordFile, .keyCache] + EnvironmentVariable.progress)
  let app: String
  let bundle: String
  let allowDowngrade: Bool
  let terminate: Bool

  init(_ arguments: ParsedArguments) throws {
    app = arguments.positional(0)!
    bundle = arguments.positional(1)!
    allowDowngrade = arguments.flag("allow-downgrade")
    terminate = arguments.flag("terminate")
  }

  func run(_ context: CommandContext) throws -> CommandOutput {
    let session = try context.openDevice(mutating: true)
    let record = try session.lockApp(app)
    try context.terminateIfAsked(session, record, terminate)
    let report = try session.update(record, toBundleAt: bundle, allowDowngrade: allowDowngrade) { app in
      try context.preUpdateSnapshot(of: app, in: session)
    }
    for warning in report.warnings { context.warn(warning) }
    if report.preUpdateUnreadable > 0 {
      context.warn(
        "the pre-update snapshot \(report.preUpdateSnapshot ?? "") is incomplete: "
          + unreadableSummary(report.preUpdateUnreadable, report.preUpdateUnreadablePaths)
          + "; the update went ahead")
    }
    if !report.staleAbsolutePaths.isEmpty {
      context.warn(
        "\(report.staleAbsolutePaths.count) file(s) still mention the old home's absolute path "
          + "(\(report.staleAbsolutePaths.prefix(5).map(Terminal.escape).joined(separator: ", "))"
          + "\(report.staleAbsolutePaths.count > 5 ? ", …" : "")); store paths relative to the home instead")
    }
    return CommandOutput(text: updateText(report), json: updateJSON(report))
  }
}

func updateText(_ report: UpdateReport, verb: String = "Updated") -> String {
  var lines = [
    "\(verb) \(report.bundleIdentifier) \(report.oldVersion) → \(report.newVersion)",
    "  container  \(report.oldContainerID) → \(report.newContainerID)",
    "  home       \(report.newHome)",
    "  moved      Documents, Library (\(report.movedFiles) files, \(byteCount(report.movedBytes)))",
    "  dropped    tmp (\(report.droppedTmpFiles) files, \(byteCount(report.droppedTmpBytes)))"
      + (report.droppedItems.isEmpty
        ? "" : "; other items: " + report.droppedItems.map(Terminal.escape).joined(separator: ", ")),
  ]
  if let snapshot = report.preUpdateSnapshot {
    lines.append(
      "  snapshot   \(snapshot) (taken before the update"
        + (report.preUpdateUnreadable > 0
          ? "; incomplete: \(report.preUpdateUnreadable) unreadable entr"
            + (report.preUpdateUnreadable == 1 ? "y" : "ies") + " left out)" : ")"))
  }
  if !report.groups.isEmpty || !report.preUpdateGroupSnapshots.isEmpty {
    lines.append(
      "  groups     \(report.groups.isEmpty ? "none" : report.groups.joined(separator: ", ")), kept as they are"
        + (report.preUpdateGroupSnapshots.isEmpty
          ? "" : "; snapshots before the update: " + groupSnapshotList(report.preUpdateGroupSnapshots)))
  }
  lines.append(
    String(
      format: "  took       %.3f s (snapshot %.3f s, migration %.1f ms, survey %.1f ms)", report.totalSeconds,
      report.snapshotSeconds,
      report.migrationSeconds * 1000, report.surveySeconds * 1000))
  if !report.staleAbsolutePaths.isEmpty {
    lines.append("  stale paths (files mentioning the old home):")
    lines += report.staleAbsolutePaths.map { "    \(Terminal.escape($0))" }
  }
  return lines.joined(separator: "\n")
}

func updateJSON(_ report: UpdateReport) -> JSONValue {
  .object(
    [
      ("app", .string(report.bundleIdentifier)),
      ("oldContainerID", .string(report.oldContainerID)), ("newContainerID", .string(report.newContainerID)),
      ("oldVersion", .string(report.oldVersion)), ("newVersion", .string(report.newVersion)),
      ("home", .string(report.newHome)),
      (
        "moved",
        .object([
          ("directories", .array([.string("Documents"), .string("Library")])),
          ("files", .int(report.movedFiles)),
          ("bytes", .int(report.movedBytes)),
        ])
      ),
      (
        "dropped",
        .object([
          ("tmpFiles", .int(report.droppedTmpFiles)), ("tmpBytes", .int(report.droppedTmpBytes)),
          ("items", .array(report.droppedItems.map(JSONValue.string))),
        ])
      ),
      ("preUpdateSnapshot", .optional(report.preUpdateSnapshot)),
    ] + incompleteMembers(report.preUpdateUnreadable, report.preUpdateUnreadablePaths, prefix: "preUpdate")
      + [
        ("groups", .array(report.groups.map(JSONValue.string))),
        ("preUpdateGroupSnapshots", groupSnapshotJSON(report.preUpdateGroupSnapshots)),
        ("staleAbsolutePaths", .array(report.staleAbsolutePaths.map(JSONValue.string))),
        (
          "durations",
          .object([
            ("snapshot", .number(report.snapshotSeconds)), ("migration", .number(report.migrationSeconds)),
            ("survey", .number(report.surveySeconds)),
            ("total", .number(report.totalSeconds)),
          ])
        ),
      ])
}

extension CommandContext {
  /// The snapshot an update takes first (incremental, tagged "pre-update"), in the
  /// device's default repository, keychain items included; and one of each of its groups.
  func preUpdateSnapshot(of app: AppRecord, in session: DeviceSession) throws -> PreUpdateSnapshot? {
    let repository = try defaultRepository()
    let options = BackupOptions(tag: "pre-update", keychain: keychainSnapshotter)
    let snapshot = try repository.backup(app, in: session, options: options, observer: ProgressBar(self))
      .snapshot
    return PreUpdateSnapshot(
      id: snapshot.id, unreadable: snapshot.unreadable, unreadablePaths: snapshot.unreadablePaths,
      groups: try preUpdateGroupSnapshots(of: app, in: session, repository: repository))
  }
}

struct RevertCommand: ParsableCommand {
  static let description = CommandDescription(
    name: "revert",
    abstract:
      "Go back to the version and data from before the last update (the newer data is snapshotted first).",
    discussion: """
      The previous bundle is reinstalled from the pre-update snapshot into a new home, and the data from \
      that snapshot is restored there. The data being replaced is snapshotted first (tag pre-revert), so \
      nothing is lost. A second revert without a new update is refused. App group containers keep their \
      data unless --with-groups is given: then each group the update snapshotted is snapshotted again \
      (pre-revert) and restored to its pre-update snapshot (its running members: exit 75).
      """,
    positionals: [appArgument],
    options: [
      .init("with-groups", help: "Also roll the app's groups back to the snapshots the update took of them.")
    ],
    examples: [
      .init(
        "Go back to the version and data from before the last update:", "appbox revert com.example.notes"),
      .init("The same, and the app's groups too:", "appbox revert com.example.notes --with-groups"),
    ],
    exitStatuses: [
      .noInput("No such app, or no update to revert (or it was reverted already)."), .damaged,
      .protectedData, .appBusy,
      .denied("The device's own repository is encrypted and its password is wrong."),
    ],
    environment: [.passwordFile, .keyCache] + EnvironmentVariable.progress)
  let app: String
  let withGroups: Bool
  init(_ arguments: ParsedArguments) throws {
    app = arguments.positional(0)!
    withGroups = arguments.flag("with-groups")
  }

  func run(_ context: CommandContext) throws -> CommandOutput {
    let session = try context.openDevice(mutating: true)
    let record = try session.lockApp(app)
    let repository = try context.defaultRepository()
    let report = try repository.revert(
      record, in: session, keychain: context.keychainSnapshotter, withGroups: withGroups,
      observer: ProgressBar(context))
    for warning in report.warnings { context.warn(warning) }
    var groupLines: [String] = []
    if !report.restoredGroups.isEmpty {
      groupLines.append("  groups     restored " + groupSnapshotList(report.restoredGroups))
      groupLines.append(
        "  saved      the replaced group data as " + groupSnapshotList(report.preRevertGroupSnapshots))
    } else if !report.preUpdateGroupSnapshots.isEmpty {
      groupLines.append(
        "  groups     kept as they are (--with-groups restores "
          + groupSnapshotList(report.preUpdateGroupSnapshots) + ")")
    }
    return CommandOutput(
      text: """
        Reverted \(report.bundleIdentifier) \(report.fromVersion) → \(report.toVersion)
          container  \(report.oldContainerID) → \(report.newContainerID)
          home       \(report.home)
          restored   snapshot \(report.restoredSnapshot) (taken before the update): \(report.files) files, \
        \(byteCount(report.bytes))
          saved      the replaced data as snapshot \(report.preRevertSnapshot)
        """ + groupLines.map { "\n" + $0 }.joined(),
      json: .object([
        ("app", .string(report.bundleIdentifier)),
        ("oldContainerID", .string(report.oldContainerID)),
        ("newContainerID", .string(report.newContainerID)),
        ("oldVersion", .string(report.fromVersion)), ("newVersion", .string(report.toVersion)),
        ("home", .string(report.home)), ("restoredSnapshot", .string(report.restoredSnapshot)),
        ("preRevertSnapshot", .string(report.preRevertSnapshot)), ("files", .int(report.files)),
        ("bytes", .int(report.bytes)), ("restoredGroups", groupSnapshotJSON(report.restoredGroups)),
        ("preRevertGroupSnapshots", groupSnapshotJSON(report.preRevertGroupSnapshots)),
      ]))
  }
}
