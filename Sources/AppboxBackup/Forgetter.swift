// `forget`: drop an app's older snapshots and reclaim their space.
//
// Algorithm, holding the app's lock and the repository lock exclusively:
// 1. Drop all but the app's last N snapshots. What stays reachable is computed from every
//    remaining snapshot of every app (content is shared across snapshots and apps).
// 2. The dropped snapshots' archives will be deleted, and so will archives no snapshot owns
//    (written by an earlier forget) that no longer hold live content. Live content located in
//    an archive to delete is copied, verified against its digest on the way, into one new
//    archive, with a manifest carrying those blobs and the live trees first stored with the
//    deleted archives (so a catalog rebuilt from archives still has them). Live chunks (those
//    of live contents stored as chunks) in an archive to delete are copied the same way, as
//    chunk members, and their chunk lists go into the new manifest. Live trees stored as
//    deltas against a tree that is not live are written whole there too. The new archive
//    is fsynced and renamed into place before anything else changes.
// 3. One catalog transaction drops the snapshot rows, moves the blob, chunk, chunk-list and
//    tree locations (making the trees that move whole), deletes unreachable trees, blobs,
//    chunks and chunk lists and the deleted archives' rows, and adds the new one.
// 4. Only then are the old archive files deleted.
// Crash safety: before step 3 commits, the new archive is debris and nothing else changed;
// after it, the old files are debris. Both are removed by the next writer.

import AppboxArchive
import AppboxCore
import AppboxCrypto
import AppboxStore
import Foundation
import Glibc

/// What `forget` did.
public struct ForgetReport: Sendable {
  public var removed: [Snapshot] = []
  public var kept: [Snapshot] = []
  public var deletedArchives: [String] = []
  /// The archive live content was copied into, if any had to move.
  public var newArchive: String?
  /// Archive bytes deleted minus bytes written.
  public var bytesReclaimed: Int64 = 0
}

extension Repository {
  /// Keeps the last `keepLast` snapshots of `app` and drops the others.
  public func forget(app: String, keepLast: Int, observer: EngineObserver = SilentObserver()) throws
    -> ForgetReport
  {
    guard keepLast >= 1 else { throw BackupError(.invalidRequest, "--keep-last must be at least 1") }
    let appLock = try lockApp(app)
    let repositoryLock = try lockRepository(exclusive: true)
    defer { withExtendedLifetime((appLock, repositoryLock)) {} }
    try removeDebris()
    observer.engine(.started(operation: "forget", app: app))
    let history = try catalog.snapshots(app: app)
    var report = ForgetReport()
    report.removed = Array(history.dropLast(keepLast))
    report.kept = Array(history.suffix(keepLast))
    if report.removed.isEmpty { return report }

    let droppedIDs = Set(report.removed.map(\.id))
    let remaining = try catalog.snapshots().filter { !droppedIDs.contains($0.id) }
    var liveTrees: Set<Digest> = []
    var liveBlobs: Set<Digest> = []
    for snapshot in remaining { try reach(snapshot.rootTree, trees: &liveTrees, blobs: &liveBlobs) }

    let owned = Set(remaining.map(\.archive))
    let everOwned = Set(try catalog.snapshots().map(\.archive))
    let records = try catalog.archives()
    let allBlobs = try catalog.blobs()
    let liveByArchive = Dictionary(grouping: allBlobs.filter { liveBlobs.contains($0.digest) }, by: \.archive)
    let doomed = records.filter { record in
      !owned.contains(record.name)
        && (report.removed.contains { $0.archive == record.name }
          || !everOwned.contains(record.name)
            && liveByArchive[record.name] == nil)
    }
    let doomedNames = Set(doomed.map(\.name))
    let moving = doomed.flatMap { liveByArchive[$0.name] ?? [] }
    var movingTrees = try liveTrees.filter { digest in
      guard let archive = try treeArchive(digest) else { return false }
      return doomedNames.contains(archive)
    }
    movingTrees.formUnion(try catalog.deltasWithBaseOutside(liveTrees))
    let chunking = try liveChunks(of: liveBlobs, doomed: doomedNames)

    var newRecord: ArchiveRecord?
    var moved: [BlobLocation] = []
    var movedChunks: [ChunkLocation] = []
    if !moving.isEmpty || !movingTrees.isEmpty || !chunking.moving.isEmpty || !chunking.movingLists.isEmpty {
      let written = try writeRepack(
        moving: moving, trees: Array(movingTrees), chunks: chunking.moving, lists: chunking.movingLists)
      newRecord = written.record
      moved = written.blobs
      movedChunks = written.chunks
      report.newArchive = written.record.name
    }
    CrashPoint.hit("forget.repacked")
    try catalog.database.inTransaction {
      if let newRecord { try catalog.insert(newRecord) }
      for blob in moved {
        try catalog.database.execute(
          "UPDATE blobs SET archive = ?1, offset = ?2, data_offset = ?3 WHERE digest = ?4",
          .text(blob.archive),
          .integer(blob.offset), blob.dataOffset.map(SQLValue.integer) ?? .null,
          .blob(blob.digest.bytes))
      }
      for digest in movingTrees { try catalog.storeWhole(digest, archive: newRecord!.name) }
      try moveChunks(
        movedChunks, lists: chunking.movingLists, into: newRecord?.name, live: chunking, doomed: doomed)
      for snapshot in report.removed { try catalog.deleteSnapshot(id: snapshot.id) }
      for blob in allBlobs where !liveBlobs.contains(blob.digest) {
        try catalog.database.execute("DELETE FROM blobs WHERE digest = ?1", .blob(blob.digest.bytes))
      }
      for digest in try catalog.database.all("SELECT digest FROM trees", map: { $0.blob(0) }) {
        if let tree = Digest(validating: digest), !liveTrees.contains(tree) {
          try catalog.database.execute("DELETE FROM trees WHERE digest = ?1", .blob(digest))
        }
      }
      for record in doomed { try catalog.deleteArchive(named: record.name) }
    }
    CrashPoint.hit("forget.committed")
    let directory = try FileDescriptor.open(archivesPath, O_RDONLY | O_DIRECTORY)
    defer { directory.close() }
    for record in doomed {
      try? directory.remove(record.name)
      report.deletedArchives.append(record.name)
      report.bytesReclaimed += record.size
    }
    try directory.sync()
    report.bytesReclaimed -= newRecord?.size ?? 0
    observer.engine(.finished(operation: "forget", app: app))
    return report
  }

