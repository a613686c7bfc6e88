import AppboxArchive
import AppboxContainer
import AppboxCore
import AppboxTestSupport
import Foundation
import Glibc
import Testing

@testable import AppboxBackup

/// Fills a home with everything a backup must preserve.
func populate(_ fixture: Fixture) throws {
  try fixture.write("Documents/a.txt", "lower case")
  try fixture.write("Documents/A.txt", "upper case")
  try fixture.write("Documents/script.sh", "#!/bin/sh\n", mode: 0o750)
  try fixture.write("Documents/private", "secret", mode: 0o600)
  try fixture.write("Documents/Nested/deeper/file.bin", bytes: (0..<5000).map { UInt8($0 % 251) })
  try fixture.write("Library/Preferences/com.example.notes.plist", "<plist/>")
  try fixture.write("Library/Application Support/db.sqlite", bytes: [UInt8](repeating: 0xAB, count: 1_300_000))
  try fixture.setAttribute("Documents/a.txt", "user.color", Array("blue".utf8))
  try fixture.setAttribute("Documents/Nested", "user.tag", [0, 1, 2])
  let documents = fixture.path("Documents")
  #expect(mkdir(documents + "/Empty", 0o755) == 0)
  #expect(symlink("a.txt", documents + "/link") == 0)
  #expect(symlink("../Library/Preferences", documents + "/prefs") == 0)
  #expect(symlink("/nonexistent/absolute", documents + "/dangling") == 0)
  #expect(link(documents + "/A.txt", documents + "/Nested/hardlink-to-A") == 0)
  #expect(mkfifo(documents + "/pipe", 0o640) == 0)
  let weird = Array(documents.utf8) + Array("/caf\u{e9}-\u{1F600}".utf8)
  #expect(withCName(weird) { open($0, O_CREAT | O_WRONLY, 0o644) } >= 0)
  let invalid = Array(documents.utf8) + [UInt8(ascii: "/"), 0x66, 0xFF, 0xFE]
  let fd = withCName(invalid) { open($0, O_CREAT | O_WRONLY, 0o644) }
  #expect(fd >= 0)
  _ = write(fd, "not utf-8", 9)
  close(fd)
  #expect(mkdir(documents + "/ReadOnly", 0o755) == 0)
  try fixture.write("Documents/ReadOnly/inside", "x")
  #expect(chmod(documents + "/ReadOnly", 0o555) == 0)
  var times = [timespec(tv_sec: 1_234_567_890, tv_nsec: 123_456_789), timespec(tv_sec: 987_654_321, tv_nsec: 1)]
  #expect(utimensat(AT_FDCWD, documents + "/a.txt", &times, AT_SYMLINK_NOFOLLOW) == 0)
  #expect(utimensat(AT_FDCWD, documents + "/link", &times, AT_SYMLINK_NOFOLLOW) == 0)
  try fixture.write("Library/Caches/thumbnail", "regenerable")
  try fixture.write("tmp/scratch", "temporary")
}

struct RestoreEngineTests {
  @Test func restoresTheLatestAndAnOlderSnapshotByteForByte() throws {
    let fixture = try Fixture()
    try populate(fixture)
    let before = try fixture.captureData()
    let first = try fixture.backup()

    try fixture.write("Documents/a.txt", "rewritten")
    try FileManager.default.removeItem(atPath: fixture.path("Documents/Nested/deeper/file.bin"))
    try fixture.write("Documents/added.txt", "added")
    try fixture.trustSnapshots()
    let after = try fixture.captureData()
    let second = try fixture.backup()
    #expect(second.snapshot.kind == .incremental)

    _ = try fixture.repository.restore(fixture.app.bundleIdentifier, snapshot: first.snapshot.id, in: fixture.session)
    expectSame(before, try fixture.captureData())
    #expect(fixture.names(in: "Library/Caches").isEmpty)
    #expect(fixture.names(in: "tmp").isEmpty)
    #expect(try FileManager.default.contentsOfDirectory(atPath: fixture.home).contains("Notes.app"))
    #expect(try Seal.verify(bundleAt: fixture.path("Notes.app"), expectedDigest: fixture.app.seal).isValid)

    _ = try fixture.repository.restore(fixture.app.bundleIdentifier, in: fixture.session)
    expectSame(after, try fixture.captureData())
    #expect(try FileManager.default.contentsOfDirectory(atPath: fixture.root.applicationRoot) == [fixture.app.containerID])
  }

