// The content reader and the archiver (ContentReader.swift, Archiver.swift) on their own, fed
// a small home through the scanner as a full backup feeds them, without a repository: the
// archive holds exactly the members the home's data calls for (not tmp, Library/Caches or the
// bundle), with their types, modes, link targets, attributes and bytes; every blob location
// names the SHA-256 of its file and points at its member and its data; every tree hashes to
// its digest and lists what the directory holds. Both places hashing can happen (the reader's
// thread, or the archiver's) are covered.

import AppboxArchive
import AppboxCore
import AppboxPipeline
import AppboxCrypto
import AppboxTestSupport
import Foundation
import Glibc
import Testing

@testable import AppboxBackup
@testable import AppboxRepository

/// Where the archiver's blob locations and the tree builder's trees go: kept for the test.
final class RecordingSinks: BlobSink, TreeSink {
  var blobs: [BlobLocation] = []
  var trees: [StoredTree] = []
  func add(_ blob: BlobLocation) throws { blobs.append(blob) }
  func add(_ tree: StoredTree) throws { trees.append(tree) }
}

struct ArchiverPipelineUnitTests {
  static let large = patternBytes(300 << 10, seed: 3)

  /// A home: files small, empty and large (streamed), a symlink, a hard link, a `user.*`
  /// attribute, a private mode, and what a backup leaves out.
  func makeHome(_ directory: TemporaryDirectory) throws -> String {
    try directory.write("home/Documents/a.txt", "hello")
    try directory.write("home/Documents/empty", "")
    try directory.write("home/Documents/sub/deep.bin", bytes: Self.large)
    let home = directory.url("home")
    #expect(symlink("a.txt", home + "/Documents/link") == 0)
    #expect(link(home + "/Documents/a.txt", home + "/Documents/hard") == 0)
    let plist = try directory.write("home/Library/Preferences/p.plist", "<plist/>", mode: 0o600)
    try FileDescriptor.open(plist, O_RDONLY).closeAfter {
      try $0.setExtendedAttribute("user.color", Array("blue".utf8))
    }
    try directory.write("home/Library/Caches/cached.txt", "left out")
    try directory.write("home/tmp/scratch", "left out")
    try directory.write("home/Notes.app/Info.plist", "the bundle, left out")
    return home
  }

