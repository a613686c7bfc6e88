import AppboxArchive
import AppboxCore
import AppboxCrypto
import AppboxTestSupport
import Foundation
import Glibc
import Testing

@testable import AppboxBackup
@testable import AppboxRepository

/// Large files edited in place: cut into chunks once they change in place, then stored as the
/// chunks they changed, restored whole.
struct ChunkedBackupTests {
  static let size = 6 << 20
  /// A large file that is not a database (databases are indexed when first read: below).
  static let store = "Library/Application Support/Assets.pack"

  /// Overwrites 16 KiB of `path` at `offset` in place (same inode) with bytes of `seed`.
  func edit(_ path: String, at offset: Int, seed: UInt64) throws -> [UInt8] {
    let edit = randomBytes(16 << 10, seed: seed)
    let fd = try FileDescriptor.open(path, O_WRONLY)
    try fd.closeAfter {
      try $0.writeAll(UnsafeRawBufferPointer(start: edit, count: edit.count), at: Int64(offset))
    }
    return edit
  }

  /// A 6 MiB file backed up whole, edited in place (16 KiB at 1 MiB: this backup cuts it into
  /// chunks, all new) and backed up, edited again (16 KiB at 3 MiB) and backed up a third time.
  /// Returns the fixture, the three results and captures, and the last edit's bytes.
  func editedInPlace() throws -> (Fixture, [BackupResult], [[[UInt8]: CapturedEntry]], [UInt8]) {
    let fixture = try Fixture()
    try fixture.write("Documents/small.txt", "small")
    let path = try fixture.write(Self.store, bytes: randomBytes(Self.size, seed: 11))
    var captures = [try fixture.captureData()]
    var results = [try fixture.backup()]
    var last: [UInt8] = []
    for (offset, seed) in [(1 << 20, UInt64(13)), (3 << 20, UInt64(12))] {
      last = try edit(path, at: offset, seed: seed)
      try fixture.trustSnapshots()
      captures.append(try fixture.captureData())
      results.append(try fixture.backup())
    }
    return (fixture, results, captures, last)
  }

  /// Member paths of an archive, through GNU tar (the oracle: every member lists).
  func members(_ archive: String) throws -> [String] {
    let result = try runProcess("/usr/bin/tar", ["-tf", archive])
    #expect(result.status == 0, "\(result.err)")
    return result.out.split(separator: "\n").map(String.init)
  }

  /// The chunk members (`.appbox/chunks/<hex digest>`) of an archive, through GNU tar.
  func chunkMembers(_ archive: String) throws -> [String] {
    try members(archive).filter { $0.hasPrefix(".appbox/chunks/") }
  }

  /// The catalog's chunk lists, by content digest.
  func chunkListDigests(_ fixture: Fixture) throws -> Set<Digest> {
    Set(try fixture.repository.catalog.chunkLists().map(\.digest))
  }

  /// The digest the latest snapshot recorded for the file at `path`.
  func digest(of path: String, in fixture: Fixture) throws -> Digest? {
    var digest: Digest?
    let result = try fixture.repository.catalog.snapshots(app: fixture.app.bundleIdentifier).last!
    var tree = try fixture.repository.catalog.tree(result.rootTree)
    let names = path.split(separator: "/").map { Array($0.utf8) }
    for (index, name) in names.enumerated() {
      guard let entry = tree.entry(named: name) else { return nil }
      if index == names.count - 1 {
        digest = entry.digest
      } else {
        tree = try fixture.repository.catalog.tree(entry.digest!)
      }
    }
    return digest
  }

