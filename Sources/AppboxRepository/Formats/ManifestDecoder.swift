// Decoding a manifest as it is read: the one parser of the format (Manifest.swift has the
// layout). A full backup of a million files has a manifest of some 150 MB; it is never held
// whole. The bytes come through a `RecordReader` (a local file, an object store's reader, an
// opened sealed object, an archive member), and each record goes to a `ManifestConsumer` as
// soon as it is parsed: the snapshot's row first, then each tree, blob location, chunk
// location and chunk list, and the frame index, in the order they are encoded.
//
// Invariants: the bytes are untrusted. Every length is bounded (a field 4 KiB, a tree
// `TreeDelta.maximumLength`, a blob's path 64 KiB, a chunk list `ChunkList.maximumEncodedSize`,
// a frame index `Manifest.maximumFramesLength`, counts by the bytes left), every whole tree
// must hash to its digest, every chunk list and the frame index must decode, and the SHA-256 of everything before the trailing checksum is computed as the bytes
// are consumed and must match it. The first problem throws one `.corruptArchive` error and
// nothing more is read. The consumer has then seen the records before it: whatever it stores
// must wait for `decode` to return (the catalog ingests inside a transaction that a failure
// rolls back). Memory: the reader's window (256 KiB, or the longest record) and one record.

import AppboxArchive
import AppboxCrypto
import Foundation

/// What reads a manifest: each of its records, one at a time, in the order they are encoded.
/// Nothing it is handed is confirmed until `ManifestDecoder.decode` returns.
package protocol ManifestConsumer: AnyObject {
  /// The snapshot's row (nil in an archive `forget` wrote), before any tree.
  func snapshot(_ snapshot: Snapshot?) throws
  func tree(_ tree: StoredTree) throws
  func blob(_ blob: BlobLocation) throws
  func chunk(_ chunk: ChunkLocation) throws
  func chunkList(_ digest: Digest, _ list: ChunkList) throws
  /// A chunk that lies in another (earlier) archive, which this archive's backup indexed
  /// (manifest version 4), after the chunk lists.
  func foreignChunk(_ chunk: ChunkLocation) throws
  /// The frame index of a framed archive (manifest version 3 or 4), last.
  func frames(_ index: FrameIndex) throws
}

extension ManifestConsumer {
  package func snapshot(_ snapshot: Snapshot?) throws {}
  package func tree(_ tree: StoredTree) throws {}
  package func blob(_ blob: BlobLocation) throws {}
  package func chunk(_ chunk: ChunkLocation) throws {}
  package func chunkList(_ digest: Digest, _ list: ChunkList) throws {}
  package func foreignChunk(_ chunk: ChunkLocation) throws {}
  package func frames(_ index: FrameIndex) throws {}
}

/// Reads a manifest to check it, keeping only its snapshot and how many records it holds.
package final class ManifestSummary: ManifestConsumer {
  package private(set) var snapshot: Snapshot?
  package private(set) var trees = 0
  package private(set) var blobs = 0
  package private(set) var chunks = 0
  package private(set) var chunkLists = 0
  package private(set) var foreignChunks = 0
  package private(set) var frames: Int?

  package init() {}

  package func snapshot(_ snapshot: Snapshot?) throws { self.snapshot = snapshot }
  package func tree(_ tree: StoredTree) throws { trees += 1 }
  package func blob(_ blob: BlobLocation) throws { blobs += 1 }
  package func chunk(_ chunk: ChunkLocation) throws { chunks += 1 }
  package func chunkList(_ digest: Digest, _ list: ChunkList) throws { chunkLists += 1 }
  package func foreignChunk(_ chunk: ChunkLocation) throws { foreignChunks += 1 }
  package func frames(_ index: FrameIndex) throws { frames = index.count }
}

