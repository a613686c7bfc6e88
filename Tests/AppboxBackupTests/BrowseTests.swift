import AppboxArchive
import AppboxContainer
import AppboxCore
import AppboxCrypto
import AppboxTestSupport
import Foundation
import Glibc
import Testing

@testable import AppboxBackup
@testable import AppboxRepository

/// ls, dump, find and restore --target/--include give what a real restore gives, for chunked
/// files, tree deltas, holes, hard links, symlinks, attributes and hostile names.
struct BrowseTests {
  static let hostile = "evil\nname\u{1B}]52;c;aGk=\u{07}"

  /// Two snapshots: the second has a large file edited in place (stored as chunks) and a
  /// folder of many files with one changed (its tree stored as a delta).
  func prepare(_ fixture: Fixture) throws -> (first: Snapshot, second: Snapshot) {
    try fixture.write("Documents/a.txt", "alpha")
    try fixture.write("Documents/sub/" + Self.hostile, "hostile")
    try fixture.setAttribute("Documents/a.txt", "user.note", Array("kept".utf8))
    #expect(symlink("../a.txt", fixture.path("Documents/sub/link")) == 0)
    #expect(link(fixture.path("Documents/a.txt"), fixture.path("Documents/hard")) == 0)
    for index in 0..<60 {
      try fixture.write(
        "Library/many/file-\(index).txt", "content \(index) " + String(repeating: "x", count: 40))
    }
    try fixture.write("Documents/big.bin", bytes: randomBytes(3 << 20, seed: 5))
    // A file with holes: 64 KiB of data at 2 MiB, 4 MiB long.
    let sparse = try FileDescriptor.open(fixture.path("Documents/holes.img"), O_WRONLY | O_CREAT, mode: 0o600)
    try sparse.closeAfter { fd in
      try randomBytes(64 << 10, seed: 9).withUnsafeBytes { try fd.writeAll($0, at: 2 << 20) }
      try fd.truncate(to: 4 << 20)
    }
    try fixture.trustSnapshots()
    let first = try fixture.backup().snapshot
    let edit = randomBytes(16 << 10, seed: 12)
    let fd = try FileDescriptor.open(fixture.path("Documents/big.bin"), O_WRONLY)
    try fd.closeAfter { fd in try edit.withUnsafeBytes { try fd.writeAll($0, at: 1 << 20) } }
    try fixture.write("Library/many/file-7.txt", "changed")
    try fixture.trustSnapshots()
    let second = try fixture.backup().snapshot
    return (first, second)
  }

