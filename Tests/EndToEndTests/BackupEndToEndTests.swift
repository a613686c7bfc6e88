import AppboxBackup
import AppboxRepository
import AppboxCore
import AppboxTestSupport
import Foundation
import Glibc
import Testing

extension Device {
  var home: String {
    root + "/ApplicationRoot/"
      + ((try? FileManager.default.contentsOfDirectory(
        atPath: root + "/ApplicationRoot"))?.first { !$0.hasPrefix(".") } ?? "")
  }
  var repository: String { root + "/Backups" }

  /// Runs `backup --json` and returns the one snapshot object.
  func backup(_ extra: String..., environment: [String: String] = [:]) throws -> [String: Any] {
    let result = try appbox(
      ["--json", "backup", "com.example.notes"] + extra, root: root, environment: environment)
    #expect(result.status == 0, "backup: \(result.err)")
    let array = try JSONSerialization.jsonObject(with: Data(result.stdout)) as? [[String: Any]]
    return array?.first ?? [:]
  }

  /// Makes files the test just wrote count as unchanged to the next backup (the change
  /// detector distrusts stats taken less than a second before the previous snapshot).
  func trustSnapshots() throws {
    let catalog = try Catalog(path: repository + "/catalog.db")
    try catalog.database.execute("UPDATE snapshots SET time = time + 3600")
  }

  func archiveNames() -> [String] {
    ((try? FileManager.default.contentsOfDirectory(atPath: repository + "/archives")) ?? []).sorted()
  }
}

