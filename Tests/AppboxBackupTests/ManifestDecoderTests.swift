// The manifest decoder (Formats/ManifestDecoder.swift, Formats/RecordReader.swift): whatever
// pieces the bytes come in and however small the window starts, it hands over exactly the
// records that were encoded, holds no more than about twice the longest record, and fails on
// every truncation and every changed byte with one error, leaving nothing in a catalog.

import AppboxArchive
import AppboxCrypto
import AppboxStore
import AppboxTestSupport
import Foundation
import Testing

@testable import AppboxBackup
@testable import AppboxRepository

/// Hands `bytes` over at most `piece` bytes at a time (the source of a `RecordReader`).
func pieces(of bytes: [UInt8], size piece: Int) -> RecordReader.Source {
  var offset = 0
  return { buffer in
    let count = min(piece, buffer.count, bytes.count - offset)
    guard count > 0 else { return 0 }
    bytes.withUnsafeBytes { buffer.baseAddress!.copyMemory(from: $0.baseAddress! + offset, byteCount: count) }
    offset += count
    return count
  }
}

/// Records in the order a consumer gets them, with the largest window seen while they came.
final class WindowWatcher: ManifestConsumer {
  let collector = ManifestCollector()
  var input: RecordReader?
  private(set) var largestWindow = 0
  private(set) var windows: [Int] = []

  private func look() {
    guard let input else { return }
    largestWindow = max(largestWindow, input.windowSize)
    windows.append(input.windowSize)
  }

  func snapshot(_ snapshot: Snapshot?) throws {
    look()
    try collector.snapshot(snapshot)
  }
  func tree(_ tree: StoredTree) throws {
    look()
    try collector.tree(tree)
  }
  func blob(_ blob: BlobLocation) throws {
    look()
    try collector.blob(blob)
  }
  func chunk(_ chunk: ChunkLocation) throws {
    look()
    try collector.chunk(chunk)
  }
  func chunkList(_ digest: Digest, _ list: ChunkList) throws {
    look()
    try collector.chunkList(digest, list)
  }
  func frames(_ index: FrameIndex) throws {
    look()
    try collector.frames(index)
  }
}

/// What differs between two manifests, record kind by record kind (the first difference of each).
func differences(_ a: Manifest, _ b: Manifest) -> [String] {
  var result: [String] = []
  if a.snapshot != b.snapshot { result.append("snapshot: \(String(describing: a.snapshot?.id))") }
  func compare<T>(_ name: String, _ x: [T], _ y: [T], _ equal: (T, T) -> Bool) {
    if x.count != y.count { return result.append("\(name): \(x.count) records, expected \(y.count)") }
    if let index = x.indices.first(where: { !equal(x[$0], y[$0]) }) { result.append("\(name)[\(index)]") }
  }
  compare("trees", a.trees, b.trees, ==)
  compare("blobs", a.blobs, b.blobs, ==)
  compare("chunks", a.chunks, b.chunks, ==)
  compare("chunkLists", a.chunkLists, b.chunkLists) { $0.digest == $1.digest && $0.list == $1.list }
  if a.frames != b.frames {
    result.append("frames: \(a.frames?.count ?? -1), expected \(b.frames?.count ?? -1)")
  }
  return result
}

struct ManifestDecoderTests {
  static let archive = "0a1b2c3d.tar"

  /// Decodes `bytes` handed over `piece` bytes at a time through a window of `window` bytes.
  @discardableResult
  static func decode(_ bytes: [UInt8], piece: Int, window: Int, into consumer: some ManifestConsumer) throws
    -> RecordReader
  {
    let input = RecordReader(size: Int64(bytes.count), window: window, source: pieces(of: bytes, size: piece))
    (consumer as? WindowWatcher)?.input = input
    try ManifestDecoder.decode(input, archive: archive, into: consumer)
    return input
  }

  static func decoded(_ bytes: [UInt8], piece: Int, window: Int) throws -> Manifest {
    let collector = ManifestCollector()
    try decode(bytes, piece: piece, window: window, into: collector)
    return collector.manifest
  }

