import AppboxBackup
import AppboxContainer
import AppboxCore
import AppboxRepository
import Foundation

extension CommandContext {
  /// The repository of --repo (which must exist), else the device's own when it has one.
  func existingRepository(_ arguments: ParsedArguments) throws -> Repository? {
    if arguments.value("repo") != nil { return try repository(arguments, create: false) }
    guard
      FileManager.default.fileExists(atPath: deviceRoot.backups + "/catalog.db")
        || FileManager.default.fileExists(atPath: deviceRoot.backups + "/config")
    else { return nil }
    return try repository(arguments, create: false)
  }

  /// The app named by bundle identifier or container id: installed, or (for history) a
  /// bundle identifier the repository has snapshots of. Otherwise "no such app" (66).
  func appWithHistory(_ name: String, session: DeviceSession, repository: Repository?) throws -> (
    record: AppRecord?, bundleIdentifier: String
  ) {
    if let record = try session.registry.appIfPresent(name) { return (record, record.bundleIdentifier) }
    if let repository, !(try repository.catalog.snapshots(app: name)).isEmpty { return (nil, name) }
    return (try session.app(name), name)
  }
}

struct WhyCommand: ParsableCommand {
  static let description = CommandDescription(
    name: "why",
    abstract:
      "Explain a path's backup decision: the rule, what the next backup does with it, and its history.",
    discussion: """
      Answers for paths that no longer exist from the app's snapshots, and for an app that is no
      longer installed. The next backup is predicted with the backup engine's own change
      detection (size, mtime, ctime, inode, mode), naming what differs.
      """,
    positionals: [
      appArgument,
      .init("PATH", help: "Relative to the home, such as Documents/big.bin or Library/Caches/x."),
    ],
    options: [repositoryOption] + repositoryAccessOptions,
    examples: [
      .init(
        "Why a file is (or is not) backed up, and what the next backup does with it:",
        "appbox why com.example.notes Documents/big.bin"),
      .init(
        "The same for a file deleted since, from the snapshots:",
        "appbox why com.example.notes Documents/old.pdf"),
    ],
    exitStatuses: [.noInput("No such app, and no snapshot of it either.")] + ExitCode.repository,
    environment: EnvironmentVariable.repository)
  let app: String
  let path: String
  let arguments: ParsedArguments
  init(_ arguments: ParsedArguments) throws {
    app = arguments.positional(0)!
    path = arguments.positional(1)!
    self.arguments = arguments
  }

  func run(_ context: CommandContext) throws -> CommandOutput {
    let session = try context.openDevice(mutating: false)
    let repository = try context.existingRepository(arguments)
    let target = try context.appWithHistory(app, session: session, repository: repository)
    let report =
      try target.record.map { try session.whyBackup(path, of: $0, repository: repository) }
      ?? repository!.whyBackup(path, ofUninstalled: target.bundleIdentifier)
    let history = report.history
    return CommandOutput(
      text: wrap(report.summary, width: 92),
      json: .object([
        ("app", .string(report.app)), ("path", .string(printablePath(report.path))),
        ("exists", .bool(report.exists)),
        ("type", .optional(report.type)), ("bytes", report.size.map(JSONValue.int) ?? .null),
        ("backedUp", .bool(report.backedUp)), ("rule", .string(report.rule.rawValue)),
        ("reason", .string(report.reason)),
        ("excludedBy", report.excludedBy.map { .string(printablePath($0)) } ?? .null),
        ("protectionClass", .optional(report.protectionClass)), ("unreadable", .optional(report.unreadable)),
        (
          "next",
          .object([
            ("action", .string(report.next.action.rawValue)), ("since", .optional(report.next.since)),
            ("changed", .array(report.next.changed.map(JSONValue.string))),
            ("explanation", .string(report.next.explanation)),
            (
              "inside",
              report.next.inside.map { inside in
                .object([
                  ("files", .int(inside.files)), ("unchanged", .int(inside.unchanged)),
                  ("changed", .int(inside.changed)), ("added", .int(inside.added)),
                  ("bytesToRead", .int(inside.bytesToRead)),
                  ("excludedFolders", .int(inside.excludedFolders)),
                ])
              } ?? .null
            ),
          ])
        ),
        (
          "history",
          .object([
            ("snapshots", .int(history.snapshots)), ("backups", .int(history.backups)),
            ("present", .int(history.present)), ("changes", .int(history.changes)),
            ("bytesAdded", .int(history.bytesAdded)), ("bytesPerBackup", .int(history.bytesPerBackup)),
            ("firstSeen", .optional(history.firstSeen)), ("lastSeen", .optional(history.lastSeen)),
            ("lastChanged", .optional(history.lastChanged)), ("gone", .bool(history.isGone)),
            ("lastUnreadable", .optional(history.lastUnreadable)),
          ])
        ),
        ("summary", .string(report.summary)),
      ]))
  }
}

