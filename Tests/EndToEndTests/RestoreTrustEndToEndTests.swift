import AppboxCore
import AppboxTestSupport
import Foundation
import Glibc
import Testing

/// Restore is explicit about what it brings back (issue 26, items 1 and 2): snapshots show
/// their tag and app version, a plain restore takes the installed version's newest snapshot,
/// `--dry-run` changes nothing, and what a restore drops is reported.
struct RestoreTrustEndToEndTests {
  static let app = "com.example.notes"

  func write(_ path: String, _ text: String) throws {
    try Data(text.utf8).write(to: URL(fileURLWithPath: path))
  }

  func read(_ path: String) -> String? {
    FileManager.default.contents(atPath: path).map { String(decoding: $0, as: UTF8.self) }
  }

  func home(_ device: Device) throws -> String {
    try device.run("path", Self.app).out.trimmingCharacters(in: .whitespacesAndNewlines)
  }

  func snapshots(_ device: Device) throws -> [[String: Any]] {
    try #require(try device.json("snapshots", Self.app) as? [[String: Any]])
  }

  /// Notes 1.0 writes "one", is updated to 2.0 which writes "two", then reverted to 1.0.
  func revertedNotes() throws -> Device {
    let device = Device()
    try device.install("Notes-1.0/Notes.app")
    try write(try home(device) + "/Documents/a.txt", "one")
    #expect(try device.run("update", Self.app, fixturePath("bundles/Notes-2.0/Notes.app")).status == 0)
    try write(try home(device) + "/Documents/a.txt", "two")
    let revert = try device.run("revert", Self.app)
    #expect(revert.status == 0, "\(revert.err)")
    return device
  }

  @Test func snapshotsShowTheirTagAndAppVersion() throws {
    let device = try revertedNotes()
    let backup = try #require(try device.json("backup", Self.app) as? [[String: Any]])
    #expect(backup.first?["appVersion"] as? String == "1.0")
    #expect(backup.first?.keys.contains("tag") == true && backup.first?["tag"] is NSNull)
    let listed = try snapshots(device)
    #expect(listed.map { $0["appVersion"] as? String } == ["1.0", "2.0", "1.0"])
    #expect(listed.map { $0["tag"] as? String } == ["pre-update", "pre-revert", nil])
    let text = try device.run("snapshots", Self.app)
    let lines = text.out.split(separator: "\n")
    #expect(lines.first?.contains("VERSION") == true && lines.first?.contains("TAG") == true, "\(text.out)")
    #expect(lines.count == 4 && lines[2].contains("2.0") && lines[2].contains("pre-revert"), "\(text.out)")
  }

