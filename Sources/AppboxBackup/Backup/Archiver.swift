// Stage 3 of a backup: write new and changed content into the snapshot's tar archive.
//
// Algorithm: the content reader (its own thread) walks the scan in depth-first name order and
// hands over every item the archive needs: the directories and symlinks that are new or
// changed (all of them for a full backup) and the regular files change detection could not
// vouch for, read and (mostly) hashed. This stage, on the calling thread, writes members in
// that order: a directory, symlink or file header with mode, mtime (ns), owner ids and
// `user.*` xattrs (pax SCHILY), then the file's data. It records what it learned about each
// file in the file's directory, and when the reader says a directory's subtree is done, has
// its tree built (TreeBuilder): nothing is kept per file beyond its directory, and blob
// locations go to the manifest's spool as they are made.
//
// Large files seen changing stream through a ChunkWriter instead (see StreamMode): only their
// new chunks are written, as `.appbox/chunks/<hex>` members. A database seen for the first
// time is written whole and streams through it too, to have its chunks indexed in its member.
//
// Invariants: a blob location is recorded only for a member whose data is exactly the bytes
// that were hashed, and for the last attempt of a file read more than once; a file stored as
// chunks gets a chunk list (for its last attempt) instead of a blob; an incremental archive
// skips a small file whose digest the repository (or this archive) already holds; empty
// files get a member but never a blob; a later path of an inode already written here becomes
// a hard-link member to the first path; every buffer received is freed.

import AppboxArchive
import AppboxCore
import AppboxPipeline
import AppboxCrypto
import AppboxRepository
import Foundation
import Glibc

/// Writes the items the content reader delivers into an archive, in their order.
final class Archiver {
  private let writer: ArchiveWriter
  private let catalog: Catalog?
  private let archiveName: String
  private let deduplicate: Bool
  /// A full backup (or an export) stores every directory's member, not only changed ones.
  private let full: Bool
  private let observer: EngineObserver
  private let pool: BufferPool
  /// Where blob locations go, in archive order (nil: not recorded).
  private let blobs: BlobSink?
  /// Builds each directory's tree when its subtree is done (nil for an export).
  private let trees: TreeBuilder?

  /// Cuts large files into chunks; nil when the archive is not chunked (no catalog).
  private let chunkWriter: ChunkWriter?
  /// Chunk lists of the contents stored as chunks, by content digest.
  private(set) var chunkLists: [Digest: ChunkList] = [:]
  /// Digests stored here, for deduplication (incremental archives only).
  private var storedDigests: Set<Digest> = []
  /// Files with several links recorded so far, by inode: the path and result of the first,
  /// and whether its content went into this archive (later paths link to it).
  private var linked: [UInt64: (path: [UInt8], result: FileResult, written: Bool)] = [:]
  private(set) var bytesAdded: Int64 = 0
  private(set) var warnings: [(path: String, message: String)] = []
  /// Files that could not be read (left out of the snapshot, which is then incomplete).
  private(set) var unreadable: [UnreadableEntry] = []
  private(set) var unreadableCount = 0
  /// Files that kept changing while they were read (the snapshot holds a torn copy, and is
  /// incomplete): the first paths, and how many.
  private(set) var torn: [[UInt8]] = []
  private(set) var tornCount = 0
  /// Files stored (read, not vanished, not excluded) and symlinks written: an export's counts.
  private(set) var storedFiles = 0
  private(set) var storedSymlinks = 0
  /// The sizes of the files stored, holes included (what a snapshot's `bytes` counts).
  private(set) var storedBytes: Int64 = 0
  /// FIFOs and sockets met (an export leaves them out), by path.
  private(set) var specialFiles: [String] = []
  /// The phase the work is in once the scan has finished (the archive is written meanwhile,
  /// and the totals are known from then on).
  private let phaseAfterScan: Phase
  private var filesDone = 0
  /// The bytes of the files to read, once the scan has counted them.
  private var plannedBytes: Int64?
  /// What the archive is to hold, as far as it is known (a full disk says how much was
  /// wanted): the scan's count, or while it scans, what has been written so far.
  var neededBytes: Int64 { plannedBytes ?? bytesDone }
  private var bytesDone: Int64 = 0
  /// The directory whose items are arriving.
  private var path = DirectoryPath()
  /// For content the reader left unhashed (it hashes while this thread keeps up).
  private let hasher = SHA256Hasher()

