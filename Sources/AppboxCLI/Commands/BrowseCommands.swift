import AppboxBackup
import AppboxContainer
import AppboxCore
import AppboxMount
import AppboxRepository
import Foundation
import Glibc

/// `--app APP` for commands that take a snapshot id: scopes `latest` and prefixes.
let snapshotAppOption = CommandDescription.Option(
  "app", value: "APP", help: "The app whose snapshots the id names (needed for 'latest').")

let snapshotArgument = CommandDescription.Positional(
  "SNAPSHOT", help: "A snapshot id, a unique prefix of one (4 hex digits or more), or 'latest' (with --app).")

/// "file", "directory", "symlink", "fifo", "socket".
func entryTypeName(_ type: TreeEntryType) -> String {
  switch type {
  case .file: return "file"
  case .directory: return "directory"
  case .symlink: return "symlink"
  case .fifo: return "fifo"
  case .socket: return "socket"
  }
}

/// "drwxr-xr-x"-style type and permissions.
func modeString(_ entry: TreeEntry) -> String {
  let kind: Character =
    switch entry.type {
    case .file: "-"
    case .directory: "d"
    case .symlink: "l"
    case .fifo: "p"
    case .socket: "s"
    }
  let p = entry.permissions
  var text = String(kind)
  for shift in [6, 3, 0] {
    let bits = (p >> UInt32(shift)) & 7
    text += (bits & 4 != 0 ? "r" : "-") + (bits & 2 != 0 ? "w" : "-")
    let special: UInt32 = shift == 6 ? 0o4000 : shift == 3 ? 0o2000 : 0o1000
    let execute = bits & 1 != 0
    if p & special != 0 {
      text += shift == 0 ? (execute ? "t" : "T") : (execute ? "s" : "S")
    } else {
      text += execute ? "x" : "-"
    }
  }
  return text
}

func nanosecondsDate(_ nanoseconds: Int64) -> Date { Date(timeIntervalSince1970: Double(nanoseconds) / 1e9) }

/// The JSON of one entry of a snapshot.
func entryJSON(_ path: [UInt8], _ entry: TreeEntry) -> JSONValue {
  var members: [(String, JSONValue)] = [
    ("path", .string(String(decoding: path, as: UTF8.self))), ("escapedPath", .string(Terminal.escape(path))),
    ("type", .string(entryTypeName(entry.type))), ("mode", .string(String(entry.permissions, radix: 8))),
    ("bytes", .int(entry.size)), ("modified", .string(timestamp(nanosecondsDate(entry.modificationTime)))),
  ]
  if let target = entry.linkTarget {
    members.append(("target", .string(String(decoding: target, as: UTF8.self))))
  }
  return .object(members)
}

struct LsCommand: ParsableCommand {
  static let description = CommandDescription(
    name: "ls", abstract: "List the entries of a snapshot, or of one folder of it.",
    discussion: """
      PATH is relative to the home (Documents, Library/Preferences, Notes.app); without it, the
      snapshot's top. Only the trees on the way are read, not the snapshot. Names are escaped as
      'files ls' escapes them (\\n, \\xHH, \\u{HHHH}), and an escaped path can be typed back to
      ls, dump and restore --include. Entries marked 'exclude from backup' hold nothing and are
      not listed.
      """,
    positionals: [
      snapshotArgument, .init("PATH", help: "A folder or file in the snapshot.", optional: true),
    ],
    options: [
      .init("long", help: "Also show type and mode, size and modification time."),
      .init("recursive", help: "Everything below the folder, depth first."), snapshotAppOption,
      repositoryOption,
    ] + repositoryAccessOptions,
    examples: [
      .init(
        "The top of the latest snapshot, then its Documents in detail:",
        "appbox ls latest --app com.example.notes", "appbox ls 1a2b3c4d Documents --long"),
      .init(
        "Every path of a snapshot, for a script:",
        "appbox --json ls 1a2b Documents --recursive | jq -r '.entries[].path'"),
    ],
    exitStatuses: [
      .usage("Malformed, an ambiguous snapshot prefix (the candidates are listed), or '..' in PATH."),
      .noInput("No such snapshot, path in it, or repository."),
    ] + ExitCode.repository,
    environment: EnvironmentVariable.repository)
  let snapshot: String
  let path: [UInt8]
  let long: Bool
  let recursive: Bool
  let app: String?
  let arguments: ParsedArguments
  init(_ arguments: ParsedArguments) throws {
    snapshot = arguments.positional(0)!
    path = arguments.positional(1).map(Terminal.unescape) ?? []
    long = arguments.flag("long")
    recursive = arguments.flag("recursive")
    app = arguments.value("app")
    self.arguments = arguments
  }

