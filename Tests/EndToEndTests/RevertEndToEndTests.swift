import AppboxCore
import AppboxTestSupport
import Foundation
import Glibc
import Testing

struct RevertEndToEndTests {
  func dataManifest(_ home: String) throws -> [String: String] {
    try treeManifest(home + "/Documents").mapKeys { "Documents/" + $0 }
      .merging(try treeManifest(home + "/Library").mapKeys { "Library/" + $0 }) { a, _ in a }
  }

  func home(_ device: Device) throws -> String {
    try device.run("path", "com.example.notes").out.trimmingCharacters(in: .whitespacesAndNewlines)
  }

  /// Notes 1.0 with data and a keychain item, updated to 2.0, whose data then changes.
  func updatedNotes() throws -> (Device, before: [String: String], preUpdate: String) {
    let device = Device()
    let id = try device.install("Notes-1.0/Notes.app")
    try populateAwkwardData(home: device.root + "/ApplicationRoot/" + id)
    try Data("old".utf8).write(
      to: URL(fileURLWithPath: device.root + "/ApplicationRoot/\(id)/Library/Caches/c2"))
    let before = try dataManifest(device.root + "/ApplicationRoot/" + id)
    let add = try device.run(
      "keychain", "com.example.notes", "add", "--service", "sync", "--account", "ada", "--data", "s3cret")
    #expect(add.status == 0, "\(add.err)")
    let update = try device.run(
      "--json", "update", "com.example.notes", fixturePath("bundles/Notes-2.0/Notes.app"))
    #expect(update.status == 0, "\(update.err)")
    let report = try #require(try JSONSerialization.jsonObject(with: Data(update.stdout)) as? [String: Any])
    let preUpdate = try #require(report["preUpdateSnapshot"] as? String)
    let newHome = try home(device)
    try Data("written by 2.0".utf8).write(to: URL(fileURLWithPath: newHome + "/Documents/new-in-2.txt"))
    try Data("changed".utf8).write(to: URL(fileURLWithPath: newHome + "/Documents/a.txt"))
    return (device, before, preUpdate)
  }

  @Test func updateTakesATaggedPreUpdateSnapshotAndKeepsTheKeychain() throws {
    let (device, _, preUpdate) = try updatedNotes()
    let snapshots = try #require(try device.json("snapshots", "com.example.notes") as? [[String: Any]])
    #expect(snapshots.map { $0["snapshot"] as? String } == [preUpdate])
    #expect(try device.run("snapshots", "com.example.notes").out.contains("pre-update"))
    let secret = try device.run(
      "keychain", "com.example.notes", "get", "--service", "sync", "--account", "ada")
    #expect(secret.status == 0 && secret.out == "s3cret")
  }

  @Test func revertBringsBackTheOldVersionAndDataAndSavesTheNewer() throws {
    let (device, before, preUpdate) = try updatedNotes()
    let updatedHome = try home(device)
    let result = try device.run("--json", "revert", "com.example.notes")
    #expect(result.status == 0, "\(result.err)")
    let report = try #require(try JSONSerialization.jsonObject(with: Data(result.stdout)) as? [String: Any])
    #expect(report["oldVersion"] as? String == "2.0" && report["newVersion"] as? String == "1.0")
    #expect(report["restoredSnapshot"] as? String == preUpdate)
    let saved = try #require(report["preRevertSnapshot"] as? String)
    let revertedHome = try home(device)
    #expect(revertedHome != updatedHome)
    #expect(!FileManager.default.fileExists(atPath: updatedHome))
    // Documents and Library as before the update; Caches starts empty as after any restore.
    #expect(
      try dataManifest(revertedHome).filter { !$0.key.hasPrefix("Library/Caches/") }
        == before.filter { !$0.key.hasPrefix("Library/Caches/") })
    let list = try #require(try device.json("list") as? [[String: Any]])
    #expect(list.count == 1 && list[0]["version"] as? String == "1.0")
    let inspect = try #require(try device.json("inspect", "com.example.notes") as? [String: Any])
    #expect((inspect["seal"] as? [String: Any])?["valid"] as? Bool == true)
    // Nothing is lost: the newer data is in the pre-revert snapshot.
    let diff = try device.run("--json", "diff", preUpdate, saved)
    #expect(diff.status == 0, "\(diff.err)")
    #expect(diff.out.contains("Documents/new-in-2.txt"))
    // The keychain is untouched.
    let secret = try device.run(
      "keychain", "com.example.notes", "get", "--service", "sync", "--account", "ada")
    #expect(secret.out == "s3cret")

    // A second revert without a new update is refused, and changes nothing.
    let again = try device.run("revert", "com.example.notes")
    #expect(again.status == 66)
    #expect(again.err.contains("already reverted to 1.0"))
    #expect(try home(device) == revertedHome)
  }

  @Test func revertWithoutAnUpdateIsRefused() throws {
    let device = Device()
    try device.install("Notes-1.0/Notes.app")
    let result = try device.run("revert", "com.example.notes")
    #expect(result.status == 66)
    #expect(result.err.contains("has not been updated"))
  }

  /// Killed at each step, the next command leaves either the updated app with its data
  /// or the reverted app with the old data — never a mix, never two homes.
  @Test(arguments: [
    "revert.staged", "update.journaled", "update.moved", "update.committed", "update.switched",
    "update.finished", "session.deferred-removal",
  ])
  func killedRevertIsFinishedOrRolledBack(_ point: String) throws {
    let (device, before, _) = try updatedNotes()
    let updated = try dataManifest(try home(device))
    let killed = try device.run("revert", "com.example.notes", environment: ["APPBOX_CRASH_AT": point])
    #expect(killed.status == 128 + SIGKILL, "\(point): \(killed.err)")
    let list = try #require(try device.json("list") as? [[String: Any]])
    #expect(list.count == 1)
    let id = try #require(list.first?["containerID"] as? String)
    #expect(device.applicationRootEntries() == [id], "\(point): \(device.applicationRootEntries())")
    let data = try dataManifest(device.root + "/ApplicationRoot/" + id)
    if list.first?["version"] as? String == "1.0" {
      #expect(
        data.filter { !$0.key.hasPrefix("Library/Caches/") }
          == before.filter { !$0.key.hasPrefix("Library/Caches/") })
    } else {
      #expect(data == updated, "\(point)")
    }
  }
}