  /// After update 2.0 and revert to 1.0, a plain restore must not bring 2.0's data back.
  @Test func plainRestoreTakesTheInstalledVersionsNewestSnapshot() throws {
    let device = try revertedNotes()
    try write(try home(device) + "/Documents/a.txt", "changed after the revert")
    let listed = try snapshots(device)
    let preUpdate = try #require(
      listed.first { $0["tag"] as? String == "pre-update" }?["snapshot"] as? String)
    let restore = try device.run("--json", "restore", Self.app)
    #expect(restore.status == 0, "\(restore.err)")
    let report = try #require(try JSONSerialization.jsonObject(with: Data(restore.stdout)) as? [String: Any])
    #expect(report["snapshot"] as? String == preUpdate)
    #expect(report["appVersion"] as? String == "1.0" && report["tag"] as? String == "pre-update")
    #expect(read(try home(device) + "/Documents/a.txt") == "one")
    // `--snapshot latest` still names the newest of all, explicitly.
    let latest = try device.run("--json", "restore", Self.app, "--snapshot", "latest")
    #expect(latest.status == 0, "\(latest.err)")
    #expect(read(try home(device) + "/Documents/a.txt") == "two")
  }

  /// No snapshot of the installed version, or no app installed: one line naming the version a
  /// restore would bring, asking for --snapshot (66), and nothing changes.
  @Test func plainRestoreWithoutASnapshotOfTheInstalledVersionAsksForOne() throws {
    let device = Device()
    try device.install("Notes-1.0/Notes.app")
    #expect(try device.run("update", Self.app, fixturePath("bundles/Notes-2.0/Notes.app")).status == 0)
    try write(try home(device) + "/Documents/a.txt", "two")
    // The only snapshot is 1.0's (before the update); 2.0 is installed.
    let before = try treeManifest(try home(device))
    let refused = try device.run("restore", Self.app)
    #expect(refused.status == 66, "\(refused.out) \(refused.err)")
    let lines = refused.err.split(separator: "\n")
    #expect(lines.count == 1 && lines[0].contains("1.0") && lines[0].contains("--snapshot"), "\(refused.err)")
    #expect(try treeManifest(try home(device)) == before)

    // Uninstalled: the restore would install the newest snapshot's version; it says which.
    #expect(try device.json("backup", Self.app) is [Any])
    #expect(try device.run("uninstall", Self.app).status == 0)
    let absent = try device.run("--json", "restore", Self.app)
    #expect(absent.status == 66, "\(absent.out) \(absent.err)")
    #expect(absent.err.contains("2.0") && absent.err.contains("--snapshot"), "\(absent.err)")
    let error = try #require(try JSONSerialization.jsonObject(with: Data(absent.stdout)) as? [String: Any])
    #expect((error["error"] as? [String: Any])?["status"] as? Int == 66)
    #expect((try device.json("list") as? [Any])?.isEmpty == true)
    let explicit = try device.run("restore", Self.app, "--snapshot", "latest")
    #expect(explicit.status == 0, "\(explicit.err)")
    #expect(read(try home(device) + "/Documents/a.txt") == "two")
  }

  @Test func dryRunListsWhatWouldChangeAndChangesNothing() throws {
    let device = Device()
    try device.install("Notes-1.0/Notes.app")
    let home = try home(device)
    try write(home + "/Documents/kept.txt", "kept")
    try write(home + "/Documents/changed.txt", "before")
    let snapshot = try #require(
      (try device.json("backup", Self.app) as? [[String: Any]])?.first?["snapshot"] as? String)
    unlink(home + "/Documents/kept.txt")
    try write(home + "/Documents/changed.txt", "after, longer")
    try write(home + "/Documents/new.txt", "new")
    try write(home + "/Library/Caches/cache.bin", String(repeating: "c", count: 1000))
    let before = try treeManifest(home)
    let result = try device.run("--json", "restore", Self.app, "--snapshot", snapshot, "--dry-run")
    #expect(result.status == 0, "\(result.err)")
    let report = try #require(try JSONSerialization.jsonObject(with: Data(result.stdout)) as? [String: Any])
    #expect(report["dryRun"] as? Bool == true)
    #expect(report["added"] as? [String] == ["Documents/kept.txt"])
    #expect(report["replaced"] as? [String] == ["Documents/changed.txt"])
    #expect(report["removed"] as? [String] == ["Documents/new.txt"])
    let dropped = try #require(report["dropped"] as? [String: Any])
    #expect(dropped["files"] as? Int == 1 && dropped["bytes"] as? Int == 1000)
    #expect(try treeManifest(home) == before)
    let text = try device.run("restore", Self.app, "--snapshot", snapshot, "--dry-run")
    #expect(text.status == 0, "\(text.err)")
    for line in ["+ Documents/kept.txt", "~ Documents/changed.txt", "- Documents/new.txt"] {
      #expect(text.out.contains(line), "\(text.out)")
    }
    #expect(try treeManifest(home) == before)
  }

  /// A 3 MB file marked exclude-from-backup, and what Caches and tmp hold, go with a restore:
  /// one line says so, with counts and bytes, and the JSON has them.
  @Test func whatARestoreDropsIsReported() throws {
    let device = Device()
    try device.install("Notes-1.0/Notes.app")
    let home = try home(device)
    try write(home + "/Documents/big.bin", String(repeating: "b", count: 3_000_000))
    #expect(try device.run("exclude", Self.app, "Documents/big.bin").status == 0)
    try write(home + "/Documents/a.txt", "a")
    #expect(try device.run("backup", Self.app).status == 0)
    try write(home + "/Library/Caches/c.bin", String(repeating: "c", count: 1000))
    try write(home + "/tmp/t.txt", "0123456789")
    let restore = try device.run("restore", Self.app)
    #expect(restore.status == 0, "\(restore.err)")
    let lines = restore.out.split(separator: "\n").filter { $0.contains("Dropped") }
    #expect(lines.count == 1, "\(restore.out)")
    let line = String(lines.first ?? "")
    for part in ["3 files", "3.0 MB", "1 excluded from backup", "1 in Library/Caches", "1 in tmp"] {
      #expect(line.contains(part), "\(line)")
    }
    #expect(!FileManager.default.fileExists(atPath: home + "/Documents/big.bin"))

    try write(home + "/Documents/big.bin", String(repeating: "b", count: 3_000_000))
    #expect(try device.run("exclude", Self.app, "Documents/big.bin").status == 0)
    let json = try device.run("--json", "restore", Self.app)
    #expect(json.status == 0, "\(json.err)")
    let report = try #require(try JSONSerialization.jsonObject(with: Data(json.stdout)) as? [String: Any])
    let dropped = try #require(report["dropped"] as? [String: Any])
    #expect(dropped["files"] as? Int == 1 && dropped["bytes"] as? Int == 3_000_000)
    #expect((dropped["excluded"] as? [String: Any])?["bytes"] as? Int == 3_000_000)
    #expect((dropped["caches"] as? [String: Any])?["files"] as? Int == 0)
  }
}
