import AppboxContainer
import AppboxCore
import AppboxTestSupport
import Foundation
import Glibc
import Testing

@testable import AppboxBackup
@testable import AppboxRepository

/// Changes the calling thread's file-system uid (and only that thread's): file access is then
/// checked as that user, as it would be for appbox run by a non-root owner.
@_silgen_name("setfsuid") func setfsuid(_ uid: UInt32) -> Int32

extension Fixture {
  func why(_ path: String, repository: Repository? = nil) throws -> WhyReport {
    try session.whyBackup(path, of: app, repository: repository ?? self.repository)
  }
}

struct WhyTests {
  // MARK: The rule

  @Test func eachLocationHasItsRule() throws {
    let fixture = try Fixture()
    try fixture.write("Documents/a.txt", "a")
    try fixture.write("Library/Preferences/com.example.notes.plist", "<plist/>")
    try fixture.write("Library/Application Support/state.json", "{}")
    try fixture.write("Library/Caches/thumb.jpg", "x")
    try fixture.write("tmp/scratch", "x")
    let cases: [(String, WhyReport.Rule, Bool)] = [
      ("Documents/a.txt", .documents, true),
      ("Library/Preferences/com.example.notes.plist", .preferences, true),
      ("Library/Application Support/state.json", .library, true),
      (Home.metadataFile, .home, true),
      ("Notes.app/Info.plist", .bundle, true),
      ("Library/Caches/thumb.jpg", .caches, false),
      ("tmp/scratch", .tmp, false),
    ]
    for (path, rule, backedUp) in cases {
      let report = try fixture.why(path)
      #expect(report.rule == rule, "\(path): \(report.rule)")
      #expect(report.backedUp == backedUp, "\(path)")
      #expect(report.exists && report.type == "file")
    }
    #expect(try fixture.why("Library/Caches/thumb.jpg").next.action == .skip)
    #expect(try fixture.why("tmp/scratch").summary.contains("is not backed up: tmp is never backed up"))
  }

  @Test func aMarkOnTheFileRecordsItWithoutContent() throws {
    let fixture = try Fixture()
    try fixture.write("Documents/big.bin", "data")
    try fixture.setAttribute("Documents/big.bin", excludeFromBackupAttribute, Array("1".utf8))
    let report = try fixture.why("Documents/big.bin")
    #expect(report.rule == .excluded && report.next.action == .record)
    #expect(report.excludedBy == Array("Documents/big.bin".utf8))
  }

  @Test func aMarkOnAnAncestorStopsTheScanThere() throws {
    let fixture = try Fixture()
    try fixture.write("Documents/Offline/Deep/file.bin", "data")
    try fixture.setAttribute("Documents/Offline", excludeFromBackupAttribute, Array("1".utf8))
    let report = try fixture.why("Documents/Offline/Deep/file.bin")
    #expect(report.rule == .excludedAncestor && !report.backedUp && report.next.action == .skip)
    #expect(report.excludedBy == Array("Documents/Offline".utf8))
    #expect(report.summary.contains("inside 'Documents/Offline'"))
  }

  @Test func aSymlinkOnTheWayIsNeverLookedThrough() throws {
    let fixture = try Fixture()
    try fixture.write("Library/Preferences/p.plist", "x")
    #expect(symlink("../Library", fixture.path("Documents/lib")) == 0)
    let report = try fixture.why("Documents/lib/Preferences/p.plist")
    #expect(report.rule == .symlinkAncestor && !report.backedUp && report.next.action == .skip)
    #expect(report.reason.contains("'Documents/lib' is a symbolic link"))
    // The link itself is backed up, as a link.
    let link = try fixture.why("Documents/lib")
    #expect(link.rule == .documents && link.type == "symlink" && link.backedUp)
  }

  @Test func fifosAreRecordedWithoutContentAndDeviceFilesAreRefused() throws {
    let fixture = try Fixture()
    #expect(mkfifo(fixture.path("Documents/pipe"), 0o644) == 0)
    let fifo = try fixture.why("Documents/pipe")
    #expect(fifo.rule == .withoutContent && fifo.type == "fifo" && fifo.next.action == .record)
    #expect(mknod(fixture.path("Documents/null"), S_IFCHR | 0o600, dev_t(1 << 8 | 3)) == 0)
    let device = try fixture.why("Documents/null")
    #expect(device.rule == .deviceFile && device.type == "device" && device.next.action == .fail)
    #expect(!device.backedUp)
  }

