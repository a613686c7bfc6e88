import AppboxBackup
import AppboxCore
import AppboxRepository
import Foundation
import Glibc

// `repo init|passwd|show` and `archive decrypt`.

struct RepoCommand: CommandGroup {
  static let description = CommandDescription(
    name: "repo",
    abstract: "Create a backup repository (optionally encrypted), change its password, or describe it.",
    subcommands: [RepoInit.self, RepoPasswd.self, RepoShow.self], defaultSubcommand: "show")
}

struct RepoInit: ParsableCommand {
  static let description = CommandDescription(
    name: "init",
    abstract:
      "Create a backup repository; with --encrypt, one whose every object is encrypted under a password.",
    discussion: """
      The repository is a directory (default: <root>/Backups) or an S3 bucket (--repo s3://BUCKET/PREFIX;
      the bucket is created when missing). Without --encrypt, an existing repository is only upgraded
      to the current layout. With --encrypt the password is read from --password-file, then
      $APPBOX_PASSWORD_FILE, else standard input (asked twice on a terminal); an encrypted repository
      cannot be made where one exists already (73). Every command reading or writing it then needs
      the password. There is no way around a lost password: the data cannot be recovered without it.
      A device remembers the repositories it has used encrypted: finding a plain one (or none) there
      later, every command refuses it (65) until 'repo init --allow-plain' says that was meant. A
      password given for a plain repository is refused likewise (65), never ignored.
      """,
    options: [
      repositoryOption, .init("encrypt", help: "Encrypt the repository under a password."),
      .init(
        "allow-plain",
        help:
          "Accept a plain repository where this device used an encrypted one (it was reset on purpose)."),
    ] + repositoryAccessOptions,
    examples: [
      .init(
        "An encrypted repository in a directory, then one in an S3 bucket:",
        "appbox repo init --repo /srv/vault --encrypt --password-file pw.txt",
        "appbox repo init --repo s3://backups/ci --endpoint https://s3.example.net")
    ],
    exitStatuses: [
      .cannotCreate(
        "An encrypted repository cannot be made where one exists, or the directory cannot be made.")
    ] + ExitCode.repository,
    environment: EnvironmentVariable.repository)
  let encrypt: Bool
  let allowPlain: Bool
  let arguments: ParsedArguments
  init(_ arguments: ParsedArguments) throws {
    encrypt = arguments.flag("encrypt")
    allowPlain = arguments.flag("allow-plain")
    self.arguments = arguments
    if encrypt && allowPlain {
      throw arguments.usage("--allow-plain is for a plain repository; drop --encrypt")
    }
  }

  func run(_ context: CommandContext) throws -> CommandOutput {
    let location = try context.repositoryLocation(arguments)
    var password: [UInt8]?
    if encrypt {
      let file = arguments.value("password-file") ?? context.environment["APPBOX_PASSWORD_FILE"] ?? "-"
      let first = try readPassword(file, prompt: "New repository password", warn: context.warn)
      if file == "-" && isatty(0) == 1 && askWithoutEcho("Repeat the password") != first {
        throw arguments.usage("the two passwords differ")
      }
      password = first
    }
    var options = context.repositoryOptions(arguments, create: true)
    options.allowPlain = allowPlain
    if encrypt { options.passwordGiven = false }  // the new password is for the new repository
    let repository = try Repository.initialize(location, password: password, options: options)
    let summary = try repository.summary()
    return CommandOutput(
      text: "Initialized \(summary.encrypted ? "an encrypted" : "a") repository at \(summary.location)",
      json: summaryJSON(summary))
  }
}

struct RepoPasswd: ParsableCommand {
  static let description = CommandDescription(
    name: "passwd",
    abstract: "Change an encrypted repository's password (the key is wrapped again; no data is rewritten).",
    discussion: """
      The current password comes from --password-file (or $APPBOX_PASSWORD_FILE), the new one from
      --new-password-file; what neither names is read from standard input, one per line (current
      first), or asked for on a terminal.
      """,
    options: [
      repositoryOption,
      .init("new-password-file", value: "F", help: "The new password from F's first line."),
    ] + repositoryAccessOptions,
    examples: [
      .init(
        "Change the password, both read from files:",
        "appbox repo passwd --repo /srv/vault --password-file pw.txt --new-password-file new.txt")
    ],
    exitStatuses: [ExitCode.noRepository] + ExitCode.repository,
    environment: EnvironmentVariable.repository)
  let arguments: ParsedArguments
  init(_ arguments: ParsedArguments) throws { self.arguments = arguments }

  func run(_ context: CommandContext) throws -> CommandOutput {
    let currentFile = arguments.value("password-file") ?? context.environment["APPBOX_PASSWORD_FILE"]
    let newFile = arguments.value("new-password-file")
    // Both from standard input: two lines, read at once.
    var lines: [[UInt8]] = []
    if currentFile == nil && newFile == nil && isatty(0) == 0 {
      let bytes = try FileDescriptor(rawValue: 0).readAll(limit: 64 << 10)
      lines = bytes.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false).map {
        Array($0.last == UInt8(ascii: "\r") ? $0.dropLast() : $0)
      }
      guard lines.count >= 2 else {
        throw arguments.usage("expected two lines on standard input: the current password, then the new one")
      }
    }
    var options = context.repositoryOptions(arguments, create: false)
    if !lines.isEmpty {
      let current = lines[0]
      options.password = { current }
    }
    let repository = try Repository(location: try context.repositoryLocation(arguments), options: options)
    let newPassword: [UInt8]
    if !lines.isEmpty {
      newPassword = lines[1]
    } else {
      newPassword = try readPassword(newFile ?? "-", prompt: "New repository password", warn: context.warn)
      if newFile == nil && isatty(0) == 1 && askWithoutEcho("Repeat the new password") != newPassword {
        throw arguments.usage("the two passwords differ")
      }
    }
    try repository.changePassword(to: newPassword)
    return CommandOutput(
      text: "Changed the password of \(repository.path)",
      json: .object([("repository", .string(repository.path)), ("changed", .bool(true))]))
  }
}

