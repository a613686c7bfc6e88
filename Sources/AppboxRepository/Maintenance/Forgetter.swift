// `forget`: drop an app's older snapshots and reclaim their space.
//
// Algorithm, holding the app's lock and the repository lock exclusively (S3: the prune lock):
// 1. Drop all but the app's last N snapshots. What stays reachable is computed from every
//    remaining snapshot of every app (content is shared across snapshots, apps and devices).
// 2. The dropped snapshots' archives will go, and so will archives no snapshot owns (written by
//    an earlier forget, or left by a killed one) of which a quarter or more is dead: no live
//    blob, chunk or tree is located in those bytes. Live content located in an archive
//    that goes is copied, verified against its digest on the way, into one new archive, with a
//    manifest carrying those blobs and the live trees first stored with the archives that go
//    (so a catalog rebuilt from the objects still has them). Live chunks (those of live
//    contents stored as chunks, local unencrypted repositories only) in an archive that goes
//    are copied the same way, as chunk members, and their chunk lists go into the new
//    manifest. Live trees stored as deltas against a tree that is not live are written whole
//    there too. The new archive is framed zstd (compressed per content, read in place like
//    the archives it replaces: an uncompressed repack would undo the compression of what it
//    copies), and it and its manifest object are committed before anything else changes.
// 3. The dropped snapshots' objects are deleted (from now on they are gone everywhere).
// 4. Local repository (no other writer can run: they hold the repository lock shared): the
//    manifest objects of the archives that go are deleted, one catalog transaction drops the
//    snapshot rows, moves blob, chunk, chunk-list and tree locations (making the trees that
//    move whole), deletes unreachable rows and the archives' rows; then the archive files are
//    deleted.
//    S3 repository (backups on other devices run at any time, without a lock): the archives
//    that go are only marked, `garbage/<name>`, and the catalog's locations move to the new
//    copies. Then the sweep: marks older than the grace period (`APPBOX_PRUNE_GRACE` seconds,
//    default 3600) are looked at again against the snapshots that exist now; an archive some
//    snapshot needs after all (a backup that had started before the mark and relied on its
//    content) is unmarked, the others are deleted with their manifest and snapshot objects.
//    Debris of killed writers (archives without a manifest, snapshot objects whose archive
//    was never committed, uploads abandoned for a day) is marked and swept the same way.
// Why a grace period, and why an hour: a backup decides what to reuse when it starts (its
// catalog sync) and commits at the end; an archive marked after it started must not be
// deleted before it commits, and once committed the sweep sees the snapshot and keeps what it
// uses. Marks are timed by the store's clock, so devices' clocks do not matter. A backup that
// runs for more than half the grace period checks again, just before it commits, that nothing
// it reuses has been marked since (BackupEngine.swift), and starts over if something has: so
// the hour needs to cover only the few seconds of a commit, with a wide margin for stalls.
// Crash safety, at every system call (docs/crash-safety.md): the objects are the record and
// the catalog a cache of them. Before step 3, the new archive is an extra copy: no row locates
// content in it, so the next forget finds it dead and drops it. Deleting snapshot objects only
// makes content dead. A manifest object is deleted only once every live content of its
// archive has a copy in the new archive's manifest, so when the kill comes before the catalog
// transaction, the next sync rebuilds every table (chunks and chunk lists too) from the
// manifests that remain and so locates that content in the new copy. The archives left then
// have no manifest and no row: debris, removed by the next writer (local; debris removal
// never deletes an archive any row names) or marked and swept (S3). What a killed forget
// left unreclaimed (archives of snapshots it dropped) is unowned and mostly dead: the next
// forget takes it.

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
  /// S3: archives marked for deletion after the grace period.
  public var markedArchives: [String] = []
  /// S3: marked archives a snapshot turned out to need (kept, unmarked).
  public var keptMarkedArchives: [String] = []
  /// The archive live content was copied into, if any had to move.
  public var newArchive: String?
  /// Archive bytes deleted minus bytes written.
  public var bytesReclaimed: Int64 = 0
}

