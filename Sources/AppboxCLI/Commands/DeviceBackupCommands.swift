// iOS device backups on the command line: `import-backup` (a Finder, iTunes or idevicebackup2
// backup folder into snapshots) and `export-backup` (apps' data, or a snapshot, as such a
// folder). The engines are in AppboxBackup/Portable/DeviceBackup; docs/ios-backups.md is the
// format as implemented.

import AppboxBackup
import AppboxContainer
import AppboxCore
import AppboxRepository
import Foundation
import Glibc

extension EnvironmentVariable {
  static let deviceBackupRounds = EnvironmentVariable(
    "APPBOX_DEVICE_BACKUP_ROUNDS",
    "The PBKDF2 rounds (both steps) an encrypted export's keybag asks for (default iOS's: 10000000, then 10000)."
  )
}

/// The repository options without --password-file, which these commands take for the
/// device backup's password (an encrypted repository's comes from $APPBOX_PASSWORD_FILE or
/// the terminal).
private let repositoryOptionsForDeviceBackups = repositoryAccessOptions.filter { $0.name != "password-file" }

/// The arguments as `context.repository` reads them, without the device backup's password.
private func repositoryArguments(_ arguments: ParsedArguments) -> ParsedArguments {
  var copy = arguments
  copy.values["password-file"] = nil
  return copy
}

/// The device backup's password: --password-file's first line, else asked on a terminal,
/// else none.
private func deviceBackupPassword(_ file: String?, context: CommandContext, confirm: Bool = false) throws
  -> [UInt8]?
{
  let warn: @Sendable (String) -> Void = { [context] in context.warn($0) }
  if let file { return try readPassword(file, prompt: "Device backup password", warn: warn) }
  guard isatty(0) == 1 else { return nil }
  let password = askWithoutEcho("Device backup password")
  if confirm, askWithoutEcho("The same password again") != password {
    throw UsageError("the two passwords differ", commandPath: "export-backup")
  }
  return password
}

/// Exit statuses of `mine`, then those of `shared` that `mine` does not already explain.
private func statuses(_ mine: [ExitCode], _ shared: [ExitCode]) -> [ExitCode] {
  mine + shared.filter { code in !mine.contains { $0.status == code.status } }
}

struct ImportBackupCommand: ParsableCommand {
  static let description = CommandDescription(
    name: "import-backup",
    abstract:
      "Read apps' data out of an iOS device backup folder (Finder, iTunes, idevicebackup2) into snapshots.",
    discussion: """
      Each chosen app's domain (AppDomain-<bundle id>) becomes a snapshot of that app, tagged
      ios-backup: its Documents and Library with their modes and modification times (whole
      seconds, as the format keeps them), each file's protection class carried over; then
      'appbox restore APP --snapshot ID' puts it in a home. The app groups of an installed app
      (AppDomainGroup-<id>) become group snapshots too; with --all, every app and every group
      this device has. An app that is not installed gets a snapshot all the same, which waits:
      restore names the bundle to install first. Keychain items and extensions' containers are
      not imported. The folder is untrusted input, read once and never written: a path with
      '..', an absolute path, a symlink in the folder, a path given twice, a size beyond the
      limits or a damaged file refuses that app (exit 65, naming the file) and records nothing
      for it; a file the manifest lists but the folder lacks is left out and makes the snapshot
      incomplete (a warning names it). An encrypted backup needs its password (wrong: 77).
      """,
    positionals: [.init("DIR", help: "The backup folder (the one holding Manifest.plist and Manifest.db).")],
    options: [
      .init(
        "password-file", value: "F",
        help: "An encrypted backup's password from F's first line (default: asked on the terminal)."),
      .init("app", value: "BUNDLE", help: "Import this app's domain (repeat for more)."),
      .init("all", help: "Import every app in the backup, and every app group this device has."),
      .init(
        "list", help: "Only show the apps, app groups and extensions the backup holds, with files and bytes."),
      .init(
        "max-members", value: "N",
        help: "Refuse a domain with more rows (default 1000000, or APPBOX_IMPORT_MAX_ENTRIES)."),
      .init(
        "max-size", value: "BYTES",
        help:
          "Refuse a domain whose files add up to more (K/M/G/T suffixes; default 64G, or APPBOX_IMPORT_MAX_BYTES)."
      ),
      repositoryOption,
    ] + repositoryOptionsForDeviceBackups,
    examples: [
      .init(
        "See what a backup holds, then import one app and restore it:",
        "appbox import-backup ~/Backup/00008030-0011 --list",
        "appbox import-backup ~/Backup/00008030-0011 --app com.example.notes",
        "appbox restore com.example.notes --snapshot 1a2b3c4d"),
      .init(
        "Every app of an encrypted backup:",
        "appbox import-backup ~/Backup/00008030-0011 --all --password-file ~/.backup-password"),
    ],
    exitStatuses: statuses(
      [
        .dataError(
          "The backup folder is refused: a damaged Manifest.plist, keybag, Manifest.db or file (named), or a hostile path."
        ),
        .noInput("No such backup folder, or the backup holds no such app; or no such repository."),
        .denied("A wrong password for an encrypted backup, or none given; or a wrong repository password."),
        .busy("Another appbox holds the app's, the device's or the repository's lock (--wait)."),
      ], ExitCode.repository),
    environment: [.passwordFile, .importMaxEntries, .importMaxBytes] + EnvironmentVariable.repository
      + EnvironmentVariable.progress)

