import AppboxCore
import AppboxTestSupport
import Foundation
import Glibc
import Testing

extension FaultWorkspace {
  /// Installs a fixture bundle.
  func install(_ fixture: String) throws {
    let result = try run("install", fixturePath("bundles/" + fixture))
    guard result.status == 0 else {
      throw SystemError("install: \(result.err)", path: fixture, errno: .ioError)
    }
  }

  /// Writes `size` seeded random bytes to `relative` in the home.
  func writeRandom(_ relative: String, size: Int, seed: UInt64) throws {
    var random = SeededRandom(seed: seed)
    var content = [UInt8](repeating: 0, count: size)
    content.withUnsafeMutableBytes { random.fill($0) }
    try Data(content).write(to: URL(fileURLWithPath: try home()! + "/" + relative))
  }

  /// Rewrites one 4 KiB page of `relative` in place (a database's kind of change).
  func editInPlace(_ relative: String, seed: UInt64) throws {
    let path = try home()! + "/" + relative
    var random = SeededRandom(seed: seed)
    let fd = open(path, O_WRONLY)
    guard fd >= 0 else { throw SystemError("open", path: path) }
    defer { close(fd) }
    var st = stat()
    fstat(fd, &st)
    var page = [UInt8](repeating: 0, count: 4096)
    page.withUnsafeMutableBytes { random.fill($0) }
    let offset = off_t(random.below(Int(st.st_size) - 4096))
    _ = page.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, offset) }
  }

  /// Bytes of the files in `archives/` of a local repository.
  func archiveBytes() -> Int64 {
    let directory = repository + "/archives"
    return ((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []).reduce(0) {
      total, name in
      var st = stat()
      return total + (stat(directory + "/" + name, &st) == 0 ? Int64(st.st_size) : 0)
    }
  }
}

/// The starting states of the sweeps.
enum FaultScenarios {
  /// The sample home (every kind of entry), a database indexed as chunks and a media file
  /// stored whole (lazy chunking), backed up once.
  static func sampleDevice() throws -> FaultWorkspace {
    let workspace = FaultWorkspace()
    try workspace.install("Notes-1.0/Notes.app")
    try writeSampleData(home: try workspace.home()!)
    try workspace.writeRandom("Documents/store.db", size: 3 << 20, seed: 1)
    try workspace.writeRandom("Documents/clip.mov", size: 3 << 20, seed: 3)
    try workspace.backup()
    return workspace
  }

  /// Changes the sample home so that it differs from its snapshot.
  static func change(_ workspace: FaultWorkspace, seed: UInt64) throws {
    let home = try workspace.home()!
    if FileManager.default.fileExists(atPath: home + "/Documents/store.db") {
      try workspace.editInPlace("Documents/store.db", seed: seed)
    }
    // The media file's first edit in place: a backup compares the chunks it lacks with the
    // earlier archive's copy (foreign chunks), at each of the sweep's faults too, since the
    // sweep resets the workspace without changing inodes.
    if FileManager.default.fileExists(atPath: home + "/Documents/clip.mov") {
      try workspace.editInPlace("Documents/clip.mov", seed: seed + 100)
    }
    try Data("changed \(seed)".utf8).write(to: URL(fileURLWithPath: home + "/Documents/a.txt"))
    try FileTree.remove(atPath: home + "/Documents/Nested")
    try Data("new".utf8).write(to: URL(fileURLWithPath: home + "/Library/new-\(seed).txt"))
  }

  /// An encrypted repository (`work/enc`, password in `work/pw`) with one snapshot.
  static func encryptedRepository() throws -> FaultWorkspace {
    let workspace = FaultWorkspace()
    try workspace.install("Notes-1.0/Notes.app")
    try writeSampleData(home: try workspace.home()!)
    try Data("old password\n".utf8).write(to: URL(fileURLWithPath: workspace.path("pw")))
    chmod(workspace.path("pw"), 0o600)
    workspace.repository = workspace.path("enc")
    workspace.environment["APPBOX_PASSWORD_FILE"] = workspace.path("pw")
    let created = try workspace.run("repo", "init", "--repo", workspace.repository, "--encrypt")
    guard created.status == 0 else {
      throw SystemError("repo init: \(created.err)", path: "", errno: .ioError)
    }
    try workspace.backup(["--repo", workspace.repository])
    return workspace
  }
}

