import AppboxTestSupport
import Foundation
import Glibc

/// One timed run of a command: wall seconds, and when measured its peak RSS in KiB and the
/// bytes it added to its repository or archive.
struct Sample {
  var seconds: Double
  var peakKiB: Int?
  var bytes: Int64?
  /// What the block device under the work directory did while the command ran, when asked.
  var disk: DiskActivity?
  /// Where the command's wall time went besides the disk, recorded along with `disk`.
  var stalls: Stalls?
}

/// The CPU time of a timed command (its process tree: user and system) and what the machine
/// spent stalled meanwhile, from the kernel's pressure counters (/proc/pressure: microseconds
/// during which at least one task waited for I/O, or for a CPU) and the CPU time the
/// hypervisor took from this VM (steal, /proc/stat). A slow run whose CPU time is its usual
/// one waited: on the disk (I/O stall), for a CPU (another process or the host), or on
/// something else (a lock, a sleep); a slow run with more CPU time did more work.
struct Stalls {
  var userSeconds: Double
  var systemSeconds: Double
  var ioStallMicros: Int64
  var cpuWaitMicros: Int64
  var stealMillis: Int64

  static func - (a: Stalls, b: Stalls) -> Stalls {
    Stalls(
      userSeconds: a.userSeconds - b.userSeconds, systemSeconds: a.systemSeconds - b.systemSeconds,
      ioStallMicros: a.ioStallMicros - b.ioStallMicros,
      cpuWaitMicros: a.cpuWaitMicros - b.cpuWaitMicros, stealMillis: a.stealMillis - b.stealMillis)
  }

  /// The counters now (children's CPU time: of the processes waited for so far).
  static func read() -> Stalls {
    var usage = rusage()
    getrusage(__rusage_who_t(RUSAGE_CHILDREN.rawValue), &usage)
    func seconds(_ time: timeval) -> Double { Double(time.tv_sec) + Double(time.tv_usec) / 1e6 }
    /// The `some ... total=N` microseconds of a pressure file.
    func someTotal(_ file: String) -> Int64 {
      guard let text = try? String(contentsOfFile: "/proc/pressure/" + file, encoding: .utf8),
        let line = text.split(separator: "\n").first(where: { $0.hasPrefix("some") }),
        let field = line.split(separator: " ").first(where: { $0.hasPrefix("total=") })
      else { return 0 }
      return Int64(field.dropFirst(6)) ?? 0
    }
    // cpu user nice system idle iowait irq softirq steal ...: clock ticks (100 a second).
    let steal =
      (try? String(contentsOfFile: "/proc/stat", encoding: .utf8))?.split(separator: "\n").first?
      .split(separator: " ").dropFirst(8).first.flatMap { Int64($0) } ?? 0
    return Stalls(
      userSeconds: seconds(usage.ru_utime), systemSeconds: seconds(usage.ru_stime),
      ioStallMicros: someTotal("io"),
      cpuWaitMicros: someTotal("cpu"), stealMillis: steal * 10)
  }
}

/// The write and discard counters of one block device (/proc/diskstats), and what they did
/// between two readings: bytes written, the milliseconds the device spent on write requests
/// (summed over requests in flight, so it can exceed the wall time), and the bytes discarded
/// and the milliseconds discarding. Milliseconds per MB written is the device's service time:
/// when the shared disk of a VM is slow, every tool's is high. Discards come from a file
/// system mounted with `discard` (ext4 sends them once the transaction that freed the blocks
/// has committed): a command right after a large deletion may share the disk with them.
struct DiskActivity {
  var sectorsWritten: Int64
  var writeMillis: Int64
  var sectorsDiscarded: Int64 = 0
  var discardMillis: Int64 = 0

  var bytesWritten: Int64 { sectorsWritten * 512 }
  var bytesDiscarded: Int64 { sectorsDiscarded * 512 }
  var millisPerMB: Double { bytesWritten > 0 ? Double(writeMillis) / (Double(bytesWritten) / 1e6) : 0 }

  static func - (a: DiskActivity, b: DiskActivity) -> DiskActivity {
    DiskActivity(
      sectorsWritten: a.sectorsWritten - b.sectorsWritten, writeMillis: a.writeMillis - b.writeMillis,
      sectorsDiscarded: a.sectorsDiscarded - b.sectorsDiscarded,
      discardMillis: a.discardMillis - b.discardMillis)
  }

