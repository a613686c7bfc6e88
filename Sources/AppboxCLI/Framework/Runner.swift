import AppboxCore
import AppboxStore
import Foundation

/// Runs one command line start to finish: parse, validate, run, print, and map any
/// error to one stderr line and a sysexits status. The only place exit codes are chosen.
/// With `--json`, every outcome is one JSON document on stdout: the result, the page asked
/// for, the version, or `{"error": …}` for a failure, a malformed command line included.
public struct CommandRunner: Sendable {
  public let parser: ArgumentParser
  public let version: String
  /// The root page's examples.
  public let manual: CommandDescription?

  public init(commands: [any ParsableCommand.Type], version: String, manual: CommandDescription? = nil) {
    parser = ArgumentParser(commands: commands)
    self.version = version
    self.manual = manual
  }

  public func run(
    _ arguments: [String], environment: [String: String], stdout: OutputSink, stderr: OutputSink
  )
    -> Int32
  {
    // Under --json the document is held until the command has closed everything, so that a
    // failure found late (a database's closing checkpoint) replaces it: one document, true.
    let document = JSONDocument()
    let status = execute(
      arguments, environment: environment, stdout: stdout, stderr: stderr, document: document)
    // Writes that failed after the command thought it was done: a checkpoint of a database
    // as it closed, or the output itself. Every failed write or sync is the command's failure,
    // but a checkpoint of a database whose commits were synced loses nothing (a warning).
    let closing = Database.takeCloseFailures()
    for harmless in closing.harmless {
      stderr.write("warning: \(Terminal.sanitize(errorMessage(shown(harmless)))); its log keeps the data\n")
    }
    guard status == 0, let first = closing.lost.first else {
      document.write(to: stdout)
      return lateFailure(of: stdout, status: status, stderr: stderr)
    }
    stderr.write("Error: \(Terminal.sanitize(errorMessage(shown(first))))\n")
    if document.value != nil { document.value = .object([("error", errorJSON(first))]) }
    document.write(to: stdout)
    return ExitStatus.of(first)
  }

  /// A failed write to standard output (a full disk, a closed pipe) fails a command that
  /// thought it had succeeded; it cannot be told on stdout, only on stderr.
  private func lateFailure(of stdout: OutputSink, status: Int32, stderr: OutputSink) -> Int32 {
    guard status == 0, let failure = stdout.failure else { return status }
    stderr.write("Error: \(Terminal.sanitize(errorMessage(shown(failure))))\n")
    return ExitStatus.of(failure)
  }

  private func execute(
    _ arguments: [String], environment: [String: String], stdout: OutputSink, stderr: OutputSink,
    document: JSONDocument
  )
    -> Int32
  {
    let invocation: Invocation
    do {
      invocation = try parser.parse(arguments)
    } catch let error as UsageError {
      return reportUsage(error, globals: error.globals ?? GlobalOptions(), document: document, stderr: stderr)
    } catch {
      // The parser throws only usage errors; should another reach here, it is still one.
      var globals = GlobalOptions()
      globals.json = arguments.prefix { $0 != "--" }.contains("--json")
      return reportUsage(
        UsageError(errorMessage(error)), globals: globals, document: document, stderr: stderr)
    }
    let globals = invocation.globals
    if globals.version {
      if globals.json {
        document.value = .object([("version", .string(version))])
      } else {
        stdout.write("appbox \(version)\n")
      }
      return 0
    }
    if globals.help || invocation.command == nil {
      let width = TextLayout.helpWidth(terminal: stdout.columns, environment: environment)
      let text =
        invocation.chain.isEmpty
        ? HelpFormatter.rootHelp(commands: parser.commands, version: version, manual: manual, width: width)
        : HelpFormatter.commandHelp(chain: invocation.chain, width: width)
      if globals.json {
        let path = invocation.chain.map { $0.description.name }.joined(separator: " ")
        document.value = .object([("command", .string(path)), ("help", .string(text))])
      } else {
        stdout.write(text)
      }
      return 0
    }
    // The lock wait is read here once, and handed down to every lock through the context.
    let lockWait: LockWait
    do {
      lockWait = try LockWait.of(globals, environment: environment)
    } catch {
      return reportUsage(error, globals: globals, document: document, stderr: stderr)
    }
    let context = CommandContext(
      globals: globals, environment: environment, lockWait: lockWait, stdout: stdout, stderr: stderr)
    do {
      let command = try invocation.command!.init(invocation.arguments)
      try command.validate(context)
      // No state by accident: a mistyped --root never becomes a new device.
      if !invocation.command!.createsDevice { try context.requireExistingDevice() }
      let output = try command.run(context)
      if let streamed = context.streamed {
        // The command wrote its output as it went (StreamedOutput): the last piece goes now.
        try streamed.flush()
      } else if globals.json {
        document.value = output.json
      } else if let raw = output.raw {
        stdout.write(raw)
      } else if let text = output.text, !globals.quiet, !text.isEmpty {
        // Commands escape the app-chosen parts they print; this is the net under them.
        let safe = Terminal.sanitize(text)
        stdout.write(safe.hasSuffix("\n") ? safe : safe + "\n")
      }
      context.runAfterOutput()
      return output.exitStatus
    } catch let error as UsageError {
      let cut = context.streamed?.abandon() ?? false
      return reportUsage(error, globals: globals, document: cut ? nil : document, stderr: stderr)
    } catch {
      // Output already written cannot be taken back: it stays, cut after its last whole row,
      // and the failure is told on stderr only (docs/json.md, "Streamed listings").
      let cut = context.streamed?.abandon() ?? false
      context.report(error)
      if globals.json && !cut { document.value = .object([("error", errorJSON(error))]) }
      context.runAfterOutput()
      return ExitStatus.of(error)
    }
  }

