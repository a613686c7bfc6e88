import AppboxCore
import AppboxTestSupport
import Foundation
import Glibc
import Testing

/// What uninstall, reset and an interrupted uninstall do to keychain items.
struct KeychainLifecycleEndToEndTests {
  static let notes = "com.example.notes"
  static let journal = "com.example.journal"
  static let shared = "ABCDE12345.shared"

  /// Notes with a private and a shared item, Journal with a private one.
  func seeded() throws -> Device {
    let device = Device()
    try device.install("Notes-1.0/Notes.app")
    try device.install("Journal-1.0/Journal.app")
    try add(device, Self.notes, "private")
    try add(device, Self.notes, "team", group: Self.shared)
    try add(device, Self.journal, "journal")
    return device
  }

  func add(_ device: Device, _ app: String, _ service: String, group: String? = nil) throws {
    var arguments = [
      "keychain", app, "add", "--service", service, "--account", "a", "--data", service + "-secret",
    ]
    if let group { arguments += ["--group", group] }
    let result = try appbox(arguments, root: device.root)
    #expect(result.status == 0, "\(result.err)")
  }

  func services(_ device: Device, _ app: String) throws -> [String] {
    let list = try device.json("keychain", app, "list") as? [[String: Any]] ?? []
    return list.compactMap { $0["service"] as? String }.sorted()
  }

  @Test func uninstallRemovesPrivateItemsAndKeepsThoseAnotherAppStillLists() throws {
    let device = try seeded()
    #expect(try device.run("uninstall", Self.notes).status == 0)
    #expect(try services(device, Self.journal) == ["journal", "team"])
    // Reinstalled, Notes finds its private item gone and the team item still there.
    try device.install("Notes-1.0/Notes.app")
    #expect(try services(device, Self.notes) == ["team"])
    // Once no installed app lists the shared group, its items go with the last one.
    #expect(try device.run("uninstall", Self.notes).status == 0)
    #expect(try device.run("uninstall", Self.journal).status == 0)
    try device.install("Journal-1.0/Journal.app")
    #expect(try services(device, Self.journal) == [])
  }

  @Test func resetDeletesOnlyWhatNoOtherAppCanSee() throws {
    let device = try seeded()
    let reset = try #require(try device.json("keychain", Self.notes, "reset") as? [String: Any])
    #expect(reset["deleted"] as? Int == 1)
    #expect(try services(device, Self.notes) == ["team"])
    #expect(try services(device, Self.journal) == ["journal", "team"])
    let again = try device.run("keychain", Self.notes, "reset")
    #expect(again.status == 0 && again.out.hasPrefix("Deleted 0 keychain items"))
  }

  @Test func anInterruptedUninstallFinishesItsKeychainCleanup() throws {
    let device = try seeded()
    let killed = try device.run(
      "uninstall", Self.notes, environment: ["APPBOX_CRASH_AT": "uninstall.trashed"])
    #expect(killed.status == 128 + SIGKILL)
    // The app is still registered, its items still there: the next mutating command finishes.
    try device.run("device", "init")
    #expect(try device.run("inspect", Self.notes).status == 66)
    #expect(try services(device, Self.journal) == ["journal", "team"])
    try device.install("Notes-1.0/Notes.app")
    #expect(try services(device, Self.notes) == ["team"])
  }

  @Test func anUnopenableKeychainRefusesTheUninstallBeforeAnythingMoves() throws {
    let device = try seeded()
    let before = device.applicationRootEntries()
    #expect(unlink(device.root + "/Keychains/device.key") == 0)
    let refused = try device.run("uninstall", Self.notes)
    #expect(refused.status == 65)
    #expect(refused.err.contains("device key is missing"))
    #expect(device.applicationRootEntries() == before, "no trash left for later commands to trip on")
    #expect(try device.run("inspect", Self.notes).status == 0)
    #expect(try device.run("install", fixturePath("bundles/Other-1.0/Other.app")).status == 0)
  }
}
