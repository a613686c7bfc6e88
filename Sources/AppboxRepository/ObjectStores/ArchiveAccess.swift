// How the engines reach archive bytes, whatever the store and whether sealed: the one door
// for writing an archive (`stageArchive`, an ArchiveOutput whose commit makes it durable and
// visible) and for reading one (`openArchive`, an ArchiveReader from the start or from a
// member's plaintext offset; the CRC-32C of the stored bytes). Unsealed local archives keep the
// direct path the engine always had: a file descriptor, seeks by lseek.
//
// Uncompressed and framed archives can be entered at any member (a framed one through its frame
// index: FramedArchiveInput decodes from the frame holding the member on), and in a local
// unencrypted repository their uncompressed ranges can be read in place (`ArchiveRangeReader`:
// pread, through the frames when framed). Archives compressed as one stream (gzip, and zstd
// written before frames) are read from their start.

import AppboxArchive
import AppboxCore
import Foundation
import Glibc

/// A new archive being written: hand `output` to an `ArchiveWriter`, then `commit`.
/// Released without a commit (an error), it is abandoned: nothing becomes visible.
package final class StagedArchive {
  let name: String
  package let output: ArchiveOutput
  private let stored: ChecksummingUpload
  private let top: ObjectUpload
  private var committed = false

  init(name: String, stored: ChecksummingUpload, top: ObjectUpload) {
    self.name = name
    self.stored = stored
    self.top = top
    output = UploadArchiveOutput(top)
  }

  deinit { if !committed { top.abort() } }

  /// Makes the archive durable and visible; returns the stored size and CRC-32C.
  package func commit(beforeVisible: () -> Void = {}) throws -> (size: Int64, checksum: UInt32) {
    committed = true
    do {
      try top.commit(beforeVisible: beforeVisible)
    } catch {
      top.abort()
      throw error
    }
    return (stored.size, stored.checksum.value)
  }
}

/// An archive to read.
package final class ArchiveSource {
  let record: ArchiveRecord
  /// Its path or URL, for messages.
  package let location: String
  private let repository: Repository

  init(record: ArchiveRecord, repository: Repository) {
    self.record = record
    self.repository = repository
    location = repository.archivePath(record.name)
  }

  /// A reader of the archive's members from the beginning, or, for an uncompressed or framed
  /// archive, from the member whose header starts at `offset` (plaintext, uncompressed offset).
  /// With `verifyingFrames`, a framed archive's every frame is decoded and checked against its
  /// index, skipped data included (what `check` wants).
  package func reader(startingAt offset: Int64? = nil, verifyingFrames: Bool = false) throws -> ArchiveReader
  {
    if let frames = try repository.frameIndex(of: record) {
      let input = try FramedArchiveInput(
        try framedArchive(frames), from: offset ?? 0, verifying: verifyingFrames)
      return try ArchiveReader(input: input, startingAt: offset ?? 0, name: location)
    }
    if let local = repository.local, !repository.isEncrypted {
      let file = try openLocal(local)
      return try ArchiveReader(
        takingDescriptor: file.rawValue, startingAt: record.compression == .none ? offset : nil,
        name: location)
    }
    let plain = try plaintext()
    if let offset, record.compression == .none {
      return try ArchiveReader(
        input: ObjectArchiveInput(plain, from: offset), startingAt: offset, name: location)
    }
    return try ArchiveReader(input: ObjectArchiveInput(plain, from: 0), name: location)
  }

  /// The framed archive with index `frames`, read from the local file or the store.
  private func framedArchive(_ frames: FrameIndex) throws -> FramedArchive {
    if let local = repository.local, !repository.isEncrypted {
      let file = ArchiveFile(try openLocal(local))
      return FramedArchive(index: frames, name: location, storedSize: record.size) { buffer, offset in
        try file.descriptor.readAll(into: buffer, at: offset)
      }
    }
    let plain = try plaintext()
    return FramedArchive(index: frames, name: location, storedSize: plain.size) { buffer, offset in
      try plain.read(at: offset, into: buffer)
    }
  }

  /// Positional reads of the archive's plaintext (the stored bytes, opened when sealed).
  func plaintext() throws -> ObjectReader {
    let stored = try repository.store.reader("archives/" + record.name, size: record.size)
    guard let key = repository.key else { return stored }
    return try OpeningReader(stored, name: "archives/" + record.name, key: key, location: location)
  }

  private func openLocal(_ local: LocalObjectStore) throws -> FileDescriptor {
    do {
      return try FileDescriptor.open(local.path("archives/" + record.name), O_RDONLY | O_CLOEXEC)
    } catch let error as SystemError where error.errno == .noEntry {
      throw RepositoryError(.corruptArchive, "Archive '\(location)' is missing")
    }
  }

  /// Reads the stored bytes whole and compares their size and CRC-32C with the record.
  package func verifyChecksum() throws {
    var checksum = CRC32C()
    var size: Int64 = 0
    let stored = try repository.store.reader("archives/" + record.name, size: record.size)
    try stored.forEachChunk { chunk in
      checksum.update(chunk)
      size += Int64(chunk.count)
    }
    guard size == record.size, checksum.value == record.checksum else {
      throw RepositoryError(
        .corruptArchive, "Archive '\(location)' is damaged: its CRC-32C does not match the catalog")
    }
  }
}

