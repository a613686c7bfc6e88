// Reading manifests as they are read, never whole: a full backup of a million files has a
// manifest of some 150 MB, and sync, `check` and `check --rebuild-catalog` read every one.
//
// Where the bytes come from:
// - a manifest object (`manifests/<archive>`): the store's positional reader, or this device's
//   copy in the cache directory (a shared or encrypted repository keeps one, fetched in pieces
//   when missing), opened segment by segment when sealed (OpeningReader); its header (the
//   archive's record) is read first, then the manifest;
// - an archive file's manifest member (a layout 1 rebuild, or a local archive standing in for
//   a damaged manifest object): libarchive's reads of the member's data.
// Either way `ManifestDecoder` hands each record to a `ManifestConsumer` as it is parsed, and
// verifies the trailing checksum last. What stores records (`CatalogIngest`) does so inside a
// savepoint that the decoder's error rolls back, so a damaged manifest leaves nothing behind.

import AppboxArchive
import AppboxCore
import AppboxCrypto
import AppboxStore
import Foundation
import Glibc

extension Repository {
  // MARK: Manifest objects

  /// Reads manifest object `name` (`size` stored bytes, as listed; looked up when nil): returns
  /// its archive's record, and hands its manifest's records to `consumer`. With `fromCache`,
  /// from this device's copy when the repository keeps them (see `manifestObjectReader`).
  @discardableResult
  func readManifestObject(
    _ name: String, size: Int64? = nil, fromCache: Bool, into consumer: some ManifestConsumer
  ) throws -> ArchiveRecord {
    let input = RecordReader(try manifestObjectReader(name, size: size, fromCache: fromCache))
    let record = try ManifestObject.readRecord(input, name: name)
    try ManifestDecoder.decode(input, archive: name, into: consumer)
    return record
  }

  /// Whether manifest objects are read from this device's cache directory (a shared or
  /// encrypted repository keeps copies there, so a rebuild needs no download).
  var cachesManifests: Bool { (store.isShared || isEncrypted) && cacheDirectory != nil }

  /// The plaintext of manifest object `name`, by positional reads: the store's, or with
  /// `fromCache` (when `cachesManifests`) this device's copy, fetched first if there is none.
  func manifestObjectReader(_ name: String, size: Int64?, fromCache: Bool) throws -> ObjectReader {
    let objectName = "manifests/" + name
    let stored: ObjectReader
    if fromCache, cachesManifests, let cacheDirectory {
      let path = cacheDirectory + "/objects/" + objectName
      if !FileManager.default.fileExists(atPath: path) { try cacheObject(objectName, size: size, at: path) }
      let descriptor = try FileDescriptor.open(path, O_RDONLY | O_CLOEXEC)
      do {
        stored = LocalReader(descriptor: descriptor, size: try descriptor.status().size, path: path)
      } catch {
        descriptor.close()
        throw error
      }
    } else {
      guard let size = try size ?? store.size(of: objectName) else { throw missingManifest(name) }
      stored = try store.reader(objectName, size: size)
    }
    guard let key else { return stored }
    return try OpeningReader(stored, name: objectName, key: key, location: store.location + "/" + objectName)
  }

  /// Fetches the manifest objects among `objects` that this device has no copy of yet (before a
  /// catalog transaction, so that no download happens inside it). A damaged or vanished object
  /// is left for the reading to report.
  func cacheManifestObjects(_ objects: [StoredObject]) throws {
    guard store.isShared, cachesManifests, let cacheDirectory else { return }
    for object in objects {
      let path = cacheDirectory + "/objects/manifests/" + object.name
      guard !FileManager.default.fileExists(atPath: path) else { continue }
      do {
        try cacheObject("manifests/" + object.name, size: object.size, at: path)
      } catch  where Repository.isDamage(error) {
        continue
      }
    }
  }

  /// Copies object `name` as the store holds it (sealed when encrypted) to `path`, in pieces.
  private func cacheObject(_ name: String, size: Int64?, at path: String) throws {
    guard let size = try size ?? store.size(of: name) else {
      throw missingManifest(String(name.dropFirst("manifests/".count)))
    }
    let reader = try store.reader(name, size: size)
    let (directory, file) = splitPath(path)
    try Repository.makeDirectories(directory)
    let handle = try OwnedFileDescriptor.open(directory, O_RDONLY | O_DIRECTORY)
    let staged = try StagedFile(file, in: handle.borrowed, mode: 0o600)
    let output = staged.descriptor
    do {
      try reader.forEachChunk { try output.writeAll($0) }
    } catch let error as any AppboxFailure where error.kind == .notFound {
      // Listed a moment ago, gone now (a `forget` elsewhere): as if it were missing.
      throw RepositoryError(
        .corruptArchive, "The manifest object of archive '\(file)' is missing", cause: error)
    }
    try staged.commit(durable: false)
  }

  private func missingManifest(_ name: String) -> RepositoryError {
    RepositoryError(.corruptArchive, "The manifest object of archive '\(name)' is missing")
  }

  /// The snapshot row archive `name`'s manifest object carries (the whole object is read and
  /// verified, and nothing else kept).
  func manifestSnapshot(_ name: String) throws -> Snapshot? {
    let summary = ManifestSummary()
    try readManifestObject(name, fromCache: cachesManifests, into: summary)
    return summary.snapshot
  }

