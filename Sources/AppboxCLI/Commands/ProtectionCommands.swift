import AppboxContainer
import AppboxCore
import Foundation
import Glibc

// The device passcode and lock (`device passcode|lock|unlock|reboot`) and `protect`.

private let passcodeFileOption = CommandDescription.Option(
  "passcode-file", value: "F",
  help: "Read the passcode from file F ('-': standard input, the default), one per line.")

/// Reads `count` passcodes, one per line, from `--passcode-file` or standard input; on a
/// terminal, asks for each without echoing it.
private func readPasscodes(_ arguments: ParsedArguments, prompts: [String], context: CommandContext) throws
  -> [[UInt8]]
{
  let file = arguments.value("passcode-file") ?? "-"
  if file == "-" && isatty(0) == 1 {
    return prompts.map {
      askWithoutEcho($0.prefix(1).uppercased() + $0.dropFirst(), write: context.stderr.write)
    }
  }
  warnIfOthersCanRead(file, what: "passcode", warn: context.warn)
  let bytes: [UInt8]
  do {
    bytes =
      file == "-"
      ? try FileDescriptor(rawValue: 0).readAll(limit: 64 << 10)
      : try FileDescriptor.open(file, O_RDONLY).closeAfter { try $0.readAll(limit: 64 << 10) }
  } catch let error as SystemError where error.errno == Errno(rawValue: EFBIG) {
    throw arguments.usage("the passcode input is larger than 64 KiB")
  }
  var lines = bytes.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false).map { line in
    Array(line.last == UInt8(ascii: "\r") ? line.dropLast() : line)
  }
  if lines.last?.isEmpty == true { lines.removeLast() }
  guard lines.count >= prompts.count else {
    let what =
      prompts.count == 1 ? "a passcode" : "\(prompts.count) lines (\(prompts.joined(separator: ", then ")))"
    throw arguments.usage("expected \(what) on \(file == "-" ? "standard input" : "'\(file)'")")
  }
  return Array(lines.prefix(prompts.count))
}

func protectionLines(_ status: ProtectionStatus) -> [String] {
  let support: String
  switch status.support {
  case .supported: support = "supported"
  case .featureDisabled: support = "not supported (the file system's encrypt feature is off)"
  case .unsupportedFileSystem: support = "not supported (the file system has no fscrypt)"
  }
  let data =
    status.isLocked
    ? "protected data unavailable"
      + (status.availableClasses.contains(.untilFirstUnlock) ? "" : ", not unlocked since the last reboot")
    : "protected data available"
  var lines = [
    "Passcode:      \(status.isPasscodeSet ? "set" : "not set")",
    "Locked:        \(status.isLocked ? "yes" : "no") (\(data))",
    "Encryption:    \(support)",
    "Attempts:      \(status.failedAttempts) failed unlock\(status.failedAttempts == 1 ? "" : "s")",
  ]
  if let after = status.unlockAllowedAfter, after > Date() {
    lines.append("Next unlock:   not before \(timestamp(after))")
  }
  return lines
}

func protectionJSON(_ status: ProtectionStatus) -> [(String, JSONValue)] {
  [
    ("passcodeSet", .bool(status.isPasscodeSet)), ("locked", .bool(status.isLocked)),
    ("protectedDataAvailable", .bool(status.isProtectedDataAvailable)),
    (
      "availableClasses",
      .array(
        ProtectionClass.allCases.filter { status.availableClasses.contains($0) }.map { .string($0.rawValue) })
    ),
    ("fileProtectionSupported", .bool(status.isFileProtectionSupported)),
    ("failedAttempts", .int(status.failedAttempts)),
    ("unlockAllowedAfter", status.unlockAllowedAfter.map { .string(timestamp($0)) } ?? .null),
  ]
}

