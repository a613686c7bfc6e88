// `forget` and chunks: which chunks stay alive, copying the live ones out of archives that go,
// and the catalog rows that follow (see Forgetter.swift for the whole algorithm).
//
// A chunk is live when a live content stored as chunks lists it; a chunk list is live when its
// content is. Live chunks in an archive to delete are copied into the repack archive as chunk
// members (`.appbox/chunks/<hex>`), read in place at their data offset (chunks live only in
// uncompressed and framed archives) and verified against their digest; the others in such an archive are
// dropped with it. Chunk rows pointing into archives that stay are kept: those bytes stay too,
// and the next edit of a file may reuse them. A live chunk that a doomed archive's manifest
// recorded inside an archive that stays (a foreign chunk: Manifest.swift, version 4) is not
// copied: the repack archive's manifest records it instead, so that a catalog rebuilt from
// the manifests still finds it.

import AppboxArchive
import AppboxCore
import AppboxCrypto
import AppboxStore
import Foundation
import Glibc

/// The chunks and chunk lists that outlive a `forget`, and those that must move.
struct LiveChunks {
  var digests: Set<Digest> = []
  var lists: Set<Digest> = []
  /// Live chunks in archives about to be deleted.
  var moving: [ChunkLocation] = []
  /// Live chunk lists carried by the manifests of archives about to be deleted.
  var movingLists: [(digest: Digest, list: ChunkList)] = []
  /// Live chunks in archives that stay, recorded by manifests of archives about to be deleted.
  var redeclared: [ChunkLocation] = []
}

extension Repository {
  /// The chunks and chunk lists of the live contents `contents`, given the archives to delete.
  func liveChunks(of contents: Set<Digest>, doomed: Set<String>) throws -> LiveChunks {
    var live = LiveChunks()
    for (digest, list, archive) in try catalog.chunkLists() where contents.contains(digest) {
      live.lists.insert(digest)
      for chunk in list.chunks { live.digests.insert(chunk.digest) }
      if doomed.contains(archive) { live.movingLists.append((digest, list)) }
    }
    if live.digests.isEmpty { return live }
    live.moving = try catalog.chunks().filter {
      doomed.contains($0.archive) && live.digests.contains($0.digest)
    }
    live.redeclared = try catalog.chunks(declaredBy: doomed).filter {
      !doomed.contains($0.archive) && live.digests.contains($0.digest)
    }
    return live
  }

  /// Writes `chunks` as chunk members of the archive being written, each read at its data
  /// offset and checked against its digest. Returns their new locations.
  func copyChunks(_ chunks: [ChunkLocation], into writer: ArchiveWriter, archive name: String) throws
    -> [ChunkLocation]
  {
    guard !chunks.isEmpty else { return [] }
    var copied: [ChunkLocation] = []
    var buffer = [UInt8](repeating: 0, count: ChunkingParameters.largestStored)
    let decoder = FrameDecoder()
    for (archive, locations) in Dictionary(grouping: chunks, by: \.archive) {
      guard let source = try rangeReader(try archiveRecord(archive)) else {
        throw RepositoryError(
          .corruptCatalog, "Archive '\(archive)' holds chunks but cannot be read in place")
      }
      for location in locations.sorted(by: { $0.dataOffset < $1.dataOffset }) {
        guard location.size > 0, location.size <= Int64(buffer.count) else {
          throw RepositoryError(.corruptCatalog, "A chunk of archive '\(archive)' has a bad size")
        }
        let count = Int(location.size)
        let data = try buffer.withUnsafeMutableBytes { raw -> UnsafeRawBufferPointer in
          let slice = UnsafeMutableRawBufferPointer(rebasing: raw[0..<count])
          try source.read(into: slice, at: location.dataOffset, decoder: decoder)
          return UnsafeRawBufferPointer(slice)
        }
        guard SHA256.hash(data) == location.digest else {
          throw RepositoryError(
            .corruptArchive,
            "Archive '\(archive)' is damaged: chunk \(location.digest.hex.prefix(16)) does not match its SHA-256"
          )
        }
        let offset = writer.uncompressedOffset
        try writer.writeHeader(
          metadataMember(ChunkList.memberPath(location.digest), size: count, time: Date()))
        let dataOffset = writer.uncompressedOffset
        try writer.writeData(data)
        try writer.finishEntry()
        copied.append(
          ChunkLocation(
            digest: location.digest, archive: name, offset: offset, dataOffset: dataOffset,
            size: location.size))
      }
    }
    return copied
  }

  /// In forget's transaction: moves the copied chunks, the carried chunk lists and the
  /// records of the redeclared chunks to archive `name`, and drops the chunk rows of the
  /// deleted archives (held or recorded by them) and the lists no live content has.
  func moveChunks(
    _ moved: [ChunkLocation], lists: [(digest: Digest, list: ChunkList)], into name: String?,
    live: LiveChunks,
    doomed: [ArchiveRecord]
  ) throws {
    for chunk in moved {
      try catalog.database.execute(
        "UPDATE chunks SET archive = ?1, offset = ?2, data_offset = ?3, declared = NULL WHERE digest = ?4",
        .text(chunk.archive),
        .integer(chunk.offset), .integer(chunk.dataOffset), .blob(chunk.digest.bytes))
    }
    if let name {
      for chunk in live.redeclared {
        try catalog.database.execute(
          "UPDATE chunks SET declared = ?1 WHERE digest = ?2", .text(name), .blob(chunk.digest.bytes))
      }
      for list in lists {
        try catalog.database.execute(
          "UPDATE chunk_lists SET archive = ?1 WHERE digest = ?2", .text(name), .blob(list.digest.bytes))
      }
    }
    for record in doomed {
      try catalog.database.execute(
        "DELETE FROM chunks WHERE archive = ?1 OR declared = ?1", .text(record.name))
    }
    for (digest, _, _) in try catalog.chunkLists() where !live.lists.contains(digest) {
      try catalog.database.execute("DELETE FROM chunk_lists WHERE digest = ?1", .blob(digest.bytes))
    }
  }
}
