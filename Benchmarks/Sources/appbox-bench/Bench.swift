import AppboxTestSupport
import Foundation
import Glibc

enum BenchSize: String {
  case small, large
  var shape: HomeShape {
    switch self {
    case .small: return HomeShape(files: 10_000, bytes: 150_000_000, seed: 1)
    case .large: return HomeShape(files: 100_000, bytes: 1_500_000_000, seed: 1)
    }
  }
  var defaultRuns: Int { self == .small ? 5 : 3 }
}

/// The side-by-side run: one generated home, every tool on the same tree, the same
/// exclusions (the bundle, Library/Caches, tmp), warm page cache, medians of `runs`.
struct Bench {
  let size: BenchSize
  let appbox: String
  var runs: Int
  var work: String
  var shell = Shell()
  /// Run only this scenario ("history": advise and why), after generating the home.
  var only: String?
  /// Leave the work directory in place (to profile against it).
  var keep = false

  init(size: BenchSize, appbox: String) {
    self.size = size
    self.appbox = appbox
    runs = size.defaultRuns
    work = "/tmp/appbox-bench-\(size.rawValue)"
    shell.environment["RESTIC_PASSWORD"] = "appbox-bench"
    shell.environment["RESTIC_CACHE_DIR"] = work + "/restic-cache"
    shell.environment.removeValue(forKey: "APPBOX_ROOT")
  }

  var root: String { work + "/device" }
  var ab: String { "\(appbox) --root \(root)" }
  let app = "com.example.bench"
  var tarExcludes: String { "--exclude=./Bench.app --exclude=./Library/Caches --exclude=./tmp" }
  var bsdtarExcludes: String { "--exclude ./Bench.app --exclude ./Library/Caches --exclude ./tmp" }
  func resticExcludes(_ home: String) -> String {
    "--exclude \(home)/Bench.app --exclude \(home)/Library/Caches --exclude \(home)/tmp"
  }
  func home() throws -> String {
    try shell.run("\(ab) path \(app)").trimmingCharacters(in: .whitespacesAndNewlines)
  }

  mutating func runAll() throws -> String {
    let shape = size.shape
    // appbox marks its ApplicationRoot "top of unrelated hierarchies" (chattr +T) so new
    // homes do not crawl through freshly deleted inodes; the peers' targets get the same
    // flag, or the benchmark's own churn would slow only them.
    let fileSystem = try prepareWorkDirectory()
    defer { if !keep { releaseWorkDirectory(fileSystem) } }
    try shell.run(
      "mkdir -p \(work)/restore \(work)/copies && (chattr +T \(work) \(work)/restore \(work)/copies 2>/dev/null || true)"
    )
    progress("generating a \(shape.files)-file, \(shape.bytes / 1_000_000) MB home in \(work)")
    try generateBundle(at: work + "/Bench.app", seed: 7)
    try shell.run("\(ab) install \(work)/Bench.app")
    var home = try self.home()
    try generateData(home: home, shape: shape)
    let backedUp = try shell.run(
      "cd \(home) && find . -path ./Bench.app -prune -o -path ./Library/Caches -prune -o -path ./tmp -prune -o -type f -print | wc -l"
    ).trimmingCharacters(in: .whitespacesAndNewlines)
    let bytes = try shell.run("du -sb --exclude=Bench.app --exclude=Caches --exclude=tmp \(home) | cut -f1")
      .trimmingCharacters(in: .whitespacesAndNewlines)
    let notes = [
      "tree: \(shape.files) files / \(shape.bytes / 1_000_000) MB generated (seed \(shape.seed)); backed up: \(backedUp) files, \(Int64(bytes).map { $0 / 1_000_000 } ?? 0) MB (the bundle, Library/Caches and tmp are excluded by every tool)",
      "machine: \(ProcessInfo.processInfo.activeProcessorCount) cores, \(ProcessInfo.processInfo.physicalMemory >> 30) GiB; warm page cache; medians of \(runs) runs",
      "tools: \(toolVersions())",
    ]
    // Warm the cache once, then the floors.
    try shell.run(
      "cat \(home)/Documents/*/* >/dev/null 2>&1 || true; find \(home) -type f -exec cat {} + >/dev/null")
    var scenarios: [Scenario] = []
    if only == "history" {
      scenarios.append(try history(home))
      return report(
        scenarios, title: "appbox benchmark (\(size.rawValue), history only)",
        notes: notes + [fileSystem.note])
    }
    if only == "repository" {
      scenarios += try encryption(home)
      scenarios.append(try objectStore(home))
      return report(
        scenarios, title: "appbox benchmark (\(size.rawValue), encryption and S3)",
        notes: notes + [fileSystem.note])
    }
    scenarios.append(try floors(home))
    scenarios.append(try fullBackup(home))
    let (incremental, noChange) = try incrementalAndNoChange(home)
    scenarios += [incremental, noChange]
    scenarios.append(try restore(home))
    scenarios += try encryption(home)
    scenarios.append(try objectStore(home))
    scenarios.append(try update(&home))
    scenarios.append(try history(home))
    return report(scenarios, title: "appbox benchmark (\(size.rawValue))", notes: notes + [fileSystem.note])
  }