  /// Streamed (StreamedOutput): each entry is written as the walk reaches it, so memory
  /// follows the deepest path and the largest folder, not the snapshot.
  func run(_ context: CommandContext) throws -> CommandOutput {
    let repository = try context.repository(arguments, create: false, readOnly: true)
    let found = try repository.snapshot(snapshot, app: app)
    let output = context.stream()
    if context.globals.json {
      var json = StreamedJSON(output)
      try json.open(array: false)
      try json.add("snapshot", .string(found.id))
      try json.add("app", .string(found.app))
      try json.add("path", .string(String(decoding: path, as: UTF8.self)))
      try json.open("entries", array: true)
      try repository.catalog.reading {
        try repository.list(path, in: found, recursive: recursive) {
          try json.add(entryJSON($0.path, $0.entry))
        }
      }
      try json.close()
      try json.close()
      return CommandOutput()
    }
    var rows = StreamedTable(["MODE", "BYTES", "MODIFIED", "PATH"])
    var count = 0
    try repository.catalog.reading {
      try repository.list(path, in: found, recursive: recursive) { item in
        count += 1
        let name =
          Terminal.escape(item.path) + (item.entry.type == .directory ? "/" : "")
          + (item.entry.linkTarget.map { " -> " + Terminal.escape($0) } ?? "")
        guard long else { return try output.line(name) }
        try rows.add(
          [
            modeString(item.entry), String(item.entry.size),
            timestamp(nanosecondsDate(item.entry.modificationTime)), name,
          ], to: output)
      }
    }
    try rows.finish(to: output)
    if count == 0 { try output.line("\(path.isEmpty ? "The snapshot" : Terminal.escape(path)) is empty.") }
    return CommandOutput()
  }
}

struct DumpCommand: ParsableCommand {
  static let description = CommandDescription(
    name: "dump", abstract: "Write a file of a snapshot to stdout, byte for byte, or a folder as a pax tar.",
    discussion: """
      A file's content is read from where the repository stores it (only its own bytes, or
      its chunks) and verified against its recorded SHA-256 as it streams; a mismatch ends the
      command with exit 65 after the bytes read so far were written. A folder (or the snapshot's
      top, PATH /) becomes a pax tar whose members are named from the folder itself
      (Documents/...): tar -x of it gives what a restore gives, with modes, times, symlinks,
      hard links and user.* attributes. With --json the bytes go to --output FILE.
      """,
    positionals: [
      snapshotArgument, .init("PATH", help: "A file or folder in the snapshot ('/' for all of it)."),
    ],
    options: [
      .init("output", value: "FILE", help: "Write to FILE (replaced atomically) instead of stdout."),
      .init("tar", help: "Write a tar even when PATH is a file."), snapshotAppOption, repositoryOption,
    ] + repositoryAccessOptions,
    examples: [
      .init(
        "One file of the latest snapshot, then a folder as a tar:",
        "appbox dump latest Documents/notes.db --app com.example.notes --output notes.db",
        "appbox dump 1a2b3c4d Documents | tar -x -C /tmp/restored"),
      .init(
        "The whole snapshot into a file, for a script:", "appbox --json dump 1a2b / --output snapshot.tar"),
    ],
    exitStatuses: [
      .usage("Malformed, an ambiguous snapshot prefix, or --json without --output."),
      .noInput("No such snapshot, path in it, or repository."),
      .dataError("Stored content that does not match its recorded hash, or a damaged archive or catalog."),
    ] + ExitCode.repository,
    environment: EnvironmentVariable.repository)
  let snapshot: String
  let path: [UInt8]
  let output: String?
  let tar: Bool
  let app: String?
  let arguments: ParsedArguments
  init(_ arguments: ParsedArguments) throws {
    snapshot = arguments.positional(0)!
    path = Terminal.unescape(arguments.positional(1)!)
    output = arguments.value("output")
    tar = arguments.flag("tar")
    app = arguments.value("app")
    self.arguments = arguments
  }

