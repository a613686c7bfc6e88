import AppboxBackup
import AppboxRepository
import AppboxTestSupport
import Foundation
import Testing

@testable import AppboxCLI

/// The status line: a percentage, files and bytes of the total, rate, elapsed time, ETA and
/// the phase; it fits any width, so a terminal never wraps it.
struct ProgressStatusTests {
  static let midway = ProgressStatus(
    operation: "backup", app: "com.example.notes", phase: .archiving, totalFiles: 2890,
    totalBytes: 27_400_000, filesDone: 1234, bytesDone: 12_300_000, elapsed: 4.2, sincePlanned: 4)

  @Test func aWideLineShowsEverything() {
    let line = Self.midway.line(width: 199)
    #expect(line.hasPrefix("[0:04]  com.example.notes  archiving  44%  ["))
    #expect(line.hasSuffix("]  1234/2890 files  12.3 MB/27.4 MB  3.1 MB/s  ETA 0:04"), "\(line)")
  }

  @Test(arguments: Array(stride(from: 1, through: 200, by: 1)))
  func noLineExceedsItsWidth(_ width: Int) {
    let scanning = ProgressStatus(
      operation: "restore", app: "com.example.notes", phase: .planning, elapsed: 75)
    for status in [Self.midway, scanning] {
      #expect(status.line(width: width).count <= width, "\(width): \(status.line(width: width))")
    }
  }

  @Test func aNarrowLineKeepsThePhaseThePercentageAndTheTime() {
    let line = Self.midway.line(width: 59)
    #expect(line.contains("archiving") && line.contains("44%") && line.contains("[0:04]"), "\(line)")
    #expect(line.contains("ETA 0:04"), "\(line)")
  }

  @Test func theJSONStatusHasTheDocumentedFields() throws {
    let text = Self.midway.json.serializedOnOneLine()
    #expect(!text.contains("\n"))
    let object = try #require(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any])
    #expect(Set(object.keys) == ProgressDocumentation.statusFields)
    #expect(object["type"] as? String == "status" && object["phase"] as? String == "archiving")
    #expect(object["percentDone"] as? Double == 44.9)
    #expect(object["filesDone"] as? Int == 1234 && object["totalFiles"] as? Int == 2890)
    #expect(object["secondsRemaining"] as? Double == 4.9)
  }

  @Test func clocks() {
    #expect(clock(0) == "0:00" && clock(65.9) == "1:05" && clock(3723) == "1:02:03")
  }
}

/// The fields docs/progress.md documents for each kind of line.
enum ProgressDocumentation {
  static let statusFields: Set<String> = [
    "type", "operation", "app", "phase", "percentDone", "filesDone", "totalFiles", "bytesDone", "totalBytes",
    "bytesPerSecond", "secondsElapsed", "secondsRemaining",
  ]
  static let doneFields: Set<String> = [
    "type", "operation", "app", "filesDone", "bytesDone", "secondsElapsed",
  ]

  /// The field names of the table under `heading` in docs/progress.md (its first column).
  static func documentedFields(under heading: String) throws -> Set<String> {
    let text = try String(contentsOfFile: repositoryRoot + "/docs/progress.md", encoding: .utf8)
    let section = try #require(text.components(separatedBy: heading).dropFirst().first)
    var fields = Set<String>()
    for line in section.split(separator: "\n") {
      if line.hasPrefix("#") { break }
      guard line.hasPrefix("| `") else { continue }
      fields.insert(String(line.dropFirst(3).prefix { $0 != "`" }))
    }
    return fields
  }
}

/// The renderer fed events as the engines send them.
struct ProgressBarTests {
  func events(_ bar: ProgressBar) {
    bar.engine(.started(operation: "restore", app: "com.example.notes"))
    bar.engine(.phase(.planning))
    bar.engine(.planned(entries: 10, files: 8, bytes: 8000))
    bar.engine(.phase(.writing))
    bar.engine(.progress(files: 4, bytes: 4000))
    bar.engine(.phase(.verifying))
    bar.engine(.phase(.swapping))
    bar.engine(.finished(operation: "restore", app: "com.example.notes"))
  }

