// Reading manifests in pieces (Repository/ManifestReading.swift) without the CLI: a real
// backup's manifest object, read in pieces of odd sizes, gives exactly the rows its backup put
// in the catalog; a manifest found damaged only at its end (after most of its records were
// handed over) leaves nothing of its archive in a catalog synced from the objects, whether the
// damage is a sealed segment that does not authenticate or a checksum, and whether the catalog
// is synced from the objects or rebuilt from the archives alone.

import AppboxCore
import AppboxCrypto
import AppboxTestSupport
import Foundation
import Testing

@testable import AppboxBackup
@testable import AppboxRepository

struct ManifestReadingUnitTests {
  /// Writes `count` small files in nested folders of the fixture's home.
  static func writeFiles(_ fixture: Fixture, count: Int, prefix: String) throws {
    for index in 0..<count {
      try fixture.write("Documents/\(prefix)-\(index / 40)/file-\(index).txt", "\(prefix) content \(index)")
    }
  }

  /// The rows of `catalog` that archive `name`'s manifest carries, as a manifest.
  static func rows(of name: String, in catalog: Catalog) throws -> Manifest {
    Manifest(
      snapshot: try catalog.snapshots().first { $0.archive == name },
      trees: try catalog.storedTrees(inArchive: name).sorted { $0.digest < $1.digest },
      blobs: try catalog.blobs(inArchive: name).sorted { $0.digest < $1.digest },
      chunks: try catalog.chunks(inArchive: name).sorted { $0.digest < $1.digest },
      chunkLists: try catalog.chunkLists().filter { $0.archive == name }.map { ($0.digest, $0.list) }
        .sorted { $0.0 < $1.0 },
      frames: try catalog.frameIndex(of: name))
  }

  static func sorted(_ manifest: Manifest) -> Manifest {
    var result = manifest
    result.trees.sort { $0.digest < $1.digest }
    result.blobs.sort { $0.digest < $1.digest }
    result.chunks.sort { $0.digest < $1.digest }
    result.chunkLists.sort { $0.digest < $1.digest }
    return result
  }

  /// How many rows of each table name archive `name`.
  static func rowCount(of name: String, in catalog: Catalog) throws -> Int {
    var total = 0
    for table in ["archives", "trees", "blobs", "chunks", "chunk_lists", "snapshots"] {
      let column = table == "archives" ? "name" : "archive"
      total += try catalog.database.all(
        "SELECT count(*) FROM \(table) WHERE \(column) = ?1", .text(name), map: { Int($0.int64(0)) })[0]
    }
    return total
  }

  @Test func aRealBackupsManifestObjectReadsInPiecesAsItsBackupCatalogedIt() throws {
    let (fixture, results, _) = try CatalogRebuildUnitTests().twoSnapshots()
    try Self.writeFiles(fixture, count: 600, prefix: "many")
    let third = try fixture.backup()
    let catalog = fixture.repository.catalog
    for result in results + [third] {
      let name = result.snapshot.archive
      let bytes = try #require(try fixture.repository.store.get("manifests/" + name))
      let expected = try Self.rows(of: name, in: catalog)
      #expect(!expected.blobs.isEmpty && !expected.trees.isEmpty)
      for (piece, window) in [(1, 1), (3, 97), (4093, 4096), (bytes.count, RecordReader.defaultWindow)] {
        let input = RecordReader(
          size: Int64(bytes.count), window: window, source: pieces(of: bytes, size: piece))
        let record = try ManifestObject.readRecord(input, name: name)
        let collector = ManifestCollector()
        try ManifestDecoder.decode(input, archive: name, into: collector)
        #expect(record == (try catalog.archive(named: name)))
        #expect(collector.manifest.snapshot?.id == result.snapshot.id)
        var decoded = Self.sorted(collector.manifest)
        decoded.snapshot = expected.snapshot
        #expect(differences(decoded, expected) == [], "\(name), pieces of \(piece)")
      }
      // Through the store's reader, as sync and check read it.
      let summary = ManifestSummary()
      try fixture.repository.readManifestObject(name, fromCache: false, into: summary)
      #expect(summary.blobs == expected.blobs.count && summary.trees == expected.trees.count)
      #expect(summary.chunks == expected.chunks.count && summary.chunkLists == expected.chunkLists.count)
    }
    #expect(try Self.rows(of: third.snapshot.archive, in: catalog).blobs.count == 600)
  }

