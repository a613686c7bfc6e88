// Rebuilding a catalog (CatalogRebuilder.swift) without the CLI: from a layout 2 repository's
// manifest and snapshot objects, and from a layout 1 repository's archives alone, the rebuilt
// catalog holds exactly the rows the catalog had (snapshots, archives, trees, blobs, chunks,
// chunk lists), and what it locates restores.

import AppboxCore
import AppboxCrypto
import AppboxTestSupport
import Foundation
import Glibc
import Testing

@testable import AppboxBackup
@testable import AppboxRepository

/// Every row of a catalog, as values that compare.
struct CatalogContents: Equatable {
  var snapshots: [Snapshot]
  var archives: [ArchiveRecord]
  var blobs: [BlobLocation]
  /// Each tree's digest, the archive carrying it and its serialization (resolved).
  var trees: [String]
  var chunks: [ChunkLocation]
  var chunkLists: [String]

  init(_ catalog: Catalog) throws {
    snapshots = try catalog.snapshots()
    archives = try catalog.archives()
    blobs = try catalog.blobs().sorted { $0.digest < $1.digest }
    let digests = try catalog.database.all("SELECT digest, archive FROM trees") {
      (Digest(validating: $0.blob(0))!, $0.text(1) ?? "")
    }
    trees = try digests.sorted { $0.0 < $1.0 }.map { digest, archive in
      "\(digest.hex) \(archive) \(fingerprint(try catalog.treeData(digest)))"
    }
    chunks = try catalog.chunks().sorted { $0.digest < $1.digest }
    chunkLists = try catalog.chunkLists().map {
      "\($0.digest.hex) \($0.archive) \(fingerprint($0.list.encoded()))"
    }
    .sorted()
  }
}

extension CatalogContents {
  /// What differs from `other`, table by table (the first differing row of each), for messages.
  func differences(from other: CatalogContents) -> [String] {
    func first<T>(_ name: String, _ a: [T], _ b: [T], _ equal: (T, T) -> Bool) -> String? {
      if a.count != b.count { return "\(name): \(a.count) rows, expected \(b.count)" }
      guard let index = a.indices.first(where: { !equal(a[$0], b[$0]) }) else { return nil }
      return "\(name)[\(index)]: \(a[index]), expected \(b[index])"
    }
    return [
      first("snapshots", snapshots, other.snapshots, ==), first("archives", archives, other.archives, ==),
      first("blobs", blobs, other.blobs, ==), first("trees", trees, other.trees, ==),
      first("chunks", chunks, other.chunks, ==), first("chunkLists", chunkLists, other.chunkLists, ==),
    ].compactMap { $0 }
  }
}

struct CatalogRebuildUnitTests {
  /// Two snapshots of a home with small files, a large one (edited in place between them: chunked
  /// in the second) and a change between them.
  func twoSnapshots(_ form: StoredForm = .framed) throws -> (
    Fixture, [BackupResult], [[[UInt8]: CapturedEntry]]
  ) {
    let fixture = try Fixture()
    try fixture.write("Documents/a.txt", "first version")
    try fixture.write("Documents/same.txt", "unchanged")
    try fixture.write("Library/Application Support/big.db", bytes: patternBytes(3 << 20, seed: 77))
    var captures = [try fixture.captureData()]
    var results = [try fixture.backup(form.options)]
    try fixture.trustSnapshots()
    try fixture.write("Documents/a.txt", "second version, longer")
    try fixture.write("Documents/new.txt", "new")
    // Edited in place: the second backup stores it as chunks (the first stored it whole).
    let big = try FileDescriptor.open(fixture.path("Library/Application Support/big.db"), O_WRONLY)
    try big.closeAfter { fd in
      try [UInt8](repeating: 9, count: 64).withUnsafeBytes { try fd.writeAll($0, at: 1 << 20) }
    }
    captures.append(try fixture.captureData())
    results.append(try fixture.backup(form.options))
    // Undo what trustSnapshots did to the first row: the objects hold its real time.
    try fixture.repository.catalog.database.execute(
      "UPDATE snapshots SET time = time - 3600 WHERE id = ?1", .text(results[0].snapshot.id))
    #expect(try fixture.repository.catalog.count("chunks") > 0)
    return (fixture, results, captures)
  }

  @Test func aRebuildFromTheObjectsGivesBackTheSameCatalog() throws {
    let (fixture, results, captures) = try twoSnapshots()
    let original = try CatalogContents(fixture.repository.catalog)
    #expect(original.snapshots.map(\.id) == results.map(\.snapshot.id))
    // Whatever the catalog held is not what the rebuild uses.
    try fixture.repository.catalog.database.execute("DELETE FROM blobs")
    try fixture.repository.catalog.database.execute("DELETE FROM trees")
    let report = try Repository.rebuildCatalog(
      .directory(fixture.repository.path), options: RepositoryOptions(environment: [:]))
    #expect(report.snapshots == 2 && report.archives == 2 && report.skipped == [])
    #expect(report.blobs == original.blobs.count && report.trees == original.trees.count)
    let rebuilt = try Repository(path: fixture.repository.path, create: false, environment: [:])
    let contents = try CatalogContents(rebuilt.catalog)
    #expect(contents.differences(from: original) == [])
    #expect(contents == original)
    _ = try rebuilt.restore(
      fixture.app.bundleIdentifier, snapshot: results[0].snapshot.id, in: fixture.session)
    expectSame(captures[0], try fixture.captureData())
  }

  @Test func aLayoutOneRebuildFromTheArchivesAloneGivesBackTheSameCatalog() throws {
    let (fixture, results, captures) = try twoSnapshots()
    let original = try CatalogContents(fixture.repository.catalog)
    let path = fixture.repository.path
    // Only the archives are left (as in a repository from before layout 2).
    for item in ["config", "manifests", "snapshots", "catalog.db", "catalog.db-wal", "catalog.db-shm"] {
      try? FileTree.remove(atPath: path + "/" + item)
    }
    let report = try Repository.rebuildCatalog(at: path, environment: [:])
    #expect(report.snapshots == 2 && report.archives == 2 && report.skipped == [])
    let rebuilt = try Catalog(path: path + "/catalog.db", readOnly: true)
    let contents = try CatalogContents(rebuilt)
    #expect(contents.differences(from: original) == [])
    #expect(contents == original)
    let repository = try Repository(path: path, create: false, environment: [:])
    #expect(repository.isLegacy)
    _ = try repository.restore(
      fixture.app.bundleIdentifier, snapshot: results[1].snapshot.id, in: fixture.session)
    expectSame(captures[1], try fixture.captureData())
  }
}
