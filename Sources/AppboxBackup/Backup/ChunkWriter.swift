// Stage 3b, for large files seen changing: split a streamed file into content-defined chunks
// as its bytes pass through the archiver, hashing each chunk, so a changed file is read once.
// The reader finds the cuts (the gear hash, `Chunker`) and hashes the whole file meanwhile, on
// the other core.
//
// Two uses, by the file's `StreamMode`:
// - `.chunks`: the file is not written as a member. Each chunk the repository lacks (and this
//   archive has not stored yet) becomes a member `.appbox/chunks/<hex digest>` holding exactly
//   its bytes; the others cost nothing. The file's chunk list goes into the catalog and the
//   manifest, keyed by its whole-file digest, which its tree entry keeps.
// - `.indexed` (a database seen for the first time): the file is written as a member of its
//   own, as any; its chunks are only indexed, each at its place in that member's data, so the
//   file's first edit finds them (chunking is otherwise lazy: docs/performance.md).
//
// A file edited in place (same inode) whose earlier version an earlier archive holds whole and
// uncut is compared with it: each chunk the repository lacks is compared with that version's
// bytes at the same offset, read where they lie (`EarlierVersion`), and when they are the same
// it is not written but recorded as a foreign chunk, a location inside the earlier archive
// (Manifest.swift, version 4).
//
// Invariants: a chunk location is recorded only for bytes written to this archive that hash
// to its digest; chunk bytes are staged (at most `ChunkingParameters.maximum`) until the cut
// is known, so a known chunk is never written; a file's list covers every byte the archive's
// reading gave for it (a short read's zero padding included, as in its digest).

import AppboxArchive
import AppboxCrypto
import AppboxRepository
import Foundation

final class ChunkWriter {
  private let writer: ArchiveWriter
  private let catalog: Catalog
  private let archiveName: String
  private let time: Date
  private let staging = UnsafeMutableRawBufferPointer.allocate(
    byteCount: ChunkingParameters.maximum, alignment: 64)
  private let hasher = SHA256Hasher()

  /// The current chunk's bytes so far.
  private var length = 0
  /// `.indexed`: where the file's member and its data start in the archive, and the current
  /// chunk in the file.
  private var indexed: (member: Int64, data: Int64)?
  private var position: Int64 = 0
  /// What the file's data is (its name, else its first bytes), for every chunk of it: a chunk
  /// of a video compresses no better than the video.
  private var content = ContentKind.unknown
  private var atFileStart = true
  private var list: [(digest: Digest, size: Int64)] = []

  /// Chunks first stored in this archive, in archive order.
  private(set) var locations: [ChunkLocation] = []
  /// Chunks of earlier archives this archive's files use, first recorded here.
  private(set) var foreignLocations: [ChunkLocation] = []
  /// Digests stored or recorded by this archive.
  private var storedHere: Set<Digest> = []
  /// Finds a file's earlier version where an earlier archive holds it (nil: not looked for).
  private let earlierVersion: ((Digest, Int64) throws -> EarlierVersion?)?
  /// The current file's earlier version, to compare its new chunks with.
  private var earlier: EarlierVersion?
  /// Bytes of chunk members written.
  private(set) var bytesWritten: Int64 = 0

  init(
    writer: ArchiveWriter, catalog: Catalog, archiveName: String, time: Date,
    earlierVersion: ((Digest, Int64) throws -> EarlierVersion?)? = nil
  ) {
    self.earlierVersion = earlierVersion
    self.writer = writer
    self.catalog = catalog
    self.archiveName = archiveName
    self.time = time
  }

  deinit { staging.deallocate() }

  /// Starts a file; `content` is what its name tells. With `indexed`, the file is being
  /// written as a member whose header and data start there (`.indexed`): its chunks are only
  /// indexed. With `earlier` (`.chunks`, a file edited in place), its previous version's
  /// content and size: compared with where an archive holds it whole and uncut. (A version that
  /// cannot be read there is only not reused: the file's chunks are then stored.)
  func begin(
    content: ContentKind, indexed: (member: Int64, data: Int64)? = nil,
    earlier: (digest: Digest, size: Int64)? = nil
  ) {
    self.earlier = nil
    if let earlier, let earlierVersion {
      self.earlier = try? earlierVersion(earlier.digest, earlier.size)
    }
    self.indexed = indexed
    position = 0
    length = 0
    list = []
    self.content = content
    atFileStart = true
    _ = hasher.finalize()
  }

  /// The file's next bytes; with `cut` ≥ 0, the current chunk ends after `cut` of them.
  func feed(_ data: UnsafeRawBufferPointer, cut: Int) throws {
    if cut < 0 {
      append(data)
      return
    }
    append(UnsafeRawBufferPointer(rebasing: data[0..<cut]))
    try endChunk()
    append(UnsafeRawBufferPointer(rebasing: data[cut...]))
  }

  private func append(_ piece: UnsafeRawBufferPointer) {
    guard !piece.isEmpty else { return }
    if atFileStart {
      atFileStart = false
      if content == .unknown { content = ContentKind.of(leadingBytes: piece) }
    }
    precondition(length + piece.count <= staging.count, "a chunk is longer than the longest")
    hasher.update(piece)
    if indexed == nil {
      (staging.baseAddress! + length).copyMemory(from: piece.baseAddress!, byteCount: piece.count)
    }
    length += piece.count
  }

  /// Ends the file: returns its chunk list.
  func end() throws -> ChunkList {
    if length > 0 { try endChunk() }
    return ChunkList(chunks: list)
  }

  private func endChunk() throws {
    let digest = hasher.finalize()
    let size = Int64(length)
    list.append((digest, size))
    defer {
      position += size
      length = 0
    }
    guard !storedHere.contains(digest), !(try catalog.hasChunk(digest)) else { return }
    if indexed == nil, let earlier,
      let location = earlier.location(
        of: UnsafeRawBufferPointer(rebasing: staging[0..<length]), digest: digest, at: position)
    {
      storedHere.insert(digest)
      foreignLocations.append(location)
      return
    }
    if let indexed {
      // At its place in the member being written.
      record(
        ChunkLocation(
          digest: digest, archive: archiveName, offset: indexed.member, dataOffset: indexed.data + position,
          size: size))
    } else {
      let offset = writer.uncompressedOffset
      try writer.writeHeader(
        metadataMember(ChunkList.memberPath(digest), size: length, time: time),
        content: content == .incompressible ? .incompressible : .compressible)
      let dataOffset = writer.uncompressedOffset
      try writer.writeData(UnsafeRawBufferPointer(rebasing: staging[0..<length]))
      try writer.finishEntry()
      bytesWritten += size
      record(
        ChunkLocation(
          digest: digest, archive: archiveName, offset: offset, dataOffset: dataOffset, size: size))
    }
  }

  private func record(_ location: ChunkLocation) {
    storedHere.insert(location.digest)
    locations.append(location)
  }
}