  /// The counters of the device holding `path` (nil when /proc/diskstats does not list it,
  /// as for a file system on no block device).
  static func read(deviceOf path: String) -> DiskActivity? {
    guard let fields = fields(deviceOf: path), let sectors = Int64(fields[9]), let millis = Int64(fields[10])
    else { return nil }
    var activity = DiskActivity(sectorsWritten: sectors, writeMillis: millis)
    if fields.count >= 18, let discarded = Int64(fields[16]), let discarding = Int64(fields[17]) {
      activity.sectorsDiscarded = discarded
      activity.discardMillis = discarding
    }
    return activity
  }

  /// The /proc/diskstats line of the device holding `path`, split into fields: major minor
  /// name; reads: completed merged sectors ms; writes: the same; in flight, io ms, weighted
  /// io ms; discards: completed merged sectors ms (kernel 4.18 and later).
  private static func fields(deviceOf path: String) -> [Substring]? {
    var status = stat()
    guard stat(path, &status) == 0,
      let table = try? String(contentsOfFile: "/proc/diskstats", encoding: .utf8)
    else { return nil }
    // glibc's encoding of dev_t (makedev).
    let dev = UInt64(status.st_dev)
    let major = Int(((dev >> 8) & 0xfff) | ((dev >> 32) & ~UInt64(0xfff)))
    let minor = Int((dev & 0xff) | ((dev >> 12) & ~UInt64(0xff)))
    for line in table.split(separator: "\n") {
      let fields = line.split(separator: " ")
      if fields.count >= 11, Int(fields[0]) == major, Int(fields[1]) == minor { return fields }
    }
    return nil
  }
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

  /// Times `command`; with `memory`, runs it under GNU time to read its peak RSS; with
  /// `disk`, records what the block device holding that path wrote and discarded meanwhile.
  /// Every timed command starts from a clean page cache state: dirty data a previous
  /// command left is flushed first (untimed), so nobody pays for another's writeback.
  func time(_ command: String, memory: Bool = false, disk: String? = nil) throws -> Sample {
    let wrapped = memory ? "/usr/bin/time -f '%M' -o \(Shell.rssFile) \(command)" : command
    sync()
    let before = disk.flatMap { DiskActivity.read(deviceOf: $0) }
    let stallsBefore = disk.map { _ in Stalls.read() }
    let start = DispatchTime.now().uptimeNanoseconds
    try run(wrapped)
    let seconds = Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
    let stalls = stallsBefore.map { Stalls.read() - $0 }
    let activity = before.flatMap { before in
      disk.flatMap { DiskActivity.read(deviceOf: $0) }.map { $0 - before }
    }
    var peak: Int?
    if memory, let text = try? String(contentsOfFile: Shell.rssFile, encoding: .utf8) {
      peak = text.split(separator: "\n").compactMap { Int($0.trimmingCharacters(in: .whitespaces)) }.last
    }
    return Sample(seconds: seconds, peakKiB: peak, disk: activity, stalls: stalls)
  }

  /// The apparent size in bytes of everything under `path` (a shell pattern; 0 when nothing
  /// matches).
  func bytes(_ path: String) -> Int64 {
    Int64(
      (try? run("du -scb \(path) 2>/dev/null | tail -1 | cut -f1", allowFailure: true))?.trimmingCharacters(
        in: .whitespacesAndNewlines) ?? "") ?? 0
  }

  /// Deletes the tree at `path`, if any, with sixteen `rm` processes at a time (untimed
  /// cleanup). On a file system mounted with `discard` (this project's VMs), each freed file
  /// waits for its discard; sixteen overlap their waits: 2.25 million files took 12 minutes
  /// with one `rm -rf` here, 1.6 minutes this way.
  func removeTree(_ path: String) throws {
    try run(
      "if [ -e \(path) ]; then find \(path) -type f -print0 | xargs -0 -r -P 16 -n 500 rm -f; rm -rf \(path); fi"
    )
  }

  static let rssFile = "/tmp/appbox-bench-rss-\(getpid())"
}

func median(_ values: [Double]) -> Double {
  let sorted = values.sorted()
  guard !sorted.isEmpty else { return .nan }
  return sorted.count % 2 == 1
    ? sorted[sorted.count / 2] : (sorted[sorted.count / 2 - 1] + sorted[sorted.count / 2]) / 2
}

