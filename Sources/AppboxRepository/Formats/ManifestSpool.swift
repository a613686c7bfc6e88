// A backup's manifest, kept on disk while it grows: a full backup of a million files records a
// million blob locations and tens of thousands of trees (about 150 MB encoded), which must not
// sit in memory. The spool appends each tree and blob location, already encoded as the
// manifest encodes them, to a temporary file (unlinked at once, so nothing is left behind
// whatever happens) beside the catalog; encoding the manifest (into the archive's last member
// and the manifest object) and ingesting it into the catalog then stream those files back.
// The bytes are exactly those `Manifest.encode` writes for the same content.

import AppboxArchive
import AppboxCore
import AppboxCrypto
import Foundation
import Glibc

/// Where the archiver puts what a snapshot's manifest records besides the trees: the
/// locations of the blobs an archive holds. (A backup's spool; nil for an export.)
package protocol BlobSink: AnyObject {
  func add(_ blob: BlobLocation) throws
}

/// Where the new trees go, in the order they are made (children before parents).
package protocol TreeSink: AnyObject {
  func add(_ tree: StoredTree) throws
}

/// What a manifest being written holds, however it is held: a `Manifest` in memory, or a
/// backup's spool. (A manifest being read is not held at all: `ManifestDecoder` hands its
/// records to a `ManifestConsumer` as they are read.)
package protocol ManifestContent {
  var snapshot: Snapshot? { get }
  var treeCount: Int { get }
  var blobCount: Int { get }
  /// The length of the encoding.
  var encodedSize: Int { get }
  /// Hands the encoding to `sink` in pieces.
  func encode(_ sink: (UnsafeRawBufferPointer) throws -> Void) throws
  func forEachTree(_ body: (StoredTree) throws -> Void) throws
  func forEachBlob(_ body: (BlobLocation) throws -> Void) throws
  /// Hands every record to `consumer`, in the order the encoding has them.
  func forEachRecord(_ consumer: some ManifestConsumer) throws
}

extension Manifest: ManifestContent {
  package var treeCount: Int { trees.count }
  package var blobCount: Int { blobs.count }
  package func forEachTree(_ body: (StoredTree) throws -> Void) throws { try trees.forEach(body) }
  package func forEachBlob(_ body: (BlobLocation) throws -> Void) throws { try blobs.forEach(body) }
}

/// One append-only temporary file, unlinked as soon as it is made, with a write buffer.
final class SpoolFile {
  private let descriptor: FileDescriptor
  private var buffer = ByteWriter()
  /// Bytes appended so far.
  private(set) var size = 0

  init(in directory: String) throws {
    let name = directory + "/.appbox-spool-" + String(UInt64.random(in: 0...UInt64.max), radix: 16)
    descriptor = try FileDescriptor.open(name, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW, mode: 0o600)
    unlink(name)
    buffer.bytes.reserveCapacity(1 << 16)
  }

  deinit { descriptor.close() }

  /// Appends what `encode` writes.
  func append(_ encode: (inout ByteWriter) -> Void) throws {
    let before = buffer.bytes.count
    encode(&buffer)
    size += buffer.bytes.count - before
    if buffer.bytes.count >= 1 << 16 { try flush() }
  }

  private func flush() throws {
    try buffer.bytes.withUnsafeBytes { try descriptor.writeAll($0, at: Int64(size - $0.count)) }
    buffer.bytes.removeAll(keepingCapacity: true)
  }