  private func treeArchive(_ digest: Digest) throws -> String? {
    guard
      case .text(let name)? = try catalog.database.scalar(
        "SELECT archive FROM trees WHERE digest = ?1", .blob(digest.bytes))
    else { return nil }
    return name
  }

  /// Adds every tree and non-empty content reachable from `root`.
  func reach(_ root: Digest, trees: inout Set<Digest>, blobs: inout Set<Digest>) throws {
    var stack = [root]
    while let digest = stack.popLast() {
      guard trees.insert(digest).inserted else { continue }
      for entry in try catalog.tree(digest).entries where !entry.isExcluded {
        if entry.type == .directory, let child = entry.digest { stack.append(child) }
        if entry.type == .file, entry.size > 0, let content = entry.digest { blobs.insert(content) }
      }
    }
  }

  /// Copies `moving` and `chunks` (and the trees' data and the chunk lists) into a new
  /// archive, verifying each blob's and chunk's digest. Trees are written whole.
  private func writeRepack(
    moving: [BlobLocation], trees: [Digest], chunks: [ChunkLocation],
    lists: [(digest: Digest, list: ChunkList)]
  ) throws -> (record: ArchiveRecord, blobs: [BlobLocation], chunks: [ChunkLocation]) {
    let name = try newSnapshotID() + ArchiveCompression.none.fileSuffix
    let archives = try OwnedFileDescriptor.open(archivesPath, O_RDONLY | O_DIRECTORY)
    let staged = try StagedFile(
      name, in: archives.borrowed, temporaryName: Repository.temporaryPrefix + name, mode: 0o600)
    let file = staged.descriptor
    nonisolated(unsafe) var checksum = CRC32C()
    nonisolated(unsafe) var size: Int64 = 0
    let writer = try ArchiveWriter(
      fileDescriptor: file.rawValue, compression: .none, name: archivePath(name),
      outputObserver: { block in
        checksum.update(block)
        size += Int64(block.count)
      })
    var copied: [BlobLocation] = []
    let hasher = SHA256Hasher()
    let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16)
    defer { buffer.deallocate() }
    for (archive, locations) in Dictionary(grouping: moving, by: \.archive) {
      let source = try FileDescriptor.open(archivePath(archive), O_RDONLY)
      defer { source.close() }
      let reader = try ArchiveReader(fileDescriptor: source.rawValue, name: archivePath(archive))
      var wanted = Dictionary(locations.map { ($0.offset, $0) }, uniquingKeysWith: { first, _ in first })
      while !wanted.isEmpty, let entry = try reader.nextEntry() {
        guard let offset = reader.headerOffset, let location = wanted.removeValue(forKey: offset) else {
          continue
        }
        guard entry.type == .regular, entry.size == location.size, entry.path == location.path else {
          throw BackupError(
            .corruptArchive, "Archive '\(archive)' has no member '\(display(location.path))' at \(offset)")
        }
        let newOffset = writer.uncompressedOffset
        try writer.writeHeader(entry)
        let dataOffset = entry.sparseRegions == nil ? writer.uncompressedOffset : nil
        while true {
          let count = try reader.readData(into: buffer)
          if count == 0 { break }
          let chunk = UnsafeRawBufferPointer(rebasing: buffer[0..<count])
          hasher.update(chunk)
          try writer.writeData(chunk)
        }
        try writer.finishEntry()
        guard hasher.finalize() == location.digest else {
          throw BackupError(
            .corruptArchive,
            "Archive '\(archive)' is damaged: '\(display(location.path))' does not match its SHA-256")
        }
        copied.append(
          BlobLocation(
            digest: location.digest, archive: name, offset: newOffset, path: location.path,
            size: location.size, dataOffset: dataOffset))
      }
      if let missing = wanted.values.first {
        throw BackupError(.corruptArchive, "Archive '\(archive)' ends before '\(display(missing.path))'")
      }
    }
    let copiedChunks = try copyChunks(chunks, into: writer, archive: name)
    let treeData = try trees.map { digest -> StoredTree in
      guard let data = try catalog.treeData(digest) else {
        throw BackupError(.corruptCatalog, "Catalog is missing tree \(digest.hex.prefix(16))")
      }
      return StoredTree(digest: digest, data: data)
    }
    let manifest = Manifest(
      snapshot: nil, trees: treeData, blobs: copied, chunks: copiedChunks, chunkLists: lists
    ).encoded()
    try writer.writeHeader(metadataMember(Manifest.memberPath, size: manifest.count, time: Date()))
    try writer.writeData(manifest)
    try writer.finishEntry()
    try writer.finish()
    try staged.commit(flags: .noReplace)
    let record = ArchiveRecord(
      name: name, size: size, checksum: checksum.value, compression: .none, created: Date())
    return (record, copied, copiedChunks)
  }
}