  /// A manifest of many records of every kind, with paths and trees of varied lengths (some
  /// blobs without a data offset, some trees stored as deltas).
  static func large(
    blobs: Int = 6000, trees: Int = 300, treeBytes: Int = 3000, chunks: Int = 200, lists: Int = 50,
    frames: Int? = 3000
  ) -> Manifest {
    var random = SeededRandom(seed: 5)
    var manifest = ManifestTests.sample()
    manifest.trees = (0..<trees).map { index in
      let data = patternBytes(1 + random.below(treeBytes), seed: UInt64(index))
      if index % 5 == 4 {
        return StoredTree(digest: SHA256.hash(data), base: SHA256.hash([UInt8(index % 256)]), data: data)
      }
      return StoredTree(digest: SHA256.hash(data), data: data)
    }
    manifest.blobs = (0..<blobs).map { index in
      let offset = Int64(index) * 4096
      return BlobLocation(
        digest: SHA256.hash(Array("blob \(index)".utf8)), archive: archive, offset: offset,
        path: Array("Documents/folder-\(index % 37)/".utf8)
          + Array(repeating: 0x61, count: random.below(200)),
        size: Int64(1 + random.below(1 << 20)), dataOffset: index % 3 == 0 ? nil : offset + 1536)
    }
    manifest.chunks = (0..<chunks).map { index in
      ChunkLocation(
        digest: SHA256.hash(Array("chunk \(index)".utf8)), archive: archive, offset: Int64(index) << 22,
        dataOffset: Int64(index) << 22 + 1024, size: Int64(1 + random.below(ChunkingParameters.largestStored)))
    }
    manifest.chunkLists = (0..<lists).map { index in
      let list = ChunkList(
        chunks: (0..<(1 + index)).map { (SHA256.hash(Array("chunk \($0)".utf8)), Int64(1000 + $0)) })
      return (SHA256.hash(Array("list \(index)".utf8)), list)
    }
    manifest.frames = frames.map { ManifestTests.frames($0) }
    return manifest
  }

  @Test func aSmallManifestReadsTheSameInPiecesOfEverySizeThroughAnyWindow() throws {
    let manifest = ManifestTests.sample()
    let bytes = manifest.encoded()
    for window in [1, 5, 64, RecordReader.defaultWindow] {
      for piece in 1...bytes.count {
        let decoded = try Self.decoded(bytes, piece: piece, window: window)
        #expect(differences(decoded, manifest) == [], "piece \(piece), window \(window)")
      }
    }
    // The whole decoder (one piece, the manifest in memory) agrees.
    #expect(differences(try Manifest.decode(bytes, archive: Self.archive), manifest) == [])
  }

  @Test(arguments: [1, 3, 4093, 65_537, Int.max])
  func aManifestOfManyRecordsReadsTheSameAndHoldsOnlyAboutTheLongestRecord(piece: Int) throws {
    let manifest = Self.large()
    let bytes = manifest.encoded()
    // The frame index is one record too.
    let longest = max(
      manifest.trees.map { $0.data.count + 80 }.max()!, (manifest.frames?.encoded().count ?? 0) + 8)
    #expect(bytes.count > 50 * longest)
    for window in [1, 97, 4096, RecordReader.defaultWindow] {
      let watcher = WindowWatcher()
      try Self.decode(bytes, piece: piece, window: window, into: watcher)
      #expect(differences(watcher.collector.manifest, manifest) == [], "window \(window)")
      // Never the whole: at most the starting window, or the first doubling that holds the
      // longest record.
      #expect(watcher.largestWindow <= max(window, 2 * longest), "window \(window)")
    }
    #expect(differences(try Manifest.decode(bytes, archive: Self.archive), manifest) == [])
  }

  @Test func aRecordLongerThanTheWindowIsReadWholeAndTheWindowShrinksAfterIt() throws {
    var manifest = Self.large(blobs: 4000, trees: 3, frames: 100)
    let big = patternBytes(300_000, seed: 9)
    manifest.trees.insert(StoredTree(digest: SHA256.hash(big), data: big), at: 1)
    let bytes = manifest.encoded()
    let watcher = WindowWatcher()
    let input = try Self.decode(bytes, piece: 4093, window: 4096, into: watcher)
    #expect(differences(watcher.collector.manifest, manifest) == [])
    // The big tree needed a window of its size; once it was consumed, the window went back.
    #expect(watcher.largestWindow >= big.count && watcher.largestWindow < 2 * big.count)
    #expect(input.windowSize == 4096)
    #expect(watcher.windows.last == 4096)
    // The same with the default window, larger than most records and smaller than this one.
    let again = WindowWatcher()
    try Self.decode(bytes, piece: 65_536, window: RecordReader.defaultWindow, into: again)
    #expect(differences(again.collector.manifest, manifest) == [])
    #expect(again.largestWindow == 2 * RecordReader.defaultWindow)
  }

