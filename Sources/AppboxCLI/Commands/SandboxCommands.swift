import AppboxContainer
import AppboxCore
import Foundation

// `files`, `defaults` and `exclude`: commands that reach inside an app's home. Every
// path they take is resolved beneath the home by the library (`..`, absolute paths and
// escaping symlinks are denied, 77). Changes take the device's lock; reads do not.

// MARK: files

struct FilesCommand: CommandGroup {
  static let description = CommandDescription(
    name: "files",
    abstract: "File sharing: list, copy in, copy out and remove files in an app's Documents (if it opts in).",
    discussion: """
      Paths inside the app are relative to its Documents folder. Only apps whose Info.plist sets
      UIFileSharingEnabled to true share files; others are refused (exit 77), as are paths with '..',
      absolute paths and symbolic links that lead out of Documents. Names are case-sensitive.
      'ls' shows names escaped (\\\\ for a backslash, \\n, \\t, \\r, \\xHH for other control bytes and
      for bytes that are not UTF-8, \\u{HHHH} for direction characters), and paths given to ls, push,
      pull and rm are read in that same form, so any name 'ls' shows can be typed back.
      """,
    subcommands: [FilesList.self, FilesPush.self, FilesPull.self, FilesRemove.self],
    groupPositionals: [appArgument])

  /// What every `files` subcommand can end in.
  static let exitCodes: [ExitCode] = [
    .noInput("No such app, or no such file in Documents."),
    .denied("The app does not share files (UIFileSharingEnabled), or the path leads out of Documents."),
  ]
}

struct FilesList: ParsableCommand {
  static let description = CommandDescription(
    name: "ls", abstract: "List a folder in Documents (default: Documents itself).",
    positionals: [.init("DIR", help: "A folder, relative to Documents.", optional: true)],
    examples: [
      .init(
        "The app's Documents, then a folder in it:", "appbox files com.example.notes ls",
        "appbox files com.example.notes ls Inbox")
    ],
    exitStatuses: FilesCommand.exitCodes)
  let app: String
  let directory: String?
  init(_ arguments: ParsedArguments) throws {
    app = arguments.groupPositionals[0]
    directory = arguments.positional(0)
  }

  func run(_ context: CommandContext) throws -> CommandOutput {
    let session = try context.openDevice(mutating: false)
    let entries = try session.sharedDocuments(of: try session.app(app)).list(
      bytes: directory.map(Terminal.unescape))
    let folder = "Documents" + (directory.map { "/" + $0 } ?? "")
    let text =
      entries.isEmpty
      ? "\(folder) is empty."
      : table(
        ["TYPE", "BYTES", "MODIFIED", "NAME"],
        entries.map { entry in
          let name =
            Terminal.escape(entry.rawName) + (entry.type == .directory ? "/" : "")
            + (entry.rawSymlinkTarget.map { " -> \(Terminal.escape($0))" } ?? "")
          return [typeName(entry.type), String(entry.size), timestamp(entry.modificationTime), name]
        })
    return CommandOutput(
      text: text,
      json: .array(
        entries.map { entry in
          var members: [(String, JSONValue)] = [
            ("name", .string(entry.name)), ("escapedName", .string(Terminal.escape(entry.rawName))),
            ("type", .string(typeName(entry.type))),
            ("bytes", .int(entry.size)),
            ("modified", .string(timestamp(entry.modificationTime))),
          ]
          if let target = entry.symlinkTarget { members.append(("target", .string(target))) }
          return .object(members)
        }))
  }
}

struct FilesPush: ParsableCommand {
  static let description = CommandDescription(
    name: "push", abstract: "Copy a file into Documents, replacing what is there atomically.",
    positionals: [
      .init("SRC", help: "The file to copy ('-': stdin, which needs DEST)."),
      .init(
        "DEST", help: "Where in Documents (default: SRC's name; an existing folder receives SRC's name).",
        optional: true),
    ],
    examples: [
      .init(
        "Copy a file into Documents, then standard input into Documents/Inbox/note.txt:",
        "appbox files com.example.notes push report.pdf",
        "echo hello | appbox files com.example.notes push - Inbox/note.txt")
    ],
    exitStatuses: FilesCommand.exitCodes + [.protectedData, .appBusy])
  let app: String
  let source: String
  let destination: String?
  init(_ arguments: ParsedArguments) throws {
    app = arguments.groupPositionals[0]
    source = arguments.positional(0)!
    destination = arguments.positional(1)
  }

  func run(_ context: CommandContext) throws -> CommandOutput {
    let session = try context.openDevice(mutating: true)
    let transfer = try session.sharedDocuments(of: try session.lockApp(app)).push(
      from: source, toBytes: destination.map(Terminal.unescape))
    return CommandOutput(
      text: "Pushed \(transfer.bytes) bytes to \(transfer.path)",
      json: .object([("path", .string(transfer.path)), ("bytes", .int(transfer.bytes))]))
  }
}

