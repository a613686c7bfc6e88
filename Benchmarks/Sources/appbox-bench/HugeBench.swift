import AppboxTestSupport
import Foundation
import Glibc

// make bench-huge: a million small files, where whatever grows with the file count shows. Issue
// 28 asks that memory in backup, a no-change backup, restore, check, diff, advise and find follow
// the largest directory, not the number of files; each of them, and `ls --recursive`, runs here
// under GNU time (peak RSS) beside GNU tar and restic on the same tree, in the same runs.
//
// Each run, the tools' order rotated from run to run, every command timed:
//   1. a full backup (appbox `--full`, GNU tar level 0, restic), then one with no change;
//   2. a 1% change (`mutate`: files rewritten, deleted and added), then an incremental backup by
//      each tool, so that each holds two snapshots around the change;
//   3. a restore of the newest snapshot into an empty home: appbox into a new device root where
//      the app was just installed, `tar -x` of the level-0 tar + syncfs, `restic restore`; the
//      three trees (about 1 GB and 750,000 inodes each) are deleted once all three are timed;
//   4. check; diff of the two snapshots around the change; find of one name over the run's three
//      snapshots; ls --recursive of the newest (and `tar -tf` of the level-0 tar); advise.
// The targets: appbox's peak RSS ≤ 150 MB in every command, judged on the worst run.

/// The tables of the huge report, in the order they are printed.
enum HugeTable: CaseIterable {
  case full, unchanged, incremental, restore, check, diff, find, ls, advise

  var name: String {
    switch self {
    case .full: return "full backup, 1,000,000 small files"
    case .unchanged: return "backup with no change, 1,000,000 small files"
    case .incremental: return "incremental backup after a 1% change, 1,000,000 small files"
    case .restore: return "restore of the newest snapshot into an empty home, 1,000,000 small files"
    case .check: return "check (catalog against archives), 1,000,000 small files"
    case .diff: return "diff of the two snapshots around a 1% change, 1,000,000 small files"
    case .find: return "find a name over three snapshots of 1,000,000 small files"
    case .ls: return "ls --recursive of a snapshot of 1,000,000 small files"
    case .advise: return "advise, 1,000,000 small files"
    }
  }

  /// The tool the ratios are taken against.
  var reference: String {
    switch self {
    case .full: return "GNU tar level 0"
    case .unchanged, .incremental: return "GNU tar level 1"
    case .restore: return "tar -x + syncfs"
    case .check: return "restic check"
    case .diff: return "restic diff"
    case .find: return "restic find"
    case .ls: return "restic ls"
    case .advise: return "appbox advise"
    }
  }

  /// The rows, appbox's first (its peak RSS is the table's target).
  var tools: [String] {
    switch self {
    case .full: return ["appbox", "GNU tar level 0", "restic"]
    case .unchanged, .incremental: return ["appbox", "GNU tar level 1", "restic"]
    case .restore: return ["appbox", "tar -x + syncfs", "restic restore"]
    case .check: return ["appbox check", "restic check"]
    case .diff: return ["appbox diff", "restic diff"]
    case .find: return ["appbox find", "restic find"]
    case .ls: return ["appbox ls --recursive", "restic ls", "tar -tf (level 0)"]
    case .advise: return ["appbox advise"]
    }
  }

  var notes: [String] {
    switch self {
    case .full, .unchanged: return []
    case .incremental:
      return [
        "each run changes 1% of the backed-up files (`appbox-bench mutate --percent 1`: half rewritten whole, a quarter deleted, as many added) after its no-change backup; GNU tar's level 1 is against the run's level 0"
      ]
    case .restore:
      return [
        "the newest snapshot (the incremental's) into empty targets: appbox into a new device root where the app was just installed (it verifies every byte's SHA-256 and makes the tree durable, syncfs, before swapping it in), `tar -x` of the run's level-0 tar (the tree before the change) then `sync -f`, `restic restore latest` (not synced); the three trees are deleted once all three are timed"
      ]
    case .check:
      return [
        "appbox's repository holds four snapshots here (the previous run's kept one, or the untimed first backup, and the run's three: two full copies of the data); restic's holds the run's three, and `restic check` reads its index and trees, not the data"
      ]
    case .diff:
      return [
        "from the no-change snapshot to the incremental one, in each tool; output to /dev/null"
      ]
    case .find:
      return [
        "pattern 'file-77777.*' (a name, as find -name) over the run's three snapshots (appbox `--newest 3`; restic's repository holds only these): one match in each snapshot, so the rows time the walk, not the printing"
      ]
    case .ls:
      return [
        "every path of the incremental snapshot (output to /dev/null), beside `tar -tf` of the run's level-0 tar"
      ]
    case .advise:
      return ["`advise APP` (its last 20 snapshots: the four in the repository); no peer does this"]
    }
  }
}

