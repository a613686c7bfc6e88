import AppboxCore
import AppboxS3
import AppboxTestSupport
import Foundation
import Glibc
import Testing

/// A repository on a real object store (OpenStack Swift's S3 API on loopback), shared by
/// several device roots.
struct FleetEndToEndTests {
  @Test func backupIncrementalRestoreCheckDiffAndForgetOnTheStore() throws {
    let bucket = try Bucket()
    let device = Device()
    try device.install("Notes-1.0/Notes.app")
    try writeSampleData(home: device.home)
    let before = try captureHomeData(device.home)
    let init_ = try device.s3(bucket, "repo", "init")
    #expect(init_.status == 0, "\(init_.err)")
    let full = try device.backup(to: bucket)
    #expect(full["kind"] as? String == "full")
    let first = try #require(full["snapshot"] as? String)
    #expect(
      (full["archive"] as? String)?.hasPrefix("s3://\(bucket.name)/fleet/archives/\(first).tar.zst") == true)
    try Data("changed on the device".utf8).write(to: URL(fileURLWithPath: device.home + "/Documents/a.txt"))
    try Data("new".utf8).write(to: URL(fileURLWithPath: device.home + "/Library/new.txt"))
    let after = try captureHomeData(device.home)
    let incremental = try device.backup(to: bucket)
    #expect(incremental["kind"] as? String == "incremental")
    #expect(incremental["bytesAdded"] as? Int == "changed on the device".utf8.count + 3)
    let second = try #require(incremental["snapshot"] as? String)

    let listed = try #require(try device.s3JSON(bucket, "snapshots") as? [[String: Any]])
    #expect(listed.map { $0["snapshot"] as? String } == [first, second])
    let diff = try #require(try device.s3JSON(bucket, "diff", first, second) as? [String: Any])
    #expect(diff["changed"] as? [String] == ["Documents/a.txt"])
    #expect(diff["added"] as? [String] == ["Library/new.txt"])

    let restored = try device.s3(bucket, "restore", "com.example.notes", "--snapshot", first)
    #expect(restored.status == 0, "\(restored.err)")
    #expect(differences(before, try captureHomeData(device.home)) == [])
    #expect(try device.s3(bucket, "restore", "com.example.notes").status == 0)
    #expect(differences(after, try captureHomeData(device.home)) == [])

    let check = try #require(try device.s3JSON(bucket, "check", "--read-data") as? [String: Any])
    #expect(check["ok"] as? Bool == true, "\(check)")
    #expect((check["bytesVerified"] as? Int ?? 0) > 1_300_000)

