import AppboxContainer
import AppboxCore
import Foundation
import Glibc

// `ps`, `terminate` and `logs`: apps running in the background (`launch --detach`) or in
// another shell, and what detached launches wrote (docs/lifecycle.md).

struct PsCommand: ParsableCommand {
  static let description = CommandDescription(
    name: "ps", abstract: "List the running apps: pid, since when, mode and command.",
    discussion: """
      One line per run of 'run' or 'launch', in the foreground (another shell) or detached. PID is the \
      app's first process in the host's pid namespace (the jail's own pid 1 when that has ended); the \
      owner is the appbox process that holds the run (its supervisor, for a detached launch).
      """,
    positionals: [.init("APP", help: "Only this app's runs.", optional: true)],
    examples: [
      .init("Every running app, then one app's runs:", "appbox ps", "appbox ps com.example.notes"),
      .init("The pids alone, for a script:", "appbox --json ps | jq '.[].pid'"),
    ],
    exitStatuses: [.noApp])
  let app: String?
  init(_ arguments: ParsedArguments) throws { app = arguments.positional(0) }

  func run(_ context: CommandContext) throws -> CommandOutput {
    let session = try context.openDevice(mutating: false)
    let runs = session.runs(of: try app.map { try session.app($0) })
    func pid(_ run: RunRecord) -> pid_t {
      run.appPID ?? run.jail.flatMap { session.firstProcess(ofJail: $0, timeout: .zero) ?? $0.pid }
        ?? run.owner.pid
    }
    let text =
      runs.isEmpty
      ? (app.map { "\($0) is not running." } ?? "No app is running.")
      : table(
        ["APP", "PID", "SINCE", "MODE", "COMMAND"],
        runs.map { run in
          [
            run.bundleIdentifier, String(pid(run)), timestamp(run.started),
            run.detached ? "detached" : "foreground",
            run.command.map(Terminal.escape).joined(separator: " "),
          ]
        })
    return CommandOutput(
      text: text,
      json: .array(
        runs.map { run in
          .object([
            ("app", .string(run.bundleIdentifier)), ("containerID", .string(run.containerID)),
            ("pid", .int(pid(run))), ("jailPID", run.jail.map { .int($0.pid) } ?? .null),
            ("ownerPID", .int(run.owner.pid)), ("since", .string(timestamp(run.started))),
            ("detached", .bool(run.detached)), ("launch", .optional(run.launchID)),
            ("command", .array(run.command.map(JSONValue.string))),
          ])
        }))
  }
}

struct TerminateCommand: ParsableCommand {
  static let description = CommandDescription(
    name: "terminate",
    abstract:
      "Stop every process of a running app: a signal, then SIGKILL to its whole jail after a grace period.",
    discussion: """
      Every run of the app (detached or in another shell) is ended: the signal (default SIGTERM) goes to \
      every process of its jail's pid namespace, daemons it started included; whatever is left after the \
      grace period (default 5 seconds) is killed with the jail (SIGKILL to its pid 1, which takes the \
      whole namespace). terminate returns once the app's running lock is free. An end asked for here is \
      not recorded as a crash. An app that does not run is no error.
      """,
    positionals: [appArgument],
    options: [
      .init(
        "signal", value: "S",
        help: "The first signal: TERM (default), INT, HUP, QUIT, KILL, USR1... or a number."),
      .init("grace", value: "SECONDS", help: "How long the app has before SIGKILL (default 5)."),
    ],
    examples: [
      .init("Stop an app:", "appbox terminate com.example.notes"),
      .init(
        "Ask it with SIGINT, and kill it after 1 second:",
        "appbox terminate com.example.notes --signal INT --grace 1"),
    ],
    exitStatuses: [.noApp])
  let app: String
  let signal: Int32
  let grace: Double

  init(_ arguments: ParsedArguments) throws {
    app = arguments.positional(0)!
    let name = arguments.value("signal") ?? "TERM"
    guard let signal = SignalName.parse(name) else {
      throw arguments.usage("--signal takes a signal name (TERM, INT, KILL...) or number, not '\(name)'")
    }
    self.signal = signal
    let graceText = arguments.value("grace") ?? "5"
    guard let grace = Double(graceText), grace.isFinite, grace >= 0, grace <= 86_400 else {
      throw arguments.usage("--grace takes a number of seconds from 0 to 86400, not '\(graceText)'")
    }
    self.grace = grace
  }

  func run(_ context: CommandContext) throws -> CommandOutput {
    let session = try context.openDevice(mutating: false)
    let record = try session.app(app)
    let report = try session.terminate(record, signal: signal, grace: .milliseconds(Int(grace * 1000)))
    let text =
      report.runs.isEmpty
      ? "\(record.bundleIdentifier) is not running."
      : "Terminated \(record.bundleIdentifier): \(report.runs.count) run\(report.runs.count == 1 ? "" : "s"), "
        + "\(SignalName.name(of: signal)) to \(report.signalled) process\(report.signalled == 1 ? "" : "es")"
        + (report.killed ? "; what was left after \(grace) s was killed (SIGKILL)" : "")
    return CommandOutput(
      text: text,
      json: .object([
        ("app", .string(record.bundleIdentifier)), ("runs", .int(report.runs.count)),
        ("signal", .string(SignalName.name(of: signal))), ("signalled", .int(report.signalled)),
        ("killed", .bool(report.killed)),
      ]))
  }
}