struct RepoShow: ParsableCommand {
  static let description = CommandDescription(
    name: "show", abstract: "Describe a repository: where, whether encrypted, its snapshots and archives.",
    options: [repositoryOption] + repositoryAccessOptions,
    examples: [
      .init("The device's repository, then another:", "appbox repo", "appbox repo show --repo /srv/vault")
    ],
    exitStatuses: [ExitCode.noRepository] + ExitCode.repository,
    environment: EnvironmentVariable.repository)
  let arguments: ParsedArguments
  init(_ arguments: ParsedArguments) throws { self.arguments = arguments }

  func run(_ context: CommandContext) throws -> CommandOutput {
    let summary = try context.repository(arguments, create: false, readOnly: true).summary()
    var lines = [
      "Repository:  \(summary.location) (\(summary.backend), layout \(summary.layout))",
      "Encrypted:   \(summary.encrypted ? "yes (AES-256-GCM, password-wrapped key; \(summary.keys) key)" : "no")",
      "Snapshots:   \(summary.snapshots)",
      "Archives:    \(summary.archives), \(byteCount(summary.archiveBytes))",
      "Catalog:     \(summary.catalog)",
    ]
    if summary.markedForDeletion > 0 {
      lines.append("Marked:      \(summary.markedForDeletion) archives to delete after the grace period")
    }
    return CommandOutput(text: lines.joined(separator: "\n"), json: summaryJSON(summary))
  }
}

private func summaryJSON(_ summary: RepositorySummary) -> JSONValue {
  .object([
    ("repository", .string(summary.location)), ("backend", .string(summary.backend)),
    ("layout", .int(summary.layout)), ("encrypted", .bool(summary.encrypted)),
    ("snapshots", .int(summary.snapshots)), ("archives", .int(summary.archives)),
    ("archiveBytes", .int(summary.archiveBytes)), ("keys", .int(summary.keys)),
    ("catalog", .string(summary.catalog)), ("markedForDeletion", .int(summary.markedForDeletion)),
  ])
}

struct ArchiveCommand: CommandGroup {
  static let description = CommandDescription(
    name: "archive", abstract: "Work with a repository's archive files.", subcommands: [ArchiveDecrypt.self])
}

struct ArchiveDecrypt: ParsableCommand {
  static let description = CommandDescription(
    name: "decrypt",
    abstract: "Write an archive's plain pax tar (decrypted when the repository is encrypted) to stdout.",
    discussion: """
      ARCHIVE is an archive's name (1a2b3c4d.tar.zst), its path in the repository, or a snapshot id.
      The output is the archive as stored, opened: GNU tar lists and extracts it. Backups are
      zstd-compressed unless made with --compress none (appbox archive decrypt ID | tar --zstd -tv;
      tar -tv for a plain one, -z for gzip). With --json the tar goes to --output FILE and stdout
      gets a summary.
      """,
    positionals: [.init("ARCHIVE", help: "An archive's name or path, or a snapshot id.")],
    options: [
      repositoryOption,
      .init("output", value: "FILE", help: "Write the tar to FILE (replaced atomically) instead."),
    ] + repositoryAccessOptions,
    examples: [
      .init(
        "List a snapshot's archive with GNU tar, then write it to a file:",
        "appbox archive decrypt 1a2b3c4d --repo /srv/vault | tar --zstd -tv",
        "appbox archive decrypt 1a2b3c4d --repo /srv/vault --output snapshot.tar.zst")
    ],
    exitStatuses: [
      .usage("Malformed, or --json without --output (stdout carries the JSON)."),
      .noInput("No such archive or snapshot, or no such repository."),
    ] + ExitCode.repository,
    environment: EnvironmentVariable.repository)
  let archive: String
  let output: String?
  let arguments: ParsedArguments
  init(_ arguments: ParsedArguments) throws {
    archive = arguments.positional(0)!
    output = arguments.value("output")
    self.arguments = arguments
  }

  func validate(_ context: CommandContext) throws {
    if context.globals.json && output == nil {
      throw arguments.usage("with --json, give --output FILE (stdout carries the JSON summary)")
    }
  }

  func run(_ context: CommandContext) throws -> CommandOutput {
    let repository = try context.repository(arguments, create: false, readOnly: true)
    let record = try repository.archiveNamed(archive)
    let bytes: Int64
    if let output {
      let (directory, name) = splitPath(RepositoryLocation.absoluteForOutput(output))
      let parent = try FileDescriptor.open(directory, O_RDONLY | O_DIRECTORY)
      defer { parent.close() }
      let staged = try StagedFile(name, in: parent, mode: 0o600)
      bytes = try repository.writePlainArchive(record) { try staged.descriptor.writeAll($0) }
      try staged.commit()
    } else {
      bytes = try repository.writePlainArchive(record) { context.stdout.write(Array($0)) }
    }
    return CommandOutput(
      json: .object([
        ("archive", .string(record.name)), ("bytes", .int(bytes)), ("output", .optional(output)),
        ("compression", .string(record.compression.rawValue)),
      ]))
  }
}
