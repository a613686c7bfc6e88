import AppboxCore
import AppboxTestSupport
import Foundation
import Glibc
import Testing

struct UpdateEndToEndTests {
  /// Installs Notes 1.0 with awkward data; returns the device, the home and its data manifest.
  func installedNotes() throws -> (Device, String, [String: String]) {
    let device = Device()
    let id = try device.install("Notes-1.0/Notes.app")
    let home = device.root + "/ApplicationRoot/" + id
    try populateAwkwardData(home: home)
    try Data("temp".utf8).write(to: URL(fileURLWithPath: home + "/tmp/scratch"))
    return (device, home, try dataManifest(home))
  }

  func dataManifest(_ home: String) throws -> [String: String] {
    try treeManifest(home + "/Documents").mapKeys { "Documents/" + $0 }
      .merging(try treeManifest(home + "/Library").mapKeys { "Library/" + $0 }) { a, _ in a }
  }

  @Test func dataSurvivesByteForByteInANewHome() throws {
    let (device, oldHome, before) = try installedNotes()
    let oldID = splitPath(oldHome).name
    let result = try device.run(
      "--json", "update", "com.example.notes", fixturePath("bundles/Notes-2.0/Notes.app"))
    #expect(result.status == 0, "\(result.err)")
    let report = try #require(try JSONSerialization.jsonObject(with: Data(result.stdout)) as? [String: Any])
    let newID = try #require(report["newContainerID"] as? String)
    #expect(report["oldContainerID"] as? String == oldID)
    #expect(newID != oldID)
    #expect(report["oldVersion"] as? String == "1.0" && report["newVersion"] as? String == "2.0")
    #expect((report["dropped"] as? [String: Any])?["tmpFiles"] as? Int == 1)
    let newHome = device.root + "/ApplicationRoot/" + newID
    #expect(try dataManifest(newHome) == before)
    #expect(!FileManager.default.fileExists(atPath: oldHome))
    #expect(device.applicationRootEntries() == [newID])
    #expect(try FileManager.default.contentsOfDirectory(atPath: newHome + "/tmp").isEmpty)
    let list = try #require(try device.json("list") as? [[String: Any]])
    #expect(
      list.count == 1 && list[0]["containerID"] as? String == newID && list[0]["version"] as? String == "2.0")
    // The new bundle is installed and sealed.
    let inspect = try #require(try device.json("inspect", "com.example.notes") as? [String: Any])
    #expect((inspect["seal"] as? [String: Any])?["valid"] as? Bool == true)
  }

  @Test func downgradesAndForeignBundlesAreRefusedAndTheHomeIsUntouched() throws {
    let device = Device()
    let id = try device.install("Notes-2.0/Notes.app")
    let home = device.root + "/ApplicationRoot/" + id
    try populateAwkwardData(home: home)
    let before = try treeManifest(home)
    let downgrade = try device.run("update", "com.example.notes", fixturePath("bundles/Notes-1.0/Notes.app"))
    #expect(downgrade.status == 65)
    #expect(downgrade.err.contains("from 2.0 to 1.0: that is a downgrade"))
    let same = try device.run("update", "com.example.notes", fixturePath("bundles/Notes-2.0/Notes.app"))
    #expect(same.status == 65)
    let foreign = try device.run(
      "update", "com.example.notes", fixturePath("bundles/Journal-1.0/Journal.app"))
    #expect(foreign.status == 65)
    #expect(foreign.err.contains("the identifiers differ"))
    #expect(try treeManifest(home) == before)
    #expect(device.applicationRootEntries() == [id])
    // With --allow-downgrade it goes through.
    let allowed = try device.run(
      "update", "com.example.notes", fixturePath("bundles/Notes-1.0/Notes.app"),
      "--allow-downgrade")
    #expect(allowed.status == 0, "\(allowed.err)")
  }

  @Test func stalePathsAreReported() throws {
    let (device, oldHome, _) = try installedNotes()
    try Data("{\"db\": \"\(oldHome)/Documents/x\"}".utf8).write(
      to: URL(fileURLWithPath: oldHome + "/Documents/config.json"))
    let result = try device.run(
      "--json", "update", "com.example.notes", fixturePath("bundles/Notes-2.0/Notes.app"))
    let report = try #require(try JSONSerialization.jsonObject(with: Data(result.stdout)) as? [String: Any])
    #expect(report["staleAbsolutePaths"] as? [String] == ["Documents/config.json"])
    #expect(
      result.err.contains(
        "warning: 1 file(s) still mention the old home's absolute path (Documents/config.json)"))
  }

  /// A SIGKILL at each journal step: the next command leaves the app installed once, in one
  /// home, with all of its data.
  @Test(arguments: [
    "update.journaled", "update.moved-one", "update.moved", "update.committed", "update.switched",
    "update.finished", "session.deferred-removal", "filetree.descend",
  ])
  func killAtEachStepIsRecovered(_ point: String) throws {
    let (device, _, before) = try installedNotes()
    let killed = try device.run(
      "update", "com.example.notes", fixturePath("bundles/Notes-2.0/Notes.app"),
      environment: ["APPBOX_CRASH_AT": point])
    #expect(killed.status == 128 + SIGKILL, "\(point): \(killed.err)")
    try expectInstalledOnceWithData(device, before, point)
  }

  /// The old home is renamed to trash before the report and deleted after it: the report is
  /// out while the trash still exists, and the trash is gone when the command ends.
  @Test func theOldHomeIsDeletedAfterTheReport() throws {
    let (device, oldHome, before) = try installedNotes()
    let oldID = splitPath(oldHome).name
    let paused = try device.startPausing(
      at: "session.deferred-removal", "--json", "update", "com.example.notes",
      fixturePath("bundles/Notes-2.0/Notes.app"))
    #expect(paused.waitUntilPaused())
    let trash = device.root + "/ApplicationRoot/.trash-" + oldID
    #expect(FileManager.default.fileExists(atPath: trash + "/tmp/scratch"))
    // The report is complete already, and the app is usable (its lock released).
    let list = try #require(try device.json("list") as? [[String: Any]])
    #expect(list.first?["version"] as? String == "2.0")
    let result = paused.finish()
    #expect(result.status == 0, "\(String(decoding: result.stderr, as: UTF8.self))")
    let report = try #require(try JSONSerialization.jsonObject(with: Data(result.stdout)) as? [String: Any])
    let durations = try #require(report["durations"] as? [String: Any])
    #expect(durations["survey"] is Double && durations["migration"] is Double)
    #expect(!FileManager.default.fileExists(atPath: trash))
    try expectInstalledOnceWithData(device, before, "after the deferred removal")
  }

  func expectInstalledOnceWithData(_ device: Device, _ before: [String: String], _ label: String) throws {
    let list = try #require(try device.json("list") as? [[String: Any]], "\(label)")
    #expect(list.count == 1, "\(label)")
    let id = try #require(list.first?["containerID"] as? String)
    #expect(device.applicationRootEntries() == [id], "\(label): \(device.applicationRootEntries())")
    #expect(try dataManifest(device.root + "/ApplicationRoot/" + id) == before, "\(label)")
    #expect(
      ((try? FileManager.default.contentsOfDirectory(atPath: device.root + "/.appbox/journal")) ?? []).isEmpty
    )
  }

  /// Black box: SIGKILL `appbox update` at random moments, then check after the next command.
  @Test func randomKillsNeverLoseData() throws {
    var generator = SystemRandomNumberGenerator()
    for run in 0..<50 {
      let (device, _, before) = try installedNotes()
      let process = try device.start(
        "--quiet", "update", "com.example.notes", fixturePath("bundles/Notes-2.0/Notes.app"))
      usleep(UInt32.random(in: 0...60_000, using: &generator))
      kill(process.processIdentifier, SIGKILL)
      process.waitUntilExit()
      try expectInstalledOnceWithData(device, before, "run \(run)")
    }
  }
}

extension Dictionary where Key == String {
  func mapKeys(_ transform: (String) -> String) -> [String: Value] {
    Dictionary(uniqueKeysWithValues: map { (transform($0.key), $0.value) })
  }
}

struct UpdateWhileRunningTests {
  @Test func aRunningAppIsNotUpdated() throws {
    let device = Device()
    let id = try device.install("Notes-1.0/Notes.app")
    let app = try device.startSleepingApp("com.example.notes", home: device.root + "/ApplicationRoot/" + id)
    defer { app.stop() }
    let result = try device.run("update", "com.example.notes", fixturePath("bundles/Notes-2.0/Notes.app"))
    #expect(result.status == 75, "\(result.err)")
    #expect(result.err.contains("running"))
    #expect(device.applicationRootEntries() == [id])
  }
}
