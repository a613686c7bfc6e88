import AppboxCore
import AppboxS3
import AppboxTestSupport
import Foundation
import Glibc
import Testing

/// Nothing is created by accident (issue 26, item 3): a typo in --root or --repo leaves no
/// device and no repository behind.
struct AccidentalStateTests {
  /// Every command that only reads, and every command that changes an existing device, refuses
  /// a root with no device: 66, one line naming the root and `device init`, nothing on disk.
  @Test func commandsOtherThanInstallAndDeviceInitNeverCreateADevice() throws {
    let directory = TemporaryDirectory("typo")
    let root = directory.url("typo")
    let commands: [[String]] = [
      ["list"], ["inspect", "com.example.notes"], ["path", "com.example.notes"], ["snapshots"],
      ["why", "com.example.notes", "Documents/a"], ["advise", "com.example.notes"],
      ["diff", "0123abcd", "4567abcd"], ["check"], ["device"], ["device", "show"],
      ["list", "--groups"], ["backup", "--all"], ["restore", "com.example.notes"],
      ["uninstall", "com.example.notes"], ["repo", "show"], ["repo", "init"],
      ["forget", "com.example.notes", "--keep-last", "1"], ["exclude", "com.example.notes", "Documents/a"],
      ["keychain", "com.example.notes", "list"], ["device", "lock"],
    ]
    for command in commands {
      let result = try appbox(command, root: root)
      #expect(result.status == 66, "\(command): \(result.status) \(result.err)")
      let lines = result.err.split(separator: "\n")
      #expect(
        lines.count == 1 && lines[0].contains("No device at \(root)")
          && lines[0].contains("appbox device init creates one"), "\(command): \(result.err)")
      #expect(!FileManager.default.fileExists(atPath: root), "\(command) created \(root)")
    }
    // With --json: the error document, and still nothing.
    let json = try appbox(["--json", "list"], root: root)
    #expect(json.status == 66)
    let error = try JSONSerialization.jsonObject(with: Data(json.stdout)) as? [String: Any]
    #expect((error?["error"] as? [String: Any])?["status"] as? Int == 66)
    #expect(!FileManager.default.fileExists(atPath: root))
    // An empty directory is not a device either, and stays empty.
    let empty = directory.url("empty")
    #expect(mkdir(empty, 0o755) == 0)
    #expect(try appbox(["list"], root: empty).status == 66)
    #expect(try FileManager.default.contentsOfDirectory(atPath: empty) == [])
    // install and device init create one.
    #expect(try appbox(["device", "init"], root: root).status == 0)
    #expect(try appbox(["list"], root: root).status == 0)
    let installed = directory.url("installed")
    #expect(try appbox(["install", fixturePath("bundles/Notes-1.0/Notes.app")], root: installed).status == 0)
    #expect(FileManager.default.fileExists(atPath: installed + "/device.plist"))
  }

  /// `backup --repo DIR` of a repository that does not exist: 66 naming `appbox repo init`,
  /// and no directory made (not even its parents).
  @Test func backupNeverCreatesARepository() throws {
    let device = Device()
    try device.install("Notes-1.0/Notes.app")
    let missing = device.dir.url("nonexistent") + "/dir"
    let result = try device.run("backup", "com.example.notes", "--repo", missing)
    #expect(result.status == 66, "\(result.err)")
    #expect(
      result.err.contains("appbox repo init") && result.err.split(separator: "\n").count == 1, "\(result.err)"
    )
    #expect(!FileManager.default.fileExists(atPath: device.dir.url("nonexistent")))
    let empty = device.dir.url("empty-repo")
    #expect(mkdir(empty, 0o700) == 0)
    #expect(try device.run("backup", "com.example.notes", "--repo", empty).status == 66)
    #expect(try FileManager.default.contentsOfDirectory(atPath: empty) == [])
    // repo init makes it; then backup uses it. The device's own repository needs no init.
    #expect(try device.run("repo", "init", "--repo", missing).status == 0)
    #expect(try device.run("backup", "com.example.notes", "--repo", missing).status == 0)
    #expect(try device.run("backup", "com.example.notes").status == 0)
  }

  @Test func backupNeverCreatesABucket() throws {
    let cluster = try SwiftCluster.shared()
    let device = Device()
    try device.install("Notes-1.0/Notes.app")
    let bucket = SwiftCluster.uniqueBucket("typo")
    let result = try device.run(
      "backup", "com.example.notes", "--repo", "s3://\(bucket)/repo", environment: cluster.environment)
    #expect(result.status == 66, "\(result.err)")
    #expect(result.err.contains("appbox repo init"), "\(result.err)")
    let client = try S3Client(
      S3Configuration(
        endpoint: cluster.endpoint,
        credentials: S3Credentials(accessKey: cluster.accessKey, secretKey: cluster.secretKey)))
    #expect(try !client.bucketExists(bucket))
  }
}