/// Results of one scenario: each tool's samples, in run order (sample i of every tool comes
/// from the same run, so ratios are taken run by run).
struct Scenario {
  var name: String
  /// The tool the ratios are taken against.
  var reference: String
  var rows: [(tool: String, samples: [Sample])] = []
  /// Ratio targets on time: (numerator tool, denominator tool, bound).
  var targets: [(String, String, Double)] = []
  /// Ratio targets on bytes stored: (numerator tool, denominator tool, bound).
  var byteTargets: [(String, String, Double)] = []
  /// Tools whose bytes every row is also compared with, in a column each (beside the
  /// reference's).
  var byteReferences: [String] = []
  /// Targets on a tool's own median, in seconds.
  var absoluteTargets: [(String, Double)] = []
  /// Lines printed under the scenario's heading.
  var notes: [String] = []
  /// Extra tables (already formatted Markdown lines) printed after the main one.
  var extra: [String] = []
  /// Extra target lines (already formatted rows of the targets table).
  var extraTargets: [(label: String, measured: String, bound: String, met: Bool)] = []

  func samples(_ tool: String) -> [Sample]? { rows.first { $0.tool == tool }?.samples }

  func medianSeconds(_ tool: String) -> Double? { samples(tool).map { median($0.map(\.seconds)) } }

  /// Per-run ratios of `numerator` over `denominator` (time, or bytes).
  func ratios(_ numerator: String, _ denominator: String, bytes: Bool = false) -> [Double] {
    guard let a = samples(numerator), let b = samples(denominator) else { return [] }
    return zip(a, b).compactMap { x, y in
      if bytes {
        guard let p = x.bytes, let q = y.bytes, q > 0 else { return nil }
        return Double(p) / Double(q)
      }
      return y.seconds > 0 ? x.seconds / y.seconds : nil
    }
  }
}

func format(_ seconds: Double) -> String {
  seconds < 0.9995 ? String(format: "%.0f ms", seconds * 1000) : String(format: "%.2f s", seconds)
}

func formatBytes(_ bytes: Double) -> String {
  if bytes >= 1e9 { return String(format: "%.2f GB", bytes / 1e9) }
  if bytes >= 1e6 { return String(format: "%.1f MB", bytes / 1e6) }
  if bytes >= 1e3 { return String(format: "%.0f KB", bytes / 1e3) }
  return String(format: "%.0f B", bytes)
}

/// "median (min–max)" of ratios.
func spread(_ ratios: [Double]) -> String {
  guard let low = ratios.min(), let high = ratios.max() else { return "" }
  let middle = String(format: "%.2fx", median(ratios))
  return ratios.count == 1 ? middle : middle + String(format: " (%.2f–%.2f)", low, high)
}