  @Test func anEntryItsOwnerCannotReadIsReportedUnreadable() throws {
    let fixture = try Fixture()
    try fixture.write("Documents/locked.bin", "secret", mode: 0o000)
    // The device root belongs to a user (65534 here), who runs appbox; the app made a file
    // that even its owner cannot read.
    #expect(try runProcess("/bin/chown", ["-R", "65534:65534", fixture.dir.path]).status == 0)
    let report: WhyReport = try {
      #expect(setfsuid(65534) == 0)
      defer { _ = setfsuid(0) }
      return try fixture.session.whyBackup("Documents/locked.bin", of: fixture.app, repository: nil)
    }()
    #expect(report.rule == .unreadable && report.unreadable == "permission denied")
    #expect(report.next.action == .fail && !report.backedUp)
    #expect(report.next.explanation.contains("cannot read it (permission denied)"))
    // As root (the owner here) the same file is readable.
    #expect(try fixture.why("Documents/locked.bin").rule == .documents)
  }

  @Test func noProtectionClassExistsYet() throws {
    let fixture = try Fixture()
    try fixture.write("Documents/a.txt", "a")
    #expect(try fixture.why("Documents/a.txt").protectionClass == nil)
  }

  // MARK: The next backup

  @Test func theFirstBackupStoresEverything() throws {
    let fixture = try Fixture()
    try fixture.write("Documents/a.txt", "a")
    let report = try fixture.session.whyBackup("Documents/a.txt", of: fixture.app, repository: nil)
    #expect(report.next.action == .store && report.next.since == nil)
    #expect(report.next.explanation.contains("first"))
    #expect(report.history.snapshots == 0 && report.summary.contains("no backup repository"))
    #expect(try fixture.why("Notes.app/Info.plist").next.action == .store)
  }

  @Test func anUnchangedFileIsNotReadAndTheBundleIsNotScannedAgain() throws {
    let fixture = try Fixture()
    try fixture.write("Documents/a.txt", "a")
    let first = try fixture.backup().snapshot
    try fixture.trustSnapshots()
    let report = try fixture.why("Documents/a.txt")
    #expect(report.next.action == .reuse && report.next.since == first.id && report.next.changed.isEmpty)
    let bundle = try fixture.why("Notes.app/Info.plist")
    #expect(bundle.rule == .bundle && bundle.next.action == .reuse && bundle.next.since == first.id)
  }

  @Test func aChangedFileNamesTheFieldsThatDiffer() throws {
    let fixture = try Fixture()
    try fixture.write("Documents/grown.txt", "short")
    try fixture.write("Documents/touched.txt", "same")
    try fixture.write("Documents/chmod.txt", "same")
    try fixture.write("Documents/replaced.txt", "same")
    let snapshot = try fixture.backup().snapshot
    try fixture.trustSnapshots()
    try fixture.write("Documents/grown.txt", "much longer now")
    var times = [timespec(tv_sec: 1_000, tv_nsec: 0), timespec(tv_sec: 1_000, tv_nsec: 0)]
    #expect(utimensat(AT_FDCWD, fixture.path("Documents/touched.txt"), &times, 0) == 0)
    #expect(chmod(fixture.path("Documents/chmod.txt"), 0o600) == 0)
    // Same size and mtime, but a new file renamed over the old one: a new inode.
    var old = stat()
    #expect(stat(fixture.path("Documents/replaced.txt"), &old) == 0)
    try fixture.write("Documents/replaced.new", "same")
    times = [old.st_atim, old.st_mtim]
    #expect(utimensat(AT_FDCWD, fixture.path("Documents/replaced.new"), &times, 0) == 0)
    #expect(rename(fixture.path("Documents/replaced.new"), fixture.path("Documents/replaced.txt")) == 0)

    let expected: [(String, [String])] = [
      ("grown.txt", ["size", "mtime", "ctime"]), ("touched.txt", ["mtime", "ctime"]),
      ("chmod.txt", ["ctime", "mode"]), ("replaced.txt", ["ctime", "inode"]),
    ]
    for (name, fields) in expected {
      let report = try fixture.why("Documents/" + name)
      #expect(report.next.action == .store, "\(name)")
      #expect(report.next.since == snapshot.id)
      #expect(report.next.changed == fields, "\(name): \(report.next.changed)")
    }
    #expect(try fixture.why("Documents/grown.txt").next.explanation.contains("size, mtime and ctime differ"))
  }

