import AppboxTestSupport
import Foundation
import Glibc

enum BenchSize: String {
  case small, large, huge
  var shape: HomeShape {
    switch self {
    case .small: return HomeShape(files: 10_000, bytes: 150_000_000, seed: 1)
    case .large: return HomeShape(files: 100_000, bytes: 1_500_000_000, seed: 1)
    // A million small files (the generator's size mix scaled down: most under 100 bytes).
    case .huge: return HomeShape(files: 1_000_000, bytes: 1_000_000_000, seed: 1)
    }
  }
  var defaultRuns: Int { self == .small ? 5 : 3 }
  /// The bound on a whole `update` against `cp -a` of the data.
  var updateBound: Double { self == .small ? 0.5 : 0.25 }
}

/// The state of the file system a scenario's runs start from. On ext4 without a journal (this
/// project's VMs), creating files among inodes freed in the last minutes is several times
/// slower, so a tool creating many files right after a large deletion measures that instead.
enum FileSystemState: String, CaseIterable {
  /// Nothing deleted by the benchmark since the scenario began.
  case fresh
  /// A copy of the backed-up data (every file of Documents and Library) deleted just before
  /// each run.
  case churned

  func label(_ files: String) -> String {
    switch self {
    case .fresh: return "fresh file system (nothing deleted while it runs)"
    case .churned: return "churned file system (a \(files)-file tree deleted just before each run)"
    }
  }
}

/// The side-by-side run: one generated home, every tool on the same tree, the same
/// exclusions (the bundle, Library/Caches, tmp), warm page cache, medians of `runs` with
/// min–max, ratios taken run by run, each scenario on a fresh and a churned file system.
struct Bench {
  let size: BenchSize
  let appbox: String
  var runs: Int
  var work: String
  var shell = Shell()
  /// Run only this scenario ("history": advise and why; "browse": find and dump;
  /// "repository": encryption and S3; "backup": full and incremental backups; "restore": the
  /// 1% incrementals, then restores of their latest snapshot), after
  /// generating the home.
  var only: String?
  /// Leave the work directory in place (to profile against it).
  var keep = false
  /// Where the results so far are written after each scenario (removed once all are in).
  var partialPath: String?
  /// Files the churn tree holds (set when it is first made).
  var churnFiles = "?"
  /// What the generated files hold (`--content`): random bytes but for a quarter of the files,
  /// or text, records and media that compress as an app's data does.
  var profile = ContentProfile.random
  /// The compression appbox's rows use besides its default (`--compress`): the other of
  /// `none` and `zstd`, found from `appbox help backup`.
  var alternative = "zstd"

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

  /// The other of `none` and `zstd`, whichever `backup` does not use by default.
  func alternativeCompression() -> String {
    let help = (try? shell.run("\(appbox) help backup")) ?? ""
    return help.contains("(default: zstd)") ? "none" : "zstd"
  }