  // MARK: Ingesting

  /// Adds archive `object`'s row and what its manifest records to the catalog, as the manifest
  /// object is read, in a savepoint of the caller's transaction (rolled back if the object
  /// turns out damaged). Returns the record and the snapshot row the manifest carries.
  func ingestManifestObject(_ object: StoredObject) throws -> (record: ArchiveRecord, snapshot: Snapshot?) {
    try catalog.database.inTransaction {
      let ingest = CatalogIngest(catalog, archive: object.name)
      let record = try readManifestObject(
        object.name, size: object.size, fromCache: cachesManifests, into: ingest)
      try ingest.finish()
      try catalog.insert(record, ignoringExisting: true)
      return (record, ingest.snapshot)
    }
  }

  /// The same from the local archive file `path` (archive `name`), whose manifest member
  /// carries the same bytes as its manifest object.
  func ingestArchiveManifest(_ path: String, name: String) throws -> (
    record: ArchiveRecord, snapshot: Snapshot?
  ) {
    let member = try Repository.locateManifest(path, name: name)
    return try catalog.database.inTransaction {
      let ingest = CatalogIngest(catalog, archive: name)
      try Repository.readManifest(member, path: path, into: ingest)
      try ingest.finish()
      try catalog.insert(member.record, ignoringExisting: true)
      return (member.record, ingest.snapshot)
    }
  }

  /// Whether `error`, met while reading a manifest into the catalog, says the manifest is
  /// damaged (and not the catalog: a failing database is not a damaged object).
  static func isManifestDamage(_ error: any Error) -> Bool {
    isDamage(error) && !(error is StoreError)
  }

  // MARK: Archive files

  /// Where an archive file keeps its manifest.
  struct ManifestMember {
    /// The archive's size, CRC-32C and compression; `created` is the time of the snapshot its
    /// manifest names (read from the manifest's first records), else the file's mtime.
    var record: ArchiveRecord
    /// Where the member's header starts (uncompressed offset), to read it again at once.
    var headerOffset: Int64
    /// Its number among the members (from 1), to find it again in a compressed archive.
    var number: Int
  }

  /// Reads archive file `path` (archive `name`) once for its size and CRC-32C, then its headers
  /// for its manifest: the last `.appbox/manifest` member (the archive's own is written last; an
  /// app's file of that name would come before it).
  static func locateManifest(_ path: String, name: String) throws -> ManifestMember {
    let compression: ArchiveCompression =
      name.hasSuffix(".tar.gz") ? .gzip : name.hasSuffix(".tar.zst") ? .zstd : .none
    let fd = try FileDescriptor.open(path, O_RDONLY)
    defer { fd.close() }
    var checksum = CRC32C()
    let size = try checksum.update(readingFrom: fd)
    try fd.seek(to: 0)
    let reader = try ArchiveReader(fileDescriptor: fd.rawValue, name: path)
    var found: (headerOffset: Int64, number: Int, snapshot: Snapshot?)?
    while let entry = try reader.nextEntry() {
      guard entry.path == Manifest.memberPath && entry.type == .regular else { continue }
      let head = try? ManifestDecoder.readHead(RecordReader(reader, size: entry.size), archive: name)
      found = (reader.headerOffset ?? 0, reader.memberCount, head?.snapshot)
    }
    guard let found else { throw RepositoryError(.corruptArchive, "it has no appbox manifest") }
    var st = stat()
    let created =
      found.snapshot?.time
      ?? (stat(path, &st) == 0 ? Date(timeIntervalSince1970: Double(st.st_mtim.tv_sec)) : Date())
    let record = ArchiveRecord(
      name: name, size: Int64(size), checksum: checksum.value, compression: compression, created: created)
    return ManifestMember(record: record, headerOffset: found.headerOffset, number: found.number)
  }

  /// Reads the manifest member `member` found in archive file `path`, handing its records to
  /// `consumer`: an uncompressed archive from the member's header on, a compressed one from its
  /// start (headers only) to that member.
  static func readManifest(_ member: ManifestMember, path: String, into consumer: some ManifestConsumer)
    throws
  {
    let fd = try FileDescriptor.open(path, O_RDONLY)
    defer { fd.close() }
    let compressed = member.record.compression != .none
    let reader =
      compressed
      ? try ArchiveReader(fileDescriptor: fd.rawValue, name: path)
      : try ArchiveReader(fileDescriptor: fd.rawValue, startingAt: member.headerOffset, name: path)
    while let entry = try reader.nextEntry() {
      guard !compressed || reader.memberCount == member.number else { continue }
      guard entry.path == Manifest.memberPath && entry.type == .regular else { break }
      try ManifestDecoder.decode(
        RecordReader(reader, size: entry.size), archive: member.record.name, into: consumer)
      return
    }
    throw RepositoryError(.corruptArchive, "its appbox manifest is no longer where it was")
  }
}

extension RecordReader {
  /// Records from the data of the member `reader` is at (`size` bytes).
  convenience init(_ reader: ArchiveReader, size: Int64) {
    self.init(size: size) { buffer in try reader.readData(into: buffer) }
  }
}