extension Repository {
  /// The grace period between marking an archive garbage and deleting it (S3).
  package var pruneGrace: TimeInterval { environment["APPBOX_PRUNE_GRACE"].flatMap(Double.init) ?? 3600 }

  /// Keeps the last `keepLast` snapshots of `app` and drops the others.
  public func forget(app: String, keepLast: Int, observer: EngineObserver = SilentObserver()) throws
    -> ForgetReport
  {
    guard keepLast >= 1 else { throw RepositoryError(.invalidRequest, "--keep-last must be at least 1") }
    return try forget(app: app, observer: observer) { history in
      (Array(history.dropLast(keepLast)), Array(history.suffix(keepLast)))
    }
  }

  /// Drops the snapshots of `app` that `choose` removes (given the app's snapshots in commit
  /// order, after the sync) and reclaims their space; a retention policy chooses this way.
  func forget(
    app: String, observer: EngineObserver,
    choosing choose: ([Snapshot]) -> (removed: [Snapshot], kept: [Snapshot])
  ) throws -> ForgetReport {
    let appLock = try lockApp(app)
    let repositoryLock = try lockRepository(exclusive: true, purpose: "forget")
    defer { withExtendedLifetime((appLock, repositoryLock)) {} }
    let pruneLock = repositoryLock as? PruneLock
    if local != nil {
      try upgradeLayout()
      try removeDebris()
    } else {
      try sync()
    }
    observer.engine(.started(operation: "forget", app: app))
    let history = try catalog.snapshots(app: app)
    var report = ForgetReport()
    (report.removed, report.kept) = choose(history)
    if !report.removed.isEmpty {
      try drop(&report, pruneLock: pruneLock)
    }
    if store.isShared {
      try pruneLock?.verify()
      try sweep(&report, pruneLock: pruneLock)
    }
    observer.engine(.finished(operation: "forget", app: app))
    return report
  }

