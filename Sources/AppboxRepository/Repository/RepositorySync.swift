// Keeping the catalog in step with the repository's objects (layout 2), and committing.
//
// The objects are the record; the catalog is a cache of them (for a local unencrypted
// repository, a cache every user of the directory shares). Opening a repository syncs:
// 1. list `manifests/`, `snapshots/` and, on S3, `garbage/`;
// 2. an archive the catalog knows whose manifest object is gone was deleted (a `forget`
//    elsewhere), or newly marked for deletion: the catalog is rebuilt from the manifest
//    objects, which relocates every content to a copy that stays (archives not marked for
//    deletion first), so restores read from archives that are not about to go;
// 3. otherwise each new manifest object is read, in pieces, and its archive, trees, blobs and
//    chunks added as they are read (INSERT OR IGNORE: the first copy of a content stays its
//    location), each manifest in a savepoint its damage rolls back (ManifestReading.swift);
//    steps 3 to 5 are one transaction, and a remote object is fetched before it begins;
// 4. snapshot rows whose object is gone are dropped (forgotten); new snapshot objects whose
//    archive is committed are added, in the order of their commits by the store's clock;
// 5. `archives.retired` is set from the garbage marks, so backups stop reusing what `forget`
//    is about to delete.
// A damaged manifest or snapshot object is skipped and recorded, not thrown: it costs only the
// snapshots that need it (Repository/RepositoryDamage.swift).
// A remote repository's manifest and snapshot objects are kept in the cache directory too
// (`objects/`), so a rebuild needs no download. A backup commits by writing its snapshot
// object, then its manifest object (the commit point), then the catalog rows; a crash after
// the manifest object leaves a snapshot the next sync adds, one before leaves debris.

import AppboxArchive
import AppboxCore
import AppboxCrypto
import Foundation
import Glibc

extension Repository {
  // MARK: Small objects, sealed in an encrypted repository

  func putObject(_ name: String, _ bytes: [UInt8]) throws {
    try store.put(name, try sealed(name, bytes))
  }

  /// Writes `manifests/<archive>`: whole when it is small, else streamed (a manifest of a
  /// million files is some 150 MB, which must not be built in memory), sealed either way in an
  /// encrypted repository. The same bytes both ways.
  func putManifestObject(_ record: ArchiveRecord, _ manifest: some ManifestContent) throws {
    let name = "manifests/" + record.name
    let header = ManifestObject(record: record, manifestBytes: []).encoded()
    guard manifest.encodedSize > 4 << 20 else {
      var bytes = header
      bytes.reserveCapacity(header.count + manifest.encodedSize)
      try manifest.encode { bytes.append(contentsOf: $0) }
      try putObject(name, bytes)
      return
    }
    let stored = try store.upload(name)
    let upload: ObjectUpload = try key.map { try SealingUpload(stored, name: name, key: $0) } ?? stored
    do {
      try header.withUnsafeBytes { try upload.write($0) }
      try manifest.encode { try upload.write($0) }
      try upload.commit()
    } catch {
      upload.abort()
      throw error
    }
  }

  /// `bytes` as object `name` stores them: sealed in an encrypted repository.
  func sealed(_ name: String, _ bytes: [UInt8]) throws -> [UInt8] {
    try key.map { try ObjectSealing.seal(bytes, name: name, key: $0) } ?? bytes
  }

  /// A small object's plaintext (nil when missing), through the cache's copy when there is one.
  func getObject(_ name: String, cached: Bool = false) throws -> [UInt8]? {
    var stored: [UInt8]?
    let cachePath = cacheDirectory.map { $0 + "/objects/" + name }
    if cached, let cachePath, let bytes = FileManager.default.contents(atPath: cachePath) {
      stored = Array(bytes)
    } else {
      stored = try store.get(name)
      if cached, let cachePath, let stored { try saveCacheCopy(cachePath, stored) }
    }
    guard let stored else { return nil }
    guard let key else { return stored }
    return try ObjectSealing.open(stored, name: name, key: key, location: store.location + "/" + name)
  }

