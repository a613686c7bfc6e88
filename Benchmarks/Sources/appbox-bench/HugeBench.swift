import AppboxTestSupport
import Foundation
import Glibc

// make bench-huge: a million small files, where what grows with the file count shows: peak
// memory (every tool's, under GNU time) and time, for a full backup, a backup with no change
// and appbox's `check`, beside GNU tar and restic on the same tree in the same runs.
extension Bench {
  mutating func huge(_ home: String) throws -> [Scenario] {
    var scenarios: [Scenario] = []
    let base = work + "/huge"
    try shell.run("rm -rf \(base) && mkdir -p \(base)")
    // appbox stores the bundle on an app's first snapshot only: the timed runs re-read and store
    // all the data (`--full`) into a repository that already holds it, as the peers exclude it.
    try shell.run("\(ab) --quiet backup \(app) --repo \(base)/appbox")

    var full = Scenario(name: "full backup, 1,000,000 small files", reference: "GNU tar level 0")
    full.notes = ["machine state: \(machineState())"]
    var unchanged = Scenario(
      name: "backup with no change, 1,000,000 small files", reference: "GNU tar level 1")
    unchanged.notes = ["right after the full backup of the same run; machine state: \(machineState())"]
    var fullRows: [String: [Sample]] = [:]
    var unchangedRows: [String: [Sample]] = [:]
    var checks: [Sample] = []
    for run in 0..<runs {
      try shell.run("rm -rf \(base)/run && mkdir -p \(base)/run && restic -q -r \(base)/run/restic init")
      let fullSteps: [(String, String, String)] = [
        ("appbox", "\(ab) --quiet backup \(app) --full --repo \(base)/appbox", "\(base)/appbox"),
        (
          "GNU tar level 0",
          "tar -C \(home) \(tarExcludes) --listed-incremental=\(base)/run/snar -cf \(base)/run/l0.tar .",
          "\(base)/run/l0.tar"
        ),
        (
          "restic", "restic -q -r \(base)/run/restic backup \(resticExcludes(home)) \(home)",
          "\(base)/run/restic"
        ),
      ]
      for (tool, command, target) in rotated(fullSteps, run: run) {
        let before = shell.bytes(target)
        var sample = try shell.time(command, memory: true)
        sample.bytes = shell.bytes(target) - before
        fullRows[tool, default: []].append(sample)
      }
      let unchangedSteps: [(String, String, String)] = [
        ("appbox", "\(ab) --quiet backup \(app) --repo \(base)/appbox", "\(base)/appbox"),
        (
          "GNU tar level 1",
          "cp \(base)/run/snar \(base)/run/snar.1 && tar -C \(home) \(tarExcludes) --listed-incremental=\(base)/run/snar.1 -cf \(base)/run/l1.tar .",
          "\(base)/run/l1.tar"
        ),
        (
          "restic", "restic -q -r \(base)/run/restic backup \(resticExcludes(home)) \(home)",
          "\(base)/run/restic"
        ),
      ]
      for (tool, command, target) in rotated(unchangedSteps, run: run) {
        let before = shell.bytes(target)
        var sample = try shell.time(command, memory: true)
        sample.bytes = shell.bytes(target) - before
        unchangedRows[tool, default: []].append(sample)
      }
      checks.append(try shell.time("\(ab) --quiet check --repo \(base)/appbox", memory: true))
      // One full backup kept (disk space): the next run's is measured the same.
      try shell.run("\(ab) --quiet forget \(app) --keep-last 1 --repo \(base)/appbox")
      progress("huge run \(run + 1)/\(runs)")
    }
    full.rows = ["appbox", "GNU tar level 0", "restic"].map { ($0, fullRows[$0] ?? []) }
    unchanged.rows = ["appbox", "GNU tar level 1", "restic"].map { ($0, unchangedRows[$0] ?? []) }
    for (scenario, rows) in [(0, fullRows), (1, unchangedRows)] {
      let peaks = (rows["appbox"] ?? []).compactMap(\.peakKiB)
      guard let worst = peaks.max() else { continue }
      let target = (
        label: "appbox peak RSS",
        measured: String(format: "%.1f MB (worst of %d)", Double(worst) / 1024, peaks.count),
        bound: "≤ 150 MB", met: worst <= 150 * 1024
      )
      if scenario == 0 { full.extraTargets.append(target) } else { unchanged.extraTargets.append(target) }
    }
    scenarios += [full, unchanged]
    var check = Scenario(
      name: "check (catalog against archives), 1,000,000 small files", reference: "appbox check")
    check.rows = [("appbox check", checks)]
    scenarios.append(check)
    if !keep { try shell.run("rm -rf \(base)") }
    return scenarios
  }
}
