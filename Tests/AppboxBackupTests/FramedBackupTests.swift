// Framed zstd archives in a repository (`--compress zstd`): compressed per content, indexed in
// the manifest and the catalog, read in place by restore, dump and check, chunked like
// uncompressed ones, repacked framed by forget, rebuilt from the objects or the archives alone,
// and damaged frames are bad data.

import AppboxArchive
import AppboxCore
import AppboxCrypto
import AppboxTestSupport
import Foundation
import Glibc
import Testing

@testable import AppboxBackup
@testable import AppboxRepository

struct FramedBackupTests {
  static let framed = StoredForm.framed.options

  /// Text that compresses about 4x (varied words, not one repeated line).
  static func text(_ count: Int, seed: UInt64) -> [UInt8] {
    let words = [
      "note", "draft", "meeting", "tuesday", "budget", "the", "a", "of", "and", "review",
      "photo", "album", "sync", "\n", "appbox", "archive",
    ]
    var random = SeededRandom(seed: seed)
    var out: [UInt8] = []
    out.reserveCapacity(count + 16)
    while out.count < count {
      out += Array(words[random.below(words.count)].utf8)
      out.append(random.below(9) == 0 ? 0x2C : 0x20)
    }
    return Array(out.prefix(count))
  }

  static func random(_ count: Int, seed: UInt64) -> [UInt8] {
    var random = SeededRandom(seed: seed)
    var bytes = [UInt8](repeating: 0, count: count)
    bytes.withUnsafeMutableBytes { random.fill($0) }
    return bytes
  }

  /// A home of every kind of entry (the sample data), text, photos (stored frames) and a
  /// large text file.
  static func populated() throws -> Fixture {
    let fixture = try Fixture()
    try writeSampleData(home: fixture.home)
    for index in 0..<40 {
      try fixture.write(
        "Documents/Notes/note-\(index).txt", bytes: text(2_000 + index * 300, seed: UInt64(index)))
    }
    var photo = random(900_000, seed: 7)
    photo.replaceSubrange(0..<4, with: [0xFF, 0xD8, 0xFF, 0xE0])
    try fixture.write("Documents/Photos/IMG_0001.JPG", bytes: photo)
    try fixture.write("Documents/Photos/clip.mov", bytes: random(300_000, seed: 8))
    try fixture.write("Library/Application Support/journal.log", bytes: text(3 << 20, seed: 9))
    return fixture
  }

  func members(_ archive: String) throws -> [String] {
    let result = try runProcess("/usr/bin/tar", ["--zstd", "-tf", archive])
    #expect(result.status == 0, "\(result.err)")
    return result.out.split(separator: "\n").map(String.init)
  }

  @Test func aFramedBackupRestoresExactlyAndTakesFewerBytes() throws {
    let fixture = try Self.populated()
    let before = try fixture.captureData()
    let result = try fixture.backup(Self.framed)
    #expect(result.archivePath.hasSuffix(".tar.zst"))
    let record = try fixture.repository.archiveRecord(result.snapshot.archive)
    #expect(record.compression == .zstd)
    let frames = try #require(try fixture.repository.catalog.frameIndex(of: record.name))
    #expect(frames.frames.contains { $0.isStored } && frames.frames.contains { !$0.isStored })
    // The index covers everything up to the manifest, which GNU tar lists last.
    #expect(frames.storedEnd < record.size)
    #expect(try members(result.archivePath).last == ".appbox/manifest")
    // The text went in compressed: the archive is far smaller than the data it holds.
    #expect(
      record.size * 2 < result.snapshot.bytesAdded, "\(record.size) stored for \(result.snapshot.bytesAdded)")