  @Test(arguments: [ArchiveCompressionCase.gzip, .zstd])
  func restoresFromCompressedArchives(_ compression: ArchiveCompressionCase) throws {
    let fixture = try Fixture()
    try populate(fixture)
    let before = try fixture.captureData()
    let result = try fixture.backup(BackupOptions(compression: compression.value))
    #expect(result.archivePath.hasSuffix(compression.value.fileSuffix))
    try fixture.write("Documents/a.txt", "changed")
    _ = try fixture.repository.restore(fixture.app.bundleIdentifier, in: fixture.session)
    expectSame(before, try fixture.captureData())
    #expect(try fixture.repository.check(readData: true).isClean)
  }

  @Test func aDamagedArchiveIsRefusedBeforeTheHomeIsTouched() throws {
    let fixture = try Fixture()
    try populate(fixture)
    let result = try fixture.backup()
    try fixture.write("Documents/a.txt", "newer")
    let live = try fixture.captureData()
    // Flip one byte of a file's content inside the archive (the catalog still has the old checksum).
    try flipByte(in: result.archivePath, within: Array("lower case".utf8))
    #expect {
      try fixture.repository.restore(fixture.app.bundleIdentifier, in: fixture.session)
    } throws: { ($0 as? BackupError)?.kind == .badData }
    expectSame(live, try fixture.captureData())
    #expect(try FileManager.default.contentsOfDirectory(atPath: fixture.root.applicationRoot) == [fixture.app.containerID])
  }

  @Test func aMissingArchiveIsRefusedBeforeTheHomeIsTouched() throws {
    let fixture = try Fixture()
    try populate(fixture)
    let first = try fixture.backup()
    try fixture.trustSnapshots()
    _ = try fixture.backup()
    try FileManager.default.removeItem(atPath: first.archivePath)
    let live = try fixture.captureData()
    #expect {
      try fixture.repository.restore(fixture.app.bundleIdentifier, in: fixture.session)
    } throws: { ($0 as? BackupError)?.kind == .badData }
    expectSame(live, try fixture.captureData())
  }

  @Test func restoringAnUninstalledAppInstallsItsBundleFromTheBackup() throws {
    let fixture = try Fixture()
    try populate(fixture)
    let before = try fixture.captureData()
    _ = try fixture.backup()
    try fixture.session.uninstall(fixture.app)
    let result = try fixture.repository.restore("com.example.notes", in: fixture.session)
    #expect(result.installedBundle)
    #expect(result.app.containerID != fixture.app.containerID)
    #expect(result.app.seal == fixture.app.seal)
    fixture.app = result.app
    expectSame(before, try fixture.captureData())
    #expect(try Seal.verify(bundleAt: fixture.path("Notes.app"), expectedDigest: result.app.seal).isValid)
  }

  @Test func extractsTheBundleOfASnapshot() throws {
    let fixture = try Fixture()
    let result = try fixture.backup()
    let target = fixture.dir.url("bundles")
    #expect(mkdir(target, 0o755) == 0)
    let path = try fixture.repository.extractBundle(of: result.snapshot, into: target)
    #expect(path == target + "/Notes.app")
    expectSame(try captureTree(fixture.path("Notes.app")), try captureTree(path))
  }

  @Test func anUnknownSnapshotIsNotFound() throws {
    let fixture = try Fixture()
    #expect {
      try fixture.repository.restore(fixture.app.bundleIdentifier, snapshot: "0badf00d", in: fixture.session)
    } throws: { ($0 as? BackupError)?.kind == .notFound }
  }
}

/// Swift Testing arguments must be Sendable and CustomStringConvertible-friendly.
enum ArchiveCompressionCase: String, CaseIterable, Sendable {
  case gzip, zstd
  var value: ArchiveCompression { self == .gzip ? .gzip : .zstd }
}