/// A descriptor closed when the last reader lets it go.
final class ArchiveFile: @unchecked Sendable {
  let descriptor: FileDescriptor
  init(_ descriptor: FileDescriptor) { self.descriptor = descriptor }
  deinit { descriptor.close() }
}

/// Uncompressed ranges of one archive of a local unencrypted repository, read in place: pread
/// for an uncompressed archive, through the frame index for a framed one. Shared by threads;
/// each passes its own `FrameDecoder`.
package final class ArchiveRangeReader: @unchecked Sendable {
  package let location: String
  private let file: ArchiveFile
  private let framed: FramedArchive?

  /// Opens archive `record` at `path`, whose layout is `frames` (nil: uncompressed).
  package init(path: String, record: ArchiveRecord, frames: FrameIndex?) throws {
    location = path
    do {
      file = ArchiveFile(try FileDescriptor.open(path, O_RDONLY | O_CLOEXEC))
    } catch let error as SystemError where error.errno == .noEntry {
      throw RepositoryError(.corruptArchive, "Archive '\(path)' is missing")
    }
    let file = self.file
    framed = frames.map { frames in
      FramedArchive(index: frames, name: path, storedSize: record.size) { buffer, offset in
        try file.descriptor.readAll(into: buffer, at: offset)
      }
    }
    _ = posix_fadvise(file.descriptor.rawValue, 0, 0, POSIX_FADV_SEQUENTIAL)
  }

  package var isFramed: Bool { framed != nil }

  /// The frame index of a framed archive.
  package var frames: FrameIndex? { framed?.index }

  /// Fills `buffer` with the uncompressed bytes at `offset`; `decoder` is the calling thread's
  /// (framed archives). A range the archive does not hold is `.corruptArchive` (65).
  package func read(into buffer: UnsafeMutableRawBufferPointer, at offset: Int64, decoder: FrameDecoder)
    throws
  {
    guard let framed else {
      let count = try file.descriptor.readAll(into: buffer, at: offset)
      guard count == buffer.count else {
        throw RepositoryError(.corruptArchive, "Archive '\(location)' ends inside a member it should hold")
      }
      return
    }
    do {
      try decoder.read(framed, into: buffer, at: offset)
    } catch let error as ArchiveError where error.kind == .badData {
      throw RepositoryError(.corruptArchive, "Archive '\(location)' is damaged: \(error.message)")
    }
  }
}

extension Repository {
  /// The frame index of archive `record` when it is framed (a zstd archive whose manifest
  /// carried one); nil for any other.
  package func frameIndex(of record: ArchiveRecord) throws -> FrameIndex? {
    record.compression == .zstd ? try catalog.frameIndex(of: record.name) : nil
  }

  /// Whether `record`'s uncompressed bytes can be read in place here: a local unencrypted
  /// repository, and an uncompressed or framed archive.
  package func readsInPlace(_ record: ArchiveRecord) throws -> Bool {
    guard readsDirectly else { return false }
    return try record.compression == .none || frameIndex(of: record) != nil
  }

  /// A reader of `record`'s uncompressed ranges in place; nil when `readsInPlace` is false.
  package func rangeReader(_ record: ArchiveRecord) throws -> ArchiveRangeReader? {
    guard readsDirectly else { return nil }
    let frames = try frameIndex(of: record)
    guard record.compression == .none || frames != nil else { return nil }
    return try ArchiveRangeReader(path: archivePath(record.name), record: record, frames: frames)
  }

  /// Starts writing archive `name`: sealed when the repository is encrypted, staged so that
  /// nothing is visible before the commit.
  package func stageArchive(_ name: String) throws -> StagedArchive {
    let stored = ChecksummingUpload(try store.upload("archives/" + name))
    guard let key else { return StagedArchive(name: name, stored: stored, top: stored) }
    return StagedArchive(
      name: name, stored: stored,
      top: PipelinedUpload(try SealingUpload(stored, name: "archives/" + name, key: key)))
  }

  /// An archive of the catalog, to read.
  package func openArchive(_ record: ArchiveRecord) -> ArchiveSource {
    ArchiveSource(record: record, repository: self)
  }

  /// The catalog's record of archive `name`; `.corruptCatalog` when it has none.
  package func archiveRecord(_ name: String) throws -> ArchiveRecord {
    guard let record = try catalog.archive(named: name) else {
      throw RepositoryError(.corruptCatalog, "The catalog does not know archive '\(name)'")
    }
    return record
  }
}
