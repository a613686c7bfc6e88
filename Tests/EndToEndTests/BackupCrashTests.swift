import AppboxBackup
import AppboxRepository
import AppboxTestSupport
import Foundation
import Glibc
import Testing

/// Starts the built `appbox` without waiting for it, with `blocking` signals blocked; output
/// is discarded.
func startAppbox(
  _ arguments: [String], root: String, environment extra: [String: String] = [:], blocking: [Int32] = []
) throws -> StartedProcess {
  var environment = ProcessInfo.processInfo.environment
  environment.removeValue(forKey: "APPBOX_ROOT")
  for (key, value) in extra { environment[key] = value }
  return try startProcess(
    productsDirectory + "/appbox", ["--root", root] + arguments, environment: environment, blocking: blocking)
}

extension Device {
  /// The archive files the catalog knows (anything else in archives/ is debris).
  func cataloguedArchives() throws -> [String] {
    try Catalog(path: repository + "/catalog.db", readOnly: true).archives().map(\.name).sorted()
  }

  /// Runs a mutating command that changes nothing, so recovery runs.
  func recover() throws {
    let result = try run("device", "init")
    #expect(result.status == 0, "\(result.err)")
  }
}

struct BackupCrashTests {
  @Test(arguments: ["backup.archive-synced", "backup.archive-renamed", "backup.committed"])
  func aKilledBackupLeavesEarlierSnapshotsRestorableAndNoDebris(_ point: String) throws {
    let device = Device()
    try device.install("Notes-1.0/Notes.app")
    try writeSampleData(home: device.home)
    let expected = try captureHomeData(device.home)
    let first = try #require(try device.backup()["snapshot"] as? String)
    try Data("after the first".utf8).write(to: URL(fileURLWithPath: device.home + "/Documents/a.txt"))

    let killed = try device.run("backup", "com.example.notes", environment: ["APPBOX_CRASH_AT": point])
    #expect(killed.status == 128 + SIGKILL)
    #expect(try device.run("check").status == 0)
    #expect(try device.run("restore", "com.example.notes", "--snapshot", first).status == 0)
    #expect(differences(expected, try captureHomeData(device.home)) == [])

    _ = try device.backup()
    #expect(device.archiveNames() == (try device.cataloguedArchives()))
    #expect(try device.run("check", "--read-data").status == 0)
  }

  @Test func randomKillsDuringBackupNeverBreakTheRepository() throws {
    let device = Device()
    try device.install("Notes-1.0/Notes.app")
    try writeSampleData(home: device.home)
    _ = try device.backup()
    var generator = SystemRandomNumberGenerator()
    for round in 0..<15 {
      try Data("round \(round)".utf8).write(to: URL(fileURLWithPath: device.home + "/Documents/round.txt"))
      let process = try startAppbox(["backup", "com.example.notes"], root: device.root)
      usleep(UInt32.random(in: 0...60_000, using: &generator))
      kill(process.processIdentifier, SIGKILL)
      process.waitUntilExit()
      let check = try device.run("check")
      #expect(check.status == 0, "round \(round): \(check.out) \(check.err)")
    }
    let expected = try captureHomeData(device.home)
    _ = try device.backup()
    #expect(device.archiveNames() == (try device.cataloguedArchives()))
    try FileManager.default.removeItem(atPath: device.home + "/Documents/round.txt")
    #expect(try device.run("restore", "com.example.notes").status == 0)
    #expect(differences(expected, try captureHomeData(device.home)) == [])
  }

  /// Before the swap's journal is durable a killed restore leaves the old data; after it,
  /// the next command finishes the restore.
  @Test(arguments: [
    ("restore.staged", false), ("swap.journaled", true), ("swap.carried", true), ("swap.exchanged", true),
    ("swap.synced", true),
    ("restore.swapped", true),
  ])
  func aKilledRestoreIsFinishedOrRolledBackByTheNextCommand(_ point: String, finished: Bool) throws {
    let device = Device()
    try device.install("Notes-1.0/Notes.app")
    try writeSampleData(home: device.home)
    let snapshotData = try captureHomeData(device.home)
    _ = try device.backup()
    try Data("live".utf8).write(to: URL(fileURLWithPath: device.home + "/Documents/a.txt"))
    try FileManager.default.removeItem(atPath: device.home + "/Documents/Nested")
    let liveData = try captureHomeData(device.home)

    let killed = try device.run("restore", "com.example.notes", environment: ["APPBOX_CRASH_AT": point])
    #expect(killed.status == 128 + SIGKILL)
    try device.recover()
    #expect(differences(finished ? snapshotData : liveData, try captureHomeData(device.home)) == [])
    #expect(device.applicationRootEntries().count == 1)
    #expect(try FileManager.default.contentsOfDirectory(atPath: device.root + "/.appbox/journal").isEmpty)
    #expect(try device.run("inspect", "com.example.notes").out.contains("seal          valid"))
  }