  func run(_ context: CommandContext) throws -> CommandOutput {
    if context.globals.json && output == nil {
      throw arguments.usage("with --json, give --output FILE (stdout carries the JSON summary)")
    }
    let repository = try context.repository(arguments, create: false, readOnly: true)
    let found = try repository.snapshot(snapshot, app: app)
    let item = try repository.catalog.reading { try repository.entry(at: path, in: found) }
    let asTar = tar || item.entry.type != .file
    let bytes: Int64
    if let output {
      let (directory, name) = splitPath(RepositoryLocation.absoluteForOutput(output))
      let parent = try FileDescriptor.open(directory, O_RDONLY | O_DIRECTORY)
      defer { parent.close() }
      let staged = try StagedFile(name, in: parent, mode: 0o644)
      let descriptor = staged.descriptor
      bytes = try write(item, of: found, asTar: asTar, in: repository) { try descriptor.writeAll($0) }
      try staged.commit()
    } else {
      bytes = try write(item, of: found, asTar: asTar, in: repository) { data in
        context.stdout.write(Array(data))
        if let failure = context.stdout.failure { throw failure }
      }
    }
    return CommandOutput(
      json: .object([
        ("snapshot", .string(found.id)), ("app", .string(found.app)),
        ("path", .string(String(decoding: item.path, as: UTF8.self))),
        ("format", .string(asTar ? "tar" : "file")), ("bytes", .int(bytes)), ("output", .optional(output)),
      ]))
  }

  /// Writes the entry (its content, or a tar) through `emit`; returns the content bytes.
  private func write(
    _ item: BrowsedEntry, of found: Snapshot, asTar: Bool, in repository: Repository,
    _ emit: @escaping (UnsafeRawBufferPointer) throws -> Void
  ) throws -> Int64 {
    var bytes: Int64 = 0
    if asTar {
      bytes = try repository.dumpTar(path, of: found, to: ClosureArchiveOutput(emit)).bytes
    } else {
      var position: Int64 = 0
      let zeros = [UInt8](repeating: 0, count: 64 << 10)
      func fill(to offset: Int64) throws {
        while position < offset {
          let count = Int(min(Int64(zeros.count), offset - position))
          try zeros.withUnsafeBytes { try emit(UnsafeRawBufferPointer(rebasing: $0[0..<count])) }
          position += Int64(count)
        }
      }
      try repository.readContent(of: item.entry, path: item.path) { data, offset in
        try fill(to: offset)
        try emit(data)
        position = offset + Int64(data.count)
      }
      try fill(to: item.entry.size)
      bytes = item.entry.size
    }
    return bytes
  }
}

struct FindCommand: ParsableCommand {
  static let description = CommandDescription(
    name: "find",
    abstract: "Find which snapshots hold a path matching a pattern, with its size and time in each.",
    discussion: """
      PATTERN is a shell glob (*, ?, [...]). Without a '/' it matches names, as find -name does;
      with one, whole paths from the home (Documents/*.txt, where * also crosses '/'). Snapshots
      share their unchanged folders, so searching many costs little more than searching one.
      """,
    positionals: [.init("PATTERN", help: "A glob, such as '*.sqlite' or 'Documents/*/draft-*'.")],
    options: [
      .init("app", value: "APP", help: "Only this app's snapshots."),
      .init("newest", value: "N", help: "Only the N newest snapshots."), repositoryOption,
    ] + repositoryAccessOptions,
    examples: [
      .init(
        "Every snapshot holding a database, then one app's newest five:", "appbox find '*.sqlite'",
        "appbox find 'Documents/*.txt' --app com.example.notes --newest 5"),
      .init(
        "The snapshots holding a file, for a script:", "appbox --json find notes.db | jq -r '.[].snapshot'"),
    ],
    exitStatuses: [ExitCode.noSnapshot] + ExitCode.repository,
    environment: EnvironmentVariable.repository)
  let pattern: [UInt8]
  let app: String?
  let newest: Int?
  let arguments: ParsedArguments
  init(_ arguments: ParsedArguments) throws {
    pattern = Terminal.unescape(arguments.positional(0)!)
    app = arguments.value("app")
    newest = try arguments.integer("newest", range: 1...Int.max)
    self.arguments = arguments
  }

