import AppboxArchive
import AppboxCrypto
import Foundation
import Testing

@testable import AppboxBackup
@testable import AppboxRepository

struct ManifestTests {
  static func sample() -> Manifest {
    let tree = TreeTests.sample().encoded()
    let snapshot = Snapshot(
      id: "0a1b2c3d", app: "com.example.notes", device: "UDID", containerID: "C", version: "1.0",
      bundleDirectoryName: "Notes.app", seal: "ab", time: Date(timeIntervalSince1970: 1_700_000_000.25),
      kind: .incremental, tag: "pre-update", parent: "ffffffff", rootTree: SHA256.hash(tree), files: 3,
      bytes: 42,
      bytesAdded: 7, archive: "0a1b2c3d.tar", keychainOffset: 4096, warnings: 1)
    var changed = TreeTests.sample()
    changed.entries[0].size += 1
    let newer = changed.encoded()
    return Manifest(
      snapshot: snapshot,
      trees: [
        StoredTree(digest: SHA256.hash(tree), data: tree),
        StoredTree(
          digest: SHA256.hash(newer), base: SHA256.hash(tree),
          data: try! TreeDelta.make(from: tree, to: newer)),
      ],
      blobs: [
        BlobLocation(
          digest: SHA256.hash([1]), archive: "0a1b2c3d.tar", offset: 1536, path: [0x61, 0xFF],
          size: 1, dataOffset: 2048),
        BlobLocation(
          digest: SHA256.hash([2]), archive: "0a1b2c3d.tar", offset: 4096, path: [0x62], size: 9),
      ],
      chunks: [
        ChunkLocation(
          digest: SHA256.hash([3]), archive: "0a1b2c3d.tar", offset: 8192, dataOffset: 9216, size: 300_000)
      ],
      chunkLists: [
        (SHA256.hash([4]), ChunkList(chunks: [(SHA256.hash([3]), 300_000), (SHA256.hash([5]), 12)]))
      ])
  }

  /// A frame index of `count` compressed frames (lengths only: what a manifest checks).
  static func frames(_ count: Int) -> FrameIndex {
    var out = ByteWriter()
    out.varint(UInt64(count))
    for index in 0..<count {
      out.varint(UInt64(524_288 + index))
      out.varint(UInt64(100_000 + index * 7) << 1)
    }
    return try! FrameIndex.decode(out.bytes)
  }

  @Test func framedArchivesManifestsAreVersionThreeWithTheirFrameIndex() throws {
    var manifest = Self.sample()
    #expect(manifest.encoded()[8] == 2)
    manifest.frames = Self.frames(40)
    let encoded = manifest.encoded()
    #expect(encoded[8] == 3)
    #expect(encoded.count == manifest.encodedSize)
    let decoded = try Manifest.decode(encoded, archive: "0a1b2c3d.tar")
    #expect(decoded.frames == manifest.frames)
    #expect(decoded.blobs == manifest.blobs && decoded.chunks == manifest.chunks)
    // An empty index is still an index (a repack holding only trees).
    manifest.frames = FrameIndex()
    #expect(try Manifest.decode(manifest.encoded(), archive: "x.tar.zst").frames == FrameIndex())
  }

  /// Chunks recorded inside earlier archives make a manifest version 4, framed or not; each
  /// names its archive, which must be a plain name other than the manifest's own.
  @Test func foreignChunksMakeVersionFourWithOrWithoutFrames() throws {
    var manifest = Self.sample()
    manifest.foreignChunks = [
      ChunkLocation(
        digest: SHA256.hash([6]), archive: "00ff00ff.tar.zst", offset: 512, dataOffset: 1024, size: 262_144),
      ChunkLocation(
        digest: SHA256.hash([7]), archive: "11ee11ee.tar", offset: 4096, dataOffset: 5120, size: 1 << 20),
    ]
    for frames in [nil, Self.frames(3)] {
      manifest.frames = frames
      let encoded = manifest.encoded()
      #expect(encoded[8] == 4)
      #expect(encoded.count == manifest.encodedSize)
      let decoded = try Manifest.decode(encoded, archive: "0a1b2c3d.tar")
      #expect(decoded.foreignChunks == manifest.foreignChunks)
      #expect(decoded.chunks == manifest.chunks && decoded.frames == frames)
      #expect(decoded.blobs == manifest.blobs && decoded.trees == manifest.trees)
    }
    for name in ["", "0a1b2c3d.tar", "../catalog.db", ".hidden", "a/b"] {
      manifest.foreignChunks[0].archive = name
      #expect(throws: BackupError.self) { try Manifest.decode(manifest.encoded(), archive: "0a1b2c3d.tar") }
    }
  }

