// How the engines reach archive bytes, whatever the store and whether sealed: the one door
// for writing an archive (`stageArchive`, an ArchiveOutput whose commit makes it durable and
// visible) and for reading one (`openArchive`, an ArchiveReader from the start or from a
// member's plaintext offset; the CRC-32C of the stored bytes). Unsealed local archives keep the
// direct path the engine always had: a file descriptor, seeks by lseek.

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

  /// A reader of the archive's members from the beginning, or, for an uncompressed archive,
  /// from the member whose header starts at `offset` (plaintext, uncompressed offset).
  package func reader(startingAt offset: Int64? = nil) throws -> ArchiveReader {
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

extension Repository {
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