/// The Markdown report: one table per scenario (median, min–max, ratio against the
/// scenario's reference taken run by run, with its spread, bytes stored when measured), then
/// every target with its verdict.
func report(_ scenarios: [Scenario], title: String, notes: [String]) -> String {
  var lines = ["# \(title)", ""] + notes.map { "- \($0)" } + [""]
  for scenario in scenarios {
    lines += ["## \(scenario.name)", ""]
    if !scenario.notes.isEmpty { lines += scenario.notes.map { "- \($0)" } + [""] }
    let hasBytes = scenario.rows.contains { $0.samples.contains { $0.bytes != nil } }
    lines += [
      "| tool | median | min–max | runs | ratio vs \(scenario.reference): median (min–max) |"
        + (hasBytes
          ? " bytes stored (median) | bytes vs \(scenario.reference) |"
            + scenario.byteReferences.map { " bytes vs \($0) |" }.joined() : "")
        + " peak RSS |",
      "|---|---:|---:|---:|---:|"
        + (hasBytes ? "---:|---:|" + String(repeating: "---:|", count: scenario.byteReferences.count) : "")
        + "---:|",
    ]
    // A tool this run did not measure (the large run's zstd restore) gets no row.
    for row in scenario.rows where !row.samples.isEmpty {
      let values = row.samples.map(\.seconds)
      let peak =
        row.samples.compactMap(\.peakKiB).max().map { String(format: "%.1f MB", Double($0) / 1024) } ?? ""
      let range = "\(format(values.min() ?? .nan))–\(format(values.max() ?? .nan))"
      var line =
        "| \(row.tool) | \(format(median(values))) | \(range) | \(row.samples.count) | \(spread(scenario.ratios(row.tool, scenario.reference))) |"
      if hasBytes {
        let stored = row.samples.compactMap(\.bytes).map(Double.init)
        line +=
          " \(stored.isEmpty ? "" : formatBytes(median(stored))) | \(spread(scenario.ratios(row.tool, scenario.reference, bytes: true))) |"
        for other in scenario.byteReferences {
          line += " \(spread(scenario.ratios(row.tool, other, bytes: true))) |"
        }
      }
      lines.append(line + " \(peak) |")
    }
    lines.append("")
    if !scenario.extra.isEmpty { lines += scenario.extra + [""] }
  }
  lines += [
    "## Targets", "", "| target | measured: median (min–max of the runs) | bound | verdict |",
    "|---|---:|---:|---|",
  ]
  for scenario in scenarios {
    for (numerator, denominator, bound) in scenario.targets {
      let ratios = scenario.ratios(numerator, denominator)
      guard !ratios.isEmpty else { continue }
      lines.append(
        "| \(scenario.name): \(numerator) / \(denominator) | \(spread(ratios)) | ≤ \(String(format: "%.2fx", bound)) | \(verdict(ratios, bound)) |"
      )
    }
    for (numerator, denominator, bound) in scenario.byteTargets {
      let ratios = scenario.ratios(numerator, denominator, bytes: true)
      guard !ratios.isEmpty else { continue }
      lines.append(
        "| \(scenario.name): bytes stored, \(numerator) / \(denominator) | \(spread(ratios)) | ≤ \(String(format: "%.2fx", bound)) | \(verdict(ratios, bound)) |"
      )
    }
    for (tool, bound) in scenario.absoluteTargets {
      guard let samples = scenario.samples(tool), !samples.isEmpty else { continue }
      let values = samples.map(\.seconds)
      let value = median(values)
      lines.append(
        "| \(scenario.name): \(tool) | \(format(value)) (\(format(values.min()!))–\(format(values.max()!))) | ≤ \(format(bound)) | \(value <= bound ? (values.max()! <= bound ? "met" : "met (median)") : "missed") |"
      )
    }
    for target in scenario.extraTargets {
      lines.append(
        "| \(scenario.name): \(target.label) | \(target.measured) | \(target.bound) | \(target.met ? "met" : "missed") |"
      )
    }
  }
  return lines.joined(separator: "\n") + "\n"
}

/// "met" when every run is within the bound, "met (median)" when the median is, else "missed".
func verdict(_ ratios: [Double], _ bound: Double) -> String {
  if ratios.allSatisfy({ $0 <= bound }) { return "met" }
  return median(ratios) <= bound ? "met (median)" : "missed"
}

/// Runs `steps` once each, starting at a different one every run so that no tool always
/// follows the same other (file-system state left by one, such as freshly deleted inodes,
/// would otherwise bias the next).
func rotated<T>(_ steps: [T], run: Int) -> [T] {
  guard !steps.isEmpty else { return steps }
  let start = run % steps.count
  return Array(steps[start...] + steps[..<start])
}

/// The machine's state as a benchmark scenario starts: free memory, dirty and writeback pages,
/// the load average.
func machineState() -> String {
  var fields: [String: Int64] = [:]
  if let text = try? String(contentsOfFile: "/proc/meminfo", encoding: .utf8) {
    for line in text.split(separator: "\n") {
      let parts = line.split(separator: ":")
      guard parts.count == 2 else { continue }
      let value = parts[1].trimmingCharacters(in: .whitespaces).split(separator: " ").first.flatMap {
        Int64($0)
      }
      fields[String(parts[0])] = value
    }
  }
  func mb(_ key: String) -> String { fields[key].map { String(format: "%.0f MB", Double($0) / 1024) } ?? "?" }
  let load =
    (try? String(contentsOfFile: "/proc/loadavg", encoding: .utf8))?.split(separator: " ").prefix(3)
    .joined(separator: " ") ?? "?"
  return
    "free \(mb("MemFree")) (available \(mb("MemAvailable"))), dirty \(mb("Dirty")), writeback \(mb("Writeback")), load \(load)"
}