/// What the device commands print: a first line saying what happened, then the state.
private func protectionOutput(
  _ session: DeviceSession, _ verb: (ProtectionStatus) -> String, extra: [(String, JSONValue)] = []
) throws -> CommandOutput {
  let status = try session.protection.status()
  return CommandOutput(
    text: ([verb(status)] + protectionLines(status)).joined(separator: "\n"),
    json: .object(protectionJSON(status) + extra))
}

struct DevicePasscode: CommandGroup {
  static let description = CommandDescription(
    name: "passcode", abstract: "Set, change or clear the device passcode.",
    discussion: """
      The passcode wraps the device's file protection class keys (scrypt, mixed with the device key).
      It is read from --passcode-file or standard input, one per line: 'change' reads the current
      passcode, then the new one; 'clear' reads the current one. A wrong passcode exits 77; after
      repeated failures, attempts wait (exit 75 meanwhile). File protection needs a file system with
      encryption (mkfs.ext4 -O encrypt): elsewhere 'set' exits 69.
      """,
    subcommands: [PasscodeSet.self, PasscodeChange.self, PasscodeClear.self])

  /// What every `device passcode` subcommand can end in.
  static let exitCodes: [ExitCode] = [
    .busy("After repeated wrong passcodes, attempts wait; or another appbox holds the device's lock."),
    .denied("The current passcode is wrong."),
  ]
}

struct PasscodeSet: ParsableCommand {
  static let description = CommandDescription(
    name: "set", abstract: "Set the passcode (one set already: exit 73; no file encryption: exit 69).",
    options: [passcodeFileOption],
    examples: [
      .init(
        "Set the passcode from a file, then from standard input:",
        "appbox device passcode set --passcode-file pin.txt", "echo 123456 | appbox device passcode set")
    ],
    exitStatuses: [
      .unavailable("The device root's file system has no encryption (mkfs.ext4 -O encrypt)."),
      .cannotCreate("A passcode is set already (appbox device passcode change)."), .deviceBusy,
    ])
  let arguments: ParsedArguments
  init(_ arguments: ParsedArguments) throws { self.arguments = arguments }

  func run(_ context: CommandContext) throws -> CommandOutput {
    let passcode = try readPasscodes(arguments, prompts: ["new passcode"], context: context)[0]
    let session = try context.openDevice(mutating: true)
    try session.protection.setPasscode(passcode)
    return try protectionOutput(session) { _ in "Passcode set" }
  }
}

struct PasscodeChange: ParsableCommand {
  static let description = CommandDescription(
    name: "change", abstract: "Change the passcode: reads the current one, then the new one.",
    options: [passcodeFileOption],
    examples: [
      .init(
        "Change it, the current passcode on the first line and the new one on the second:",
        "printf '123456\\n654321\\n' | appbox device passcode change")
    ],
    exitStatuses: DevicePasscode.exitCodes + [.unavailable("No passcode is set.")])
  let arguments: ParsedArguments
  init(_ arguments: ParsedArguments) throws { self.arguments = arguments }

  func run(_ context: CommandContext) throws -> CommandOutput {
    let codes = try readPasscodes(arguments, prompts: ["current passcode", "new passcode"], context: context)
    let session = try context.openDevice(mutating: true)
    try session.protection.changePasscode(from: codes[0], to: codes[1])
    return try protectionOutput(session) { _ in "Passcode changed" }
  }
}

struct PasscodeClear: ParsableCommand {
  static let description = CommandDescription(
    name: "clear",
    abstract:
      "Remove the passcode: protected files stay encrypted and always available; when-passcode-set keychain "
      + "items are deleted.",
    options: [passcodeFileOption],
    examples: [.init("Remove the passcode:", "appbox device passcode clear --passcode-file pin.txt")],
    exitStatuses: DevicePasscode.exitCodes + [.unavailable("No passcode is set.")])
  let arguments: ParsedArguments
  init(_ arguments: ParsedArguments) throws { self.arguments = arguments }