  mutating func runAll() throws -> String {
    let shape = size.shape
    alternative = alternativeCompression()
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
    try generateData(home: home, shape: shape, profile: profile)
    try generateInPlaceFiles(home: home, seed: shape.seed, profile: profile)
    let backedUp = try shell.run(
      "cd \(home) && find . -path ./Bench.app -prune -o -path ./Library/Caches -prune -o -path ./tmp -prune -o -type f -print | wc -l"
    ).trimmingCharacters(in: .whitespacesAndNewlines)
    churnFiles = backedUp
    let bytes = try shell.run("du -sb --exclude=Bench.app --exclude=Caches --exclude=tmp \(home) | cut -f1")
      .trimmingCharacters(in: .whitespacesAndNewlines)
    let notes = [
      "tree: \(shape.files) files / \(shape.bytes / 1_000_000) MB generated (seed \(shape.seed)), plus a 64 MB database and six media files of 1–64 MB (the in-place workload's); backed up: \(backedUp) files, \(Int64(bytes).map { $0 / 1_000_000 } ?? 0) MB (the bundle, Library/Caches and tmp are excluded by every tool)",
      profile == .mixed
        ? "content: mixed (`--content mixed`): a quarter of the files text, the rest records and media (3 in 8), the database records; changed files keep their kind (Sources/AppboxTestSupport/MixedContent.swift)"
        : "content: random bytes, but for a quarter of the files, which repeat one line of text (the changes write random bytes)",
      "appbox rows: `appbox` is the default compression; `appbox --compress \(alternative)` the other",
      "machine: \(ProcessInfo.processInfo.activeProcessorCount) cores, \(ProcessInfo.processInfo.physicalMemory >> 30) GiB; warm page cache; medians of \(runs) runs, with min–max; every ratio is taken run by run (both tools in the same run), then its median and min–max given",
      "machine state at the start: \(machineState()) (each scenario notes its own)",
      "tools: \(toolVersions())",
      fileSystem.note,
    ]
    // Warm the cache once, then the floors.
    try shell.run(
      "cat \(home)/Documents/*/* >/dev/null 2>&1 || true; find \(home) -type f -exec cat {} + >/dev/null")
    var scenarios: [Scenario] = []
    if only == "history" {
      scenarios.append(try history(home))
      return report(
        scenarios, title: "appbox benchmark (\(size.rawValue), history only)", notes: notes)
    }
    if only == "browse" {
      scenarios += try browse(home)
      return report(scenarios, title: "appbox benchmark (\(size.rawValue), find and dump only)", notes: notes)
    }
    if only == "repository" {
      scenarios += try encryption(home)
      scenarios.append(try objectStore(home))
      return report(
        scenarios, title: "appbox benchmark (\(size.rawValue), encryption and S3)", notes: notes)
    }
    if size == .huge {
      let title = "appbox benchmark (huge: a million small files)"
      return report(try huge(home, title: title, notes: notes), title: title, notes: notes)
    }
    let title = "appbox benchmark (\(size.rawValue))"
    // What is measured so far is written after each scenario, so a run that fails late (a
    // full disk, a peer's error) still leaves its results.
    func measured(_ new: [Scenario]) {
      scenarios += new
      if let partialPath {
        try? report(scenarios, title: title + ", partial", notes: notes).write(
          toFile: partialPath, atomically: true, encoding: .utf8)
      }
    }
    measured([try floors(home)])
    for state in FileSystemState.allCases { measured([try fullBackup(home, state)]) }
    if only == "restore" {
      // The restore rows alone (`--only restore`), on the chain the 1% incrementals build.
      scenarios += try incrementals(home, workload: .atomicSaves)
      for state in FileSystemState.allCases { scenarios.append(try restore(home, state)) }
      return report(scenarios, title: "appbox benchmark (\(size.rawValue), restore only)", notes: notes)
    }
    measured(try incrementals(home, workload: .atomicSaves))
    measured(try incrementals(home, workload: .inPlace))
    if only == "backup" {
      // The backup rows alone (`--only backup`): floors, full backups, both incrementals.
      if let partialPath { unlink(partialPath) }
      return report(scenarios, title: "appbox benchmark (\(size.rawValue), backups only)", notes: notes)
    }
    for state in FileSystemState.allCases { measured([try restore(home, state)]) }
    measured(try encryption(home))
    measured([try objectStore(home)])
    for state in FileSystemState.allCases { measured([try update(&home, state)]) }
    measured([try history(home)])
    measured(try browse(home))
    if let partialPath { unlink(partialPath) }
    return report(scenarios, title: title, notes: notes)
  }

  /// Where the benchmark runs: the work directory's own file system. With APPBOX_BENCH_LOOP=1
  /// (as root) it makes a fresh journaled ext4 for the run instead, a loop-mounted sparse
  /// image: independent of the machine's history, but every fsync goes through the loop
  /// device, which makes durability cost more than on a disk.
  struct WorkFileSystem {
    var image: String?
    var note: String
  }

