import AppboxTestSupport
import Foundation
import Glibc

/// `import-backup` of an iOS device backup of about 100,000 files, plain and encrypted, beside
/// what reading the same bytes costs without appbox: `sha256sum` of every content file (one
/// pass over the data, hashing it, the least a snapshot needs), bsdtar archiving the folder
/// (the same bytes read and written once), and appbox's own full backup of the home the backup
/// was made of (the same archive and catalog written, from a home instead of a backup folder).
/// Targets: encrypted within 1.5x plain; plain within 1.5x `sha256sum` of every content file
/// (reading and hashing each byte once: "at disk speed").
///
///   appbox-bench device-backup --appbox PATH [--files N] [--runs N] [--work DIR] [--results DIR]
struct DeviceBackupBench {
  let appbox: String
  var files = 100_000
  var runs = 3
  var work = "/tmp/appbox-bench-device-backup"
  var shell: Shell = {
    var shell = Shell()
    shell.environment.removeValue(forKey: "APPBOX_ROOT")
    return shell
  }()

  var root: String { work + "/device" }
  var ab: String { "\(appbox) --root \(root)" }
  let app = "com.example.bench"
  /// The encrypted export's PBKDF2 rounds: iOS's cost every opening seconds (measured
  /// separately below), a fixed cost that would hide the per-byte one being measured.
  let rounds = 1000