  @Test func dumpTargetAndARealRestoreGiveTheSameBytes() throws {
    let fixture = try Fixture()
    let (_, second) = try prepare(fixture)
    let catalog = fixture.repository.catalog
    // The second snapshot does hold a chunked content and a tree delta.
    #expect(try catalog.count("chunk_lists") > 0)
    #expect(try catalog.treeStorage().deltas > 0)
    let live = try fixture.captureData()
    let bigBytes = try FileDescriptor.open(fixture.path("Documents/big.bin"), O_RDONLY).closeAfter {
      try $0.readAll()
    }

    // One file, byte for byte (chunks), and one with holes.
    var dumped = [UInt8](repeating: 0, count: 3 << 20)
    let big = try fixture.repository.entry(at: Array("Documents/big.bin".utf8), in: second)
    #expect(try catalog.chunkList(big.entry.digest!) != nil)
    try fixture.repository.readContent(of: big.entry, path: big.path) { data, offset in
      dumped.withUnsafeMutableBytes {
        $0.baseAddress!.advanced(by: Int(offset)).copyMemory(from: data.baseAddress!, byteCount: data.count)
      }
    }
    #expect(dumped == bigBytes)

    // --target: a plain tree equal to the live data, holes kept.
    let scratch = TemporaryDirectory("browse")
    let target = scratch.url("target")
    _ = try fixture.repository.restore(second, toTarget: target)
    expectSame(live, try captureTree(target))
    var status = stat()
    #expect(stat(target + "/Documents/holes.img", &status) == 0 && status.st_blocks * 512 < 1 << 20)

    // dump of the top as a tar, extracted by GNU tar.
    let tarPath = scratch.url("all.tar")
    let out = try FileDescriptor.open(tarPath, O_WRONLY | O_CREAT | O_TRUNC, mode: 0o600)
    _ = try out.closeAfter { fd in
      try fixture.repository.dumpTar([], of: second, to: ClosureArchiveOutput { try fd.writeAll($0) })
    }
    let extracted = scratch.url("extracted")
    try FileManager.default.createDirectory(atPath: extracted, withIntermediateDirectories: false)
    let tar = try runProcess(
      "/usr/bin/tar",
      [
        "--warning=no-unknown-keyword", "--xattrs", "--xattrs-include=user.*", "-x", "-f", tarPath, "-C",
        extracted,
      ])
    #expect(tar.status == 0, "\(tar.err)")
    expectSame(live, try captureTree(extracted, skipping: [fixture.app.bundleDirectoryName]))

    // A real restore after the home changed gives the same tree as --target did.
    try fixture.write("Documents/a.txt", "scribbled")
    try FileTree.remove(atPath: fixture.path("Library/many"))
    _ = try fixture.repository.restore(fixture.app.bundleIdentifier, snapshot: second.id, in: fixture.session)
    expectSame(try captureTree(target), try fixture.captureData())
  }