  /// Runs the scanner, the content reader (its own thread) and the archiver over `home` into
  /// the uncompressed archive at `archive`; what the sinks received and the root tree.
  func archive(home: String, to archive: String, catalog: Catalog, hashOnReader: Bool) throws
    -> (sinks: RecordingSinks, root: Digest, files: Int)
  {
    let descriptor = try OwnedFileDescriptor.open(home, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
    let scanner = Scanner(
      home: descriptor.borrowed, rules: ScanRules(bundleDirectoryName: "Notes.app", includeBundle: false),
      catalogPath: nil, previousRoot: nil, trustedBefore: 0, observer: SilentObserver())
    let output = try OwnedFileDescriptor.open(archive, O_WRONLY | O_CREAT | O_TRUNC, mode: 0o600)
    let writer = try ArchiveWriter(fileDescriptor: output.rawValue, compression: .none, name: archive)
    let pool = BufferPool(count: 16, bufferSize: ContentReader.wholeReadLimit)
    let sinks = RecordingSinks()
    let trees = TreeBuilder(catalog: catalog, bundleEntry: nil, sink: sinks)
    let archiver = Archiver(
      writer: writer, catalog: catalog, archiveName: "0c0c0c0c.tar", deduplicate: false, full: true,
      pool: pool,
      observer: SilentObserver(), blobs: sinks, trees: trees)
    let queue = HandoffQueue<ContentMessage>(capacity: 16 << 20)
    let reader = ContentReader(scanner: scanner, queue: queue, pool: pool, hashOnReader: hashOnReader)
    let thread = WorkerThread(name: "appbox-read") { try reader.run() }
    do {
      try archiver.run(queue)
    } catch {
      try? thread.join()
      throw error
    }
    try thread.join()
    try writer.finish()
    return (sinks, try #require(trees.root), trees.files)
  }

  @Test(arguments: [true, false])
  func aSmallHomeBecomesExactlyItsMembersBlobsAndTrees(hashOnReader: Bool) throws {
    let directory = TemporaryDirectory("archiver")
    let home = try makeHome(directory)
    let catalog = try Catalog(path: directory.url("catalog.db"))
    let path = directory.url("out.tar")
    let (sinks, root, files) = try archive(home: home, to: path, catalog: catalog, hashOnReader: hashOnReader)

    // The members, as libarchive reads them back.
    let reader = try ArchiveReader(path: path)
    var members: [String: (entry: ArchiveEntry, data: [UInt8])] = [:]
    var order: [String] = []
    while let entry = try reader.nextEntry() {
      let name = String(decoding: entry.path, as: UTF8.self)
      order.append(name)
      members[name] = (entry, entry.type == .regular ? try reader.readAllData() : [])
    }
    #expect(
      Set(order) == [
        "Documents", "Documents/a.txt", "Documents/empty", "Documents/hard", "Documents/link",
        "Documents/sub",
        "Documents/sub/deep.bin", "Library", "Library/Preferences", "Library/Preferences/p.plist",
      ], "\(order)")
    #expect(order.count == Set(order).count)
    // Depth-first name order: a directory before what it holds.
    #expect(order.firstIndex(of: "Documents")! < order.firstIndex(of: "Documents/a.txt")!)
    #expect(order.firstIndex(of: "Documents/sub")! < order.firstIndex(of: "Documents/sub/deep.bin")!)
    #expect(members["Documents/a.txt"]?.data == Array("hello".utf8))
    #expect(members["Documents/empty"]?.entry.size == 0)
    #expect(fingerprint(members["Documents/sub/deep.bin"]?.data) == fingerprint(Self.large))
    #expect(members["Documents/link"]?.entry.type == .symlink)
    #expect(members["Documents/link"]?.entry.linkTarget == Array("a.txt".utf8))
    #expect(members["Documents/hard"]?.entry.type == .hardlink)
    #expect(members["Documents/hard"]?.entry.linkTarget == Array("Documents/a.txt".utf8))
    let plist = try #require(members["Library/Preferences/p.plist"])
    #expect(plist.entry.permissions & 0o7777 == 0o600 && plist.data == Array("<plist/>".utf8))
    #expect(
      plist.entry.extendedAttributes.map { "\($0.name)=\(String(decoding: $0.value, as: UTF8.self))" } == [
        "user.color=blue"
      ])
    #expect(members["Documents"]?.entry.type == .directory)

    // One blob per non-empty content, named by its SHA-256, locating its member and its data.
    let contents: [String: [UInt8]] = [
      "Documents/a.txt": Array("hello".utf8), "Documents/sub/deep.bin": Self.large,
      "Library/Preferences/p.plist": Array("<plist/>".utf8),
    ]
    #expect(Set(sinks.blobs.map { String(decoding: $0.path, as: UTF8.self) }) == Set(contents.keys))
    #expect(sinks.blobs.count == 3)
    let archiveBytes = Array(try Data(contentsOf: URL(fileURLWithPath: path)))
    for blob in sinks.blobs {
      let name = String(decoding: blob.path, as: UTF8.self)
      let content = try #require(contents[name])
      #expect(blob.digest == SHA256.hash(content), "\(name)")
      #expect(blob.size == Int64(content.count) && blob.archive == "0c0c0c0c.tar")
      let dataOffset = Int(try #require(blob.dataOffset))
      #expect(
        fingerprint(Array(archiveBytes[dataOffset..<(dataOffset + content.count)])) == fingerprint(content))
      let fd = try FileDescriptor.open(path, O_RDONLY)
      defer { fd.close() }
      let there = try ArchiveReader(fileDescriptor: fd.rawValue, startingAt: blob.offset)
      #expect(try there.nextEntry()?.path == blob.path, "\(name) at \(blob.offset)")
    }

    // Every tree hashes to its digest; the root lists Documents and Library only.
    let trees = Dictionary(sinks.trees.map { ($0.digest, $0) }, uniquingKeysWith: { first, _ in first })
    for tree in sinks.trees {
      #expect(tree.base == nil && SHA256.hash(tree.data) == tree.digest)
    }
    func tree(_ digest: Digest?) throws -> Tree {
      let stored = try #require(digest.flatMap { trees[$0] }, "no tree \(String(describing: digest))")
      return try Tree.decode(stored.data)
    }
    let rootTree = try tree(root)
    #expect(rootTree.entries.map { String(decoding: $0.name, as: UTF8.self) } == ["Documents", "Library"])
    let documents = try tree(rootTree.entries.first?.digest)
    let byName = Dictionary(documents.entries.map { (String(decoding: $0.name, as: UTF8.self), $0) }) {
      first, _ in first
    }
    #expect(byName.keys.sorted() == ["a.txt", "empty", "hard", "link", "sub"])
    #expect(byName["a.txt"]?.digest == SHA256.hash(Array("hello".utf8)))
    #expect(byName["hard"]?.digest == byName["a.txt"]?.digest)
    #expect(byName["link"]?.linkTarget == Array("a.txt".utf8))
    let sub = try tree(byName["sub"]?.digest)
    #expect(sub.entries.first?.digest == SHA256.hash(Self.large))
    #expect(files == 6)
  }
}
