import AppboxCrypto
import AppboxTestSupport
import Foundation
import Testing

@testable import AppboxBackup
@testable import AppboxRepository

/// A backup's manifest spooled to disk encodes to the same bytes as the manifest held in
/// memory, and reads back the same trees and blobs, however many (records cross the spool's
/// 1 MiB read pieces).
struct ManifestSpoolTests {
  @Test func aSpoolEncodesAndReadsBackLikeTheManifest() throws {
    let dir = TemporaryDirectory("spool")
    var manifest = ManifestTests.sample()
    // Enough records that some straddle the spool's read pieces, and a tree of 2 MB.
    var big = TreeTests.sample()
    big.entries = (0..<20_000).map { index in
      var entry = TreeTests.sample().entries[0]
      entry.name = Array(String(format: "entry-%06d", index).utf8)
      return entry
    }
    let bigData = big.encoded()
    #expect(bigData.count > 1 << 20)
    manifest.trees.append(StoredTree(digest: SHA256.hash(bigData), data: bigData))
    for index in 0..<30_000 {
      manifest.blobs.append(
        BlobLocation(
          digest: SHA256.hash(Array("\(index)".utf8)), archive: "0a1b2c3d.tar", offset: Int64(index) * 1024,
          path: Array("Documents/file-\(index)".utf8), size: Int64(index % 500 + 1),
          dataOffset: index % 3 == 0 ? nil : Int64(index) * 1024 + 512))
    }
    let spool = try ManifestSpool(directory: dir.path, archive: "0a1b2c3d.tar")
    for tree in manifest.trees { try spool.add(tree) }
    for blob in manifest.blobs { try spool.add(blob) }
    spool.snapshot = manifest.snapshot
    spool.chunks = manifest.chunks
    spool.chunkLists = manifest.chunkLists

    var spooled: [UInt8] = []
    try spool.encode { spooled.append(contentsOf: $0) }
    #expect(spooled == manifest.encoded())
    #expect(spool.encodedSize == manifest.encodedSize && spooled.count == spool.encodedSize)
    var trees: [StoredTree] = []
    try spool.forEachTree { trees.append($0) }
    #expect(trees == manifest.trees)
    var blobs: [BlobLocation] = []
    try spool.forEachBlob { blobs.append($0) }
    #expect(blobs == manifest.blobs)
    // Nothing is left in the directory: the spool's files were unlinked when made.
    #expect(try FileManager.default.contentsOfDirectory(atPath: dir.path).isEmpty)
    let decoded = try Manifest.decode(spooled, archive: "0a1b2c3d.tar")
    #expect(decoded.blobs.count == manifest.blobs.count && decoded.trees.count == manifest.trees.count)
  }
}
