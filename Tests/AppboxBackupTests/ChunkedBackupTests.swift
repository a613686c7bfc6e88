import AppboxArchive
import AppboxCore
import AppboxCrypto
import AppboxTestSupport
import Foundation
import Glibc
import Testing

@testable import AppboxBackup
@testable import AppboxRepository

/// Large files edited in place: stored as the chunks they changed, restored whole.
struct ChunkedBackupTests {
  static let size = 6 << 20

  /// A 6 MiB file backed up whole (its chunks indexed), then edited in place (16 KiB at
  /// 3 MiB, same inode) and backed up again. Returns the fixture, both results and captures.
  func editedInPlace() throws -> (Fixture, [BackupResult], [[[UInt8]: CapturedEntry]], [UInt8]) {
    let fixture = try Fixture()
    try fixture.write("Documents/small.txt", "small")
    let path = try fixture.write(
      "Library/Application Support/Store.sqlite", bytes: randomBytes(Self.size, seed: 11))
    var captures = [try fixture.captureData()]
    var results = [try fixture.backup()]
    let edit = randomBytes(16 << 10, seed: 12)
    let fd = try FileDescriptor.open(path, O_WRONLY)
    try fd.closeAfter { try $0.writeAll(UnsafeRawBufferPointer(start: edit, count: edit.count), at: 3 << 20) }
    try fixture.trustSnapshots()
    captures.append(try fixture.captureData())
    results.append(try fixture.backup())
    return (fixture, results, captures, edit)
  }

  /// Member paths of an archive, through GNU tar (the oracle: every member lists).
  func members(_ archive: String) throws -> [String] {
    let result = try runProcess("/usr/bin/tar", ["-tf", archive])
    #expect(result.status == 0, "\(result.err)")
    return result.out.split(separator: "\n").map(String.init)
  }

  @Test func anEditInPlaceStoresOnlyTheChunksItTouched() throws {
    let (fixture, results, captures, _) = try editedInPlace()
    let second = results[1]
    // The first backup stored the file whole (a member of its own) and indexed its chunks.
    let full = try members(results[0].archivePath)
    #expect(full.contains("Library/Application Support/Store.sqlite"))
    #expect(try fixture.repository.catalog.count("chunks") >= 3)
    // The second holds only new chunks, as members under .appbox/chunks, not the file.
    let incremental = try members(second.archivePath)
    let chunks = incremental.filter { $0.hasPrefix(".appbox/chunks/") }
    #expect(!incremental.contains("Library/Application Support/Store.sqlite"))
    #expect((1...2).contains(chunks.count), "\(incremental)")
    #expect(second.snapshot.bytesAdded > 0 && second.snapshot.bytesAdded < Int64(Self.size) / 2)
    // Each chunk member is named by its digest and holds exactly its bytes.
    let extracted = TemporaryDirectory("chunks")
    #expect(try runProcess("/usr/bin/tar", ["-xf", second.archivePath, "-C", extracted.path]).status == 0)
    for chunk in chunks {
      let bytes = Array(try Data(contentsOf: URL(fileURLWithPath: extracted.path + "/" + chunk)))
      #expect(SHA256.hash(bytes).hex == splitPath(chunk).name)
    }
    // Restored byte for byte, from chunks spread over both archives; check reads them all.
    try fixture.write("Library/Application Support/Store.sqlite", "overwritten")
    _ = try fixture.repository.restore(fixture.app.bundleIdentifier, in: fixture.session)
    expectSame(captures[1], try fixture.captureData())
    _ = try fixture.repository.restore(
      fixture.app.bundleIdentifier, snapshot: results[0].snapshot.id, in: fixture.session)
    expectSame(captures[0], try fixture.captureData())
    let check = try fixture.repository.check(readData: true)
    #expect(check.isClean, "\(check.problems)")
    #expect(check.bytesVerified >= Int64(Self.size))
  }

  /// `forget` keeps the chunks a kept snapshot needs (copying them out of the archives it
  /// deletes), and a catalog rebuilt from the archives restores the file again.
  @Test func forgetAndRebuildKeepChunkedFilesRestorable() throws {
    let (fixture, results, captures, _) = try editedInPlace()
    let report = try fixture.repository.forget(app: fixture.app.bundleIdentifier, keepLast: 1)
    #expect(report.deletedArchives == [results[0].snapshot.archive])
    let repack = try #require(report.newArchive)
    #expect(try members(fixture.repository.archivePath(repack)).contains { $0.hasPrefix(".appbox/chunks/") })
    var check = try fixture.repository.check(readData: true)
    #expect(check.isClean, "\(check.problems)")
    _ = try fixture.repository.restore(fixture.app.bundleIdentifier, in: fixture.session)
    expectSame(captures[1], try fixture.captureData())

    let rebuilt = try Repository.rebuildCatalog(at: fixture.repository.path, environment: [:])
    #expect(rebuilt.skipped.isEmpty && rebuilt.snapshots == 1)
    let reopened = try Repository(path: fixture.repository.path, environment: [:])
    check = try reopened.check(readData: true)
    #expect(check.isClean, "\(check.problems)")
    try fixture.write("Library/Application Support/Store.sqlite", "overwritten")
    _ = try reopened.restore(fixture.app.bundleIdentifier, in: fixture.session)
    expectSame(captures[1], try fixture.captureData())
  }

  /// Chunk bytes and chunk lists read back from a repository are untrusted: a damaged chunk
  /// or a list naming the wrong chunks fails the restore (65) and leaves the home alone.
  @Test func damagedChunksAndListsAreCaught() throws {
    let (fixture, results, _, edit) = try editedInPlace()
    let live = try fixture.captureData()
    try flipByte(in: results[1].archivePath, within: Array(edit[8192..<8224]))
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

  /// A file saved anew (a new inode at the same path) is chunked against its old version too,
  /// and zeros restore as holes.
  @Test func atomicSavesAndZeroRunsAreChunkedToo() throws {
    let fixture = try Fixture()
    let size = 12 << 20
    var content = randomBytes(size, seed: 21)
    for index in (2 << 20)..<(11 << 20) { content[index] = 0 }
    try fixture.write("Documents/video.mov", bytes: content)
    _ = try fixture.backup()
    content[200] ^= 1
    let temporary = try fixture.write("Documents/video.mov.saving", bytes: content)
    guard rename(temporary, fixture.path("Documents/video.mov")) == 0 else { throw SystemError("rename") }
    try fixture.trustSnapshots()
    let expected = try fixture.captureData()
    let second = try fixture.backup()
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
    #expect(bar.bytes.reduce(0, +) == results[1].snapshot.bytesAdded)
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
}
