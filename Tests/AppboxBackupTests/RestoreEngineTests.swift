import AppboxArchive
import AppboxContainer
import AppboxCore
import AppboxTestSupport
import Foundation
import Glibc
import Testing

@testable import AppboxBackup
@testable import AppboxRepository

/// Fills a home with everything a backup must preserve (see `writeSampleData`).
func populate(_ fixture: Fixture) throws {
  try writeSampleData(home: fixture.home)
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

    _ = try fixture.repository.restore(
      fixture.app.bundleIdentifier, snapshot: first.snapshot.id, in: fixture.session)
    expectSame(before, try fixture.captureData())
    #expect(fixture.names(in: "Library/Caches").isEmpty)
    #expect(fixture.names(in: "tmp").isEmpty)
    #expect(try FileManager.default.contentsOfDirectory(atPath: fixture.home).contains("Notes.app"))
    #expect(try Seal.verify(bundleAt: fixture.path("Notes.app"), expectedDigest: fixture.app.seal).isValid)

    _ = try fixture.repository.restore(fixture.app.bundleIdentifier, in: fixture.session)
    expectSame(after, try fixture.captureData())
    #expect(fixture.session.finishDeferredWork().isEmpty)
    #expect(
      try FileManager.default.contentsOfDirectory(atPath: fixture.root.applicationRoot) == [
        fixture.app.containerID
      ])
  }

  @Test(arguments: [StoredForm.gzip, .framed, .zstdStream])
  func restoresFromCompressedArchives(_ form: StoredForm) throws {
    let fixture = try Fixture()
    try populate(fixture)
    let before = try fixture.captureData()
    let result = try fixture.backup(form.options)
    #expect(result.archivePath.hasSuffix(form.options.compression.fileSuffix))
    try fixture.write("Documents/a.txt", "changed")
    _ = try fixture.repository.restore(fixture.app.bundleIdentifier, in: fixture.session)
    expectSame(before, try fixture.captureData())
    #expect(try fixture.repository.check(readData: true).isClean)
  }

  @Test func aDamagedArchiveIsRefusedBeforeTheHomeIsTouched() throws {
    let fixture = try Fixture()
    try populate(fixture)
    let result = try fixture.backup(StoredForm.plain.options)
    try fixture.write("Documents/a.txt", "newer")
    let live = try fixture.captureData()
    // Flip one byte of a file's content inside the archive (the catalog still has the old checksum).
    try flipByte(in: result.archivePath, within: Array("lower case".utf8))
    #expect {
      try fixture.repository.restore(fixture.app.bundleIdentifier, in: fixture.session)
    } throws: { ($0 as? BackupError)?.kind == .badData }
    expectSame(live, try fixture.captureData())
    #expect(
      try FileManager.default.contentsOfDirectory(atPath: fixture.root.applicationRoot) == [
        fixture.app.containerID
      ])
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
