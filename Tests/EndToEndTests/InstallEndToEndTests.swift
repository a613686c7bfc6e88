import AppboxCore
import AppboxPlist
import AppboxTestSupport
import Foundation
import Glibc
import Testing

/// A throwaway device root plus helpers to drive the real `appbox` binary against it.
final class Device: @unchecked Sendable {
  let dir: TemporaryDirectory
  var root: String { dir.url("root") }

  /// A device in a fresh temp directory below `base`.
  init(base: String = "/tmp") { dir = TemporaryDirectory("e2e", base: base) }

  @discardableResult
  func run(_ arguments: String..., environment: [String: String] = [:], input: [UInt8] = []) throws
    -> ProcessResult
  {
    try appbox(arguments, root: root, environment: environment, input: input)
  }

  func json(_ arguments: String...) throws -> Any {
    let result = try appbox(["--json"] + arguments, root: root)
    #expect(result.status == 0, "\(arguments): \(result.err)")
    return try JSONSerialization.jsonObject(with: Data(result.stdout))
  }

  /// Installs a fixture bundle; returns its container id.
  @discardableResult
  func install(_ fixture: String) throws -> String { try install(path: fixturePath("bundles/" + fixture)) }

  /// Installs the bundle at `path`; returns its container id.
  @discardableResult
  func install(path: String) throws -> String {
    let result = try appbox(["--json", "install", path], root: root)
    #expect(result.status == 0, "install \(path): \(result.err)")
    let object = try JSONSerialization.jsonObject(with: Data(result.stdout)) as? [String: Any]
    return object?["containerID"] as? String ?? ""
  }

  /// Names in ApplicationRoot (homes and any debris).
  func applicationRootEntries() -> [String] {
    ((try? FileManager.default.contentsOfDirectory(atPath: root + "/ApplicationRoot")) ?? []).sorted()
  }
}

struct InstallEndToEndTests {
  @Test func installCreatesTheHomeLayoutAndSeal() throws {
    let device = Device()
    let result = try device.run("--json", "install", fixturePath("bundles/Notes-1.0/Notes.app"))
    #expect(result.status == 0, "\(result.err)")
    let object = try #require(try JSONSerialization.jsonObject(with: Data(result.stdout)) as? [String: Any])
    #expect(Set(object.keys) == ["app", "containerID", "home", "version"])
    #expect(object["app"] as? String == "com.example.notes")
    #expect(object["version"] as? String == "1.0")
    let id = try #require(object["containerID"] as? String)
    #expect(UUID(uuidString: id) != nil && id == id.uppercased())
    let home = device.root + "/ApplicationRoot/" + id
    #expect(object["home"] as? String == home)

    var st = stat()
    #expect(stat(home, &st) == 0 && st.st_mode & 0o777 == 0o700)
    for directory in ["Notes.app", "Documents", "Library/Preferences", "Library/Caches", "tmp"] {
      var isDirectory: ObjCBool = false
      #expect(FileManager.default.fileExists(atPath: home + "/" + directory, isDirectory: &isDirectory))
      #expect(isDirectory.boolValue, "\(directory)")
    }
    // The bundle is a byte-for-byte copy, sealed with a CodeResources naming every file.
    let original = try Data(
      contentsOf: URL(fileURLWithPath: fixturePath("bundles/Notes-1.0/Notes.app/Notes")))
    #expect(try Data(contentsOf: URL(fileURLWithPath: home + "/Notes.app/Notes")) == original)
    let seal = try Data(contentsOf: URL(fileURLWithPath: home + "/Notes.app/_CodeSignature/CodeResources"))
    let plist = try PropertyList.decode(seal)
    #expect(plist["files2"]?["Notes"]?["hash2"]?.data?.count == 32)
    #expect(plist["files2"]?["Localized"]?["symlink"]?.string == "Base.lproj")
    let metadata = try PropertyList.decode(
      try Data(contentsOf: URL(fileURLWithPath: home + "/.com.apple.mobile_container_manager.metadata.plist"))
    )
    #expect(metadata["MCMMetadataIdentifier"]?.string == "com.example.notes")
    #expect(device.applicationRootEntries() == [id])
  }

