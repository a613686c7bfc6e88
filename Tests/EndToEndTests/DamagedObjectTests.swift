import AppboxCore
import AppboxS3
import AppboxTestSupport
import Foundation
import Glibc
import Testing

/// Flips one byte in the middle of `bytes`.
func flipped(_ bytes: [UInt8]) -> [UInt8] {
  var copy = bytes
  copy[copy.count / 2] ^= 0x20
  return copy
}

/// Flips one byte of the file at `path` in place, keeping its times (as bit rot would).
func flipByte(_ path: String) throws {
  var st = stat()
  #expect(stat(path, &st) == 0)
  let fd = open(path, O_RDWR)
  defer { close(fd) }
  var byte: UInt8 = 0
  #expect(pread(fd, &byte, 1, off_t(st.st_size / 2)) == 1)
  byte ^= 0x20
  #expect(pwrite(fd, &byte, 1, off_t(st.st_size / 2)) == 1)
  var times = [st.st_atim, st.st_mtim]
  #expect(futimens(fd, &times) == 0)
}

extension Device {
  func run(arguments: [String], environment: [String: String] = [:]) throws -> ProcessResult {
    try appbox(arguments, root: root, environment: environment)
  }
}

/// Issues 23.2 and 24.4: one damaged manifest or snapshot object stays local.
struct DamagedObjectTests {
  /// Three snapshots of the sample home, each with a change; their ids and data, oldest first.
  static func threeSnapshots(
    _ device: Device, backup: (Device) throws -> String
  ) throws -> [(id: String, data: [[UInt8]: CapturedEntry])] {
    try device.install("Notes-1.0/Notes.app")
    try writeSampleData(home: device.home)
    var made: [(String, [[UInt8]: CapturedEntry])] = []
    for round in 0..<3 {
      try Data("round \(round)".utf8).write(
        to: URL(fileURLWithPath: device.home + "/Documents/r\(round).txt"))
      let data = try captureHomeData(device.home)
      made.append((try backup(device), data))
    }
    return made
  }

  /// Restores `id` from `repository` on a device that never saw the app; its data.
  static func restoreOnANewDevice(
    _ id: String, _ repository: [String], environment: [String: String] = [:]
  ) throws -> (ProcessResult, [[UInt8]: CapturedEntry]?) {
    let fresh = Device()
    #expect(try fresh.run("device", "init").status == 0)
    let result = try fresh.run(
      arguments: ["restore", "com.example.notes", "--snapshot", id] + repository, environment: environment)
    return (result, result.status == 0 ? try captureHomeData(fresh.home) : nil)
  }

