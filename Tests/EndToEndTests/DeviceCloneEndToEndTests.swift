import AppboxCore
import AppboxTestSupport
import Foundation
import Glibc
import Testing

/// `device clone DEST [--same-device|--new-device]` (issue 29).
struct DeviceCloneEndToEndTests {
  static let notes = "com.example.notes"

  /// Notes with the sample data (every kind of entry), two keychain items (one this-device-only)
  /// and a backup.
  func template() throws -> (Device, String) {
    let device = Device()
    let id = try device.install("Notes-1.0/Notes.app")
    try writeSampleData(home: device.home(id))
    for (account, accessible) in [("portable", "when-unlocked"), ("local", "when-unlocked-this-device-only")]
    {
      let added = try device.run(
        "keychain", Self.notes, "add", "--service", "s", "--account", account, "--data", account,
        "--accessible",
        accessible)
      #expect(added.status == 0, "\(added.err)")
    }
    #expect(try device.run("backup", Self.notes).status == 0)
    return (device, id)
  }

  func udid(_ root: String) throws -> String? {
    let show = try appbox(["--json", "device", "show"], root: root)
    return (try? JSONSerialization.jsonObject(with: Data(show.stdout)) as? [String: Any])?["udid"] as? String
  }

  func keychainGet(_ root: String, _ account: String) throws -> ProcessResult {
    try appbox(["keychain", Self.notes, "get", "--service", "s", "--account", account], root: root)
  }

