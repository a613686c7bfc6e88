// The catalog: `catalog.db`, the repository's index (SQLite, WAL, synchronous=FULL).
//
// Tables:
//   archives(name, size, crc32c, compression, created)   every archive file the repository owns
//   snapshots(id, app, device, container, version, ...)  one row per snapshot, with its root tree
//   trees(digest, data, archive)                        content-addressed directory listings;
//                                                       `archive` names the archive whose manifest
//                                                       carries the tree (for rebuilds)
//   blobs(digest, archive, offset, path, size,          where one copy of each content lives: the
//         data_offset)                                  uncompressed offsets of its member's header
//                                                       and of its data (nil: read it through the
//                                                       member, a sparse one or an older row)
//   chunks, chunk_lists                                 content-defined chunks of large files, and
//                                                       which chunks make up each chunked content
//                                                       (Catalog+Chunks.swift)
//   archive_frames(archive, frames)                     a framed archive's frame index, as its
//                                                       manifest carries it (FrameIndex.swift)
// Invariants: every snapshot's archive and every blob's archive has an `archives` row; every
// tree reachable from a snapshot's root is in `trees` (whole, or as a delta whose chain is
// there too); every non-empty file content reachable from a snapshot is in `blobs`, or in
// `chunk_lists` with each of its chunks in `chunks`. A backup adds all of its rows in one transaction, after its
// archive is durable under its final name, so a crash never leaves a row without its archive.
// Rows are never updated in place except by `forget`, which moves blob and tree locations to a
// new archive in the same transaction that drops snapshots.
// Since repository layout 2 the catalog is a cache of the repository's objects (snapshot and
// manifest objects), kept in step by RepositorySync.swift: `archives.retired` marks an archive
// a fleet's `forget` has marked for deletion (its copies are not reused by new backups), and
// `snapshots.committed` is when the snapshot's archive was committed, by the store's clock,
// which orders snapshots synced from other devices among this device's own.

import AppboxArchive
import AppboxCore
import Glibc
import AppboxCrypto
import AppboxStore
import Foundation

/// Whether a snapshot's archive holds all of its content or only what changed.
public enum SnapshotKind: String, Sendable, Equatable {
  case full, incremental
}

/// One snapshot as the catalog records it.
public struct Snapshot: Sendable, Equatable {
  public var id: String
  /// The app's bundle identifier.
  public var app: String
  /// The UDID of the device the snapshot was taken on.
  public var device: String
  public var containerID: String
  public var version: String
  /// The bundle directory's name ("Notes.app"), an entry of the root tree.
  public var bundleDirectoryName: String
  /// The bundle's seal (hex SHA-256 of its CodeResources) when the snapshot was taken.
  public var seal: String
  public var time: Date
  public var kind: SnapshotKind
  /// A label such as "pre-update"; nil for ordinary backups.
  public var tag: String?
  /// The snapshot whose trees change detection compared against.
  public var parent: String?
  public var rootTree: Digest
  /// Files (anything but directories) in the data, not counting the bundle or excluded items.
  public var files: Int
  /// Their total size.
  public var bytes: Int64
  /// File content bytes written to this snapshot's archive (bundle included).
  public var bytesAdded: Int64
  public var archive: String
  /// Where the `.appbox/keychain` member starts in the archive, when there is one.
  public var keychainOffset: Int64?
  /// Files that kept changing while they were read (recorded with a warning).
  public var warnings: Int
  /// Entries the backup could not read (permission denied, or a path over 64 KiB), left out
  /// of the snapshot: 0 for a complete snapshot.
  public var unreadable: Int = 0
  /// The first of their paths, shortened for display (`Snapshot.shortened`).
  public var unreadablePaths: [[UInt8]] = []
  /// For an app group's snapshot: the team that owned the group when it was taken (nil for an
  /// app's, and for a group's taken before teams were recorded).
  public var team: String? = nil
  /// Files that kept changing while the backup read them: the snapshot holds a reading that
  /// may mix two versions (torn). 0 for a snapshot whose every file held still.
  public var torn: Int = 0
  /// The first of their paths, shortened.
  public var tornPaths: [[UInt8]] = []