extension Bench {
  /// Runs the huge scenario on `home`; writes what is measured so far to `partialPath` after
  /// each run (a run takes about 10 minutes).
  func huge(_ home: String, title: String, notes: [String]) throws -> [Scenario] {
    let base = work + "/huge"
    let repository = base + "/appbox"
    let restic = base + "/run/restic"
    // The restored trees go below work/restore, which runAll marks `chattr +T`.
    let restored = work + "/restore/huge"
    try shell.removeTree(base)
    try shell.removeTree(restored)
    try shell.run("mkdir -p \(base)")
    // appbox stores the bundle on an app's first snapshot only: the timed runs re-read and store
    // all the data (`--full`) into a repository that already holds it, as the peers exclude it.
    try shell.run(
      "\(ab) --quiet repo init --repo \(repository) && \(ab) --quiet backup \(app) --repo \(repository)")
    let start = machineState()
    // Table → tool → samples, in run order (sample i of every tool comes from run i).
    var samples: [HugeTable: [String: [Sample]]] = [:]
    var changes: [String] = []

    func scenarios() -> [Scenario] {
      HugeTable.allCases.map { table in
        var scenario = Scenario(name: table.name, reference: table.reference)
        scenario.rows = table.tools.map { ($0, samples[table]?[$0] ?? []) }
        switch table {
        case .full: scenario.notes = ["machine state: \(start)"]
        case .unchanged:
          scenario.notes = ["right after the full backup of the same run; machine state: \(start)"]
        case .incremental:
          // The counts are the same every run (the seed picks other files).
          scenario.notes = table.notes + Set(changes).sorted().map { "each run's change: \($0)" }
        default: scenario.notes = table.notes
        }
        let peaks = (samples[table]?[table.tools[0]] ?? []).compactMap(\.peakKiB)
        if let worst = peaks.max() {
          scenario.extraTargets = [
            (
              label: "appbox peak RSS",
              measured: String(format: "%.1f MB (worst of %d)", Double(worst) / 1024, peaks.count),
              bound: "≤ 150 MB", met: worst <= 150 * 1024
            )
          ]
        }
        return scenario
      }
    }

    /// Times each step under GNU time, in this run's order; a step with a target also records
    /// the bytes it added there.
    func time(_ table: HugeTable, run: Int, _ steps: [(tool: String, command: String, target: String?)])
      throws
    {
      for step in rotated(steps, run: run) {
        let before = step.target.map { shell.bytes($0) }
        var sample = try shell.time(step.command, memory: true)
        if let target = step.target, let before { sample.bytes = shell.bytes(target) - before }
        samples[table, default: [:]][step.tool, default: []].append(sample)
      }
    }

    let resticBackup = "restic -q -r \(restic) backup \(resticExcludes(home)) \(home)"
    func tarLevel1(_ name: String) -> String {
      "cp \(base)/run/snar \(base)/run/\(name).snar && tar -C \(home) \(tarExcludes) --listed-incremental=\(base)/run/\(name).snar -cf \(base)/run/\(name).tar ."
    }
    for run in 0..<runs {
      try shell.run("rm -rf \(base)/run && mkdir -p \(base)/run && restic -q -r \(restic) init")
      try time(
        .full, run: run,
        [
          ("appbox", "\(ab) --quiet backup \(app) --full --repo \(repository)", repository),
          (
            "GNU tar level 0",
            "tar -C \(home) \(tarExcludes) --listed-incremental=\(base)/run/snar -cf \(base)/run/l0.tar .",
            "\(base)/run/l0.tar"
          ),
          ("restic", resticBackup, restic),
        ])
      try time(
        .unchanged, run: run,
        [
          ("appbox", "\(ab) --quiet backup \(app) --repo \(repository)", repository),
          ("GNU tar level 1", tarLevel1("l1"), "\(base)/run/l1.tar"),
          ("restic", resticBackup, restic),
        ])

      let change = try mutate(home: home, percent: 1, seed: 2800 + UInt64(run))
      changes.append("modified \(change.modified), deleted \(change.deleted), added \(change.added)")
      // Past the racy window (ChangeDetector): files changed within 100 ms of a backup's start
      // are read again by the next one.
      usleep(200_000)
      try time(
        .incremental, run: run,
        [
          ("appbox", "\(ab) --quiet backup \(app) --repo \(repository)", repository),
          ("GNU tar level 1", tarLevel1("change"), "\(base)/run/change.tar"),
          ("restic", resticBackup, restic),
        ])
      // The no-change snapshot and the incremental one, in each tool (both list oldest first).
      let ours = try newestTwo("\(ab) --json snapshots \(app) --repo \(repository)", key: "snapshot")
      let theirs = try newestTwo("restic -r \(restic) snapshots --json", key: "id")

      try shell.run(
        "mkdir -p \(restored)/tar \(restored)/restic && \(appbox) --quiet --root \(restored)/device install \(work)/Bench.app"
      )
      try time(
        .restore, run: run,
        [
          (
            "appbox",
            "\(appbox) --quiet --root \(restored)/device restore \(app) --snapshot latest --repo \(repository)",
            nil
          ),
          (
            "tar -x + syncfs", "tar -xf \(base)/run/l0.tar -C \(restored)/tar && sync -f \(restored)/tar", nil
          ),
          ("restic restore", "restic -q -r \(restic) restore latest --target \(restored)/restic", nil),
        ])
      // The same snapshot restored by appbox and restic: the same files in Documents (untimed).
      let restoredHome = try shell.run("\(appbox) --root \(restored)/device path \(app)")
        .trimmingCharacters(in: .whitespacesAndNewlines)
      let counts = try [restoredHome, "\(restored)/restic\(home)"].map {
        try shell.run("find '\($0)/Documents' -type f | wc -l").trimmingCharacters(
          in: .whitespacesAndNewlines)
      }
      guard counts[0] == counts[1], counts[0] != "0" else {
        throw GeneratorError("appbox restored \(counts[0]) files in Documents, restic \(counts[1])")
      }
      // Disk space: each tree is about 1 GB and 750,000 inodes. What the deletion leaves dirty is
      // flushed before the next timed command, as always.
      try shell.removeTree(restored)

      try time(
        .check, run: run,
        [
          ("appbox check", "\(ab) --quiet check --repo \(repository)", nil),
          ("restic check", "restic -q -r \(restic) check", nil),
        ])
      try time(
        .diff, run: run,
        [
          ("appbox diff", "\(ab) diff \(ours.older) \(ours.newer) --repo \(repository) >/dev/null", nil),
          ("restic diff", "restic -q -r \(restic) diff \(theirs.older) \(theirs.newer) >/dev/null", nil),
        ])
      let pattern = "'file-77777.*'"
      try time(
        .find, run: run,
        [
          (
            "appbox find", "\(ab) find \(pattern) --app \(app) --newest 3 --repo \(repository) >/dev/null",
            nil
          ),
          ("restic find", "restic -q -r \(restic) find \(pattern) >/dev/null", nil),
        ])
      try time(
        .ls, run: run,
        [
          (
            "appbox ls --recursive", "\(ab) ls \(ours.newer) --recursive --repo \(repository) >/dev/null", nil
          ),
          ("restic ls", "restic -q -r \(restic) ls \(theirs.newer) >/dev/null", nil),
          ("tar -tf (level 0)", "tar -tf \(base)/run/l0.tar >/dev/null", nil),
        ])
      try time(
        .advise, run: run, [("appbox advise", "\(ab) advise \(app) --repo \(repository) >/dev/null", nil)])

      // One snapshot kept (disk space): the next run's full backup is measured the same.
      try shell.run("\(ab) --quiet forget \(app) --keep-last 1 --repo \(repository)")
      if let partialPath {
        try? report(scenarios(), title: title + ", partial", notes: notes).write(
          toFile: partialPath, atomically: true, encoding: .utf8)
      }
      progress("huge run \(run + 1)/\(runs); \(diskFree())")
    }
    if !keep { try shell.removeTree(base) }
    if let partialPath { unlink(partialPath) }
    return scenarios()
  }

  /// The ids of the two newest snapshots in the JSON array `command` prints (oldest first), each
  /// read under `key`.
  func newestTwo(_ command: String, key: String) throws -> (older: String, newer: String) {
    let output = try shell.run(command)
    let ids = ((try? JSONSerialization.jsonObject(with: Data(output.utf8))) as? [[String: Any]] ?? [])
      .compactMap { $0[key] as? String }
    guard ids.count >= 2 else {
      throw GeneratorError("fewer than two snapshots in the output of: \(command)")
    }
    return (ids[ids.count - 2], ids[ids.count - 1])
  }

  /// The work directory's free space, for the progress line (the huge run peaks at about 13 GB).
  func diskFree() -> String {
    let free = (try? shell.run("df -h --output=avail \(work) | tail -1"))?.trimmingCharacters(
      in: .whitespacesAndNewlines)
    return "\(free ?? "?") free in \(work)"
  }
}
