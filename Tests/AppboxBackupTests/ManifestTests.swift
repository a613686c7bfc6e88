import AppboxCrypto
import Foundation
import Testing

@testable import AppboxBackup

struct ManifestTests {
  static func sample() -> Manifest {
    let tree = TreeTests.sample().encoded()
    let snapshot = Snapshot(
      id: "0a1b2c3d", app: "com.example.notes", device: "UDID", containerID: "C", version: "1.0",
      bundleDirectoryName: "Notes.app", seal: "ab", time: Date(timeIntervalSince1970: 1_700_000_000.25),
      kind: .incremental, tag: "pre-update", parent: "ffffffff", rootTree: SHA256.hash(tree), files: 3,
      bytes: 42,
      bytesAdded: 7, archive: "0a1b2c3d.tar", keychainOffset: 4096, warnings: 1)
    return Manifest(
      snapshot: snapshot, trees: [(SHA256.hash(tree), tree)],
      blobs: [
        BlobLocation(
          digest: SHA256.hash([1]), archive: "0a1b2c3d.tar", offset: 1536, path: [0x61, 0xFF],
          size: 1)
      ])
  }

  @Test func roundTrips() throws {
    let manifest = Self.sample()
    let decoded = try Manifest.decode(manifest.encoded(), archive: "0a1b2c3d.tar")
    #expect(decoded.snapshot == manifest.snapshot)
    #expect(decoded.trees.map(\.digest) == manifest.trees.map(\.digest))
    #expect(decoded.trees.map(\.data) == manifest.trees.map(\.data))
    #expect(decoded.blobs == manifest.blobs)
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
    #expect(throws: BackupError.self) { try Manifest.decode(manifest.encoded(), archive: "x.tar") }
  }
}