  init(
    writer: ArchiveWriter, catalog: Catalog?, archiveName: String, deduplicate: Bool, full: Bool,
    pool: BufferPool, observer: EngineObserver, time: Date = Date(), blobs: BlobSink? = nil,
    trees: TreeBuilder? = nil, phaseAfterScan: Phase = .archiving,
    earlierVersion: ((Digest, Int64) throws -> EarlierVersion?)? = nil
  ) {
    self.phaseAfterScan = phaseAfterScan
    chunkWriter = catalog.map {
      ChunkWriter(
        writer: writer, catalog: $0, archiveName: archiveName, time: time, earlierVersion: earlierVersion)
    }
    self.pool = pool
    self.writer = writer
    self.catalog = catalog
    self.archiveName = archiveName
    self.deduplicate = deduplicate
    self.full = full
    self.observer = observer
    self.blobs = blobs
    self.trees = trees
  }

  private func addBlob(_ digest: Digest, offset: Int64, dataOffset: Int64?, item: ItemReference, size: Int64)
    throws
  {
    guard size > 0, let blobs else { return }
    if deduplicate && !storedDigests.insert(digest).inserted { return }
    try blobs.add(
      BlobLocation(
        digest: digest, archive: archiveName, offset: offset, path: path(of: item), size: size,
        dataOffset: dataOffset))
  }

  /// The chunks first stored in this archive.
  var chunkLocations: [ChunkLocation] { chunkWriter?.locations ?? [] }
  /// The chunks of earlier archives first recorded by this one.
  var foreignChunkLocations: [ChunkLocation] { chunkWriter?.foreignLocations ?? [] }

  private func path(of item: ItemReference) -> [UInt8] { path.path(of: item.name) }

  /// The previous snapshot's content and size of a file edited in place (the same inode at the
  /// same path, stored with a plain digest): what its chunks may be found in.
  private func earlierVersion(of item: ItemReference, file: OpenedFile) -> (digest: Digest, size: Int64)? {
    guard let previous = item.entry.previous, previous.type == .file, !previous.hasSparseIdentity,
      let content = item.directory.previousContent(of: item.entry), content.inode == file.status.inode
    else { return nil }
    return (content.digest, content.size)
  }