  let folder: String
  let passwordFile: String?
  let apps: [String]
  let all: Bool
  let list: Bool
  let maxMembers: Int?
  let maxSize: Int64?
  let arguments: ParsedArguments

  init(_ arguments: ParsedArguments) throws {
    folder = arguments.positional(0)!
    maxMembers = try arguments.integer("max-members", range: 1...Int.max)
    maxSize = try arguments.value("max-size").map { text in
      guard let bytes = parseByteCount(text), bytes > 0 else {
        throw arguments.usage("--max-size needs a size such as 500M or 20G, not '\(text)'")
      }
      return bytes
    }
    passwordFile = arguments.value("password-file")
    apps = arguments.values["app"] ?? []
    all = arguments.flag("all")
    list = arguments.flag("list")
    self.arguments = arguments
    if list && (all || !apps.isEmpty) {
      throw arguments.usage("--list shows the backup: give it without --app or --all")
    }
    if all && !apps.isEmpty { throw arguments.usage("give --app BUNDLE or --all, not both") }
    if !list && !all && apps.isEmpty {
      throw arguments.usage("choose what to import: --app BUNDLE, --all, or --list to see")
    }
  }

  func run(_ context: CommandContext) throws -> CommandOutput {
    let session = try context.openDevice(mutating: !list)
    let backup = try DeviceBackup(at: folder) { try deviceBackupPassword(passwordFile, context: context) }
    if list { return try listing(backup) }
    let domains = Set(try backup.domains())
    let inBackup = domains.compactMap { name -> String? in
      name.hasPrefix("AppDomain-") ? String(name.dropFirst("AppDomain-".count)) : nil
    }.sorted()
    for app in apps where !domains.contains("AppDomain-" + app) {
      throw BackupError(
        .notFound,
        "The device backup '\(folder)' holds no app '\(app)'"
          + (inBackup.isEmpty
            ? ""
            : " (it holds \(inBackup.prefix(8).joined(separator: ", "))\(inBackup.count > 8 ? ", …" : ""))"))
    }
    var wanted: [(name: String, isGroup: Bool)] = (all ? inBackup : apps).map { ($0, false) }
    var groups: [String] = []
    if all {
      groups = domains.filter { $0.hasPrefix("AppDomainGroup-") }.map {
        String($0.dropFirst("AppDomainGroup-".count))
      }.sorted()
    } else {
      for app in apps {
        for group in try session.registry.groups(of: app)
        where domains.contains("AppDomainGroup-" + group.identifier) {
          if !groups.contains(group.identifier) { groups.append(group.identifier) }
        }
      }
    }
    var skipped: [(String, String)] = []
    for group in groups {
      if try session.registry.groupIfPresent(group) != nil {
        wanted.append((group, true))
      } else {
        skipped.append(
          (
            "AppDomainGroup-" + group,
            "this device has no app group \(group): install an app of it, then import again"
          ))
      }
    }
    // Extensions' containers: those of every app with --all, else those named after a chosen app.
    for domain in domains.sorted() where domain.hasPrefix("AppDomainPlugin-") {
      let identifier = String(domain.dropFirst("AppDomainPlugin-".count))
      if all || apps.contains(where: { identifier.hasPrefix($0 + ".") }) {
        skipped.append((domain, "appbox has no containers for app extensions"))
      }
    }
    for (domain, reason) in skipped { context.warn("\(domain) was not imported: \(reason)") }
    // The device's own repository is made on first use; one named by --repo must exist.
    let repository = try context.repository(
      repositoryArguments(arguments), create: arguments.value("repo") == nil)
    var limits = ImportLimits.from(environment: context.environment)
    if let maxMembers { limits.maxEntries = maxMembers }
    if let maxSize { limits.maxBytes = maxSize }
    let progress = ProgressBar(context)
    var results: [JSONValue] = []
    var lines: [String] = []
    var firstFailure: Int32?
    for (name, isGroup) in wanted {
      do {
        let result: DeviceBackupImportResult
        if isGroup {
          let group = try lockedGroup(name, in: session)
          defer { session.unlockGroup(group.identifier) }
          result = try repository.importSnapshot(
            of: .group(group), from: backup, in: session, limits: limits, observer: progress)
        } else {
          let installed = try session.lockApp(bundleIdentifier: name)
          defer { if let installed { session.unlockApp(installed) } }
          result = try repository.importSnapshot(
            of: .app(name, installed: installed), from: backup, in: session, limits: limits,
            observer: progress)
        }
        let snapshot = result.snapshot
        lines.append(
          "\(snapshot.app): snapshot \(snapshot.id), \(snapshot.files) files, \(byteCount(snapshot.bytes)) "
            + "(from \(result.domain))")
        if result.isWaiting {
          context.warn(
            "\(snapshot.app) is not installed on this device: snapshot \(snapshot.id) waits for it; install its bundle, "
              + "then 'appbox restore \(snapshot.app) --snapshot \(snapshot.id)'")
        }
        if snapshot.isIncomplete {
          context.warn(
            "snapshot \(snapshot.id) of \(snapshot.app) is incomplete: "
              + unreadableSummary(snapshot.unreadable, snapshot.unreadablePaths))
        }
        if !result.skipped.isEmpty {
          let summary = result.skipped.map { "\($0.path) (\($0.members))" }.joined(separator: ", ")
          context.note("\(result.domain): left out \(summary)")
        }
        results.append(
          .object(
            [
              ("snapshot", .string(snapshot.id)), ("app", .string(snapshot.app)),
              ("kind", .string(isGroup ? "group" : "app")), ("domain", .string(result.domain)),
              ("files", .int(snapshot.files)), ("bytes", .int(snapshot.bytes)),
              ("archive", .string(result.archivePath)), ("waiting", .bool(result.isWaiting)),
              (
                "skipped",
                .array(
                  result.skipped.map { .object([("path", .string($0.path)), ("members", .int($0.members))]) })
              ),
            ] + incompleteMembers(snapshot.unreadable, snapshot.unreadablePaths)))
      } catch {
        guard wanted.count > 1 else { throw error }
        firstFailure = firstFailure ?? ExitStatus.of(error)
        context.report(error, prefix: "import of \(name) failed: ")
        results.append(.object([("app", .string(name)), ("error", errorJSON(error))]))
      }
    }
    return CommandOutput(
      text: lines.joined(separator: "\n"),
      json: .object([
        ("backup", .string(folder)), ("encrypted", .bool(backup.isEncrypted)), ("snapshots", .array(results)),
        (
          "notImported",
          .array(skipped.map { .object([("domain", .string($0.0)), ("reason", .string($0.1))]) })
        ),
      ]),
      exitStatus: firstFailure ?? 0)
  }