  @Test func installOfAnInstalledAppIsRefusedWith73() throws {
    let device = Device()
    let id = try device.install("Notes-1.0/Notes.app")
    let again = try device.run("install", fixturePath("bundles/Notes-2.0/Notes.app"))
    #expect(again.status == 73)
    #expect(again.err.contains("already installed"))
    #expect(again.err.contains("appbox update"))
    #expect(again.err.split(separator: "\n").count == 1)
    #expect(device.applicationRootEntries() == [id])
  }

  @Test func binaryInfoPlistAndProvidedSealAreAccepted() throws {
    let device = Device()
    try device.install("Notes-2.0/Notes.app")
    try device.install("Journal-1.0/Journal.app")
    let apps = try #require(try device.json("list") as? [[String: Any]])
    #expect(apps.map { $0["app"] as? String } == ["com.example.journal", "com.example.notes"])
    #expect(apps.map { $0["version"] as? String } == ["1.0", "2.0"])
    #expect(apps.allSatisfy { Set($0.keys) == ["app", "containerID", "version"] })
  }

  @Test func inspectReportsSealAndPolicies() throws {
    let device = Device()
    let id = try device.install("Notes-1.0/Notes.app")
    let home = device.root + "/ApplicationRoot/" + id
    try Data(repeating: 7, count: 1000).write(to: URL(fileURLWithPath: home + "/Documents/a.bin"))
    try Data(repeating: 7, count: 500).write(to: URL(fileURLWithPath: home + "/Library/Caches/c.bin"))
    let report = try #require(try device.json("inspect", "com.example.notes") as? [String: Any])
    #expect((report["seal"] as? [String: Any])?["valid"] as? Bool == true)
    let locations = try #require(report["locations"] as? [[String: Any]])
    let documents = try #require(locations.first { $0["name"] as? String == "Documents" })
    #expect(documents["files"] as? Int == 1 && documents["bytes"] as? Int == 1000)
    #expect(documents["backedUp"] as? Bool == true)
    let caches = try #require(locations.first { $0["name"] as? String == "Library/Caches" })
    #expect(caches["backedUp"] as? Bool == false)
    #expect(caches["policy"] as? String == "excluded: Library/Caches is never backed up")

    // Tamper with the bundle: inspect names the changed file.
    try Data("#!/bin/sh\necho evil\n".utf8).write(to: URL(fileURLWithPath: home + "/Notes.app/Notes"))
    let tampered = try #require(try device.json("inspect", id) as? [String: Any])
    let seal = try #require(tampered["seal"] as? [String: Any])
    #expect(seal["valid"] as? Bool == false)
    #expect(seal["path"] as? String == "Notes")
    let text = try device.run("inspect", id)
    #expect(text.out.contains("broken: 'Notes' was modified"))
  }

  @Test func pathPrintsEachLocation() throws {
    let device = Device()
    let id = try device.install("Notes-1.0/Notes.app")
    let home = device.root + "/ApplicationRoot/" + id
    let expected = [
      "data": home, "bundle": home + "/Notes.app", "documents": home + "/Documents",
      "library": home + "/Library",
      "preferences": home + "/Library/Preferences", "caches": home + "/Library/Caches", "tmp": home + "/tmp",
    ]
    for (location, path) in expected {
      let result = try device.run("path", "com.example.notes", location)
      #expect(result.status == 0)
      #expect(result.out == path + "\n")
    }
    #expect(try device.run("path", id).out == home + "\n")
    #expect(try device.run("path", id, "nowhere").status == 64)
  }