  /// A context whose global options are the flags `arguments` names.
  func context(_ arguments: [String], stderr: CapturingSink, environment: [String: String] = [:]) throws
    -> CommandContext
  {
    var globals = GlobalOptions()
    for argument in arguments {
      let known = globals.setFlag(String(argument.dropFirst(2)))
      #expect(known, "\(argument)")
    }
    return CommandContext(globals: globals, environment: environment, stdout: CapturingSink(), stderr: stderr)
  }

  @Test(arguments: [60, 200])
  func onATerminalEachPhaseIsDrawnWithinTheWidth(_ columns: Int) throws {
    let stderr = CapturingSink(terminalColumns: columns)
    events(ProgressBar(try context([], stderr: stderr)))
    let draws = stderr.text.components(separatedBy: "\r\u{1B}[2K").filter { !$0.isEmpty }
    #expect(!stderr.text.contains("\n"), "a bar line ended in a newline: it would stack")
    for phase in ["planning", "writing", "verifying", "swapping"] {
      #expect(draws.contains { $0.contains("  \(phase)") }, "\(phase) not drawn: \(draws)")
    }
    #expect(draws.contains { $0.contains("%") })
    for draw in draws { #expect(draw.count < columns, "\(draw.count) columns: \(draw)") }
    #expect(stderr.text.hasSuffix("\r\u{1B}[2K"), "the bar is not cleared at the end")
  }

  @Test func jsonProgressLinesParseWithTheDocumentedFields() throws {
    let stderr = CapturingSink(terminalColumns: 80)
    events(ProgressBar(try context(["--json-progress"], stderr: stderr)))
    let lines = stderr.text.split(separator: "\n")
    #expect(lines.count == 6, "\(stderr.text)")  // start, four phases, done
    var phases: [String] = []
    for line in lines {
      let object = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
      switch object["type"] as? String {
      case "status":
        #expect(Set(object.keys) == ProgressDocumentation.statusFields)
        if let phase = object["phase"] as? String { phases.append(phase) }
      case "done": #expect(Set(object.keys) == ProgressDocumentation.doneFields)
      default: Issue.record("unexpected line \(line)")
      }
    }
    #expect(phases == ["planning", "writing", "verifying", "swapping"])
    #expect(
      try ProgressDocumentation.documentedFields(under: "## Status lines")
        == ProgressDocumentation.statusFields)
    #expect(
      try ProgressDocumentation.documentedFields(under: "## Done lines") == ProgressDocumentation.doneFields)
  }

  @Test func aLogGetsPlainLinesAndQuietGetsNone() throws {
    let log = CapturingSink()
    events(ProgressBar(try context([], stderr: log, environment: ["APPBOX_PROGRESS_INTERVAL": "0"])))
    let lines = log.text.split(separator: "\n")
    #expect(!lines.isEmpty && lines.allSatisfy { $0.hasPrefix("restore com.example.notes: ") }, "\(log.text)")
    #expect(lines.contains { $0.contains("writing 50%, 4/8 files, 4.0 KB/8.0 KB") }, "\(log.text)")
    #expect(!log.text.contains("\u{1B}"))
    // The default interval is seconds: a quick operation writes nothing to a log.
    let quick = CapturingSink()
    events(ProgressBar(try context([], stderr: quick)))
    #expect(quick.text.isEmpty)
    for arguments in [["--quiet"], ["--quiet", "--json-progress"], ["--json"]] {
      let quiet = CapturingSink()
      events(
        ProgressBar(try context(arguments, stderr: quiet, environment: ["APPBOX_PROGRESS_INTERVAL": "0"])))
      #expect(quiet.text.isEmpty, "\(arguments): \(quiet.text)")
    }
  }
}