  package init(
    id: String, app: String, device: String, containerID: String, version: String,
    bundleDirectoryName: String,
    seal: String, time: Date, kind: SnapshotKind, tag: String? = nil, parent: String? = nil, rootTree: Digest,
    files: Int,
    bytes: Int64, bytesAdded: Int64, archive: String, keychainOffset: Int64? = nil, warnings: Int,
    unreadable: Int = 0,
    unreadablePaths: [[UInt8]] = [], team: String? = nil, torn: Int = 0, tornPaths: [[UInt8]] = []
  ) {
    self.id = id
    self.app = app
    self.device = device
    self.containerID = containerID
    self.version = version
    self.bundleDirectoryName = bundleDirectoryName
    self.seal = seal
    self.time = time
    self.kind = kind
    self.tag = tag
    self.parent = parent
    self.rootTree = rootTree
    self.files = files
    self.bytes = bytes
    self.bytesAdded = bytesAdded
    self.archive = archive
    self.keychainOffset = keychainOffset
    self.warnings = warnings
    self.unreadable = unreadable
    self.unreadablePaths = unreadablePaths
    self.team = team
    self.torn = torn
    self.tornPaths = tornPaths
  }

  /// Whether some entries could not be read (the snapshot lacks them) or were torn (the
  /// snapshot holds a copy no version of them ever had).
  public var isIncomplete: Bool { unreadable > 0 || torn > 0 }

  /// How many unreadable paths a snapshot keeps, and their total size at most.
  public static let unreadablePathLimit = 20
  public static let unreadablePathBytes = 3072

  /// `path` cut to its first 48 and last 96 bytes around "…" when longer than 160 bytes
  /// (at character boundaries), so a 4 KB path still names where it was.
  public static func shortened(_ path: [UInt8]) -> [UInt8] {
    guard path.count > 160 else { return path }
    func isContinuation(_ byte: UInt8) -> Bool { byte & 0xC0 == 0x80 }
    var head = 48
    while head > 0 && isContinuation(path[head]) { head -= 1 }
    var tail = path.count - 96
    while tail < path.count && isContinuation(path[tail]) { tail += 1 }
    return Array(path[..<head]) + Array("…".utf8) + Array(path[tail...])
  }

  /// The paths to keep for `unreadable` (shortened, within the limits above).
  package static func keptPaths(_ paths: [[UInt8]]) -> [[UInt8]] {
    var kept: [[UInt8]] = []
    var bytes = 0
    for path in paths.prefix(unreadablePathLimit) {
      let short = shortened(path)
      if bytes + short.count + 1 > unreadablePathBytes { break }
      kept.append(short)
      bytes += short.count + 1
    }
    return kept
  }

  /// Paths joined by NUL bytes (how the catalog and the manifest store them), and back.
  static func joinedPaths(_ paths: [[UInt8]]) -> [UInt8] { Array(paths.joined(separator: [0])) }
  static func splitPaths(_ bytes: [UInt8]) -> [[UInt8]] {
    bytes.isEmpty ? [] : bytes.split(separator: 0, omittingEmptySubsequences: false).map(Array.init)
  }
}

/// An archive file of the repository.
public struct ArchiveRecord: Sendable, Equatable {
  public var name: String
  public var size: Int64
  /// CRC-32C of the whole file: catches damage without a second SHA-256 pass.
  public var checksum: UInt32
  public var compression: ArchiveCompression
  public var created: Date

  package init(name: String, size: Int64, checksum: UInt32, compression: ArchiveCompression, created: Date) {
    self.name = name
    self.size = size
    self.checksum = checksum
    self.compression = compression
    self.created = created
  }
}

/// Where one content digest is stored.
public struct BlobLocation: Sendable, Equatable {
  public var digest: Digest
  public var archive: String
  /// Uncompressed offset of the member's first header.
  public var offset: Int64
  /// The member's path (relative to the home).
  public var path: [UInt8]
  public var size: Int64
  /// Uncompressed offset of the member's data, when it is stored contiguously (not a sparse
  /// member): restore reads it there directly. nil for older rows.
  public var dataOffset: Int64?