  /// Streamed (StreamedOutput): each match is written as it is found.
  func run(_ context: CommandContext) throws -> CommandOutput {
    let repository = try context.repository(arguments, create: false, readOnly: true)
    let output = context.stream()
    if context.globals.json {
      var json = StreamedJSON(output)
      try json.open(array: true)
      try repository.find(pattern, app: app, newest: newest) { match in
        guard case .object(let members) = entryJSON(match.path, match.entry) else { return }
        try json.add(
          .object(
            [
              ("snapshot", .string(match.snapshot.id)), ("app", .string(match.snapshot.app)),
              ("time", .string(timestamp(match.snapshot.time))),
            ] + members))
      }
      try json.close()
      return CommandOutput()
    }
    var rows = StreamedTable(["SNAPSHOT", "APP", "TIME", "BYTES", "MODIFIED", "PATH"])
    try repository.find(pattern, app: app, newest: newest) { match in
      try rows.add(
        [
          match.snapshot.id, match.snapshot.app, timestamp(match.snapshot.time), String(match.entry.size),
          timestamp(nanosecondsDate(match.entry.modificationTime)),
          Terminal.escape(match.path) + (match.entry.type == .directory ? "/" : ""),
        ], to: output)
    }
    try rows.finish(to: output)
    if rows.count == 0 {
      try output.line("No snapshot holds a path matching '\(Terminal.escape(pattern))'.")
    }
    return CommandOutput()
  }
}

struct MountCommand: ParsableCommand {
  static let description = CommandDescription(
    name: "mount", abstract: "Serve the repository's snapshots as a read-only FUSE file system at DIR.",
    discussion: """
      DIR/<app>/<snapshot id>/ holds each snapshot as it was (Documents, Library, the bundle);
      DIR/<app>/<time> (UTC, 2026-12-04T03:31:32Z; -2, -3 for later ones of the same second)
      links to the snapshot taken then, and DIR/<app>/latest to the app's newest. Read with any
      tool (cat, cp, find, cmp);
      a file's content is verified against its recorded SHA-256 when it is opened (EIO if it does
      not match). Mounted read-only, nodev, nosuid, with default_permissions. Runs in the
      foreground until unmounted (fusermount3 -u DIR, umount DIR) or interrupted (Ctrl-C).
      Needs /dev/fuse (libfuse3; as a user, fusermount3).
      """,
    positionals: [.init("DIR", help: "An existing, empty directory to mount on.")],
    options: [repositoryOption] + repositoryAccessOptions,
    examples: [
      .init(
        "Mount the device's repository, then an encrypted one (stop with fusermount3 -u DIR):",
        "appbox mount /mnt/snapshots", "appbox mount /mnt/vault --repo /srv/vault --password-file pw.txt")
    ],
    exitStatuses: [
      .noInput("No such directory to mount on, or no such repository."),
      .unavailable(
        "/dev/fuse is missing (no FUSE in this kernel or container), or the S3 store cannot be reached."),
    ] + ExitCode.repository,
    environment: EnvironmentVariable.repository)
  let directory: String
  let arguments: ParsedArguments
  init(_ arguments: ParsedArguments) throws {
    directory = arguments.positional(0)!
    self.arguments = arguments
  }

  func run(_ context: CommandContext) throws -> CommandOutput {
    let repository = try context.repository(arguments, create: false, readOnly: true)
    let mountpoint = RepositoryLocation.absoluteForOutput(directory)
    let fileSystem = SnapshotFileSystem(repository: repository)
    context.note("Serving the snapshots of \(repository.path) at \(mountpoint) (fusermount3 -u to stop)")
    let status = try fileSystem.serve(at: mountpoint)
    guard status == 0 else {
      throw MountError(
        kind: .io, message: "Unable to mount '\(mountpoint)': libfuse failed (status \(status))")
    }
    return CommandOutput(
      text: "Unmounted \(mountpoint)",
      json: .object([("mountpoint", .string(mountpoint)), ("unmounted", .bool(true))]))
  }
}