  /// Consumes the queue until the reader closes it. On error, cancels the queue (freeing
  /// what is pending) and rethrows.
  func run(_ queue: HandoffQueue<ContentMessage>) throws {
    var current:
      (
        item: ItemReference, offset: Int64, dataOffset: Int64?, file: OpenedFile, hashing: Bool,
        mode: StreamMode
      )?
    do {
      while let message = queue.pop() {
        switch message {
        case .directory(let directory):
          try begin(directory)
        case .endDirectory(let directory):
          try trees?.finish(directory)
        case .symlink(let item):
          try writeSymlink(item)
        case .totals(let entries, let files, let bytes):
          plannedBytes = bytes
          observer.engine(.planned(entries: entries, files: files, bytes: bytes))
          observer.engine(.phase(phaseAfterScan))
        case .whole(let item, let file, let buffer, let count, let digest, let stable):
          defer { pool.give(buffer) }
          let data = UnsafeRawBufferPointer(rebasing: buffer[0..<count])
          try writeWhole(item, file: file, data: data, digest: digest ?? digestOf(data))
          if !stable { warnUnstable(item) }
        case .begin(let item, let file, let archiverHashes, let requested):
          let mode = chunkWriter == nil ? .whole : requested
          // The reader asks for chunks (either mode) only of a file that is not sparse.
          precondition(mode == .whole || file.dataRegions == nil, "a sparse file streamed as chunks")
          let offset = writer.uncompressedOffset
          var dataOffset: Int64?
          if mode != .chunks {
            try writer.writeHeader(member(path(of: item), file: file))
            if file.dataRegions == nil { dataOffset = writer.uncompressedOffset }
          }
          if mode == .chunks {
            chunkWriter?.begin(
              content: ContentKind.of(path: path(of: item)), earlier: earlierVersion(of: item, file: file))
          }
          if mode == .indexed { chunkWriter?.begin(content: .unknown, indexed: (offset, dataOffset!)) }
          current = (item, offset, dataOffset, file, archiverHashes, mode)
        case .chunk(let buffer, let count, let cut):
          defer { pool.give(buffer) }
          let data = UnsafeRawBufferPointer(rebasing: buffer[0..<count])
          switch current?.mode {
          case .chunks: try chunkWriter?.feed(data, cut: Int(cut))
          case .indexed:
            try writer.writeData(data)
            try chunkWriter?.feed(data, cut: Int(cut))
          default: try writer.writeData(data)
          }
          if current?.hashing == true { hasher.update(data) }
          bytesDone += Int64(count)
        case .hole(let count):
          try writer.writeZeros(count)
          if current?.hashing == true { hashZeros(count, into: hasher) }
          bytesDone += count
        case .end(let item, let readerDigest, let short, let stable, let final):
          let mode = current?.mode ?? .whole
          if mode != .chunks {
            if short > 0 { try writer.finishEntryPaddingWithZeros() } else { try writer.finishEntry() }
          }
          var list: ChunkList?
          if mode != .whole, let chunkWriter {
            // The reader sends a chunked file's missing bytes as zeros: it is never short here.
            precondition(short == 0, "a chunked file ended short")
            list = try chunkWriter.end()
          }
          var digest = readerDigest
          if current?.hashing == true {
            if short > 0 { hashZeros(short, into: hasher) }
            digest = hasher.finalize()
          }
          guard final, let started = current, let digest else { continue }
          let size = started.file.status.size
          var written = false
          if mode == .chunks {
            if let list, size > 0 { chunkLists[digest] = list }
          } else {
            bytesAdded += started.file.dataBytes
            try addBlob(
              digest, offset: started.offset, dataOffset: started.dataOffset, item: item, size: size)
            written = true
          }
          record(
            item,
            FileResult(
              status: started.file.status, attributes: started.file.attributes,
              isExcluded: false, digest: digest, vanished: false,
              isSparseIdentity: started.file.hasSparseIdentity), written: written)
          if !stable { warnUnstable(item) }
          current = nil
        case .confirmed(let item, let file, let digest):
          bytesDone += file.status.size
          record(
            item,
            FileResult(
              status: file.status, attributes: file.attributes, isExcluded: false, digest: digest,
              vanished: false, isSparseIdentity: file.hasSparseIdentity))
        case .excluded(let item, let file):
          record(
            item,
            FileResult(
              status: file.status, attributes: file.attributes, isExcluded: true, digest: nil,
              vanished: false))
        case .unreadable(let item, let reason):
          unreadableCount += 1
          if unreadable.count < Scanner.unreadableLimit {
            unreadable.append(UnreadableEntry(path: path(of: item), reason: reason))
          }
          record(
            item,
            FileResult(
              status: .placeholder, attributes: [], isExcluded: false, digest: nil,
              vanished: true))
        case .vanished(let item, let reason):
          if let reason { warnings.append((display(path(of: item)), "not backed up: \(reason)")) }
          record(
            item,
            FileResult(
              status: .placeholder, attributes: [], isExcluded: false, digest: nil,
              vanished: true))
        case .hardlink(let item, let inode):
          try writeHardlink(item, inode: inode)
        }
      }
    } catch {
      queue.cancel { message in
        switch message {
        case .whole(_, _, let buffer, _, _, _), .chunk(let buffer, _, _): pool.give(buffer)
        default: break
        }
      }
      trees?.abandon()
      throw error
    }
    // Chunk members (of every attempt: they are stored) count as added bytes.
    bytesAdded += chunkWriter?.bytesWritten ?? 0
    observer.engine(.progress(files: filesDone, bytes: bytesDone))
  }

  private func digestOf(_ data: UnsafeRawBufferPointer) -> Digest {
    hasher.update(data)
    return hasher.finalize()
  }