  func run() throws -> String {
    try shell.run("rm -rf \(work) && mkdir -p \(work)")
    try generateBundle(at: work + "/Bench.app", seed: 1)
    try shell.run("\(ab) --quiet install \(work)/Bench.app")
    let home = try shell.run("\(ab) path \(app)").trimmingCharacters(in: .whitespacesAndNewlines)
    // generateData puts three quarters of a home's files in Documents and Library.
    progress("device backup: generating a home with \(files) files in Documents and Library")
    try generateData(
      home: home, shape: HomeShape(files: files * 4 / 3, bytes: Int64(files) * 10_000, seed: 7))
    let plain = work + "/plain"
    let sealed = work + "/sealed"
    try "bench password\n".write(toFile: work + "/password", atomically: true, encoding: .utf8)
    progress("device backup: exporting it, plain and encrypted")
    try shell.run("\(ab) --quiet export-backup \(app) \(plain)")
    try shell.run(
      "APPBOX_DEVICE_BACKUP_ROUNDS=\(rounds) \(ab) --quiet export-backup \(app) \(sealed) --encrypt --password-file \(work)/password"
    )
    let rows = try shell.run(
      "\(ab) --json import-backup \(plain) --list | python3 -c 'import json,sys; d=json.load(sys.stdin)[\"domains\"][0]; print(d[\"files\"], d[\"bytes\"])'"
    ).split(separator: " ").compactMap { Int64($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
    let count = rows.first ?? 0
    let bytes = rows.count > 1 ? rows[1] : 0
    let contentFiles = "find \(plain) -mindepth 2 -type f -print0"
    let importPlain = "\(ab) --quiet import-backup \(plain) --app \(app) --repo \(work)/repo-plain"
    let importSealed =
      "\(ab) --quiet import-backup \(sealed) --app \(app) --repo \(work)/repo-sealed --password-file \(work)/password"
    var scenario = Scenario(
      name: "import-backup of a device backup: \(count) files, \(formatBytes(Double(bytes)))",
      reference: "appbox import-backup")
    var samples: [String: [Sample]] = [:]
    // CPU seconds (user and system) of each run: on a shared machine the wall time of a run
    // also measures the neighbours, the CPU time much less.
    var cpu: [String: [Double]] = [:]
    for run in 0..<runs {
      try shell.run(
        "rm -rf \(work)/repo-plain \(work)/repo-sealed \(work)/repo-full \(work)/folder.tar"
          + " && \(ab) --quiet repo init --repo \(work)/repo-plain && \(ab) --quiet repo init --repo \(work)/repo-sealed"
          + " && \(ab) --quiet repo init --repo \(work)/repo-full")
      let steps: [(String, String)] = [
        ("appbox import-backup", importPlain),
        ("appbox import-backup, encrypted", importSealed),
        ("appbox backup --full of the home", "\(ab) --quiet backup \(app) --full --repo \(work)/repo-full"),
        ("bsdtar -cf of the backup folder", "bsdtar -cf \(work)/folder.tar -C \(plain) ."),
        ("sha256sum of every content file", "\(contentFiles) | xargs -0 sha256sum > /dev/null"),
      ]
      for (tool, command) in rotated(steps, run: run) {
        let (sample, seconds) = try timedWithCPU(command)
        samples[tool, default: []].append(sample)
        cpu[tool, default: []].append(seconds)
      }
      progress("device backup run \(run + 1)/\(runs)")
    }
    let order = [
      "appbox import-backup", "appbox import-backup, encrypted", "appbox backup --full of the home",
      "bsdtar -cf of the backup folder", "sha256sum of every content file",
    ]
    scenario.rows = order.map { ($0, samples[$0] ?? []) }
    scenario.targets = [
      ("appbox import-backup, encrypted", "appbox import-backup", 1.5),
      ("appbox import-backup", "sha256sum of every content file", 1.5),
    ]
    let cpuRatio = zip(cpu["appbox import-backup, encrypted"] ?? [], cpu["appbox import-backup"] ?? []).map {
      $0 / max($1, 0.001)
    }
    if !cpuRatio.isEmpty {
      scenario.extraTargets = [
        (
          label: "appbox import-backup, encrypted / appbox import-backup, in CPU time",
          measured: spread(cpuRatio),
          bound: "≤ 1.50x", met: median(cpuRatio) <= 1.5
        )
      ]
    }
    scenario.extra =
      ["| tool | CPU seconds (user + system), median |", "|---|---:|"]
      + order.map { tool in "| \(tool) | \(String(format: "%.2f", median(cpu[tool] ?? []))) |" }
    // The key derivation a real backup's keybag asks for, timed alone on a one-file backup.
    let tiny = work + "/tiny"
    let kdf = try measureKeyDerivation(tiny: tiny)
    let plainSeconds = scenario.medianSeconds("appbox import-backup") ?? .nan
    scenario.notes = [
      "the backup: \(count) files and \(formatBytes(Double(bytes))) in AppDomain-\(app) (Documents and Library of a generated home), "
        + "exported by appbox; warm page cache; every import into a new repository; machine state: \(machineState())",
      String(
        format:
          "appbox import-backup: %.0f files/s, %.0f MB/s (one manifest scan, each file read once and hashed as it is read)",
        Double(count) / plainSeconds, Double(bytes) / 1e6 / plainSeconds),
      "encrypted: every file AES-256-CBC under its own key, Manifest.db too; the keybag asks for \(rounds) PBKDF2 rounds "
        + "(each step) so that the row measures the per-byte cost; with iOS's rounds (10,000,000, then 10,000) opening "
        + "the keybag costs \(format(kdf)) more, once per command (timed on a one-file backup)",
    ]
    return report(
      [scenario], title: "iOS device backups: import-backup",
      notes: ["`make bench` (Benchmarks/Sources/appbox-bench/DeviceBackupBench.swift), \(runs) runs, medians"]
    )
  }

  /// Times `command` as `Shell.time` does (dirty data flushed first), with its CPU seconds
  /// and peak RSS from GNU time.
  private func timedWithCPU(_ command: String) throws -> (Sample, Double) {
    let report = work + "/time"
    sync()
    let start = DispatchTime.now().uptimeNanoseconds
    try shell.run("/usr/bin/time -f '%U %S %M' -o \(report) sh -c '\(command)'")
    let seconds = Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
    let fields = ((try? String(contentsOfFile: report, encoding: .utf8)) ?? "").split(
      whereSeparator: \.isWhitespace)
    let values = fields.suffix(3).compactMap { Double($0) }
    let cpu = values.count == 3 ? values[0] + values[1] : .nan
    let peak = values.count == 3 ? Int(values[2]) : nil
    return (Sample(seconds: seconds, peakKiB: command.contains("appbox") ? peak : nil), cpu)
  }

  /// Seconds of `import-backup --list` on a one-file encrypted backup with iOS's rounds, less
  /// the same with one round: what the key derivation costs.
  private func measureKeyDerivation(tiny: String) throws -> Double {
    // A device of its own with one small file: the derivation dominates.
    let tinyRoot = tiny + "-device"
    try shell.run(
      "rm -rf \(tinyRoot) \(tiny)-ios \(tiny)-one && \(appbox) --quiet --root \(tinyRoot) install \(work)/Bench.app"
    )
    let tinyHome = try shell.run("\(appbox) --root \(tinyRoot) path \(app)").trimmingCharacters(
      in: .whitespacesAndNewlines)
    try "x".write(toFile: tinyHome + "/Documents/one", atomically: true, encoding: .utf8)
    try shell.run(
      "\(appbox) --quiet --root \(tinyRoot) export-backup \(app) \(tiny)-ios --encrypt --password-file \(work)/password"
    )
    try shell.run(
      "APPBOX_DEVICE_BACKUP_ROUNDS=1 \(appbox) --quiet --root \(tinyRoot) export-backup \(app) \(tiny)-one --encrypt --password-file \(work)/password"
    )
    let slow = try shell.time(
      "\(appbox) --quiet --root \(tinyRoot) import-backup \(tiny)-ios --list --password-file \(work)/password"
    )
    let fast = try shell.time(
      "\(appbox) --quiet --root \(tinyRoot) import-backup \(tiny)-one --list --password-file \(work)/password"
    )
    return slow.seconds - fast.seconds
  }
}