  /// A malformed command line: "Error: …" and the page to read on stderr (one JSON line with
  /// --json-progress), and with --json the error document on stdout (unless `document` is nil:
  /// the command's output was streamed already). Exit 64.
  private func reportUsage(
    _ error: UsageError, globals: GlobalOptions, document: JSONDocument?, stderr: OutputSink
  )
    -> Int32
  {
    let message = Terminal.sanitize(error.message)
    if globals.jsonProgress {
      stderr.write(
        JSONValue.object([
          ("type", .string("error")), ("status", .int(ExitStatus.usage)), ("message", .string(error.message)),
          ("help", .string(error.helpCommand)),
        ]).serializedOnOneLine() + "\n")
    } else {
      stderr.write("Error: \(message)\nSee '\(error.helpCommand)'\n")
    }
    if globals.json, let document {
      document.value = .object([
        (
          "error",
          .object([
            ("status", .int(ExitStatus.usage)), ("message", .string(error.message)),
            ("help", .string(error.helpCommand)),
          ])
        )
      ])
    }
    return ExitStatus.usage
  }
}

/// The one JSON document a --json command line prints, held until the command is done.
final class JSONDocument {
  var value: JSONValue?
  func write(to stdout: OutputSink) {
    if let value { stdout.write(value.serialized() + "\n") }
  }
}

/// An error's message on one line.
func errorMessage(_ error: Error) -> String {
  String(describing: error).replacingOccurrences(of: "\n", with: " ")
}

/// `{"status", "message"}` for an error, as `--json` reports failures.
func errorJSON(_ error: Error) -> JSONValue {
  .object([("status", .int(ExitStatus.of(error))), ("message", .string(errorMessage(shown(error))))])
}

extension CommandContext {
  /// The one stderr line of a failure: "Error: " and the message (app-chosen bytes escaped);
  /// with --json-progress, `{"type": "error", "status", "message"}`.
  func report(_ error: Error, prefix: String = "") {
    if globals.jsonProgress {
      stderr.write(
        JSONValue.object([
          ("type", .string("error")), ("status", .int(ExitStatus.of(error))),
          ("message", .string(prefix + errorMessage(shown(error)))),
        ]).serializedOnOneLine() + "\n")
      return
    }
    stderr.write("Error: \(Terminal.sanitize(prefix + errorMessage(shown(error))))\n")
  }
}

/// The error as reported: a full file system said as such ("no space left on DEVICE").
func shown(_ error: Error) -> Error { NoSpaceError.from(error) ?? error }

extension CommandContext {
}

/// The sysexits statuses of the command-line contract.
public enum ExitStatus {
  public static let usage: Int32 = 64
  public static let dataError: Int32 = 65
  public static let noInput: Int32 = 66
  public static let unavailable: Int32 = 69
  public static let cannotCreate: Int32 = 73
  public static let ioError: Int32 = 74
  public static let tempFailure: Int32 = 75
  public static let noPermission: Int32 = 77

  public static func of(_ kind: FailureKind) -> Int32 {
    switch kind {
    case .invalidArgument: return usage
    case .badData: return dataError
    case .notFound: return noInput
    case .unavailable: return unavailable
    case .cannotCreate: return cannotCreate
    case .io: return ioError
    case .busy: return tempFailure
    case .denied: return noPermission
    }
  }

  public static func of(_ error: Error) -> Int32 {
    if let failure = error as? any AppboxFailure { return of(failure.kind) }
    return ioError
  }
}

extension LockWait {
  /// The lock wait of a command line: `--wait`, else `$APPBOX_LOCK_TIMEOUT` (the one place
  /// appbox reads it), else none. A variable that is no number of seconds (0 or more; `inf`
  /// and longer than a year wait a year) is a usage error naming it (exit 64).
  static func of(_ globals: GlobalOptions, environment: [String: String]) throws(UsageError) -> LockWait {
    if let wait = globals.wait { return wait }
    guard let text = environment[EnvironmentVariable.lockTimeout.name] else { return .none }
    guard let wait = LockWait.parse(text) else {
      throw UsageError(
        "\(EnvironmentVariable.lockTimeout.name) needs a number of seconds (0 or more), not '\(text)'")
    }
    return wait
  }
}
