import AppboxBackup
import AppboxContainer
import AppboxCore
import AppboxRepository
import Foundation

struct DiffCommand: ParsableCommand {
  static let description = CommandDescription(
    name: "diff", abstract: "Show the paths added, removed and changed between two snapshots.",
    positionals: [
      .init("SNAPSHOT-A", help: "The older snapshot's id."),
      .init("SNAPSHOT-B", help: "The newer snapshot's id."),
    ],
    options: [repositoryOption] + repositoryAccessOptions,
    examples: [
      .init("What changed between two snapshots:", "appbox diff 1a2b3c4d 5e6f7a8b"),
      .init("Only the added paths, for a script:", "appbox --json diff 1a2b3c4d 5e6f7a8b | jq -r '.added[]'"),
    ],
    exitStatuses: [ExitCode.noSnapshot] + ExitCode.repository,
    environment: EnvironmentVariable.repository)
  let old: String
  let new: String
  let arguments: ParsedArguments
  init(_ arguments: ParsedArguments) throws {
    old = arguments.positional(0)!
    new = arguments.positional(1)!
    self.arguments = arguments
  }

  /// Streamed (StreamedOutput): text is one walk, every change as it is found; JSON is one walk
  /// too, `added` written as it goes and the other arrays kept until it ends (a walk per array
  /// when they would take more than StreamedJSON.addArrays's budget).
  func run(_ context: CommandContext) throws -> CommandOutput {
    let repository = try context.repository(arguments, create: false, readOnly: true)
    let a = try repository.snapshot(old)
    let b = try repository.snapshot(new)
    let output = context.stream()
    if context.globals.json {
      var json = StreamedJSON(output)
      try json.open(array: false)
      try json.add("oldSnapshot", .string(a.id))
      try json.add("newSnapshot", .string(b.id))
      // One read of the catalog for every walk, so that they see the same trees.
      let kinds: [SnapshotChange.Kind] = [.added, .removed, .changed]
      try repository.catalog.reading {
        try json.addArrays(["added", "removed", "changed"]) { wanted, emit in
          try repository.diff(a, b, kinds: Set(wanted.map { kinds[$0] })) { change in
            try emit(kinds.firstIndex(of: change.kind)!, .string(String(decoding: change.path, as: UTF8.self)))
          }
        }
      }
      try json.close()
      return CommandOutput()
    }
    let marks: [SnapshotChange.Kind: String] = [.added: "+ ", .removed: "- ", .changed: "M "]
    var count = 0
    try repository.catalog.reading {
      try repository.diff(a, b) { change in
        count += 1
        try output.line(marks[change.kind]! + Terminal.escape(change.path))
      }
    }
    if count == 0 { try output.line("No differences between \(a.id) and \(b.id).") }
    return CommandOutput()
  }
}

struct CheckCommand: ParsableCommand {
  static let description = CommandDescription(
    name: "check", abstract: "Verify the repository: catalog against archives (sizes, checksums, members).",
    options: [
      .init("read-data", help: "Also hash every stored file and compare with its recorded SHA-256."),
      .init("rebuild-catalog", help: "First rebuild the catalog from the repository's manifests."),
      repositoryOption,
    ] + repositoryAccessOptions,
    examples: [
      .init(
        "Check the device's repository, then every stored byte of another:", "appbox check",
        "appbox check --read-data --repo /srv/backups"),
      .init(
        "Rebuild a lost or damaged catalog from the manifests, then check:",
        "appbox check --rebuild-catalog"),
    ],
    exitStatuses: [
      .dataError(
        "The repository is damaged: the error and the warnings name what (a missing archive, a hash "
          + "that does not match)."),
      .noRepository,
    ] + ExitCode.repository,
    environment: EnvironmentVariable.repository + EnvironmentVariable.progress)
  let readData: Bool
  let rebuild: Bool
  let arguments: ParsedArguments
  init(_ arguments: ParsedArguments) throws {
    readData = arguments.flag("read-data")
    rebuild = arguments.flag("rebuild-catalog")
    self.arguments = arguments
  }

