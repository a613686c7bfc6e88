import AppboxCore
import AppboxTestSupport
import Foundation
import Glibc
import Testing

/// Issue 23: errors that vanished, torn files, exact reverts, failed restores.
struct DataSafetyTests {
  // MARK: 23.3: a restore that reports failure has not replaced the home

  /// EIO at every fsync and every rename of a restore (the swap's among them): each run
  /// either fails and leaves the home as it was, or succeeds with the snapshot in place.
  @Test(.enabled(if: Strace.isAvailable)) func aRestoreFailingAtAnySyncOrRenameLeavesTheHomeAsItWas() throws {
    let workspace = try FaultScenarios.sampleDevice()
    let first = workspace.ledger.ids[0]
    try FaultScenarios.change(workspace, seed: 3)
    let sweep = FaultSweep(
      "restore", workspace: workspace, command: ["restore", workspace.app, "--snapshot", first],
      expectation: .allOrNothing)
    let problems = try sweep.run { counts in
      [DurableSyscall.fsync, .rename].flatMap { syscall in
        (1...max(1, counts[syscall] ?? 0)).map { FaultPoint(syscall, $0, .error("EIO")) }
      }
    }
    #expect(problems == [])
  }

  /// The same from an S3 repository (the swap is the device's; the repository is only read).
  @Test(.enabled(if: Strace.isAvailable)) func aRestoreFromS3FailingAtAnySyncOrRenameLeavesTheHomeAsItWas()
    throws
  {
    let cluster = try SwiftCluster.shared()
    let workspace = FaultWorkspace()
    workspace.environment = cluster.environment
    workspace.repository = "s3://\(SwiftCluster.uniqueBucket("swap"))/repo"
    try workspace.install("Notes-1.0/Notes.app")
    try writeSampleData(home: try workspace.home()!)
    #expect(try workspace.run("repo", "init", "--repo", workspace.repository).status == 0)
    let first = try workspace.backup(["--repo", workspace.repository])
    try FaultScenarios.change(workspace, seed: 3)
    let sweep = FaultSweep(
      "restore from S3", workspace: workspace,
      command: ["restore", workspace.app, "--snapshot", first, "--repo", workspace.repository],
      expectation: .allOrNothing)
    let problems = try sweep.run { counts in
      [DurableSyscall.fsync, .rename].flatMap { syscall in
        (1...max(1, counts[syscall] ?? 0)).map { FaultPoint(syscall, $0, .error("EIO")) }
      }
    }
    #expect(problems == [])
  }

  // MARK: 23.5: errors that vanish