  @Test func aStatTooRecentToTrustIsVerifiedByContent() throws {
    let fixture = try Fixture()
    try fixture.write("Documents/a.txt", "a")
    _ = try fixture.backup()  // no trustSnapshots: the file changed just before this snapshot
    let report = try fixture.why("Documents/a.txt")
    #expect(report.next.action == .verify && report.next.changed == ["too-recent"])
  }

  @Test func aNewFileAndAFileUnderAFormerlyMarkedFolderAreStored() throws {
    let fixture = try Fixture()
    try fixture.write("Documents/Offline/file.bin", "data")
    try fixture.setAttribute("Documents/Offline", excludeFromBackupAttribute, Array("1".utf8))
    let snapshot = try fixture.backup().snapshot
    try fixture.trustSnapshots()
    try fixture.write("Documents/new.txt", "new")
    let new = try fixture.why("Documents/new.txt")
    #expect(new.next.action == .store && new.next.since == snapshot.id)
    #expect(new.summary.contains("None of the 1 snapshot recorded it"))
    let folder = try FileDescriptor.open(fixture.path("Documents/Offline"), O_RDONLY | O_DIRECTORY)
    try folder.closeAfter { try $0.removeExtendedAttribute(excludeFromBackupAttribute) }
    let inside = try fixture.why("Documents/Offline/file.bin")
    #expect(inside.rule == .documents && inside.next.action == .store)
    #expect(inside.next.explanation.contains("did not look inside 'Documents/Offline'"))
  }

  @Test func aSnapshotFromAnotherDeviceIsNotTrusted() throws {
    let fixture = try Fixture()
    try fixture.write("Documents/a.txt", "a")
    _ = try fixture.backup()
    try fixture.repository.catalog.database.execute("UPDATE snapshots SET device = 'ANOTHER-DEVICE'")
    let report = try fixture.why("Documents/a.txt")
    #expect(report.next.action == .store && report.next.explanation.contains("another device"))
  }

