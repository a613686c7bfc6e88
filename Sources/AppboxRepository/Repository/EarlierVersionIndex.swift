// A file's earlier version, where an earlier archive holds it: a large file seen changing in
// place whose previous version an archive holds whole and uncut (chunking is lazy: that version
// was never cut) is compared with it chunk by chunk, so the edit stores only the chunks it
// changed instead of the whole file. An edit in place leaves the bytes it did not touch at
// their offsets, so each chunk of the new version the repository lacks is compared with the
// earlier version's bytes at the same offset, read in place (an uncompressed or framed archive
// of a local unencrypted repository): when they are the same bytes, the chunk already lies
// there, and the new archive's manifest records that location as a foreign chunk (Manifest.swift,
// version 4) instead of writing the bytes again. Nothing of the earlier version is hashed: the
// new chunk's digest is of the same bytes.
//
// Invariants: a location is returned only for a range whose bytes were read there and compared
// equal to the chunk's, byte for byte (a damaged archive compares unequal, never gives a false
// location); nothing is offered for a version already cut (stored as chunks, or a whole member
// whose chunks are indexed), one the repository cannot read in place, or one below the
// chunking threshold. An edit that shifts bytes (an insertion) reuses only the chunks before it.
// Memory: one buffer of the longest chunk.

import AppboxArchive
import AppboxCrypto
import Foundation
import Glibc

/// The earlier version of a file, whole in an earlier archive, to compare new chunks with.
package final class EarlierVersion {
  private let source: ArchiveRangeReader
  private let decoder = FrameDecoder()
  /// Where the version lies: its member, whose data starts at `data`.
  private let blob: BlobLocation
  private let data: Int64
  private let buffer = UnsafeMutableRawBufferPointer.allocate(
    byteCount: ChunkingParameters.maximum, alignment: 64)

  init(source: ArchiveRangeReader, blob: BlobLocation, data: Int64) {
    self.source = source
    self.blob = blob
    self.data = data
  }

  deinit { buffer.deallocate() }

  /// Where the earlier version holds `bytes` (a chunk of digest `digest` at `position` of the
  /// new version) at the same position; nil when it does not, or cannot be read there.
  package func location(of bytes: UnsafeRawBufferPointer, digest: Digest, at position: Int64) -> ChunkLocation? {
    let count = bytes.count
    guard count > 0, count <= buffer.count, position >= 0, position + Int64(count) <= blob.size else {
      return nil
    }
    let old = UnsafeMutableRawBufferPointer(rebasing: buffer[0..<count])
    guard (try? source.read(into: old, at: data + position, decoder: decoder)) != nil,
      memcmp(old.baseAddress!, bytes.baseAddress!, count) == 0
    else { return nil }
    return ChunkLocation(
      digest: digest, archive: blob.archive, offset: blob.offset, dataOffset: data + position, size: Int64(count))
  }
}

extension Repository {
  /// Content `digest` (`size` bytes, a file's earlier version) where an earlier archive holds
  /// it whole, uncut, and readable in place; nil when there is nothing to compare with.
  package func earlierVersion(ofContent digest: Digest, size: Int64) throws -> EarlierVersion? {
    guard readsDirectly, size >= ChunkingParameters.threshold, let blob = try catalog.blob(digest),
      blob.size == size, let dataOffset = blob.dataOffset,
      !(try catalog.hasChunks(inMemberAt: blob.offset, of: blob.archive)),
      let record = try catalog.archive(named: blob.archive), let source = try rangeReader(record)
    else { return nil }
    return EarlierVersion(source: source, blob: blob, data: dataOffset)
  }
}
