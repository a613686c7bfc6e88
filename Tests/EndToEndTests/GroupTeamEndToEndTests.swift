import AppboxCore
import AppboxPlist
import AppboxTestSupport
import Foundation
import Glibc
import Testing

/// An app group belongs to a team: its snapshots record the team, and they restore only into
/// that team's group (issue 24, item 2). The impostor is team ZZZZZ99999 listing the group of
/// Notes' team ABCDE12345.
struct GroupTeamEndToEndTests {
  static let secret = "team ABCDE12345 only"

  /// Notes' group backed up with a secret in it, then Notes gone (and with it the group).
  static func deviceWithAnOrphanedGroupSnapshot() throws -> (Device, snapshot: String) {
    let device = Device()
    try device.install("Notes-1.0/Notes.app")
    let container = try device.groupContainer()
    try Data(secret.utf8).write(to: URL(fileURLWithPath: container + "/Library/secret.txt"))
    let backup = try #require(try device.json("backup", sharedGroup) as? [[String: Any]])
    let snapshot = try #require(backup.first?["snapshot"] as? String)
    #expect(try device.run("uninstall", "com.example.notes").status == 0)
    #expect(try device.groups().isEmpty)
    return (device, snapshot)
  }

  static func impostorBundle(_ device: Device) throws -> String {
    try device.makeBundle(identifier: "org.other.spy", team: "ZZZZZ99999", groupsXML: groupsXML(sharedGroup))
  }

  @Test func snapshotsAndContainersRecordTheirTeam() throws {
    let device = Device()
    try device.install("Notes-1.0/Notes.app")
    let metadata = try PropertyList.decode(
      try Data(
        contentsOf: URL(
          fileURLWithPath: try device.groupContainer() + "/.com.apple.mobile_container_manager.metadata.plist"
        )))
    #expect(metadata["AppboxTeamIdentifier"]?.string == "ABCDE12345")
    #expect(try device.run("backup", sharedGroup).status == 0)
    // The manifest carries it, so a catalog rebuilt from the archives still knows it.
    #expect(try device.run("check", "--rebuild-catalog").status == 0)
    let catalog = try runProcess(
      "/usr/bin/python3",
      [
        "-c",
        "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute('select team from snapshots').fetchall())",
        device.root + "/Backups/catalog.db",
      ])
    #expect(catalog.out == "[('ABCDE12345',)]\n", "\(catalog.out) \(catalog.err)")
  }

  /// Restoring the impostor app from its backup would create the group for its team and fill
  /// it with ABCDE12345's snapshot: refused before anything is installed.
  @Test func restoringAnotherTeamsAppDoesNotBringTheGroupSnapshotBack() throws {
    let (device, _) = try Self.deviceWithAnOrphanedGroupSnapshot()
    try device.install(path: try Self.impostorBundle(device))
    #expect(try device.run("backup", "org.other.spy").status == 0)
    #expect(try device.run("uninstall", "org.other.spy").status == 0)
    let restore = try device.run("restore", "org.other.spy", "--snapshot", "latest")
    #expect(restore.status == 77, "\(restore.out) \(restore.err)")
    let lines = restore.err.split(separator: "\n")
    #expect(
      lines.count == 1 && lines[0].contains("ZZZZZ99999") && lines[0].contains("ABCDE12345"), "\(lines)")
    let listed = (try device.json("list") as? [[String: Any]] ?? []).compactMap { $0["app"] }
    #expect(listed.isEmpty, "nothing installed: \(listed)")
    #expect(try device.groups().isEmpty)
    #expect(!treeHolds(device.root + "/Shared", Self.secret))
  }

  /// The impostor installed (its own empty group now), then an explicit restore of the group.
  @Test func aGroupSnapshotOfAnotherTeamIsRefusedNamingBothTeams() throws {
    let (device, snapshot) = try Self.deviceWithAnOrphanedGroupSnapshot()
    try device.install(path: try Self.impostorBundle(device))
    #expect(try device.groups()[sharedGroup]?["teamIdentifier"] as? String == "ZZZZZ99999")
    let container = try device.groupContainer("org.other.spy")
    for arguments in [["restore", sharedGroup], ["restore", sharedGroup, "--snapshot", snapshot]] {
      let result = try appbox(arguments, root: device.root)
      #expect(result.status == 77, "\(arguments): \(result.err)")
      let lines = result.err.split(separator: "\n")
      #expect(
        lines.count == 1 && lines[0].contains("ZZZZZ99999") && lines[0].contains("ABCDE12345"), "\(lines)")
    }
    #expect(!exists(container + "/Library/secret.txt") && !treeHolds(device.root + "/Shared", Self.secret))
    // Notes' team joining the impostor's group is refused as before (77, both teams named).
    let join = try device.run("install", fixturePath("bundles/Notes-1.0/Notes.app"))
    #expect(
      join.status == 77 && join.err.contains("ZZZZZ99999") && join.err.contains("ABCDE12345"), "\(join.err)")
  }

  /// Snapshots from before teams were recorded (Fixtures/devices/keychain-v2: the group's, by
  /// an older appbox) restore into the container they were taken of, and nowhere else.
  @Test func aSnapshotWithoutATeamRestoresOnlyIntoItsOwnContainer() throws {
    let device = try KeychainIdentityEndToEndTests.legacyDevice()
    let container = try device.groupContainer()
    try FileManager.default.removeItem(atPath: container + "/Library/team.txt")
    let same = try device.run("restore", sharedGroup)
    #expect(same.status == 0, "\(same.err)")
    #expect(contents(container + "/Library/team.txt") == Array("team ABCDE12345 data\n".utf8))
    #expect(try device.run("uninstall", "com.example.notes").status == 0)
    try device.install(path: try Self.impostorBundle(device))
    let other = try device.run("restore", sharedGroup)
    #expect(other.status == 77 && other.err.contains("records no team"), "\(other.err)")
    #expect(!treeHolds(device.root + "/Shared", "team ABCDE12345 data"))
  }
}

/// Whether a regular file below `root` holds `text`.
func treeHolds(_ root: String, _ text: String) -> Bool {
  let enumerator = FileManager.default.enumerator(atPath: root)
  while let relative = enumerator?.nextObject() as? String {
    if let data = FileManager.default.contents(atPath: root + "/" + relative),
      data.range(of: Data(text.utf8)) != nil
    {
      return true
    }
  }
  return false
}