  public init(
    digest: Digest, archive: String, offset: Int64, path: [UInt8], size: Int64, dataOffset: Int64? = nil
  ) {
    self.digest = digest
    self.archive = archive
    self.offset = offset
    self.path = path
    self.size = size
    self.dataOffset = dataOffset
  }
}

/// The catalog database. Not thread-safe: one per thread.
public final class Catalog {
  public let database: Database
  /// Foreign chunk locations read before the catalog had their archives, and which archive's
  /// manifest recorded each (CatalogIngest; `settleForeignChunks`).
  var pendingForeignChunks: [(chunk: ChunkLocation, declarer: String)] = []

  static let migrations = [
    """
    CREATE TABLE archives(
      name TEXT PRIMARY KEY NOT NULL,
      size INTEGER NOT NULL,
      crc32c INTEGER NOT NULL,
      compression TEXT NOT NULL,
      created REAL NOT NULL
    );
    CREATE TABLE snapshots(
      id TEXT PRIMARY KEY NOT NULL,
      app TEXT NOT NULL,
      device TEXT NOT NULL,
      container TEXT NOT NULL,
      version TEXT NOT NULL,
      bundle_name TEXT NOT NULL,
      seal TEXT NOT NULL,
      time REAL NOT NULL,
      kind TEXT NOT NULL,
      tag TEXT,
      parent TEXT,
      root_tree BLOB NOT NULL,
      files INTEGER NOT NULL,
      bytes INTEGER NOT NULL,
      bytes_added INTEGER NOT NULL,
      archive TEXT NOT NULL REFERENCES archives(name),
      keychain_offset INTEGER,
      warnings INTEGER NOT NULL
    );
    CREATE INDEX snapshots_by_app ON snapshots(app, time);
    CREATE TABLE trees(
      digest BLOB PRIMARY KEY NOT NULL,
      data BLOB NOT NULL,
      archive TEXT NOT NULL
    );
    CREATE TABLE blobs(
      digest BLOB PRIMARY KEY NOT NULL,
      archive TEXT NOT NULL,
      offset INTEGER NOT NULL,
      path BLOB NOT NULL,
      size INTEGER NOT NULL
    ) WITHOUT ROWID;
    CREATE INDEX blobs_by_archive ON blobs(archive);
    CREATE INDEX trees_by_archive ON trees(archive);
    """,
    // 2: incomplete snapshots (entries the backup could not read).
    """
    ALTER TABLE snapshots ADD COLUMN unreadable INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE snapshots ADD COLUMN unreadable_paths BLOB;
    """,
    // 3: trees stored as deltas (Catalog+Trees.swift), where each blob's data starts (restore
    // reads it directly), and the content-defined chunks of large files (Catalog+Chunks.swift).
    """
    ALTER TABLE trees ADD COLUMN base BLOB;
    ALTER TABLE trees ADD COLUMN depth INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE blobs ADD COLUMN data_offset INTEGER;
    CREATE TABLE chunks(
      digest BLOB PRIMARY KEY NOT NULL,
      archive TEXT NOT NULL,
      offset INTEGER NOT NULL,
      data_offset INTEGER NOT NULL,
      size INTEGER NOT NULL
    ) WITHOUT ROWID;
    CREATE INDEX chunks_by_archive ON chunks(archive);
    CREATE TABLE chunk_lists(
      digest BLOB PRIMARY KEY NOT NULL,
      list BLOB NOT NULL,
      archive TEXT NOT NULL
    ) WITHOUT ROWID;
    CREATE INDEX chunk_lists_by_archive ON chunk_lists(archive);
    """,
    // 4: the catalog as a cache of a shared repository (layout 2).
    """
    ALTER TABLE archives ADD COLUMN retired REAL;
    ALTER TABLE snapshots ADD COLUMN committed REAL;
    """,
    // 5: the team owning a group when its snapshot was taken.
    """
    ALTER TABLE snapshots ADD COLUMN team TEXT;
    """,
    // 6: files that kept changing while they were read (torn copies).
    """
    ALTER TABLE snapshots ADD COLUMN torn INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE snapshots ADD COLUMN torn_paths BLOB;
    """,
    // 7: framed zstd archives, read in place through their frame index.
    """
    CREATE TABLE archive_frames(
      archive TEXT PRIMARY KEY NOT NULL,
      frames BLOB NOT NULL
    ) WITHOUT ROWID;
    """,
    // 8: chunks that a later archive's manifest records (inside an earlier archive's whole
    // member): which archive declared them (NULL: the archive holding them).
    """
    ALTER TABLE chunks ADD COLUMN declared TEXT;
    CREATE INDEX chunks_by_declarer ON chunks(declared) WHERE declared IS NOT NULL;
    """,
  ]