  /// Each way `bytes` can be damaged (every prefix, every byte changed), read into a catalog
  /// in pieces: one error, the manifest's, and no row left.
  static func expectEveryDamageRefused(_ bytes: [UInt8], name: String) throws {
    let directory = TemporaryDirectory("decoder")
    let catalog = try Catalog(path: directory.path + "/catalog.db")
    func expectRefused(_ damaged: [UInt8], _ what: String) throws {
      do {
        try catalog.database.inTransaction {
          let ingest = CatalogIngest(catalog, archive: archive)
          try decode(damaged, piece: 7, window: 16, into: ingest)
          try ingest.finish()
          try catalog.insert(
            ArchiveRecord(name: archive, size: 1, checksum: 0, compression: .none, created: Date()))
        }
        Issue.record("\(name), \(what): decoded")
      } catch let error as RepositoryError {
        #expect(error.code == .corruptArchive, "\(name), \(what)")
        #expect(
          error.message.hasPrefix("The manifest of archive '\(archive)' is damaged: "), "\(name), \(what)")
        #expect(!error.message.contains("\n"))
      }
      for table in ["archives", "trees", "blobs", "chunks", "chunk_lists"] {
        #expect(try catalog.count(table) == 0, "\(name), \(what): rows left in \(table)")
      }
    }
    for length in 0..<bytes.count { try expectRefused(Array(bytes[..<length]), "cut at \(length)") }
    for index in bytes.indices {
      for flip: UInt8 in [0x01, 0x80] {
        var damaged = bytes
        damaged[index] ^= flip
        try expectRefused(damaged, "byte \(index) ^ \(flip)")
      }
    }
    // What was refused would have gone in whole.
    try catalog.database.inTransaction {
      let ingest = CatalogIngest(catalog, archive: archive)
      try decode(bytes, piece: 7, window: 16, into: ingest)
      try ingest.finish()
    }
    #expect(try catalog.count("blobs") > 0)
  }

  @Test func everyTruncationAndEveryChangedByteIsOneErrorAndLeavesNothingInTheCatalog() throws {
    try Self.expectEveryDamageRefused(ManifestTests.sample().encoded(), name: "sample")
    try Self.expectEveryDamageRefused(
      Self.large(blobs: 30, trees: 4, treeBytes: 120, chunks: 5, lists: 3, frames: nil).encoded(),
      name: "larger")
    try Self.expectEveryDamageRefused(
      Self.large(blobs: 10, trees: 3, treeBytes: 80, chunks: 2, lists: 2, frames: 5).encoded(), name: "framed"
    )
    var foreign = Self.large(blobs: 6, trees: 2, treeBytes: 60, chunks: 2, lists: 1, frames: 2)
    foreign.foreignChunks = [
      ChunkLocation(digest: SHA256.hash([9]), archive: "00ff00ff.tar", offset: 0, dataOffset: 512, size: 300_000)
    ]
    try Self.expectEveryDamageRefused(foreign.encoded(), name: "foreign")
  }

  @Test func versionOneManifestsReadInPiecesToo() throws {
    let tree = TreeTests.sample().encoded()
    var out = ByteWriter()
    out.bytes.append(contentsOf: Array("APPBOXMF".utf8))
    out.byte(1)
    out.varint(0)
    out.varint(1)
    out.digest(SHA256.hash(tree))
    out.data(tree)
    out.varint(1)
    out.digest(SHA256.hash([7]))
    out.varint(512)
    out.varint(3)
    out.data(Array("Documents/a".utf8))
    out.bytes.append(contentsOf: SHA256.hash(out.bytes).bytes)
    for piece in 1...out.bytes.count {
      let decoded = try Self.decoded(out.bytes, piece: piece, window: 3)
      #expect(decoded.trees == [StoredTree(digest: SHA256.hash(tree), data: tree)])
      #expect(decoded.blobs.map(\.path) == [Array("Documents/a".utf8)] && decoded.blobs[0].dataOffset == nil)
    }
  }

  /// The decoder stops at the first problem: records after it are never handed over, and a
  /// source's own error passes through as it is.
  @Test func theFirstProblemEndsTheReading() throws {
    var manifest = ManifestTests.sample()
    manifest.trees[0].data[0] ^= 1  // no longer hashes to its digest
    let summary = ManifestSummary()
    #expect(throws: BackupError.self) {
      try Self.decode(manifest.encoded(), piece: 5, window: 8, into: summary)
    }
    #expect(summary.trees == 0 && summary.blobs == 0 && summary.snapshot != nil)
    struct Unplugged: Error {}
    var handed = 0
    let source = pieces(of: ManifestTests.sample().encoded(), size: 10)
    let input = RecordReader(size: 1000, window: 64) { buffer in
      handed += 1
      guard handed < 3 else { throw Unplugged() }
      return try source(buffer)
    }
    #expect(throws: Unplugged.self) {
      try ManifestDecoder.decode(input, archive: Self.archive, into: summary)
    }
  }
}