  func run(_ context: CommandContext) throws -> CommandOutput {
    var lines: [String] = []
    if rebuild {
      let rebuilt = try Repository.rebuildCatalog(
        try context.repositoryLocation(arguments),
        options: context.repositoryOptions(arguments, create: false))
      for skipped in rebuilt.skipped { context.warn("archive skipped: \(skipped)") }
      if rebuilt.keptFromPrevious > 0 {
        context.warn(
          "kept \(rebuilt.keptFromPrevious) snapshots the previous catalog knew, whose archives' manifests "
            + "cannot be read")
      }
      lines.append(
        "Rebuilt the catalog from \(rebuilt.archives) archives: \(rebuilt.snapshots) snapshots, "
          + "\(rebuilt.trees) trees, \(rebuilt.blobs) blobs")
    }
    let repository = try context.repository(arguments, create: false, readOnly: true)
    let report = try repository.check(readData: readData, observer: ProgressBar(context))
    for note in report.notes { context.note("note: \(note)") }
    lines.append(
      "Checked \(report.snapshots) snapshots, \(report.archives) archives, \(report.trees) trees, "
        + "\(report.blobs) blobs" + (readData ? ", \(byteCount(report.bytesVerified)) of data" : ""))
    lines += report.problems.map { "problem: \($0)" }
    lines.append(report.isClean ? "No problems found." : "\(report.problems.count) problems found.")
    return CommandOutput(
      text: lines.joined(separator: "\n"),
      json: .object([
        ("ok", .bool(report.isClean)), ("snapshots", .int(report.snapshots)),
        ("archives", .int(report.archives)),
        ("trees", .int(report.trees)), ("blobs", .int(report.blobs)),
        ("bytesVerified", .int(report.bytesVerified)),
        ("problems", .array(report.problems.map(JSONValue.string))),
      ]),
      exitStatus: report.isClean ? 0 : ExitStatus.dataError)
  }
}

struct ForgetCommand: ParsableCommand {
  static let description = CommandDescription(
    name: "forget", abstract: "Drop an app's older snapshots and reclaim the space only they used.",
    discussion: """
      The policy is restic's: a snapshot stays when any rule keeps it. --keep-last N keeps the N
      newest; --keep-hourly/daily/weekly/monthly/yearly N keep the newest snapshot of each of the
      N most recent hours, days, ISO weeks, months or years (in UTC) that have snapshots;
      --keep-within D keeps those taken within D (1y5m7d2h) of the newest snapshot (not of now);
      --keep-tag T keeps those labelled T (repeat for more tags). --dry-run prints what would go
      and what would stay, and why, and changes nothing.
      """,
    positionals: [.init("APP", help: "A bundle identifier.")],
    options: [
      .init("keep-last", value: "N", help: "Keep the N newest snapshots."),
      .init(
        "keep-hourly", value: "N", help: "Keep the newest snapshot of each of the last N hours with one."),
      .init("keep-daily", value: "N", help: "Keep the newest snapshot of each of the last N days with one."),
      .init(
        "keep-weekly", value: "N", help: "Keep the newest snapshot of each of the last N weeks with one."),
      .init(
        "keep-monthly", value: "N", help: "Keep the newest snapshot of each of the last N months with one."),
      .init(
        "keep-yearly", value: "N", help: "Keep the newest snapshot of each of the last N years with one."),
      .init(
        "keep-within", value: "DURATION", help: "Keep snapshots within DURATION (1y5m7d2h) of the newest one."
      ),
      .init("keep-tag", value: "T", help: "Keep snapshots labelled T (repeatable)."),
      .init("dry-run", help: "Print what would be forgotten and what kept, and why; change nothing."),
      repositoryOption,
    ] + repositoryAccessOptions,
    examples: [
      .init("Keep an app's three newest snapshots:", "appbox forget com.example.notes --keep-last 3"),
      .init(
        "A week of dailies and a year of monthlies, rehearsed first:",
        "appbox forget com.example.notes --keep-daily 7 --keep-monthly 12 --dry-run",
        "appbox forget com.example.notes --keep-daily 7 --keep-monthly 12 --keep-tag pre-update"),
    ],
    exitStatuses: [.usage("Malformed, or no --keep-* rule given."), .noSnapshot] + ExitCode.repository,
    environment: EnvironmentVariable.repository + [.pruneGrace, .lockSettle, .lockStale]
      + EnvironmentVariable.progress)
  let app: String
  let policy: RetentionPolicy
  let dryRun: Bool
  let arguments: ParsedArguments
  init(_ arguments: ParsedArguments) throws {
    app = arguments.positional(0)!
    var policy = RetentionPolicy()
    policy.last = try arguments.integer("keep-last", range: 1...Int.max) ?? 0
    policy.hourly = try arguments.integer("keep-hourly", range: 1...Int.max) ?? 0
    policy.daily = try arguments.integer("keep-daily", range: 1...Int.max) ?? 0
    policy.weekly = try arguments.integer("keep-weekly", range: 1...Int.max) ?? 0
    policy.monthly = try arguments.integer("keep-monthly", range: 1...Int.max) ?? 0
    policy.yearly = try arguments.integer("keep-yearly", range: 1...Int.max) ?? 0
    if let text = arguments.value("keep-within") {
      guard let duration = RetentionDuration(parsing: text) else {
        throw arguments.usage("--keep-within takes a duration such as 7d, 2h or 1y6m, not '\(text)'")
      }
      policy.within = duration
    }
    policy.tags = arguments.values["keep-tag"] ?? []
    guard !policy.isEmpty else {
      throw arguments.usage(
        "missing --keep-last N (or --keep-hourly/daily/weekly/monthly/yearly N, --keep-within D, --keep-tag T)"
      )
    }
    self.policy = policy
    dryRun = arguments.flag("dry-run")
    self.arguments = arguments
  }

