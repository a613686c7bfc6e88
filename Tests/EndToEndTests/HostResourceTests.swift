import AppboxCore
import AppboxTestSupport
import Foundation
import Glibc
import Testing

/// An app that fills the file system its home is on, played on a small ext4 volume with a
/// tiny inode table (512 inodes): appbox's own commands keep working, and once even its
/// reserve is used up they fail as I/O errors (74) with one line naming the full disk.
@Suite(.enabled(if: EncryptedVolume.isAvailable, "needs root and loop devices"))
struct HostResourceTests {
  @Test(arguments: Privilege.testable)
  func appboxKeepsWorkingAfterAnAppUsedEveryInode(_ privilege: Privilege) throws {
    let volume = try EncryptedVolume(megabytes: 64, encrypt: false, inodes: 512)
    for path in [splitPath(volume.path).directory, volume.path] { chmod(path, 0o755) }  // nobody's way in
    let device = try HostileDevice(privilege, on: volume)
    let id = try device.installHostile()
    #expect(exists(device.root + "/.appbox/reserve/complete"), "the reserve is made with the device")
    try device.dir.makeDirectory("bundles/notes")
    try copyTree(fixturePath("bundles/Notes-1.0/Notes.app"), to: device.dir.url("bundles/notes/Notes.app"))
    if device.asNobody {
      _ = try runProcess(
        "/bin/chown", ["-R", "\(HostileDevice.nobody):\(HostileDevice.nobody)", device.dir.path])
    }

    let fill = try device.attack(["fill", device.jailHome(id) + "/tmp"])
    #expect(fill["fill"]?.hasSuffix(" ENOSPC") == true, "\(fill)")
    #expect(freeInodes(volume.path) < 64, "the control: the inode table is full")

    let install = try device.appbox(["install", device.dir.url("bundles/notes/Notes.app")])
    #expect(install.status == 0, "\(install.err)")
    #expect(install.err.contains("appbox released its reserve"), "\(install.err)")
    let backup = try device.appbox(["backup", "com.example.hostile"])
    #expect(backup.status == 0, "\(backup.err)")
    let keychain = try device.appbox([
      "keychain", "com.example.hostile", "add", "--service", "s", "--account", "a", "--data", "x",
    ])
    #expect(keychain.status == 0, "\(keychain.err)")
    let defaults = try device.appbox(["defaults", "com.example.hostile", "write", "k", "v"])
    #expect(defaults.status == 0, "\(defaults.err)")

    // The app fills what appbox left: the reserve is spent, and each failure is an I/O error.
    let again = try device.attack(["fill", device.jailHome(id) + "/tmp"])
    #expect(again["fill"]?.hasSuffix(" ENOSPC") == true, "\(again)")
    for arguments in [
      ["keychain", "com.example.notes", "add", "--service", "s", "--account", "a", "--data", "x"],
      ["defaults", "com.example.notes", "write", "k", "v"],
    ] {
      let result = try device.appbox(arguments)
      #expect(result.status == 74, "\(arguments[0]): \(result.err)")
      #expect(result.err.split(separator: "\n").count == 1, "\(arguments[0]): \(result.err)")
      #expect(result.err.contains("no space left on"), "\(arguments[0]): \(result.err)")
    }

    // Once the app's tmp is emptied (launch purges it), the next mutating command refills it.
    #expect(
      try device.appbox(["launch", "com.example.hostile", "--network", "none", "--", "id"]).status == 0)
    #expect(try device.appbox(["defaults", "com.example.notes", "write", "k", "v"]).status == 0)
    #expect(exists(device.root + "/.appbox/reserve/complete"), "the reserve is back")
  }
}

/// The inodes free on the file system holding `path` (for root). Uses `statvfs(3)`.
private func freeInodes(_ path: String) -> UInt64 {
  var info = statvfs()
  return statvfs(path, &info) == 0 ? UInt64(info.f_ffree) : .max
}
