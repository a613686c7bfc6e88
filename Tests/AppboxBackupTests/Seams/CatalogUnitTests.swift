// The catalog on its own (Catalog.swift, Catalog+Chunks.swift, CatalogRebuilder.swift): a new
// or old database opens at the latest schema, snapshot rows come back as written and in
// commit order, blob and chunk lookups keep the first copy, and a rebuild (from the objects,
// or from the archives alone) gives back the catalog a repository had.

import AppboxCore
import AppboxCrypto
import AppboxStore
import AppboxTestSupport
import Foundation
import Glibc
import Testing

@testable import AppboxBackup
@testable import AppboxRepository

struct CatalogUnitTests {
  static func digest(_ byte: UInt8) -> Digest { Digest(bytes: [UInt8](repeating: byte, count: 32)) }

  static func sampleSnapshot(_ id: String, app: String = "com.example.notes", time: Double) -> Snapshot {
    Snapshot(
      id: id, app: app, device: "UDID-1", containerID: "C0FFEE", version: "1.0",
      bundleDirectoryName: "Notes.app",
      seal: "ab" + String(repeating: "0", count: 62), time: Date(timeIntervalSince1970: time),
      kind: .incremental,
      tag: "pre-update", parent: "00000001", rootTree: digest(7), files: 12, bytes: 3456, bytesAdded: 789,
      archive: id + ".tar", keychainOffset: 4096, warnings: 2, unreadable: 1,
      unreadablePaths: [[0x44, 0xFF, 0x2F, 0x0A], Array("Library/x".utf8)], team: "TEAM12345", torn: 1,
      tornPaths: [Array("Documents/log".utf8)])
  }