  /// Records what archiving learned about `item`; `written`: its content is in this archive.
  private func record(_ item: ItemReference, _ result: FileResult, written: Bool = false) {
    item.directory.results[item.position] = result
    let status = item.entry.status
    if status.linkCount > 1 && linked[status.inode] == nil {
      linked[status.inode] = (path(of: item), result, written)
    }
    if !result.vanished && !result.isExcluded {
      storedFiles += 1
      if status.mode & UInt32(Glibc.S_IFMT) == UInt32(Glibc.S_IFREG) { storedBytes += result.status.size }
    }
    filesDone += 1
    if filesDone % 256 == 0 { observer.engine(.progress(files: filesDone, bytes: bytesDone)) }
  }

  private func warnUnstable(_ item: ItemReference) {
    tornCount += 1
    if torn.count < Scanner.unreadableLimit { torn.append(path(of: item)) }
    warnings.append(
      (display(path(of: item)), "kept changing while it was read; the snapshot holds its last reading"))
  }

  private func writeWhole(
    _ item: ItemReference, file: OpenedFile, data: UnsafeRawBufferPointer, digest: Digest
  ) throws {
    bytesDone += Int64(data.count)
    var written = false
    defer {
      record(
        item,
        FileResult(
          status: file.status, attributes: file.attributes, isExcluded: false, digest: digest,
          vanished: false), written: written)
    }
    if data.count > 0 && deduplicate {
      if storedDigests.contains(digest) { return }
      if let catalog, try catalog.hasBlob(digest) { return }
    }
    let offset = writer.uncompressedOffset
    try writer.writeHeader(member(path(of: item), file: file))
    let dataOffset = writer.uncompressedOffset
    try writer.writeData(data)
    try writer.finishEntry()
    written = true
    bytesAdded += Int64(data.count)
    try addBlob(digest, offset: offset, dataOffset: dataOffset, item: item, size: Int64(data.count))
  }

  private func writeHardlink(_ item: ItemReference, inode: UInt64) throws {
    guard let first = linked[inode] else { return }
    var result = first.result
    if result.vanished {
      record(item, result)
      return
    }
    // Same inode, so the same status; only the name differs.
    result.status = item.entry.status
    record(item, result)
    guard first.written else { return }
    var entry = member(path(of: item), file: OpenedFile(status: result.status, attributes: result.attributes))
    entry.type = .hardlink
    entry.size = 0
    entry.linkTarget = first.path
    try writer.writeHeader(entry)
    try writer.finishEntry()
  }

  /// A directory begins: its member, when the archive needs one (always in a full archive; in
  /// an incremental one, when it is new or changed).
  private func begin(_ directory: ScannedDirectory) throws {
    path.enter(directory)
    if !directory.isExcluded {
      for entry in directory.entries where entry.type == .fifo || entry.type == .socket {
        specialFiles.append(display(path.path(of: directory.name(of: entry))))
      }
    }
    guard directory.depth > 0, full || !directory.isUnchanged, !directory.isExcluded,
      let status = directory.status
    else { return }
    var entry = member(
      path.bytes, file: OpenedFile(status: EntryStatus(status), attributes: directory.attributes))
    entry.type = .directory
    entry.size = 0
    try writer.writeHeader(entry)
    try writer.finishEntry()
  }

  private func writeSymlink(_ item: ItemReference) throws {
    let scanned = item.entry
    var entry = member(path(of: item), file: OpenedFile(status: scanned.status, attributes: []))
    entry.type = .symlink
    entry.size = 0
    entry.linkTarget = scanned.linkTarget ?? []
    try writer.writeHeader(entry)
    try writer.finishEntry()
    storedSymlinks += 1
  }

  private func member(_ path: [UInt8], file: OpenedFile) -> ArchiveEntry {
    let status = file.status
    return ArchiveEntry(
      path: path, type: .regular, permissions: status.permissions, uid: status.uid, gid: status.gid,
      size: status.size,
      modificationTime: ArchiveTimestamp(
        seconds: status.modificationTime.seconds, nanoseconds: status.modificationTime.nanoseconds),
      extendedAttributes: file.attributes.map { ArchiveExtendedAttribute(name: $0.name, value: $0.value) },
      sparseRegions: file.dataRegions?.map {
        ArchiveDataRegion(offset: $0.lowerBound, length: Int64($0.count))
      })
  }
}
