import AppboxContainer
import AppboxCore
import AppboxCrypto
import AppboxStore
import AppboxTestSupport
import Foundation
import Glibc
import Testing

@testable import AppboxBackup
@testable import AppboxRepository

/// Small key derivations for tests (iOS's 10,000,000 rounds take seconds).
let testRounds: (first: UInt32, second: UInt32) = (10, 10)

/// Sets every mtime under `root` (Documents and Library) to whole seconds, deepest first, so a
/// round trip through the format (which keeps whole seconds) can compare times exactly.
func wholeSecondTimes(_ root: String, seconds: Int64 = 1_700_000_000) throws {
  var paths: [String] = []
  for top in ["Documents", "Library"] {
    guard let walker = FileManager.default.enumerator(atPath: root + "/" + top) else { continue }
    paths.append(root + "/" + top)
    while let next = walker.nextObject() as? String { paths.append(root + "/" + top + "/" + next) }
  }
  for (index, path) in paths.sorted(by: { $0.count > $1.count }).enumerated() {
    var times = [
      timespec(tv_sec: Int(seconds) + index, tv_nsec: 0), timespec(tv_sec: Int(seconds) + index, tv_nsec: 0),
    ]
    guard utimensat(AT_FDCWD, path, &times, AT_SYMLINK_NOFOLLOW) == 0 else {
      throw SystemError("utimensat", path: path)
    }
  }
}

/// A second device with the same app installed, to import into.
func importingFixture(_ fixture: Fixture) throws -> (DeviceSession, AppRecord, Repository) {
  let root = DeviceRoot(path: fixture.dir.url("root2"))
  let session = try DeviceSession.open(
    root: root, mutating: true, creating: true, recovery: [ContainerRecovery(), HomeSwapRecovery()],
    environment: [:])
  let app = try session.install(bundleAt: fixturePath("bundles/Notes-1.0/Notes.app")).app
  return (session, app, try Repository(path: fixture.dir.url("repo2"), environment: [:]))
}

func sampleData(_ fixture: Fixture) throws {
  try fixture.write("Documents/notes.txt", "hello\n")
  try fixture.write("Documents/empty", "")
  try fixture.write("Documents/sixteen", String(repeating: "x", count: 16), mode: 0o600)
  try fixture.write(
    "Documents/deep/er/still/file.bin", bytes: (0..<70_000).map { UInt8(truncatingIfNeeded: $0 * 7) })
  try fixture.write(
    "Documents/big.bin", bytes: (0..<700_001).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 5) })
  try fixture.write("Documents/tool.sh", "#!/bin/sh\n", mode: 0o755)
  try fixture.write("Library/Application Support/db.sqlite", "SQLite")
  try fixture.write("Library/Caches/skip.me", "cache")
  guard symlink("../notes.txt", fixture.path("Documents/deep/link")) == 0 else {
    throw SystemError("symlink")
  }
  guard symlink("/etc/passwd", fixture.path("Documents/outward")) == 0 else { throw SystemError("symlink") }
  guard chmod(fixture.path("Documents/deep/er"), 0o700) == 0 else { throw SystemError("chmod") }
  try wholeSecondTimes(fixture.home)
}

