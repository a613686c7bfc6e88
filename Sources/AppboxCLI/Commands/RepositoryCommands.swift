import AppboxBackup
import AppboxContainer
import AppboxCore
import Foundation

struct DiffCommand: ParsableCommand {
  static let description = CommandDescription(
    name: "diff", abstract: "Show the paths added, removed and changed between two snapshots.",
    positionals: [
      .init("SNAPSHOT-A", help: "The older snapshot's id."),
      .init("SNAPSHOT-B", help: "The newer snapshot's id."),
    ],
    options: [repositoryOption])
  let old: String
  let new: String
  let arguments: ParsedArguments
  init(_ arguments: ParsedArguments) throws {
    old = arguments.positional(0)!
    new = arguments.positional(1)!
    self.arguments = arguments
  }

  func run(_ context: CommandContext) throws -> CommandOutput {
    let repository = try context.repository(arguments, create: false)
    let a = try repository.snapshot(old)
    let b = try repository.snapshot(new)
    let diff = try repository.diff(a, b)
    func show(_ path: [UInt8]) -> String { String(decoding: path, as: UTF8.self) }
    let lines =
      diff.added.map { ("+ ", $0) } + diff.removed.map { ("- ", $0) } + diff.changed.map { ("M ", $0) }
    let text =
      lines.isEmpty
      ? "No differences between \(a.id) and \(b.id)."
      : lines.sorted { $0.1.lexicographicallyPrecedes($1.1) }.map { $0.0 + Terminal.escape($0.1) }.joined(
        separator: "\n")
    return CommandOutput(
      text: text,
      json: .object([
        ("from", .string(a.id)), ("to", .string(b.id)),
        ("added", .array(diff.added.map { .string(show($0)) })),
        ("removed", .array(diff.removed.map { .string(show($0)) })),
        ("changed", .array(diff.changed.map { .string(show($0)) })),
      ]))
  }
}

struct CheckCommand: ParsableCommand {
  static let description = CommandDescription(
    name: "check", abstract: "Verify the repository: catalog against archives (sizes, checksums, members).",
    options: [
      .init("read-data", help: "Also hash every stored file and compare with its recorded SHA-256."),
      .init("rebuild-catalog", help: "First rebuild catalog.db from the archives' manifests."),
      repositoryOption,
    ])
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
      let path = arguments.value("repo") ?? context.deviceRoot.backups
      let rebuilt = try Repository.rebuildCatalog(at: path, environment: context.environment)
      for skipped in rebuilt.skipped { context.warn("archive skipped: \(skipped)") }
      lines.append(
        "Rebuilt the catalog from \(rebuilt.archives) archives: \(rebuilt.snapshots) snapshots, "
          + "\(rebuilt.trees) trees, \(rebuilt.blobs) blobs")
    }
    let repository = try context.repository(arguments, create: false)
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
    positionals: [.init("APP", help: "A bundle identifier.")],
    options: [
      .init("keep-last", value: "N", help: "How many of the newest snapshots to keep (required)."),
      repositoryOption,
    ])
  let app: String
  let keepLast: Int
  let arguments: ParsedArguments
  init(_ arguments: ParsedArguments) throws {
    app = arguments.positional(0)!
    guard let keep = try arguments.integer("keep-last", range: 1...Int.max) else {
      throw arguments.usage("missing --keep-last N")
    }
    keepLast = keep
    self.arguments = arguments
  }

  func run(_ context: CommandContext) throws -> CommandOutput {
    let repository = try context.repository(arguments, create: false)
    var name = app
    if UUID(uuidString: app) != nil,
      let record = try? context.openDevice(mutating: false).registry.appIfPresent(app)
    {
      name = record.bundleIdentifier
    }
    let report = try repository.forget(app: name, keepLast: keepLast, observer: ProgressBar(context))
    let text =
      report.removed.isEmpty
      ? "Nothing to forget: \(name) has \(report.kept.count) snapshots."
      : "Forgot \(report.removed.count) snapshots of \(name) (\(report.removed.map(\.id).joined(separator: ", "))); "
        + "kept \(report.kept.count); deleted \(report.deletedArchives.count) archives, "
        + "reclaimed \(byteCount(max(0, report.bytesReclaimed)))"
    return CommandOutput(
      text: text,
      json: .object([
        ("app", .string(name)), ("removed", .array(report.removed.map { .string($0.id) })),
        ("kept", .array(report.kept.map { .string($0.id) })),
        ("deletedArchives", .array(report.deletedArchives.map(JSONValue.string))),
        ("newArchive", .optional(report.newArchive)), ("bytesReclaimed", .int(report.bytesReclaimed)),
      ]))
  }
}

struct ExportCommand: ParsableCommand {
  static let description = CommandDescription(
    name: "export",
    abstract: "Write an app's data (Documents and Library, as a backup stores them) to one tar file.",
    positionals: [appArgument, .init("FILE.tar", help: "The archive to write (replaced atomically).")])
  let app: String
  let file: String
  init(_ arguments: ParsedArguments) throws {
    app = arguments.positional(0)!
    file = arguments.positional(1)!
  }

  func run(_ context: CommandContext) throws -> CommandOutput {
    let session = try context.openDevice(mutating: true)
    let record = try session.lockApp(app)
    let report = try session.exportData(of: record, to: file, observer: ProgressBar(context))
    if report.unreadable > 0 {
      context.warn(
        "the export is incomplete: " + unreadableSummary(report.unreadable, report.unreadablePaths))
    }
    return CommandOutput(
      text:
        "Exported \(record.bundleIdentifier): \(report.files) files, \(byteCount(report.bytes)) to \(file)",
      json: .object(
        [
          ("app", .string(record.bundleIdentifier)), ("archive", .string(file)),
          ("files", .int(report.files)),
          ("bytes", .int(report.bytes)),
        ] + incompleteMembers(report.unreadable, report.unreadablePaths)))
  }
}

struct ImportCommand: ParsableCommand {
  static let description = CommandDescription(
    name: "import",
    abstract: "Replace an app's Documents and Library with a tar archive's contents, all or nothing.",
    discussion: """
      The archive is untrusted: any member outside Documents and Library, link leaving the home,
      device file, setuid bit or oversized content refuses the whole archive (exit 65) and leaves
      the home unchanged. Limits: APPBOX_IMPORT_MAX_BYTES (and free space), APPBOX_IMPORT_MAX_ENTRIES.
      """,
    positionals: [
      appArgument, .init("FILE.tar", help: "The archive to import (tar, optionally compressed)."),
    ])
  let app: String
  let file: String
  init(_ arguments: ParsedArguments) throws {
    app = arguments.positional(0)!
    file = arguments.positional(1)!
  }

  func run(_ context: CommandContext) throws -> CommandOutput {
    let session = try context.openDevice(mutating: true)
    let record = try session.lockApp(app)
    let report = try session.importData(into: record, from: file, observer: ProgressBar(context))
    return CommandOutput(
      text: "Imported \(file) into \(record.bundleIdentifier): \(report.files) files, \(report.directories) "
        + "directories, \(byteCount(report.bytes))",
      json: .object([
        ("app", .string(record.bundleIdentifier)), ("archive", .string(file)), ("files", .int(report.files)),
        ("directories", .int(report.directories)), ("bytes", .int(report.bytes)),
      ]))
  }
}
