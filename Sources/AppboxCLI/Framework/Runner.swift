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
    let status = execute(arguments, environment: environment, stdout: stdout, stderr: stderr)
    // Writes that failed after the command thought it was done: a checkpoint of a database
    // as it closed, or the output itself. Every failed write or sync is the command's failure,
    // but a checkpoint of a database whose commits were synced loses nothing (a warning).
    let closing = Database.takeCloseFailures()
    for harmless in closing.harmless {
      stderr.write("warning: \(Terminal.sanitize(errorMessage(shown(harmless)))); its log keeps the data\n")
    }
    let late: [any Error] = closing.lost + (stdout.failure.map { [$0] } ?? [])
    guard status == 0, let first = late.first else { return status }
    stderr.write("Error: \(Terminal.sanitize(errorMessage(shown(first))))\n")
    return ExitStatus.of(first)
  }

  private func execute(
    _ arguments: [String], environment: [String: String], stdout: OutputSink, stderr: OutputSink
  )
    -> Int32
  {
    let invocation: Invocation
    do {
      invocation = try parser.parse(arguments)
    } catch let error as UsageError {
      return reportUsage(error, globals: error.globals ?? GlobalOptions(), stdout: stdout, stderr: stderr)
    } catch {
      stderr.write("Error: \(error)\n")
      return ExitStatus.usage
    }
    let globals = invocation.globals
    if globals.version {
      stdout.write(
        globals.json
          ? JSONValue.object([("version", .string(version))]).serialized() + "\n" : "appbox \(version)\n")
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
        stdout.write(
          JSONValue.object([("command", .string(path)), ("help", .string(text))]).serialized() + "\n")
      } else {
        stdout.write(text)
      }
      return 0
    }
    // --wait reaches the libraries as the lock timeout they read from the environment.
    var environment = environment
    if let wait = globals.wait { environment["APPBOX_LOCK_TIMEOUT"] = String(wait) }
    let context = CommandContext(globals: globals, environment: environment, stdout: stdout, stderr: stderr)
    do {
      let command = try invocation.command!.init(invocation.arguments)
      let output = try command.run(context)
      if globals.json {
        if let json = output.json { stdout.write(json.serialized() + "\n") }
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
      return reportUsage(error, globals: globals, stdout: stdout, stderr: stderr)
    } catch {
      context.report(error)
      if globals.json { stdout.write(JSONValue.object([("error", errorJSON(error))]).serialized() + "\n") }
      context.runAfterOutput()
      return ExitStatus.of(error)
    }
  }

  /// A malformed command line: "Error: …" and the page to read on stderr (one JSON line with
  /// --json-progress), and with --json the error document on stdout. Exit 64.
  private func reportUsage(
    _ error: UsageError, globals: GlobalOptions, stdout: OutputSink, stderr: OutputSink
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
    if globals.json {
      stdout.write(
        JSONValue.object([
          (
            "error",
            .object([
              ("status", .int(ExitStatus.usage)), ("message", .string(error.message)),
              ("help", .string(error.helpCommand)),
            ])
          )
        ]).serialized() + "\n")
    }
    return ExitStatus.usage
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