  func run(_ context: CommandContext) throws -> CommandOutput {
    let repository = try context.repository(arguments, create: false, readOnly: dryRun)
    var name = app
    if UUID(uuidString: app) != nil,
      let record = try? context.openDevice(mutating: false).registry.appIfPresent(app)
    {
      name = record.bundleIdentifier
    }
    let outcome = try repository.forget(
      app: name, policy: policy, dryRun: dryRun, observer: ProgressBar(context))
    let decisions = outcome.decisions.map { decision -> JSONValue in
      .object([
        ("snapshot", .string(decision.snapshot.id)), ("time", .string(timestamp(decision.snapshot.time))),
        ("keep", .bool(decision.keep)), ("reasons", .array(decision.reasons.map(JSONValue.string))),
      ])
    }
    guard let report = outcome.report else {
      let kept = outcome.decisions.filter(\.keep)
      let removed = outcome.decisions.filter { !$0.keep }
      var lines = ["Would keep \(kept.count) snapshots of \(name) and forget \(removed.count):"]
      lines += outcome.decisions.map { decision in
        "\(decision.keep ? "keep  " : "forget") \(decision.snapshot.id)  \(timestamp(decision.snapshot.time))"
          + (decision.snapshot.tag.map { "  [\(Terminal.escape($0))]" } ?? "")
          + (decision.keep ? "  " + decision.reasons.joined(separator: ", ") : "")
      }
      return CommandOutput(
        text: lines.joined(separator: "\n"),
        json: .object([
          ("app", .string(name)), ("dryRun", .bool(true)),
          ("removed", .array(removed.map { .string($0.snapshot.id) })),
          ("kept", .array(kept.map { .string($0.snapshot.id) })), ("decisions", .array(decisions)),
        ]))
    }
    var text =
      report.removed.isEmpty
      ? "Nothing to forget: \(name) has \(report.kept.count) snapshots."
      : "Forgot \(report.removed.count) snapshots of \(name) (\(report.removed.map(\.id).joined(separator: ", "))); "
        + "kept \(report.kept.count); deleted \(report.deletedArchives.count) archives, "
        + "reclaimed \(byteCount(max(0, report.bytesReclaimed)))"
    if !report.markedArchives.isEmpty {
      text += "\nMarked \(report.markedArchives.count) archives for deletion after the grace period"
    }
    if report.removed.isEmpty && !report.deletedArchives.isEmpty {
      text +=
        "\nDeleted \(report.deletedArchives.count) archives marked earlier, reclaimed "
        + byteCount(max(0, report.bytesReclaimed))
    }
    return CommandOutput(
      text: text,
      json: .object([
        ("app", .string(name)), ("removed", .array(report.removed.map { .string($0.id) })),
        ("kept", .array(report.kept.map { .string($0.id) })),
        ("deletedArchives", .array(report.deletedArchives.map(JSONValue.string))),
        ("newArchive", .optional(report.newArchive)), ("bytesReclaimed", .int(report.bytesReclaimed)),
        ("markedArchives", .array(report.markedArchives.map(JSONValue.string))),
        ("decisions", .array(decisions)),
      ]))
  }
}

