import AppboxBackup
import AppboxRepository
import Foundation

// What a progress display shows at one moment, and its three renderings: the terminal's
// status line (fitted to a width: pieces dropped, least useful first, and never longer than
// the width, so the terminal never wraps it), the plain line written to a log, and the JSON
// status line of --json-progress (its fields are documented in docs/progress.md).

struct ProgressStatus: Equatable {
  var operation: String
  var app: String?
  var phase: Phase?
  /// Known once the engine has planned (nil while it scans).
  var totalFiles: Int?
  var totalBytes: Int64?
  var filesDone = 0
  var bytesDone: Int64 = 0
  /// Seconds since the operation started.
  var elapsed: Double = 0
  /// Seconds since the plan (when the work with a known total began).
  var sincePlanned: Double?

  /// Done so far, from 0 to 1 (by bytes, else by files); nil before the plan.
  var fraction: Double? {
    guard let totalFiles, let totalBytes else { return nil }
    if totalBytes > 0 { return min(1, Double(bytesDone) / Double(totalBytes)) }
    if totalFiles > 0 { return min(1, Double(filesDone) / Double(totalFiles)) }
    return 1
  }

  /// Bytes per second since the plan, while bytes are still moving.
  var rate: Double? {
    guard let sincePlanned, sincePlanned >= 0.5, bytesDone > 0, let fraction, fraction < 1 else { return nil }
    return Double(bytesDone) / sincePlanned
  }

  /// Seconds left at the current rate.
  var remaining: Double? {
    guard let rate, rate > 0, let totalBytes else { return nil }
    return Double(max(0, totalBytes - bytesDone)) / rate
  }

  // MARK: The terminal's line

  /// One line of at most `width` columns: the pieces that fit, in their order (the bar
  /// takes what room is left, 10 to 30 columns, or goes).
  func line(width: Int) -> String {
    var pieces = self.pieces()
    func render(bar: Int) -> String {
      pieces.map { $0.kind == .bar ? barText(bar) : $0.text }.joined(separator: "  ")
    }
    while pieces.count > 1 {
      let fixed = pieces.reduce(0) { $0 + ($1.kind == .bar ? 2 : $1.text.count) } + 2 * (pieces.count - 1)
      if pieces.contains(where: { $0.kind == .bar }) {
        if width - fixed >= 10 { return render(bar: min(30, width - fixed)) }
      } else if fixed <= width {
        return render(bar: 0)
      }
      let drop = pieces.indices.min { pieces[$0].priority < pieces[$1].priority }!
      pieces.remove(at: drop)
    }
    return String(render(bar: 0).prefix(max(0, width)))
  }

  private enum PieceKind { case elapsed, label, phase, percent, bar, files, bytes, rate, remaining }

  private struct Piece {
    var kind: PieceKind
    var text: String
    /// Lower is dropped first when the line is too long.
    var priority: Int
  }

  private func pieces() -> [Piece] {
    var pieces = [
      Piece(kind: .elapsed, text: "[\(clock(elapsed))]", priority: 7),
      // The app (the operation is the command just typed); the operation when it has none.
      Piece(kind: .label, text: app ?? operation, priority: 3),
    ]
    if let phase { pieces.append(Piece(kind: .phase, text: phase.rawValue, priority: 9)) }
    if let fraction {
      pieces.append(Piece(kind: .percent, text: percentText(fraction), priority: 8))
      pieces.append(Piece(kind: .bar, text: "", priority: 1))
    }
    if let totalFiles {
      pieces.append(Piece(kind: .files, text: "\(filesDone)/\(totalFiles) files", priority: 4))
    }
    if let totalBytes {
      pieces.append(
        Piece(kind: .bytes, text: "\(byteCount(bytesDone))/\(byteCount(totalBytes))", priority: 6))
    }
    if let rate { pieces.append(Piece(kind: .rate, text: byteCount(Int64(rate)) + "/s", priority: 2)) }
    if let remaining { pieces.append(Piece(kind: .remaining, text: "ETA \(clock(remaining))", priority: 5)) }
    return pieces
  }

  private var label: String { [operation, app].compactMap { $0 }.joined(separator: " ") }

  private func barText(_ width: Int) -> String {
    let filled = Int((fraction ?? 0) * Double(width))
    return "[" + String(repeating: "#", count: filled) + String(repeating: ".", count: width - filled) + "]"
  }

  // MARK: The log's line and the JSON line

  /// Everything, for a log: "backup com.example.notes: archiving 45%, 1234/2890 files, …".
  var plainLine: String {
    var parts: [String] = []
    if let phase { parts.append(phase.rawValue + (fraction.map { " " + percentText($0) } ?? "")) }
    if let totalFiles { parts.append("\(filesDone)/\(totalFiles) files") }
    if let totalBytes { parts.append("\(byteCount(bytesDone))/\(byteCount(totalBytes))") }
    if let rate { parts.append(byteCount(Int64(rate)) + "/s") }
    parts.append("elapsed \(clock(elapsed))")
    if let remaining { parts.append("ETA \(clock(remaining))") }
    return label + ": " + parts.joined(separator: ", ")
  }

  /// `{"type": "status", …}` (docs/progress.md).
  var json: JSONValue {
    /// `value` rounded to a tenth.
    func optionalNumber(_ value: Double?, places: Double) -> JSONValue {
      value.map { .number(($0 * places).rounded() / places) } ?? .null
    }
    return .object([
      ("type", .string("status")), ("operation", .string(operation)), ("app", .optional(app)),
      ("phase", .optional(phase?.rawValue)),
      ("percentDone", optionalNumber(fraction.map { $0 * 100 }, places: 10)),
      ("filesDone", .int(filesDone)), ("totalFiles", totalFiles.map(JSONValue.int) ?? .null),
      ("bytesDone", .int(bytesDone)), ("totalBytes", totalBytes.map(JSONValue.int) ?? .null),
      ("bytesPerSecond", rate.map { .int(Int64($0)) } ?? .null),
      ("secondsElapsed", optionalNumber(elapsed, places: 10)),
      ("secondsRemaining", optionalNumber(remaining, places: 10)),
    ])
  }

  private func percentText(_ fraction: Double) -> String { "\(Int((fraction * 100).rounded(.down)))%" }
}

/// "0:05", "12:34", "1:02:03".
func clock(_ seconds: Double) -> String {
  let total = Int(max(0, seconds).rounded(.down))
  let (hours, minutes, secs) = (total / 3600, total / 60 % 60, total % 60)
  return hours > 0
    ? String(format: "%d:%02d:%02d", hours, minutes, secs) : String(format: "%d:%02d", minutes, secs)
}