  /// A frame index that does not decode is the manifest's damage, even under a valid checksum.
  @Test func aBadFrameIndexIsRefusedEvenWithAValidChecksum() throws {
    var manifest = Self.sample()
    manifest.frames = Self.frames(2)
    var encoded = manifest.encoded()
    // The index is the last record before the checksum: 1 length byte, then count 2, then the
    // frames; make the first frame's stored length impossible (1 byte), and re-sum.
    let end = encoded.count - 32
    let index = Self.frames(2).encoded()
    let start = end - index.count
    #expect(Array(encoded[start..<end]) == index)
    var bad = ByteWriter()
    bad.varint(2)
    bad.varint(524_288)
    bad.varint(1 << 1)
    bad.varint(524_289)
    bad.varint(100_007 << 1)
    encoded = Array(encoded[..<(start - 1)]) + [UInt8(bad.bytes.count)] + bad.bytes
    encoded += SHA256.hash(encoded).bytes
    #expect {
      try Manifest.decode(encoded, archive: "x.tar.zst")
    } throws: {
      "\($0)".contains("frame index is damaged")
    }
  }

  @Test func roundTrips() throws {
    let manifest = Self.sample()
    let decoded = try Manifest.decode(manifest.encoded(), archive: "0a1b2c3d.tar")
    #expect(decoded.snapshot == manifest.snapshot)
    #expect(decoded.trees == manifest.trees)
    #expect(decoded.blobs == manifest.blobs)
    #expect(decoded.chunks == manifest.chunks)
    #expect(decoded.chunkLists.map(\.digest) == manifest.chunkLists.map(\.digest))
    #expect(decoded.chunkLists.map(\.list) == manifest.chunkLists.map(\.list))
    #expect(manifest.encoded().count == manifest.encodedSize)
  }

  /// Archives written before version 2 (whole trees, blobs without data offsets, no chunks)
  /// still rebuild a catalog.
  @Test func versionOneManifestsStillDecode() throws {
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
    let decoded = try Manifest.decode(out.bytes, archive: "old.tar")
    #expect(decoded.snapshot == nil)
    #expect(decoded.trees == [StoredTree(digest: SHA256.hash(tree), data: tree)])
    #expect(
      decoded.blobs == [
        BlobLocation(
          digest: SHA256.hash([7]), archive: "old.tar", offset: 512, path: Array("Documents/a".utf8), size: 3)
      ])
    #expect(decoded.chunks.isEmpty && decoded.chunkLists.isEmpty)
  }

  /// Chunk lists and chunk locations come back from archives: bad ones are refused.
  @Test func malformedChunkRecordsAreRefused() throws {
    var manifest = Self.sample()
    manifest.chunks[0].size = Int64(ChunkingParameters.largestStored) + 1
    #expect(throws: BackupError.self) { try Manifest.decode(manifest.encoded(), archive: "x.tar") }
    manifest = Self.sample()
    manifest.chunks[0].dataOffset = manifest.chunks[0].offset
    #expect(throws: BackupError.self) { try Manifest.decode(manifest.encoded(), archive: "x.tar") }
    manifest = Self.sample()
    manifest.chunkLists[0].list = ChunkList(chunks: [(SHA256.hash([3]), 0)])
    #expect(throws: BackupError.self) { try Manifest.decode(manifest.encoded(), archive: "x.tar") }
  }

  /// A chunk as long as earlier versions cut (4 MiB, twice what this one cuts) is still a valid
  /// record: repositories written before the cuts shrank keep their chunks.
  @Test func chunksOfEarlierCutsAreAccepted() throws {
    #expect(ChunkingParameters.maximum < ChunkingParameters.largestStored)
    var manifest = Self.sample()
    let largest = Int64(ChunkingParameters.largestStored)
    manifest.chunks[0].size = largest
    manifest.chunkLists[0].list = ChunkList(chunks: [(SHA256.hash([3]), largest), (SHA256.hash([5]), 12)])
    let decoded = try Manifest.decode(manifest.encoded(), archive: "x.tar")
    #expect(decoded.chunks.first?.size == largest)
    #expect(decoded.chunkLists.first?.list.chunks.first?.size == largest)
  }

  /// An incomplete snapshot keeps its count and its (raw, shortened) paths through the
  /// manifest, so a catalog rebuilt from the archives still knows it is incomplete.
  @Test func incompleteSnapshotsRoundTrip() throws {
    var manifest = Self.sample()
    let long = Array(repeating: UInt8(ascii: "d"), count: 4000) + [0xFF, 0x0A]
    manifest.snapshot?.unreadable = 3
    manifest.snapshot?.unreadablePaths = Snapshot.keptPaths([Array("Documents/locked".utf8), long])
    let decoded = try Manifest.decode(manifest.encoded(), archive: "0a1b2c3d.tar")
    #expect(decoded.snapshot == manifest.snapshot)
    #expect(decoded.snapshot?.isIncomplete == true)
    let kept = try #require(decoded.snapshot?.unreadablePaths)
    #expect(kept.count == 2 && kept[0] == Array("Documents/locked".utf8))
    #expect(kept[1].count < 170 && kept[1].suffix(2) == [0xFF, 0x0A])
  }

  @Test func aManifestWithoutSnapshotDecodesWithNone() throws {
    var manifest = Self.sample()
    manifest.snapshot = nil
    #expect(try Manifest.decode(manifest.encoded(), archive: "x.tar").snapshot == nil)
  }

  @Test func anyDamageIsRefused() {
    let bytes = Self.sample().encoded()
    for index in stride(from: 0, to: bytes.count, by: 7) {
      var damaged = bytes
      damaged[index] ^= 0x10
      #expect(throws: BackupError.self) { try Manifest.decode(damaged, archive: "x.tar") }
    }
    #expect(throws: BackupError.self) { try Manifest.decode(Array(bytes.dropLast()), archive: "x.tar") }
  }

  @Test func aTreeThatDoesNotMatchItsDigestIsRefusedEvenWithAValidChecksum() {
    var manifest = Self.sample()
    manifest.trees[0].digest = SHA256.hash([9, 9])
    manifest.trees[0].base = nil
    #expect(throws: BackupError.self) { try Manifest.decode(manifest.encoded(), archive: "x.tar") }
  }
}