  @Test func randomKillsDuringRestoreLeaveEitherTheOldOrTheNewData() throws {
    let device = Device()
    try device.install("Notes-1.0/Notes.app")
    try writeSampleData(home: device.home)
    let first = try captureHomeData(device.home)
    let a = try #require(try device.backup()["snapshot"] as? String)
    try Data("second".utf8).write(to: URL(fileURLWithPath: device.home + "/Documents/a.txt"))
    let second = try captureHomeData(device.home)
    let b = try #require(try device.backup()["snapshot"] as? String)
    var generator = SystemRandomNumberGenerator()
    for round in 0..<12 {
      let (target, expected) = round % 2 == 0 ? (a, first) : (b, second)
      let current = try captureHomeData(device.home)
      let process = try startAppbox(
        ["restore", "com.example.notes", "--snapshot", target], root: device.root)
      usleep(UInt32.random(in: 0...40_000, using: &generator))
      kill(process.processIdentifier, SIGKILL)
      process.waitUntilExit()
      try device.recover()
      let now = try captureHomeData(device.home)
      #expect(differences(now, expected).isEmpty || differences(now, current).isEmpty, "round \(round)")
      #expect(device.applicationRootEntries().count == 1)
    }
    #expect(try device.run("inspect", "com.example.notes").out.contains("seal          valid"))
  }

  /// Large files edited in place are stored as chunks (a database's indexed when first read, a
  /// media file's compared with the whole copy an earlier archive holds); a backup killed at
  /// each step, or at random moments, and restores killed at random moments, leave a
  /// repository that checks clean and restores every snapshot byte for byte.
  @Test func killsAroundChunkedFilesNeverBreakTheRepository() throws {
    let device = Device()
    try device.install("Notes-1.0/Notes.app")
    try writeSampleData(home: device.home)
    let path = device.home + "/Documents/store.db"
    var random = SeededRandom(seed: 5)
    var content = [UInt8](repeating: 0, count: 5 << 20)
    content.withUnsafeMutableBytes { random.fill($0) }
    try Data(content).write(to: URL(fileURLWithPath: path))
    // A media file too, stored whole: its first edit in place (under the kills below, until a
    // backup commits it) is compared with that copy and recorded inside the first archive.
    let clip = device.home + "/Documents/clip.mov"
    var clipContent = [UInt8](repeating: 0, count: 3 << 20)
    clipContent.withUnsafeMutableBytes { random.fill($0) }
    try Data(clipContent).write(to: URL(fileURLWithPath: clip))
    let first = try #require(try device.backup()["snapshot"] as? String)
    let firstData = try captureHomeData(device.home)
    var generator = SystemRandomNumberGenerator()
    for round in 0..<8 {
      let fd = open(path, O_WRONLY)
      var page = [UInt8](repeating: UInt8(round), count: 4096)
      page.withUnsafeMutableBytes { random.fill($0) }
      _ = page.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, off_t(random.below(5 << 20 - 4096))) }
      close(fd)
      let clipFD = open(clip, O_WRONLY)
      _ = page.withUnsafeBytes {
        pwrite(clipFD, $0.baseAddress, $0.count, off_t(random.below(3 << 20 - 4096)))
      }
      close(clipFD)
      if round < 3 {
        let point = ["backup.archive-synced", "backup.archive-renamed", "backup.committed"][round]
        let killed = try device.run("backup", "com.example.notes", environment: ["APPBOX_CRASH_AT": point])
        #expect(killed.status == 128 + SIGKILL)
      } else {
        let process = try startAppbox(["backup", "com.example.notes"], root: device.root)
        usleep(UInt32.random(in: 0...80_000, using: &generator))
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
      }
      let check = try device.run("check", "--read-data")
      #expect(check.status == 0, "round \(round): \(check.out) \(check.err)")
    }
    let lastData = try captureHomeData(device.home)
    _ = try device.backup()
    #expect(device.archiveNames() == (try device.cataloguedArchives()))
    for round in 0..<6 {
      let process = try startAppbox(
        ["restore", "com.example.notes", "--snapshot", round % 2 == 0 ? first : "latest"], root: device.root)
      usleep(UInt32.random(in: 0...60_000, using: &generator))
      kill(process.processIdentifier, SIGKILL)
      process.waitUntilExit()
      try device.recover()
      let now = try captureHomeData(device.home)
      #expect(differences(now, firstData).isEmpty || differences(now, lastData).isEmpty, "round \(round)")
    }
    #expect(try device.run("restore", "com.example.notes", "--snapshot", first).status == 0)
    #expect(differences(firstData, try captureHomeData(device.home)) == [])
    #expect(try device.run("restore", "com.example.notes").status == 0)
    #expect(differences(lastData, try captureHomeData(device.home)) == [])
  }
}
