import AppboxArchive
import AppboxContainer
import AppboxCore
import AppboxTestSupport
import Foundation
import Glibc
import Testing

@testable import AppboxBackup
@testable import AppboxRepository

/// A restore works in batches of files (RestorePlanner) so that its memory follows the batch,
/// not the file count. Every batch size must build the same tree as one batch: hard links whose
/// first path is in an earlier batch, content shared across batches, directories filled over
/// several batches and finished last, symlinks, FIFOs, attributes, empty files, files stored as
/// chunks, and archives read directly or streamed (compressed).
struct RestoreBatchTests {
  /// A home touching every kind of entry, spread over several directories, backed up twice
  /// (the second time incrementally, with a large file edited in place so it is chunked).
  static func populatedFixture(_ form: StoredForm) throws -> (Fixture, Snapshot) {
    let fixture = try Fixture()
    for folder in 0..<4 {
      for index in 0..<5 {
        try fixture.write("Documents/f\(folder)/n\(index).txt", "file \(folder)-\(index)")
      }
      // The same bytes in every folder: one content, files in several batches.
      try fixture.write("Documents/f\(folder)/shared.txt", "the same in every folder")
      try fixture.write("Documents/f\(folder)/empty", "")
    }
    try fixture.write("Documents/f0/deep/deeper/deepest/leaf.txt", "leaf", mode: 0o600)
    try fixture.setAttribute("Documents/f1/n2.txt", "user.tag", Array("red".utf8))
    // Hard links: the first path in f0, the others in later folders (later batches).
    #expect(link(fixture.path("Documents/f0/n0.txt"), fixture.path("Documents/f3/link-to-n0")) == 0)
    #expect(link(fixture.path("Documents/f0/n0.txt"), fixture.path("Library/link-to-n0")) == 0)
    #expect(symlink("../f0/n1.txt", fixture.path("Documents/f2/sym")) == 0)
    #expect(mkfifo(fixture.path("Documents/f2/pipe"), 0o640) == 0)
    let large = (0..<(3 << 20)).map { UInt8(truncatingIfNeeded: ($0 &* 2_654_435_761) >> 13) }
    try fixture.write("Documents/f1/large.bin", bytes: large)
    #expect(chmod(fixture.path("Documents/f3"), 0o750) == 0)
    var options = form.options
    _ = try fixture.backup(options)
    try fixture.trustSnapshots()
    var edited = large
    for index in (1 << 20)..<((1 << 20) + 4096) { edited[index] ^= 0x5A }
    try fixture.write("Documents/f1/large.bin", bytes: edited)
    try fixture.write("Documents/f3/new.txt", "added later")
    options.full = false
    let second = try fixture.backup(options)
    return (fixture, second.snapshot)
  }

  func restored(_ fixture: Fixture, _ snapshot: Snapshot, batchFiles: Int) throws -> (
    [[UInt8]: CapturedEntry], MaterializeReport
  ) {
    let target = fixture.dir.url("restored-\(batchFiles)-\(UUID().uuidString)")
    #expect(mkdir(target, 0o755) == 0)
    let fd = try FileDescriptor.open(target, O_RDONLY | O_DIRECTORY)
    let report = try fd.closeAfter {
      try fixture.repository.materialize(
        snapshot, part: .data, into: $0, standardDirectories: false, protectingOn: nil, owner: nil,
        overlay: [:], observer: SilentObserver(), batchFiles: batchFiles)
    }
    return (try captureTree(target), report)
  }

  @Test(arguments: [StoredForm.plain, .framed, .zstdStream])
  func everyBatchSizeRestoresTheSameTree(_ form: StoredForm) throws {
    let (fixture, snapshot) = try Self.populatedFixture(form)
    let (whole, wholeReport) = try restored(fixture, snapshot, batchFiles: Int.max)
    #expect(whole == (try fixture.captureData()))
    #expect(whole[Array("Documents/f3/link-to-n0".utf8)]?.hardLinks.count == 2)
    #expect(whole[Array("Documents/f2/pipe".utf8)]?.type == .fifo)
    for batchFiles in [1, 2, 3, 7, 16] {
      let tree: [[UInt8]: CapturedEntry]
      let report: MaterializeReport
      do {
        (tree, report) = try restored(fixture, snapshot, batchFiles: batchFiles)
      } catch {
        Issue.record("batches of \(batchFiles) files: \(error)")
        continue
      }
      #expect(tree == whole, "batches of \(batchFiles) files")
      #expect(report.files == wholeReport.files && report.bytes == wholeReport.bytes)
    }
  }

  @Test func theBatchesCoverEveryEntryOnceAndKeepTheirSize() throws {
    let (fixture, snapshot) = try Self.populatedFixture(.plain)
    let whole = try RestorePlan(catalog: fixture.repository.catalog, root: snapshot.rootTree)
    let planner = RestorePlanner(catalog: fixture.repository.catalog, root: snapshot.rootTree, batchFiles: 4)
    var paths: [[UInt8]] = []
    var directories: [[UInt8]] = []
    var batches = 0
    while let batch = try planner.next() {
      batches += 1
      // A batch stops at the first directory boundary past the size: a directory's
      // entries are never split, so no batch holds more than the size plus one directory.
      #expect(batch.entryCount <= 4 + 12)
      for index in batch.newDirectories { directories.append(batch.path(ofDirectory: Int32(index))) }
      paths += batch.files.map { batch.path(of: $0) }
      paths += batch.symlinks.map { batch.path(of: $0) }
      paths += batch.fifos.map { batch.path(of: $0) }
      paths += batch.hardLinks.map { batch.path(of: $0.item) }
    }
    #expect(batches > 3)
    var expected: [[UInt8]] = whole.files.map { whole.path(of: $0) }
    expected += whole.symlinks.map { whole.path(of: $0) }
    expected += whole.fifos.map { whole.path(of: $0) }
    expected += whole.hardLinks.map { whole.path(of: $0.item) }
    let byBytes: ([UInt8], [UInt8]) -> Bool = { $0.lexicographicallyPrecedes($1) }
    #expect(paths.sorted(by: byBytes) == expected.sorted(by: byBytes))
    #expect(directories == whole.directories.indices.map { whole.path(ofDirectory: Int32($0)) })
    #expect(Set(paths).count == paths.count)
  }

  /// A damaged member found in a later batch still fails the restore (exit 65), after earlier
  /// batches were written: the caller's staging directory is discarded, nothing else changes.
  @Test func aDamagedArchiveFailsInAnyBatch() throws {
    let (fixture, snapshot) = try Self.populatedFixture(.plain)
    // Flip a byte of the last file content of the first archive (f3's files come last).
    let first = try fixture.repository.catalog.snapshots().first { $0.kind == .full }!
    let path = fixture.repository.archivePath(first.archive)
    let location = try fixture.repository.catalog.database.all(
      "SELECT data_offset FROM blobs WHERE archive = ?1 AND path = ?2", .text(first.archive),
      .blob(Array("Documents/f3/n4.txt".utf8))
    ) { $0.int64(0) }.first!
    let fd = try FileDescriptor.open(path, O_RDWR)
    try fd.closeAfter { fd in
      var byte: [UInt8] = [0]
      _ = try byte.withUnsafeMutableBytes { try fd.readAll(into: $0, at: location) }
      byte[0] ^= 0xFF
      try byte.withUnsafeBytes { try fd.writeAll($0, at: location) }
    }
    #expect(throws: BackupError.self) { _ = try restored(fixture, snapshot, batchFiles: 2) }
  }
}
