import AppboxBackup
import AppboxCore
import AppboxRepository
import Foundation

// Renders engine events as progress, in one of three modes chosen once:
// - a terminal (stderr is one, no --quiet): one status line redrawn in place (`\r`, erase
//   line) at most every 0.1 s, at once when the phase changes, and every second from a
//   ticker so the elapsed time moves while an engine is quiet (restore's swap); fitted to
//   stderr's width at each draw, so it never wraps;
// - a log (stderr is no terminal, no --quiet, no --json): a plain line every
//   APPBOX_PROGRESS_INTERVAL seconds (5) while an operation runs, none before;
// - --json-progress (no --quiet): a JSON status line when the operation starts, at every
//   phase and every APPBOX_PROGRESS_INTERVAL seconds (1), and a "done" line when it ends.
// Warnings go through the context (`warning:` lines, or JSON ones). Events come from engine
// threads and ticks from the ticker: all under one lock.

/// Renders engine events as progress on stderr, and warnings as `warning:` lines.
final class ProgressBar: EngineObserver, @unchecked Sendable {
  private enum Mode { case terminal, log, json, none }

  private let context: CommandContext
  private let mode: Mode
  private let interval: Double
  private let lock = NSLock()
  private var status: ProgressStatus?
  private var started = Date()
  private var planned: Date?
  private var lastDraw = Date.distantPast
  private var visible = false
  private var ticker: DispatchSourceTimer?
  /// With APPBOX_TRACE=1, every event is also printed with the milliseconds since the first.
  private let trace: Bool
  private let origin = DispatchTime.now().uptimeNanoseconds

  init(_ context: CommandContext) {
    self.context = context
    let globals = context.globals
    mode =
      globals.quiet
      ? .none
      : globals.jsonProgress
        ? .json : context.stderr.isTerminal ? .terminal : globals.json ? .none : .log
    let configured = context.environment["APPBOX_PROGRESS_INTERVAL"].flatMap(Double.init).flatMap {
      $0.isFinite && $0 >= 0 ? $0 : nil
    }
    interval = configured ?? (mode == .json ? 1 : 5)
    trace = context.environment["APPBOX_TRACE"] == "1"
  }

  deinit { ticker?.cancel() }

  func engine(_ event: EngineEvent) {
    lock.withLock {
      if trace {
        let elapsed = Double(DispatchTime.now().uptimeNanoseconds - origin) / 1e6
        if case .progress = event {
        } else {
          context.stderr.write(String(format: "trace %8.1f ms  ", elapsed) + "\(event)\n")
        }
      }
      switch event {
      case .started(let operation, let app):
        status = ProgressStatus(operation: operation, app: app)
        started = Date()
        planned = nil
        lastDraw = started
        if mode == .json { emit(force: true) }
        startTicker()
      case .planned(_, let files, let bytes):
        status?.totalFiles = files
        status?.totalBytes = bytes
        status?.filesDone = 0
        status?.bytesDone = 0
        planned = Date()
      case .progress(let files, let bytes):
        status?.filesDone = files
        status?.bytesDone = bytes
        emit(force: false)
      case .phase(let phase):
        status?.phase = phase
        emit(force: true)
      case .warning(let path, let message):
        clear()
        context.warn(path.map { "'\($0)' \(message)" } ?? message)
      case .stage:
        break
      case .finished:
        ticker?.cancel()
        ticker = nil
        clear()
        if mode == .json, var status {
          status.elapsed = Date().timeIntervalSince(started)
          context.stderr.write(doneLine(status))
        }
        status = nil
      }
    }
  }

  /// Shows the status now (`force`: a phase began) or when its mode's time has come.
  private func emit(force: Bool) {
    guard var status else { return }
    let now = Date()
    let due: Bool
    switch mode {
    case .none: return
    case .terminal: due = force || now.timeIntervalSince(lastDraw) >= 0.1
    case .log: due = now.timeIntervalSince(lastDraw) >= interval
    case .json: due = force || now.timeIntervalSince(lastDraw) >= interval
    }
    guard due else { return }
    lastDraw = now
    status.elapsed = now.timeIntervalSince(started)
    status.sincePlanned = planned.map { now.timeIntervalSince($0) }
    switch mode {
    case .terminal:
      // One column short of the width: some terminals wrap on a line that fills the last one.
      let width = (TextLayout.environmentColumns(context.environment) ?? context.stderr.columns ?? 80) - 1
      context.stderr.write("\r\u{1B}[2K" + Terminal.sanitize(status.line(width: max(1, width))))
      visible = true
    case .log: context.stderr.write(Terminal.sanitize(status.plainLine) + "\n")
    case .json: context.stderr.write(status.json.serializedOnOneLine() + "\n")
    case .none: break
    }
  }

  private func doneLine(_ status: ProgressStatus) -> String {
    JSONValue.object([
      ("type", .string("done")), ("operation", .string(status.operation)), ("app", .optional(status.app)),
      ("filesDone", .int(status.filesDone)), ("bytesDone", .int(status.bytesDone)),
      ("secondsElapsed", .number((status.elapsed * 10).rounded() / 10)),
    ]).serializedOnOneLine() + "\n"
  }

  /// Ticks every second while an operation runs, so time moves on screen (and log lines
  /// come) while the engine reports nothing.
  private func startTicker() {
    guard mode != .none, ticker == nil else { return }
    let timer = DispatchSource.makeTimerSource(queue: DispatchQueue(label: "appbox-progress"))
    timer.schedule(deadline: .now() + 1, repeating: 1)
    timer.setEventHandler { [weak self] in
      guard let self else { return }
      self.lock.withLock { self.emit(force: self.mode == .terminal) }
    }
    ticker = timer
    timer.resume()
  }

  private func clear() {
    if visible {
      context.stderr.write("\r\u{1B}[2K")
      visible = false
    }
  }
}
