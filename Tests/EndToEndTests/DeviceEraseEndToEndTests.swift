import AppboxCore
import AppboxTestSupport
import Foundation
import Glibc
import Testing

/// `device erase [--keep-backups]`: a freshly initialised device with the same identity.
struct DeviceEraseEndToEndTests {
  /// Notes and Journal (sharing a group) with data, a keychain item and a backup.
  func populatedDevice() throws -> (Device, String) {
    let device = Device()
    let initialised = try device.run("device", "init", "--name", "Erase Me")
    #expect(initialised.status == 0, "\(initialised.err)")
    let id = try device.install("Notes-1.0/Notes.app")
    try device.install("Journal-1.0/Journal.app")
    try writeSampleData(home: device.home(id))
    #expect(
      try device.run(
        "keychain", "com.example.notes", "add", "--service", "s", "--account", "a", "--data", "x"
      )
      .status == 0)
    let backup = try device.run("backup", "com.example.notes")
    #expect(backup.status == 0, "\(backup.err)")
    let udid = try #require((try device.json("device", "show") as? [String: Any])?["udid"] as? String)
    return (device, udid)
  }

  /// The device is empty and keeps its identity; its Backups are there only if `kept`.
  func expectErased(_ device: Device, udid: String, backupsKept: Bool, _ context: String) throws {
    let show = try #require(try device.json("device", "show") as? [String: Any])
    #expect(show["udid"] as? String == udid && show["name"] as? String == "Erase Me", "\(context)")
    #expect((try device.json("list") as? [Any])?.isEmpty == true, "\(context)")
    #expect((try device.json("list", "--groups") as? [Any])?.isEmpty == true, "\(context)")
    #expect(device.applicationRootEntries() == [], "\(context): \(device.applicationRootEntries())")
    let state = (try? FileManager.default.contentsOfDirectory(atPath: device.root + "/.appbox")) ?? []
    #expect(!state.contains { $0.hasPrefix("discard-") }, "\(context): \(state)")
    let snapshots = try device.run("--json", "snapshots")
    let listed = (try? JSONSerialization.jsonObject(with: Data(snapshots.stdout)) as? [Any]) ?? []
    #expect(listed.count == (backupsKept ? 1 : 0), "\(context): \(snapshots.out) \(snapshots.err)")
    // The same app installed again sees no keychain item of before.
    try device.install("Notes-1.0/Notes.app")
    let get = try device.run("keychain", "com.example.notes", "get", "--service", "s", "--account", "a")
    #expect(get.status == 66, "\(context): \(get.err)")
  }

  @Test func eraseLeavesAFreshDeviceWithTheSameIdentity() throws {
    let (device, udid) = try populatedDevice()
    let result = try device.run("--json", "device", "erase")
    #expect(result.status == 0, "\(result.err)")
    let report = try #require(try JSONSerialization.jsonObject(with: Data(result.stdout)) as? [String: Any])
    #expect(report["udid"] as? String == udid)
    #expect(Set(report["apps"] as? [String] ?? []) == ["com.example.notes", "com.example.journal"])
    #expect(
      !exists(device.root + "/Backups")
        || (try? FileManager.default.contentsOfDirectory(
          atPath: device.root + "/Backups"))?.isEmpty == true
    )
    try expectErased(device, udid: udid, backupsKept: false, "erase")
  }

  @Test func keepBackupsKeepsTheSnapshots() throws {
    let (device, udid) = try populatedDevice()
    let result = try device.run("device", "erase", "--keep-backups")
    #expect(result.status == 0, "\(result.err)")
    try expectErased(device, udid: udid, backupsKept: true, "--keep-backups")
    // The kept snapshot restores its data into the app installed again.
    let restore = try device.run("restore", "com.example.notes")
    #expect(restore.status == 0, "\(restore.err)")
    let id = try #require((try device.json("list") as? [[String: Any]])?.first?["containerID"] as? String)
    #expect(exists(device.home(id) + "/Documents/a.txt"))
  }

  @Test(arguments: ["erase.journaled", "erase.moved", "erase.keychain", "erase.registry", "erase.finished"])
  func anEraseKilledAtEachStepIsFinished(_ point: String) throws {
    let (device, udid) = try populatedDevice()
    let killed = try device.run("device", "erase", environment: ["APPBOX_CRASH_AT": point])
    #expect(killed.status == 128 + SIGKILL, "\(point): \(killed.err)")
    try expectErased(device, udid: udid, backupsKept: false, point)
  }
}