  private func saveCacheCopy(_ path: String, _ bytes: [UInt8]) throws {
    let directory = splitPath(path).directory
    try Repository.makeDirectories(directory)
    let handle = try OwnedFileDescriptor.open(directory, O_RDONLY | O_DIRECTORY)
    let staged = try StagedFile(splitPath(path).name, in: handle.borrowed, mode: 0o600)
    try staged.descriptor.writeAll(bytes)
    try staged.commit(durable: false)
  }

  func loadSnapshot(_ id: String) throws -> Snapshot? {
    guard let bytes = try getObject("snapshots/" + id, cached: store.isShared || isEncrypted) else {
      return nil
    }
    return try SnapshotObject.decode(bytes, id: id).snapshot
  }

  // MARK: Sync

  /// Brings the catalog up to date with the objects (see the top of this file).
  package func sync() throws {
    damage = RepositoryDamage()
    catalog.pendingForeignChunks = []
    if !store.isShared, try catalogIsInStep() { return }
    let manifests = try store.list("manifests")
    let snapshotObjects = try store.list("snapshots")
    let marks = store.isShared ? try store.list("garbage") : []
    let known = Set(try catalog.archives().map(\.name))
    let present = Dictionary(manifests.map { ($0.name, $0) }, uniquingKeysWith: { first, _ in first })
    let newlyMarked = try Set(marks.map(\.name)).subtracting(retiredArchives().keys).contains {
      known.contains($0)
    }
    if known.contains(where: { present[$0] == nil }) || newlyMarked {
      // Deleted archives, or archives newly marked for deletion: every content's location
      // moves to a copy that stays, where there is one.
      try rebuildCache(manifests: manifests, snapshotObjects: snapshotObjects, marks: marks)
      return
    }
    let newManifests = manifests.filter { !known.contains($0.name) }
    let committedByID = Dictionary(
      manifests.map { (Repository.archiveID($0.name), $0) }, uniquingKeysWith: { first, _ in first })
    let existing = try catalog.snapshots()
    let existingIDs = Set(existing.map(\.id))
    let live = Set(snapshotObjects.map(\.name))
    let gone = existingIDs.subtracting(live)
    let newSnapshotObjects = snapshotObjects.filter {
      !existingIDs.contains($0.name) && committedByID[$0.name] != nil
    }
    defer { if !damage.objects.isEmpty { try? findAffectedSnapshots() } }
    let retired = Dictionary(marks.map { ($0.name, $0.modified) }, uniquingKeysWith: { first, _ in first })
    let currentlyRetired = try retiredArchives()
    guard
      !newManifests.isEmpty || !gone.isEmpty || !newSnapshotObjects.isEmpty || currentlyRetired != retired
    else { return }
    try cacheManifestObjects(newManifests)
    // Each new manifest is read into the catalog as it is read, in a savepoint of its own: a
    // damaged one leaves nothing behind. Its snapshot row stands in for a damaged snapshot object.
    try catalog.database.inTransaction {
      var readable = known
      var carried: [String: Snapshot?] = [:]
      for object in newManifests {
        guard let (record, snapshot) = try ingestManifestForSync(object) else { continue }
        readable.insert(record.name)
        carried[record.name] = snapshot
      }
      try catalog.settleForeignChunks()
      for id in gone { try catalog.deleteSnapshot(id: id) }
      var newSnapshots: [(snapshot: Snapshot, committed: Date)] = []
      for object in newSnapshotObjects {
        guard let manifest = committedByID[object.name],
          let snapshot = try loadSnapshotForSync(
            object.name, archive: manifest.name, carried: carried[manifest.name]),
          snapshot.archive == manifest.name
        else { continue }
        // Its archive's manifest cannot be read: the catalog cannot hold it (nor its trees).
        guard readable.contains(manifest.name) else {
          damage.unlisted.append(snapshot)
          continue
        }
        newSnapshots.append((snapshot, manifest.modified))
      }
      try insertInCommitOrder(newSnapshots, existing: existing.filter { !gone.contains($0.id) })
      try setRetired(retired)
    }
  }