  /// Opens (creating and migrating when writable) the catalog at `path`. `walMode: false`
  /// keeps a new database in one file (for a rebuild that is renamed into place).
  public init(path: String, readOnly: Bool = false, walMode: Bool = true) throws {
    // Created 0600 by us, not by SQLite with the umask's 0644: it names every app and file
    // backed up (SQLite gives its -wal and -shm the same mode).
    if !readOnly { try FileDescriptor.open(path, O_RDWR | O_CREAT | O_NOFOLLOW, mode: 0o600).close() }
    database = try Database(path: path, mode: readOnly ? .readOnly : .readWriteCreate)
    if !readOnly {
      if walMode {
        // A backup's transaction can hold thousands of pages: wal-index for 32 Ki frames.
        try database.setJournalModeWAL(walIndexBytes: 256 << 10)
        // A backup commits megabytes of trees at once; checkpointing after every one of them
        // (the default threshold is 4 MiB) would add a database fsync to each backup.
        try database.execute("PRAGMA wal_autocheckpoint = 8192")
      }
      try database.setSynchronous(.full)
      try database.migrate(Self.migrations)
    } else if try database.userVersion() != Self.migrations.count {
      throw RepositoryError(.corruptCatalog, "Catalog '\(path)' has an unknown schema version")
    }
  }

  /// Runs `body` in one read transaction: a consistent view, and the WAL read lock taken once
  /// instead of once per query (restoring 100,000 files looks up as many blobs).
  public func reading<T>(_ body: () throws -> T) throws -> T {
    if database.isInTransaction { return try body() }
    return try database.inTransaction(.deferred, body)
  }

  // MARK: Snapshots

  static let snapshotColumns = """
    id, app, device, container, version, bundle_name, seal, time, kind, tag, parent, root_tree, files, bytes,
    bytes_added, archive, keychain_offset, warnings, unreadable, unreadable_paths, team, torn, torn_paths
    """

  private func snapshot(_ row: Statement) throws -> Snapshot {
    guard let rootTree = Digest(validating: row.blob(11)),
      let kind = SnapshotKind(rawValue: row.text(8) ?? "")
    else {
      throw RepositoryError(.corruptCatalog, "Catalog row of snapshot '\(row.text(0) ?? "")' is malformed")
    }
    return Snapshot(
      id: row.text(0) ?? "", app: row.text(1) ?? "", device: row.text(2) ?? "",
      containerID: row.text(3) ?? "",
      version: row.text(4) ?? "", bundleDirectoryName: row.text(5) ?? "", seal: row.text(6) ?? "",
      time: Date(timeIntervalSince1970: row.double(7)), kind: kind, tag: row.text(9), parent: row.text(10),
      rootTree: rootTree, files: row.int(12), bytes: row.int64(13), bytesAdded: row.int64(14),
      archive: row.text(15) ?? "", keychainOffset: row.isNull(16) ? nil : row.int64(16),
      warnings: row.int(17),
      unreadable: row.int(18), unreadablePaths: Snapshot.splitPaths(row.isNull(19) ? [] : row.blob(19)),
      team: row.text(20), torn: row.int(21),
      tornPaths: Snapshot.splitPaths(row.isNull(22) ? [] : row.blob(22))
    )
  }