  /// Hands everything appended to `body`, in pieces of at most 1 MiB.
  func forEachPiece(_ body: (UnsafeRawBufferPointer) throws -> Void) throws {
    try flush()
    let piece = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16)
    defer { piece.deallocate() }
    var offset = 0
    while offset < size {
      let count = try read(into: piece, at: offset)
      guard count > 0 else { throw SystemError("read", path: "a backup's spool", errno: .ioError) }
      try body(UnsafeRawBufferPointer(rebasing: piece[0..<count]))
      offset += count
    }
  }

  /// Reads what was appended at `offset`: as much as fits in `buffer`, 0 at the end.
  private func read(into buffer: UnsafeMutableRawBufferPointer, at offset: Int) throws -> Int {
    let wanted = min(buffer.count, size - offset)
    guard wanted > 0 else { return 0 }
    return try descriptor.readAll(
      into: UnsafeMutableRawBufferPointer(rebasing: buffer[0..<wanted]), at: Int64(offset))
  }

  /// The records appended, one by one: `decode` reads one record from a reader (the manifest's
  /// own record parsers, through a `RecordReader`), and `body` gets what it decoded.
  func forEachRecord<Record>(
    decode: (inout ByteReader) throws -> Record, _ body: (Record) throws -> Void
  ) throws {
    try flush()
    var offset = 0
    let input = RecordReader(size: Int64(size), window: 1 << 20) { buffer in
      let count = try self.read(into: buffer, at: offset)
      guard count > 0 || offset == self.size else {
        throw SystemError("read", path: "a backup's spool", errno: .ioError)
      }
      offset += count
      return count
    }
    while try !input.isAtEnd() {
      let record: Record
      do {
        record = try input.record(decode)
      } catch let error as RepositoryError where input.endedInsideRecord {
        throw RepositoryError(.corruptCatalog, "A backup's spool ends inside a record", cause: error)
      }
      try body(record)
    }
  }
}

/// A backup's manifest while it is made: trees and blobs on disk, chunks in memory (one per
/// megabyte of large files).
package final class ManifestSpool: TreeSink, BlobSink, ManifestContent {
  private let trees: SpoolFile
  private let blobs: SpoolFile
  private let archive: String
  package private(set) var treeCount = 0
  package private(set) var blobCount = 0
  package var snapshot: Snapshot?
  package var chunks: [ChunkLocation] = []
  package var chunkLists: [(digest: Digest, list: ChunkList)] = []
  /// Chunks indexed inside earlier archives' whole members.
  package var foreignChunks: [ChunkLocation] = []
  /// The frames before the manifest member, for a framed archive (set before encoding).
  package var frames: FrameIndex?

  /// A spool for the manifest of archive `archive`, in `directory` (beside the catalog).
  package init(directory: String, archive: String) throws {
    trees = try SpoolFile(in: directory)
    blobs = try SpoolFile(in: directory)
    self.archive = archive
  }

  package func add(_ tree: StoredTree) throws {
    try trees.append { Manifest.encode(tree, into: &$0) }
    treeCount += 1
  }

  package func add(_ blob: BlobLocation) throws {
    try blobs.append { Manifest.encode(blob, into: &$0) }
    blobCount += 1
  }

  package var encodedSize: Int {
    Manifest.encodedSize(
      snapshot: snapshot, treeCount: treeCount, treeBytes: trees.size, blobCount: blobCount,
      blobBytes: blobs.size, chunks: chunks, chunkLists: chunkLists, foreignChunks: foreignChunks,
      frames: frames)
  }

  package func encode(_ sink: (UnsafeRawBufferPointer) throws -> Void) throws {
    try Manifest.encode(
      snapshot: snapshot, treeCount: treeCount, trees: { try self.trees.forEachPiece($0) },
      blobCount: blobCount,
      blobs: { try self.blobs.forEachPiece($0) }, chunks: chunks, chunkLists: chunkLists,
      foreignChunks: foreignChunks, frames: frames, sink)
  }

  package func forEachTree(_ body: (StoredTree) throws -> Void) throws {
    try trees.forEachRecord(
      decode: { try Manifest.decodeTree(&$0, version: 2, bad: { ByteReader.malformed($0) }) }, body)
  }

  package func forEachBlob(_ body: (BlobLocation) throws -> Void) throws {
    try blobs.forEachRecord(
      decode: {
        try Manifest.decodeBlob(&$0, version: 2, archive: archive, bad: { ByteReader.malformed($0) })
      },
      body)
  }

  package func forEachRecord(_ consumer: some ManifestConsumer) throws {
    try consumer.snapshot(snapshot)
    try forEachTree { try consumer.tree($0) }
    try forEachBlob { try consumer.blob($0) }
    for chunk in chunks { try consumer.chunk(chunk) }
    for (digest, list) in chunkLists { try consumer.chunkList(digest, list) }
    for chunk in foreignChunks { try consumer.foreignChunk(chunk) }
    if let frames { try consumer.frames(frames) }
  }
}