  /// Chunking is lazy: a first backup and a large file new at its path get no chunk rows (one
  /// hash pass over their bytes); a file seen changing in place is cut into chunks, and from
  /// then on its edits store about the chunks they touched.
  @Test func largeFilesAreChunkedOnlyOnceTheyChangeInPlace() throws {
    let fixture = try Fixture()
    let catalog = fixture.repository.catalog
    let path = try fixture.write(Self.store, bytes: randomBytes(Self.size, seed: 11))
    let first = try fixture.backup()
    #expect(try members(first.archivePath).contains(Self.store))
    #expect(try catalog.count("chunks") == 0 && catalog.count("chunk_lists") == 0)

    // A new large file in an incremental: stored whole, not chunked either.
    try fixture.write("Documents/video.mov", bytes: randomBytes(3 << 20, seed: 14))
    try fixture.trustSnapshots()
    let second = try fixture.backup()
    #expect(try members(second.archivePath).contains("Documents/video.mov"))
    #expect(try catalog.count("chunks") == 0 && catalog.count("chunk_lists") == 0)

    // The first edit in place: the file is cut into chunks, and only it. Its earlier version,
    // which the first archive holds whole, is cut where it lies: the edit stores only the
    // chunks it changed, and records the others inside that member.
    _ = try edit(path, at: 1 << 20, seed: 13)
    try fixture.trustSnapshots()
    let third = try fixture.backup()
    let edited = try #require(try digest(of: Self.store, in: fixture))
    #expect(try chunkListDigests(fixture) == [edited])
    let video = try #require(try digest(of: "Documents/video.mov", in: fixture))
    #expect(try catalog.chunkList(video) == nil)
    let thirdMembers = try members(third.archivePath)
    #expect(!thirdMembers.contains(Self.store))
    #expect((1...2).contains(thirdMembers.filter { $0.hasPrefix(".appbox/chunks/") }.count), "\(thirdMembers)")
    #expect(third.snapshot.bytesAdded > 0 && third.snapshot.bytesAdded < Int64(Self.size) / 2)
    let foreign = try catalog.chunks(declaredBy: [third.snapshot.archive])
    #expect(foreign.count >= 2 && foreign.allSatisfy { $0.archive == first.snapshot.archive })

    // The next edit stores about the chunks it touched.
    _ = try edit(path, at: 3 << 20, seed: 12)
    try fixture.trustSnapshots()
    let expected = try fixture.captureData()
    let fourth = try fixture.backup()
    let chunks = try chunkMembers(fourth.archivePath)
    #expect((1...2).contains(chunks.count), "\(chunks)")
    #expect(fourth.snapshot.bytesAdded > 0 && fourth.snapshot.bytesAdded < Int64(Self.size) / 2)
    try fixture.write(Self.store, "overwritten")
    _ = try fixture.repository.restore(fixture.app.bundleIdentifier, in: fixture.session)
    expectSame(expected, try fixture.captureData())
    let check = try fixture.repository.check(readData: true)
    #expect(check.isClean, "\(check.problems)")
  }

  /// Repositories written before lazy chunking also indexed a large file's chunks inside its
  /// whole member (`chunks` rows pointing into it): the file's next edit still reuses them,
  /// restores byte for byte from them, and check reads them.
  @Test func chunksIndexedInsideAWholeMemberAreStillReused() throws {
    let fixture = try Fixture()
    let content = randomBytes(Self.size, seed: 11)
    let path = try fixture.write(Self.store, bytes: content)
    _ = try fixture.backup()
    // What the older appbox recorded besides the member: each chunk at its place in it.
    let blob = try #require(try fixture.repository.catalog.blob(SHA256.hash(content)))
    let dataOffset = try #require(blob.dataOffset)
    var position = 0
    var index: [ChunkLocation] = []
    for length in chunkLengths(content) {
      index.append(
        ChunkLocation(
          digest: SHA256.hash(Array(content[position..<(position + length)])), archive: blob.archive,
          offset: blob.offset, dataOffset: dataOffset + Int64(position), size: Int64(length)))
      position += length
    }
    #expect(index.count >= 3)
    try fixture.repository.catalog.insertChunks(index)

    _ = try edit(path, at: 3 << 20, seed: 12)
    try fixture.trustSnapshots()
    let expected = try fixture.captureData()
    let second = try fixture.backup()
    let chunks = try chunkMembers(second.archivePath)
    #expect((1...2).contains(chunks.count), "\(chunks)")
    #expect(second.snapshot.bytesAdded > 0 && second.snapshot.bytesAdded < Int64(Self.size) / 2)
    try fixture.write(Self.store, "overwritten")
    _ = try fixture.repository.restore(fixture.app.bundleIdentifier, in: fixture.session)
    expectSame(expected, try fixture.captureData())
    let check = try fixture.repository.check(readData: true)
    #expect(check.isClean, "\(check.problems)")
  }