  /// Snapshots in the order they were committed (oldest first); only `app`'s when given.
  /// Commit order, not the recorded time, decides which is latest: clocks can step back.
  public func snapshots(app: String? = nil) throws -> [Snapshot] {
    let statement: Statement
    if let app {
      statement = try database.prepare(
        "SELECT \(Self.snapshotColumns) FROM snapshots WHERE app = ?1 ORDER BY rowid")
      try statement.bind([.text(app)])
    } else {
      statement = try database.prepare("SELECT \(Self.snapshotColumns) FROM snapshots ORDER BY rowid")
    }
    return try statement.rows(snapshot)
  }

  /// The snapshot with id `id`, or nil.
  public func snapshot(id: String) throws -> Snapshot? {
    let statement = try database.prepare("SELECT \(Self.snapshotColumns) FROM snapshots WHERE id = ?1")
    try statement.bind([.text(id.lowercased())])
    return try statement.first(snapshot)
  }

  /// Adds a snapshot row; with `ignoringExisting`, a row of that id already there is kept.
  /// `committed` is when its archive was committed (the store's clock), for ordering.
  public func insert(_ snapshot: Snapshot, committed: Date? = nil, ignoringExisting: Bool = false) throws {
    let statement = try database.cachedStatement(
      """
      INSERT \(ignoringExisting ? "OR IGNORE " : "")INTO snapshots(\(Self.snapshotColumns), committed)
      VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21,
        ?22, ?23, ?24)
      """)
    try statement.bind([
      .text(snapshot.id), .text(snapshot.app), .text(snapshot.device), .text(snapshot.containerID),
      .text(snapshot.version), .text(snapshot.bundleDirectoryName), .text(snapshot.seal),
      .real(snapshot.time.timeIntervalSince1970), .text(snapshot.kind.rawValue),
      snapshot.tag.map(SQLValue.text) ?? .null, snapshot.parent.map(SQLValue.text) ?? .null,
      .blob(snapshot.rootTree.bytes), .integer(Int64(snapshot.files)), .integer(snapshot.bytes),
      .integer(snapshot.bytesAdded), .text(snapshot.archive),
      snapshot.keychainOffset.map(SQLValue.integer) ?? .null,
      .integer(Int64(snapshot.warnings)), .integer(Int64(snapshot.unreadable)),
      snapshot.unreadablePaths.isEmpty ? .null : .blob(Snapshot.joinedPaths(snapshot.unreadablePaths)),
      snapshot.team.map(SQLValue.text) ?? .null,
      .integer(Int64(snapshot.torn)),
      snapshot.tornPaths.isEmpty ? .null : .blob(Snapshot.joinedPaths(snapshot.tornPaths)),
      committed.map { .real($0.timeIntervalSince1970) } ?? .null,
    ])
    try statement.execute()
  }

  public func deleteSnapshot(id: String) throws {
    try database.execute("DELETE FROM snapshots WHERE id = ?1", .text(id))
  }

  // MARK: Archives

  /// Adds an archive row; with `ignoringExisting`, a row of that name already there is kept.
  public func insert(_ archive: ArchiveRecord, ignoringExisting: Bool = false) throws {
    try database.execute(
      "INSERT \(ignoringExisting ? "OR IGNORE " : "")INTO archives(name, size, crc32c, compression, created) "
        + "VALUES (?1, ?2, ?3, ?4, ?5)",
      .text(archive.name), .integer(archive.size), .integer(Int64(archive.checksum)),
      .text(archive.compression.rawValue),
      .real(archive.created.timeIntervalSince1970))
  }

  /// The names of the archives it holds (`archives()` without decoding a record).
  public func archiveNames() throws -> Set<String> {
    Set(try database.all("SELECT name FROM archives") { $0.text(0) ?? "" })
  }

  /// The ids of the snapshots it holds (`snapshots()` without decoding one).
  public func snapshotIDs() throws -> Set<String> {
    Set(try database.all("SELECT id FROM snapshots") { $0.text(0) ?? "" })
  }