/// Faults at durable system calls (SIGKILL, EIO, ENOSPC through strace) in every command that
/// writes a repository or a home; see FaultSweep.swift for what is checked after each.
@Suite(.enabled(if: Strace.isAvailable, "strace is not installed (make deps installs it)"))
struct FaultSweepTests {
  /// A local plain repository with a large file stored as chunks, three snapshots.
  static func chunkedRepository() throws -> FaultWorkspace {
    let workspace = FaultWorkspace()
    try workspace.install("Notes-1.0/Notes.app")
    try writeSampleData(home: try workspace.home()!)
    try workspace.writeRandom("Documents/store.db", size: 3 << 20, seed: 1)
    try workspace.backup()
    for round in 0..<2 {
      try workspace.editInPlace("Documents/store.db", seed: UInt64(10 + round))
      try workspace.backup()
    }
    return workspace
  }

  /// A forget killed at any of its durable calls while it drops the archive that recorded
  /// chunks inside an earlier archive it keeps (a media file's first edit in place: its
  /// repack archive records them again) leaves every kept snapshot restorable, from the
  /// catalog as left and from one rebuilt from the manifests.
  @Test func aKilledForgetKeepsChunksRecordedInsideAnArchiveThatStays() throws {
    let workspace = FaultWorkspace()
    try workspace.install("Notes-1.0/Notes.app")
    try writeSampleData(home: try workspace.home()!)
    try workspace.writeRandom("Documents/clip.mov", size: 3 << 20, seed: 2)
    try workspace.backup(["--tag", "first"])
    for round in 0..<2 {
      try workspace.editInPlace("Documents/clip.mov", seed: UInt64(20 + round))
      try workspace.backup()
    }
    var sweep = FaultSweep(
      "forget", workspace: workspace,
      command: ["forget", workspace.app, "--keep-last", "1", "--keep-tag", "first"], expectation: .unchanged)
    // A copy: a closure that captured `sweep`, which holds the closure, kept the workspace
    // (and its directory in /tmp) alive past the test.
    let verifier = sweep
    sweep.finally = { workspace, _ in
      let rebuilt = try workspace.run("check", "--rebuild-catalog", "--read-data")
      guard rebuilt.status == 0 else { return ["check --rebuild-catalog: \(rebuilt.status) \(rebuilt.err)"] }
      return try verifier.verifyRepository()
    }
    let problems = try sweep.run { counts in
      (1...max(1, counts[.fsync] ?? 0)).map { FaultPoint(.fsync, $0, .kill) }
        + (1...max(1, counts[.rename] ?? 0)).map { FaultPoint(.rename, $0, .kill) }
    }
    #expect(problems == [])
  }

  /// Issue 23.1: a forget killed at any of its durable calls leaves every kept snapshot
  /// restorable (the next backup's too), and the next forget reclaims the space.
  @Test func aKilledForgetNeverMakesKeptSnapshotsUnrestorable() throws {
    let workspace = try Self.chunkedRepository()
    var sweep = FaultSweep(
      "forget", workspace: workspace, command: ["forget", workspace.app, "--keep-last", "1"],
      expectation: .unchanged)
    sweep.next = { workspace in
      try workspace.editInPlace("Documents/store.db", seed: 99)
      try workspace.backup()
      return []
    }
    sweep.finally = { workspace, _ in
      // The next forget reclaims what the killed one left.
      let forget = try workspace.run("forget", workspace.app, "--keep-last", "1")
      guard forget.status == 0 else { return ["the next forget: \(forget.status) \(forget.err)"] }
      let live = try captureHomeData(try workspace.home()!).values.reduce(Int64(0)) { $0 + $1.size }
      let stored = workspace.archiveBytes()
      return stored <= live + live / 2 + (256 << 10)
        ? [] : ["after the next forget, \(stored) bytes of archives hold \(live) bytes of live data"]
    }
    let problems = try sweep.run { counts in
      (1...max(1, counts[.fsync] ?? 0)).map { FaultPoint(.fsync, $0, .kill) }
    }
    #expect(problems == [])
  }
}