  @Test func anEditInPlaceStoresOnlyTheChunksItTouched() throws {
    let (fixture, results, captures, _) = try editedInPlace()
    let last = results[2]
    // The first backup stored the file whole (a member of its own), the second as chunks.
    #expect(try members(results[0].archivePath).contains(Self.store))
    #expect(try fixture.repository.catalog.count("chunks") >= 3)
    // The third holds only new chunks, as members under .appbox/chunks, not the file.
    let incremental = try members(last.archivePath)
    let chunks = incremental.filter { $0.hasPrefix(".appbox/chunks/") }
    #expect(!incremental.contains(Self.store))
    #expect((1...2).contains(chunks.count), "\(incremental)")
    #expect(last.snapshot.bytesAdded > 0 && last.snapshot.bytesAdded < Int64(Self.size) / 2)
    // Each chunk member is named by its digest and holds exactly its bytes.
    let extracted = TemporaryDirectory("chunks")
    #expect(try runProcess("/usr/bin/tar", ["-xf", last.archivePath, "-C", extracted.path]).status == 0)
    for chunk in chunks {
      let bytes = Array(try Data(contentsOf: URL(fileURLWithPath: extracted.path + "/" + chunk)))
      #expect(SHA256.hash(bytes).hex == splitPath(chunk).name)
    }
    // Restored byte for byte, from chunks spread over two archives and from the whole member;
    // check reads them all.
    for (index, result) in results.enumerated().reversed() {
      try fixture.write(Self.store, "overwritten")
      _ = try fixture.repository.restore(
        fixture.app.bundleIdentifier, snapshot: result.snapshot.id, in: fixture.session)
      expectSame(captures[index], try fixture.captureData())
    }
    let check = try fixture.repository.check(readData: true)
    #expect(check.isClean, "\(check.problems)")
    #expect(check.bytesVerified >= 2 * Int64(Self.size))
  }

  /// The version byte of the manifest at the end of archive `path` (the oracle: GNU tar).
  func manifestVersion(_ path: String) throws -> UInt8 {
    let result = try runProcess("/usr/bin/tar", ["-xOf", path, ".appbox/manifest"])
    #expect(result.status == 0, "\(result.err)")
    let bytes = Array(result.out.utf8)
    return bytes.count > 8 ? bytes[8] : 0
  }

