import AppboxCore
import AppboxTestSupport
import Foundation
import Glibc
import Testing

/// An encrypted repository cannot be silently downgraded (issue 24, item 3): whoever can write
/// it wipes it and leaves a plain one; the device refuses it (65) until told otherwise.
struct RepositoryDowngradeEndToEndTests {
  static let secret = "PlaintextMustNotLeak-5309"

  /// A device with Notes holding `secret`, an encrypted repository it has used, and the
  /// password file (0600).
  static func prepare() throws -> (Device, repository: String, password: String) {
    let device = Device()
    try device.install("Notes-1.0/Notes.app")
    try Data(secret.utf8).write(to: URL(fileURLWithPath: device.home + "/Documents/secret.txt"))
    let password = try device.dir.write("password", "correct horse battery staple\n", mode: 0o600)
    let repository = device.dir.url("vault")
    let initialized = try device.run(
      "repo", "init", "--repo", repository, "--encrypt", "--password-file", password)
    #expect(initialized.status == 0, "\(initialized.err)")
    let backup = try device.run(
      "backup", "com.example.notes", "--repo", repository, "--password-file", password)
    #expect(backup.status == 0, "\(backup.err)")
    return (device, repository, password)
  }

  /// The attacker: the repository wiped, and a plain one made in its place (by another device).
  static func replaceWithAPlainRepository(_ repository: String) throws {
    try FileTree.remove(atPath: repository)
    let other = Device()
    #expect(try other.run("device", "init").status == 0)
    #expect(try appbox(["repo", "init", "--repo", repository], root: other.root).status == 0)
  }

  static func archives(_ repository: String) -> [String] {
    (try? FileManager.default.contentsOfDirectory(atPath: repository + "/archives")) ?? []
  }

  @Test func aPlainRepositoryWhereAnEncryptedOneWasIsRefusedUntilAllowed() throws {
    let (device, repository, password) = try Self.prepare()
    try Self.replaceWithAPlainRepository(repository)
    for arguments in [
      ["backup", "com.example.notes", "--repo", repository, "--password-file", password],
      ["backup", "com.example.notes", "--repo", repository],
      ["snapshots", "--repo", repository], ["restore", "com.example.notes", "--repo", repository],
      ["repo", "init", "--repo", repository], ["repo", "show", "--repo", repository],
    ] {
      let result = try appbox(arguments, root: device.root)
      #expect(result.status == 65, "\(arguments): \(result.out) \(result.err)")
      let lines = result.err.split(separator: "\n")
      #expect(lines.count == 1 && lines[0].contains("was an encrypted repository"), "\(arguments): \(lines)")
    }
    #expect(Self.archives(repository).isEmpty, "nothing written")
    // Wiped outright: the same (not "no repository").
    try FileTree.remove(atPath: repository)
    let gone = try device.run("backup", "com.example.notes", "--repo", repository)
    #expect(gone.status == 65 && gone.err.contains("has no encrypted repository any more"), "\(gone.err)")
    #expect(!FileManager.default.fileExists(atPath: repository))

    // Told explicitly, the device takes the plain repository from then on.
    try Self.replaceWithAPlainRepository(repository)
    let allowed = try device.run("repo", "init", "--repo", repository, "--allow-plain")
    #expect(allowed.status == 0 && allowed.out.contains("Initialized a repository"), "\(allowed.err)")
    let plain = try device.run("backup", "com.example.notes", "--repo", repository)
    #expect(plain.status == 0, "\(plain.err)")
    #expect(Self.archives(repository).count == 1)
    let both = try device.run("repo", "init", "--repo", repository, "--allow-plain", "--encrypt")
    #expect(both.status == 64, "\(both.err)")
  }

  /// A password for a plain repository is an error on any device, also one that never saw it
  /// encrypted, and from the environment as from the option.
  @Test func aPasswordGivenForAPlainRepositoryIsNeverIgnored() throws {
    let (device, repository, password) = try Self.prepare()
    defer { withExtendedLifetime(device) {} }
    try Self.replaceWithAPlainRepository(repository)
    let fresh = Device()
    try fresh.install("Notes-1.0/Notes.app")
    for (arguments, environment) in [
      (["backup", "com.example.notes", "--repo", repository, "--password-file", password], [:]),
      (["backup", "com.example.notes", "--repo", repository], ["APPBOX_PASSWORD_FILE": password]),
      (["snapshots", "--repo", repository, "--password-file", password], [:]),
    ] {
      let result = try appbox(arguments, root: fresh.root, environment: environment)
      #expect(result.status == 65, "\(arguments): \(result.err)")
      #expect(result.err.contains("A password was given") && result.err.split(separator: "\n").count == 1)
    }
    #expect(Self.archives(repository).isEmpty)
    // Without one it is an ordinary plain repository for this device.
    #expect(try fresh.run("backup", "com.example.notes", "--repo", repository).status == 0)
  }

  /// The device's own repository (`<root>/Backups`), which backup and update write implicitly.
  @Test func theDevicesOwnRepositoryIsProtectedToo() throws {
    let device = Device()
    try device.install("Notes-1.0/Notes.app")
    let password = try device.dir.write("password", "pw\n", mode: 0o600)
    #expect(try device.run("repo", "init", "--encrypt", "--password-file", password).status == 0)
    #expect(try device.run("backup", "com.example.notes", "--password-file", password).status == 0)
    let backups = device.root + "/Backups"
    try FileTree.remove(atPath: backups)
    let result = try device.run("backup", "com.example.notes")
    #expect(result.status == 65, "\(result.err)")
    #expect(!FileManager.default.fileExists(atPath: backups + "/config"), "no plain repository created")
    let update = try device.run("update", "com.example.notes", fixturePath("bundles/Notes-2.0/Notes.app"))
    #expect(update.status == 65, "\(update.err)")
  }
}
