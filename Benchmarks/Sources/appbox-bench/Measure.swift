import AppboxTestSupport
import Foundation
import Glibc

/// One timed run of a command: wall seconds and, when measured, peak RSS in KiB.
struct Sample {
  var seconds: Double
  var peakKiB: Int?
}

/// Runs shell commands and times them.
struct Shell {
  var environment: [String: String] = ProcessInfo.processInfo.environment
  var verbose = false

  /// Runs `command` with /bin/sh -c (started with posix_spawn, not Foundation's Process,
  /// which costs ~50 ms a start here and would be timed along with every tool); throws
  /// with its stderr when it fails.
  @discardableResult
  func run(_ command: String, allowFailure: Bool = false) throws -> String {
    if verbose { FileHandle.standardError.write(Data("  $ \(command)\n".utf8)) }
    let result = try runProcess("/bin/sh", ["-c", command], environment: environment)
    if result.status != 0 && !allowFailure {
      throw GeneratorError("command failed (\(result.status)): \(command)\n\(result.err)")
    }
    return result.out
  }

  /// Times `command`; with `memory`, runs it under GNU time to read its peak RSS.
  /// Every timed command starts from a clean page cache state: dirty data a previous
  /// command left is flushed first (untimed), so nobody pays for another's writeback.
  func time(_ command: String, memory: Bool = false) throws -> Sample {
    let wrapped = memory ? "/usr/bin/time -f '%M' -o \(Shell.rssFile) \(command)" : command
    sync()
    let start = DispatchTime.now().uptimeNanoseconds
    try run(wrapped)
    let seconds = Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
    var peak: Int?
    if memory, let text = try? String(contentsOfFile: Shell.rssFile, encoding: .utf8) {
      peak = text.split(separator: "\n").compactMap { Int($0.trimmingCharacters(in: .whitespaces)) }.last
    }
    return Sample(seconds: seconds, peakKiB: peak)
  }

  static let rssFile = "/tmp/appbox-bench-rss-\(getpid())"
}

func median(_ values: [Double]) -> Double {
  let sorted = values.sorted()
  guard !sorted.isEmpty else { return .nan }
  return sorted.count % 2 == 1
    ? sorted[sorted.count / 2] : (sorted[sorted.count / 2 - 1] + sorted[sorted.count / 2]) / 2
}

/// Results of one scenario: each tool's samples.
struct Scenario {
  var name: String
  /// The tool the ratios are taken against.
  var reference: String
  var rows: [(tool: String, samples: [Sample])] = []
  /// Targets to report: (numerator tool, denominator tool, bound, label).
  var targets: [(String, String, Double)] = []
  /// Targets on a tool's own median, in seconds.
  var absoluteTargets: [(String, Double)] = []
  /// Lines printed under the scenario's heading.
  var notes: [String] = []

  func medianSeconds(_ tool: String) -> Double? {
    rows.first { $0.tool == tool }.map { median($0.samples.map(\.seconds)) }
  }
}

func format(_ seconds: Double) -> String {
  seconds < 0.9995 ? String(format: "%.0f ms", seconds * 1000) : String(format: "%.2f s", seconds)
}

/// The Markdown report: one table per scenario, ratios against the scenario's reference,
/// then every target with its verdict.
func report(_ scenarios: [Scenario], title: String, notes: [String]) -> String {
  var lines = ["# \(title)", ""] + notes.map { "- \($0)" } + [""]
  for scenario in scenarios {
    lines += ["## \(scenario.name)", ""]
    if !scenario.notes.isEmpty { lines += scenario.notes.map { "- \($0)" } + [""] }
    lines += [
      "| tool | median | runs | ratio vs \(scenario.reference) | appbox peak RSS |",
      "|---|---:|---:|---:|---:|",
    ]
    let reference = scenario.medianSeconds(scenario.reference) ?? .nan
    for row in scenario.rows {
      let value = median(row.samples.map(\.seconds))
      let peak =
        row.samples.compactMap(\.peakKiB).max().map { String(format: "%.1f MB", Double($0) / 1024) } ?? ""
      lines.append(
        "| \(row.tool) | \(format(value)) | \(row.samples.count) | \(String(format: "%.2fx", value / reference)) | \(peak) |"
      )
    }
    lines.append("")
  }
  lines += ["## Targets", "", "| target | measured | bound | verdict |", "|---|---:|---:|---|"]
  for scenario in scenarios {
    for (numerator, denominator, bound) in scenario.targets {
      guard let a = scenario.medianSeconds(numerator), let b = scenario.medianSeconds(denominator) else {
        continue
      }
      let ratio = a / b
      lines.append(
        "| \(scenario.name): \(numerator) / \(denominator) | \(String(format: "%.2fx", ratio)) | ≤ \(String(format: "%.2fx", bound)) | \(ratio <= bound ? "met" : "missed") |"
      )
    }
    for (tool, bound) in scenario.absoluteTargets {
      guard let seconds = scenario.medianSeconds(tool) else { continue }
      lines.append(
        "| \(scenario.name): \(tool) | \(format(seconds)) | ≤ \(format(bound)) | \(seconds <= bound ? "met" : "missed") |"
      )
    }
  }
  return lines.joined(separator: "\n") + "\n"
}

/// Runs `steps` once each, starting at a different one every run so that no tool always
/// follows the same other (file-system state left by one, such as freshly deleted inodes,
/// would otherwise bias the next).
func rotated<T>(_ steps: [T], run: Int) -> [T] {
  guard !steps.isEmpty else { return steps }
  let start = run % steps.count
  return Array(steps[start...] + steps[..<start])
}
