import AppboxCore
import AppboxTestSupport
import Foundation
import Glibc
import Testing

/// Locked means locked whatever the page cache holds (issue 24, item 5): while the app keeps a
/// `complete` file open across a lock, the kernel keeps that inode's key and a new open still
/// reads it; `files pull`, `export` and `backup` must decide from the class and refuse (69).
@Suite(.enabled(if: EncryptedVolume.isAvailable, "needs root and loop devices"))
struct LockedDataEndToEndTests {
  static let app = "com.example.vault"

  @Test func aFileTheAppHoldsOpenAcrossALockIsNotReadByAppbox() throws {
    let device = try ProtectedDevice()
    let home = try device.install("Vault-1.0/Vault.app")
    let secret = marker("held")
    try writeDurably(home + "/Documents/held.txt", secret)
    try expectSuccess(device.run("protect", Self.app, "Documents/held.txt", "--class", "complete"))
    #expect(try device.run("backup", Self.app).status == 0)
    let archivesBefore = try FileManager.default.contentsOfDirectory(
      atPath: device.root + "/Backups/archives")

    // The app opens the file, says so, and keeps it open until told to stop.
    let script = """
      exec 3<Documents/held.txt
      : > tmp/ready
      while [ ! -e tmp/go ]; do sleep 0.02; done
      exit 0
      """
    let null = open("/dev/null", O_RDWR)
    defer { close(null) }
    let app = try spawnProcess(
      productsDirectory + "/appbox", ["--root", device.root, "run", Self.app, "--", "/bin/sh", "-c", script],
      stdin: null, stdout: null, stderr: null)
    #expect(eventually { FileManager.default.fileExists(atPath: home + "/tmp/ready") })
    let lock = try #require(try device.json("device", "lock") as? [String: Any])
    #expect(lock["busyClasses"] as? [String] == ["complete"])
    // The premise: the held inode still opens and reads, for anyone (root here).
    #expect(contents(home + "/Documents/held.txt") == Array(secret.utf8))

    let pulled = try device.run("files", Self.app, "pull", "held.txt")
    #expect(pulled.status == 69 && pulled.err.contains("complete"), "\(pulled.out) \(pulled.err)")
    #expect(!pulled.out.contains(secret) && pulled.err.split(separator: "\n").count == 1)
    let destination = device.volume.path + "/pulled.txt"
    let pulledToFile = try device.run("files", Self.app, "pull", "held.txt", destination)
    #expect(pulledToFile.status == 69 && !FileManager.default.fileExists(atPath: destination))
    let tar = device.volume.path + "/export.tar"
    let export = try device.run("export", Self.app, tar)
    #expect(export.status == 69 && export.err.contains("Documents/held.txt"), "\(export.err)")
    #expect(!FileManager.default.fileExists(atPath: tar))
    let backup = try device.run("backup", Self.app)
    #expect(backup.status == 69 && backup.err.contains("Documents/held.txt"), "\(backup.err)")
    #expect(
      try FileManager.default.contentsOfDirectory(atPath: device.root + "/Backups/archives") == archivesBefore
    )

    FileManager.default.createFile(atPath: home + "/tmp/go", contents: nil)
    #expect(app.wait() == 0)
    try device.unlock()
    let unlocked = try device.run("files", Self.app, "pull", "held.txt")
    #expect(unlocked.status == 0 && unlocked.out == secret, "\(unlocked.err)")
  }
}