  private func listing(_ backup: DeviceBackup) throws -> CommandOutput {
    let listing = try backup.listing()
    var text =
      "Device backup of '\(backup.deviceName)'"
      + (backup.productVersion.isEmpty ? "" : " (iOS \(backup.productVersion))")
      + (backup.isEncrypted ? ", encrypted" : "") + "\n"
    text +=
      listing.domains.isEmpty
      ? "No apps, app groups or extensions."
      : table(
        ["KIND", "IDENTIFIER", "FILES", "BYTES"],
        listing.domains.map {
          [$0.kind.rawValue, Terminal.sanitize($0.identifier), String($0.files), byteCount($0.bytes)]
        })
    if listing.systemEntries > 0 {
      text += "\n\(listing.systemEntries) entries in \(listing.systemDomains) system domains (never imported)"
    }
    return CommandOutput(
      text: text,
      json: .object([
        ("backup", .string(folder)), ("encrypted", .bool(backup.isEncrypted)),
        ("deviceName", .string(backup.deviceName)), ("udid", .string(backup.deviceIdentifier)),
        ("productVersion", .string(backup.productVersion)),
        (
          "domains",
          .array(
            listing.domains.map {
              .object([
                ("kind", .string($0.kind.rawValue)), ("identifier", .string($0.identifier)),
                ("files", .int($0.files)),
                ("directories", .int($0.directories)), ("bytes", .int($0.bytes)),
              ])
            })
        ),
        ("systemDomains", .int(listing.systemDomains)), ("systemEntries", .int(listing.systemEntries)),
      ]))
  }
}