  @Test func aSameDeviceCloneIsAnIndependentCopyWithTheSameIdentity() throws {
    let (device, id) = try template()
    let before = try treeManifest(device.home(id))
    let destination = device.dir.url("clone")
    let result = try device.run("--json", "device", "clone", destination)
    #expect(result.status == 0, "\(result.err)")
    let report = try #require(try JSONSerialization.jsonObject(with: Data(result.stdout)) as? [String: Any])
    #expect(report["newDevice"] as? Bool == false && (report["files"] as? Int ?? 0) > 10)
    let sourceUDID = try udid(device.root)
    #expect(try udid(destination) == sourceUDID)
    // The same apps, homes byte for byte (modes, xattrs, links), keychain and snapshots.
    #expect(try treeManifest(destination + "/ApplicationRoot/" + id) == before)
    #expect(try keychainGet(destination, "local").out == "local")
    #expect(try keychainGet(destination, "portable").out == "portable")
    let snapshots = try appbox(["--json", "snapshots"], root: destination)
    #expect(((try? JSONSerialization.jsonObject(with: Data(snapshots.stdout))) as? [Any])?.count == 1)
    #expect(try appbox(["launch", Self.notes], root: destination).status == 0)
    // Independent: what the clone's app writes is not in the template.
    #expect(try treeManifest(device.home(id)) == before)
    #expect(try appbox(["check", "--read-data"], root: destination).status == 0)
    // No staging copy is left beside it; a second clone to the same place is refused.
    #expect(
      try FileManager.default.contentsOfDirectory(atPath: device.dir.url("")).filter {
        $0.hasPrefix(".clone")
      } == [])
    let again = try device.run("device", "clone", destination)
    #expect(again.status == 73, "\(again.err)")
  }

  @Test func aNewDeviceCloneHasANewIdentityAndDropsThisDeviceOnlyItems() throws {
    let (device, _) = try template()
    let destination = device.dir.url("second")
    let result = try device.run("--json", "device", "clone", destination, "--new-device")
    #expect(result.status == 0, "\(result.err)")
    let report = try #require(try JSONSerialization.jsonObject(with: Data(result.stdout)) as? [String: Any])
    #expect(report["keychainResealed"] as? Int == 1 && report["keychainDropped"] as? Int == 1)
    let newUDID = try udid(destination)
    let oldUDID = try udid(device.root)
    #expect(newUDID != nil && newUDID != oldUDID)
    #expect(
      contents(destination + "/Keychains/device.key") != contents(device.root + "/Keychains/device.key"))
    #expect(try keychainGet(destination, "portable").out == "portable")
    #expect(try keychainGet(destination, "local").status == 66)
    // The template keeps both.
    #expect(try keychainGet(device.root, "local").out == "local")
    let conflicting = try device.run("device", "clone", device.dir.url("x"), "--new-device", "--same-device")
    #expect(conflicting.status == 64)
  }

  @Test(arguments: ["clone.copied", "clone.prepared", "clone.renamed"])
  func aCloneKilledAtAnyStepLeavesTheDestinationCompleteOrAbsent(_ point: String) throws {
    let (device, id) = try template()
    let destination = device.dir.url("killed")
    let killed = try device.run("device", "clone", destination, environment: ["APPBOX_CRASH_AT": point])
    #expect(killed.status == 128 + SIGKILL, "\(point): \(killed.err)")
    if point == "clone.renamed" {
      let template = try treeManifest(device.home(id))
      #expect(try treeManifest(destination + "/ApplicationRoot/" + id) == template)
      #expect(try appbox(["list"], root: destination).status == 0)
    } else {
      #expect(!exists(destination), "\(point)")
      // The next clone to the same place deletes the leftover copy and succeeds.
      let retry = try device.run("device", "clone", destination)
      #expect(retry.status == 0, "\(point): \(retry.err)")
      let left = try FileManager.default.contentsOfDirectory(atPath: splitPath(destination).directory)
      #expect(!left.contains { $0.contains("appbox-clone") }, "\(point): \(left)")
    }
    // The template works on.
    #expect(try device.run("launch", Self.notes).status == 0)
  }

  @Test func aRunningAppBlocksTheClone() throws {
    let device = Device()
    let id = try device.install("Notes-1.0/Notes.app")
    let running = try device.startSleepingApp(Self.notes, home: device.home(id))
    defer { running.stop() }
    let refused = try device.run("device", "clone", device.dir.url("busy"))
    #expect(refused.status == 75, "\(refused.err)")
    #expect(!exists(device.dir.url("busy")))
  }

  /// A file system with reflinks, made on a loop-mounted image for one test.
  struct ReflinkFileSystem: CustomStringConvertible, Sendable {
    var name: String
    var mkfs: String
    var options: [String]
    var description: String { name }
    var isAvailable: Bool { getuid() == 0 && FileManager.default.fileExists(atPath: mkfs) }
    static let all = [
      ReflinkFileSystem(name: "xfs", mkfs: "/usr/sbin/mkfs.xfs", options: ["-q", "-m", "reflink=1"]),
      ReflinkFileSystem(name: "btrfs", mkfs: "/usr/sbin/mkfs.btrfs", options: ["-q"]),
    ]
  }

  /// On a file system with reflinks (a loop-mounted XFS or btrfs image), every file of the
  /// clone shares its extents with the template's (FICLONE): no data is copied.
  @Test(
    .enabled(
      if: ReflinkFileSystem.all.allSatisfy(\.isAvailable), "needs root, xfsprogs and btrfs-progs"),
    arguments: ReflinkFileSystem.all)
  func theCloneSharesEveryFilesExtents(on fileSystem: ReflinkFileSystem) throws {
    let volume = TemporaryDirectory(fileSystem.name)
    let image = volume.url("image." + fileSystem.name)
    let mount = volume.url("mnt")
    try FileManager.default.createDirectory(atPath: mount, withIntermediateDirectories: true)
    let fd = try FileDescriptor.open(image, O_WRONLY | O_CREAT | O_EXCL, mode: 0o600)
    try fd.closeAfter { try $0.truncate(to: 320 << 20) }
    let made = try runProcess(fileSystem.mkfs, fileSystem.options + [image])
    #expect(made.status == 0, "\(made.err)")
    let mounted = try runProcess("/bin/mount", ["-o", "loop", image, mount])
    try #require(mounted.status == 0, "\(mounted.err)")
    defer {
      if (try? runProcess("/bin/umount", [mount]))?.status != 0 {
        _ = try? runProcess("/bin/umount", ["-l", mount])
      }
    }
    let template = mount + "/template"
    let installed = try appbox(
      ["--json", "install", fixturePath("bundles/Notes-1.0/Notes.app")], root: template)
    let home = try #require(
      (try JSONSerialization.jsonObject(with: Data(installed.stdout)) as? [String: Any])?["home"] as? String)
    var random = SeededRandom(seed: 29)
    var content = [UInt8](repeating: 0, count: 1 << 20)
    content.withUnsafeMutableBytes { random.fill($0) }
    try Data(content).write(to: URL(fileURLWithPath: home + "/Documents/big.bin"))
    let result = try appbox(["--json", "device", "clone", mount + "/job"], root: template)
    #expect(result.status == 0, "\(result.err)")
    let report = try #require(try JSONSerialization.jsonObject(with: Data(result.stdout)) as? [String: Any])
    let files = try #require(report["files"] as? Int)
    let reflinked = try #require(report["reflinked"] as? Int)
    // Every non-empty file was shared (the empty ones have no extents to share).
    let empty = try runProcess("/usr/bin/find", [template, "-type", "f", "-empty"]).out.split(separator: "\n")
      .count
    #expect(reflinked > 0 && reflinked >= files - empty, "\(reflinked) of \(files) (\(empty) empty)")
    let copy = mount + "/job/ApplicationRoot/" + splitPath(home).name + "/Documents/big.bin"
    #expect(contents(copy) == content)
    let extents = try runProcess("/usr/sbin/filefrag", ["-v", copy])
    #expect(extents.out.contains("shared"), "\(extents.out)")
  }
}
