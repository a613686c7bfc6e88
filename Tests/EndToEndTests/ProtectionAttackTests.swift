import AppboxCore
import AppboxTestSupport
import Foundation
import Glibc
import Testing

/// The app against the device's file protection, on a real fscrypt volume: it cannot touch the
/// file system's keyring or give its data a key appbox lacks, and a folder encrypted under
/// such a key (made on the host, as the app no longer can) does not stop backups or updates.
@Suite(.enabled(if: EncryptedVolume.isAvailable, "needs root and loop devices"))
struct ProtectionAttackTests {
  static let app = "com.example.hostile"

  /// From inside the jail, as its own uid (root) or as the device's user (unprivileged, when
  /// the kernel would let it remove the key appbox added): every fscrypt ioctl that changes
  /// state is refused; reading a policy still works. The device stays unlocked, its key
  /// quota untouched: lock and unlock work afterwards.
  @Test(arguments: Privilege.testable)
  func theAppCannotTouchTheKeyringOrSetAPolicy(_ privilege: Privilege) throws {
    let volume = try EncryptedVolume()
    for path in [splitPath(volume.path).directory, volume.path] { chmod(path, 0o755) }  // nobody's way in
    let device = try HostileDevice(privilege, on: volume)
    let id = try device.installHostile()
    #expect(try device.appbox(["device", "passcode", "set"], input: "1234\n").status == 0)
    let secret = device.jailHome(id) + "/Documents/secret"
    #expect(try device.attack(["write", secret])["write:" + secret] == "ok")
    let protect = try device.appbox(["protect", Self.app, "Documents/secret", "--class", "complete"])
    #expect(protect.status == 0, "\(protect.err)")

    let report = try device.attack(["fscrypt", secret, device.jailHome(id) + "/Documents/own"])
    #expect(report["get-policy"] == "ok", "\(report)")
    for label in [
      "remove-key", "remove-key-highbits", "remove-key-all-users", "add-key", "set-policy", "get-pwsalt",
    ] {
      #expect(report[label] == "EPERM", "\(label): \(report)")
    }
    #expect(report["add-key-count"] == "0")

    let status = try device.appbox(["--json", "device", "show"])
    let shown = try JSONSerialization.jsonObject(with: Data(status.stdout)) as? [String: Any]
    #expect(shown?["protectedDataAvailable"] as? Bool == true, "\(status.out)")
    #expect(contents(device.home(id) + "/Documents/secret") == Array("hostile\n".utf8))
    #expect(try device.appbox(["device", "lock"]).status == 0)
    let unlock = try device.appbox(["device", "unlock"], input: "1234\n")
    #expect(unlock.status == 0, "\(unlock.err)")
    #expect(try device.attack(["read", secret])["read:" + secret] == "ok")
    let own = try FileDescriptor.open(device.home(id) + "/Documents/own", O_RDONLY | O_DIRECTORY)
    #expect(try own.closeAfter { try $0.encryptionPolicy() } == nil, "the app's folder has no policy")
  }

  /// A folder (and a file moved out of it) encrypted under a key the file system no longer
  /// holds count as entries appbox cannot read, like a mode-000 folder: backup and export
  /// succeed with a snapshot marked incomplete naming both, `backup --strict` exits 74, and
  /// `update` goes ahead, keeping the rest of the data.
  @Test func aFolderUnderAForeignKeyIsAnUnreadableEntry() throws {
    let volume = try EncryptedVolume()
    chmod(volume.path, 0o755)
    let device = try HostileDevice(Privilege.testable[0], on: volume)
    let id = try device.installHostile()
    let documents = device.home(id) + "/Documents"
    #expect(
      try device.attack(["write", device.jailHome(id) + "/Documents/kept"]).values.allSatisfy { $0 == "ok" })
    try encryptUnderAForeignKey(folder: documents + "/locked", movingOut: documents + "/moved")
    #expect(openError(documents + "/moved") == .keyNotAvailable, "the control: not even root reads it")

    let backup = try device.appbox(["--json", "backup", Self.app])
    #expect(backup.status == 0, "\(backup.err)")
    let snapshot = (try JSONSerialization.jsonObject(with: Data(backup.stdout)) as? [[String: Any]])?.first
    #expect(snapshot?["incomplete"] as? Bool == true, "\(backup.out)")
    #expect(snapshot?["unreadable"] as? Int == 2, "\(backup.out)")
    #expect(
      snapshot?["unreadablePaths"] as? [String] == ["Documents/locked", "Documents/moved"], "\(backup.out)")
    #expect(backup.err.contains("'Documents/locked', 'Documents/moved'"), "\(backup.err)")
    #expect(try device.appbox(["backup", Self.app, "--strict"]).status == 74)

    let archive = device.dir.url("outside/data.tar")
    if device.asNobody { chown(device.dir.url("outside"), HostileDevice.nobody, HostileDevice.nobody) }
    let export = try device.appbox(["export", Self.app, archive])
    #expect(export.status == 0, "\(export.err)")
    #expect(export.err.contains("incomplete"), "\(export.err)")

    let update = try device.appbox([
      "--json", "update", Self.app, device.dir.url("bundles/\(Self.app)/Hostile.app"), "--allow-downgrade",
    ])
    #expect(update.status == 0, "\(update.err)")
    let updated = try JSONSerialization.jsonObject(with: Data(update.stdout)) as? [String: Any]
    let newID = try #require(updated?["newContainerID"] as? String)
    #expect(contents(device.home(newID) + "/Documents/kept") == Array("hostile\n".utf8))
  }
}

/// Makes `folder` (absent), encrypts it under a fresh key, writes two files in it, moves one of
/// them out to `movingOut` (it keeps its encryption), and removes the key: from then on the
/// file system shows placeholder names in the folder and refuses to open either file.
private func encryptUnderAForeignKey(folder: String, movingOut: String) throws {
  guard mkdir(folder, 0o755) == 0 else { throw SystemError("mkdir", path: folder) }
  let identifier = try FileDescriptor.open(folder, O_RDONLY | O_DIRECTORY).closeAfter { directory in
    var key = [UInt8](repeating: 0, count: fscryptKeyByteCount)
    for index in key.indices { key[index] = UInt8.random(in: 0...255) }
    let identifier = try directory.addEncryptionKey(key)
    try directory.setEncryptionPolicy(identifier)
    for name in ["inner.txt", "moving.txt"] {
      let fd = try directory.open(name, O_WRONLY | O_CREAT | O_EXCL, mode: 0o644)
      try fd.closeAfter { try $0.writeAll(Array("encrypted".utf8)) }
    }
    return identifier
  }
  guard rename(folder + "/moving.txt", movingOut) == 0 else { throw SystemError("rename", path: movingOut) }
  // Removed through the parent: nothing under the key may be open, or it lingers.
  let parent = try FileDescriptor.open(splitPath(folder).directory, O_RDONLY | O_DIRECTORY)
  let removal = try parent.closeAfter { try $0.removeEncryptionKey(identifier) }
  guard !removal.filesBusy else {
    throw SystemError("remove the test key", path: folder, errno: Errno(rawValue: EBUSY))
  }
}