struct BackupEndToEndTests {
  @Test func backupPrintsTheSpecifiedJSONAndSnapshotsListsIt() throws {
    let device = Device()
    try device.install("Notes-1.0/Notes.app")
    try writeSampleData(home: device.home)
    let snapshot = try device.backup()
    #expect(
      Set(snapshot.keys) == [
        "snapshot", "app", "tag", "appVersion", "kind", "files", "bytesAdded", "archive",
      ])
    #expect(snapshot["kind"] as? String == "full")
    #expect(snapshot["app"] as? String == "com.example.notes")
    let id = try #require(snapshot["snapshot"] as? String)
    #expect(id.count == 8 && id.allSatisfy(\.isHexDigit))
    #expect(snapshot["archive"] as? String == device.repository + "/archives/\(id).tar.zst")
    let listed = try #require(try device.json("snapshots") as? [[String: Any]])
    #expect(listed.count == 1)
    #expect(
      Set(listed[0].keys) == ["snapshot", "app", "tag", "appVersion", "time", "kind", "files", "bytes"])
    #expect(listed[0]["time"] as? String != nil && (listed[0]["time"] as? String)!.hasSuffix("Z"))
    #expect(listed[0]["files"] as? Int == snapshot["files"] as? Int)
    // The summary is human output: on stdout (it was on stderr), nothing of it on stderr.
    let text = try device.run("backup", "com.example.notes")
    #expect(text.status == 0)
    let again = try #require(try device.json("snapshots") as? [[String: Any]]).last?["snapshot"] as? String
    #expect(
      text.out.range(
        of: #"^com\.example\.notes: snapshot [0-9a-f]{8} \(incremental\), \d+ files, .+; .+ added\n$"#,
        options: .regularExpression) != nil, "\(text.out)")
    #expect(text.out.contains("snapshot \(again ?? "?") "))
    #expect(text.err.isEmpty, "\(text.err)")
  }

  @Test func incrementalAndNoChangeBackupsStoreOnlyWhatChanged() throws {
    let device = Device()
    try device.install("Notes-1.0/Notes.app")
    try writeSampleData(home: device.home)
    let full = try device.backup()
    let catalog = try Catalog(path: device.repository + "/catalog.db", readOnly: true)
    let trees = try catalog.count("trees")
    let blobs = try catalog.count("blobs")
    try device.trustSnapshots()
    let same = try device.backup()
    #expect(same["kind"] as? String == "incremental" && same["bytesAdded"] as? Int == 0)
    #expect(same["files"] as? Int == full["files"] as? Int)
    #expect(try catalog.count("trees") == trees && catalog.count("blobs") == blobs)
    let tiny = try FileManager.default.attributesOfItem(atPath: same["archive"] as! String)[.size] as! Int
    #expect(tiny < 8192)
    try Data("changed".utf8).write(to: URL(fileURLWithPath: device.home + "/Documents/a.txt"))
    try device.trustSnapshots()
    let changed = try device.backup()
    #expect(changed["bytesAdded"] as? Int == 7)
    let members = try runProcess("/usr/bin/tar", ["-tf", changed["archive"] as! String]).out
    #expect(members.contains("Documents/a.txt") && !members.contains("Notes.app"))
  }

  @Test func restoresTheLatestAndAnOlderSnapshotByteForByte() throws {
    let device = Device()
    try device.install("Notes-1.0/Notes.app")
    try writeSampleData(home: device.home)
    let before = try captureHomeData(device.home)
    let first = try #require(try device.backup()["snapshot"] as? String)
    try Data("rewritten".utf8).write(to: URL(fileURLWithPath: device.home + "/Documents/a.txt"))
    try FileManager.default.removeItem(atPath: device.home + "/Documents/Nested")
    try Data("new".utf8).write(to: URL(fileURLWithPath: device.home + "/Library/new.txt"))
    let after = try captureHomeData(device.home)
    _ = try device.backup()

    let older = try device.run("restore", "com.example.notes", "--snapshot", first)
    #expect(older.status == 0, "\(older.err)")
    #expect(differences(before, try captureHomeData(device.home)) == [])
    #expect(try FileManager.default.contentsOfDirectory(atPath: device.home + "/Library/Caches").isEmpty)
    #expect(try FileManager.default.contentsOfDirectory(atPath: device.home + "/tmp").isEmpty)
    let latest = try device.json("restore", "com.example.notes") as? [String: Any]
    #expect(latest?["keychainRestored"] as? Bool == false)
    #expect(differences(after, try captureHomeData(device.home)) == [])
    #expect(device.applicationRootEntries().count == 1)
    let inspect = try device.run("inspect", "com.example.notes")
    #expect(inspect.out.contains("seal          valid"))
  }

  @Test func archivesAreListedAndExtractedByGNUTar() throws {
    let device = Device()
    try device.install("Notes-1.0/Notes.app")
    try writeSampleData(home: device.home)
    try FileManager.default.removeItem(atPath: device.home + "/Documents/pipe")  // not an archive member
    let archive = try #require(try device.backup()["archive"] as? String)
    let listing = try runProcess("/usr/bin/tar", ["--warning=no-unknown-keyword", "-tvf", archive])
    #expect(listing.status == 0, "\(listing.err)")
    #expect(listing.out.contains("Documents/link -> a.txt"))
    let target = TemporaryDirectory("gnutar-x")
    let extract = try runProcess(
      "/usr/bin/tar",
      [
        "--warning=no-unknown-keyword", "--xattrs", "--xattrs-include=user.*", "-xf", archive, "-C",
        target.path,
      ])
    #expect(extract.status == 0, "\(extract.err)")
    let extracted = try captureTree(target.path, skipping: [".appbox", "Notes.app"])
    #expect(differences(try captureHomeData(device.home), extracted) == [])
  }

  @Test func excludedItemsAreNotStoredNorRestored() throws {
    let device = Device()
    try device.install("Notes-1.0/Notes.app")
    try Data("keep".utf8).write(to: URL(fileURLWithPath: device.home + "/Documents/keep.txt"))
    try Data("big".utf8).write(to: URL(fileURLWithPath: device.home + "/Documents/big.bin"))
    let exclude = try device.run("exclude", "com.example.notes", "Documents/big.bin")
    if exclude.status != 0 {  // the exclude command comes with the sandbox work; set the attribute directly
      let fd = try FileDescriptor.open(device.home + "/Documents/big.bin", O_RDONLY)
      try fd.closeAfter { try $0.setExtendedAttribute("user.appbox.exclude-from-backup", []) }
    }
    let archive = try #require(try device.backup()["archive"] as? String)
    let members = try runProcess("/usr/bin/tar", ["-tf", archive]).out
    #expect(members.contains("Documents/keep.txt") && !members.contains("big.bin"))
    #expect(try device.run("restore", "com.example.notes").status == 0)
    #expect(!FileManager.default.fileExists(atPath: device.home + "/Documents/big.bin"))
    #expect(FileManager.default.fileExists(atPath: device.home + "/Documents/keep.txt"))
  }

  @Test func checkCatchesAFlippedByteAndAMissingArchive() throws {
    let device = Device()
    try device.install("Notes-1.0/Notes.app")
    try writeSampleData(home: device.home)
    let first = try #require(try device.backup()["archive"] as? String)
    let second = try #require(try device.backup()["archive"] as? String)
    #expect(try device.run("check", "--read-data").status == 0)
    try flipContentByte(device, archive: first, of: "Documents/a.txt")
    let flipped = try device.run("check")
    #expect(flipped.status == 65)
    #expect(flipped.out.contains("problem:") && flipped.out.contains("CRC-32C does not match"))
    try FileManager.default.removeItem(atPath: second)
    let result = try device.run("--json", "check")
    #expect(result.status == 65)
    let missing = try JSONSerialization.jsonObject(with: Data(result.stdout)) as? [String: Any]
    #expect(missing?["ok"] as? Bool == false)
    #expect((missing?["problems"] as? [String])?.contains { $0.contains("missing") } == true)
  }

  @Test func restoreRefusesADamagedArchiveBeforeTouchingTheHome() throws {
    let device = Device()
    try device.install("Notes-1.0/Notes.app")
    try writeSampleData(home: device.home)
    let archive = try #require(try device.backup()["archive"] as? String)
    try Data("newer".utf8).write(to: URL(fileURLWithPath: device.home + "/Documents/a.txt"))
    let live = try captureTree(device.home)
    try flipContentByte(device, archive: archive, of: "Documents/A.txt")
    let result = try device.run("restore", "com.example.notes")
    #expect(result.status == 65)
    #expect(result.err.split(separator: "\n").count == 1 && result.err.hasPrefix("Error: "))
    #expect(differences(live, try captureTree(device.home)) == [])
    #expect(device.applicationRootEntries().count == 1)
  }

  @Test func forgetKeepsTheRestRestorableAndRemovesFiles() throws {
    let device = Device()
    try device.install("Notes-1.0/Notes.app")
    try writeSampleData(home: device.home)
    _ = try device.backup()
    try Data("second".utf8).write(to: URL(fileURLWithPath: device.home + "/Documents/a.txt"))
    _ = try device.backup()
    try Data("third".utf8).write(to: URL(fileURLWithPath: device.home + "/Documents/a.txt"))
    let expected = try captureHomeData(device.home)
    let last = try #require(try device.backup()["snapshot"] as? String)
    let archivesBefore = device.archiveNames()
    let forget = try device.json("forget", "com.example.notes", "--keep-last", "1") as? [String: Any]
    #expect((forget?["removed"] as? [String])?.count == 2)
    let archivesAfter = device.archiveNames()
    #expect(!archivesAfter.contains(archivesBefore[0]) || archivesBefore.count - archivesAfter.count >= 1)
    #expect(archivesAfter.contains("\(last).tar.zst"))
    #expect(try device.run("check", "--read-data").status == 0)
    try FileManager.default.removeItem(atPath: device.home + "/Documents/a.txt")
    #expect(try device.run("restore", "com.example.notes").status == 0)
    #expect(differences(expected, try captureHomeData(device.home)) == [])
    #expect(try device.run("forget", "com.example.notes").status == 64)
  }

  @Test func restoringIntoAnotherDeviceRootInstallsTheBundleFromTheBackup() throws {
    let source = Device()
    try source.install("Notes-1.0/Notes.app")
    try writeSampleData(home: source.home)
    let expected = try captureHomeData(source.home)
    _ = try source.backup()
    let target = Device()
    #expect(try target.run("device", "init").status == 0)
    let restored = try appbox(
      ["--json", "restore", "com.example.notes", "--snapshot", "latest", "--repo", source.repository],
      root: target.root)
    #expect(restored.status == 0, "\(restored.err)")
    let object = try JSONSerialization.jsonObject(with: Data(restored.stdout)) as? [String: Any]
    #expect(object?["installedBundle"] as? Bool == true)
    #expect(differences(expected, try captureHomeData(target.home)) == [])
    let inspect = try target.run("inspect", "com.example.notes")
    #expect(inspect.out.contains("seal          valid"), "\(inspect.out)")
  }

  @Test func diffListsAddedRemovedAndChangedPaths() throws {
    let device = Device()
    try device.install("Notes-1.0/Notes.app")
    try Data("one".utf8).write(to: URL(fileURLWithPath: device.home + "/Documents/one.txt"))
    try Data("gone".utf8).write(to: URL(fileURLWithPath: device.home + "/Documents/gone.txt"))
    let a = try #require(try device.backup()["snapshot"] as? String)
    try Data("uno".utf8).write(to: URL(fileURLWithPath: device.home + "/Documents/one.txt"))
    try FileManager.default.removeItem(atPath: device.home + "/Documents/gone.txt")
    try Data("two".utf8).write(to: URL(fileURLWithPath: device.home + "/Documents/two.txt"))
    let b = try #require(try device.backup()["snapshot"] as? String)
    let diff = try device.json("diff", a, b) as? [String: Any]
    #expect(diff?["added"] as? [String] == ["Documents/two.txt"])
    #expect(diff?["removed"] as? [String] == ["Documents/gone.txt"])
    #expect(diff?["changed"] as? [String] == ["Documents/one.txt"])
    let text = try device.run("diff", a, b)
    #expect(text.out == "- Documents/gone.txt\nM Documents/one.txt\n+ Documents/two.txt\n")
  }

  @Test func exportThenImportRoundTripsAndHostileImportsAreRefused() throws {
    let device = Device()
    try device.install("Notes-1.0/Notes.app")
    try Data("doc".utf8).write(to: URL(fileURLWithPath: device.home + "/Documents/doc.txt"))
    try Data("prefs".utf8).write(to: URL(fileURLWithPath: device.home + "/Library/Preferences/p.plist"))
    let expected = try captureHomeData(device.home)
    let file = device.dir.url("export.tar")
    #expect(try device.run("export", "com.example.notes", file).status == 0)
    try Data("stray".utf8).write(to: URL(fileURLWithPath: device.home + "/Documents/stray.txt"))
    let imported = try device.run("import", "com.example.notes", file)
    #expect(imported.status == 0, "\(imported.err)")
    #expect(differences(expected, try captureHomeData(device.home)) == [])

    let before = try captureTree(device.home)
    let outside = TemporaryDirectory("hostile")
    try outside.write("etc/evil", "x")
    let traversal = device.dir.url("traversal.tar")
    let tar = try runProcess(
      "/usr/bin/tar", ["-cf", traversal, "-C", outside.path, "--transform=s,^,Documents/../../,", "etc"])
    #expect(tar.status == 0, "\(tar.err)")
    var raw = RawTar()
    raw.header("Documents/pipe", type: "6")
    raw.end()
    let fifo = device.dir.url("fifo.tar")
    #expect(FileManager.default.createFile(atPath: fifo, contents: Data(raw.bytes)))
    for archive in [traversal, fifo, "/etc/hostname"] {
      let refused = try device.run("import", "com.example.notes", archive)
      #expect(refused.status == 65, "\(archive): \(refused.err)")
      #expect(refused.err.split(separator: "\n").count == 1, "\(refused.err)")
      #expect(differences(before, try captureTree(device.home)) == [])
    }
    #expect(device.applicationRootEntries().count == 1)
  }

  /// Root reads everything, so the unreadable file is made for an unprivileged user: the
  /// device belongs to `nobody`, one file stays root's, and appbox runs as `nobody`. The
  /// snapshot is taken without it, recorded as incomplete, and says so; `--strict` makes
  /// that exit 74.
  @Test(.enabled(if: getuid() == 0 && FileManager.default.isExecutableFile(atPath: "/usr/bin/setpriv")))
  func anUnreadableFileMakesTheSnapshotIncomplete() throws {
    let device = Device()
    try device.install("Notes-1.0/Notes.app")
    try Data("ok".utf8).write(to: URL(fileURLWithPath: device.home + "/Documents/fine.txt"))
    #expect(try runProcess("/bin/chown", ["-R", "65534:65534", device.dir.path]).status == 0)
    let locked = device.home + "/Documents/locked.txt"
    try Data("secret".utf8).write(to: URL(fileURLWithPath: locked))
    #expect(chmod(locked, 0o600) == 0)
    func backup(_ extra: String...) throws -> ProcessResult {
      try runProcess(
        "/usr/bin/setpriv",
        [
          "--reuid=65534", "--regid=65534", "--clear-groups", productsDirectory + "/appbox", "--root",
          device.root,
        ]
          + extra)
    }
    let result = try backup("--json", "backup", "com.example.notes")
    #expect(result.status == 0, "\(result.err)")
    #expect(
      result.err.contains(
        "warning: snapshot ")
        && result.err.contains(
          " of com.example.notes is incomplete: 1 entry could not be read and was left out: 'Documents/locked.txt'"
        ),
      "\(result.err)")
    let listed = try #require(try JSONSerialization.jsonObject(with: Data(result.stdout)) as? [[String: Any]])
    #expect(listed.first?["incomplete"] as? Bool == true)
    #expect(listed.first?["unreadable"] as? Int == 1)
    #expect(listed.first?["unreadablePaths"] as? [String] == ["Documents/locked.txt"])
    let id = try #require(listed.first?["snapshot"] as? String)
    // The snapshot holds everything else, and the catalog remembers it is incomplete.
    let tar = try runProcess("/usr/bin/tar", ["-tf", device.root + "/Backups/archives/\(id).tar.zst"])
    #expect(tar.out.contains("Documents/fine.txt") && !tar.out.contains("locked.txt"))
    let snapshots = try #require(
      try JSONSerialization.jsonObject(with: Data(try device.run("--json", "snapshots").stdout))
        as? [[String: Any]])
    #expect(snapshots.first?["incomplete"] as? Bool == true)
    let strict = try backup("backup", "--strict", "com.example.notes")
    #expect(strict.status == 74, "\(strict.err)")
    #expect(strict.err.contains("is incomplete"))
    #expect(device.archiveNames().count == 2)  // the snapshot is kept; only the status says so
  }

  @Test func twoBackupsOfTheSameAppAtOnceSerializeOrReportBusy() throws {
    let device = Device()
    try device.install("Notes-1.0/Notes.app")
    try writeSampleData(home: device.home)
    let statuses = ProcessStatuses()
    let group = DispatchGroup()
    for _ in 0..<2 {
      DispatchQueue.global().async(group: group) {
        let result = try? device.run(
          "backup", "com.example.notes", environment: ["APPBOX_LOCK_TIMEOUT": "0.05"])
        statuses.add(result?.status ?? -1)
      }
    }
    group.wait()
    #expect(statuses.all.allSatisfy { $0 == 0 || $0 == 75 }, "\(statuses.all)")
    #expect(statuses.all.contains(0))
    #expect(try device.run("check").status == 0)
  }
}

