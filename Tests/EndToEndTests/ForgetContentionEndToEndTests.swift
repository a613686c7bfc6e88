// Two `forget`s competing for the prune lock of an S3 repository (the real Swift cluster):
// while one holds it (stopped at a pause point, after repacking and before deleting anything),
// the other, not told to wait, tries for its minimum of 5 s and exits 75 naming the holder,
// leaving no lock object of its own; two started together and both told to wait both succeed,
// one after the other, and exactly one of them drops the snapshots. Afterwards every kept
// snapshot restores byte for byte and `check --read-data` is clean.

import AppboxCore
import AppboxTestSupport
import Foundation
import Glibc
import Testing

struct ForgetContentionEndToEndTests {
  static let app = "com.example.notes"
  /// The prune lock's default settle time, not the fleet tests' 0.2 s: Swift's s3api stamps
  /// objects to the second, so two forgets settling for less than that could both win.
  static let settle = ["APPBOX_S3_LOCK_SETTLE": "1"]

  /// Starts `appbox forget` on `bucket` in the background, its stdout and stderr into files.
  func startForget(
    _ device: Device, _ bucket: Bucket, keepLast: Int, wait: Int, label: String,
    environment extra: [String: String] = [:]
  ) throws -> (process: SpawnedProcess, out: String, err: String) {
    var environment = ProcessInfo.processInfo.environment.merging(bucket.environment) { $1 }
      .merging(Self.settle) { $1 }.merging(extra) { $1 }
    environment.removeValue(forKey: "APPBOX_ROOT")
    let out = device.dir.url("\(label).out")
    let err = device.dir.url("\(label).err")
    let stdout = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
    let stderr = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
    defer {
      close(stdout)
      close(stderr)
    }
    let process = try spawnProcess(
      productsDirectory + "/appbox",
      [
        "--root", device.root, "--wait", String(wait), "--json", "forget", Self.app, "--keep-last",
        String(keepLast),
        "--repo", bucket.url,
      ], environment: environment, stdout: stdout, stderr: stderr)
    return (process, out, err)
  }

  /// A file's text ("" when it cannot be read): a process's stderr, for messages.
  func text(_ path: String) -> String { (try? String(contentsOfFile: path, encoding: .utf8)) ?? "" }

  /// The snapshot ids a finished forget's JSON report says it removed.
  func removed(_ out: String) throws -> [String] {
    let data = try Data(contentsOf: URL(fileURLWithPath: out))
    let report = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
    return try #require(report["removed"] as? [String])
  }

  /// Restores each of `snapshots` (id and what the home held when it was taken) and compares.
  func expectEachRestores(
    _ device: Device, _ bucket: Bucket, _ snapshots: [(id: String, data: [[UInt8]: CapturedEntry])]
  ) throws {
    for snapshot in snapshots {
      let restored = try device.s3(bucket, "restore", Self.app, "--snapshot", snapshot.id)
      #expect(restored.status == 0, "\(snapshot.id): \(restored.err)")
      #expect(differences(snapshot.data, try captureHomeData(device.home)) == [], "\(snapshot.id)")
    }
    let check = try #require(try device.s3JSON(bucket, "check", "--read-data") as? [String: Any])
    #expect(check["ok"] as? Bool == true, "\(check)")
  }

  func backup(_ device: Device, _ bucket: Bucket, round: Int) throws -> (
    id: String, data: [[UInt8]: CapturedEntry]
  ) {
    try Data("round \(round)".utf8).write(
      to: URL(fileURLWithPath: device.home + "/Documents/round-\(round).txt"))
    let data = try captureHomeData(device.home)
    let id = try #require(try device.backup(to: bucket)["snapshot"] as? String)
    return (id, data)
  }

  @Test func twoForgetsCompeteForThePruneLockAndOneProceedsAtATime() throws {
    let bucket = try Bucket()
    let device = Device()
    try device.install("Notes-1.0/Notes.app")
    try writeSampleData(home: device.home)
    #expect(try device.s3(bucket, "repo", "init").status == 0)
    var snapshots: [(id: String, data: [[UInt8]: CapturedEntry])] = []
    for round in 0..<4 { snapshots.append(try backup(device, bucket, round: round)) }

    // The holder stops after repacking, before it deletes anything, holding the lock.
    let holder = try startForget(
      device, bucket, keepLast: 2, wait: 0, label: "holder",
      environment: ["APPBOX_PAUSE_AT": "forget.repacked"])
    guard waitUntilStopped(holder.process.pid) else {
      kill(holder.process.pid, SIGKILL)
      _ = holder.process.wait()
      Issue.record("the first forget never reached its pause point: \(text(holder.err))")
      return
    }
    let locks = try allObjects(bucket).map(\.key).filter { $0.hasPrefix("fleet/locks/") }
    #expect(locks.count == 1, "\(locks)")
    // The other is busy: 75, one line naming the lock.
    let busy = try device.s3(bucket, "forget", Self.app, "--keep-last", "2", environment: Self.settle)
    #expect(busy.status == 75, "\(busy.err)")
    let lockName = String((locks.first ?? "fleet/?").dropFirst("fleet/".count))
    #expect(busy.err.split(separator: "\n").count == 1, "\(busy.err)")
    #expect(busy.err.contains("busy") && busy.err.contains(lockName), "\(busy.err)")
    #expect(try allObjects(bucket).map(\.key).filter { $0.hasPrefix("fleet/locks/") } == locks)
    kill(holder.process.pid, SIGCONT)
    #expect(holder.process.wait() == 0, "\(text(holder.err))")
    #expect(try removed(holder.out) == snapshots.prefix(2).map(\.id))
    let listed = try #require(try device.s3JSON(bucket, "snapshots") as? [[String: Any]])
    #expect(listed.compactMap { $0["snapshot"] as? String } == snapshots.suffix(2).map(\.id))
    try expectEachRestores(device, bucket, Array(snapshots.suffix(2)))

    // Two at once, both willing to wait: each succeeds, and only one of them drops anything
    // (the other takes the lock afterwards and finds the snapshots gone).
    for round in 4..<6 { snapshots.append(try backup(device, bucket, round: round)) }
    let first = try startForget(device, bucket, keepLast: 1, wait: 120, label: "first")
    let second = try startForget(device, bucket, keepLast: 1, wait: 120, label: "second")
    #expect(first.process.wait() == 0, "\(text(first.err))")
    #expect(second.process.wait() == 0, "\(text(second.err))")
    let dropped = [try removed(first.out), try removed(second.out)]
    #expect(dropped.filter(\.isEmpty).count == 1, "\(dropped)")
    #expect(Set(dropped.flatMap { $0 }) == Set(snapshots[2..<5].map(\.id)), "\(dropped)")
    #expect(dropped.flatMap { $0 }.count == 3, "\(dropped)")
    #expect(try allObjects(bucket).map(\.key).filter { $0.hasPrefix("fleet/locks/") } == [])
    try expectEachRestores(device, bucket, [snapshots[5]])
  }
}