@Suite("Device backups: export-backup and import-backup")
struct DeviceBackupTests {
  @Test(arguments: [false, true])
  func anExportReadBackRestoresTheSameTree(encrypted: Bool) throws {
    let fixture = try Fixture()
    try sampleData(fixture)
    let expected = try fixture.captureData()
    let folder = fixture.dir.url("backup")
    let password: [UInt8]? = encrypted ? Array("secret ✓".utf8) : nil
    let report = try fixture.session.exportDeviceBackup(
      [.app(fixture.app)], to: folder,
      options: DeviceBackupExportOptions(password: password, rounds: testRounds))
    #expect(report.isEncrypted == encrypted)
    #expect(report.domains.map(\.domain) == ["AppDomain-com.example.notes"])
    #expect(FileManager.default.fileExists(atPath: folder + "/Manifest.db"))
    #expect(!FileManager.default.fileExists(atPath: folder + "/Manifest.db-journal"))
    // Content is where the format puts it, and encrypted only when asked.
    let id = DeviceBackupNames.fileID(
      domain: "AppDomain-com.example.notes", relativePath: Array("Documents/notes.txt".utf8))
    let stored = try Data(contentsOf: URL(fileURLWithPath: folder + "/" + id.prefix(2) + "/" + id))
    #expect(encrypted ? stored.count == 16 && stored != Data("hello\n".utf8) : stored == Data("hello\n".utf8))

    let (session, app, repository) = try importingFixture(fixture)
    let backup = try DeviceBackup(at: folder) { password }
    #expect(backup.isEncrypted == encrypted)
    let listing = try backup.listing()
    #expect(listing.domains.map(\.identifier) == ["com.example.notes"])
    let result = try repository.importSnapshot(
      of: .app("com.example.notes", installed: app), from: backup, in: session)
    #expect(!result.isWaiting)
    #expect(!result.snapshot.isIncomplete)
    #expect(result.snapshot.tag == "ios-backup")
    #expect(result.snapshot.containerID == app.containerID)
    _ = try repository.restore("com.example.notes", snapshot: result.snapshot.id, in: session)
    let restored = try captureTree(
      session.home(of: app).path, skipping: [app.bundleDirectoryName, "tmp", "Library/Caches"])
    func data(_ capture: [[UInt8]: CapturedEntry]) -> [[UInt8]: CapturedEntry] {
      capture.filter {
        $0.key.starts(with: Array("Documents".utf8)) || $0.key.starts(with: Array("Library".utf8))
      }
    }
    #expect(data(expected).count > 10)
    expectSame(data(expected), data(restored))
    // The other device's home gets Library/Caches empty, as after any restore.
    #expect(!FileManager.default.fileExists(atPath: session.home(of: app).path + "/Library/Caches/skip.me"))
  }

  @Test func aSnapshotIsExportedAsItWasNotAsTheHomeIsNow() throws {
    let fixture = try Fixture()
    try sampleData(fixture)
    let expected = try fixture.captureData()
    let snapshot = try fixture.backup().snapshot
    try fixture.write("Documents/notes.txt", "changed since")
    try fixture.write("Documents/new.txt", "new")
    let folder = fixture.dir.url("backup")
    let report = try fixture.session.exportDeviceBackup(
      snapshot: snapshot, from: fixture.repository, to: folder,
      options: DeviceBackupExportOptions(password: Array("pw".utf8), rounds: testRounds))
    #expect(report.domains.map(\.domain) == ["AppDomain-com.example.notes"])
    // Its temporary folder under the device root is gone.
    let state = try FileManager.default.contentsOfDirectory(atPath: fixture.root.stateDirectory)
    #expect(!state.contains { $0.hasPrefix("device-backup-") }, "\(state)")
    let (session, app, repository) = try importingFixture(fixture)
    let result = try repository.importSnapshot(
      of: .app("com.example.notes", installed: app), from: try DeviceBackup(at: folder) { Array("pw".utf8) },
      in: session)
    _ = try repository.restore("com.example.notes", snapshot: result.snapshot.id, in: session)
    let restored = try captureTree(
      session.home(of: app).path, skipping: [app.bundleDirectoryName, "tmp", "Library/Caches"])
    func data(_ capture: [[UInt8]: CapturedEntry]) -> [[UInt8]: CapturedEntry] {
      capture.filter {
        $0.key.starts(with: Array("Documents".utf8)) || $0.key.starts(with: Array("Library".utf8))
      }
    }
    expectSame(data(expected), data(restored))
  }

