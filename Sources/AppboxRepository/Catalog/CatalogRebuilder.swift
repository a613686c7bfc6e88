// Rebuilding `catalog.db` from the archives alone (layout 1), or the catalog cache from the
// repository's objects (layout 2: `rebuildCatalog(_:)`, which drops the cache and syncs it
// whole from the manifest and snapshot objects).
//
// Every archive ends with a manifest naming its snapshot (if any), the trees first stored
// with it (whole or as deltas), the blobs whose content it holds, the chunks first stored in
// it and the chunk lists of contents stored as chunks; a catalog is the union of all manifests.
// A delta tree is inserted as it is (its base may come from a later manifest) and checked
// against its digest whenever it is read.
// Algorithm, under the exclusive repository lock:
// 1. for each file in archives/ (temp files excepted): hash it whole for its size and
//    CRC-32C, and read its headers up to the last `.appbox/manifest` member (its first records
//    give the snapshot's time);
// 2. oldest archive first, read each manifest member again, into a new database
//    `.catalog-rebuild.db` (journal mode DELETE, so it is one file) as it is read (trees and
//    blobs with INSERT OR IGNORE), each in a savepoint that a damaged manifest rolls back
//    (ManifestReading.swift: no manifest is held whole);
// 3. remove the old catalog's WAL and shared-memory files (a WAL left beside a new database
//    file would be replayed into it), rename the new file over `catalog.db`, fsync.
// Archives whose manifest cannot be read are skipped and reported; snapshots they held are
// lost to the new catalog, but their files are left in place for a person to look at.

import AppboxArchive
import AppboxCore
import AppboxCrypto
import AppboxStore
import Foundation
import Glibc

/// What a rebuild found.
public struct RebuildReport: Sendable {
  public var archives = 0
  public var snapshots = 0
  public var trees = 0
  public var blobs = 0
  /// Archives that could not be used, with why.
  public var skipped: [String] = []
  /// Snapshots whose archives' manifests could not be read, kept from the catalog found.
  public var keptFromPrevious = 0
}

extension Catalog {
  /// Copies what `previous` (of the same schema) holds about archives `names` into this
  /// catalog: their rows, trees, blobs, chunks and chunk lists, and the snapshots in them whose
  /// ids are in `snapshots` (still live); rows already here are kept. Returns the snapshots
  /// copied.
  func keep(archives names: Set<String>, from previous: Catalog, snapshots: Set<String>? = nil) throws -> Int
  {
    guard try previous.database.userVersion() == database.userVersion() else { return 0 }
    var kept = 0
    try database.execute("ATTACH DATABASE ?1 AS previous", .text(previous.database.path))
    defer { try? database.execute("DETACH DATABASE previous") }
    try database.inTransaction {
      for name in names.sorted() {
        try database.execute(
          "INSERT OR IGNORE INTO archives SELECT * FROM previous.archives WHERE name = ?1", .text(name))
        guard database.changes > 0 else { continue }
        for table in ["trees", "blobs", "chunks", "chunk_lists", "archive_frames"] {
          try database.execute(
            "INSERT OR IGNORE INTO \(table) SELECT * FROM previous.\(table) WHERE archive = ?1", .text(name))
        }
        let ids = try database.all(
          "SELECT id FROM previous.snapshots WHERE archive = ?1 ORDER BY rowid", .text(name),
          map: { $0.text(0) ?? "" })
        for id in ids where snapshots?.contains(id) ?? true {
          try database.execute(
            "INSERT OR IGNORE INTO snapshots SELECT * FROM previous.snapshots WHERE id = ?1", .text(id))
          kept += database.changes
        }
      }
      // The chunks their manifests recorded in other archives, where the catalog has those.
      for name in names.sorted() {
        try database.execute(
          """
          INSERT OR IGNORE INTO chunks SELECT * FROM previous.chunks
          WHERE declared = ?1 AND archive IN (SELECT name FROM archives)
          """, .text(name))
      }
      // Rows stay in commit order (the order `latest` follows).
      if kept > 0 {
        try database.execute(
          """
          CREATE TEMP TABLE ordered AS SELECT * FROM snapshots ORDER BY coalesce(committed, time), rowid;
          DELETE FROM snapshots;
          INSERT INTO snapshots SELECT * FROM ordered;
          DROP TABLE ordered
          """)
      }
    }
    return kept
  }
}