struct ExportBackupCommand: ParsableCommand {
  static let description = CommandDescription(
    name: "export-backup",
    abstract: "Write apps' data (or a snapshot's) as an iOS device backup folder, plain or encrypted.",
    discussion: """
      The folder is what Finder, iTunes and idevicebackup2 write: Info.plist, Status.plist,
      Manifest.plist, Manifest.db and each file at XX/<fileID>, readable by the tools that read
      those (forensic and backup viewers, import-backup). Each app's current Documents and
      Library (not Library/Caches, nothing marked 'exclude from backup') become its
      AppDomain-<bundle id>, with modes, whole-second modification times and protection
      classes; its app groups' containers come along as AppDomainGroup-<id>. With --snapshot,
      that snapshot's data instead (one app or group). With --encrypt, every file is encrypted
      under its own key, the keys under a keybag the password unlocks (PBKDF2 as iOS does it),
      and Manifest.db under its own key. DIR must not exist; it appears whole or not at all.
      """,
    positionals: [
      .init(
        "APP", help: "Bundle identifiers or container ids, or app group identifiers (group.<id>).",
        repeating: true),
      .init("DIR", help: "The backup folder to write (it must not exist)."),
    ],
    options: [
      .init("encrypt", help: "Write an encrypted backup (the password from --password-file, else asked)."),
      .init("password-file", value: "F", help: "With --encrypt: the password from F's first line."),
      .init(
        "snapshot", value: "ID",
        help: "Export this snapshot of the (one) app or group instead of its current data."),
      repositoryOption,
    ] + repositoryOptionsForDeviceBackups,
    examples: [
      .init("One app's data as a plain backup:", "appbox export-backup com.example.notes ~/Backup/notes"),
      .init(
        "Encrypted, from a snapshot:",
        "appbox export-backup com.example.notes ~/Backup/notes-old --snapshot 1a2b3c4d --encrypt --password-file ~/.pw"
      ),
    ],
    exitStatuses: statuses(
      [
        .cannotCreate("DIR exists already, or cannot be written."), ExitCode.noSnapshot, .protectedData,
        .busy("Another appbox holds the app's, the device's or the repository's lock (--wait)."),
      ], ExitCode.repository),
    environment: [.passwordFile, .deviceBackupRounds] + EnvironmentVariable.repository
      + EnvironmentVariable.progress)

