// Cutting a file's earlier version where it lies: a large file seen changing in place whose
// previous version an earlier archive holds whole (chunking is lazy: that version was never
// cut) is cut again from that archive, so the edit stores only the chunks it changed instead
// of the whole file. The backup reads the earlier version once, in place (an uncompressed or
// framed archive of a local unencrypted repository), finds the same cuts the new version gets
// (`Chunker` from the file's first byte) and hashes each chunk. The chunks the new version
// shares become foreign chunk records of the new archive's manifest (Manifest.swift,
// version 4): locations inside the earlier archive's member.
//
// Invariants: a location is returned only for bytes read at it that hash to its digest (a
// damaged archive yields chunks no new version matches, never a false location); nothing is
// returned for a version already cut (stored as chunks, or a whole member whose chunks are
// indexed), one the repository cannot read in place, or one below the chunking threshold.
// Memory: one read buffer and one hash state.

import AppboxArchive
import AppboxCrypto
import Foundation

extension Repository {
  /// The chunks of content `digest` (`size` bytes, its earlier version) where an earlier
  /// archive holds it whole and unindexed, by digest; empty when there is nothing to index.
  package func chunkIndex(ofContent digest: Digest, size: Int64) throws -> [Digest: ChunkLocation] {
    guard readsDirectly, size >= ChunkingParameters.threshold, let blob = try catalog.blob(digest),
      blob.size == size, let dataOffset = blob.dataOffset,
      !(try catalog.hasChunks(inMemberAt: blob.offset, of: blob.archive)),
      let record = try catalog.archive(named: blob.archive), let source = try rangeReader(record)
    else { return [:] }
    let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 64)
    defer { buffer.deallocate() }
    let decoder = FrameDecoder()
    let hasher = SHA256Hasher()
    var chunker = Chunker()
    var found: [Digest: ChunkLocation] = [:]
    var chunkStart: Int64 = 0
    var position: Int64 = 0
    func endChunk() {
      let chunk = hasher.finalize()
      if found[chunk] == nil {
        found[chunk] = ChunkLocation(
          digest: chunk, archive: blob.archive, offset: blob.offset, dataOffset: dataOffset + chunkStart,
          size: position - chunkStart)
      }
      chunkStart = position
    }
    while position < size {
      let count = Int(min(Int64(buffer.count), size - position))
      let piece = UnsafeMutableRawBufferPointer(rebasing: buffer[0..<count])
      try source.read(into: piece, at: dataOffset + position, decoder: decoder)
      var rest = UnsafeRawBufferPointer(piece)
      while !rest.isEmpty {
        let (taken, boundary) = chunker.consume(rest)
        hasher.update(UnsafeRawBufferPointer(rebasing: rest[0..<taken]))
        position += Int64(taken)
        if boundary { endChunk() }
        rest = UnsafeRawBufferPointer(rebasing: rest[taken...])
      }
    }
    if position > chunkStart { endChunk() }
    return found
  }
}
