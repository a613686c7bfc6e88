import AppboxTestSupport
import Foundation
import Testing

/// The progress bar on a real terminal (a pseudo-terminal of the given width, through the
/// hostile program's `pty-run`), in a log, and as --json-progress lines.
struct ProgressEndToEndTests {
  /// A device with Notes installed and 20 MB in 200 files of Documents.
  func deviceWithData() throws -> Device {
    let device = Device()
    try device.install("Notes-1.0/Notes.app")
    let documents = String(
      decoding: try device.run("path", "com.example.notes", "documents").stdout, as: UTF8.self
    )
    .trimmingCharacters(in: .whitespacesAndNewlines)
    var bytes = [UInt8](repeating: 0, count: 100_000)
    for index in 0..<200 {
      for offset in stride(from: 0, to: bytes.count, by: 997) {
        bytes[offset] = UInt8(truncatingIfNeeded: index &+ offset)
      }
      try Data(bytes).write(to: URL(fileURLWithPath: "\(documents)/file\(index).bin"))
    }
    return device
  }

  /// The status lines a terminal was shown: on each line of output, every piece a carriage
  /// return sent the cursor back over (escape sequences removed). What a line ends with is
  /// the command's own output, not a draw.
  func draws(_ output: String) -> [String] {
    output.components(separatedBy: "\r\n").flatMap { line in
      line.components(separatedBy: "\r").dropLast().map { $0.replacingOccurrences(of: "\u{1B}[2K", with: "") }
    }
    .filter { !$0.isEmpty }
  }

  /// In a 60-column terminal every redraw wrapped (a backup left about 20 stacked lines), the
  /// bar had no percentage, time or phase, and restore sat at 100% for seconds showing nothing.
  @Test(arguments: [60, 200])
  func theBarFitsTheTerminalAndNamesEachPhase(_ columns: Int) throws {
    let device = try deviceWithData()
    let environment = ["PATH": "/usr/bin:/bin"]
    let appbox = productsDirectory + "/appbox"
    let backup = try runOnTerminal(
      [appbox, "--root", device.root, "backup", "com.example.notes"], raw: false, columns: columns,
      environment: environment)
    #expect(backup.status == 0, "\(backup.output)")
    let restore = try runOnTerminal(
      [appbox, "--root", device.root, "restore", "com.example.notes"], raw: false, columns: columns,
      environment: environment)
    #expect(restore.status == 0, "\(restore.output)")
    for (run, phases) in [
      (backup, ["scanning", "archiving", "committing"]),
      (restore, ["planning", "writing", "verifying", "swapping"]),
    ] {
      let shown = draws(run.output)
      for draw in shown { #expect(draw.count < columns, "\(draw.count) of \(columns) columns: \(draw)") }
      for phase in phases { #expect(shown.contains { $0.contains(phase) }, "no '\(phase)' in \(shown)") }
      #expect(shown.contains { $0.contains("%") && $0.contains("[0:") }, "\(shown)")
      // The bar is erased before anything else is printed: what stays on screen of each line
      // (after its last carriage return and erase) is never a status line.
      let lines = run.output.replacingOccurrences(of: "\r\n", with: "\n").split(separator: "\n")
      let visible = lines.map {
        $0.components(separatedBy: "\r").last!.replacingOccurrences(of: "\u{1B}[2K", with: "")
      }
      #expect(visible.allSatisfy { !$0.hasPrefix("[0:") }, "\(visible)")
    }
    if columns == 200 {
      #expect(draws(backup.output).contains { $0.contains("files") && $0.contains("MB") }, "\(backup.output)")
    }
  }

  /// Help fits the terminal's width, read from the terminal itself (TIOCGWINSZ on stdout).
  @Test func helpFitsTheTerminal() throws {
    let appbox = productsDirectory + "/appbox"
    let narrow = try runOnTerminal([appbox, "backup", "--help"], raw: false, columns: 60, environment: [:])
    let lines = narrow.output.components(separatedBy: "\r\n").filter { !$0.hasPrefix("pty-") }
    #expect(lines.allSatisfy { $0.count <= 60 }, "\(lines.filter { $0.count > 60 })")
    #expect(lines.contains { $0.count > 50 })
  }

  /// --json-progress writes JSON status lines on stderr for CI, with the documented fields.
  @Test func jsonProgressLines() throws {
    let device = try deviceWithData()
    let result = try device.run("--json-progress", "backup", "com.example.notes")
    #expect(result.status == 0, "\(result.err)")
    var phases: [String] = []
    var types: [String] = []
    for line in result.err.split(separator: "\n") {
      let object = try #require(
        try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any], "not JSON: \(line)")
      let type = try #require(object["type"] as? String)
      types.append(type)
      if type == "status" {
        #expect(Set(object.keys) == statusFields, "\(line)")
        #expect(object["operation"] as? String == "backup" && object["app"] as? String == "com.example.notes")
        if let phase = object["phase"] as? String, phases.last != phase { phases.append(phase) }
      }
    }
    #expect(phases == ["scanning", "archiving", "committing"])
    #expect(types.first == "status" && types.last == "done", "\(types)")
  }

  /// When stderr is not a terminal, plain lines (none at the default interval for a quick
  /// backup; with APPBOX_PROGRESS_INTERVAL=0, at every report), never escape sequences.
  @Test func aLogGetsPlainLines() throws {
    let device = try deviceWithData()
    let quick = try device.run("backup", "com.example.notes")
    #expect(quick.status == 0)
    #expect(!quick.err.contains("archiving") && !quick.err.contains("\u{1B}"), "\(quick.err)")
    let every = try device.run(
      "backup", "com.example.notes", "--full", environment: ["APPBOX_PROGRESS_INTERVAL": "0"])
    #expect(every.status == 0)
    #expect(
      every.err.split(separator: "\n").contains {
        $0.hasPrefix("backup com.example.notes: archiving ") && $0.contains("%")
      }, "\(every.err)")
    #expect(!every.err.contains("\u{1B}") && !every.err.contains("\r"))
    let quiet = try device.run(
      "--quiet", "backup", "com.example.notes", environment: ["APPBOX_PROGRESS_INTERVAL": "0"])
    #expect(quiet.status == 0 && quiet.err.isEmpty, "\(quiet.err)")
  }

  let statusFields: Set<String> = [
    "type", "operation", "app", "phase", "percentDone", "filesDone", "totalFiles", "bytesDone", "totalBytes",
    "bytesPerSecond", "secondsElapsed", "secondsRemaining",
  ]
}
