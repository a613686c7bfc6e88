// Stage 3b of a backup: write new and changed content into the snapshot's tar archive.
//
// Algorithm: the plan lists, in depth-first name order, every item the archive needs: the
// directories and symlinks that are new or changed (all of them for a full backup) and the
// regular files change detection could not vouch for. The content reader (its own thread)
// reads and hashes files and hands them over in that order; this stage, on the calling
// thread, writes members: a directory, symlink or file header with mode, mtime (ns), owner
// ids and `user.*` xattrs (pax SCHILY), then the file's data.
//
// Large files stream through a ChunkWriter as well (see StreamMode): their chunks are indexed,
// or only the new ones are written, as `.appbox/chunks/<hex>` members.
//
// Invariants: a blob location is recorded only for a member whose data is exactly the bytes
// that were hashed, and for the last attempt of a file read more than once; a file stored as
// chunks gets a chunk list (for its last attempt) instead of a blob; an incremental archive
// skips a small file whose digest the repository (or this archive) already holds; empty
// files get a member but never a blob; a later path of an inode already written here becomes
// a hard-link member to the first path; every buffer received is freed.

import AppboxArchive
import AppboxCore
import AppboxCrypto
import Foundation
import Glibc

/// One thing the archive needs, in member order.
enum ArchiveItem {
  case directory(Int)
  case file(directory: Int, entry: Int)
  case symlink(directory: Int, entry: Int)
}

/// The scanned directories and the items to archive.
struct ArchivePlan: @unchecked Sendable {
  var directories: [ScannedDirectory]
  var items: [ArchiveItem] = []
  /// Regular files to read, and their total size.
  var fileCount = 0
  var fileBytes: Int64 = 0
  /// The item index of each `.file` item, by `directory << 32 | entry`.
  var fileItems: [Int: Int] = [:]
  /// For files whose stat matched the previous snapshot but was too recent to trust: the
  /// content digest recorded then, by item index.
  var probableDigests: [Int: Digest] = [:]

  /// Lists what the archive needs: everything with `full`, else only new and changed items.
  init(directories: [ScannedDirectory], full: Bool) {
    self.directories = directories
    var stack = [0]
    while let index = stack.popLast() {
      let directory = directories[index]
      if index != 0 && (full || !directory.isUnchanged) && !directory.isExcluded {
        items.append(.directory(index))
      }
      var children: [Int] = []
      for (position, entry) in directory.entries.enumerated() {
        switch entry.type {
        case .directory:
          if let child = entry.child { children.append(child) }
        case .file where !entry.isReused:
          if entry.isRacy, let previous = entry.previous {
            probableDigests[items.count] = directory.previousData.withUnsafeBytes { old in
              (try? TreeCursor.entry(at: previous.range, in: old))?.digest(in: old)
            }
          }
          fileItems[index << 32 | position] = items.count
          items.append(.file(directory: index, entry: position))
          fileCount += 1
          fileBytes += entry.status.size
        case .symlink where !entry.isReused:
          items.append(.symlink(directory: index, entry: position))
        default:
          break
        }
      }
      stack.append(contentsOf: children.reversed())
    }
  }
}

/// What archiving learned about one changed file.
struct FileResult {
  var status: EntryStatus
  var attributes: [ExtendedAttribute]
  var isExcluded: Bool
  var digest: Digest?
  /// Gone by the time it was opened: the file is left out of the snapshot.
  var vanished: Bool
}

/// Writes the plan's items into an archive as the content reader delivers them.
final class Archiver {
  private let plan: ArchivePlan
  private let writer: ArchiveWriter
  private let catalog: Catalog?
  private let archiveName: String
  private let deduplicate: Bool
  private let observer: EngineObserver
  private let pool: BufferPool

  /// Results of `.file` items, by item index (nil for other items).
  private(set) var results: [FileResult?]
  /// Blobs whose content this archive holds, in archive order (compact: a full backup has
  /// one per file; paths are looked up when the locations are made). `dataOffset` is -1 for a
  /// sparse member (its data is not contiguous).
  private var stored: [(digest: Digest, offset: Int64, dataOffset: Int64, size: Int64, item: Int32)] = []
  /// Cuts large files into chunks; nil when the archive is not chunked (no catalog).
  private let chunkWriter: ChunkWriter?
  /// Chunk lists of the contents stored as chunks, by content digest.
  private(set) var chunkLists: [Digest: ChunkList] = [:]
  /// Digests stored here, for deduplication (incremental archives only).
  private var storedDigests: Set<Digest> = []
  private(set) var bytesAdded: Int64 = 0
  private(set) var warnings: [(path: String, message: String)] = []
  /// Files that could not be read (left out of the snapshot, which is then incomplete).
  private(set) var unreadable: [UnreadableEntry] = []
  private(set) var unreadableCount = 0
  /// Files that kept changing while they were read (the snapshot holds a torn copy, and is
  /// incomplete): the first paths, and how many.
  private(set) var torn: [[UInt8]] = []
  private(set) var tornCount = 0
  /// By item index: whether its content was written here (for hard links to it).
  private var writtenItems: [Bool]
  private var filesDone = 0
  private var bytesDone: Int64 = 0
  /// For content the reader left unhashed (it hashes while this thread keeps up).
  private let hasher = SHA256Hasher()

