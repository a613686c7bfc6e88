import AppboxCore
import AppboxTestSupport
import Foundation
import Glibc
import Testing

/// `reset`, `offload` (and installing again) and `device erase`: what they leave on disk,
/// how running apps block them, and what a SIGKILL at each step leaves (issue 29).
struct LifecycleEndToEndTests {
  static let notes = "com.example.notes"

  /// Notes 1.0 installed with data everywhere and one keychain item; returns the device and home.
  func notesWithData() throws -> (Device, String) {
    let device = Device()
    let id = try device.install("Notes-1.0/Notes.app")
    let home = device.home(id)
    try populateAwkwardData(home: home)
    for (relative, text) in [
      ("Library/Preferences/com.example.notes.plist", "prefs"), ("Library/Caches/c.bin", "cache"),
      ("tmp/scratch", "temp"), ("Documents/a.txt", "a"),
    ] {
      try Data(text.utf8).write(to: URL(fileURLWithPath: home + "/" + relative))
    }
    let added = try device.run(
      "keychain", Self.notes, "add", "--service", "sync", "--account", "me", "--data", "token")
    #expect(added.status == 0, "\(added.err)")
    return (device, home)
  }

  /// Every entry of a home, as paths relative to it.
  func entries(_ home: String) -> Set<String> {
    Set(FileManager.default.enumerator(atPath: home)?.allObjects.compactMap { $0 as? String } ?? [])
  }