    try fixture.write("Documents/a.txt", "changed")
    _ = try fixture.repository.restore(fixture.app.bundleIdentifier, in: fixture.session)
    expectSame(before, try fixture.captureData())
    let check = try fixture.repository.check(readData: true)
    #expect(check.isClean, "\(check.problems)")
  }

  /// Restore reads a framed archive in place through its index: the frames after it (the
  /// manifest's) are never read, so damage there does not stop a restore. (A streamed read
  /// would have to decode them; `check` finds it.)
  @Test func restoreReadsFramedArchivesInPlace() throws {
    let fixture = try Self.populated()
    let before = try fixture.captureData()
    let result = try fixture.backup(Self.framed)
    let frames = try #require(try fixture.repository.catalog.frameIndex(of: result.snapshot.archive))
    let fd = try FileDescriptor.open(result.archivePath, O_RDWR)
    try fd.closeAfter { fd in
      var byte: [UInt8] = [0]
      let position = frames.storedEnd + 20
      _ = try byte.withUnsafeMutableBytes { try fd.readAll(into: $0, at: position) }
      byte[0] ^= 0x5A
      try byte.withUnsafeBytes { try fd.writeAll($0, at: position) }
    }
    try fixture.write("Documents/a.txt", "changed")
    _ = try fixture.repository.restore(fixture.app.bundleIdentifier, in: fixture.session)
    expectSame(before, try fixture.captureData())
    let check = try fixture.repository.check()
    #expect(!check.isClean)
    #expect(check.problems.contains { $0.contains(result.snapshot.archive) })
  }

  /// A damaged compressed frame holding content: restore, dump and check all refuse it as bad
  /// data, naming the archive, and the home is left as it was.
  @Test func aDamagedFrameIsBadData() throws {
    let fixture = try Self.populated()
    let result = try fixture.backup(Self.framed)
    let frames = try #require(try fixture.repository.catalog.frameIndex(of: result.snapshot.archive))
    // The frame holding the journal's middle.
    let location = try #require(
      try fixture.repository.catalog.blobs(inArchive: result.snapshot.archive).first {
        $0.path == Array("Library/Application Support/journal.log".utf8)
      })
    let number = try #require(frames.frame(containing: location.dataOffset! + location.size / 2))
    let frame = frames.frames[number]
    #expect(!frame.isStored)
    let fd = try FileDescriptor.open(result.archivePath, O_RDWR)
    try fd.closeAfter { fd in
      var bytes = [UInt8](repeating: 0, count: 16)
      let position = frame.storedOffset + Int64(frame.storedLength / 2)
      _ = try bytes.withUnsafeMutableBytes { try fd.readAll(into: $0, at: position) }
      for index in bytes.indices { bytes[index] ^= 0xA5 }
      try bytes.withUnsafeBytes { try fd.writeAll($0, at: position) }
    }
    try fixture.write("Documents/a.txt", "live")
    let live = try fixture.captureData()
    #expect {
      try fixture.repository.restore(fixture.app.bundleIdentifier, in: fixture.session)
    } throws: { error in
      (error as? BackupError)?.kind == .badData && "\(error)".contains(result.snapshot.archive)
    }
    expectSame(live, try fixture.captureData())
    let snapshot = result.snapshot
    let tree = try fixture.repository.catalog.tree(snapshot.rootTree)
    let library = try fixture.repository.catalog.tree(tree.entry(named: Array("Library".utf8))!.digest!)
    let support = try fixture.repository.catalog.tree(
      library.entry(named: Array("Application Support".utf8))!.digest!)
    let journal = try #require(support.entry(named: Array("journal.log".utf8)))
    #expect {
      try fixture.repository.readContent(of: journal, path: Array("journal.log".utf8)) { _, _ in }
    } throws: { ($0 as? RepositoryError)?.kind == .badData }
    let check = try fixture.repository.check()
    #expect(check.problems.contains { $0.contains(result.snapshot.archive) }, "\(check.problems)")
  }

  /// A database edited in place stores only the chunks it touched, compressed, from its first
  /// edit on: its chunks were indexed inside its compressed member when it was first read.
  @Test func inPlaceEditsOfADatabaseStoreOnlyTheirChunks() throws {
    let fixture = try Fixture()
    let size = 8 << 20
    let path = try fixture.write("Library/Application Support/Store.sqlite", bytes: Self.text(size, seed: 3))
    _ = try fixture.backup(Self.framed)
    func edit(at offset: Int, seed: UInt64) throws {
      let bytes = Self.text(16 << 10, seed: seed)
      let fd = try FileDescriptor.open(path, O_WRONLY)
      try fd.closeAfter {
        try $0.writeAll(UnsafeRawBufferPointer(start: bytes, count: bytes.count), at: Int64(offset))
      }
      try fixture.trustSnapshots()
    }
    for (offset, seed) in [(1 << 20, UInt64(4)), (5 << 20, UInt64(5))] {
      try edit(at: offset, seed: seed)
      let result = try fixture.backup(Self.framed)
      let chunks = try members(result.archivePath).filter { $0.hasPrefix(".appbox/chunks/") }
      #expect((1...2).contains(chunks.count), "\(chunks)")
      #expect(result.snapshot.bytesAdded < Int64(size) / 2)
      let stored = try fixture.repository.archiveRecord(result.snapshot.archive).size
      #expect(
        stored * 2 < result.snapshot.bytesAdded, "\(stored) bytes stored for \(result.snapshot.bytesAdded)")
    }
    let expected = try fixture.captureData()
    try fixture.write("Library/Application Support/Store.sqlite", "overwritten")
    _ = try fixture.repository.restore(fixture.app.bundleIdentifier, in: fixture.session)
    expectSame(expected, try fixture.captureData())
    let check = try fixture.repository.check(readData: true)
    #expect(check.isClean, "\(check.problems)")
    #expect(check.bytesVerified >= Int64(size))
  }

  /// `forget` repacks what it keeps into a framed archive (indexed, read in place), chunks
  /// included; a catalog rebuilt from the objects, and from the archives alone when a manifest
  /// object is damaged, knows every archive's frames again.
  @Test func forgetRepacksFramedAndRebuildsFindTheFrames() throws {
    let fixture = try Self.populated()
    let path = fixture.path("Library/Application Support/journal.log")
    _ = try fixture.backup(Self.framed)
    for (offset, seed) in [(1 << 20, UInt64(21)), (2 << 20, UInt64(22))] {
      let bytes = Self.text(8 << 10, seed: seed)
      let fd = try FileDescriptor.open(path, O_WRONLY)
      try fd.closeAfter {
        try $0.writeAll(UnsafeRawBufferPointer(start: bytes, count: bytes.count), at: Int64(offset))
      }
      try fixture.write("Documents/Notes/added-\(seed).txt", bytes: Self.text(5000, seed: seed))
      try fixture.trustSnapshots()
      _ = try fixture.backup(Self.framed)
    }
    let expected = try fixture.captureData()
    let report = try fixture.repository.forget(app: fixture.app.bundleIdentifier, keepLast: 1)
    let repack = try #require(report.newArchive)
    #expect(repack.hasSuffix(".tar.zst"))
    let repacked = try #require(try fixture.repository.catalog.frameIndex(of: repack))
    #expect(!repacked.isEmpty)
    #expect(try members(fixture.repository.archivePath(repack)).contains { $0.hasPrefix(".appbox/chunks/") })
    var check = try fixture.repository.check(readData: true)
    #expect(check.isClean, "\(check.problems)")
    try fixture.write("Documents/a.txt", "changed")
    _ = try fixture.repository.restore(fixture.app.bundleIdentifier, in: fixture.session)
    expectSame(expected, try fixture.captureData())

    let indexes = try fixture.repository.catalog.archives().map {
      ($0.name, try fixture.repository.catalog.frameIndex(of: $0.name))
    }
    // Rebuilt from the objects.
    _ = try Repository.rebuildCatalog(at: fixture.repository.path, environment: [:])
    var reopened = try Repository(path: fixture.repository.path, environment: [:])
    for (name, index) in indexes { #expect(try reopened.catalog.frameIndex(of: name) == index, "\(name)") }
    // A damaged manifest object: its archive's manifest member stands in for it.
    let name = indexes.first { $0.0 != repack }!.0
    try flipByte(in: fixture.repository.path + "/manifests/" + name, within: Array("APPBOXMF".utf8))
    _ = try Repository.rebuildCatalog(at: fixture.repository.path, environment: [:])
    reopened = try Repository(path: fixture.repository.path, environment: [:])
    for (name, index) in indexes { #expect(try reopened.catalog.frameIndex(of: name) == index, "\(name)") }
    try fixture.write("Documents/a.txt", "changed again")
    _ = try reopened.restore(fixture.app.bundleIdentifier, in: fixture.session)
    expectSame(expected, try fixture.captureData())
    check = try reopened.check(readData: true)
    #expect(check.problems.allSatisfy { $0.contains("manifest") }, "\(check.problems)")
  }

  /// Archives of every form in one repository (plain, framed, one zstd stream as appbox wrote
  /// before frames, gzip): an incremental chain across them restores each snapshot, and check
  /// reads them all.
  @Test func everyFormReadsBackInOneRepository() throws {
    let fixture = try Self.populated()
    var expected: [(String, [[UInt8]: CapturedEntry])] = []
    for (index, form) in StoredForm.allCases.enumerated() {
      try fixture.write("Documents/Notes/form-\(index).txt", bytes: Self.text(9000, seed: UInt64(index)))
      try fixture.trustSnapshots()
      let result = try fixture.backup(form.options)
      #expect(result.archivePath.hasSuffix(form.options.compression.fileSuffix))
      #expect(
        (try fixture.repository.catalog.frameIndex(of: result.snapshot.archive) != nil) == (form == .framed))
      expected.append((result.snapshot.id, try fixture.captureData()))
    }
    for (id, capture) in expected.reversed() {
      _ = try fixture.repository.restore(fixture.app.bundleIdentifier, snapshot: id, in: fixture.session)
      expectSame(capture, try fixture.captureData())
    }
    let check = try fixture.repository.check(readData: true)
    #expect(check.isClean, "\(check.problems)")
  }
}
