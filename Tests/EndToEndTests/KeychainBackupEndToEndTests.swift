import AppboxCore
import AppboxTestSupport
import Foundation
import Glibc
import Testing

/// Snapshots carry an app's keychain items sealed under the device key: they come back on
/// the same device and nowhere else.
struct KeychainBackupEndToEndTests {
  @Test func itemsRestoreOnTheSameDeviceOnly() throws {
    let device = Device()
    try device.install("Notes-1.0/Notes.app")
    let add = try device.run(
      "keychain", "com.example.notes", "add", "--service", "mail", "--account", "ada", "--data", "pa55word")
    #expect(add.status == 0, "\(add.err)")
    let backup = try device.json("backup", "com.example.notes") as? [[String: Any]]
    let snapshot = try #require(backup?.first?["snapshot"] as? String)
    #expect(filesContaining(Array("pa55word".utf8), under: device.root).isEmpty)

    #expect(
      try device.run("keychain", "com.example.notes", "delete", "--service", "mail", "--account", "ada")
        .status == 0)
    let restore = try device.run("--json", "restore", "com.example.notes", "--snapshot", snapshot)
    #expect(restore.status == 0, "\(restore.err)")
    let report = try #require(try JSONSerialization.jsonObject(with: Data(restore.stdout)) as? [String: Any])
    #expect(report["keychainRestored"] as? Bool == true)
    let get = try device.run("keychain", "com.example.notes", "get", "--service", "mail", "--account", "ada")
    #expect(get.status == 0 && get.out == "pa55word")

    // Another device restores the data but not the keychain, and says so in one line.
    let other = Device()
    #expect(try other.run("device", "init").status == 0)
    let elsewhere = try appbox(
      ["--json", "restore", "com.example.notes", "--snapshot", snapshot, "--repo", device.root + "/Backups"],
      root: other.root)
    #expect(elsewhere.status == 0, "\(elsewhere.err)")
    let otherReport = try #require(
      try JSONSerialization.jsonObject(with: Data(elsewhere.stdout)) as? [String: Any])
    #expect(otherReport["keychainRestored"] as? Bool == false)
    #expect((otherReport["keychainReason"] as? String)?.isEmpty == false)
    #expect(elsewhere.err.split(separator: "\n").filter { $0.hasPrefix("warning: keychain") }.count == 1)
    let missing = try other.run(
      "keychain", "com.example.notes", "get", "--service", "mail", "--account", "ada")
    #expect(missing.status == 66)
    #expect(try other.run("inspect", "com.example.notes").status == 0)
  }
}