  public func archives() throws -> [ArchiveRecord] {
    try database.all("SELECT name, size, crc32c, compression, created FROM archives ORDER BY created, name") {
      row in
      guard let checksum = UInt32(exactly: row.int64(2)),
        let compression = ArchiveCompression(rawValue: row.text(3) ?? "")
      else {
        throw RepositoryError(.corruptCatalog, "Catalog row of archive '\(row.text(0) ?? "")' is malformed")
      }
      return ArchiveRecord(
        name: row.text(0) ?? "", size: row.int64(1), checksum: checksum, compression: compression,
        created: Date(timeIntervalSince1970: row.double(4)))
    }
  }

  public func archive(named name: String) throws -> ArchiveRecord? {
    try archives().first { $0.name == name }
  }

  public func deleteArchive(named name: String) throws {
    try database.execute("DELETE FROM archives WHERE name = ?1", .text(name))
    try database.execute("DELETE FROM archive_frames WHERE archive = ?1", .text(name))
  }

  // MARK: Frames

  /// Records the frame index of framed archive `archive` (kept if it has one).
  public func insertFrames(_ index: FrameIndex, archive: String) throws {
    try database.execute(
      "INSERT OR IGNORE INTO archive_frames(archive, frames) VALUES (?1, ?2)", .text(archive),
      .blob(index.encoded()))
  }

  /// The frame index of archive `archive`: nil when it is not framed (or its index was never
  /// recorded). A row that does not decode is the catalog's damage.
  public func frameIndex(of archive: String) throws -> FrameIndex? {
    let statement = try database.cachedStatement("SELECT frames FROM archive_frames WHERE archive = ?1")
    try statement.bind(archive, at: 1)
    return try statement.first { row in
      do {
        return try FrameIndex.decode(row.blob(0))
      } catch {
        throw RepositoryError(
          .corruptCatalog, "The catalog's frame index of archive '\(archive)' is damaged: \(error)")
      }
    }
  }

  // MARK: Blobs

  public func blob(_ digest: Digest) throws -> BlobLocation? {
    let statement = try database.cachedStatement(
      "SELECT archive, offset, path, size, data_offset FROM blobs WHERE digest = ?1")
    try digest.withUnsafeBytes { try statement.bind($0, at: 1) }
    return try statement.first { row in
      BlobLocation(
        digest: digest, archive: row.text(0) ?? "", offset: row.int64(1), path: row.blob(2),
        size: row.int64(3), dataOffset: row.isNull(4) ? nil : row.int64(4))
    }
  }

  /// Where content `digest` is stored, without the member's path (restore reads it directly
  /// when `dataOffset` is known): one lookup, no allocation for the path.
  package func blobPosition(_ digest: Digest) throws -> (
    archive: String, offset: Int64, size: Int64, dataOffset: Int64?
  )? {
    let statement = try database.cachedStatement(
      "SELECT archive, offset, size, data_offset FROM blobs WHERE digest = ?1")
    try digest.withUnsafeBytes { try statement.bind($0, at: 1) }
    return try statement.first { row in
      (row.text(0) ?? "", row.int64(1), row.int64(2), row.isNull(3) ? nil : row.int64(3))
    }
  }

  /// Calls `body` with every blob's position, in digest order (one pass over the table: a
  /// restore of most of a repository's content reads it faster than a lookup per content).
  package func forEachBlobPosition(
    _ body: (Digest, _ archive: String, _ offset: Int64, _ size: Int64, _ dataOffset: Int64?) throws -> Void
  ) throws {
    let statement = try database.prepare("SELECT digest, archive, offset, size, data_offset FROM blobs")
    while try statement.step() {
      guard let digest = statement.withUnsafeBlob(0, { Digest(validating: $0) }) else { continue }
      try body(
        digest, statement.text(1) ?? "", statement.int64(2), statement.int64(3),
        statement.isNull(4) ? nil : statement.int64(4))
    }
  }

