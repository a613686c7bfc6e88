import AppboxCore
import AppboxCrypto
import AppboxTestSupport
import Foundation
import Testing

@testable import AppboxBackup
@testable import AppboxRepository

struct ForgetterTests {
  /// Three snapshots: full, then two incrementals that change and add content.
  func history() throws -> (Fixture, [BackupResult], [[[UInt8]: CapturedEntry]]) {
    let fixture = try Fixture()
    try populate(fixture)
    var results: [BackupResult] = []
    var captures: [[[UInt8]: CapturedEntry]] = []
    for round in 0..<3 {
      if round > 0 {
        try fixture.write("Documents/round.txt", "round \(round)")
        try fixture.write(
          "Documents/Nested/deeper/file.bin", bytes: [UInt8](repeating: UInt8(round), count: 2000))
        try fixture.trustSnapshots()
      }
      captures.append(try fixture.captureData())
      results.append(try fixture.backup())
    }
    return (fixture, results, captures)
  }

  @Test func forgetKeepsTheRestRestorableAndDeletesTheOldArchives() throws {
    let (fixture, results, captures) = try history()
    let report = try fixture.repository.forget(app: fixture.app.bundleIdentifier, keepLast: 1)
    #expect(report.removed.map(\.id) == results.prefix(2).map(\.snapshot.id))
    #expect(report.kept.map(\.id) == [results[2].snapshot.id])
    #expect(Set(report.deletedArchives) == Set(results.prefix(2).map(\.snapshot.archive)))
    let newArchive = try #require(report.newArchive)
    let files = try FileManager.default.contentsOfDirectory(atPath: fixture.repository.archivesPath)
    #expect(Set(files) == [results[2].snapshot.archive, newArchive])
    #expect(try fixture.repository.catalog.count("snapshots") == 1)
    let check = try fixture.repository.check(readData: true)
    #expect(check.isClean, "\(check.problems)")
    #expect(check.notes.isEmpty)

    try fixture.write("Documents/a.txt", "changed after forget")
    _ = try fixture.repository.restore(fixture.app.bundleIdentifier, in: fixture.session)
    expectSame(captures[2], try fixture.captureData())
    // Unreachable trees and blobs are gone from the catalog.
    var trees: Set<Digest> = []
    var blobs: Set<Digest> = []
    try fixture.repository.reach(results[2].snapshot.rootTree, trees: &trees, blobs: &blobs)
    #expect(try fixture.repository.catalog.count("trees") == trees.count)
    #expect(try fixture.repository.catalog.count("blobs") == blobs.count)
  }

  @Test func forgetWithNothingToDropChangesNothing() throws {
    let (fixture, _, _) = try history()
    let archives = try FileManager.default.contentsOfDirectory(atPath: fixture.repository.archivesPath)
    let report = try fixture.repository.forget(app: fixture.app.bundleIdentifier, keepLast: 5)
    #expect(report.removed.isEmpty && report.newArchive == nil)
    #expect(try FileManager.default.contentsOfDirectory(atPath: fixture.repository.archivesPath) == archives)
  }

  @Test func aSecondForgetMovesLiveContentOnlyWhenItMust() throws {
    let (fixture, results, captures) = try history()
    _ = try fixture.repository.forget(app: fixture.app.bundleIdentifier, keepLast: 2)
    try fixture.trustSnapshots()
    _ = try fixture.backup()
    let second = try fixture.repository.forget(app: fixture.app.bundleIdentifier, keepLast: 1)
    #expect(second.removed.count == 2)
    #expect(try fixture.repository.check(readData: true).isClean)
    _ = try fixture.repository.restore(fixture.app.bundleIdentifier, in: fixture.session)
    expectSame(captures[2], try fixture.captureData())
    _ = results
  }

  @Test func theCatalogCanBeRebuiltFromTheArchivesAlone() throws {
    let (fixture, results, captures) = try history()
    _ = try fixture.repository.forget(app: fixture.app.bundleIdentifier, keepLast: 2)
    let catalog = fixture.repository.catalog
    let counts = try ["snapshots", "archives", "trees", "blobs"].map { try catalog.count($0) }
    let report = try Repository.rebuildCatalog(at: fixture.repository.path, environment: [:])
    #expect(report.skipped.isEmpty)
    let rebuilt = try Repository(path: fixture.repository.path, create: false, environment: [:])
    #expect(try ["snapshots", "archives", "trees", "blobs"].map { try rebuilt.catalog.count($0) } == counts)
    #expect(try rebuilt.catalog.snapshots().map(\.id) == results.suffix(2).map(\.snapshot.id))
    #expect(try rebuilt.check(readData: true).isClean)
    _ = try rebuilt.restore(
      fixture.app.bundleIdentifier, snapshot: results[1].snapshot.id, in: fixture.session)
    expectSame(captures[1], try fixture.captureData())
  }
}