struct FilesPull: ParsableCommand {
  static let description = CommandDescription(
    name: "pull", abstract: "Copy a file out of Documents (to stdout without DEST).",
    positionals: [
      .init("SRC", help: "The file, relative to Documents."),
      .init(
        "DEST", help: "Where to write it ('-' or none: stdout; a folder receives SRC's name).", optional: true
      ),
    ],
    examples: [
      .init(
        "Copy a file out, then print one:", "appbox files com.example.notes pull report.pdf copy.pdf",
        "appbox files com.example.notes pull Inbox/note.txt")
    ],
    exitStatuses: FilesCommand.exitCodes + [.protectedData])
  let app: String
  let source: String
  let destination: String?
  init(_ arguments: ParsedArguments) throws {
    app = arguments.groupPositionals[0]
    source = arguments.positional(0)!
    destination = arguments.positional(1).flatMap { $0 == "-" ? nil : $0 }
  }

  func run(_ context: CommandContext) throws -> CommandOutput {
    let session = try context.openDevice(mutating: false)
    let documents = try session.sharedDocuments(of: try session.app(app))
    let path = Terminal.unescape(source)
    guard let destination else {
      let bytes = try documents.pull(bytes: path)
      return CommandOutput(
        json: .object([
          ("path", .string("Documents/" + String(decoding: path, as: UTF8.self))),
          ("bytes", .int(bytes.count)),
          ("base64", .string(Data(bytes).base64EncodedString())),
        ]),
        raw: bytes)
    }
    let transfer = try documents.pull(bytes: path, to: destination)
    return CommandOutput(
      text: "Pulled \(transfer.bytes) bytes to \(transfer.path)",
      json: .object([("path", .string(transfer.path)), ("bytes", .int(transfer.bytes))]))
  }
}

struct FilesRemove: ParsableCommand {
  static let description = CommandDescription(
    name: "rm", abstract: "Remove a file, a symbolic link (not its target) or a whole folder from Documents.",
    positionals: [.init("PATH", help: "What to remove, relative to Documents.")],
    examples: [
      .init(
        "Remove a file, then a folder and all it holds:", "appbox files com.example.notes rm old.pdf",
        "appbox files com.example.notes rm Inbox")
    ],
    exitStatuses: FilesCommand.exitCodes + [.appBusy])
  let app: String
  let path: String
  init(_ arguments: ParsedArguments) throws {
    app = arguments.groupPositionals[0]
    path = arguments.positional(0)!
  }

  func run(_ context: CommandContext) throws -> CommandOutput {
    let session = try context.openDevice(mutating: true)
    let removed = try session.sharedDocuments(of: try session.lockApp(app)).remove(
      bytes: Terminal.unescape(path))
    return CommandOutput(
      text: "Removed \(removed)", json: .object([("path", .string(removed)), ("removed", .bool(true))]))
  }
}

private func typeName(_ type: FileType) -> String {
  switch type {
  case .regular: return "file"
  case .directory: return "directory"
  case .symlink: return "symlink"
  case .fifo: return "fifo"
  case .socket: return "socket"
  case .characterDevice, .blockDevice, .unknown: return "other"
  }
}

private func timestamp(_ time: Timespec) -> String {
  timestamp(Date(timeIntervalSince1970: TimeInterval(time.seconds)))
}

// MARK: exclude

struct ExcludeCommand: ParsableCommand {
  static let description = CommandDescription(
    name: "exclude",
    abstract: "Mark a file or folder in Documents or Library \"exclude from backup\" (or undo it).",
    discussion: """
      The mark is the extended attribute user.appbox.exclude-from-backup; backups skip what carries it
      and 'inspect' counts it. Only Documents and Library (except Library/Caches) are ever backed up,
      so other paths are refused. A symbolic link is refused: mark what it points to.
      """,
    positionals: [appArgument, .init("PATH", help: "Relative to the home, such as Documents/big.bin.")],
    options: [.init("undo", help: "Remove the mark: back the file or folder up again.")],
    examples: [
      .init(
        "Leave a large file out of backups, then back it up again:",
        "appbox exclude com.example.notes Documents/big.bin",
        "appbox exclude com.example.notes Documents/big.bin --undo")
    ],
    exitStatuses: [
      .usage("Malformed, or a path never backed up (outside Documents and Library, or in Library/Caches)."),
      .noInput("No such app, or no such file or folder."),
      .denied("The path goes through a symbolic link (mark what it points to)."), .appBusy,
    ])
  let app: String
  let path: String
  let undo: Bool
  init(_ arguments: ParsedArguments) throws {
    app = arguments.positional(0)!
    path = arguments.positional(1)!
    undo = arguments.flag("undo")
  }

  func run(_ context: CommandContext) throws -> CommandOutput {
    let session = try context.openDevice(mutating: true)
    let resolved = try session.setExcludedFromBackup(path, excluded: !undo, of: try session.lockApp(app))
    return CommandOutput(
      text: undo ? "\(resolved) will be backed up again" : "\(resolved) is excluded from backups",
      json: .object([("path", .string(resolved)), ("excluded", .bool(!undo))]))
  }
}