  @Test func uninstallRemovesEverythingEvenReadOnlyDeepTrees() throws {
    let device = Device()
    let id = try device.install("Notes-1.0/Notes.app")
    let home = device.root + "/ApplicationRoot/" + id
    var deep = home + "/Documents"
    for level in 0..<120 { deep += "/level\(level)" }
    try FileManager.default.createDirectory(atPath: deep, withIntermediateDirectories: true)
    try Data("x".utf8).write(to: URL(fileURLWithPath: deep + "/leaf"))
    #expect(chmod(home + "/Documents/level0", 0o500) == 0)
    let result = try device.run("uninstall", "com.example.notes")
    #expect(result.status == 0, "\(result.err)")
    #expect(device.applicationRootEntries().isEmpty)
    #expect(try device.run("inspect", "com.example.notes").status == 66)
    #expect(try device.run("uninstall", "com.example.notes").status == 66)
  }

  @Test func unknownAppIs66WithOneLine() throws {
    let device = Device()
    #expect(try device.run("device", "init").status == 0)
    for command in [["inspect", "com.nope"], ["path", "com.nope"], ["uninstall", "com.nope"]] {
      let result = try appbox(command, root: device.root)
      #expect(result.status == 66)
      #expect(result.err.hasPrefix("Error: No installed app 'com.nope'"))
      #expect(result.err.split(separator: "\n").count == 1)
    }
  }

  @Test func killedInstallIsFinishedOrRolledBackByTheNextCommand() throws {
    let device = Device()
    try device.run("device")
    // Killed after the registry commit, before the rename: the next command finishes it.
    let killed = try device.run(
      "install", fixturePath("bundles/Notes-1.0/Notes.app"),
      environment: ["APPBOX_CRASH_AT": "install.committed"])
    #expect(killed.status == 128 + SIGKILL)
    #expect(device.applicationRootEntries().first?.hasPrefix(".staging-") == true)
    let list = try #require(try device.json("list") as? [[String: Any]])
    #expect(list.count == 1)
    try device.run("device", "init")  // any mutating command recovers
    let id = try #require(list.first?["containerID"] as? String)
    #expect(device.applicationRootEntries() == [id])
    #expect(try device.run("inspect", id).status == 0)

    // Killed mid-uninstall: the next command completes the uninstall.
    let uninstall = try device.run("uninstall", id, environment: ["APPBOX_CRASH_AT": "uninstall.trashed"])
    #expect(uninstall.status == 128 + SIGKILL)
    try device.run("device", "init")
    #expect(device.applicationRootEntries().isEmpty)
    #expect(try device.run("inspect", id).status == 66)
  }
}

struct DeviceLayoutTests {
  /// ApplicationRoot carries ext4's "top of unrelated hierarchies" flag, so homes spread
  /// over block groups. Only checkable where the file system has inode flags (lsattr works).
  @Test func applicationRootIsMarkedAsATopDirectory() throws {
    let device = Device()
    #expect(try device.run("device", "init").status == 0)
    let attributes = try runProcess("/usr/bin/lsattr", ["-d", device.root + "/ApplicationRoot"])
    if attributes.status == 0 {
      let flags = attributes.out.split(separator: " ").first.map(String.init) ?? ""
      #expect(flags.contains("T"), "lsattr: \(attributes.out)")
    }
  }
}

struct RootLockTests {
  /// While the root lock is held exclusively (as when the device is created, or a killed
  /// appbox's work is finished), changing commands wait briefly, then exit 75 with one line;
  /// reads do not wait. (Changing commands share the root lock: see ConcurrencyTests.)
  @Test func aSecondMutatingCommandIsBusy() throws {
    let device = Device()
    #expect(try device.run("device", "init").status == 0)
    let holder = try FileLock.acquire(device.root + "/.appbox/lock", what: "test")
    let busy = try device.run(
      "install", fixturePath("bundles/Notes-1.0/Notes.app"), environment: ["APPBOX_LOCK_TIMEOUT": "0.3"])
    #expect(busy.status == 75)
    #expect(busy.err.contains("busy") && busy.err.split(separator: "\n").count == 1)
    #expect(device.applicationRootEntries().isEmpty)
    #expect(try device.run("list").status == 0)
    withExtendedLifetime(holder) {}
  }
}