  @Test func aNewCatalogIsPrivateAtTheLatestSchemaAndReopens() throws {
    let directory = TemporaryDirectory("catalog")
    let path = directory.url("catalog.db")
    do {
      let catalog = try Catalog(path: path)
      #expect(try catalog.database.userVersion() == Catalog.migrations.count)
      for table in ["archives", "snapshots", "trees", "blobs", "chunks", "chunk_lists"] {
        #expect(try catalog.count(table) == 0)
      }
      try catalog.insert(
        ArchiveRecord(name: "0a0a0a0a.tar", size: 10, checksum: 5, compression: .none, created: Date()))
    }
    var st = stat()
    #expect(stat(path, &st) == 0 && st.st_mode & 0o777 == 0o600)
    let reopened = try Catalog(path: path)
    #expect(try reopened.archives().map(\.name) == ["0a0a0a0a.tar"])
    let reader = try Catalog(path: path, readOnly: true)
    #expect(try reader.archives().count == 1)
    #expect(throws: (any Error).self) {
      try reader.insert(
        ArchiveRecord(name: "x.tar", size: 1, checksum: 1, compression: .none, created: Date()))
    }
  }

  @Test func anOlderCatalogMigratesKeepingItsRowsAndANewerOneIsRefused() throws {
    let directory = TemporaryDirectory("catalog")
    let path = directory.url("catalog.db")
    do {
      // A catalog as an appbox of schema 3 left it, with one snapshot.
      let old = try Database(path: path, mode: .readWriteCreate)
      try old.migrate(Array(Catalog.migrations.prefix(3)))
      try old.execute(
        "INSERT INTO archives(name, size, crc32c, compression, created) VALUES ('0b0b0b0b.tar', 1, 2, 'none', 3)"
      )
      try old.execute(
        """
        INSERT INTO snapshots(id, app, device, container, version, bundle_name, seal, time, kind, root_tree,
          files, bytes, bytes_added, archive, warnings) VALUES ('0b0b0b0b', 'com.example.notes', 'D', 'C', '1.0',
          'Notes.app', 'S', 1000, 'full', ?1, 3, 30, 30, '0b0b0b0b.tar', 0)
        """, .blob(Self.digest(9).bytes))
    }
    // Read-only it cannot be migrated, so it is refused rather than misread.
    #expect(throws: BackupError.self) { _ = try Catalog(path: path, readOnly: true) }
    let catalog = try Catalog(path: path)
    #expect(try catalog.database.userVersion() == Catalog.migrations.count)
    let snapshot = try #require(try catalog.snapshot(id: "0b0b0b0b"))
    #expect(snapshot.kind == .full && snapshot.files == 3 && snapshot.rootTree == Self.digest(9))
    #expect(
      snapshot.team == nil && snapshot.torn == 0 && snapshot.tornPaths == [] && snapshot.unreadable == 0)
    #expect(try catalog.database.all("SELECT committed IS NULL FROM snapshots") { $0.int(0) } == [1])
    // A catalog from a newer appbox is not opened at all.
    try catalog.database.execute("PRAGMA user_version = \(Catalog.migrations.count + 1)")
    #expect(throws: (any Error).self) { _ = try Catalog(path: path) }
  }

  @Test func snapshotRowsComeBackAsWrittenInCommitOrder() throws {
    let directory = TemporaryDirectory("catalog")
    let catalog = try Catalog(path: directory.url("catalog.db"))
    // Committed first but recorded later (a clock that stepped back): commit order wins.
    let first = Self.sampleSnapshot("1111aaaa", time: 2000)
    var second = Self.sampleSnapshot("2222bbbb", time: 1000)
    second.tag = nil
    second.parent = nil
    second.keychainOffset = nil
    second.unreadablePaths = []
    second.tornPaths = []
    second.team = nil
    second.kind = .full
    let other = Self.sampleSnapshot("3333cccc", app: "com.example.journal", time: 1500)
    for snapshot in [first, second, other] {
      try catalog.insert(
        ArchiveRecord(
          name: snapshot.archive, size: 1, checksum: 1, compression: .none, created: snapshot.time))
      try catalog.insert(snapshot, committed: Date())
    }
    #expect(try catalog.snapshot(id: "1111aaaa") == first)
    #expect(try catalog.snapshot(id: "2222BBBB") == second)
    #expect(try catalog.snapshots().map(\.id) == ["1111aaaa", "2222bbbb", "3333cccc"])
    #expect(try catalog.snapshots(app: "com.example.notes").map(\.id) == ["1111aaaa", "2222bbbb"])
    #expect(try catalog.snapshots(app: "com.example.journal") == [other])
    #expect(try catalog.snapshot(id: "4444dddd") == nil)
    // The same id again: refused, or kept as it was when told to ignore it.
    var changed = first
    changed.files = 99
    #expect(throws: (any Error).self) { try catalog.insert(changed) }
    try catalog.insert(changed, ignoringExisting: true)
    #expect(try catalog.snapshot(id: "1111aaaa")?.files == 12)
    try catalog.deleteSnapshot(id: "1111aaaa")
    #expect(try catalog.snapshots().map(\.id) == ["2222bbbb", "3333cccc"])
  }

  @Test func blobLookupsKeepTheFirstCopyAndRetiredArchivesAreNotReused() throws {
    let directory = TemporaryDirectory("catalog")
    let catalog = try Catalog(path: directory.url("catalog.db"))
    for name in ["aaaaaaaa.tar", "bbbbbbbb.tar"] {
      try catalog.insert(ArchiveRecord(name: name, size: 1, checksum: 1, compression: .none, created: Date()))
    }
    let one = BlobLocation(
      digest: Self.digest(1), archive: "aaaaaaaa.tar", offset: 1536, path: Array("Documents/a".utf8),
      size: 300,
      dataOffset: 2048)
    let two = BlobLocation(
      digest: Self.digest(2), archive: "aaaaaaaa.tar", offset: 512, path: [0x66, 0xFE], size: 40)
    try catalog.insertBlobs([one, two])
    // A second copy of content one, in a later archive: the first location stays.
    try catalog.insertBlobs([
      BlobLocation(digest: Self.digest(1), archive: "bbbbbbbb.tar", offset: 512, path: [0x62], size: 300),
      BlobLocation(digest: Self.digest(3), archive: "bbbbbbbb.tar", offset: 2560, path: [0x63], size: 5),
    ])
    #expect(try catalog.blob(Self.digest(1)) == one)
    #expect(try catalog.blob(Self.digest(2)) == two)
    #expect(try catalog.blob(Self.digest(4)) == nil)
    let position = try #require(try catalog.blobPosition(Self.digest(1)))
    #expect(position.archive == "aaaaaaaa.tar" && position.offset == 1536 && position.dataOffset == 2048)
    #expect(try catalog.blobs(inArchive: "aaaaaaaa.tar").map(\.digest) == [Self.digest(2), Self.digest(1)])
    #expect(try catalog.contentBytes(Self.digest(1), storedIn: "aaaaaaaa.tar") == 300)
    #expect(try catalog.contentBytes(Self.digest(1), storedIn: "bbbbbbbb.tar") == 0)
    var visited: [Digest] = []
    try catalog.forEachBlobPosition { digest, _, _, _, _ in visited.append(digest) }
    #expect(visited == [Self.digest(1), Self.digest(2), Self.digest(3)])
    // An archive a fleet's forget marked: its content is still found, but not reused.
    #expect(try catalog.hasBlob(Self.digest(1)))
    try catalog.database.execute("UPDATE archives SET retired = 1 WHERE name = 'aaaaaaaa.tar'")
    #expect(try catalog.hasBlob(Self.digest(1)) == false)
    #expect(try catalog.hasBlob(Self.digest(3)))
    #expect(try catalog.blob(Self.digest(1)) == one)
  }

  @Test func chunkLocationsAndChunkListsAddUp() throws {
    let directory = TemporaryDirectory("catalog")
    let catalog = try Catalog(path: directory.url("catalog.db"))
    let chunkA = ChunkLocation(
      digest: Self.digest(10), archive: "cccccccc.tar", offset: 0, dataOffset: 512, size: 70_000)
    let chunkB = ChunkLocation(
      digest: Self.digest(11), archive: "cccccccc.tar", offset: 0, dataOffset: 70_512, size: 90_000)
    let chunkC = ChunkLocation(
      digest: Self.digest(12), archive: "dddddddd.tar", offset: 1024, dataOffset: 1536, size: 80_000)
    try catalog.insertChunks([chunkB, chunkA, chunkC])
    try catalog.insertChunks([
      ChunkLocation(digest: Self.digest(10), archive: "dddddddd.tar", offset: 9, dataOffset: 9, size: 70_000)
    ])
    #expect(try catalog.chunk(Self.digest(10)) == chunkA)
    #expect(try catalog.hasChunk(Self.digest(11)) && !(try catalog.hasChunk(Self.digest(13))))
    #expect(try catalog.chunks(inArchive: "cccccccc.tar") == [chunkA, chunkB])
    // A content made of A, B, A again and C.
    let list = ChunkList(chunks: [
      (Self.digest(10), 70_000), (Self.digest(11), 90_000), (Self.digest(10), 70_000),
      (Self.digest(12), 80_000),
    ])
    try catalog.insertChunkList(Self.digest(20), list, archive: "cccccccc.tar")
    #expect(try catalog.chunkList(Self.digest(20)) == list)
    #expect(try catalog.chunkList(Self.digest(20), size: 310_000) == list)
    #expect(throws: (any Error).self) { _ = try catalog.chunkList(Self.digest(20), size: 310_001) }
    #expect(try catalog.chunkList(Self.digest(21)) == nil)
    // Bytes first stored in each archive: A once and B in the first, C in the second.
    #expect(try catalog.contentBytes(Self.digest(20), storedIn: "cccccccc.tar") == 160_000)
    #expect(try catalog.contentBytes(Self.digest(20), storedIn: "dddddddd.tar") == 80_000)
    #expect(try catalog.namedArchives() == ["cccccccc.tar", "dddddddd.tar"])
    let lists = try catalog.chunkLists()
    #expect(lists.count == 1 && lists[0].digest == Self.digest(20) && lists[0].archive == "cccccccc.tar")
  }
}