struct ExportCommand: ParsableCommand {
  static let description = CommandDescription(
    name: "export",
    abstract:
      "Write an app's data (Documents and Library, as a backup stores them) to a tar file or an .xcappdata package.",
    discussion: """
      A tar (pax, as GNU tar reads it) is replaced atomically; FILE may be an existing directory,
      which then gets <bundle id>.tar. An .xcappdata package is Xcode's app-data directory
      (AppDataInfo.plist, AppData/Documents, AppData/Library, AppData/tmp), and replaces only an
      existing package. Files with holes stay sparse (the size reported counts them whole, as
      backup does). FIFOs and sockets cannot be exported: they are left out and counted (a
      warning, and skippedSpecialFiles in JSON).
      """,
    positionals: [
      appArgument,
      .init(
        "FILE", help: "The tar file (or a directory to write <bundle id>.tar in), or .xcappdata directory."),
    ],
    options: [
      .init(
        "format", help: "tar (the default) or xcappdata (the default when FILE ends in .xcappdata).",
        choices: ["tar", "xcappdata"])
    ],
    examples: [
      .init(
        "Documents and Library as a pax tar, then as Xcode's package:",
        "appbox export com.example.notes data.tar", "appbox export com.example.notes Notes.xcappdata")
    ],
    exitStatuses: [.noApp, .protectedData, .appBusy],
    environment: EnvironmentVariable.progress)
  let app: String
  let file: String
  let packageFormat: Bool
  init(_ arguments: ParsedArguments) throws {
    app = arguments.positional(0)!
    file = arguments.positional(1)!
    packageFormat = arguments.value("format").map { $0 == "xcappdata" } ?? file.hasSuffix(".xcappdata")
  }

  func run(_ context: CommandContext) throws -> CommandOutput {
    let session = try context.openDevice(mutating: true)
    let record = try session.lockApp(app)
    let file = packageFormat ? self.file : try tarPath(for: record)
    let report =
      packageFormat
      ? try session.exportAppData(of: record, to: file, observer: ProgressBar(context))
      : try session.exportData(of: record, to: file, observer: ProgressBar(context))
    if report.unreadable > 0 {
      context.warn(
        "the export is incomplete: " + unreadableSummary(report.unreadable, report.unreadablePaths))
    }
    return CommandOutput(
      text:
        "Exported \(record.bundleIdentifier): \(report.files) files, \(byteCount(report.bytes)) to \(file)",
      json: .object(
        [
          ("app", .string(record.bundleIdentifier)), ("output", .string(file)),
          ("format", .string(packageFormat ? "xcappdata" : "tar")), ("files", .int(report.files)),
          ("bytes", .int(report.bytes)), ("skippedSpecialFiles", .int(report.skippedSpecialFiles.count)),
        ] + incompleteMembers(report.unreadable, report.unreadablePaths)))
  }
}

extension ExportCommand {
  /// The tar to write: FILE, or when FILE is an existing directory, `FILE/<bundle id>.tar` in it
  /// (as `cp` copies into a directory). A directory where the tar would go is refused before
  /// anything is written (64), rather than failing at the final rename.
  func tarPath(for record: AppRecord) throws -> String {
    func isDirectory(_ path: String) -> Bool {
      var isDirectory: ObjCBool = false
      return FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) && isDirectory.boolValue
    }
    guard isDirectory(file) else { return file }
    let inside = (file.hasSuffix("/") ? file : file + "/") + record.bundleIdentifier + ".tar"
    if isDirectory(inside) {
      throw UsageError(
        "'\(inside)' is a directory: name the tar file to write (appbox export APP FILE.tar)",
        commandPath: "export")
    }
    return inside
  }
}