  /// Where the benchmark runs: the work directory's own file system, which the benchmark
  /// never churns while it measures (nothing is deleted mid-scenario: on an ext4 without a
  /// journal, creating files among inodes freed in the last minutes is several times
  /// slower). With APPBOX_BENCH_LOOP=1 (as root) it makes a fresh journaled ext4 for the run
  /// instead, a loop-mounted sparse image: independent of the machine's history, but every
  /// fsync goes through the loop device, which makes durability cost more than on a disk.
  struct WorkFileSystem {
    var image: String?
    var note: String
  }

  func prepareWorkDirectory() throws -> WorkFileSystem {
    try shell.run("umount \(work) 2>/dev/null; rm -rf \(work) && mkdir -p \(work)", allowFailure: true)
    let image = work + ".img"
    let gigabytes = size == .small ? 8 : 48
    if getuid() == 0, shell.environment["APPBOX_BENCH_LOOP"] == "1",
      (try? shell.run(
        "rm -f \(image) && truncate -s \(gigabytes)G \(image) && mkfs.ext4 -q -F -E lazy_itable_init=1,lazy_journal_init=1 \(image) && mount -o loop \(image) \(work)"
      )) != nil
    {
      return WorkFileSystem(
        image: image,
        note:
          "file system: a fresh ext4 made for this run (loop-mounted sparse image), so earlier activity on the machine does not skew it"
      )
    }
    _ = try? shell.run("rm -f \(image)")
    return WorkFileSystem(
      image: nil,
      note: "file system: the work directory's own (\(fileSystemDescription())), not churned while measuring")
  }

  func fileSystemDescription() -> String {
    let text = (try? shell.run("findmnt -n -o FSTYPE,OPTIONS -T \(work)"))?.trimmingCharacters(
      in: .whitespacesAndNewlines)
    return text.map { $0.split(whereSeparator: \.isWhitespace).joined(separator: ", ") } ?? "unknown"
  }

  func releaseWorkDirectory(_ fileSystem: WorkFileSystem) {
    progress("removing \(work)")
    if let image = fileSystem.image {
      _ = try? shell.run("umount \(work) && rm -f \(image) && rmdir \(work)", allowFailure: true)
    } else {
      _ = try? shell.run("rm -rf \(work)", allowFailure: true)
    }
  }

  func toolVersions() -> String {
    let tar =
      (try? shell.run("tar --version | head -1"))?.trimmingCharacters(in: .whitespacesAndNewlines) ?? "?"
    let bsdtar = (try? shell.run("bsdtar --version"))?.trimmingCharacters(in: .whitespacesAndNewlines) ?? "?"
    let restic =
      (try? shell.run("restic version | cut -d' ' -f1-2"))?.trimmingCharacters(in: .whitespacesAndNewlines)
      ?? "?"
    return [tar, bsdtar.split(separator: " ").prefix(2).joined(separator: " "), restic].joined(
      separator: "; ")
  }

  /// The walk floor and the read floor over the backed-up part of the home.
  func floors(_ home: String) throws -> Scenario {
    var scenario = Scenario(name: "floors", reference: "stat walk (find -printf)")
    let prune = "-path ./Bench.app -prune -o -path ./Library/Caches -prune -o -path ./tmp -prune -o"
    var walk: [Sample] = []
    var read: [Sample] = []
    for _ in 0..<runs {
      walk.append(try shell.time("cd \(home) && find . \(prune) -printf '%s %T@ %C@ %i %m %p\\n' >/dev/null"))
      read.append(try shell.time("cd \(home) && find . \(prune) -type f -print0 | xargs -0 cat >/dev/null"))
    }
    scenario.rows = [("stat walk (find -printf)", walk), ("read every byte (cat)", read)]
    return scenario
  }

