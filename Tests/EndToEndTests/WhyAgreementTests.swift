import AppboxCore
import AppboxTestSupport
import Foundation
import Glibc
import Testing

/// `why` decides as the backup does (issue 26, items 2 and 7).
struct WhyAgreementTests {
  static let app = "com.example.notes"

  /// A file marked exclude-from-backup is not backed up, live or (after a restore dropped it)
  /// from history; so is everything in a marked folder.
  @Test func whyOnAnExcludedFileSaysItIsNotBackedUp() throws {
    let device = Device()
    try device.install("Notes-1.0/Notes.app")
    try Data(repeating: 7, count: 3_000_000).write(
      to: URL(fileURLWithPath: device.home + "/Documents/big.bin"))
    try makeDirectories(device.home + "/Documents/Scratch")
    try Data("x".utf8).write(to: URL(fileURLWithPath: device.home + "/Documents/Scratch/x"))
    #expect(try device.run("exclude", Self.app, "Documents/big.bin").status == 0)
    #expect(try device.run("exclude", Self.app, "Documents/Scratch").status == 0)
    _ = try device.backup()
    let live = try #require(try device.json("why", Self.app, "Documents/big.bin") as? [String: Any])
    #expect(live["rule"] as? String == "excluded" && live["backedUp"] as? Bool == false, "\(live)")
    #expect(live["bytes"] as? Int == 3_000_000)
    let text = try device.run("why", Self.app, "Documents/big.bin")
    #expect(text.out.contains("'Documents/big.bin' is not backed up"), "\(text.out)")
    let inside = try #require(try device.json("why", Self.app, "Documents/Scratch/x") as? [String: Any])
    #expect(inside["backedUp"] as? Bool == false)

    #expect(try device.run("restore", Self.app).status == 0)
    #expect(!FileManager.default.fileExists(atPath: device.home + "/Documents/big.bin"))
    let gone = try #require(try device.json("why", Self.app, "Documents/big.bin") as? [String: Any])
    #expect(gone["rule"] as? String == "excluded" && gone["backedUp"] as? Bool == false, "\(gone)")
    let goneText = try device.run("why", Self.app, "Documents/big.bin")
    #expect(!goneText.out.contains("is backed up"), "\(goneText.out)")
  }
}

/// On a locked device `backup` refuses (69) when the app holds protected data; `why` says so,
/// for the protected file and for any other file of that app.
@Suite(.enabled(if: EncryptedVolume.isAvailable, "needs root and loop devices"))
struct WhyLockedAgreementTests {
  static let app = "com.example.vault"

  @Test func whyOnALockedDeviceAgreesWithBackup() throws {
    let device = try ProtectedDevice()
    let home = try device.install("Vault-1.0/Vault.app")
    try writeDurably(home + "/Documents/secret.txt", "secret")
    try writeDurably(home + "/Documents/plain.txt", "plain")
    try expectSuccess(device.run("protect", Self.app, "Documents/secret.txt", "--class", "complete"))
    try expectSuccess(device.run("backup", Self.app))
    try device.lock()
    let backup = try device.run("backup", Self.app)
    #expect(backup.status == 69, "\(backup.err)")
    for path in ["Documents/secret.txt", "Documents/plain.txt"] {
      let report = try #require(try device.json("why", Self.app, path) as? [String: Any])
      let next = try #require(report["next"] as? [String: Any])
      let explanation = next["explanation"] as? String ?? ""
      #expect(next["action"] as? String == "fail", "\(path): \(report)")
      #expect(report["backedUp"] as? Bool == false, "\(path)")
      #expect(explanation.contains("69") && explanation.contains("locked"), "\(path): \(explanation)")
      #expect(!explanation.contains("incomplete"), "\(path): \(explanation)")
    }
    try device.unlock()
    let unlocked = try #require(try device.json("why", Self.app, "Documents/plain.txt") as? [String: Any])
    #expect((unlocked["next"] as? [String: Any])?["action"] as? String != "fail")
  }
}