  /// Steps 1 to 4 (see the top of this file).
  private func drop(_ report: inout ForgetReport, pruneLock: PruneLock?) throws {
    let droppedIDs = Set(report.removed.map(\.id))
    let remaining = try catalog.snapshots().filter { !droppedIDs.contains($0.id) }
    var liveTrees: Set<Digest> = []
    var liveBlobs: Set<Digest> = []
    for snapshot in remaining { try reach(snapshot.rootTree, trees: &liveTrees, blobs: &liveBlobs) }

    let owned = Set(remaining.map(\.archive))
    let retired = Set(try retiredArchiveNames())
    let records = try catalog.archives().filter { !retired.contains($0.name) }
    let allBlobs = try catalog.blobs()
    let liveByArchive = Dictionary(grouping: allBlobs.filter { liveBlobs.contains($0.digest) }, by: \.archive)
    let live = try liveBytes(
      blobs: liveByArchive, chunks: try liveChunks(of: liveBlobs, doomed: []).digests, trees: liveTrees)
    let dropped = Set(report.removed.map(\.archive))
    let doomed = try records.filter { record in
      guard !owned.contains(record.name) else { return false }
      if dropped.contains(record.name) { return true }
      let content = try frameIndex(of: record)?.uncompressedEnd ?? record.size
      return Self.isMostlyDead(liveBytes: live[record.name] ?? 0, of: content)
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
    if !moving.isEmpty || !movingTrees.isEmpty || !chunking.moving.isEmpty || !chunking.movingLists.isEmpty
      || !chunking.redeclared.isEmpty
    {
      try pruneLock?.verify()
      let written = try writeRepack(
        moving: moving, trees: Array(movingTrees), chunks: chunking.moving, lists: chunking.movingLists,
        redeclared: chunking.redeclared)
      newRecord = written.record
      moved = written.blobs
      movedChunks = written.chunks
      report.newArchive = written.record.name
    }
    CrashPoint.hit("forget.repacked")
    try pruneLock?.verify()
    try store.delete(report.removed.map { "snapshots/" + $0.id })
    CrashPoint.hit("forget.snapshots-deleted")
    if store.isShared {
      for record in doomed { try store.put("garbage/" + record.name, []) }
      report.markedArchives = doomed.map(\.name)
    } else {
      try store.delete(doomed.map { "manifests/" + $0.name })
    }
    let now = store.now
    try catalog.database.inTransaction {
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
      if store.isShared {
        // The archives stay until the sweep: only marked, so backups stop reusing them.
        for record in doomed {
          try catalog.database.execute(
            "UPDATE archives SET retired = ?1 WHERE name = ?2", .real(now.timeIntervalSince1970),
            .text(record.name))
        }
        return
      }
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
    if !store.isShared {
      try store.delete(doomed.map { "archives/" + $0.name })
      report.deletedArchives = doomed.map(\.name)
      report.bytesReclaimed += doomed.reduce(0) { $0 + $1.size }
    }
    report.bytesReclaimed -= newRecord?.size ?? 0
  }

  /// The S3 sweep: deletes what was marked at least the grace period ago and is still not
  /// needed, and marks the debris of killed writers (see the top of this file).
  private func sweep(_ report: inout ForgetReport, pruneLock: PruneLock?) throws {
    let manifests = try store.list("manifests")
    let archives = try store.list("archives")
    let snapshotObjects = try store.list("snapshots")
    var marks = try store.list("garbage")
    let now = store.now
    let committed = Set(manifests.map(\.name))
    let marked = Set(marks.map(\.name))
    // Debris: archives never committed, and snapshot objects whose archive was not.
    var newMarks: [String] = []
    for archive in archives where !committed.contains(archive.name) && !marked.contains(archive.name) {
      newMarks.append(archive.name)
    }
    let archiveIDs = Set(archives.map { Repository.archiveID($0.name) })
    let committedIDs = Set(manifests.map { Repository.archiveID($0.name) })
    for object in snapshotObjects
    where !committedIDs.contains(object.name) && !archiveIDs.contains(object.name) {
      let name = object.name + ArchiveCompression.none.fileSuffix
      if !marked.contains(name) { newMarks.append(name) }
    }
    for name in newMarks { try store.put("garbage/" + name, []) }
    if let s3 = store as? S3ObjectStore {
      for upload in try s3.abandonedUploads(before: now.addingTimeInterval(-max(pruneGrace, 86400))) {
        try s3.abortUpload(key: upload.key, uploadID: upload.uploadID)
      }
    }
    // A grace of 0 (tests, or a store no backup can be writing to) makes every mark due.
    let due = marks.filter { pruneGrace <= 0 || now.timeIntervalSince($0.modified) >= pruneGrace }
    marks.removeAll { mark in due.contains { $0.name == mark.name } }
    guard !due.isEmpty else { return }
    // A fresh view in which every content is located in an unmarked copy where one exists.
    try rebuildCache(
      manifests: manifests, snapshotObjects: snapshotObjects, marks: try store.list("garbage"))
    let live = try catalog.snapshots()
    var liveTrees: Set<Digest> = []
    var liveBlobs: Set<Digest> = []
    for snapshot in live { try reach(snapshot.rootTree, trees: &liveTrees, blobs: &liveBlobs) }
    // A live tree stored as a delta needs every tree down its chain, wherever those are.
    for digest in liveTrees {
      for link in try catalog.treeChain(digest).dropFirst() { liveTrees.insert(link.digest) }
    }
    let sizes = Dictionary(archives.map { ($0.name, $0.size) }, uniquingKeysWith: { first, _ in first })
    var deleted: [String] = []
    for mark in due {
      let name = mark.name
      let needed =
        try live.contains { $0.archive == name }
        || catalog.blobs(inArchive: name).contains { liveBlobs.contains($0.digest) }
        || catalog.database.all(
          "SELECT digest FROM trees WHERE archive = ?1", .text(name), map: { $0.blob(0) }
        )
        .contains { Digest(validating: $0).map { liveTrees.contains($0) } ?? false }
      try pruneLock?.verify()
      if needed {
        try store.delete(["garbage/" + name])
        report.keptMarkedArchives.append(name)
        continue
      }
      try store.delete([
        "manifests/" + name, "archives/" + name, "snapshots/" + Repository.archiveID(name),
      ])
      try store.delete(["garbage/" + name])
      deleted.append(name)
      report.bytesReclaimed += sizes[name] ?? 0
    }
    CrashPoint.hit("forget.swept")
    report.deletedArchives += deleted
    try sync()
  }

  /// Whether an archive no snapshot owns holds so little live content that copying it out is
  /// worth it: a quarter or more of its bytes are dead. (An archive every byte of which stays
  /// live, a repack's, is kept as it is; one left by a killed `forget`, or one whose content
  /// later snapshots dropped, goes once its dead part grows. So the space held by dead content
  /// stays below a third of the live content's.) Live bytes are uncompressed, so they are
  /// weighed against the archive's uncompressed content: a framed archive's frames.
  static func isMostlyDead(liveBytes: Int64, of size: Int64) -> Bool {
    liveBytes * 4 <= size * 3
  }

  /// Bytes of live content each archive holds: its live blobs, the live chunks outside those
  /// blobs' members, and its live trees.
  private func liveBytes(blobs: [String: [BlobLocation]], chunks: Set<Digest>, trees: Set<Digest>) throws
    -> [String: Int64]
  {
    var bytes: [String: Int64] = [:]
    var members: Set<String> = []
    for (archive, locations) in blobs {
      for location in locations {
        bytes[archive, default: 0] += location.size
        members.insert("\(archive) \(location.offset)")
      }
    }
    for chunk in try catalog.chunks() where chunks.contains(chunk.digest) {
      if !members.contains("\(chunk.archive) \(chunk.offset)") {
        bytes[chunk.archive, default: 0] += chunk.size
      }
    }
    let rows = try catalog.database.all("SELECT digest, archive, length(data) FROM trees") {
      (Digest(validating: $0.blob(0)), $0.text(1) ?? "", $0.int64(2))
    }
    for (digest, archive, size) in rows where digest.map(trees.contains) ?? false {
      bytes[archive, default: 0] += size
    }
    return bytes
  }

  private func retiredArchiveNames() throws -> [String] {
    try catalog.database.all("SELECT name FROM archives WHERE retired IS NOT NULL") { $0.text(0) ?? "" }
  }

  private func treeArchive(_ digest: Digest) throws -> String? {
    guard
      case .text(let name)? = try catalog.database.scalar(
        "SELECT archive FROM trees WHERE digest = ?1", .blob(digest.bytes))
    else { return nil }
    return name
  }

  /// The SHA-256 of every byte of the member at `location` (holes read as zeros).
  private func plainDigest(
    of location: BlobLocation, in archive: String, buffer: UnsafeMutableRawBufferPointer
  )
    throws -> Digest?
  {
    let reader = try openArchive(try archiveRecord(archive)).reader(startingAt: location.offset)
    guard try reader.nextEntry() != nil, reader.headerOffset == location.offset else { return nil }
    let hasher = SHA256Hasher()
    while true {
      let count = try reader.readData(into: buffer)
      if count == 0 { break }
      hasher.update(UnsafeRawBufferPointer(rebasing: buffer[0..<count]))
    }
    return hasher.finalize()
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
  /// archive, verifying each blob's and chunk's digest, and commits it (archive, then manifest
  /// object). Trees are written whole. Its manifest records `redeclared` (live chunks in
  /// archives that stay, recorded by manifests that go) as foreign chunks.
  private func writeRepack(
    moving: [BlobLocation], trees: [Digest], chunks: [ChunkLocation],
    lists: [(digest: Digest, list: ChunkList)], redeclared: [ChunkLocation]
  ) throws -> (record: ArchiveRecord, blobs: [BlobLocation], chunks: [ChunkLocation]) {
    let name = try newSnapshotID() + ArchiveCompression.zstd.fileSuffix
    let staged = try stageArchive(name)
    let writer = try ArchiveWriter(
      output: staged.output, compression: .zstd, name: archivePath(name), framing: .standard)
    var copied: [BlobLocation] = []
    let hasher = SHA256Hasher()
    let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16)
    defer { buffer.deallocate() }
    for (archive, locations) in Dictionary(grouping: moving, by: \.archive) {
      let reader = try openArchive(try archiveRecord(archive)).reader()
      var wanted = Dictionary(locations.map { ($0.offset, $0) }, uniquingKeysWith: { first, _ in first })
      while !wanted.isEmpty, let entry = try reader.nextEntry() {
        guard let offset = reader.headerOffset, let location = wanted.removeValue(forKey: offset) else {
          continue
        }
        guard entry.type == .regular, entry.size == location.size, entry.path == location.path else {
          throw RepositoryError(
            .corruptArchive, "Archive '\(archive)' has no member '\(display(location.path))' at \(offset)")
        }
        let newOffset = writer.uncompressedOffset
        try writer.writeHeader(entry)
        let dataOffset = entry.sparseRegions == nil ? writer.uncompressedOffset : nil
        // A sparse member is copied run by run (its holes are neither read nor hashed) and
        // checked against its sparse identity; one an older appbox wrote has a plain digest,
        // checked by reading the member once more (ContentIdentity.swift).
        let identity = ContentHasher(sparse: entry.sparseRegions != nil, size: entry.size, hasher: hasher)
        var position: Int64 = 0
        while let chunk = try reader.readChunk(into: buffer) {
          if chunk.offset > position { try writer.writeZeros(chunk.offset - position) }
          let data = UnsafeRawBufferPointer(rebasing: buffer[0..<chunk.count])
          identity.update(data, at: chunk.offset)
          try writer.writeData(data)
          position = chunk.offset + Int64(chunk.count)
        }
        if entry.size > position { try writer.writeZeros(entry.size - position) }
        try writer.finishEntry()
        var matches = identity.finalize() == location.digest
        if !matches && identity.isSparse {
          matches = try plainDigest(of: location, in: archive, buffer: buffer) == location.digest
        }
        guard matches else {
          throw RepositoryError(
            .corruptArchive,
            "Archive '\(archive)' is damaged: '\(display(location.path))' does not match its SHA-256")
        }
        copied.append(
          BlobLocation(
            digest: location.digest, archive: name, offset: newOffset, path: location.path,
            size: location.size, dataOffset: dataOffset))
      }
      if let missing = wanted.values.first {
        throw RepositoryError(.corruptArchive, "Archive '\(archive)' ends before '\(display(missing.path))'")
      }
    }
    let copiedChunks = try copyChunks(chunks, into: writer, archive: name)
    let treeData = try trees.map { digest -> StoredTree in
      guard let data = try catalog.treeData(digest) else {
        throw RepositoryError(.corruptCatalog, "Catalog is missing tree \(digest.hex.prefix(16))")
      }
      return StoredTree(digest: digest, data: data)
    }
    // The manifest starts a frame: the index it carries covers everything before it.
    try writer.endFrame()
    let frames = writer.frameIndex ?? FrameIndex()
    let manifest = Manifest(
      snapshot: nil, trees: treeData, blobs: copied, chunks: copiedChunks, chunkLists: lists,
      foreignChunks: redeclared, frames: frames)
    let encoded = manifest.encoded()
    try writer.writeHeader(metadataMember(Manifest.memberPath, size: encoded.count, time: Date()))
    try writer.writeData(encoded)
    try writer.finishEntry()
    try writer.finish()
    let stored = try staged.commit()
    let record = ArchiveRecord(
      name: name, size: stored.size, checksum: stored.checksum, compression: .zstd, created: Date())
    // The new archive is committed before anything refers to it: its manifest object, and the
    // catalog row (the locations move in forget's own transaction).
    try putObject("manifests/" + name, ManifestObject(record: record, manifestBytes: encoded).encoded())
    try catalog.database.inTransaction {
      try catalog.insert(record, ignoringExisting: true)
      try catalog.insertFrames(frames, archive: name)
      for tree in treeData { try catalog.insertTree(tree, archive: name) }
    }
    return (record, copied, copiedChunks)
  }
}