  @Test func aFolderIsSurveyedFileByFile() throws {
    let fixture = try Fixture()
    for name in ["a", "b", "c"] {
      try fixture.write("Documents/Photos/\(name).jpg", bytes: [UInt8](repeating: 1, count: 1000))
    }
    try fixture.write("Documents/Photos/Hidden/x.bin", "x")
    try fixture.setAttribute("Documents/Photos/Hidden", excludeFromBackupAttribute, Array("1".utf8))
    _ = try fixture.backup()
    try fixture.trustSnapshots()
    try fixture.write("Documents/Photos/b.jpg", bytes: [UInt8](repeating: 2, count: 2000))
    try fixture.write("Documents/Photos/d.jpg", bytes: [UInt8](repeating: 3, count: 500))
    let report = try fixture.why("Documents/Photos")
    #expect(report.type == "directory")
    let inside = try #require(report.next.inside)
    #expect(
      inside
        == SubtreeSurvey(files: 4, unchanged: 2, changed: 1, added: 1, bytesToRead: 2500, excludedFolders: 1))
    #expect(report.next.explanation.contains("2 of 4 files will be read (2.5 KB, 1 new and 1 changed)"))
  }

  // MARK: History

  @Test func historyCountsTheBackupsInWhichItChangedAndTheBytesItAdded() throws {
    let fixture = try Fixture()
    try fixture.write("Documents/Photos/a.jpg", bytes: [UInt8](repeating: 1, count: 1000))
    try fixture.write("Documents/notes.txt", bytes: [UInt8](repeating: 0, count: 100))
    _ = try fixture.backup()
    var ids: [String] = []
    for (round, size) in [300, 0, 500].enumerated() {
      if size > 0 {
        try fixture.write("Documents/notes.txt", bytes: [UInt8](repeating: UInt8(round + 1), count: size))
      }
      try fixture.write(
        "Documents/Photos/p\(round).jpg", bytes: [UInt8](repeating: UInt8(10 + round), count: 2000))
      try fixture.trustSnapshots()
      ids.append(try fixture.backup().snapshot.id)
    }
    let file = try fixture.why("Documents/notes.txt").history
    #expect(file.snapshots == 4 && file.backups == 3 && file.present == 4)
    #expect(file.changes == 2 && file.bytesAdded == 800 && file.bytesPerBackup == 266)
    #expect(file.lastChanged == ids[2] && !file.isGone)
    let folder = try fixture.why("Documents/Photos").history
    #expect(folder.changes == 3 && folder.bytesAdded == 6000)
    // The window: only the last two snapshots.
    let recent = try fixture.session.whyBackup(
      "Documents/notes.txt", of: fixture.app, repository: fixture.repository, last: 2)
    #expect(recent.history.snapshots == 2 && recent.history.backups == 2 && recent.history.changes == 1)
  }

  @Test func aDeletedPathIsAnsweredFromHistory() throws {
    let fixture = try Fixture()
    try fixture.write("Documents/Old/report.pdf", bytes: [UInt8](repeating: 5, count: 4000))
    let first = try fixture.backup().snapshot
    try FileManager.default.removeItem(atPath: fixture.path("Documents/Old"))
    try fixture.trustSnapshots()
    _ = try fixture.backup()
    let report = try fixture.why("Documents/Old/report.pdf")
    #expect(!report.exists && report.rule == .documents && report.type == "file" && report.size == 4000)
    #expect(report.next.action == .absent)
    #expect(
      report.history.isGone && report.history.lastSeen == first.id && report.history.firstSeen == first.id)
    #expect(report.summary.contains("last recorded by snapshot \(first.id)"))
    #expect(report.summary.contains("gone"))
  }

  @Test func anUninstalledAppIsAnsweredFromHistoryAlone() throws {
    let fixture = try Fixture()
    try fixture.write("Documents/a.txt", "a")
    let snapshot = try fixture.backup().snapshot
    try fixture.session.uninstall(fixture.app)
    let report = try fixture.repository.whyBackup("Documents/a.txt", ofUninstalled: "com.example.notes")
    #expect(!report.exists && report.next.action == .absent && report.history.lastSeen == snapshot.id)
    #expect(report.next.explanation.contains("not installed"))
  }

  @Test func aPathNoSnapshotEverRecordedIsNotFound() throws {
    let fixture = try Fixture()
    _ = try fixture.backup()
    #expect {
      try fixture.why("Documents/never.txt")
    } throws: { error in
      (error as? ContainerError)?.kind == .notFound
    }
    #expect(throws: ContainmentError.self) { try fixture.why("../Other/Documents/x") }
  }

  @Test func aFolderNestedDeeperThanPathMaxIsSurveyedWhole() throws {
    let fixture = try Fixture()
    try fixture.write("Documents/Deep/top.txt", "top")
    // 2,100 levels of "a/": deeper than PATH_MAX from the home.
    var directory = try FileDescriptor.open(fixture.path("Documents/Deep"), O_RDONLY | O_DIRECTORY)
    for _ in 0..<2_100 {
      try directory.makeDirectory(rawName: [UInt8(ascii: "a")], mode: 0o755)
      let child = try directory.open(rawName: [UInt8(ascii: "a")], O_RDONLY | O_DIRECTORY)
      directory.close()
      directory = child
    }
    let file = try directory.open("bottom.txt", O_WRONLY | O_CREAT, mode: 0o644)
    file.close()
    directory.close()
    let report = try fixture.why("Documents/Deep")
    let inside = try #require(report.next.inside)
    // The resolver opens paths beyond PATH_MAX in pieces, as the backup scanner walks them.
    #expect(!inside.isPartial && inside.files == 2)
    #expect(!report.next.explanation.contains("nested too deep"))
  }
}