  /// An encrypted repository's manifest object whose last segment does not authenticate: the
  /// decoder has handed over many blob locations by then, and none stays in the catalog.
  @Test func aSealedManifestDamagedInItsLastSegmentLeavesNothingInTheCatalog() throws {
    let fixture = try Fixture()
    let location = RepositoryLocation.directory(fixture.dir.url("vault"))
    let password = Array("correct horse".utf8)
    let writer = try Repository.initialize(
      location, password: password,
      options: RepositoryOptions(environment: [:], cacheDirectory: fixture.dir.url("cache-w")))
    try fixture.write("Documents/kept.txt", "kept")
    let good = try writer.backup(fixture.app, in: fixture.session).snapshot
    // Enough that the manifest spans several windows of the reader (256 KiB): the records of
    // the windows before the damaged one are handed over first.
    try Self.writeFiles(fixture, count: 4000, prefix: "lost")
    let damaged = try writer.backup(fixture.app, in: fixture.session).snapshot
    let name = "manifests/" + damaged.archive
    var sealed = try #require(try writer.store.get(name))
    #expect(sealed.count > 2 * RecordReader.defaultWindow)
    sealed[sealed.count - 20] ^= 0x08
    try writer.store.put(name, sealed)

    // What reading hands over before the damage shows.
    let partial = ManifestSummary()
    #expect(throws: BackupError.self) {
      try writer.readManifestObject(damaged.archive, fromCache: false, into: partial)
    }
    #expect(partial.blobs > 100)

    // A new device syncs the repository from its objects.
    let reader = try Repository(
      location: location,
      options: RepositoryOptions(
        environment: [:], cacheDirectory: fixture.dir.url("cache-r"), password: { password }))
    let why = try #require(reader.damage.objects[name])
    #expect(why.contains("does not authenticate") && !why.contains("\n"))
    #expect(try Self.rowCount(of: damaged.archive, in: reader.catalog) == 0)
    #expect(try reader.catalog.snapshots().map(\.id) == [good.id])
    #expect(reader.damage.unlisted.map(\.id) == [damaged.id])
    let expected = try Self.rows(of: good.archive, in: writer.catalog)
    #expect(differences(try Self.rows(of: good.archive, in: reader.catalog), expected) == [])
    // check reads the object as the store holds it and names it.
    let report = try reader.check()
    #expect(report.problems.contains { $0.hasPrefix("Object '\(name)' is damaged") })
  }

  /// A local repository whose manifest object and archive member are both cut short of their
  /// checksum: no sync and no rebuild keeps any of that archive's records.
  @Test func aManifestDamagedAtItsChecksumLeavesNothingWhereverItIsReadFrom() throws {
    let (fixture, results, _) = try CatalogRebuildUnitTests().twoSnapshots(.plain)
    let path = fixture.repository.path
    let damaged = results[1].snapshot.archive
    let kept = results[0].snapshot.archive
    let expected = try Self.rows(of: kept, in: fixture.repository.catalog)
    let object = try #require(try fixture.repository.store.get("manifests/" + damaged))
    try fixture.repository.store.put("manifests/" + damaged, Array(object.dropLast()))
    // The archive's last member holds the same manifest: change its checksum there too.
    try flipByte(in: path + "/archives/" + damaged, within: Array(object.suffix(Digest.byteCount)))

    let partial = ManifestSummary()
    #expect(throws: BackupError.self) {
      try fixture.repository.readManifestObject(damaged, fromCache: false, into: partial)
    }
    #expect(partial.blobs > 0 && partial.trees > 0 && partial.chunkLists > 0)

    for suffix in ["", "-wal", "-shm"] { unlink(path + "/catalog.db" + suffix) }
    let synced = try Repository(path: path, create: false, environment: [:])
    #expect(synced.damage.objects["manifests/" + damaged] != nil)
    #expect(try Self.rowCount(of: damaged, in: synced.catalog) == 0)
    #expect(differences(try Self.rows(of: kept, in: synced.catalog), expected) == [])

    // From the archives alone (layout 1): the damaged member is skipped, whole.
    for item in ["config", "manifests", "snapshots", "catalog.db", "catalog.db-wal", "catalog.db-shm"] {
      try? FileTree.remove(atPath: path + "/" + item)
    }
    let report = try Repository.rebuildCatalog(at: path, environment: [:])
    #expect(report.archives == 1 && report.skipped.count == 1)
    #expect(report.skipped.first?.hasPrefix(damaged + ": The manifest of archive") == true)
    let rebuilt = try Catalog(path: path + "/catalog.db", readOnly: true)
    #expect(try Self.rowCount(of: damaged, in: rebuilt) == 0)
    #expect(differences(try Self.rows(of: kept, in: rebuilt), expected) == [])
  }
}
