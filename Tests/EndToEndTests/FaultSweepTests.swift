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
        + (1...max(1, counts[.unlink] ?? 0)).map { FaultPoint(.unlink, $0, .kill) }
    }
    #expect(problems == [])
  }
}