  func prepareWorkDirectory() throws -> WorkFileSystem {
    try shell.run("umount \(work) 2>/dev/null; rm -rf \(work) && mkdir -p \(work)", allowFailure: true)
    let image = work + ".img"
    let gigabytes = size == .small ? 12 : size == .large ? 64 : 48
    if getuid() == 0, shell.environment["APPBOX_BENCH_LOOP"] == "1",
      (try? shell.run(
        "rm -f \(image) && truncate -s \(gigabytes)G \(image) && mkfs.ext4 -q -F -E lazy_itable_init=1,lazy_journal_init=1 \(image) && mount -o loop \(image) \(work)"
      )) != nil
    {
      return WorkFileSystem(
        image: image,
        note:
          "file system: a fresh ext4 made for this run (loop-mounted sparse image: \(fileSystemDescription()))"
      )
    }
    _ = try? shell.run("rm -f \(image)")
    return WorkFileSystem(
      image: nil, note: "file system: the work directory's own (\(fileSystemDescription()))")
  }

  func fileSystemDescription() -> String {
    let text = (try? shell.run("findmnt -n -o FSTYPE,OPTIONS -T \(work)"))?.trimmingCharacters(
      in: .whitespacesAndNewlines)
    var description =
      text.map { $0.split(whereSeparator: \.isWhitespace).joined(separator: ", ") } ?? "unknown"
    if let source = try? shell.run("findmnt -n -o SOURCE -T \(work)").trimmingCharacters(
      in: .whitespacesAndNewlines),
      source.hasPrefix("/dev/"),
      let features = try? shell.run(
        "dumpe2fs -h \(source) 2>/dev/null | grep -i '^Filesystem features'", allowFailure: true),
      !features.isEmpty
    {
      description += features.contains("has_journal") ? "; journaled" : "; no journal"
    }
    return description
  }