  @Test func aWrongPasswordIsDeniedAndNoPasswordIsAskedForPlainBackups() throws {
    let fixture = try Fixture()
    try fixture.write("Documents/a", "a")
    let folder = fixture.dir.url("backup")
    _ = try fixture.session.exportDeviceBackup(
      [.app(fixture.app)], to: folder,
      options: DeviceBackupExportOptions(password: Array("right".utf8), rounds: testRounds))
    let wrong = #expect(throws: BackupError.self) { _ = try DeviceBackup(at: folder) { Array("wrong".utf8) } }
    #expect(wrong?.code == .denied)
    let none = #expect(throws: BackupError.self) { _ = try DeviceBackup(at: folder) { nil } }
    #expect(none?.code == .denied)
    let plain = fixture.dir.url("plain")
    _ = try fixture.session.exportDeviceBackup([.app(fixture.app)], to: plain)
    _ = try DeviceBackup(at: plain) {
      Issue.record("asked for a password of a plain backup")
      return nil
    }
    // An existing destination is never replaced.
    let again = #expect(throws: BackupError.self) {
      _ = try fixture.session.exportDeviceBackup([.app(fixture.app)], to: plain)
    }
    #expect(again?.code == .cannotCreate)
  }

  @Test func aNameThatIsNotUTF8IsLeftOutOfAnExportWithAWarning() throws {
    let fixture = try Fixture()
    try fixture.write("Documents/ok.txt", "ok")
    let documents = try FileDescriptor.open(fixture.path("Documents"), O_RDONLY | O_DIRECTORY)
    try documents.closeAfter { directory in
      let fd = try directory.open(rawName: [0xFF, 0x41], O_WRONLY | O_CREAT | O_EXCL)
      try fd.closeAfter { try $0.writeAll(Array("latin-1".utf8)) }
    }
    let folder = fixture.dir.url("backup")
    let report = try fixture.session.exportDeviceBackup([.app(fixture.app)], to: folder)
    #expect(report.warnings.contains { $0.contains("not UTF-8") })
    let listing = try DeviceBackup(at: folder) { nil }.listing()
    #expect(listing.domains.first { $0.kind == .app }?.files == 1)
  }

  @Test func anAppThatIsNotInstalledWaitsAndRestoreNamesTheBundle() throws {
    let fixture = try Fixture()
    try fixture.write("Documents/a", "a")
    let folder = fixture.dir.url("backup")
    _ = try fixture.session.exportDeviceBackup([.app(fixture.app)], to: folder)
    let root = DeviceRoot(path: fixture.dir.url("empty-device"))
    let session = try DeviceSession.open(
      root: root, mutating: true, creating: true, recovery: [], environment: [:])
    let repository = try Repository(path: fixture.dir.url("repo2"), environment: [:])
    let result = try repository.importSnapshot(
      of: .app("com.example.notes", installed: nil), from: try DeviceBackup(at: folder) { nil }, in: session)
    #expect(result.isWaiting)
    #expect(result.snapshot.containerID.isEmpty)
    let refused = #expect(throws: BackupError.self) {
      _ = try repository.restore("com.example.notes", snapshot: result.snapshot.id, in: session)
    }
    #expect(refused?.code == .notFound)
    #expect(refused?.message.contains("install the bundle of com.example.notes") == true)
    // Once the bundle is installed, the waiting snapshot restores.
    let app = try session.install(bundleAt: fixturePath("bundles/Notes-1.0/Notes.app")).app
    _ = try repository.restore("com.example.notes", snapshot: result.snapshot.id, in: session)
    #expect(try String(contentsOfFile: session.home(of: app).path + "/Documents/a", encoding: .utf8) == "a")
  }

  @Test func anAppGroupBecomesAGroupSnapshotOfThatTeam() throws {
    let fixture = try Fixture()
    guard let group = try fixture.session.registry.groups(of: fixture.app.bundleIdentifier).first else {
      Issue.record("Notes has no group")
      return
    }
    let container = fixture.session.root.groupContainer(group.containerID)
    try FileManager.default.createDirectory(
      atPath: container + "/Library/Preferences", withIntermediateDirectories: true)
    try Data("shared".utf8).write(to: URL(fileURLWithPath: container + "/shared.db"))
    let folder = fixture.dir.url("backup")
    let report = try fixture.session.exportDeviceBackup([.app(fixture.app), .group(group)], to: folder)
    #expect(report.domains.map(\.domain).contains("AppDomainGroup-group.com.example.shared"))
    let (session, _, repository) = try importingFixture(fixture)
    let target = try #require(try session.registry.groupIfPresent("group.com.example.shared"))
    let backup = try DeviceBackup(at: folder) { nil }
    #expect(try backup.listing().domains.map(\.kind) == [.app, .group])
    let result = try repository.importSnapshot(of: .group(target), from: backup, in: session)
    #expect(result.snapshot.team == target.teamIdentifier)
    #expect(result.snapshot.app == "group.com.example.shared")
    _ = try session.lockGroup(target.identifier)
    _ = try repository.restore(group: target, snapshot: result.snapshot.id, in: session)
    let restored = session.root.groupContainer(target.containerID) + "/shared.db"
    #expect(try String(contentsOfFile: restored, encoding: .utf8) == "shared")
  }

  /// The content reader walks the planned directories depth-first in name order, making each
  /// one only as it gets there: rows in no order, parents only implied, names whose byte order
  /// differs from their paths' ("a-c" sorts before "a/b" as a path, after "a" as a name) and a
  /// chain 1,500 levels deep must come out as the tree they describe.
  @Test func rowsInAnyOrderWithImpliedParentsImportAsTheTreeTheyDescribe() throws {
    let fixture = try Fixture()
    let folder = fixture.dir.url("b")
    let deep = "Documents/deep/" + String(repeating: "d/", count: 1_500) + "leaf"
    var private_ = HandRow.directory("Library/Private")
    private_.mode = UInt32(S_IFDIR | 0o700)
    try handBuiltBackup(
      folder,
      [
        .file(deep, "at the bottom"), .file("Documents/a-c", "beside"), private_,
        .file("Documents/a/b", "inside"), .file("Library/Private/z", "z"), .symlink("Documents/a/l", "b"),
        .file("Documents/a0", "after"),
      ])
    let result = try fixture.repository.importSnapshot(
      of: .app("com.example.notes", installed: fixture.app), from: try DeviceBackup(at: folder) { nil },
      in: fixture.session)
    #expect(result.snapshot.files == 6)
    #expect(!result.snapshot.isIncomplete)
    _ = try fixture.repository.restore("com.example.notes", snapshot: result.snapshot.id, in: fixture.session)
    #expect(fixture.names(in: "Documents") == ["a", "a-c", "a0", "deep"])
    #expect(fixture.names(in: "Documents/a") == ["b", "l"])
    #expect(try String(contentsOfFile: fixture.path("Documents/a/b"), encoding: .utf8) == "inside")
    #expect(try String(contentsOfFile: fixture.path("Documents/a-c"), encoding: .utf8) == "beside")
    #expect(try String(contentsOfFile: fixture.path("Library/Private/z"), encoding: .utf8) == "z")
    #expect(try String(contentsOfFile: fixture.path(deep), encoding: .utf8) == "at the bottom")
    // An implied directory gets 0755; one with a row keeps its mode.
    var status = stat()
    #expect(stat(fixture.path("Documents/deep/d/d"), &status) == 0 && status.st_mode & 0o7777 == 0o755)
    #expect(stat(fixture.path("Library/Private"), &status) == 0 && status.st_mode & 0o7777 == 0o700)
  }

  /// A file with several links goes out at each of its paths (the reader sends the later ones
  /// as hard links to the first, by inode) and comes back as separate copies.
  @Test func aHardLinkedFileIsExportedAtEachOfItsPaths() throws {
    let fixture = try Fixture()
    try fixture.write("Documents/first", "shared content")
    try FileManager.default.createDirectory(
      atPath: fixture.path("Library/Keep"), withIntermediateDirectories: true)
    guard link(fixture.path("Documents/first"), fixture.path("Documents/second")) == 0,
      link(fixture.path("Documents/first"), fixture.path("Library/Keep/third")) == 0
    else { throw SystemError("link") }
    let folder = fixture.dir.url("backup")
    let report = try fixture.session.exportDeviceBackup([.app(fixture.app)], to: folder)
    #expect(report.domains.first?.files == 3)
    for path in ["Documents/first", "Documents/second", "Library/Keep/third"] {
      #expect(
        try Data(contentsOf: URL(fileURLWithPath: contentPath(folder, path))) == Data("shared content".utf8),
        "\(path)")
    }
    let (session, app, repository) = try importingFixture(fixture)
    let result = try repository.importSnapshot(
      of: .app("com.example.notes", installed: app), from: try DeviceBackup(at: folder) { nil }, in: session)
    _ = try repository.restore("com.example.notes", snapshot: result.snapshot.id, in: session)
    let home = session.home(of: app).path
    for path in ["Documents/first", "Documents/second", "Library/Keep/third"] {
      #expect(try String(contentsOfFile: home + "/" + path, encoding: .utf8) == "shared content", "\(path)")
    }
  }
}