  init(
    plan: ArchivePlan, writer: ArchiveWriter, catalog: Catalog?, archiveName: String, deduplicate: Bool,
    pool: BufferPool, observer: EngineObserver, time: Date = Date()
  ) {
    chunkWriter = catalog.map {
      ChunkWriter(writer: writer, catalog: $0, archiveName: archiveName, time: time)
    }
    self.pool = pool
    self.plan = plan
    self.writer = writer
    self.catalog = catalog
    self.archiveName = archiveName
    self.deduplicate = deduplicate
    self.observer = observer
    results = [FileResult?](repeating: nil, count: plan.items.count)
    writtenItems = [Bool](repeating: false, count: plan.items.count)
  }

  private func addBlob(_ digest: Digest, offset: Int64, dataOffset: Int64?, item: Int, size: Int64) {
    guard size > 0 else { return }
    if deduplicate && !storedDigests.insert(digest).inserted { return }
    stored.append((digest, offset, dataOffset ?? -1, size, Int32(item)))
  }

  /// The locations of the content this archive holds, in archive order.
  func blobLocations() -> [BlobLocation] {
    stored.map {
      BlobLocation(
        digest: $0.digest, archive: archiveName, offset: $0.offset, path: path(of: Int($0.item)),
        size: $0.size, dataOffset: $0.dataOffset < 0 ? nil : $0.dataOffset)
    }
  }

  /// The chunks first stored in this archive.
  var chunkLocations: [ChunkLocation] { chunkWriter?.locations ?? [] }

  /// The last directory whose path was built: items come grouped by directory.
  private var pathCache: (index: Int, path: [UInt8]) = (0, [])

  /// The path of directory `index`: from the cache, or its parent's cached path plus its
  /// name (depth-first order makes that the common case, so a deep chain costs no walk per
  /// level), or built from its ancestors.
  private func directoryPath(_ index: Int) -> [UInt8] {
    if pathCache.index == index { return pathCache.path }
    let directory = plan.directories[index]
    if directory.parent >= 0 && pathCache.index == directory.parent {
      pathCache = (index, joinPath(pathCache.path, directory.name))
    } else {
      pathCache = (index, plan.directories.path(of: index))
    }
    return pathCache.path
  }

  private func path(of item: Int) -> [UInt8] {
    switch plan.items[item] {
    case .directory(let index): return directoryPath(index)
    case .file(let directory, let entry), .symlink(let directory, let entry):
      let scanned = plan.directories[directory]
      return joinPath(directoryPath(directory), scanned.name(of: scanned.entries[entry]))
    }
  }