  /// The first edit's foreign chunks (inside the first archive's whole member) outlive the
  /// archive that recorded them: `forget` of that snapshot alone keeps the first archive and
  /// has its repack archive record them again (not copied), a catalog rebuilt from the
  /// manifests finds them, and every snapshot left restores byte for byte.
  @Test func chunksRecordedInAnEarlierArchiveOutliveTheArchiveThatRecordedThem() throws {
    let (fixture, results, captures, _) = try editedInPlace()
    let app = fixture.app.bundleIdentifier
    #expect(try manifestVersion(results[0].archivePath) == 3)
    #expect(try manifestVersion(results[1].archivePath) == 4)
    let recorded = try fixture.repository.catalog.chunks(declaredBy: [results[1].snapshot.archive])
    #expect(recorded.count >= 2 && recorded.allSatisfy { $0.archive == results[0].snapshot.archive })

    let report = try fixture.repository.forget(app: app, observer: SilentObserver()) { history in
      (history.filter { $0.id == results[1].snapshot.id }, history.filter { $0.id != results[1].snapshot.id })
    }
    #expect(report.deletedArchives == [results[1].snapshot.archive])
    let repack = try #require(report.newArchive)
    #expect(try manifestVersion(fixture.repository.archivePath(repack)) == 4)
    // Recorded again, not copied: the repack archive holds only the chunks the dropped archive
    // held itself (the first edit's), none of those in the first archive.
    let redeclared = try fixture.repository.catalog.chunks(declaredBy: [repack])
    #expect(!redeclared.isEmpty && redeclared.allSatisfy { $0.archive == results[0].snapshot.archive })
    let copied = Set(
      try chunkMembers(fixture.repository.archivePath(repack))
        .map { String($0.dropFirst(".appbox/chunks/".count)) })
    #expect(!copied.isEmpty && copied.isDisjoint(with: redeclared.map(\.digest.hex)), "\(copied)")
    var check = try fixture.repository.check(readData: true)
    #expect(check.isClean, "\(check.problems)")

    let rebuilt = try Repository.rebuildCatalog(at: fixture.repository.path, environment: [:])
    #expect(rebuilt.skipped.isEmpty && rebuilt.snapshots == 2)
    var reopened = try Repository(path: fixture.repository.path, environment: [:])
    #expect(try reopened.catalog.chunks(declaredBy: [repack]).count == redeclared.count)
    check = try reopened.check(readData: true)
    #expect(check.isClean, "\(check.problems)")
    for index in [2, 0] {
      try fixture.write(Self.store, "overwritten")
      _ = try reopened.restore(app, snapshot: results[index].snapshot.id, in: fixture.session)
      expectSame(captures[index], try fixture.captureData())
    }

    // Then the first archive goes too: what the last snapshot needs of it is copied out.
    _ = try reopened.forget(app: app, keepLast: 1)
    _ = try Repository.rebuildCatalog(at: fixture.repository.path, environment: [:])
    reopened = try Repository(path: fixture.repository.path, environment: [:])
    check = try reopened.check(readData: true)
    #expect(check.isClean, "\(check.problems)")
    try fixture.write(Self.store, "overwritten")
    _ = try reopened.restore(app, in: fixture.session)
    expectSame(captures[2], try fixture.captureData())
  }