struct AdviseCommand: ParsableCommand {
  static let description = CommandDescription(
    name: "advise",
    abstract:
      "Rank what makes an app's backups big and slow, from its snapshots, and flag the anti-patterns.",
    discussion: """
      Reads the app's last N snapshots from the catalog: files and directories of Documents and
      Library by bytes added per backup and by how often they change. Flags large files that
      change on most backups, regenerable-looking data in Documents (thumbnails, caches, logs,
      downloaded media), databases rewritten whole instead of in place, and data in Documents
      marked exclude-from-backup; each finding estimates the bytes per backup that moving it to
      Library/Caches saves, and prints the 'appbox exclude' command that marks it.
      """,
    positionals: [appArgument],
    options: [
      .init("last", value: "N", help: "How many of the latest snapshots to read (default: 20)."),
      .init("html", value: "FILE", help: "Also write the report as one self-contained HTML page."),
      repositoryOption,
    ] + repositoryAccessOptions,
    examples: [
      .init(
        "What makes an app's backups big and slow, over its last 30 snapshots:",
        "appbox advise com.example.notes --last 30"),
      .init(
        "The same as one self-contained page with a chart:",
        "appbox advise com.example.notes --html advice.html"),
    ],
    exitStatuses: [.noInput("No such app, or no snapshots of it.")] + ExitCode.repository,
    environment: EnvironmentVariable.repository)
  let app: String
  let last: Int
  let html: String?
  let arguments: ParsedArguments
  init(_ arguments: ParsedArguments) throws {
    app = arguments.positional(0)!
    last = try arguments.integer("last", range: 1...100_000) ?? AdviceOptions.defaultLast
    html = arguments.value("html")
    self.arguments = arguments
  }

  func run(_ context: CommandContext) throws -> CommandOutput {
    let session = try context.openDevice(mutating: false)
    guard let repository = try context.existingRepository(arguments) else {
      _ = try context.appWithHistory(app, session: session, repository: nil)
      throw BackupError(.notFound, "No snapshots of '\(app)': there is no backup repository yet")
    }
    let target = try context.appWithHistory(app, session: session, repository: repository)
    var isDirectory: ObjCBool = false
    if let html, FileManager.default.fileExists(atPath: html, isDirectory: &isDirectory),
      isDirectory.boolValue
    {
      throw SystemError("write", path: html, errno: .isDirectory)
    }
    let report = try repository.advise(app: target.bundleIdentifier, options: AdviceOptions(last: last))
    if let html {
      try AtomicFile.write(Array(report.html().utf8), toPath: html)
      context.note("wrote \(html)")
    }
    return CommandOutput(text: text(report), json: json(report))
  }

  func text(_ report: AdviceReport) -> String {
    let perBackup = report.backups > 0 ? report.bytesAdded / Int64(report.backups) : 0
    var lines = [
      "\(report.app): \(report.backups) backup\(report.backups == 1 ? "" : "s") measured over the last \(report.snapshots.count) snapshot\(report.snapshots.count == 1 ? "" : "s"), "
        + "\(byteCount(report.bytesAdded)) of data added (\(byteCount(perBackup)) per backup)"
    ]
    lines.append("")
    if report.findings.isEmpty {
      lines.append("Nothing to flag.")
    } else {
      lines.append("Findings, largest saving first:")
      for (index, finding) in report.findings.enumerated() {
        let saving =
          finding.kind == .excludedInDocuments
          ? "already excluded" : "saves about \(byteCount(finding.bytesPerBackup)) per backup"
        lines.append(
          "\(String(index + 1).leftPadded(to: 3)). \(printablePath(finding.path))\(finding.isDirectory ? "/" : "")  [\(finding.kind.rawValue)]  \(saving)"
        )
        lines.append("     \(finding.observation)")
        lines.append("     \(finding.advice)")
        if let command = finding.command { lines.append("     $ \(command)") }
      }
    }
    func rows(_ list: [PathActivity]) -> [[String]] {
      list.map {
        [
          printablePath($0.path), byteCount($0.bytesPerBackup), "\($0.changes) of \(report.backups)",
          $0.size.map(byteCount) ?? "gone",
        ]
      }
    }
    if !report.files.isEmpty {
      lines += ["", "Files by bytes added per backup:"]
      lines.append(table(["PATH", "PER BACKUP", "CHANGED", "SIZE NOW"], rows(report.files)))
      lines += ["", "Files by how often they change:"]
      lines.append(
        table(["PATH", "PER BACKUP", "CHANGED", "SIZE NOW"], rows(Array(report.frequentlyChanged.prefix(5)))))
    }
    if !report.directories.isEmpty {
      lines += ["", "Directories by bytes added per backup:"]
      lines.append(table(["PATH", "PER BACKUP", "CHANGED", "SIZE NOW"], rows(report.directories)))
    }
    return lines.joined(separator: "\n")
  }