  /// Consumes the queue until the reader closes it. On error, cancels the queue (freeing
  /// what is pending) and rethrows.
  func run(_ queue: HandoffQueue<ContentMessage>) throws {
    var current:
      (item: Int, offset: Int64, dataOffset: Int64?, file: OpenedFile, hashing: Bool, mode: StreamMode)?
    do {
      while let message = queue.pop() {
        switch message {
        case .passthrough(let item):
          try writePassthrough(item)
        case .whole(let item, let file, let buffer, let count, let digest, let stable):
          defer { pool.give(buffer) }
          let data = UnsafeRawBufferPointer(rebasing: buffer[0..<count])
          try writeWhole(item, file: file, data: data, digest: digest ?? digestOf(data))
          if !stable { warnUnstable(item) }
        case .begin(let item, let file, let archiverHashes, let requested):
          let mode = chunkWriter == nil ? .whole : requested
          let offset = writer.uncompressedOffset
          var dataOffset: Int64?
          if mode != .chunks {
            try writer.writeHeader(member(path(of: item), file: file))
            if file.dataRegions == nil { dataOffset = writer.uncompressedOffset }
          }
          if mode != .whole { chunkWriter?.begin(mode, memberOffset: offset, dataStart: dataOffset ?? 0) }
          current = (item, offset, dataOffset, file, archiverHashes, mode)
        case .chunk(let buffer, let count, let cut):
          defer { pool.give(buffer) }
          let data = UnsafeRawBufferPointer(rebasing: buffer[0..<count])
          if current?.mode != .chunks { try writer.writeData(data) }
          if current?.mode != .whole { try chunkWriter?.feed(data, cut: Int(cut)) }
          if current?.hashing == true { hasher.update(data) }
          bytesDone += Int64(count)
        case .hole(let count):
          try writer.writeZeros(count)
          if current?.hashing == true { ContentReader.hashZeros(count, into: hasher) }
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
            if short > 0 { ContentReader.hashZeros(short, into: hasher) }
            digest = hasher.finalize()
          }
          guard final, let started = current, let digest else { continue }
          let size = started.file.status.size
          if mode == .chunks {
            if let list, size > 0 { chunkLists[digest] = list }
          } else {
            bytesAdded += started.file.dataBytes
            addBlob(digest, offset: started.offset, dataOffset: started.dataOffset, item: item, size: size)
            writtenItems[item] = true
          }
          record(
            item,
            FileResult(
              status: started.file.status, attributes: started.file.attributes,
              isExcluded: false, digest: digest, vanished: false))
          if !stable { warnUnstable(item) }
          current = nil
        case .confirmed(let item, let file, let digest):
          bytesDone += file.status.size
          record(
            item,
            FileResult(
              status: file.status, attributes: file.attributes, isExcluded: false, digest: digest,
              vanished: false))
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
        case .hardlink(let item, let first):
          try writeHardlink(item, first: first)
        }
      }
    } catch {
      queue.cancel { message in
        switch message {
        case .whole(_, _, let buffer, _, _, _), .chunk(let buffer, _, _): pool.give(buffer)
        default: break
        }
      }
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

  private func record(_ item: Int, _ result: FileResult) {
    results[item] = result
    filesDone += 1
    if filesDone % 256 == 0 { observer.engine(.progress(files: filesDone, bytes: bytesDone)) }
  }

  private func warnUnstable(_ item: Int) {
    tornCount += 1
    if torn.count < Scanner.unreadableLimit { torn.append(path(of: item)) }
    warnings.append(
      (display(path(of: item)), "kept changing while it was read; the snapshot holds its last reading"))
  }

  private func writeWhole(_ item: Int, file: OpenedFile, data: UnsafeRawBufferPointer, digest: Digest) throws
  {
    bytesDone += Int64(data.count)
    defer {
      record(
        item,
        FileResult(
          status: file.status, attributes: file.attributes, isExcluded: false, digest: digest,
          vanished: false))
    }
    if data.count > 0 && deduplicate {
      if storedDigests.contains(digest) { return }
      if let catalog, try catalog.hasBlob(digest) { return }
    }
    let offset = writer.uncompressedOffset
    let path = path(of: item)
    try writer.writeHeader(member(path, file: file))
    let dataOffset = writer.uncompressedOffset
    try writer.writeData(data)
    try writer.finishEntry()
    writtenItems[item] = true
    bytesAdded += Int64(data.count)
    addBlob(digest, offset: offset, dataOffset: dataOffset, item: item, size: Int64(data.count))
  }

  private func writeHardlink(_ item: Int, first: Int) throws {
    guard var result = results[first] else { return }
    if result.vanished {
      record(item, result)
      return
    }
    // Same inode, so the same status; only the name differs.
    if case .file(let directory, let entry) = plan.items[item] {
      result.status = plan.directories[directory].entries[entry].status
    }
    record(item, result)
    guard writtenItems[first] else { return }
    var entry = member(path(of: item), file: OpenedFile(status: result.status, attributes: result.attributes))
    entry.type = .hardlink
    entry.size = 0
    entry.linkTarget = path(of: first)
    try writer.writeHeader(entry)
    try writer.finishEntry()
  }

  private func writePassthrough(_ item: Int) throws {
    switch plan.items[item] {
    case .directory(let index):
      let directory = plan.directories[index]
      guard let status = directory.status else { return }
      var entry = member(
        directoryPath(index), file: OpenedFile(status: EntryStatus(status), attributes: directory.attributes))
      entry.type = .directory
      entry.size = 0
      try writer.writeHeader(entry)
      try writer.finishEntry()
    case .symlink(let directory, let position):
      let scanned = plan.directories[directory].entries[position]
      var entry = member(path(of: item), file: OpenedFile(status: scanned.status, attributes: []))
      entry.type = .symlink
      entry.size = 0
      entry.linkTarget = scanned.linkTarget ?? []
      try writer.writeHeader(entry)
      try writer.finishEntry()
    case .file:
      break
    }
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