  @Test func aBackupWhoseOutputCannotBeWrittenFails() throws {
    let device = Device()
    try device.install("Notes-1.0/Notes.app")
    try writeSampleData(home: device.home)
    let full = open("/dev/full", O_WRONLY | O_CLOEXEC)
    defer { close(full) }
    let errors = device.dir.url("err")
    let err = open(errors, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
    var environment = ProcessInfo.processInfo.environment
    environment.removeValue(forKey: "APPBOX_ROOT")
    let child = try spawnProcess(
      productsDirectory + "/appbox", ["--root", device.root, "--json", "backup", "com.example.notes"],
      environment: environment, stdout: full, stderr: err)
    close(err)
    let status = child.wait()
    let lines = String(decoding: FileManager.default.contents(atPath: errors) ?? Data(), as: UTF8.self)
      .split(separator: "\n")
    #expect(status == 74)
    #expect(lines == ["Error: Unable to write standard output: no space left on device"])
  }

  /// The last fdatasync of a backup is the catalog's checkpoint as it closes.
  @Test(.enabled(if: Strace.isAvailable)) func anIOErrorInTheCheckpointAsTheCatalogClosesFails() throws {
    let device = Device()
    try device.install("Notes-1.0/Notes.app")
    try writeSampleData(home: device.home)
    _ = try device.backup()
    try Data("changed".utf8).write(to: URL(fileURLWithPath: device.home + "/Documents/a.txt"))
    let line = ["--root", device.root, "backup", "com.example.notes"]
    var environment = ProcessInfo.processInfo.environment
    environment.removeValue(forKey: "APPBOX_ROOT")
    let (counted, counts) = try Strace.count(productsDirectory + "/appbox", line, environment: environment)
    #expect(counted.status == 0)
    let last = try #require(counts[.fdatasync])
    try Data("changed again".utf8).write(to: URL(fileURLWithPath: device.home + "/Documents/a.txt"))
    let result = try Strace.run(
      productsDirectory + "/appbox", line, injecting: FaultPoint(.fdatasync, last, .error("EIO")),
      environment: environment)
    #expect(result.status == 74)
    #expect(result.errorLines.filter { $0.hasPrefix("Error: ") }.count == 1, "\(result.err)")
    #expect(result.err.contains("checkpoint the WAL") && result.err.contains("catalog.db"), "\(result.err)")
  }

  /// ENOSPC at the first write of every thread of an encrypted backup: the archive's (its
  /// writer thread) and the error line's own (the main thread).
  @Test(.enabled(if: Strace.isAvailable)) func aFullDiskInAnEncryptedBackupSaysSo() throws {
    let workspace = try FaultScenarios.encryptedRepository()
    try FaultScenarios.change(workspace, seed: 1)
    try workspace.writeRandom("Documents/big.bin", size: 2 << 20, seed: 4)
    let line = workspace.commandLine(["backup", workspace.app, "--repo", workspace.repository])
    let result = try runProcess(
      Strace.path,
      [
        "-f", "-qq", "-o", "/dev/null", "-e", "trace=write", "-e", "inject=write:error=ENOSPC:when=1", "--",
        line.executable,
      ] + line.arguments, environment: line.environment)
    #expect(result.status == 74)
    let errors = result.errorLines.filter { $0.hasPrefix("Error: ") }
    #expect(errors.count == 1 && errors.first?.contains("no space left on") == true, "\(result.err)")
    #expect(result.err.contains(workspace.repository), "\(result.err)")
  }

  // MARK: 23.6: a torn file is recorded as torn

  @Test func aFileRewrittenWhileTheBackupReadsItMarksTheSnapshotTorn() throws {
    let device = Device()
    try device.install("Notes-1.0/Notes.app")
    let path = device.home + "/Documents/db.bin"
    try Data(repeating: 1, count: 5000).write(to: URL(fileURLWithPath: path))
    // Stopped after each reading of a file, before it is checked: the file grows each time.
    let backup = try device.startPausing(
      at: "backup.file-read", "--json", "backup", "com.example.notes", "--strict")
    while backup.waitUntilPaused() {
      let handle = try #require(FileHandle(forWritingAtPath: path))
      handle.seekToEndOfFile()
      handle.write(Data([2]))
      try handle.close()
      backup.resume()
    }
    let result = backup.finish()
    #expect(result.status == 74)
    #expect(
      result.err.contains("is incomplete") && result.err.contains("'Documents/db.bin'"), "\(result.err)")
    #expect(result.err.contains("kept changing while it was read"))
    let made = try #require(
      (try JSONSerialization.jsonObject(with: Data(result.stdout)) as? [[String: Any]])?.first)
    #expect(made["incomplete"] as? Bool == true)
    #expect(made["torn"] as? Int == 1)
    #expect(made["tornPaths"] as? [String] == ["Documents/db.bin"])
    let id = try #require(made["snapshot"] as? String)

    let listed = try device.run("snapshots")
    #expect(listed.out.contains("INCOMPLETE") && listed.out.contains("1 torn"), "\(listed.out)")
    let json = try #require(try device.json("snapshots") as? [[String: Any]])
    #expect(json.first?["torn"] as? Int == 1)

    let restore = try device.run("restore", "com.example.notes", "--snapshot", id)
    #expect(restore.status == 0)
    #expect(
      restore.err.contains("snapshot \(id) is incomplete") && restore.err.contains("'Documents/db.bin'"))
    // The catalog rebuilt from the objects still knows.
    #expect(try device.run("check", "--rebuild-catalog").status == 0)
    #expect(try device.run("snapshots").out.contains("1 torn"))
  }

  // MARK: 23.7: revert is exact

  @Test func aRevertBringsBackTheDirectoryTimesToo() throws {
    let device = Device()
    try device.install("Notes-1.0/Notes.app")
    try writeSampleData(home: device.home)
    // Library's own time, and Documents', set long ago: a revert that sets them last keeps them.
    var times = [timespec(tv_sec: 1_000_000_000, tv_nsec: 5), timespec(tv_sec: 1_000_000_000, tv_nsec: 5)]
    for directory in ["Library", "Documents", "Library/Preferences"] {
      #expect(utimensat(AT_FDCWD, device.home + "/" + directory, &times, AT_SYMLINK_NOFOLLOW) == 0)
    }
    // A new home gets a metadata file of its own; everything else must be as it was.
    func data() throws -> [[UInt8]: CapturedEntry] {
      try captureTree(
        device.home,
        skipping: [
          "Notes.app", "tmp", "Library/Caches", ".com.apple.mobile_container_manager.metadata.plist",
        ])
    }
    let before = try data()
    #expect(
      try device.run("update", "com.example.notes", fixturePath("bundles/Notes-2.0/Notes.app")).status == 0)
    try Data("newer".utf8).write(to: URL(fileURLWithPath: device.home + "/Library/newer.txt"))
    let revert = try device.run("revert", "com.example.notes")
    #expect(revert.status == 0, "\(revert.err)")
    let after = try data()
    #expect(differences(before, after) == [])
  }
}