  let apps: [String]
  let folder: String
  let encrypt: Bool
  let passwordFile: String?
  let snapshot: String?
  let arguments: ParsedArguments

  init(_ arguments: ParsedArguments) throws {
    guard arguments.positionals.count >= 2 else {
      throw arguments.usage("name at least one app, then the backup folder to write")
    }
    apps = Array(arguments.positionals.dropLast())
    folder = arguments.positionals.last!
    encrypt = arguments.flag("encrypt")
    passwordFile = arguments.value("password-file")
    snapshot = arguments.value("snapshot")
    self.arguments = arguments
    if passwordFile != nil && !encrypt {
      throw arguments.usage("--password-file is the password of --encrypt: give both")
    }
    if snapshot != nil && apps.count != 1 {
      throw arguments.usage("--snapshot exports one app's (or group's) snapshot")
    }
  }

  func run(_ context: CommandContext) throws -> CommandOutput {
    var options = DeviceBackupExportOptions()
    if let text = context.environment["APPBOX_DEVICE_BACKUP_ROUNDS"], let rounds = UInt32(text), rounds > 0 {
      options.rounds = (rounds, rounds)
    }
    if encrypt {
      guard let password = try deviceBackupPassword(passwordFile, context: context, confirm: true) else {
        throw arguments.usage("--encrypt needs the password: --password-file F, or a terminal to ask on")
      }
      options.password = password
    }
    let session = try context.openDevice(mutating: true)
    let progress = ProgressBar(context)
    let report: DeviceBackupExportReport
    if let snapshot {
      let name = apps[0]
      let identifier =
        namesGroup(name) ? name : (try session.registry.appIfPresent(name)?.bundleIdentifier ?? name)
      let repository = try context.repository(repositoryArguments(arguments), create: false)
      let chosen = try repository.snapshot(snapshot, app: identifier)
      report = try session.exportDeviceBackup(
        snapshot: chosen, from: repository, to: folder, options: options, observer: progress)
    } else {
      var sources: [DeviceBackupSource] = []
      var groups: [String] = []
      for name in apps {
        if namesGroup(name) {
          if !groups.contains(name) { groups.append(name) }
          continue
        }
        let app = try session.lockApp(name)
        sources.append(.app(app))
        for group in try session.registry.groups(of: app.bundleIdentifier)
        where !groups.contains(group.identifier) {
          groups.append(group.identifier)
        }
      }
      for name in groups { sources.append(.group(try lockedGroup(name, in: session))) }
      report = try session.exportDeviceBackup(sources, to: folder, options: options, observer: progress)
    }
    for domain in report.domains where domain.unreadable > 0 {
      context.warn(
        "\(domain.domain) is incomplete: " + unreadableSummary(domain.unreadable, domain.unreadablePaths))
    }
    let parts = report.domains.map { "\($0.domain) (\($0.files) files, \(byteCount($0.bytes)))" }
    return CommandOutput(
      text:
        "Wrote \(report.isEncrypted ? "an encrypted" : "a") device backup of \(parts.joined(separator: ", ")) to \(folder)",
      json: .object([
        ("backup", .string(folder)), ("encrypted", .bool(report.isEncrypted)),
        (
          "domains",
          .array(
            report.domains.map {
              .object(
                [
                  ("domain", .string($0.domain)), ("files", .int($0.files)),
                  ("directories", .int($0.directories)),
                  ("bytes", .int($0.bytes)),
                ] + incompleteMembers($0.unreadable, $0.unreadablePaths))
            })
        ),
      ]))
  }
}