  /// Whether the catalog already holds exactly what the objects say, as it does after every
  /// commit made here: an archive row for each manifest object and none other, a snapshot row
  /// for each snapshot object and none other, nothing retired. Then a sync has nothing to do,
  /// and finding that out costs two directory reads and two index scans (no stat per object,
  /// no row decoded) instead of a listing with a stat per object and every row decoded, twice
  /// per backup. Any difference takes the full path above, which handles it.
  private func catalogIsInStep() throws -> Bool {
    guard try retiredArchives().isEmpty else { return false }
    return try Set(store.names("manifests")) == catalog.archiveNames()
      && Set(store.names("snapshots")) == catalog.snapshotIDs()
  }

  /// Adds an archive's record, trees and blobs (keeping rows already there).
  func ingest(_ record: ArchiveRecord, _ manifest: some ManifestContent) throws {
    try catalog.insert(record, ignoringExisting: true)
    try catalog.ingest(manifest, archive: record.name)
  }

  /// Inserts snapshots synced from elsewhere so that catalog order stays commit order: when one
  /// was committed before a snapshot already there, the rows are written again in order.
  private func insertInCommitOrder(
    _ new: [(snapshot: Snapshot, committed: Date)], existing: [Snapshot]
  ) throws {
    guard !new.isEmpty else { return }
    let sorted = new.sorted { ($0.committed, $0.snapshot.time) < ($1.committed, $1.snapshot.time) }
    let commits = try commitTimes()
    let newest = existing.compactMap { commits[$0.id] }.max() ?? .distantPast
    if sorted[0].committed >= newest {
      for item in sorted {
        try catalog.insert(item.snapshot, committed: item.committed, ignoringExisting: true)
      }
      return
    }
    let all =
      (existing.map { (snapshot: $0, committed: commits[$0.id] ?? $0.time) } + sorted)
      .enumerated().sorted { ($0.element.committed, $0.offset) < ($1.element.committed, $1.offset) }
    try catalog.database.execute("DELETE FROM snapshots")
    for item in all { try catalog.insert(item.element.snapshot, committed: item.element.committed) }
  }

  /// Each snapshot's commit time (its recorded time where none was kept).
  private func commitTimes() throws -> [String: Date] {
    let rows = try catalog.database.all("SELECT id, coalesce(committed, time) FROM snapshots") {
      ($0.text(0) ?? "", Date(timeIntervalSince1970: $0.double(1)))
    }
    return Dictionary(rows, uniquingKeysWith: { first, _ in first })
  }

  private func retiredArchives() throws -> [String: Date] {
    let rows = try catalog.database.all("SELECT name, retired FROM archives WHERE retired IS NOT NULL") {
      ($0.text(0) ?? "", Date(timeIntervalSince1970: $0.double(1)))
    }
    return Dictionary(rows, uniquingKeysWith: { first, _ in first })
  }

  private func setRetired(_ marks: [String: Date]) throws {
    try catalog.database.execute("UPDATE archives SET retired = NULL WHERE retired IS NOT NULL")
    for (name, time) in marks {
      try catalog.database.execute(
        "UPDATE archives SET retired = ?1 WHERE name = ?2", .real(time.timeIntervalSince1970), .text(name))
    }
  }