  func run(_ context: CommandContext) throws -> CommandOutput {
    let passcode = try readPasscodes(arguments, prompts: ["current passcode"], context: context)[0]
    let session = try context.openDevice(mutating: true)
    let deleted = try session.protection.clearPasscode(passcode)
    let items = "\(deleted) when-passcode-set keychain item\(deleted == 1 ? "" : "s") deleted"
    return try protectionOutput(
      session, { _ in "Passcode cleared" + (deleted > 0 ? " (\(items))" : "") },
      extra: [("deletedKeychainItems", .int(deleted))])
  }
}

struct DeviceLock: ParsableCommand {
  static let description = CommandDescription(
    name: "lock",
    abstract: "Lock the device: the complete and complete-unless-open class keys leave the kernel.",
    discussion: """
      complete files can no longer be opened, by apps or by appbox (files pull, defaults read, export
      and backup of such an app exit 69). complete-unless-open files that are open stay usable until
      closed (the kernel reports them busy); until-first-unlock files stay readable until a reboot.
      A device without a passcode cannot lock (exit 69).
      """,
    examples: [
      .init("Lock the device, then see what is still available:", "appbox device lock", "appbox device show")
    ],
    exitStatuses: [.unavailable("The device has no passcode, so it cannot lock."), .deviceBusy])
  init(_ arguments: ParsedArguments) throws {}

  func run(_ context: CommandContext) throws -> CommandOutput {
    let session = try context.openDevice(mutating: true)
    let busy = try session.protection.lock().busyClasses
    let note =
      busy.isEmpty
      ? "" : " (open files of class \(busy.map(\.rawValue).joined(separator: ", ")) stay usable until closed)"
    return try protectionOutput(
      session, { _ in "Device locked" + note },
      extra: [("busyClasses", .array(busy.map { .string($0.rawValue) }))])
  }
}

struct DeviceUnlock: ParsableCommand {
  static let description = CommandDescription(
    name: "unlock",
    abstract: "Unlock with the passcode (wrong: exit 77, growing delays; during one: exit 75).",
    options: [passcodeFileOption],
    examples: [.init("Unlock with the passcode in a file:", "appbox device unlock --passcode-file pin.txt")],
    exitStatuses: [
      .busy("After repeated wrong passcodes, attempts wait; or another appbox holds the device's lock."),
      .denied("The passcode is wrong (each wrong one makes the next attempt wait longer)."),
    ])
  let arguments: ParsedArguments
  init(_ arguments: ParsedArguments) throws { self.arguments = arguments }

  func run(_ context: CommandContext) throws -> CommandOutput {
    // A device without a passcode needs none: do not wait for one on standard input.
    let root = context.deviceRoot
    let needsPasscode = (try? DeviceProtection(root: root).status().isPasscodeSet) ?? true
    let passcode =
      needsPasscode ? try readPasscodes(arguments, prompts: ["passcode"], context: context)[0] : []
    let session = try context.openDevice(mutating: true)
    try session.protection.unlock(passcode)
    return try protectionOutput(session) {
      $0.isPasscodeSet ? "Device unlocked" : "The device has no passcode"
    }
  }
}

struct DeviceReboot: ParsableCommand {
  static let description = CommandDescription(
    name: "reboot",
    abstract:
      "Simulate a restart: every class key is dropped and the device is locked until the next unlock.",
    discussion: "Refused while an app runs (exit 75): a restart ends every app.",
    examples: [
      .init(
        "Restart, then unlock as after a real reboot:", "appbox device reboot",
        "appbox device unlock --passcode-file pin.txt")
    ],
    exitStatuses: [.busy("An app is running, or another appbox holds the device's lock.")])
  init(_ arguments: ParsedArguments) throws {}

  func run(_ context: CommandContext) throws -> CommandOutput {
    let session = try context.openDevice(mutating: true)
    try session.protection.reboot(apps: try session.registry.apps(), session: session)
    return try protectionOutput(session) { $0.isLocked ? "Device rebooted: locked" : "Device rebooted" }
  }
}