  func releaseWorkDirectory(_ fileSystem: WorkFileSystem) {
    progress("removing \(work)")
    if let image = fileSystem.image {
      _ = try? shell.run("umount \(work) && rm -f \(image) && rmdir \(work)", allowFailure: true)
    } else {
      try? shell.removeTree(work)
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

  // MARK: Churn

  /// Makes (untimed) the tree the churned state deletes: a copy of the backed-up data.
  func makeChurnTree(_ home: String) throws {
    try shell.run(
      "rm -rf \(work)/churn && mkdir -p \(work)/churn && cp -a \(home)/Documents \(home)/Library \(work)/churn/"
    )
  }

  /// Deletes it, right before a run's timed commands.
  func churn() throws { try shell.run("rm -rf \(work)/churn") }

  /// Before run `run` of a scenario in `state`: nothing, or a fresh deletion of a large tree.
  func prepare(_ state: FileSystemState, home: String) throws {
    guard state == .churned else { return }
    try makeChurnTree(home)
    try churn()
  }

  func scenarioNotes(_ state: FileSystemState) -> [String] {
    ["\(state.label(churnFiles)); machine state: \(machineState())"]
  }

  /// The walk floor and the read floor over the backed-up part of the home.
  func floors(_ home: String) throws -> Scenario {
    var scenario = Scenario(name: "floors", reference: "stat walk (find -printf)")
    scenario.notes = ["machine state: \(machineState())"]
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

  func fullBackup(_ home: String, _ state: FileSystemState) throws -> Scenario {
    var scenario = Scenario(name: "full backup, \(state.rawValue)", reference: "bsdtar (pax)")
    scenario.notes = scenarioNotes(state)
    var rows: [String: [Sample]] = [:]
    // appbox stores the bundle on an app's first snapshot only (the platform's rule); the
    // peers exclude it. So each timed `backup --full` (which re-reads and stores all the
    // data) goes to a repository that already holds the bundle: the same bytes as the peers.
    // The bytes stored are what each run added to its repository or archive.
    for (repository, flags) in [("full-appbox", ""), ("full-alt", " --compress \(alternative)")] {
      try shell.run(
        "rm -rf \(work)/\(repository) && \(ab) --quiet repo init --repo \(work)/\(repository)"
          + " && \(ab) --quiet backup \(app)\(flags) --repo \(work)/\(repository)")
    }
    for run in 0..<runs {
      try shell.run("rm -rf \(work)/full && mkdir -p \(work)/full && restic -q -r \(work)/full/restic init")
      try prepare(state, home: home)
      let steps: [(String, String, String, Bool)] = [
        (
          "appbox", "\(ab) --quiet backup \(app) --full --repo \(work)/full-appbox", "\(work)/full-appbox",
          true
        ),
        (
          "appbox --compress \(alternative)",
          "\(ab) --quiet backup \(app) --full --compress \(alternative) --repo \(work)/full-alt",
          "\(work)/full-alt", false
        ),
        (
          "GNU tar level 0",
          "tar -C \(home) \(tarExcludes) --listed-incremental=\(work)/full/snar -cf \(work)/full/l0.tar .",
          "\(work)/full/l0.tar", false
        ),
        (
          "bsdtar (pax)", "bsdtar --format pax -cf \(work)/full/bsd.tar -C \(home) \(bsdtarExcludes) .",
          "\(work)/full/bsd.tar", false
        ),
        // appbox makes its archive durable (fsync) before committing; this row shows bsdtar
        // with the same guarantee.
        (
          "bsdtar + fsync",
          "bsdtar --format pax -cf \(work)/full/bsd2.tar -C \(home) \(bsdtarExcludes) . && sync \(work)/full/bsd2.tar",
          "\(work)/full/bsd2.tar", false
        ),
        (
          "restic", "restic -q -r \(work)/full/restic backup \(resticExcludes(home)) \(home)",
          "\(work)/full/restic",
          false
        ),
      ]
      for (tool, command, target, memory) in rotated(steps, run: run) {
        let before = shell.bytes(target)
        var sample = try shell.time(command, memory: memory)
        sample.bytes = shell.bytes(target) - before
        rows[tool, default: []].append(sample)
      }
      // Keep one full backup in each repository (disk space): the next run's is measured the same.
      for repository in ["full-appbox", "full-alt"] {
        try shell.run("\(ab) --quiet forget \(app) --keep-last 1 --repo \(work)/\(repository)")
      }
      progress("full backup (\(state.rawValue)) run \(run + 1)/\(runs)")
    }
    try shell.run("rm -rf \(work)/full \(work)/full-appbox \(work)/full-alt")
    scenario.rows = [
      "appbox", "appbox --compress \(alternative)", "GNU tar level 0", "bsdtar (pax)", "bsdtar + fsync",
      "restic",
    ].map { ($0, rows[$0] ?? []) }
    scenario.byteReferences = ["restic"]
    scenario.targets = [("appbox", "bsdtar (pax)", 1.1)]
    return scenario
  }

  enum Workload: String {
    /// `mutate`: 1% of the files rewritten (whole), deleted and added.
    case atomicSaves
    /// `mutateInPlace`: the independent workload.
    case inPlace

    var title: String {
      switch self {
      case .atomicSaves: return "incremental backup after a 1% change (files rewritten whole, new, deleted)"
      case .inPlace:
        return
          "incremental backup, independent workload (1%: atomic saves, new and deleted files; in place: 1% of a 64 MB database's pages, two media files)"
      }
    }
  }

  /// Each tool keeps its own chain; after every 1% change all of them back up the same tree,
  /// then back it up again unchanged. Returns the incremental scenarios (fresh, churned) and,
  /// for the first workload, the no-change ones.
  func incrementals(_ home: String, workload: Workload) throws -> [Scenario] {
    let base = work + "/chain-\(workload.rawValue)"
    try shell.run("rm -rf \(base) && mkdir -p \(base) && restic -q -r \(base)/restic init")
    try shell.run(
      "\(ab) --quiet repo init --repo \(base)/appbox && \(ab) --quiet backup \(app) --repo \(base)/appbox")
    // The same chain in the other compression, backed up in the same runs.
    try shell.run(
      "\(ab) --quiet repo init --repo \(base)/appbox-alt && \(ab) --quiet backup \(app) --compress \(alternative) --repo \(base)/appbox-alt"
    )
    try shell.run("tar -C \(home) \(tarExcludes) --listed-incremental=\(base)/snar -cf \(base)/l0.tar .")
    try shell.run("restic -q -r \(base)/restic backup \(resticExcludes(home)) \(home)")
    let prune = "-path ./Bench.app -prune -o -path ./Library/Caches -prune -o -path ./tmp -prune -o"
    var result: [Scenario] = []
    var noChanges: [Scenario] = []
    var seed: UInt64 = workload == .inPlace ? 500 : 100
    for state in FileSystemState.allCases {
      var incremental = Scenario(name: "\(workload.title), \(state.rawValue)", reference: "GNU tar level 1")
      incremental.notes = scenarioNotes(state)
      var noChange = Scenario(
        name: "no-change backup, \(state.rawValue)", reference: "stat walk (find -printf)")
      noChange.notes = scenarioNotes(state)
      var inc: [String: [Sample]] = [:]
      var same: [String: [Sample]] = [:]
      var catalogGrowth: [(catalog: Int64, added: Int64)] = []
      for run in 0..<runs {
        seed += 1
        let change: String
        if workload == .inPlace {
          change = try mutateInPlace(home: home, percent: 1, seed: seed, profile: profile).description
        } else {
          let m = try mutate(home: home, percent: 1, seed: seed, profile: profile)
          change = "modified \(m.modified), deleted \(m.deleted), added \(m.added)"
        }
        if run == 0 { incremental.notes.append("each run's change: \(change)") }
        // Past the racy window (ChangeDetector): files changed within 100 ms of a backup's
        // start are read again by the next one.
        usleep(200_000)
        let tag = "\(state.rawValue)-\(run)"
        try shell.run("cp \(base)/snar \(base)/snar.\(tag)")
        try prepare(state, home: home)
        let catalogBefore = shell.bytes("\(base)/appbox/catalog.db*")
        let changed: [(String, String, String, Bool)] = [
          (
            "appbox", "\(ab) --json backup \(app) --repo \(base)/appbox > \(base)/appbox.json",
            "\(base)/appbox",
            true
          ),
          (
            "appbox --compress \(alternative)",
            "\(ab) --quiet backup \(app) --compress \(alternative) --repo \(base)/appbox-alt",
            "\(base)/appbox-alt", false
          ),
          (
            "GNU tar level 1",
            "tar -C \(home) \(tarExcludes) --listed-incremental=\(base)/snar.\(tag) -cf \(base)/l1-\(tag).tar .",
            "\(base)/l1-\(tag).tar", false
          ),
          (
            "restic", "restic -q -r \(base)/restic backup \(resticExcludes(home)) \(home)", "\(base)/restic",
            false
          ),
        ]
        for (tool, command, target, memory) in rotated(changed, run: run) {
          let before = shell.bytes(target)
          var sample = try shell.time(command, memory: memory)
          sample.bytes = shell.bytes(target) - before
          inc[tool, default: []].append(sample)
        }
        let added =
          (try? JSONSerialization.jsonObject(
            with: Data(contentsOf: URL(fileURLWithPath: "\(base)/appbox.json"))))
          .flatMap { ($0 as? [[String: Any]])?.first?["bytesAdded"] as? Int }.map(Int64.init) ?? 0
        catalogGrowth.append((shell.bytes("\(base)/appbox/catalog.db*") - catalogBefore, added))
        try shell.run("mv \(base)/snar.\(tag) \(base)/snar && cp \(base)/snar \(base)/snar.nc")
        if workload == .atomicSaves {
          // Nothing changed since: the no-change backups.
          let unchanged: [(String, String, Bool)] = [
            ("appbox", "\(ab) --quiet backup \(app) --repo \(base)/appbox", true),
            (
              "appbox --compress \(alternative)",
              "\(ab) --quiet backup \(app) --compress \(alternative) --repo \(base)/appbox-alt", false
            ),
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
        }
        progress("\(workload.rawValue) incremental (\(state.rawValue)) run \(run + 1)/\(runs)")
      }
      incremental.rows = ["appbox", "appbox --compress \(alternative)", "GNU tar level 1", "restic"].map {
        ($0, inc[$0] ?? [])
      }
      incremental.targets = [("appbox", "GNU tar level 1", 0.7), ("appbox", "restic", 0.05)]
      incremental.byteTargets = [
        ("appbox", "restic", 1.5), ("appbox --compress \(alternative)", "restic", 1.5),
      ]
      incremental.byteReferences = ["restic"]
      let growth = catalogGrowth.map { Double($0.catalog) }
      let share = catalogGrowth.map { $0.added > 0 ? Double($0.catalog) / Double($0.added) : .nan }
      incremental.extra = [
        "| catalog.db growth per incremental | median | min–max | as a share of the data bytes it added: median (min–max) |",
        "|---|---:|---:|---:|",
        "| appbox | \(formatBytes(median(growth))) | \(formatBytes(growth.min() ?? 0))–\(formatBytes(growth.max() ?? 0)) | \(String(format: "%.1f%%", median(share) * 100)) (\(String(format: "%.1f–%.1f%%", (share.min() ?? 0) * 100, (share.max() ?? 0) * 100))) |",
      ]
      incremental.extraTargets = [
        (
          "catalog growth / data bytes added",
          String(
            format: "%.1f%% (%.1f–%.1f%%)", median(share) * 100, (share.min() ?? 0) * 100,
            (share.max() ?? 0) * 100),
          "≤ 10%", median(share) <= 0.10
        )
      ]
      if size == .large {
        incremental.extraTargets.append(
          (
            "catalog growth (100,000 files)",
            "\(formatBytes(median(growth))) (\(formatBytes(growth.min() ?? 0))–\(formatBytes(growth.max() ?? 0)))",
            "≤ 1 MB",
            median(growth) <= 1e6
          ))
      }
      result.append(incremental)
      if workload == .atomicSaves {
        noChange.rows = [
          "appbox", "appbox --compress \(alternative)", "GNU tar level 1", "restic",
          "stat walk (find -printf)",
        ].map { ($0, same[$0] ?? []) }
        noChange.targets = [("appbox", "stat walk (find -printf)", 1.5)]
        noChanges.append(noChange)
      }
    }
    return result + noChanges
  }

  func restore(_ home: String, _ state: FileSystemState) throws -> Scenario {
    let base = work + "/chain-atomicSaves"
    var scenario = Scenario(
      name: "restore of the latest snapshot into an empty home, \(state.rawValue)",
      reference: "tar -x + syncfs")
    scenario.notes = scenarioNotes(state)
    scenario.notes.append(
      "appbox verifies every byte's SHA-256 and makes the restored tree durable (syncfs) before swapping it in; as root it also gives every restored entry to the app's uid (tar -x as root sets the archive's owners); the `--compress \(alternative)` row restores the latest snapshot of the same chain in the other compression"
    )
    var rows: [String: [Sample]] = [:]
    // The worst run is held to a bound of its own, over at least five runs.
    let restoreRuns = max(runs, 5)
    for run in 0..<restoreRuns {
      // Into empty targets: appbox into a new device root where the app was just installed
      // (its home is empty), the peers into new directories. On the fresh file system nothing
      // is deleted; on the churned one the previous run's targets and a copy of the data are
      // deleted first.
      let target = "\(work)/restore/\(state.rawValue)-\(run)"
      if state == .churned {
        try shell.run("rm -rf \(work)/restore/*")
        try makeChurnTree(home)
      }
      try shell.run(
        "mkdir -p \(target)/tar \(target)/tar2 \(target)/restic && \(appbox) --quiet --root \(target)/device install \(work)/Bench.app && \(appbox) --quiet --root \(target)/altdevice install \(work)/Bench.app"
      )
      if state == .churned { try churn() }
      var steps: [(String, String)] = [
        (
          "appbox",
          "\(appbox) --quiet --root \(target)/device restore \(app) --snapshot latest --repo \(base)/appbox"
        ),
        (
          "appbox --compress \(alternative)",
          "\(appbox) --quiet --root \(target)/altdevice restore \(app) --snapshot latest --repo \(base)/appbox-alt"
        ),
      ]
      steps += [
        ("tar -x (level 0)", "tar -xf \(base)/l0.tar -C \(target)/tar"),
        ("tar -x + syncfs", "tar -xf \(base)/l0.tar -C \(target)/tar2 && sync -f \(target)/tar2"),
        ("restic restore", "restic -q -r \(base)/restic restore latest --target \(target)/restic"),
      ]
      for (tool, command) in rotated(steps, run: run) {
        rows[tool, default: []].append(try shell.time(command, memory: tool == "appbox", disk: work))
      }
      progress("restore (\(state.rawValue)) run \(run + 1)/\(restoreRuns)")
    }
    scenario.rows = [
      "appbox", "appbox --compress \(alternative)", "tar -x (level 0)", "tar -x + syncfs", "restic restore",
    ]
    .map { ($0, rows[$0] ?? []) }
    scenario.targets = [("appbox", "tar -x + syncfs", 1.2)]
    scenario.extra = diskTable(
      scenario, tools: ["appbox", "appbox --compress \(alternative)", "tar -x + syncfs"])
    let ratios = scenario.ratios("appbox", "tar -x + syncfs")
    if let worst = ratios.max() {
      scenario.extraTargets.append(
        (
          "appbox / tar -x + syncfs, the worst run",
          String(format: "%.2fx (of %d runs)", worst, ratios.count),
          "≤ 1.50x", worst <= 1.5
        ))
    }
    return scenario
  }

  /// Run by run, each tool's time beside what the disk wrote while it ran, the disk's
  /// service time (write milliseconds per MB) and what it discarded meanwhile (with the
  /// milliseconds discarding), then the command's CPU time and the machine's stalls (`Stalls`:
  /// I/O stall, waiting for a CPU, time stolen by the host, in ms): a slow run of every tool at
  /// once with a high service time is the shared disk, not the tool; a slow run with many
  /// discards waited for the blocks a deletion just before it freed; a slow run at its usual
  /// CPU time and service time waited on something the other columns name, or none does.
  func diskTable(_ scenario: Scenario, tools: [String]) -> [String] {
    guard let count = tools.compactMap({ scenario.samples($0)?.count }).min(), count > 0 else { return [] }
    var lines = [
      "| run | "
        + tools.map {
          "\($0): time, written, disk ms/MB, discarded (ms); CPU user + system, I/O stall, CPU wait, steal"
        }
        .joined(
          separator: " | ")
        + " |",
      "|---|" + tools.map { _ in "---|" }.joined(),
    ]
    for run in 0..<count {
      let cells = tools.map { tool -> String in
        let sample = scenario.samples(tool)![run]
        guard let disk = sample.disk else { return format(sample.seconds) }
        var cell =
          "\(format(sample.seconds)), \(formatBytes(Double(disk.bytesWritten))), "
          + "\(String(format: "%.1f", disk.millisPerMB)), \(formatBytes(Double(disk.bytesDiscarded))) (\(disk.discardMillis))"
        if let stalls = sample.stalls {
          cell +=
            "; \(format(stalls.userSeconds)) + \(format(stalls.systemSeconds)), \(stalls.ioStallMicros / 1000), \(stalls.cpuWaitMicros / 1000), \(stalls.stealMillis)"
        }
        return cell
      }
      lines.append("| \(run + 1) | " + cells.joined(separator: " | ") + " |")
    }
    return lines
  }

  /// `appbox update` to a new bundle version vs copying the data with `cp -a`; the
  /// migration step, the time until the report and the survey come from the update's JSON
  /// report. Each run then updates once more with 100,000 files in tmp.
  func update(_ home: inout String, _ state: FileSystemState) throws -> Scenario {
    if state == .churned { try shell.run("rm -rf \(work)/copies/*") }
    var scenario = Scenario(name: "update migration, \(state.rawValue)", reference: "cp -a Documents Library")
    scenario.notes = scenarioNotes(state)
    scenario.notes.append(
      "\"until the report\" is the update's own total (the JSON report's durations.total): the old home is deleted after it, so \"whole process\" includes that deletion; the survey measures what moved and was dropped and looks for stale paths (bounded: at most 5,000 files read)"
    )
    var rows: [String: [Sample]] = [:]
    let offset = state == .fresh ? 0 : runs * 2
    func update(_ version: Int, tmpFiles: Int, suffix: String) throws {
      let bundle = "\(work)/v\(version)/Bench.app"
      try shell.run(
        "rm -rf \(work)/v\(version) && mkdir -p \(work)/v\(version) && cp -a \(work)/Bench.app \(bundle) && rm -rf \(bundle)/_CodeSignature && sed -i 's|<string>1</string>|<string>\(version)</string>|' \(bundle)/Info.plist"
      )
      if tmpFiles > 0 { try makeFiles(try self.home() + "/tmp/many", count: tmpFiles) }
      usleep(200_000)
      sync()
      let start = DispatchTime.now().uptimeNanoseconds
      let output = try shell.run("\(ab) --json update \(app) \(bundle)")
      let total = Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
      rows["appbox update (whole process)\(suffix)", default: []].append(Sample(seconds: total))
      if let data = output.data(using: .utf8),
        let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any],
        let durations = object["durations"] as? [String: Any]
      {
        for (key, label) in [
          ("total", "appbox update (until the report)"), ("migration", "appbox migration step"),
          ("survey", "appbox survey"),
        ] {
          if let value = durations[key] as? Double {
            rows[label + suffix, default: []].append(Sample(seconds: value))
          }
        }
      }
    }
    for run in 0..<runs {
      try prepare(state, home: home)
      try shell.run("mkdir -p \(work)/copies/\(state.rawValue)-\(run)/copy")
      let copy = "\(work)/copies/\(state.rawValue)-\(run)"
      rows["cp -a Documents Library", default: []].append(
        try shell.time("cp -a \(home)/Documents \(home)/Library \(copy)/copy/"))
      rows["mv of a directory", default: []].append(try shell.time("mv \(copy)/copy \(copy)/moved"))
      try update(offset + run * 2 + 2, tmpFiles: 0, suffix: "")
      try update(offset + run * 2 + 3, tmpFiles: 100_000, suffix: ", 100,000 files in tmp")
      home = try self.home()
      progress("update (\(state.rawValue)) run \(run + 1)/\(runs)")
    }
    if state == .churned { try shell.run("rm -rf \(work)/copies/*") }
    let many = ", 100,000 files in tmp"
    scenario.rows = [
      "appbox update (whole process)", "appbox update (until the report)", "appbox migration step",
      "appbox survey",
      "cp -a Documents Library", "mv of a directory", "appbox update (whole process)" + many,
      "appbox update (until the report)" + many, "appbox migration step" + many, "appbox survey" + many,
    ]
    .compactMap { tool in rows[tool].map { (tool, $0) } }
    scenario.targets = [("appbox update (whole process)", "cp -a Documents Library", size.updateBound)]
    scenario.absoluteTargets = [("appbox migration step", 0.05), ("appbox migration step" + many, 0.05)]
    return scenario
  }

  /// Creates `count` small files under `directory` (1,000 per subdirectory).
  func makeFiles(_ directory: String, count: Int) throws {
    let payload = [UInt8](repeating: 0x78, count: 100)
    for index in 0..<count {
      let folder = directory + String(format: "/d%03d", index / 1000)
      if index % 1000 == 0 { try makeDirectories(folder) }
      let fd = open(folder + String(format: "/f%06d", index), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
      guard fd >= 0 else { throw GeneratorError("cannot create a file in \(folder)") }
      _ = payload.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
      close(fd)
    }
  }
}