extension Repository {
  /// Rebuilds the catalog of the repository at `location` from scratch. Layout 2: the cache
  /// (or the local repository's catalog.db) is removed, and opening the repository syncs it
  /// whole from the objects. Layout 1 (a local directory without `config`): from the archives
  /// alone, as `rebuildCatalog(at:environment:lockWait:)`.
  public static func rebuildCatalog(_ location: RepositoryLocation, options: RepositoryOptions) throws
    -> RebuildReport
  {
    var probe = options
    probe.create = false
    if case .directory(let path) = location,
      !FileManager.default.fileExists(atPath: path + "/config")
    {
      return try rebuildCatalog(at: path, environment: options.environment, lockWait: options.lockWait)
    }
    // Open once to find (and unlock) the catalog, then set it aside and open again: the sync
    // rebuilds it whole from the objects it can read.
    let catalogPath: String
    do {
      catalogPath = try Repository(location: location, options: probe).catalogPath
    } catch  where Repository.isDamage(error) {
      catalogPath = try Repository.catalogPath(of: location, options: probe)
    }
    let lock: FileLock? =
      if case .directory(let path) = location {
        try FileLock.acquire(
          path + "/locks/repository.lock", exclusive: true,
          timeout: options.lockWait.atLeast(.seconds(5)),
          what: "Repository '\(path)'")
      } else { nil }
    defer { withExtendedLifetime(lock) {} }
    // The catalog found here is kept aside (with its WAL), so that what it knew of archives
    // whose manifest objects cannot be read now is not lost: a rebuild never leaves less.
    let previous = catalogPath + ".previous"
    for suffix in ["", "-wal", "-shm"] { unlink(previous + suffix) }
    for suffix in ["", "-wal", "-shm"] { rename(catalogPath + suffix, previous + suffix) }
    let rebuilt: Repository
    do {
      rebuilt = try Repository(location: location, options: probe)
    } catch {
      for suffix in ["", "-wal", "-shm"] {
        unlink(catalogPath + suffix)
        rename(previous + suffix, catalogPath + suffix)
      }
      throw error
    }
    var report = RebuildReport()
    // Damaged manifests: those whose archives the rebuild could not read another way.
    let known = Set(try rebuilt.catalog.archives().map(\.name))
    let unreadable = Set(
      rebuilt.damage.objects.keys.filter { $0.hasPrefix("manifests/") }.map { String($0.dropFirst(10)) }
    ).subtracting(known)
    for name in unreadable.sorted() {
      report.skipped.append(
        "\(name): \(rebuilt.damage.objects["manifests/" + name] ?? "its manifest is damaged")")
    }
    if !unreadable.isEmpty, FileManager.default.fileExists(atPath: previous),
      let old = try? Catalog(path: previous, readOnly: true)
    {
      let live = Set(try rebuilt.store.list("snapshots").map(\.name))
      report.keptFromPrevious = try rebuilt.catalog.keep(archives: unreadable, from: old, snapshots: live)
    }
    for suffix in ["", "-wal", "-shm"] { unlink(previous + suffix) }
    report.archives = try rebuilt.catalog.count("archives")
    report.snapshots = try rebuilt.catalog.count("snapshots")
    report.trees = try rebuilt.catalog.count("trees")
    report.blobs = try rebuilt.catalog.count("blobs")
    return report
  }

  /// Where the catalog of `location` is, without opening it (it may be what is broken).
  static func catalogPath(of location: RepositoryLocation, options: RepositoryOptions) throws -> String {
    let store = try makeStore(location)
    let config = try readConfig(store)
    if let local = store as? LocalObjectStore, config?.encrypted != true { return local.root + "/catalog.db" }
    return options.resolvedCacheDirectory + "/" + SHA256Name.of(location.cacheKey) + "/catalog.db"
  }

  /// Replaces the catalog of the layout 1 repository at `path` by one rebuilt from its
  /// archives. Does not open the old catalog (it may be what is broken). A layout 2
  /// repository's is rebuilt from its objects instead.
  public static func rebuildCatalog(
    at path: String, environment: [String: String], lockWait: LockWait = .none
  ) throws -> RebuildReport {
    if FileManager.default.fileExists(atPath: path + "/config") {
      return try rebuildCatalog(
        .directory(path),
        options: RepositoryOptions(
          environment: environment,
          password: Repository.passwordFile(environment), lockWait: lockWait))
    }
    let archivesPath = path + "/archives"
    guard FileManager.default.fileExists(atPath: archivesPath) else {
      throw RepositoryError(.notFound, "No backup repository at '\(path)'")
    }
    let lock = try FileLock.acquire(
      path + "/locks/repository.lock", exclusive: true, timeout: lockWait.or(.seconds(5)),
      what: "Repository '\(path)'")
    defer { withExtendedLifetime(lock) {} }
    let temporary = path + "/.catalog-rebuild.db"
    unlink(temporary)
    var report = RebuildReport()
    do {
      let catalog = try Catalog(path: temporary, walMode: false)
      let names = try FileManager.default.contentsOfDirectory(atPath: archivesPath)
        .filter { !$0.hasPrefix(Repository.temporaryPrefix) }.sorted()
      var members: [ManifestMember] = []
      var unreadable: Set<String> = []
      for name in names {
        do {
          members.append(try locateManifest(archivesPath + "/" + name, name: name))
        } catch {
          report.skipped.append("\(name): \(error)")
          unreadable.insert(name)
        }
      }
      // Oldest first: of two copies of a content, the older archive's stays its location.
      members.sort { $0.record.created < $1.record.created }
      try catalog.database.inTransaction {
        for member in members {
          let name = member.record.name
          do {
            // Read into the catalog as it is read; a damaged manifest is rolled back whole.
            try catalog.database.inTransaction {
              let ingest = CatalogIngest(catalog, archive: name)
              try readManifest(member, path: archivesPath + "/" + name, into: ingest)
              try ingest.finish()
              try catalog.insert(member.record)
              if let snapshot = ingest.snapshot { try catalog.insert(snapshot) }
              report.archives += 1
              report.trees += ingest.newTrees
              report.snapshots += ingest.snapshot == nil ? 0 : 1
            }
          } catch  where !(error is StoreError) {
            report.skipped.append("\(name): \(error)")
            unreadable.insert(name)
          }
        }
        try catalog.settleForeignChunks()
      }
      // What the catalog found here knew of archives that could not be read is kept.
      if !unreadable.isEmpty, let old = try? Catalog(path: path + "/catalog.db", readOnly: true) {
        report.keptFromPrevious = try catalog.keep(archives: unreadable, from: old)
        report.snapshots += report.keptFromPrevious
      }
      report.blobs = try catalog.count("blobs")
    } catch {
      unlink(temporary)
      throw error
    }
    unlink(path + "/catalog.db-wal")
    unlink(path + "/catalog.db-shm")
    guard rename(temporary, path + "/catalog.db") == 0 else { throw SystemError("rename", path: temporary) }
    let directory = try FileDescriptor.open(path, O_RDONLY | O_DIRECTORY)
    try directory.closeAfter { try $0.sync() }
    return report
  }
}