  @Test func aLocalRepositoryWithADamagedManifestOrSnapshotObjectIsNamedAndRebuiltWhole() throws {
    let device = Device()
    let made = try Self.threeSnapshots(device) { try #require($0.backup()["snapshot"] as? String) }
    try flipByte(device.repository + "/manifests/\(made[1].id).tar.zst")
    try flipByte(device.repository + "/snapshots/\(made[2].id)")
    let check = try device.run("check", "--read-data")
    #expect(check.status == 65)
    #expect(check.out.contains("Object 'manifests/\(made[1].id).tar.zst' is damaged"), "\(check.out)")
    #expect(check.out.contains("Object 'snapshots/\(made[2].id)' is damaged"), "\(check.out)")
    // The rebuild reads each archive's own manifest for the damaged object, and the damaged
    // snapshot object's row from its archive's manifest: nothing is lost.
    let rebuild = try device.run("check", "--rebuild-catalog")
    #expect(rebuild.out.contains("3 snapshots"), "\(rebuild.out) \(rebuild.err)")
    let listed = try #require(try device.json("snapshots") as? [[String: Any]])
    #expect(listed.compactMap { $0["snapshot"] as? String } == made.map(\.id))
    for (id, data) in made {
      let (result, restored) = try Self.restoreOnANewDevice(id, ["--repo", device.repository])
      #expect(result.status == 0, "\(id): \(result.err)")
      #expect(restored.map { differences(data, $0) } == [], "\(id)")
    }
  }

  @Test func anEncryptedRepositoryWithADamagedManifestHidesOnlyTheSnapshotsThatNeedIt() throws {
    let device = Device()
    let password = device.dir.url("pw")
    try Data("secret\n".utf8).write(to: URL(fileURLWithPath: password))
    chmod(password, 0o600)
    let repository = device.dir.url("enc")
    let environment = ["APPBOX_PASSWORD_FILE": password]
    #expect(try device.run("device", "init").status == 0)
    #expect(
      try device.run("repo", "init", "--repo", repository, "--encrypt", environment: environment).status == 0)
    let made = try Self.threeSnapshots(device) { device in
      let result = try device.run(
        "--json", "backup", "com.example.notes", "--full", "--repo", repository, environment: environment)
      let array = try JSONSerialization.jsonObject(with: Data(result.stdout)) as? [[String: Any]]
      return try #require(array?.first?["snapshot"] as? String)
    }
    try flipByte(repository + "/manifests/\(made[1].id).tar.zst")
    // This device keeps its own copies of the objects: check reads the repository's.
    let check = try device.run("check", "--read-data", "--repo", repository, environment: environment)
    #expect(check.status == 65)
    #expect(check.out.contains("Object 'manifests/\(made[1].id).tar.zst' is damaged"), "\(check.out)")
    let line = check.out.split(separator: "\n").first { $0.contains("manifests/\(made[1].id).tar.zst") } ?? ""
    #expect(line.contains("snapshots needing it: ") && line.contains(made[1].id), "\(check.out)")

    // A new device lists the others, marks the damaged one, and restores the others.
    let fresh = Device()
    #expect(try fresh.run("device", "init").status == 0)
    let listing = try fresh.run(
      arguments: ["--json", "snapshots", "--repo", repository], environment: environment)
    #expect(listing.status == 0, "\(listing.err)")
    let listed = try #require(
      try JSONSerialization.jsonObject(with: Data(listing.stdout)) as? [[String: Any]])
    #expect(Set(listed.compactMap { $0["snapshot"] as? String }) == Set(made.map(\.id)))
    #expect(
      listed.filter { $0["damaged"] as? Bool == true }.compactMap { $0["snapshot"] as? String } == [
        made[1].id
      ])
    for index in [0, 2] {
      let (result, restored) = try Self.restoreOnANewDevice(
        made[index].id, ["--repo", repository], environment: environment)
      #expect(result.status == 0, "\(made[index].id): \(result.err)")
      #expect(restored.map { differences(made[index].data, $0) } == [])
    }
    let (refused, _) = try Self.restoreOnANewDevice(
      made[1].id, ["--repo", repository], environment: environment)
    #expect(refused.status == 65)
    #expect(refused.err.contains("cannot be restored") && refused.err.contains("damaged"), "\(refused.err)")

    // The device that knew the damaged archive keeps what it knew through a rebuild.
    let rebuild = try device.run("check", "--rebuild-catalog", "--repo", repository, environment: environment)
    #expect(rebuild.err.contains("kept 1 snapshots"), "\(rebuild.out) \(rebuild.err)")
    let kept = try device.run(
      arguments: ["--json", "snapshots", "--repo", repository], environment: environment)
    let keptList = try #require(try JSONSerialization.jsonObject(with: Data(kept.stdout)) as? [[String: Any]])
    #expect(keptList.compactMap { $0["snapshot"] as? String } == made.map(\.id))
    let restore = try device.run(
      arguments: ["restore", "com.example.notes", "--snapshot", made[1].id, "--repo", repository],
      environment: environment)
    #expect(restore.status == 0, "\(restore.err)")
    #expect(differences(made[1].data, try captureHomeData(device.home)) == [])
  }

  @Test func anS3RepositoryWithADamagedManifestHidesOnlyTheSnapshotsThatNeedIt() throws {
    let bucket = try Bucket()
    let device = Device()
    #expect(try device.run("device", "init").status == 0)
    #expect(try device.s3(bucket, "repo", "init").status == 0)
    let made = try Self.threeSnapshots(device) { device in
      let result = try device.s3(bucket, "--json", "backup", "com.example.notes", "--full")
      let array = try JSONSerialization.jsonObject(with: Data(result.stdout)) as? [[String: Any]]
      return try #require(array?.first?["snapshot"] as? String)
    }
    let client = try s3Client(bucket.cluster)
    let key = "fleet/manifests/\(made[1].id).tar.zst"
    try client.put(bucket.name, key, flipped(try client.get(bucket.name, key)))
    let check = try device.s3(bucket, "check")
    #expect(check.status == 65)
    #expect(check.out.contains("Object 'manifests/\(made[1].id).tar.zst' is damaged"), "\(check.out)")

    let fresh = Device()
    #expect(try fresh.run("device", "init").status == 0)
    let listing = try fresh.s3(bucket, "--json", "snapshots")
    #expect(listing.status == 0, "\(listing.err)")
    let listed = try #require(
      try JSONSerialization.jsonObject(with: Data(listing.stdout)) as? [[String: Any]])
    #expect(
      listed.filter { $0["damaged"] as? Bool == true }.compactMap { $0["snapshot"] as? String } == [
        made[1].id
      ])
    for index in [0, 2] {
      let other = Device()
      #expect(try other.run("device", "init").status == 0)
      let result = try other.s3(bucket, "restore", "com.example.notes", "--snapshot", made[index].id)
      #expect(result.status == 0, "\(made[index].id): \(result.err)")
      #expect(differences(made[index].data, try captureHomeData(other.home)) == [])
    }
  }
}