struct LogsCommand: ParsableCommand {
  static let description = CommandDescription(
    name: "logs",
    abstract: "Print the output of an app's latest detached launch, and how it ended if it crashed.",
    discussion: """
      A detached launch's stdout and stderr go to a log outside the home, \
      .appbox/logs/<CONTAINER-ID>/<LAUNCH>.log, kept to 1 MiB (the part before it as .log.1) for each of \
      the app's last 5 launches. A launch that died by a signal (not one terminate sent) leaves a crash \
      record: the signal, the time, the exit status and the log's last 4 KiB; logs shows it after the \
      output, and inspect shows the latest. --follow keeps printing what the app writes until it ends. \
      Control characters are escaped when stdout is a terminal.
      """,
    positionals: [appArgument],
    options: [
      .init("follow", help: "Keep printing new output until the launch ends."),
      .init("launch", value: "ID", help: "Another launch than the latest (ids as --json lists them)."),
    ],
    examples: [
      .init(
        "The latest launch's output, then follow a running one:", "appbox logs com.example.notes",
        "appbox logs com.example.notes --follow"),
      .init(
        "Whether the latest launch crashed, for a script:", "appbox --json logs com.example.notes | jq .crash"
      ),
    ],
    exitStatuses: [.noInput("No such app, or no such launch.")])
  let app: String
  let follow: Bool
  let launch: String?

  init(_ arguments: ParsedArguments) throws {
    app = arguments.positional(0)!
    follow = arguments.flag("follow")
    launch = arguments.value("launch")
  }

  func run(_ context: CommandContext) throws -> CommandOutput {
    let session = try context.openDevice(mutating: false)
    let record = try session.app(app)
    let logs = session.launchLogs(of: record)
    let crashes = session.crashes(of: record)
    var chosen = logs.last
    if let launch {
      guard let found = logs.first(where: { $0.launchID == launch }) else {
        throw CLIFailure(.notFound, "No launch '\(launch)' of \(record.bundleIdentifier) has a log")
      }
      chosen = found
    }
    let launchID = chosen?.launchID ?? (launch == nil ? crashes.first?.launchID : launch)
    let crash = crashes.first { $0.launchID == launchID }
    let escape = context.stdout.isTerminal
    var output: [UInt8] = []
    func emit(_ bytes: [UInt8]) {
      if context.globals.json {
        output += bytes
        return
      }
      guard !bytes.isEmpty else { return }
      context.stdout.write(
        escape ? Array(Terminal.sanitize(String(decoding: bytes, as: UTF8.self)).utf8) : bytes)
    }
    if let chosen {
      emit(chosen.contents())
      if follow { followLog(chosen, session: session, app: record, emit: emit) }
    }
    let running = session.runs(of: record).contains { $0.launchID == chosen?.launchID }
    var trailer: [String] = []
    if chosen == nil {
      trailer.append("No launch log for \(record.bundleIdentifier) (detached launches keep one).")
    }
    if let crash {
      trailer.append(
        "-- \(record.bundleIdentifier) crashed: \(crash.signalName) (signal \(crash.signal)) at "
          + "\(timestamp(crash.time)), exit status \(crash.exitStatus) --")
    }
    if !context.globals.json, !trailer.isEmpty, !context.globals.quiet {
      context.stdout.write(trailer.joined(separator: "\n") + "\n")
    }
    return CommandOutput(
      json: .object([
        ("app", .string(record.bundleIdentifier)), ("launch", .optional(chosen?.launchID)),
        ("log", .optional(chosen?.path)), ("running", .bool(running)),
        ("output", .string(String(decoding: output, as: UTF8.self))),
        ("crash", crash.map(crashJSON) ?? .null),
      ]))
  }

  /// Prints what the log gains until its launch has ended and nothing more arrives.
  private func followLog(
    _ log: LaunchLogFile, session: DeviceSession, app: AppRecord, emit: ([UInt8]) -> Void
  ) {
    var offset = (try? FileManager.default.attributesOfItem(atPath: log.path)[.size] as? Int) ?? 0
    var inode = Self.inode(of: log.path)
    while true {
      let running = session.runs(of: app).contains { $0.launchID == log.launchID }
      let current = Self.inode(of: log.path)
      if current != inode {
        // Rotated: the rest of the old file is .log.1 now, then the new one from its start.
        emit(Self.bytes(of: log.previousPath, from: offset))
        offset = 0
        inode = current
      }
      let fresh = Self.bytes(of: log.path, from: offset)
      offset += fresh.count
      emit(fresh)
      if !running && fresh.isEmpty { return }
      if fresh.isEmpty { usleep(100_000) }
    }
  }

  private static func inode(of path: String) -> UInt64? {
    var st = stat()
    return stat(path, &st) == 0 ? UInt64(st.st_ino) : nil
  }

  private static func bytes(of path: String, from offset: Int) -> [UInt8] {
    guard let handle = FileHandle(forReadingAtPath: path) else { return [] }
    defer { try? handle.close() }
    guard (try? handle.seek(toOffset: UInt64(offset))) != nil else { return [] }
    return (try? handle.readToEnd()).map { Array($0) } ?? []
  }
}

/// A crash record as `logs` and `inspect` print it in JSON.
func crashJSON(_ crash: CrashRecord) -> JSONValue {
  .object([
    ("launch", .string(crash.launchID)), ("signal", .int(crash.signal)),
    ("signalName", .string(crash.signalName)),
    ("exitStatus", .int(crash.exitStatus)), ("time", .string(timestamp(crash.time))),
    ("detached", .bool(crash.detached)),
    ("command", .array(crash.command.map(JSONValue.string))),
    ("logTail", .string(String(decoding: crash.logTail, as: UTF8.self))),
  ])
}

/// A failure the command line itself finds (not a library's), with its kind.
struct CLIFailure: AppboxFailure {
  var kind: FailureKind
  var message: String
  init(_ kind: FailureKind, _ message: String) {
    self.kind = kind
    self.message = message
  }
  var description: String { message }
}