  /// The earlier version is compared byte for byte, never trusted: where its archive is
  /// damaged, the chunk is written again (no location ever points at other bytes), and an edit
  /// that shifts the bytes after it (an insertion, in place) reuses only the chunks before it.
  /// Every snapshot restores byte for byte.
  @Test func theEarlierVersionIsComparedByteForByte() throws {
    let fixture = try Fixture()
    let catalog = fixture.repository.catalog
    var content = randomBytes(Self.size, seed: 11)
    let path = try fixture.write(Self.store, bytes: content)
    let first = try fixture.backup()
    // Damage the earlier version inside its archive, in the third chunk (which the edit below
    // leaves as it was).
    let lengths = chunkLengths(content)
    let third = lengths[0] + lengths[1]
    try flipByte(in: first.archivePath, within: Array(content[(third + 1000)..<(third + 1064)]))
    let edit = try edit(path, at: 16, seed: 13)
    content.replaceSubrange(16..<(16 + edit.count), with: edit)
    try fixture.trustSnapshots()
    let edited = try fixture.captureData()
    let second = try fixture.backup()
    let foreign = try catalog.chunks(declaredBy: [second.snapshot.archive])
    // Reused: every chunk but the edited first and the damaged third.
    #expect(foreign.count == lengths.count - 2, "\(foreign.count) of \(lengths.count)")
    #expect(!foreign.contains { $0.dataOffset - foreign[0].dataOffset + Int64(lengths[0]) == Int64(third) })
    let stored = try chunkMembers(second.archivePath)
    #expect(stored.count == 2, "\(stored)")
    try fixture.write(Self.store, "overwritten")
    _ = try fixture.repository.restore(fixture.app.bundleIdentifier, in: fixture.session)
    expectSame(edited, try fixture.captureData())

    // An insertion in place, the first edit of another file: rewritten through the same inode
    // with 100 bytes more at 3 MiB. The chunks before the insertion are the earlier version's;
    // those after it moved, and are written.
    let other = randomBytes(Self.size, seed: 21)
    var longer = other
    longer.insert(contentsOf: randomBytes(100, seed: 17), at: 3 << 20)
    let otherPath = try fixture.write("Documents/Other.pack", bytes: other)
    try fixture.trustSnapshots()
    _ = try fixture.backup()
    let fd = try FileDescriptor.open(otherPath, O_WRONLY)
    try fd.closeAfter { try $0.writeAll(UnsafeRawBufferPointer(start: longer, count: longer.count), at: 0) }
    try fixture.trustSnapshots()
    let inserted = try fixture.captureData()
    let fourth = try fixture.backup()
    let before = chunkLengths(other).reduce(into: [0]) { $0.append($0.last! + $1) }.filter { $0 < 3 << 20 }
    let reused = try catalog.chunks(declaredBy: [fourth.snapshot.archive])
    #expect(reused.count == before.count - 1 && reused.count >= 3, "\(reused.count) reused, \(before)")
    #expect(fourth.snapshot.bytesAdded > 0 && fourth.snapshot.bytesAdded < Int64(Self.size) - (2 << 20))
    try fixture.write(Self.store, "overwritten")
    try fixture.write("Documents/Other.pack", "overwritten")
    _ = try fixture.repository.restore(fixture.app.bundleIdentifier, in: fixture.session)
    expectSame(inserted, try fixture.captureData())
    _ = try fixture.repository.restore(
      fixture.app.bundleIdentifier, snapshot: second.snapshot.id, in: fixture.session)
    expectSame(edited, try fixture.captureData())
  }

  /// Only an edit in place (the same inode) is compared with its earlier version: a file saved
  /// anew (a new inode renamed over it) stores its chunks, as before.
  @Test func aFileSavedAnewIsNotCutFromItsEarlierVersion() throws {
    let fixture = try Fixture()
    var content = randomBytes(Self.size, seed: 11)
    let path = try fixture.write(Self.store, bytes: content)
    _ = try fixture.backup()
    content.replaceSubrange(0..<16, with: [UInt8](repeating: 7, count: 16))
    let saved = try fixture.write(Self.store + ".tmp", bytes: content)
    #expect(rename(saved, path) == 0)
    try fixture.trustSnapshots()
    let expected = try fixture.captureData()
    let second = try fixture.backup()
    #expect(try chunkMembers(second.archivePath).count >= 3)
    #expect(try fixture.repository.catalog.chunks(declaredBy: [second.snapshot.archive]).isEmpty)
    try fixture.write(Self.store, "overwritten")
    _ = try fixture.repository.restore(fixture.app.bundleIdentifier, in: fixture.session)
    expectSame(expected, try fixture.captureData())
  }

  /// `forget` keeps the chunks a kept snapshot needs (copying them out of the archives it
  /// deletes), and a catalog rebuilt from the archives restores the file again.
  @Test func forgetAndRebuildKeepChunkedFilesRestorable() throws {
    let (fixture, results, captures, _) = try editedInPlace()
    let report = try fixture.repository.forget(app: fixture.app.bundleIdentifier, keepLast: 1)
    #expect(Set(report.deletedArchives) == [results[0].snapshot.archive, results[1].snapshot.archive])
    let repack = try #require(report.newArchive)
    #expect(try members(fixture.repository.archivePath(repack)).contains { $0.hasPrefix(".appbox/chunks/") })
    var check = try fixture.repository.check(readData: true)
    #expect(check.isClean, "\(check.problems)")
    _ = try fixture.repository.restore(fixture.app.bundleIdentifier, in: fixture.session)
    expectSame(captures[2], try fixture.captureData())

    let rebuilt = try Repository.rebuildCatalog(at: fixture.repository.path, environment: [:])
    #expect(rebuilt.skipped.isEmpty && rebuilt.snapshots == 1)
    let reopened = try Repository(path: fixture.repository.path, environment: [:])
    check = try reopened.check(readData: true)
    #expect(check.isClean, "\(check.problems)")
    try fixture.write(Self.store, "overwritten")
    _ = try reopened.restore(fixture.app.bundleIdentifier, in: fixture.session)
    expectSame(captures[2], try fixture.captureData())
  }

