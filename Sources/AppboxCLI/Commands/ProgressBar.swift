import AppboxBackup
import Foundation

/// Renders engine events: on a terminal stderr, one redrawn line with a bar, files, bytes
/// and rate; warnings as `warning:` lines (anywhere, unless --quiet).
final class ProgressBar: EngineObserver, @unchecked Sendable {
  private let context: CommandContext
  private let drawing: Bool
  private let lock = NSLock()
  private var label = ""
  private var totalFiles = 0
  private var totalBytes: Int64 = 0
  private var started = Date()
  private var lastDraw = Date.distantPast
  private var visible = false
  /// With APPBOX_TRACE=1, every event is also printed with the milliseconds since the first.
  private let trace: Bool
  private let origin = DispatchTime.now().uptimeNanoseconds

  init(_ context: CommandContext) {
    self.context = context
    drawing = context.stderr.isTerminal && !context.globals.quiet
    trace = context.environment["APPBOX_TRACE"] == "1"
  }

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
        label = [operation, app].compactMap { $0 }.joined(separator: " ")
        started = Date()
      case .planned(_, let files, let bytes):
        totalFiles = files
        totalBytes = bytes
        started = Date()
      case .progress(let files, let bytes):
        draw(files: files, bytes: bytes)
      case .warning(let path, let message):
        clear()
        context.warn(path.map { "'\($0)' \(message)" } ?? message)
      case .stage:
        break
      case .finished:
        clear()
      }
    }
  }

  private func draw(files: Int, bytes: Int64) {
    guard drawing else { return }
    let now = Date()
    guard now.timeIntervalSince(lastDraw) >= 0.1 else { return }
    lastDraw = now
    let fraction =
      totalBytes > 0
      ? min(1, Double(bytes) / Double(totalBytes))
      : (totalFiles > 0 ? min(1, Double(files) / Double(totalFiles)) : 1)
    let width = 24
    let filled = Int(fraction * Double(width))
    let bar = String(repeating: "#", count: filled) + String(repeating: ".", count: width - filled)
    let elapsed = max(now.timeIntervalSince(started), 0.001)
    let rate = byteCount(Int64(Double(bytes) / elapsed)) + "/s"
    let line =
      "\(label) [\(bar)] \(files)/\(totalFiles) files  \(byteCount(bytes))/\(byteCount(totalBytes))  \(rate)"
    context.stderr.write("\r\u{1B}[2K" + line)
    visible = true
  }

  private func clear() {
    if visible {
      context.stderr.write("\r\u{1B}[2K")
      visible = false
    }
  }
}