/// Exit statuses collected from several threads.
final class ProcessStatuses: @unchecked Sendable {
  private let lock = NSLock()
  private var statuses: [Int32] = []
  func add(_ status: Int32) { lock.withLock { statuses.append(status) } }
  var all: [Int32] { lock.withLock { statuses } }
}

/// Changes one stored byte of the content of `path` in `archive` (a framed one by default):
/// in the middle of the frame that holds the member's data, or of its bytes in a plain tar.
func flipContentByte(_ device: Device, archive: String, of path: String) throws {
  let catalog = try Catalog(path: device.repository + "/catalog.db")
  let name = (archive as NSString).lastPathComponent
  let offset = try #require(
    try catalog.blobs(inArchive: name).first { $0.path == Array(path.utf8) }?.dataOffset)
  guard let frames = try catalog.frameIndex(of: name) else {
    var bytes = Array(try Data(contentsOf: URL(fileURLWithPath: archive)))
    bytes[Int(offset)] ^= 0x01
    try Data(bytes).write(to: URL(fileURLWithPath: archive))
    return
  }
  let frame = frames.frames[try #require(frames.frame(containing: offset))]
  var bytes = Array(try Data(contentsOf: URL(fileURLWithPath: archive)))
  bytes[Int(frame.storedOffset) + frame.storedLength / 2] ^= 0x01
  try Data(bytes).write(to: URL(fileURLWithPath: archive))
}