  func fullBackup(_ home: String) throws -> Scenario {
    var scenario = Scenario(name: "full backup", reference: "bsdtar (pax)")
    var rows: [String: [Sample]] = [:]
    // appbox stores the bundle on an app's first snapshot only (the platform's rule); the
    // peers exclude it. So each timed `backup --full` (which re-reads and stores all the
    // data) goes to a repository that already holds the bundle: the same bytes as the peers.
    try shell.run("rm -rf \(work)/full-appbox && \(ab) --quiet backup \(app) --repo \(work)/full-appbox")
    for run in 0..<runs {
      try shell.run("rm -rf \(work)/full && mkdir -p \(work)/full && restic -q -r \(work)/full/restic init")
      let steps: [(String, String, Bool)] = [
        ("appbox", "\(ab) --quiet backup \(app) --full --repo \(work)/full-appbox", true),
        (
          "GNU tar level 0",
          "tar -C \(home) \(tarExcludes) --listed-incremental=\(work)/full/snar -cf \(work)/full/l0.tar .",
          false
        ),
        (
          "bsdtar (pax)", "bsdtar --format pax -cf \(work)/full/bsd.tar -C \(home) \(bsdtarExcludes) .", false
        ),
        // appbox makes its archive durable (fsync) before committing; this row shows bsdtar
        // with the same guarantee.
        (
          "bsdtar + fsync",
          "bsdtar --format pax -cf \(work)/full/bsd2.tar -C \(home) \(bsdtarExcludes) . && sync \(work)/full/bsd2.tar",
          false
        ),
        ("restic", "restic -q -r \(work)/full/restic backup \(resticExcludes(home)) \(home)", false),
      ]
      for (tool, command, memory) in rotated(steps, run: run) {
        rows[tool, default: []].append(try shell.time(command, memory: memory))
      }
      progress("full backup run \(run + 1)/\(runs)")
    }
    scenario.rows = ["appbox", "GNU tar level 0", "bsdtar (pax)", "bsdtar + fsync", "restic"].map {
      ($0, rows[$0] ?? [])
    }
    scenario.targets = [("appbox", "bsdtar (pax)", 1.1)]
    return scenario
  }

  /// Each tool keeps its own chain; after every 1% mutation all of them back up the same tree.
  mutating func incrementalAndNoChange(_ home: String) throws -> (Scenario, Scenario) {
    let base = work + "/chain"
    try shell.run("rm -rf \(base) && mkdir -p \(base) && restic -q -r \(base)/restic init")
    try shell.run("\(ab) --quiet backup \(app) --repo \(base)/appbox")
    try shell.run("tar -C \(home) \(tarExcludes) --listed-incremental=\(base)/snar -cf \(base)/l0.tar .")
    try shell.run("restic -q -r \(base)/restic backup \(resticExcludes(home)) \(home)")
    var incremental = Scenario(name: "incremental backup after a 1% change", reference: "GNU tar level 1")
    var noChange = Scenario(name: "no-change backup", reference: "stat walk (find -printf)")
    var inc: [String: [Sample]] = [:]
    var same: [String: [Sample]] = [:]
    let prune = "-path ./Bench.app -prune -o -path ./Library/Caches -prune -o -path ./tmp -prune -o"
    for run in 0..<runs {
      _ = try mutate(home: home, percent: 1, seed: UInt64(100 + run))
      // GNU tar level 1 against a copy of the chain's snapshot file, which then moves on.
      try shell.run("cp \(base)/snar \(base)/snar.\(run)")
      let changed: [(String, String, Bool)] = [
        ("appbox", "\(ab) --quiet backup \(app) --repo \(base)/appbox", true),
        (
          "GNU tar level 1",
          "tar -C \(home) \(tarExcludes) --listed-incremental=\(base)/snar.\(run) -cf \(base)/l1-\(run).tar .",
          false
        ),
        ("restic", "restic -q -r \(base)/restic backup \(resticExcludes(home)) \(home)", false),
      ]
      for (tool, command, memory) in rotated(changed, run: run) {
        inc[tool, default: []].append(try shell.time(command, memory: memory))
      }
      try shell.run("mv \(base)/snar.\(run) \(base)/snar && cp \(base)/snar \(base)/snar.nc")
      // Nothing changed since: the no-change backups.
      let unchanged: [(String, String, Bool)] = [
        ("appbox", "\(ab) --quiet backup \(app) --repo \(base)/appbox", true),
        (
          "GNU tar level 1",
          "tar -C \(home) \(tarExcludes) --listed-incremental=\(base)/snar.nc -cf \(base)/nc.tar .", false
        ),
        ("restic", "restic -q -r \(base)/restic backup \(resticExcludes(home)) \(home)", false),
        (
          "stat walk (find -printf)",
          "cd \(home) && find . \(prune) -printf '%s %T@ %C@ %i %m %p\\n' >/dev/null", false
        ),
      ]
      for (tool, command, memory) in rotated(unchanged, run: run) {
        same[tool, default: []].append(try shell.time(command, memory: memory))
      }
      progress("incremental and no-change run \(run + 1)/\(runs)")
    }
    incremental.rows = ["appbox", "GNU tar level 1", "restic"].map { ($0, inc[$0] ?? []) }
    incremental.targets = [("appbox", "GNU tar level 1", 0.7), ("appbox", "restic", 0.05)]
    noChange.rows = ["appbox", "GNU tar level 1", "restic", "stat walk (find -printf)"].map {
      ($0, same[$0] ?? [])
    }
    noChange.targets = [("appbox", "stat walk (find -printf)", 1.5)]
    return (incremental, noChange)
  }