struct ProtectCommand: ParsableCommand {
  static let description = CommandDescription(
    name: "protect",
    abstract: "Show or raise the data protection class of a file, or of every file in a folder.",
    discussion: """
      PATH is relative to the home and inside Documents or Library (a folder means every file in it,
      recursively). Without --class, prints each file's class. With it, re-creates each file under the
      class's key (fscrypt, atomically, keeping mode, mtime and attributes, and overwriting the old
      plaintext), unless it has that class already. Classes, weakest first: none, until-first-unlock,
      complete-unless-open, complete. Protection can be raised, never lowered or removed (exit 77).
      Needs a passcode and a file system with encryption (exit 69 otherwise, and while the class's key
      is unavailable); the app must not be running (exit 75). Files the app creates later in a
      protected folder are not protected.
      """,
    positionals: [appArgument, .init("PATH", help: "A file or folder in Documents or Library.")],
    options: [
      .init(
        "class", help: "The class to raise to.",
        choices: ProtectionClass.allCases.map(\.rawValue))
    ],
    examples: [
      .init(
        "Each file's class in Documents, then protect one file:",
        "appbox protect com.example.notes Documents",
        "appbox protect com.example.notes Documents/report.pdf --class complete")
    ],
    exitStatuses: [
      .noInput("No such app, or no such file or folder."),
      .unavailable(
        "No passcode, no file encryption, or the class's key is unavailable (the device is locked)."),
      .busy("The app is running, or another appbox holds its lock."),
      .denied(
        "A lower class than the file has: protection is never lowered; or a path outside Documents and Library."
      ),
    ])
  let app: String
  let path: String
  let protectionClass: ProtectionClass?

  init(_ arguments: ParsedArguments) throws {
    app = arguments.positional(0)!
    path = arguments.positional(1)!
    protectionClass = arguments.value("class").flatMap(ProtectionClass.init(rawValue:))
  }

  func run(_ context: CommandContext) throws -> CommandOutput {
    guard let protectionClass else {
      let session = try context.openDevice(mutating: false)
      let entries = try session.protectionClasses(of: try session.app(app), path: path)
      func name(_ entry: FileProtectionEntry) -> String {
        entry.protectionClass?.rawValue ?? "protected (class unreadable while locked)"
      }
      return CommandOutput(
        text: entries.isEmpty
          ? "No files in '\(path)'." : table(["CLASS", "PATH"], entries.map { [name($0), $0.path] }),
        json: .array(
          entries.map {
            .object([
              ("path", .string($0.path)), ("class", .optional($0.protectionClass?.rawValue)),
              ("available", .bool($0.isAvailable)),
            ])
          }))
    }
    let session = try context.openDevice(mutating: true)
    let report = try session.protect(try session.app(app), path: path, to: protectionClass)
    for (path, reason) in report.skipped { context.warn("skipped '\(path)': \(reason)") }
    var lines = report.raised.map { "\($0.path): \($0.from.rawValue) -> \(protectionClass.rawValue)" }
    lines.append(
      "\(report.raised.count) file\(report.raised.count == 1 ? "" : "s") raised to \(protectionClass.rawValue), "
        + "\(report.unchanged.count) already \(protectionClass.rawValue)")
    return CommandOutput(
      text: lines.joined(separator: "\n"),
      json: .object([
        ("class", .string(protectionClass.rawValue)),
        (
          "raised",
          .array(
            report.raised.map {
              .object([("path", .string($0.path)), ("oldClass", .string($0.from.rawValue))])
            })
        ),
        ("unchanged", .array(report.unchanged.map(JSONValue.string))),
        (
          "skipped",
          .array(
            report.skipped.map { .object([("path", .string($0.path)), ("reason", .string($0.reason))]) })
        ),
      ]))
  }
}