enum ManifestDecoder {
  /// Reads one manifest (of archive `archive`) from `input`, from its first byte to the end of
  /// the input, handing its records to `consumer`. Returns once the trailing checksum matched;
  /// throws `.corruptArchive` at the first problem. Errors of the source (a read that fails, a
  /// sealed segment that does not authenticate) and of the consumer pass through unchanged.
  static func decode(_ input: RecordReader, archive: String, into consumer: some ManifestConsumer) throws {
    let hasher = SHA256Hasher()
    input.hasher = hasher
    let (version, snapshot) = try readHead(input, archive: archive)
    try consumer.snapshot(snapshot)
    let parse = Parser(input: input, archive: archive)
    for _ in 0..<(try parse { try $0.count(limit: input.remaining) }) {
      try consumer.tree(try parse { try Manifest.decodeTree(&$0, version: version, bad: parse.bad) })
    }
    for _ in 0..<(try parse { try $0.count(limit: input.remaining) }) {
      try consumer.blob(
        try parse { try Manifest.decodeBlob(&$0, version: version, archive: archive, bad: parse.bad) })
    }
    if version >= 2 {
      for _ in 0..<(try parse { try $0.count(limit: input.remaining) }) {
        try consumer.chunk(try parse { try Manifest.decodeChunk(&$0, archive: archive, bad: parse.bad) })
      }
      for _ in 0..<(try parse { try $0.count(limit: input.remaining) }) {
        let (digest, list) = try parse { reader in
          (try reader.digest(), try ChunkList.decode(try reader.data(limit: ChunkList.maximumEncodedSize)))
        }
        try consumer.chunkList(digest, list)
      }
    }
    var framed = version == 3
    if version >= 4 {
      for _ in 0..<(try parse { try $0.count(limit: input.remaining) }) {
        try consumer.foreignChunk(
          try parse { try Manifest.decodeForeignChunk(&$0, archive: archive, bad: parse.bad) })
      }
      switch try parse({ try $0.byte() }) {
      case 0: framed = false
      case 1: framed = true
      default: throw parse.bad("its frame index flag is bad")
      }
    }
    if framed {
      let frames = try parse { reader in
        let bytes = try reader.data(limit: Manifest.maximumFramesLength)
        do {
          return try FrameIndex.decode(bytes)
        } catch {
          throw parse.bad("its frame index is damaged: \(error)")
        }
      }
      try consumer.frames(frames)
    }
    input.hasher = nil
    let expected = hasher.finalize()
    let stored = try parse { Digest(bytes: try $0.raw(Digest.byteCount)) }
    guard try input.isAtEnd() else { throw parse.bad("trailing bytes") }
    guard stored == expected else { throw parse.bad("checksum mismatch") }
  }

  /// The manifest's version and snapshot row, from its first records (what sorting archives by
  /// time needs). Not verified: only `decode` checks the whole.
  static func readHead(_ input: RecordReader, archive: String) throws -> (version: UInt8, snapshot: Snapshot?)
  {
    let parse = Parser(input: input, archive: archive)
    let (head, version) = try parse { reader in
      (Array(try reader.raw(Manifest.magic.count)), try reader.byte())
    }
    guard head == Manifest.magic, (1...4).contains(version) else {
      throw parse.bad("not an appbox manifest")
    }
    var fields: [String: [UInt8]] = [:]
    for _ in 0..<(try parse { try $0.count(limit: 64) }) {
      let (key, value) = try parse { reader in
        (String(decoding: try reader.data(limit: 64), as: UTF8.self), try reader.data(limit: 4096))
      }
      fields[key] = value
    }
    return (version, fields.isEmpty ? nil : try Manifest.snapshot(fields, archive: archive, bad: parse.bad))
  }

  /// Parses one record at a time from `input`; a malformed one is the manifest's damage.
  private struct Parser {
    let input: RecordReader
    let archive: String

    func bad(_ what: String) -> RepositoryError {
      RepositoryError(.corruptArchive, "The manifest of archive '\(archive)' is damaged: \(what)")
    }

    func callAsFunction<T>(_ body: (inout ByteReader) throws -> T) throws -> T {
      do {
        return try input.record(body)
      } catch let error as RepositoryError where error.code == .corruptCatalog {
        if input.endedInsideRecord { throw bad("it ends after \(input.consumed) bytes, inside a record") }
        throw bad(error.message)
      }
    }
  }
}