  /// Chunk bytes and chunk lists read back from a repository are untrusted: a damaged chunk
  /// or a list naming the wrong chunks fails the restore (65) and leaves the home alone.
  @Test func damagedChunksAndListsAreCaught() throws {
    let (fixture, results, _, edit) = try editedInPlace()
    let live = try fixture.captureData()
    try flipByte(in: results[2].archivePath, within: Array(edit[8192..<8224]))
    #expect(throws: BackupError.self) {
      _ = try fixture.repository.restore(fixture.app.bundleIdentifier, in: fixture.session)
    }
    expectSame(live, try fixture.captureData())
    let check = try fixture.repository.check(readData: true)
    #expect(check.problems.contains { $0.contains("does not match its SHA-256") }, "\(check.problems)")
    #expect(fixture.repository.catalog.database.isInTransaction == false)

    // A list whose chunks are swapped: every chunk exists, the file does not come out right.
    let (other, _, _, _) = try editedInPlace()
    let catalog = other.repository.catalog
    let (digest, list, _) = try #require(try catalog.chunkLists().first)
    var swapped = list
    swapped.chunks.swapAt(0, 1)
    try catalog.database.execute(
      "UPDATE chunk_lists SET list = ?1 WHERE digest = ?2", .blob(swapped.encoded()), .blob(digest.bytes))
    let before = try other.captureData()
    #expect(throws: BackupError.self) {
      _ = try other.repository.restore(other.app.bundleIdentifier, in: other.session)
    }
    expectSame(before, try other.captureData())
    // A list that does not add up to the file's size is refused as it is read.
    try catalog.database.execute(
      "UPDATE chunk_lists SET list = ?1 WHERE digest = ?2",
      .blob(ChunkList(chunks: Array(list.chunks.dropLast())).encoded()), .blob(digest.bytes))
    #expect(throws: BackupError.self) {
      _ = try other.repository.restore(other.app.bundleIdentifier, in: other.session)
    }
  }

  /// A file saved anew (a new inode at the same path) is chunked like one edited in place,
  /// and zeros restore as holes.
  @Test func atomicSavesAndZeroRunsAreChunkedToo() throws {
    let fixture = try Fixture()
    let size = 12 << 20
    var content = randomBytes(size, seed: 21)
    for index in (2 << 20)..<(11 << 20) { content[index] = 0 }
    try fixture.write("Documents/video.mov", bytes: content)
    _ = try fixture.backup()
    // The first save cuts it into chunks (its first backup stored it whole); the second
    // stores about the chunk it changed.
    var last: BackupResult?
    for index in [100, 200] {
      content[index] ^= 1
      let temporary = try fixture.write("Documents/video.mov.saving", bytes: content)
      guard rename(temporary, fixture.path("Documents/video.mov")) == 0 else { throw SystemError("rename") }
      try fixture.trustSnapshots()
      last = try fixture.backup()
    }
    let expected = try fixture.captureData()
    let second = try #require(last)
    #expect(second.snapshot.bytesAdded < Int64(size) / 3, "\(second.snapshot.bytesAdded)")
    try fixture.write("Documents/video.mov", "gone")
    _ = try fixture.repository.restore(fixture.app.bundleIdentifier, in: fixture.session)
    expectSame(expected, try fixture.captureData())
    var st = stat()
    #expect(stat(fixture.path("Documents/video.mov"), &st) == 0)
    #expect(
      Int(st.st_blocks) * 512 <= size - ChunkingParameters.maximum + (64 << 10), "the zero chunks stay holes")
  }

  /// `advise` attributes to the edited file exactly the chunks its backup stored.
  @Test func adviceCountsTheChunksAnEditAdded() throws {
    let (fixture, results, _, _) = try editedInPlace()
    let report = try fixture.repository.advise(app: fixture.app.bundleIdentifier)
    let bar = try #require(report.chart.bars.last)
    #expect(bar.bytes.reduce(0, +) == results[2].snapshot.bytesAdded)
  }

  /// Contents shared by many files (small, large, chunked) are written once and copied to the
  /// others, modes and all, even to files their owner cannot read.
  @Test func sharedContentsRestoreToEveryPath() throws {
    let fixture = try Fixture()
    let small = randomBytes(5000, seed: 31)
    for index in 0..<300 {
      try fixture.write("Documents/copies/\(index).txt", bytes: small, mode: index == 7 ? 0o200 : 0o644)
    }
    let large = randomBytes(3 << 20, seed: 32)
    for index in 0..<3 { try fixture.write("Documents/large-\(index).bin", bytes: large) }
    _ = try fixture.backup()
    var edited = large
    edited[100] ^= 1
    for index in 0..<3 { try fixture.write("Documents/large-\(index).bin", bytes: edited) }
    try fixture.trustSnapshots()
    let expected = try fixture.captureData()
    _ = try fixture.backup()
    try FileManager.default.removeItem(atPath: fixture.path("Documents"))
    _ = try fixture.repository.restore(fixture.app.bundleIdentifier, in: fixture.session)
    expectSame(expected, try fixture.captureData())
  }

  /// The digests of `content`'s chunks, as this version cuts them.
  func chunkDigests(_ content: [UInt8]) -> [Digest] {
    var position = 0
    return chunkLengths(content).map { length in
      defer { position += length }
      return SHA256.hash(Array(content[position..<(position + length)]))
    }
  }

  /// Databases (by name, or by SQLite's header under any name) get their chunks indexed inside
  /// their member the first time a backup reads them, so their first edit in place stores only
  /// the chunks it touched; other large files stay lazy. The index survives a catalog rebuilt
  /// from the archives, and restores and checks read through it.
  @Test func databasesAreIndexedWhenFirstReadSoTheirFirstEditStoresOnlyItsChunks() throws {
    let fixture = try Fixture()
    let catalog = fixture.repository.catalog
    let database = randomBytes(Self.size, seed: 41)
    let headed = DatabaseFiles.sqliteHeader + randomBytes(3 << 20, seed: 42)
    let other = randomBytes(3 << 20, seed: 43)
    let path = try fixture.write("Library/Application Support/Model.sqlite", bytes: database)
    try fixture.write("Documents/cache.bin", bytes: headed)
    try fixture.write("Documents/other.bin", bytes: other)
    let first = try fixture.backup()
    let members = try members(first.archivePath)
    #expect(
      members.contains("Library/Application Support/Model.sqlite") && members.contains("Documents/cache.bin"))
    #expect(!members.contains { $0.hasPrefix(".appbox/chunks/") }, "indexed in place: no chunk members")
    for digest in chunkDigests(database) + chunkDigests(headed) {
      let location = try #require(try catalog.chunk(digest))
      #expect(location.archive == first.snapshot.archive)
    }
    #expect(try chunkDigests(other).allSatisfy { try catalog.chunk($0) == nil })
    #expect(try catalog.count("chunk_lists") == 0)

    _ = try edit(path, at: 3 << 20, seed: 44)
    try fixture.trustSnapshots()
    let expected = try fixture.captureData()
    let second = try fixture.backup()
    let chunks = try chunkMembers(second.archivePath)
    #expect((1...2).contains(chunks.count), "\(chunks)")
    #expect(second.snapshot.bytesAdded > 0 && second.snapshot.bytesAdded < Int64(Self.size) / 4)

    let rebuilt = try Repository.rebuildCatalog(at: fixture.repository.path, environment: [:])
    #expect(rebuilt.skipped.isEmpty && rebuilt.snapshots == 2)
    let reopened = try Repository(path: fixture.repository.path, environment: [:])
    #expect(try chunkDigests(headed).allSatisfy { try reopened.catalog.chunk($0) != nil })
    try FileManager.default.removeItem(atPath: fixture.path("Library/Application Support"))
    _ = try reopened.restore(fixture.app.bundleIdentifier, in: fixture.session)
    expectSame(expected, try fixture.captureData())
    let check = try reopened.check(readData: true)
    #expect(check.isClean, "\(check.problems)")
  }

  /// A database the app rewrites while the backup reads it (an adversary racing the reader):
  /// the backup reads it again, and every chunk location indexed from either reading points at
  /// bytes of the archive that hash to it, so check reads them clean, the next edit reuses
  /// them, and both snapshots restore byte for byte.
  @Test func aDatabaseChangingWhileIndexedLeavesOnlyTrueChunkLocations() throws {
    let fixture = try Fixture()
    let name = "Library/Application Support/Race.sqlite"
    let path = try fixture.write(name, bytes: randomBytes(Self.size, seed: 51))
    var options = BackupOptions()
    options.afterRead = { file, attempt in
      guard String(decoding: file, as: UTF8.self) == name, attempt == 1 else { return }
      _ = try? self.edit(path, at: 2 << 20, seed: 52)
    }
    let first = try fixture.backup(options)
    #expect(first.snapshot.warnings == 0)
    #expect(try members(first.archivePath).filter { $0 == name }.count == 2, "read, changed, read again")
    let firstCapture = try fixture.captureData()
    #expect(try fixture.repository.catalog.count("chunks") >= 3)
    var check = try fixture.repository.check(readData: true)
    #expect(check.isClean, "\(check.problems)")

    _ = try edit(path, at: 4 << 20, seed: 53)
    try fixture.trustSnapshots()
    let secondCapture = try fixture.captureData()
    let second = try fixture.backup()
    let chunks = try chunkMembers(second.archivePath)
    #expect((1...2).contains(chunks.count), "\(chunks)")
    for (result, capture) in [(first, firstCapture), (second, secondCapture)] {
      try fixture.write(name, "overwritten")
      _ = try fixture.repository.restore(
        fixture.app.bundleIdentifier, snapshot: result.snapshot.id, in: fixture.session)
      expectSame(capture, try fixture.captureData())
    }
    check = try fixture.repository.check(readData: true)
    #expect(check.isClean, "\(check.problems)")
  }

  /// What counts as a database: the names of SQLite and Realm files, and their headers.
  @Test func databasesAreToldByNameAndHeader() {
    for name in ["Store.sqlite", "a/b/Cache.DB", "x.sqlite3", "default.realm", "y.db3"] {
      #expect(DatabaseFiles.hasDatabaseExtension(Array(name.utf8)), "\(name)")
    }
    for name in ["Store.sqlite-wal", "db", ".db", "movie.mov", "dir.db/file", "notes.txt"] {
      #expect(!DatabaseFiles.hasDatabaseExtension(Array(name.utf8)), "\(name)")
    }
    #expect(DatabaseFiles.isDatabase(leadingBytes: (DatabaseFiles.sqliteHeader + [1, 2, 3, 4])[...]))
    #expect(!DatabaseFiles.isDatabase(leadingBytes: DatabaseFiles.sqliteHeader.dropLast()))
    let realm = [UInt8](repeating: 0, count: 16) + Array("T-DB".utf8)
    #expect(DatabaseFiles.isDatabase(leadingBytes: realm[...]))
    #expect(!DatabaseFiles.isDatabase(leadingBytes: realm.dropLast()))
  }
}