struct ImportCommand: ParsableCommand {
  static let description = CommandDescription(
    name: "import",
    abstract:
      "Replace an app's Documents and Library with an archive's or .xcappdata package's contents, all or nothing.",
    discussion: """
      Accepts a tar in any compression libarchive reads (gzip, bzip2, xz, lzma, lzip, lz4, zstd,
      compress, lzop, lrzip, grzip), of Documents and Library or of a whole home (the bundle, tmp
      and Library/Caches are skipped, in one warning line), and Xcode .xcappdata packages, as a
      directory or a tar. The source is untrusted and read twice: first every member is checked,
      then what is built must match what was checked. Any member outside Documents and Library,
      hard link leaving the archive, write through a symlink, device file, setuid bit or oversized
      content refuses it (exit 65) and leaves the home unchanged; symlinks are kept as they are,
      never followed. An archive libarchive warns about is refused unless --lenient; a source with
      nothing to import is refused unless --allow-empty.
      """,
    positionals: [
      appArgument, .init("FILE", help: "The archive (tar, optionally compressed) or .xcappdata directory."),
    ],
    options: [
      .init(
        "lenient", help: "Import an archive libarchive warns about (damaged headers), printing each warning."),
      .init(
        "allow-empty", help: "Accept a source with nothing to import: Documents and Library end up empty."),
      .init(
        "max-members", value: "N",
        help: "Refuse sources with more members (default 1000000, or APPBOX_IMPORT_MAX_ENTRIES)."),
      .init(
        "max-size", value: "BYTES",
        help:
          "Refuse files adding up to more, holes included (K/M/G/T suffixes; default 64G, or APPBOX_IMPORT_MAX_BYTES)."
      ),
    ],
    examples: [
      .init(
        "Replace an app's data from a tar, then from Xcode's package:",
        "appbox import com.example.notes data.tar", "appbox import com.example.notes Notes.xcappdata"),
      .init(
        "A damaged archive, importing what libarchive can read:",
        "appbox import com.example.notes damaged.tar.gz --lenient"),
    ],
    exitStatuses: [
      .dataError(
        "The source is refused: a member outside Documents and Library, a link out, a device file, "
          + "too many members or bytes; the home is unchanged."),
      .noInput("No such app, or no such archive or package."), .protectedData, .appBusy,
    ],
    environment: [.importMaxEntries, .importMaxBytes] + EnvironmentVariable.progress)
  let app: String
  let file: String
  let lenient: Bool
  let allowEmpty: Bool
  let maxMembers: Int?
  let maxSize: Int64?
  init(_ arguments: ParsedArguments) throws {
    app = arguments.positional(0)!
    file = arguments.positional(1)!
    lenient = arguments.flag("lenient")
    allowEmpty = arguments.flag("allow-empty")
    maxMembers = try arguments.integer("max-members", range: 1...Int.max)
    maxSize = try arguments.value("max-size").map { text in
      guard let bytes = parseByteCount(text), bytes > 0 else {
        throw arguments.usage("--max-size needs a size such as 500M or 20G, not '\(text)'")
      }
      return bytes
    }
  }

  func run(_ context: CommandContext) throws -> CommandOutput {
    let session = try context.openDevice(mutating: true)
    let record = try session.lockApp(app)
    var limits = ImportLimits.from(environment: context.environment)
    if let maxMembers { limits.maxEntries = maxMembers }
    if let maxSize { limits.maxBytes = maxSize }
    let report = try session.importData(
      into: record, from: file,
      options: ImportOptions(limits: limits, lenient: lenient, allowEmpty: allowEmpty),
      observer: ProgressBar(context))
    for warning in report.cleanupWarnings { context.warn(warning) }
    var text =
      "Imported \(file) into \(record.bundleIdentifier): \(report.files) files, \(report.directories) "
      + "directories, \(byteCount(report.bytes))"
    if !report.warnings.isEmpty {
      text +=
        " (\(report.warnings.count) archive warning\(report.warnings.count == 1 ? "" : "s") accepted with --lenient)"
    }
    return CommandOutput(
      text: text,
      json: .object([
        ("app", .string(record.bundleIdentifier)), ("input", .string(file)),
        ("format", .string(report.format == .xcappdata ? "xcappdata" : "tar")), ("files", .int(report.files)),
        ("directories", .int(report.directories)), ("bytes", .int(report.bytes)),
        ("warnings", .int(report.warnings.count)),
        (
          "skipped",
          .array(report.skipped.map { .object([("path", .string($0.path)), ("members", .int($0.members))]) })
        ),
      ]))
  }
}

/// "500M", "20G", "1048576": bytes, with binary K/M/G/T suffixes; nil when malformed.
func parseByteCount(_ text: String) -> Int64? {
  let units: [Character: Int64] = ["K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40]
  var digits = Substring(text.uppercased())
  if digits.hasSuffix("IB")
    || digits.hasSuffix("B") && digits.count > 1 && units[digits.dropLast().last!] != nil
  {
    digits = digits.dropLast(digits.hasSuffix("IB") ? 2 : 1)
  }
  var scale: Int64 = 1
  if let last = digits.last, let unit = units[last] {
    scale = unit
    digits = digits.dropLast()
  }
  guard let value = Int64(digits), value >= 0 else { return nil }
  let (bytes, overflow) = value.multipliedReportingOverflow(by: scale)
  return overflow ? nil : bytes
}
