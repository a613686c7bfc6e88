import AppboxCore
import Foundation
import Glibc

/// What a command produced: text for people, JSON for scripts, or raw bytes (a secret,
/// a file's content), and the exit status (non-zero only for `run`/`launch`).
public struct CommandOutput: Sendable {
  public var text: String?
  public var json: JSONValue?
  public var raw: [UInt8]?
  public var exitStatus: Int32

  public init(text: String? = nil, json: JSONValue? = nil, raw: [UInt8]? = nil, exitStatus: Int32 = 0) {
    self.text = text
    self.json = json
    self.raw = raw
    self.exitStatus = exitStatus
  }
}

/// Where output goes; tests capture it, the real program writes to file descriptors.
public protocol OutputSink: AnyObject, Sendable {
  func write(_ bytes: [UInt8])
  /// Whether this sink is a terminal (progress bars are drawn only there).
  var isTerminal: Bool { get }
  /// The first write that failed, if one did (a full disk, a closed pipe).
  var failure: SystemError? { get }
  /// The terminal's width in columns, when this sink is a terminal that knows it.
  var columns: Int? { get }
}

extension OutputSink {
  public func write(_ text: String) { write(Array(text.utf8)) }
  public var failure: SystemError? { nil }
  public var columns: Int? { nil }
}

/// A sink over a file descriptor (1 or 2). A write that fails is kept (`failure`): the runner
/// reports a failed standard output as the command's failure. A write to standard error is
/// tried twice (it is how failures are told).
public final class DescriptorSink: OutputSink, @unchecked Sendable {
  let fd: Int32
  private let lock = NSLock()
  private var firstFailure: SystemError?
  public init(fd: Int32) { self.fd = fd }

  public func write(_ bytes: [UInt8]) {
    do {
      try FileDescriptor(rawValue: fd).writeAll(bytes)
    } catch let error as SystemError {
      if fd == 2, (try? FileDescriptor(rawValue: fd).writeAll(bytes)) != nil { return }
      lock.withLock { if firstFailure == nil { firstFailure = error } }
    } catch {}
  }

  public var isTerminal: Bool { isatty(fd) == 1 }
  public var columns: Int? { FileDescriptor(rawValue: fd).terminalColumns }

  /// The first write that failed, named after the stream.
  public var failure: SystemError? {
    lock.withLock {
      firstFailure.map {
        SystemError("write \(fd == 1 ? "standard output" : "standard error")", errno: $0.errno)
      }
    }
  }
}

/// A sink that keeps what is written, for tests; given a width, it passes for a terminal.
public final class CapturingSink: OutputSink, @unchecked Sendable {
  private let lock = NSLock()
  private var storage: [UInt8] = []
  public let columns: Int?
  public init(terminalColumns: Int? = nil) { columns = terminalColumns }
  public func write(_ bytes: [UInt8]) { lock.withLock { storage += bytes } }
  public var isTerminal: Bool { columns != nil }
  public var bytes: [UInt8] { lock.withLock { storage } }
  public var text: String { String(decoding: bytes, as: UTF8.self) }
}

/// Everything a command may use while it runs.
public final class CommandContext: @unchecked Sendable {
  public let globals: GlobalOptions
  public let environment: [String: String]
  /// How long locks wait for another appbox (`--wait`, else `$APPBOX_LOCK_TIMEOUT`): parsed
  /// once by the runner (`LockWait.of`), passed to the device session and repositories.
  public let lockWait: LockWait
  public let stdout: OutputSink
  public let stderr: OutputSink
  /// The output of a command that writes it as it goes (`stream()`), once it asked for it.
  var streamed: StreamedOutput?
  /// Work a command leaves for after its output is written (deleting an old home an update
  /// replaced); each returns warnings.
  private var afterOutput: [() -> [String]] = []

  public init(
    globals: GlobalOptions, environment: [String: String], lockWait: LockWait = .none, stdout: OutputSink,
    stderr: OutputSink
  ) {
    self.globals = globals
    self.environment = environment
    self.lockWait = lockWait
    self.stdout = stdout
    self.stderr = stderr
  }

  /// A warning line on stderr (shown even with --json, suppressed by --quiet); with
  /// --json-progress, `{"type": "warning", "message"}`.
  public func warn(_ message: String) {
    guard !globals.quiet else { return }
    if globals.jsonProgress {
      stderr.write(jsonLine("warning", message))
    } else {
      stderr.write("warning: \(Terminal.sanitize(message))\n")
    }
  }

  /// One line of --json-progress output carrying a message.
  func jsonLine(_ type: String, _ message: String) -> String {
    JSONValue.object([("type", .string(type)), ("message", .string(message))]).serializedOnOneLine() + "\n"
  }

  /// Runs `work` once the command's output has been written.
  public func afterOutput(_ work: @escaping () -> [String]) { afterOutput.append(work) }

  /// Runs the work left for after the output (the runner calls it), warning about what failed.
  func runAfterOutput() {
    let work = afterOutput
    afterOutput.removeAll()
    for item in work {
      for warning in item() { warn(warning) }
    }
  }

  /// A status line on stderr, for people only (not with --json or --quiet); with
  /// --json-progress, `{"type": "note", "message"}`.
  public func note(_ message: String) {
    guard !globals.quiet && !globals.json else { return }
    stderr.write(globals.jsonProgress ? jsonLine("note", message) : Terminal.sanitize(message) + "\n")
  }
}