  /// The home as a fresh install leaves it: the bundle and the empty standard directories.
  func expectResetHome(_ device: Device, _ home: String, _ context: String) throws {
    let data = entries(home).filter { !$0.hasPrefix("Notes.app") }
    #expect(
      data == [
        "Documents", "Library", "Library/Preferences", "Library/Caches", "tmp",
        ".com.apple.mobile_container_manager.metadata.plist",
      ], "\(context): \(data.sorted())")
    let inspect = try #require(try device.json("inspect", Self.notes) as? [String: Any])
    #expect((inspect["seal"] as? [String: Any])?["valid"] as? Bool == true, "\(context)")
    #expect(
      device.applicationRootEntries() == [splitPath(home).name],
      "\(context): \(device.applicationRootEntries())")
  }

  @Test func resetEmptiesTheDataAndKeepsTheBundleTheContainerAndTheKeychain() throws {
    let (device, home) = try notesWithData()
    let id = splitPath(home).name
    let result = try device.run("--json", "reset", Self.notes)
    #expect(result.status == 0, "\(result.err)")
    let report = try #require(try JSONSerialization.jsonObject(with: Data(result.stdout)) as? [String: Any])
    #expect(report["containerID"] as? String == id)
    #expect(report["emptied"] as? [String] == ["Documents", "Library", "tmp"])
    try expectResetHome(device, home, "reset")
    // The keychain stays without --keychain, and goes with it.
    let get = try device.run("keychain", Self.notes, "get", "--service", "sync", "--account", "me")
    #expect(get.status == 0 && get.out == "token", "\(get.err)")
    let withKeychain = try device.run("--json", "reset", Self.notes, "--keychain")
    #expect(withKeychain.status == 0, "\(withKeychain.err)")
    let second = try JSONSerialization.jsonObject(with: Data(withKeychain.stdout)) as? [String: Any]
    #expect(second?["deletedKeychainItems"] as? Int == 1)
    let gone = try device.run("keychain", Self.notes, "get", "--service", "sync", "--account", "me")
    #expect(gone.status == 66)
    // The app launches as a fresh install does.
    let launch = try device.run("launch", Self.notes)
    #expect(launch.status == 0, "\(launch.err)")
    #expect(launch.out.contains("1 note(s)"))
  }

  @Test func aRunningAppBlocksResetOffloadUninstallAndEraseUnlessTerminated() throws {
    let (device, home) = try notesWithData()
    let before = try treeManifest(home)
    let running = try device.startSleepingApp(Self.notes, home: home)
    defer { running.stop() }
    for command in [
      ["reset", Self.notes], ["offload", Self.notes], ["uninstall", Self.notes], ["device", "erase"],
    ] {
      let refused = try appbox(command, root: device.root)
      #expect(refused.status == 75, "\(command): \(refused.err)")
      #expect(refused.err.contains("running"), "\(command): \(refused.err)")
    }
    var after = try treeManifest(home)
    after.removeValue(forKey: "Documents/started")
    #expect(after == before)
    let reset = try device.run("reset", Self.notes, "--terminate")
    #expect(reset.status == 0, "\(reset.err)")
    #expect(reset.err.contains("Terminated com.example.notes"))
    running.appbox.waitUntilExit()
    #expect(
      running.appbox.terminationStatus == 128 + SIGTERM || running.appbox.terminationStatus == 128 + SIGKILL)
    try expectResetHome(device, home, "reset --terminate")
  }

  @Test(arguments: [
    "reset.journaled", "reset.moved-one", "reset.recreated", "reset.finished", "session.deferred-removal",
  ])
  func aResetKilledAtEachStepIsFinished(_ point: String) throws {
    let (device, home) = try notesWithData()
    let killed = try device.run("reset", Self.notes, "--keychain", environment: ["APPBOX_CRASH_AT": point])
    #expect(killed.status == 128 + SIGKILL, "\(point): \(killed.err)")
    // The next command finishes it: the data is gone, the keychain item too, no discard left.
    let list = try device.run("list")
    #expect(list.status == 0, "\(point): \(list.err)")
    try expectResetHome(device, home, point)
    let gone = try device.run("keychain", Self.notes, "get", "--service", "sync", "--account", "me")
    #expect(gone.status == 66, "\(point): \(gone.err)")
  }

  @Test func offloadKeepsTheDataAndInstallingAgainPutsTheBundleBackIntoTheSameHome() throws {
    let (device, home) = try notesWithData()
    let id = splitPath(home).name
    let data = try treeManifest(home, skipping: ["Notes.app"])
    let result = try device.run("--json", "offload", Self.notes)
    #expect(result.status == 0, "\(result.err)")
    #expect(!exists(home + "/Notes.app"))
    #expect(try treeManifest(home) == data)
    let list = try #require(try device.json("list") as? [[String: Any]])
    #expect(list.first?["offloaded"] as? Bool == true)
    #expect(try device.run("list").out.contains("1.0 (offloaded)"))
    for command in [
      ["launch", Self.notes], ["run", Self.notes, "--", "/bin/true"], ["launch", Self.notes, "--detach"],
    ] {
      let refused = try appbox(command, root: device.root)
      #expect(refused.status == 69, "\(command): \(refused.err)")
      #expect(refused.err.contains("offloaded"), "\(command): \(refused.err)")
    }
    let again = try device.run("offload", Self.notes)
    #expect(again.status == 73, "\(again.err)")
    // The same bundle goes back into the same home, with the data and the keychain item.
    let install = try device.run("--json", "install", fixturePath("bundles/Notes-1.0/Notes.app"))
    #expect(install.status == 0, "\(install.err)")
    let reply = try JSONSerialization.jsonObject(with: Data(install.stdout)) as? [String: Any]
    #expect(reply?["containerID"] as? String == id && reply?["reinstalled"] as? Bool == true)
    #expect(try treeManifest(home, skipping: ["Notes.app"]) == data)
    #expect(device.applicationRootEntries() == [id])
    let relisted = try #require(try device.json("list") as? [[String: Any]])
    #expect(relisted.first?["offloaded"] == nil)
    let get = try device.run("keychain", Self.notes, "get", "--service", "sync", "--account", "me")
    #expect(get.out == "token", "\(get.err)")
    let launch = try device.run("launch", Self.notes)
    #expect(launch.status == 0, "\(launch.err)")
  }

  @Test func installingANewerVersionOfAnOffloadedAppUpdatesIt() throws {
    let (device, home) = try notesWithData()
    let id = splitPath(home).name
    let documents = try treeManifest(home + "/Documents")
    #expect(try device.run("offload", Self.notes).status == 0)
    let install = try device.run("--json", "install", fixturePath("bundles/Notes-2.0/Notes.app"))
    #expect(install.status == 0, "\(install.err)")
    let reply = try #require(try JSONSerialization.jsonObject(with: Data(install.stdout)) as? [String: Any])
    let newID = try #require(reply["containerID"] as? String)
    #expect(newID != id && reply["version"] as? String == "2.0")
    #expect(try treeManifest(device.home(newID) + "/Documents") == documents)
    #expect(device.applicationRootEntries() == [newID])
    let list = try #require(try device.json("list") as? [[String: Any]])
    #expect(list.first?["offloaded"] == nil && list.first?["version"] as? String == "2.0")
  }

  @Test(arguments: ["offload.journaled", "offload.moved", "offload.finished", "session.deferred-removal"])
  func anOffloadKilledAtEachStepIsFinished(_ point: String) throws {
    let (device, home) = try notesWithData()
    let data = try treeManifest(home, skipping: ["Notes.app"])
    let killed = try device.run("offload", Self.notes, environment: ["APPBOX_CRASH_AT": point])
    #expect(killed.status == 128 + SIGKILL, "\(point): \(killed.err)")
    let list = try #require(try device.json("list") as? [[String: Any]])
    #expect(list.first?["offloaded"] as? Bool == true, "\(point)")
    #expect(try treeManifest(home) == data, "\(point)")
    #expect(device.applicationRootEntries() == [splitPath(home).name], "\(point)")
  }

  @Test(arguments: ["reinstall.journaled", "reinstall.moved", "reinstall.committed", "reinstall.finished"])
  func aReinstallKilledAtEachStepIsAllOrNothing(_ point: String) throws {
    let (device, home) = try notesWithData()
    let data = try treeManifest(home, skipping: ["Notes.app"])
    #expect(try device.run("offload", Self.notes).status == 0)
    let killed = try device.run(
      "install", fixturePath("bundles/Notes-1.0/Notes.app"), environment: ["APPBOX_CRASH_AT": point])
    #expect(killed.status == 128 + SIGKILL, "\(point): \(killed.err)")
    let list = try #require(try device.json("list") as? [[String: Any]])
    let offloaded = list.first?["offloaded"] as? Bool == true
    // Before the commit it is offloaded still (no bundle); after it, installed (a valid seal).
    #expect(offloaded == (point == "reinstall.journaled" || point == "reinstall.moved"), "\(point)")
    #expect(exists(home + "/Notes.app") == !offloaded, "\(point)")
    #expect(try treeManifest(home, skipping: ["Notes.app"]) == data, "\(point)")
    #expect(
      device.applicationRootEntries() == [splitPath(home).name],
      "\(point): \(device.applicationRootEntries())")
    if offloaded {
      #expect(try device.run("install", fixturePath("bundles/Notes-1.0/Notes.app")).status == 0, "\(point)")
    }
    let launch = try device.run("launch", Self.notes)
    #expect(launch.status == 0, "\(point): \(launch.err)")
  }
}