/// Every writing command under the sweep. The bounded form (a few faults each) runs in
/// `make test`; `make test-faults` (APPBOX_FAULTS_FULL=1) runs every fault at every call.
@Suite(.enabled(if: Strace.isAvailable, "strace is not installed (make deps installs it)"))
struct CommandFaultTests {
  /// A few faults (the budget of `make test`): a kill at the middle fsync and at the middle
  /// rename, an EIO at the middle fdatasync (SQLite's), an ENOSPC at the last fsync.
  static func representative(_ counts: [DurableSyscall: Int]) -> [FaultPoint] {
    var points: [FaultPoint] = []
    func middle(_ syscall: DurableSyscall) -> Int? { counts[syscall].flatMap { $0 > 0 ? ($0 + 1) / 2 : nil } }
    if let n = middle(.fsync) { points.append(FaultPoint(.fsync, n, .kill)) }
    if let n = middle(.rename) { points.append(FaultPoint(.rename, n, .kill)) }
    if let n = middle(.fdatasync) { points.append(FaultPoint(.fdatasync, n, .error("EIO"))) }
    if let n = counts[.fsync], n > 0 { points.append(FaultPoint(.fsync, n, .error("ENOSPC"))) }
    return points
  }

  static func backupNext(_ workspace: FaultWorkspace) throws -> [String] {
    try workspace.backup(["--repo", workspace.repository])
    return []
  }

  @Test func backup() throws {
    let workspace = try FaultScenarios.sampleDevice()
    try FaultScenarios.change(workspace, seed: 2)
    var sweep = FaultSweep(
      "backup", workspace: workspace, command: ["backup", workspace.app], expectation: .unchanged)
    sweep.next = Self.backupNext
    sweep.keepsHome = true  // so the media file's edit in place stays one (its inode)
    let problems = try sweep.run(bounded: Self.representative)
    #expect(problems == [])
  }

  @Test func encryptedBackup() throws {
    let workspace = try FaultScenarios.encryptedRepository()
    try FaultScenarios.change(workspace, seed: 2)
    var sweep = FaultSweep(
      "encrypted backup", workspace: workspace,
      command: ["backup", workspace.app, "--repo", workspace.repository],
      expectation: .unchanged)
    sweep.next = Self.backupNext
    let problems = try sweep.run(bounded: Self.representative)
    #expect(problems == [])
  }

  @Test func encryptedForget() throws {
    let workspace = try FaultScenarios.encryptedRepository()
    for seed in [21, 22] as [UInt64] {
      try FaultScenarios.change(workspace, seed: seed)
      try workspace.backup(["--repo", workspace.repository])
    }
    var sweep = FaultSweep(
      "encrypted forget", workspace: workspace,
      command: ["forget", workspace.app, "--keep-last", "1", "--repo", workspace.repository],
      expectation: .unchanged)
    sweep.next = Self.backupNext
    let problems = try sweep.run(bounded: Self.representative)
    #expect(problems == [])
  }

  @Test func restore() throws {
    let workspace = try FaultScenarios.sampleDevice()
    let first = workspace.ledger.ids[0]
    try FaultScenarios.change(workspace, seed: 3)
    let sweep = FaultSweep(
      "restore", workspace: workspace, command: ["restore", workspace.app, "--snapshot", first],
      expectation: .allOrNothing)
    let problems = try sweep.run(bounded: Self.representative)
    #expect(problems == [])
  }

  @Test func importArchive() throws {
    let workspace = try FaultScenarios.sampleDevice()
    try FaultScenarios.change(workspace, seed: 4)
    let tar = workspace.path("export.tar")
    #expect(try workspace.run("export", workspace.app, tar).status == 0)
    try FaultScenarios.change(workspace, seed: 5)
    let sweep = FaultSweep(
      "import", workspace: workspace, command: ["import", workspace.app, tar], expectation: .allOrNothing)
    let problems = try sweep.run(bounded: Self.representative)
    #expect(problems == [])
  }

