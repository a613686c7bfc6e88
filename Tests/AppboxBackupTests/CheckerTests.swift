import AppboxCore
import AppboxTestSupport
import Foundation
import Testing

@testable import AppboxBackup
@testable import AppboxRepository

struct CheckerTests {
  @Test func aHealthyRepositoryIsClean() throws {
    let fixture = try Fixture()
    try populate(fixture)
    _ = try fixture.backup()
    _ = try fixture.backup()
    let report = try fixture.repository.check(readData: true)
    #expect(report.isClean, "\(report.problems)")
    #expect(report.snapshots == 2 && report.archives == 2)
    #expect(report.bytesVerified > 1_300_000)
  }

  @Test func aFlippedByteIsCaughtByTheChecksumAndByReadData() throws {
    let fixture = try Fixture()
    try populate(fixture)
    let result = try fixture.backup(StoredForm.plain.options)
    try flipByte(in: result.archivePath, within: Array("upper case".utf8))
    let quick = try fixture.repository.check()
    #expect(quick.problems.count == 1)
    #expect(quick.problems.first?.contains("CRC-32C does not match the catalog") == true)
    let thorough = try fixture.repository.check(readData: true)
    #expect(
      thorough.problems.contains { $0.contains("Documents/") && $0.contains("does not match its SHA-256") })
  }

  @Test func aMissingOrTruncatedArchiveIsAProblem() throws {
    let fixture = try Fixture()
    let first = try fixture.backup()
    let second = try fixture.backup()
    try FileManager.default.removeItem(atPath: first.archivePath)
    let handle = try #require(FileHandle(forUpdatingAtPath: second.archivePath))
    try handle.truncate(atOffset: 1024)
    try handle.close()
    let report = try fixture.repository.check()
    #expect(report.problems.contains { $0.contains(first.snapshot.archive) && $0.contains("missing") })
    #expect(report.problems.contains { $0.contains(second.snapshot.archive) && $0.contains("bytes") })
  }

  @Test func aBlobLocationThatPointsNowhereIsAProblem() throws {
    let fixture = try Fixture()
    try fixture.write("Documents/a.txt", "a")
    _ = try fixture.backup()
    try fixture.repository.catalog.database.execute("UPDATE blobs SET offset = offset + 512")
    let report = try fixture.repository.check()
    #expect(report.problems.contains { $0.contains("has no member") || $0.contains("is not") })
  }

  @Test func aMissingTreeIsAProblem() throws {
    let fixture = try Fixture()
    try fixture.write("Documents/sub/a.txt", "a")
    _ = try fixture.backup()
    try fixture.repository.catalog.database.execute(
      "DELETE FROM trees WHERE digest = (SELECT digest FROM trees ORDER BY length(data) LIMIT 1)")
    let report = try fixture.repository.check()
    #expect(report.problems.contains { $0.contains("is missing") })
  }
}