    let objectsBefore = try allObjects(bucket).map(\.key)
    let forget = try #require(
      try device.s3JSON(bucket, "forget", "com.example.notes", "--keep-last", "1") as? [String: Any])
    #expect(forget["removed"] as? [String] == [first])
    #expect(forget["markedArchives"] as? [String] == ["\(first).tar.zst"])
    #expect(forget["deletedArchives"] as? [String] == ["\(first).tar.zst"])
    let objectsAfter = try allObjects(bucket).map(\.key)
    #expect(!objectsAfter.contains { $0.contains(first) }, "\(objectsAfter)")
    #expect(objectsBefore.contains("fleet/archives/\(first).tar.zst"))
    #expect(try device.s3(bucket, "check", "--read-data").status == 0)
    try FileManager.default.removeItem(atPath: device.home + "/Documents/a.txt")
    #expect(try device.s3(bucket, "restore", "com.example.notes").status == 0)
    #expect(differences(after, try captureHomeData(device.home)) == [])
  }

  @Test func twoDeviceRootsShareABucketRestoreEachOthersSnapshotsAndStoreSharedContentOnce() throws {
    let bucket = try Bucket()
    let kiosk = Device()
    let spare = Device()
    try kiosk.install("Notes-1.0/Notes.app")
    #expect(try kiosk.s3(bucket, "repo", "init").status == 0)
    #expect(try spare.run("device", "init").status == 0)
    try writeSampleData(home: kiosk.home)
    // Files over 256 KiB are streamed into each archive as they are read (the engine cannot
    // look their content up first), so this test keeps to what is deduplicated: the rest.
    try FileManager.default.removeItem(atPath: kiosk.home + "/Library/Application Support/db.sqlite")
    let expected = try captureHomeData(kiosk.home)
    let snapshot = try #require(try kiosk.backup(to: bucket)["snapshot"] as? String)

    // The spare device has never had the app: restore installs it from the backup.
    let restored = try spare.s3(bucket, "restore", "com.example.notes", "--snapshot", snapshot)
    #expect(restored.status == 0, "\(restored.err)")
    #expect(differences(expected, try captureHomeData(spare.home)) == [])
    let listed = try #require(try spare.s3JSON(bucket, "snapshots") as? [[String: Any]])
    #expect(listed.map { $0["snapshot"] as? String } == [snapshot])

    // Its own backup reuses what the kiosk stored: only the new file is added.
    try Data("only on the spare".utf8).write(to: URL(fileURLWithPath: spare.home + "/Documents/spare.txt"))
    let own = try spare.backup(to: bucket)
    #expect(own["bytesAdded"] as? Int == "only on the spare".utf8.count, "\(own)")
    let both = try #require(try kiosk.s3JSON(bucket, "snapshots") as? [[String: Any]])
    #expect(both.count == 2)
    #expect(try kiosk.s3(bucket, "check", "--read-data").status == 0)
  }

  @Test func eightConcurrentBackupsFromFourDevicesAllRestore() throws {
    let bucket = try Bucket()
    let devices = (0..<4).map { _ in Device() }
    for (index, device) in devices.enumerated() {
      try device.install("Notes-1.0/Notes.app")
      try device.install("Journal-1.0/Journal.app")
      for home in try device.homes() {
        try writeSampleData(home: home)
        try Data("device \(index) \(home)".utf8).write(to: URL(fileURLWithPath: home + "/Documents/own.txt"))
      }
    }
    #expect(try devices[0].s3(bucket, "repo", "init").status == 0)
    var processes: [(Device, SpawnedProcess)] = []
    for device in devices {
      for app in ["com.example.notes", "com.example.journal"] {
        var environment = ProcessInfo.processInfo.environment.merging(bucket.environment) { $1 }
        environment.removeValue(forKey: "APPBOX_ROOT")
        processes.append(
          (
            device,
            try spawnProcess(
              productsDirectory + "/appbox",
              ["--root", device.root, "backup", app, "--repo", bucket.url], environment: environment,
              stdout: open("/dev/null", O_WRONLY), stderr: open("/dev/null", O_WRONLY))
          ))
      }
    }
    for (_, process) in processes { #expect(process.wait() == 0) }
    let snapshots = try #require(try devices[0].s3JSON(bucket, "snapshots") as? [[String: Any]])
    #expect(snapshots.count == 8)
    let check = try devices[1].s3(bucket, "check", "--read-data")
    #expect(check.status == 0, "\(check.out) \(check.err)")
    for device in devices {
      for app in ["com.example.notes", "com.example.journal"] {
        let home = try device.home(of: app)
        let expected = try captureTree(
          home, skipping: [try device.bundleName(of: app), "tmp", "Library/Caches"])
        try FileManager.default.removeItem(atPath: home + "/Documents/own.txt")
        let mine = try #require(try device.s3JSON(bucket, "snapshots", app) as? [[String: Any]])
        let ids = mine.compactMap { $0["snapshot"] as? String }
        #expect(ids.count == 4)
        // Restore this device's own snapshot of the app (each device's data differs).
        var restoredOne = false
        for id in ids {
          let result = try device.s3(bucket, "restore", app, "--snapshot", id)
          #expect(result.status == 0, "\(result.err)")
          let now = try captureTree(
            home, skipping: [try device.bundleName(of: app), "tmp", "Library/Caches"])
          if differences(expected, now).isEmpty { restoredOne = true }
        }
        #expect(restoredOne, "no snapshot of \(app) restored device's own data")
      }
    }
  }

  @Test func wrongCredentialsAreDeniedWithOneClearLine() throws {
    let bucket = try Bucket()
    let device = Device()
    try device.install("Notes-1.0/Notes.app")
    #expect(try device.s3(bucket, "repo", "init").status == 0)
    let denied = try device.s3(
      bucket, "backup", "com.example.notes", environment: ["AWS_SECRET_ACCESS_KEY": "wrong"])
    #expect(denied.status == 77, "\(denied.err)")
    #expect(denied.err.split(separator: "\n").count == 1)
    #expect(denied.err.contains("signature"))
    let missing = try device.run(
      "snapshots", "--repo", bucket.url, environment: ["APPBOX_S3_ENDPOINT": bucket.cluster.endpoint])
    #expect(missing.status == 64 && missing.err.contains("credentials"), "\(missing.err)")
    let credentials = device.dir.url("credentials")
    try
      "[default]\naws_access_key_id = \(bucket.cluster.accessKey)\naws_secret_access_key = \(bucket.cluster.secretKey)\n"
      .write(toFile: credentials, atomically: true, encoding: .utf8)
    let fromFile = try device.run(
      "backup", "com.example.notes", "--repo", bucket.url, "--endpoint", bucket.cluster.endpoint,
      "--credentials-file", credentials)
    #expect(fromFile.status == 0, "\(fromFile.err)")
  }

  @Test func killedBackupsAndForgetsLeaveARepositoryCheckPasses() throws {
    let bucket = try Bucket()
    let device = Device()
    try device.install("Notes-1.0/Notes.app")
    #expect(try device.s3(bucket, "repo", "init").status == 0)
    try writeSampleData(home: device.home)
    _ = try device.backup(to: bucket)
    // At each named step of the commit, and of forget.
    for point in ["backup.archive-renamed", "backup.snapshot-written", "backup.manifest-written"] {
      try Data(point.utf8).write(to: URL(fileURLWithPath: device.home + "/Documents/\(point).txt"))
      let killed = try device.s3(
        bucket, "backup", "com.example.notes", environment: ["APPBOX_CRASH_AT": point])
      #expect(killed.status == 128 + SIGKILL)
      let check = try device.s3(bucket, "check")
      #expect(check.status == 0, "\(point): \(check.out) \(check.err)")
    }
    // The snapshot whose manifest was written is committed; the two before it are debris.
    let listed = try #require(try device.s3JSON(bucket, "snapshots") as? [[String: Any]])
    #expect(listed.count == 2)
    for point in ["forget.repacked", "forget.snapshots-deleted", "forget.committed", "forget.swept"] {
      _ = try device.backup(to: bucket)
      let killed = try device.s3(
        bucket, "forget", "com.example.notes", "--keep-last", "1", environment: ["APPBOX_CRASH_AT": point])
      #expect(killed.status == 128 + SIGKILL, "\(point): \(killed.err)")
      let check = try device.s3(bucket, "check", "--read-data")
      #expect(check.status == 0, "\(point): \(check.out) \(check.err)")
    }
    // Random moments of backups.
    for round in 0..<6 {
      try Data("round \(round)".utf8).write(to: URL(fileURLWithPath: device.home + "/Documents/round.txt"))
      var environment = ProcessInfo.processInfo.environment.merging(bucket.environment) { $1 }
      environment.removeValue(forKey: "APPBOX_ROOT")
      let process = try spawnProcess(
        productsDirectory + "/appbox",
        ["--root", device.root, "backup", "com.example.notes", "--repo", bucket.url],
        environment: environment, stdout: open("/dev/null", O_WRONLY), stderr: open("/dev/null", O_WRONLY))
      usleep(UInt32.random(in: 0...400_000))
      kill(process.pid, SIGKILL)
      _ = process.wait()
      let check = try device.s3(bucket, "check")
      #expect(check.status == 0, "round \(round): \(check.out) \(check.err)")
    }
    // The next forget sweeps all the debris; everything left restores.
    let forget = try device.s3(bucket, "forget", "com.example.notes", "--keep-last", "1")
    #expect(forget.status == 0, "\(forget.err)")
    let again = try device.s3(bucket, "forget", "com.example.notes", "--keep-last", "1")
    #expect(again.status == 0, "\(again.err)")
    let keys = try allObjects(bucket).map(\.key)
    let archives = keys.filter { $0.hasPrefix("fleet/archives/") }
    let manifests = keys.filter { $0.hasPrefix("fleet/manifests/") }
    #expect(archives.count == manifests.count, "\(keys)")
    #expect(!keys.contains { $0.hasPrefix("fleet/garbage/") || $0.hasPrefix("fleet/locks/") }, "\(keys)")
    let expected = try captureHomeData(device.home)
    _ = try device.backup(to: bucket)
    #expect(try device.s3(bucket, "check", "--read-data").status == 0)
    try FileManager.default.removeItem(atPath: device.home + "/Documents/round.txt")
    #expect(try device.s3(bucket, "restore", "com.example.notes").status == 0)
    #expect(differences(expected, try captureHomeData(device.home)) == [])
  }

  @Test func aDroppedConnectionAndAStoppedStoreGiveClearStatusesAndNoHalfSnapshot() throws {
    let directory = TemporaryDirectory("own-swift")
    let cluster = try SwiftCluster.start(in: directory.path)
    defer { _ = try? cluster.control("stop") }
    let bucket = try Bucket(cluster: cluster)
    let device = Device()
    try device.install("Notes-1.0/Notes.app")
    #expect(try device.s3(bucket, "repo", "init").status == 0)
    try writeSampleData(home: device.home)
    // Random bytes: zstd cannot shrink them, so the archive takes several multipart parts.
    var big = [UInt8](repeating: 0, count: 40 << 20)
    var random = SeededRandom(seed: 40)
    big.withUnsafeMutableBytes { random.fill($0) }
    try Data(big).write(to: URL(fileURLWithPath: device.home + "/Documents/big.bin"))
    let first = try #require(try device.backup(to: bucket)["snapshot"] as? String)

    // The connection drops after the first part of a multipart upload, and the store stays
    // away: the backup fails as unavailable, and nothing of it is a snapshot.
    big[7] = 1
    try Data(big).write(to: URL(fileURLWithPath: device.home + "/Documents/big.bin"))
    var environment = ProcessInfo.processInfo.environment.merging(bucket.environment) { $1 }
    environment.removeValue(forKey: "APPBOX_ROOT")
    environment["APPBOX_PAUSE_AT"] = "s3.part-sent"
    environment["APPBOX_S3_ATTEMPTS"] = "3"
    let errors = device.dir.url("backup.err")
    let process = try spawnProcess(
      productsDirectory + "/appbox",
      ["--root", device.root, "backup", "com.example.notes", "--full", "--repo", bucket.url],
      environment: environment, stdout: open("/dev/null", O_WRONLY),
      stderr: open(errors, O_WRONLY | O_CREAT | O_TRUNC, 0o644))
    #expect(waitUntilStopped(process.pid))
    try cluster.control("stop-proxy")
    kill(process.pid, SIGCONT)
    #expect(process.wait() == 69)
    let message = (try? String(contentsOfFile: errors, encoding: .utf8)) ?? ""
    #expect(message.contains("cannot be reached"), "\(message)")
    #expect(message.split(separator: "\n").count == 1, "\(message)")

    // The whole store is down: every command says so, 69.
    let stopped = try device.s3(bucket, "snapshots")
    #expect(stopped.status == 69, "\(stopped.err)")
    #expect(stopped.err.hasPrefix("Error: ") && stopped.err.contains("cannot be reached"))

    // Back up again: only the first snapshot exists, and the repository checks clean.
    let started = try cluster.control("start-proxy")
    #expect(started.status == 0, "\(started.err)")
    let listed = try #require(try device.s3JSON(bucket, "snapshots") as? [[String: Any]])
    #expect(listed.map { $0["snapshot"] as? String } == [first])
    #expect(try device.s3(bucket, "check", "--read-data").status == 0)

    // A drop the store recovers from within the retries: the backup completes.
    let retry = try spawnProcess(
      productsDirectory + "/appbox",
      ["--root", device.root, "backup", "com.example.notes", "--full", "--repo", bucket.url],
      environment: environment.merging(["APPBOX_S3_ATTEMPTS": "12"]) { $1 },
      stdout: open("/dev/null", O_WRONLY),
      stderr: open(errors, O_WRONLY | O_CREAT | O_TRUNC, 0o644))
    #expect(waitUntilStopped(retry.pid))
    try cluster.control("stop-proxy")
    kill(retry.pid, SIGCONT)
    #expect(try cluster.control("start-proxy").status == 0)
    // It may pause again at later parts: let it run to the end.
    var status: Int32 = -1
    while status < 0 {
      if waitUntilStopped(retry.pid, timeout: 1) { kill(retry.pid, SIGCONT) }
      var raw: Int32 = 0
      if waitpid(retry.pid, &raw, WNOHANG) == retry.pid { status = (raw >> 8) & 0xFF }
    }
    #expect(status == 0, "\((try? String(contentsOfFile: errors, encoding: .utf8)) ?? "")")
    let after = try #require(try device.s3JSON(bucket, "snapshots") as? [[String: Any]])
    #expect(after.count == 2)
    #expect(try device.s3(bucket, "check", "--read-data").status == 0)
  }
}

extension Device {
  /// The homes of the installed apps.
  func homes() throws -> [String] {
    try FileManager.default.contentsOfDirectory(atPath: root + "/ApplicationRoot").filter {
      !$0.hasPrefix(".")
    }
    .map { root + "/ApplicationRoot/" + $0 }
  }

  func home(of app: String) throws -> String {
    let result = try run("path", app)
    return result.out.trimmingCharacters(in: .whitespacesAndNewlines)
  }

  func bundleName(of app: String) throws -> String {
    try FileManager.default.contentsOfDirectory(atPath: try home(of: app)).first { $0.hasSuffix(".app") }
      ?? ""
  }
}
