// Reading one file's content out of the repository, by its digest, for `dump`, `mount` and
// anything else that serves a single file without building a tree.
//
// Algorithm: the content's location comes from the catalog:
// - a blob in an uncompressed or framed archive of a local unencrypted repository, whose data
//   offset is recorded and whose digest is the plain kind: its bytes read in place, in pieces
//   (`pread`, through the frames it lies in when framed: ArchiveRangeReader);
// - any other blob (compressed, encrypted or S3 archives, sparse members): the archive is read
//   through libarchive from the member's header (entered directly when uncompressed or framed,
//   from the start otherwise), the member checked to be the recorded path and size, and its data
//   passed on with the offsets the reader reports (a sparse member's holes are gaps);
// - a content stored as chunks (local unencrypted repositories only): each chunk read at its
//   location, in order.
// Every byte passed on is hashed with the kind of identity the tree recorded
// (ContentIdentity.swift); when the content is done the identity must equal the digest, else
// `.corruptArchive` (exit 65). Memory is one buffer, whatever the size.
//
// Invariants: the consumer sees pieces in increasing offset order, never overlapping, and
// nothing past `size`; what lies between pieces (and after the last, up to `size`) is zeros.
// A consumer writing to a stream that cannot be taken back (standard output) has written the
// bytes before the check fails: the error then says the output is not to be trusted.

import AppboxArchive
import AppboxCore
import AppboxCrypto
import Glibc

extension Repository {
  /// The bytes of `entry` (a regular file of a snapshot; `path` names it in messages), as
  /// pieces at offsets, verified against its digest once all are given.
  public func readContent(
    of entry: TreeEntry, path: [UInt8], _ body: (UnsafeRawBufferPointer, Int64) throws -> Void
  ) throws {
    guard entry.type == .file else {
      throw RepositoryError(.invalidRequest, "'\(display(path))' is not a regular file")
    }
    guard entry.size > 0 else { return }
    guard let digest = entry.digest else {
      throw RepositoryError(.notFound, "'\(display(path))' was excluded from backup: it has no content")
    }
    let hasher = ContentHasher(sparse: entry.hasSparseIdentity, size: entry.size)
    let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 4096)
    defer { buffer.deallocate() }
    let decoder = FrameDecoder()
    func give(_ data: UnsafeRawBufferPointer, at offset: Int64) throws {
      guard offset >= 0, offset + Int64(data.count) <= entry.size else {
        throw RepositoryError(
          .corruptArchive, "The stored content of '\(display(path))' is longer than recorded")
      }
      hasher.update(data, at: offset)
      try body(data, offset)
    }
    if let location = try catalog.blob(digest) {
      let record = try archiveRecord(location.archive)
      if let dataOffset = location.dataOffset, !entry.hasSparseIdentity, let ranges = try rangeReader(record)
      {
        try readRange(ranges, at: dataOffset, size: location.size, buffer: buffer, decoder: decoder) {
          data, offset in try give(data, at: offset)
        }
      } else {
        try readMember(location, record: record, buffer: buffer, give)
      }
    } else if let list = try catalog.chunkList(digest, size: entry.size) {
      guard readsDirectly else {
        throw RepositoryError(
          .corruptArchive,
          "'\(display(path))' is stored as chunks, which only a local unencrypted repository holds")
      }
      var position: Int64 = 0
      var readers: [String: ArchiveRangeReader] = [:]
      for chunk in list.chunks {
        guard let location = try catalog.chunk(chunk.digest), location.size == chunk.size else {
          throw RepositoryError(
            .corruptCatalog,
            "The catalog has no archive holding chunk \(chunk.digest.hex.prefix(16)) of '\(display(path))'")
        }
        if readers[location.archive] == nil {
          guard let reader = try rangeReader(try archiveRecord(location.archive)) else {
            throw RepositoryError(
              .corruptCatalog,
              "Archive '\(location.archive)' holds chunks of '\(display(path))' but cannot be read in place")
          }
          readers[location.archive] = reader
        }
        let start = position
        try readRange(
          readers[location.archive]!, at: location.dataOffset, size: chunk.size, buffer: buffer,
          decoder: decoder
        ) { data, offset in try give(data, at: start + offset) }
        position += chunk.size
      }
    } else {
      throw RepositoryError(
        .corruptCatalog, "The catalog has no archive holding the content of '\(display(path))'")
    }
    guard hasher.finalize() == digest else {
      throw RepositoryError(
        .corruptArchive,
        "The content of '\(display(path))' does not match its recorded SHA-256: an archive is damaged")
    }
  }

  /// The uncompressed bytes `at ..< at + size` of a local archive, read in place in
  /// buffer-sized pieces (offsets from `at`).
  private func readRange(
    _ archive: ArchiveRangeReader, at start: Int64, size: Int64, buffer: UnsafeMutableRawBufferPointer,
    decoder: FrameDecoder, _ body: (UnsafeRawBufferPointer, Int64) throws -> Void
  ) throws {
    var done: Int64 = 0
    while done < size {
      let want = Int(min(Int64(buffer.count), size - done))
      let piece = UnsafeMutableRawBufferPointer(rebasing: buffer[0..<want])
      try archive.read(into: piece, at: start + done, decoder: decoder)
      try body(UnsafeRawBufferPointer(piece), done)
      done += Int64(want)
    }
  }

  /// The data of the member at `location`, read through libarchive.
  private func readMember(
    _ location: BlobLocation, record: ArchiveRecord, buffer: UnsafeMutableRawBufferPointer,
    _ body: (UnsafeRawBufferPointer, Int64) throws -> Void
  ) throws {
    let source = openArchive(record)
    func damaged(_ what: String) -> RepositoryError {
      RepositoryError(.corruptArchive, "Archive '\(source.location)' is damaged: \(what)")
    }
    do {
      let reader = try source.reader(startingAt: location.offset)
      while let entry = try reader.nextEntry() {
        guard let offset = reader.headerOffset, offset >= location.offset else { continue }
        guard offset == location.offset else {
          throw damaged("no member starts at offset \(location.offset)")
        }
        guard entry.type == .regular, entry.path == location.path, entry.size == location.size else {
          throw damaged(
            "the member at offset \(offset) is not '\(display(location.path))' of \(location.size) bytes")
        }
        while let chunk = try reader.readChunk(into: buffer) {
          try body(UnsafeRawBufferPointer(rebasing: buffer[0..<chunk.count]), chunk.offset)
        }
        guard reader.deliveredLength == location.size else {
          throw damaged("the member '\(display(location.path))' is shorter than recorded")
        }
        if let warning = reader.warnings.first { throw damaged("libarchive warned: \(warning)") }
        return
      }
    } catch let error as ArchiveError {
      throw damaged(error.message)
    }
    throw damaged("it ends before the member '\(display(location.path))'")
  }
}