  func json(_ report: AdviceReport) -> JSONValue {
    func activity(_ item: PathActivity) -> JSONValue {
      var members: [(String, JSONValue)] = [
        ("path", .string(printablePath(item.path))), ("changes", .int(item.changes)),
        ("bytesAdded", .int(item.bytesAdded)), ("bytesPerBackup", .int(item.bytesPerBackup)),
        ("bytes", item.size.map(JSONValue.int) ?? .null),
      ]
      if item.isDirectory {
        members.append(("files", item.files.map(JSONValue.int) ?? .null))
      } else {
        members.append(("lastChanged", .optional(item.lastChanged)))
      }
      return .object(members)
    }
    return .object([
      ("app", .string(report.app)), ("snapshots", .int(report.snapshots.count)),
      ("backups", .int(report.backups)),
      ("oldSnapshot", .optional(report.snapshots.first?.id)),
      ("newSnapshot", .optional(report.snapshots.last?.id)),
      ("bytesAdded", .int(report.bytesAdded)),
      ("bytesPerBackup", .int(report.backups > 0 ? report.bytesAdded / Int64(report.backups) : 0)),
      ("findings", .array(report.findings.map(findingJSON))),
      ("files", .array(report.files.map(activity))),
      ("frequentlyChanged", .array(report.frequentlyChanged.map(activity))),
      ("directories", .array(report.directories.map(activity))),
      (
        "chart",
        .object([
          ("groups", .array(report.chart.groups.map(JSONValue.string))),
          (
            "bars",
            .array(
              report.chart.bars.map { bar in
                .object([
                  ("snapshot", .string(bar.snapshot)), ("time", .string(timestamp(bar.time))),
                  ("bytes", .array(bar.bytes.map(JSONValue.int))),
                ])
              })
          ),
        ])
      ),
      ("html", .optional(html)),
    ])
  }
}

extension CommandContext {
  /// The advisor's top finding for `app` from the device's own repository, and the line
  /// `inspect` prints for it (also when there is none, or the repository cannot be read).
  func topAdvice(for app: AppRecord) -> (finding: Finding?, line: String) {
    do {
      guard
        FileManager.default.fileExists(atPath: deviceRoot.backups + "/catalog.db")
          || FileManager.default.fileExists(atPath: deviceRoot.backups + "/config")
      else {
        return (nil, "no backups yet")
      }
      let repository = try Repository(
        location: .directory(deviceRoot.backups),
        options: RepositoryOptions(
          environment: environment, cacheDirectory: repositoryCacheDirectory,
          password: Repository.passwordFile(environment), lockWait: lockWait))
      guard !(try repository.catalog.snapshots(app: app.bundleIdentifier)).isEmpty else {
        return (nil, "no backups yet")
      }
      let report = try repository.advise(app: app.bundleIdentifier)
      guard let top = report.findings.first else {
        return (nil, "nothing to flag over the last \(report.snapshots.count) snapshots")
      }
      return (
        top, "\(printablePath(top.path))\(top.isDirectory ? "/" : ""): \(top.observation) (appbox advise)"
      )
    } catch {
      return (nil, "unavailable: \(error)")
    }
  }
}

/// A finding as JSON (`advise` and `inspect`).
func findingJSON(_ finding: Finding) -> JSONValue {
  .object([
    ("kind", .string(finding.kind.rawValue)), ("path", .string(printablePath(finding.path))),
    ("isDirectory", .bool(finding.isDirectory)), ("looksLike", .optional(finding.regenerable?.rawValue)),
    ("bytesPerBackup", .int(finding.bytesPerBackup)), ("bytes", finding.size.map(JSONValue.int) ?? .null),
    ("changes", .int(finding.changes)), ("backups", .int(finding.backups)),
    ("observation", .string(finding.observation)), ("advice", .string(finding.advice)),
    ("command", .optional(finding.command)),
  ])
}

/// Breaks a paragraph into lines of at most `width` characters, at spaces.
func wrap(_ text: String, width: Int) -> String {
  var lines: [String] = []
  var line = ""
  for word in text.split(separator: " ", omittingEmptySubsequences: false) {
    if !line.isEmpty && line.count + 1 + word.count > width {
      lines.append(line)
      line = String(word)
    } else {
      line += (line.isEmpty ? "" : " ") + word
    }
  }
  if !line.isEmpty { lines.append(line) }
  return lines.joined(separator: "\n")
}

extension String {
  func leftPadded(to width: Int) -> String { String(repeating: " ", count: max(0, width - count)) + self }
}