  @Test func lsReadsTheTreesOnThePathAndFindSearchesEverySnapshot() throws {
    let fixture = try Fixture()
    let (first, second) = try prepare(fixture)
    var names: [[UInt8]] = []
    try fixture.repository.list(Array("Documents/sub".utf8), in: second) { names.append($0.path) }
    #expect(
      names == [Array("Documents/sub/".utf8) + Array(Self.hostile.utf8), Array("Documents/sub/link".utf8)])
    #expect { try fixture.repository.entry(at: Array("Documents/../etc".utf8), in: second) } throws: {
      ($0 as? BackupError)?.code == .invalidRequest
    }
    #expect { try fixture.repository.entry(at: Array("Documents/none".utf8), in: second) } throws: {
      ($0 as? BackupError)?.code == .notFound
    }
    var found: [FoundEntry] = []
    try fixture.repository.find(Array("file-7.txt".utf8)) { found.append($0) }
    #expect(found.map(\.snapshot.id) == [second.id, first.id])
    #expect(found.map(\.entry.size) == [7, Int64("content 7 ".count + 40)])
    var paths: [String] = []
    try fixture.repository.find(Array("Documents/*.txt".utf8), newest: 1) {
      paths.append(String(decoding: $0.path, as: UTF8.self))
    }
    #expect(paths == ["Documents/a.txt"])
  }

  /// A folder renamed between snapshots keeps its tree: a pattern on names finds its files in
  /// both snapshots, and one on paths tells the two places apart (a tree without matches is
  /// remembered with its path then, not by its digest alone).
  @Test func findTellsAMovedFolderInEachSnapshotApart() throws {
    let fixture = try Fixture()
    try fixture.write("Documents/A/sub/notes.txt", "notes")
    try fixture.write("Documents/other.txt", "other")
    let first = try fixture.backup().snapshot
    #expect(rename(fixture.path("Documents/A"), fixture.path("Documents/B")) == 0)
    let second = try fixture.backup().snapshot
    let catalog = fixture.repository.catalog
    func folder(_ snapshot: Snapshot, _ name: String) throws -> Digest? {
      let documents = try catalog.tree(snapshot.rootTree).entry(named: Array("Documents".utf8))?.digest
      return try documents.flatMap { try catalog.tree($0).entry(named: Array(name.utf8))?.digest }
    }
    #expect(try folder(first, "A") != nil && folder(first, "A") == folder(second, "B"))
    func found(_ pattern: String) throws -> [String] {
      var result: [String] = []
      try fixture.repository.find(Array(pattern.utf8)) {
        result.append("\($0.snapshot.id) \(String(decoding: $0.path, as: UTF8.self))")
      }
      return result
    }
    #expect(
      try found("notes.txt") == [
        "\(second.id) Documents/B/sub/notes.txt", "\(first.id) Documents/A/sub/notes.txt",
      ])
    #expect(
      try found("Documents/A/*") == ["\(first.id) Documents/A/sub", "\(first.id) Documents/A/sub/notes.txt"])
    #expect(
      try found("Documents/B/*") == [
        "\(second.id) Documents/B/sub", "\(second.id) Documents/B/sub/notes.txt",
      ])
    #expect(try found("other.txt").count == 2)
  }

  @Test func anIncludedRestoreReplacesOnlyThosePaths() throws {
    let fixture = try Fixture()
    let (first, _) = try prepare(fixture)
    try fixture.write("Documents/a.txt", "live")
    try fixture.write("Documents/other.txt", "stays")
    try FileTree.remove(atPath: fixture.path("Documents/sub"))
    let before = try fixture.captureData()
    _ = try fixture.repository.restore(
      first, paths: [Array("Documents/a.txt".utf8), Array("Documents/sub".utf8)], into: fixture.app,
      in: fixture.session)
    let after = try fixture.captureData()
    #expect(after[Array("Documents/a.txt".utf8)]?.content == Array("alpha".utf8))
    #expect(after[Array("Documents/sub/".utf8) + Array(Self.hostile.utf8)]?.content == Array("hostile".utf8))
    #expect(after[Array("Documents/other.txt".utf8)]?.content == Array("stays".utf8))
    // Everything else is as it was (the big file keeps its second version).
    for (path, entry) in before
    where !path.starts(with: Array("Documents/sub".utf8)) && path != Array("Documents/a.txt".utf8)
      && path != Array("Documents".utf8) && path != Array("Documents/hard".utf8)
    {
      #expect(after[path] == entry, "\(String(decoding: path, as: UTF8.self))")
    }
    #expect(
      try FileManager.default.contentsOfDirectory(atPath: fixture.root.applicationRoot).filter {
        $0.hasPrefix(".")
      } == [])
  }

  @Test func anIncludedPathThroughASymlinkInTheHomeIsRefusedAndNothingChanges() throws {
    let fixture = try Fixture()
    let (first, _) = try prepare(fixture)
    let outside = TemporaryDirectory("outside")
    try FileTree.remove(atPath: fixture.path("Documents/sub"))
    #expect(symlink(outside.path, fixture.path("Documents/sub")) == 0)
    let before = try fixture.captureData()
    #expect(throws: (any Error).self) {
      _ = try fixture.repository.restore(
        first, paths: [Array("Documents/a.txt".utf8), Array("Documents/sub/link".utf8)], into: fixture.app,
        in: fixture.session)
    }
    #expect(try FileManager.default.contentsOfDirectory(atPath: outside.path) == [])
    expectSame(before, try fixture.captureData())
  }

  @Test func aTargetMustBeNewOrEmpty() throws {
    let fixture = try Fixture()
    let (first, _) = try prepare(fixture)
    let scratch = TemporaryDirectory("target")
    try "x".write(toFile: scratch.url("file"), atomically: true, encoding: .utf8)
    #expect { try fixture.repository.restore(first, toTarget: scratch.path) } throws: {
      ($0 as? BackupError)?.code == .cannotCreate
    }
    // Only the included path, under a new directory.
    _ = try fixture.repository.restore(
      first, paths: [Array("Documents/sub".utf8)], toTarget: scratch.url("new"))
    #expect(
      try captureTree(scratch.url("new")).keys.map { String(decoding: $0, as: UTF8.self) }.sorted() == [
        "Documents", "Documents/sub", "Documents/sub/" + Self.hostile, "Documents/sub/link",
      ])
  }
}