  @Test func update() throws {
    let workspace = try FaultScenarios.sampleDevice()
    try FaultScenarios.change(workspace, seed: 6)
    let sweep = FaultSweep(
      "update", workspace: workspace,
      command: ["update", workspace.app, fixturePath("bundles/Notes-2.0/Notes.app")],
      expectation: .allOrNothing)
    let problems = try sweep.run(bounded: Self.representative)
    #expect(problems == [])
  }

  /// Issue 29: a reset faulted at a durable call empties the data or leaves it as it was.
  @Test func reset() throws {
    let workspace = try FaultScenarios.sampleDevice()
    let sweep = FaultSweep(
      "reset", workspace: workspace, command: ["reset", workspace.app], expectation: .allOrNothing)
    let problems = try sweep.run(bounded: Self.representative)
    #expect(problems == [])
  }

  /// Issue 29: an offload faulted at a durable call is done or not, the data untouched.
  @Test func offload() throws {
    let workspace = try FaultScenarios.sampleDevice()
    var sweep = FaultSweep(
      "offload", workspace: workspace, command: ["offload", workspace.app], expectation: .unchanged)
    sweep.finally = { workspace, _ in
      // Offloaded or not, installing the bundle again gives a launchable app.
      let install = try workspace.run("install", fixturePath("bundles/Notes-1.0/Notes.app"))
      let list = try workspace.run("--json", "list")
      let offloaded = list.out.contains("\"offloaded\"")
      return install.status == 0 || (install.status == 73 && !offloaded)
        ? [] : ["install after it: \(install.status) \(install.err) (\(list.out))"]
    }
    let problems = try sweep.run(bounded: Self.representative)
    #expect(problems == [])
  }

  @Test func revert() throws {
    let workspace = try FaultScenarios.sampleDevice()
    let before = try workspace.state().data
    let update = try workspace.run("update", workspace.app, fixturePath("bundles/Notes-2.0/Notes.app"))
    #expect(update.status == 0, "\(update.err)")
    // The update's pre-update snapshot holds the data as it was.
    let listing = try workspace.run("--json", "snapshots")
    for snapshot in (try JSONSerialization.jsonObject(with: Data(listing.stdout)) as? [[String: Any]]) ?? [] {
      if let id = snapshot["snapshot"] as? String, workspace.ledger.data(of: id) == nil {
        workspace.ledger.record(id, before)
      }
    }
    try FaultScenarios.change(workspace, seed: 7)
    let sweep = FaultSweep(
      "revert", workspace: workspace, command: ["revert", workspace.app], expectation: .allOrNothing)
    let problems = try sweep.run(bounded: Self.representative)
    #expect(problems == [])
  }

  @Test func repositoryPassword() throws {
    let workspace = try FaultScenarios.encryptedRepository()
    try Data("new password\n".utf8).write(to: URL(fileURLWithPath: workspace.path("pw2")))
    chmod(workspace.path("pw2"), 0o600)
    workspace.verificationEnvironments = [[:], ["APPBOX_PASSWORD_FILE": workspace.path("pw2")]]
    var sweep = FaultSweep(
      "repo passwd", workspace: workspace,
      command: [
        "repo", "passwd", "--repo", workspace.repository, "--new-password-file", workspace.path("pw2"),
      ],
      expectation: .unchanged)
    sweep.next = { _ in [] }
    let problems = try sweep.run(bounded: Self.representative)
    #expect(problems == [])
  }

  @Test func layoutUpgrade() throws {
    let workspace = try FaultScenarios.sampleDevice()
    try FaultScenarios.change(workspace, seed: 8)
    try workspace.backup()
    for name in ["config", "manifests", "snapshots"] {
      try FileTree.remove(atPath: workspace.repository + "/" + name)
    }
    try FaultScenarios.change(workspace, seed: 9)
    var sweep = FaultSweep(
      "layout upgrade", workspace: workspace, command: ["backup", workspace.app], expectation: .unchanged)
    sweep.next = Self.backupNext
    let problems = try sweep.run(bounded: Self.representative)
    #expect(problems == [])
  }
}