  func restore(_ home: String) throws -> Scenario {
    let base = work + "/chain"
    var scenario = Scenario(
      name: "restore of the latest snapshot into an empty home", reference: "tar -x (level 0)")
    var rows: [String: [Sample]] = [:]
    for run in 0..<runs {
      // Into empty targets, with nothing deleted while the scenario runs (ext4 allocates
      // inodes slowly among freshly freed ones, which would bias whoever comes next): appbox
      // into a new device root where the app was just installed (its home is empty), the
      // peers into new directories. Everything is removed at the end of the benchmark.
      let target = "\(work)/restore/\(run)"
      try shell.run(
        "mkdir -p \(target)/tar \(target)/restic && \(appbox) --quiet --root \(target)/device install \(work)/Bench.app"
      )
      let steps: [(String, String, String?)] = [
        (
          "appbox",
          "\(appbox) --quiet --root \(target)/device restore \(app) --snapshot latest --repo \(base)/appbox",
          nil
        ),
        ("tar -x (level 0)", "tar -xf \(base)/l0.tar -C \(target)/tar", nil),
        // appbox verifies every byte's SHA-256 and makes the restored tree durable (syncfs)
        // before swapping it in; this row shows tar with the same durability.
        (
          "tar -x + syncfs",
          "mkdir -p \(target)/tar2 && tar -xf \(base)/l0.tar -C \(target)/tar2 && sync -f \(target)/tar2", nil
        ),
        ("restic restore", "restic -q -r \(base)/restic restore latest --target \(target)/restic", nil),
      ]
      for (tool, command, prepare) in rotated(steps, run: run) {
        if let prepare { try shell.run(prepare) }
        rows[tool, default: []].append(try shell.time(command, memory: tool == "appbox"))
      }
      progress("restore run \(run + 1)/\(runs)")
    }
    scenario.rows = ["appbox", "tar -x (level 0)", "tar -x + syncfs", "restic restore"].map {
      ($0, rows[$0] ?? [])
    }
    scenario.targets = [("appbox", "tar -x (level 0)", 1.2)]
    return scenario
  }

  /// `appbox update` to a new bundle version vs copying the data with `cp -a`, and the
  /// migration step alone (from the update's JSON report) vs a `mv` of a directory.
  func update(_ home: inout String) throws -> Scenario {
    var scenario = Scenario(name: "update migration", reference: "cp -a Documents Library")
    var rows: [String: [Sample]] = [:]
    for run in 0..<runs {
      let version = run + 2
      let bundle = "\(work)/v\(version)/Bench.app"
      try shell.run(
        "rm -rf \(work)/v\(version) && mkdir -p \(work)/v\(version) && cp -a \(work)/Bench.app \(bundle) && rm -rf \(bundle)/_CodeSignature && sed -i 's|<string>1</string>|<string>\(version)</string>|' \(bundle)/Info.plist"
      )
      try shell.run("mkdir -p \(work)/copies/\(run)/copy")
      rows["cp -a Documents Library", default: []].append(
        try shell.time("cp -a \(home)/Documents \(home)/Library \(work)/copies/\(run)/copy/"))
      rows["mv of a directory", default: []].append(
        try shell.time("mv \(work)/copies/\(run)/copy \(work)/copies/\(run)/moved"))
      let start = DispatchTime.now().uptimeNanoseconds
      let output = try shell.run("\(ab) --json update \(app) \(bundle)")
      let total = Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
      rows["appbox update (whole)", default: []].append(Sample(seconds: total))
      if let data = output.data(using: .utf8),
        let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any],
        let durations = object["durations"] as? [String: Any],
        let migration = durations["migration"] as? Double
      {
        rows["appbox migration step", default: []].append(Sample(seconds: migration))
      }
      home = try self.home()
      progress("update run \(run + 1)/\(runs)")
    }
    scenario.rows = [
      "appbox update (whole)", "appbox migration step", "cp -a Documents Library", "mv of a directory",
    ]
    .compactMap { tool in rows[tool].map { (tool, $0) } }
    scenario.targets = [("appbox update (whole)", "cp -a Documents Library", 0.25)]
    scenario.absoluteTargets = [("appbox migration step", 0.05)]
    return scenario
  }
}