  /// Whether the content is stored where new snapshots may rely on it (deduplication): in an
  /// archive not marked for deletion (`archives.retired`, set only in shared repositories).
  public func hasBlob(_ digest: Digest) throws -> Bool {
    let statement = try database.cachedStatement(
      """
      SELECT 1 FROM blobs WHERE digest = ?1
        AND NOT EXISTS (SELECT 1 FROM archives WHERE name = blobs.archive AND retired IS NOT NULL)
      """)
    try digest.withUnsafeBytes { try statement.bind($0, at: 1) }
    return try statement.first { _ in true } ?? false
  }

  /// Adds a blob location unless the digest already has one.
  public func insertBlob(_ blob: BlobLocation) throws { try insertBlobs([blob]) }

  /// Adds many blob locations (those whose digest has none), with one prepared statement:
  /// a full backup adds one per file.
  public func insertBlobs(_ blobs: [BlobLocation]) throws {
    let statement = try database.prepare(
      "INSERT OR IGNORE INTO blobs(digest, archive, offset, path, size, data_offset) VALUES (?1, ?2, ?3, ?4, ?5, ?6)"
    )
    guard let first = blobs.first else { return }
    try statement.bind(first.archive, at: 2)
    var archive = first.archive
    // In digest order, the rows go into the B-tree in order.
    for index in blobs.indices.sorted(by: { blobs[$0].digest < blobs[$1].digest }) {
      let blob = blobs[index]
      try blob.digest.withUnsafeBytes { try statement.bind($0, at: 1) }
      if blob.archive != archive {
        archive = blob.archive
        try statement.bind(archive, at: 2)
      }
      try statement.bind(blob.offset, at: 3)
      try statement.bind(blob.path, at: 4)
      try statement.bind(blob.size, at: 5)
      if let dataOffset = blob.dataOffset {
        try statement.bind(dataOffset, at: 6)
      } else {
        try statement.bindNull(at: 6)
      }
      try statement.execute()
    }
  }

  /// How many bytes of content `digest` the archive `archive` added to the repository: the
  /// stored size when that archive holds the repository's copy; for a content stored as chunks,
  /// the bytes of its chunks first stored there; else 0 (stored earlier, in another archive).
  /// `why` and `advise` ask this to attribute a snapshot's bytes to files.
  public func contentBytes(_ digest: Digest, storedIn archive: String) throws -> Int64 {
    let statement = try database.cachedStatement("SELECT size FROM blobs WHERE digest = ?1 AND archive = ?2")
    try digest.withUnsafeBytes { try statement.bind($0, at: 1) }
    try statement.bind(archive, at: 2)
    if let size = try statement.first({ $0.int64(0) }) { return size }
    guard let list = try chunkList(digest) else { return 0 }
    var counted: Set<Digest> = []
    var bytes: Int64 = 0
    for chunk in list.chunks where counted.insert(chunk.digest).inserted {
      if let location = try self.chunk(chunk.digest), location.archive == archive { bytes += chunk.size }
    }
    return bytes
  }

  /// Every blob location, optionally only those in `archive`.
  public func blobs(inArchive archive: String? = nil) throws -> [BlobLocation] {
    let map = { (row: Statement) -> BlobLocation in
      BlobLocation(
        digest: Digest(validating: row.blob(0)) ?? Digest(bytes: [UInt8](repeating: 0, count: 32)),
        archive: row.text(1) ?? "", offset: row.int64(2), path: row.blob(3), size: row.int64(4),
        dataOffset: row.isNull(5) ? nil : row.int64(5))
    }
    if let archive {
      return try database.all(
        "SELECT digest, archive, offset, path, size, data_offset FROM blobs WHERE archive = ?1 ORDER BY offset",
        .text(archive),
        map: map)
    }
    return try database.all(
      "SELECT digest, archive, offset, path, size, data_offset FROM blobs ORDER BY archive, offset", map: map)
  }

  /// Row counts, for tests and `check`.
  public func count(_ table: String) throws -> Int {
    precondition(
      ["archives", "snapshots", "trees", "blobs", "chunks", "chunk_lists", "archive_frames"].contains(table))
    guard case .integer(let value)? = try database.scalar("SELECT count(*) FROM \(table)") else { return 0 }
    return Int(value)
  }
}