  /// Replaces the catalog's rows by what the objects say. Archives not marked for deletion
  /// are added first, so each content's location is a copy that will stay.
  func rebuildCache(
    manifests: [StoredObject], snapshotObjects: [StoredObject], marks: [StoredObject]
  ) throws {
    damage = RepositoryDamage()
    catalog.pendingForeignChunks = []
    let retired = Dictionary(marks.map { ($0.name, $0.modified) }, uniquingKeysWith: { first, _ in first })
    let ordered = manifests.sorted {
      (retired[$0.name] != nil ? 1 : 0, $0.modified, $0.name) < (
        retired[$1.name] != nil ? 1 : 0, $1.modified, $1.name
      )
    }
    let committedByID = Dictionary(
      manifests.map { (Repository.archiveID($0.name), $0) }, uniquingKeysWith: { first, _ in first })
    defer { if !damage.objects.isEmpty { try? findAffectedSnapshots() } }
    try cacheManifestObjects(ordered)
    try catalog.database.inTransaction {
      for table in ["snapshots", "blobs", "trees", "chunks", "chunk_lists", "archive_frames", "archives"] {
        try catalog.database.execute("DELETE FROM \(table)")
      }
      var carried: [String: Snapshot?] = [:]
      for object in ordered {
        guard let (record, snapshot) = try ingestManifestForSync(object) else { continue }
        carried[record.name] = snapshot
      }
      try catalog.settleForeignChunks()
      var snapshots: [(snapshot: Snapshot, committed: Date)] = []
      for object in snapshotObjects {
        guard let manifest = committedByID[object.name],
          let snapshot = try loadSnapshotForSync(
            object.name, archive: manifest.name, carried: carried[manifest.name]),
          snapshot.archive == manifest.name
        else { continue }
        guard carried[manifest.name] != nil else {
          damage.unlisted.append(snapshot)
          continue
        }
        snapshots.append((snapshot, manifest.modified))
      }
      snapshots.sort { ($0.committed, $0.snapshot.time) < ($1.committed, $1.snapshot.time) }
      for item in snapshots { try catalog.insert(item.snapshot, committed: item.committed) }
      try setRetired(retired)
    }
  }

  // MARK: Committing

  /// Commits a written archive: its snapshot object (if it has a snapshot), then its manifest
  /// object, then the catalog rows. Layout 1: the catalog rows alone, as before.
  package func commit(
    record: ArchiveRecord, manifest: some ManifestContent, snapshot: Snapshot?, crashPoints: Bool = false
  ) throws {
    if isLegacy {
      try catalog.database.inTransaction {
        try catalog.insert(record)
        try catalog.ingest(manifest, archive: record.name)
        if let snapshot { try catalog.insert(snapshot) }
      }
      return
    }
    if let snapshot {
      try putObject("snapshots/" + snapshot.id, SnapshotObject(snapshot: snapshot).encoded())
    }
    if crashPoints { CrashPoint.hit("backup.snapshot-written") }
    try putManifestObject(record, manifest)
    if crashPoints { CrashPoint.hit("backup.manifest-written") }
    let committed = store.now
    try catalog.database.inTransaction {
      try ingest(record, manifest)
      if let snapshot { try catalog.insert(snapshot, committed: committed, ignoringExisting: true) }
    }
  }

  // MARK: Layout upgrade

  /// Upgrades a layout 1 repository (local, catalog only) to layout 2: a manifest object for
  /// every archive and a snapshot object for every snapshot, written from the catalog, then
  /// `config`. Call holding the repository lock exclusively; safe to repeat after a crash.
  func upgradeLayout() throws {
    guard isLegacy, local != nil else { return }
    let snapshots = try catalog.snapshots()
    let owners = Dictionary(snapshots.map { ($0.archive, $0) }, uniquingKeysWith: { first, _ in first })
    let listsByArchive = Dictionary(grouping: try catalog.chunkLists(), by: \.archive)
    for record in try catalog.archives() {
      guard try store.size(of: "manifests/" + record.name) == nil else { continue }
      let manifest = Manifest(
        snapshot: owners[record.name], trees: try catalog.storedTrees(inArchive: record.name),
        blobs: try catalog.blobs(inArchive: record.name), chunks: try catalog.chunks(inArchive: record.name),
        chunkLists: (listsByArchive[record.name] ?? []).map { ($0.digest, $0.list) },
        frames: try catalog.frameIndex(of: record.name))
      try putObject(
        "manifests/" + record.name,
        ManifestObject(record: record, manifestBytes: manifest.encoded()).encoded())
    }
    for snapshot in snapshots where try store.size(of: "snapshots/" + snapshot.id) == nil {
      try putObject("snapshots/" + snapshot.id, SnapshotObject(snapshot: snapshot).encoded())
    }
    let config = RepositoryConfig(encrypted: false)
    try store.put("config", config.encoded())
    self.config = config
  }
}