/// Foreign chunk records (a manifest's chunks inside another archive): inserted only once their
/// archive is known, after the manifest's own chunks, whatever order manifests are read in.
struct ForeignChunkIngestTests {
  static func location(_ byte: UInt8, in archive: String, at offset: Int64) -> ChunkLocation {
    ChunkLocation(
      digest: CatalogUnitTests.digest(byte), archive: archive, offset: offset, dataOffset: offset + 512,
      size: 300_000)
  }

  func ingest(_ manifest: Manifest, archive: String, into catalog: Catalog) throws {
    try catalog.database.inTransaction {
      try catalog.insert(ArchiveRecord(name: archive, size: 1 << 20, checksum: 1, compression: .none, created: Date()))
      try catalog.ingest(manifest, archive: archive)
    }
  }

  @Test func aRecordReadBeforeItsArchiveWaitsAndOneWhoseArchiveIsGoneIsDropped() throws {
    let directory = TemporaryDirectory("catalog")
    let catalog = try Catalog(path: directory.url("catalog.db"))
    // The later archive's manifest first: its records name an archive the catalog lacks yet,
    // and one that is gone for good.
    var later = Manifest(snapshot: nil, trees: [], blobs: [])
    later.foreignChunks = [Self.location(1, in: "00000001.tar", at: 0), Self.location(2, in: "0000dead.tar", at: 0)]
    try ingest(later, archive: "00000002.tar", into: catalog)
    #expect(try catalog.count("chunks") == 0)
    #expect(catalog.pendingForeignChunks.count == 2)
    // The earlier archive holds digest 1 itself too, elsewhere: its own location wins.
    var earlier = Manifest(snapshot: nil, trees: [], blobs: [])
    earlier.chunks = [Self.location(1, in: "00000001.tar", at: 4096)]
    earlier.foreignChunks = []
    try ingest(earlier, archive: "00000001.tar", into: catalog)
    try catalog.settleForeignChunks()
    #expect(catalog.pendingForeignChunks.isEmpty)
    #expect(try catalog.chunk(CatalogUnitTests.digest(1))?.offset == 4096)
    #expect(try catalog.chunk(CatalogUnitTests.digest(2)) == nil)
    #expect(try catalog.chunks(declaredBy: ["00000002.tar"]).isEmpty)

    // Read in order, a record is inserted at once, declared by the archive that recorded it.
    var third = Manifest(snapshot: nil, trees: [], blobs: [])
    third.foreignChunks = [Self.location(3, in: "00000001.tar", at: 8192)]
    try ingest(third, archive: "00000003.tar", into: catalog)
    #expect(catalog.pendingForeignChunks.isEmpty)
    #expect(try catalog.chunks(declaredBy: ["00000003.tar"]) == [Self.location(3, in: "00000001.tar", at: 8192)])
    #expect(try catalog.namedArchives().contains("00000003.tar"))
  }
}
