// Damage stays local: a manifest or snapshot object that cannot be read (a flipped bit, a
// truncation, a seal that does not open) costs the snapshots that need it, and only those.
//
// How each reader copes:
// - sync (RepositorySync.swift) skips a damaged manifest object and records it: it reads each
//   manifest into the catalog as it goes, in a savepoint that the damage rolls back. In a local
//   unencrypted repository the archive's own `.appbox/manifest` member stands in for it (the
//   same bytes), so nothing is lost there. A damaged snapshot object is replaced by the copy
//   of its row that its archive's manifest carries. A snapshot whose archive's manifest
//   cannot be read at all cannot be listed from the catalog (its trees are in that manifest):
//   it is kept aside, `unlisted`, from its snapshot object.
// - After such a sync, every snapshot is walked: one that needs a tree or content the catalog
//   lacks, or that lives in an archive whose manifest is damaged, is `affected` (`snapshots`
//   marks it, `restore` refuses it with the reason); the others restore as before.
// - `check` reads every manifest and snapshot object as the store holds it (never this
//   device's cached copy) and names each damaged one with the snapshots that need it.
// - Debris removal takes only archives without any manifest object, never one whose manifest
//   is merely damaged; `check --rebuild-catalog` keeps what the previous catalog knew of
//   archives whose manifests cannot be read (CatalogRebuilder.swift).

import AppboxArchive
import AppboxCore
import AppboxCrypto
import Foundation

/// What a repository's damaged objects cost, as the last sync found it.
public struct RepositoryDamage: Sendable {
  /// Objects that could not be read or did not decode, by name ("manifests/1a2b3c4d.tar"),
  /// with why.
  public var objects: [String: String] = [:]
  /// Snapshots that cannot be restored whole, by id, with why.
  public var affected: [String: String] = [:]
  /// Snapshots the catalog cannot hold (their archive's manifest is unreadable), from their
  /// snapshot objects.
  public var unlisted: [Snapshot] = []

  public var isEmpty: Bool { objects.isEmpty && affected.isEmpty && unlisted.isEmpty }
}

extension Repository {
  /// The snapshots to list (the catalog's, and those only damaged objects name), each with
  /// why it cannot be restored whole (nil: it can).
  public func listing(app: String? = nil) throws -> [(snapshot: Snapshot, damage: String?)] {
    var result = try catalog.snapshots(app: app).map { ($0, damage.affected[$0.id]) }
    for snapshot in damage.unlisted where app.map({ $0 == snapshot.app }) ?? true {
      result.append((snapshot, "the manifest of its archive '\(snapshot.archive)' is damaged"))
    }
    return result
  }

  /// Whether `error` says an object is damaged (not that the store could not be reached).
  static func isDamage(_ error: any Error) -> Bool {
    (error as? any AppboxFailure)?.kind == .badData
  }

  /// Adds archive `object`'s row and manifest records for sync (ManifestReading.swift); returns
  /// its record and the snapshot row its manifest carries, or nil when its manifest object is
  /// damaged and nothing stands in for it (the damage is recorded; nothing of it is left in the
  /// catalog). Call inside the sync's transaction.
  func ingestManifestForSync(_ object: StoredObject) throws -> (record: ArchiveRecord, snapshot: Snapshot?)? {
    do {
      return try ingestManifestObject(object)
    } catch  where Repository.isManifestDamage(error) {
      damage.objects["manifests/" + object.name] = "\(error)"
      // A local unencrypted archive carries the same manifest as its last member.
      if readsDirectly, let local {
        return try? ingestArchiveManifest(local.path("archives/" + object.name), name: object.name)
      }
      return nil
    }
  }

  /// Snapshot `id` for sync: from its object, or, when that is damaged, from the row its
  /// archive's manifest carries (`carried`, when this sync read that manifest, else read now);
  /// nil when neither can be read.
  func loadSnapshotForSync(_ id: String, archive: String, carried: Snapshot??) throws -> Snapshot? {
    do {
      return try loadSnapshot(id)
    } catch  where Repository.isDamage(error) {
      damage.objects["snapshots/" + id] = "\(error)"
      let snapshot: Snapshot? = if let carried { carried } else { try? manifestSnapshot(archive) }
      return snapshot?.id == id ? snapshot : nil
    }
  }

  /// After a sync that met damaged manifests: the snapshots that need what the catalog lacks
  /// (or what lives in an archive whose manifest is damaged).
  func findAffectedSnapshots() throws {
    let damagedArchives = Set(
      damage.objects.keys.filter { $0.hasPrefix("manifests/") }.map {
        String($0.dropFirst("manifests/".count))
      })
    guard !damagedArchives.isEmpty else { return }
    damage.affected.merge(try snapshotsNeeding(damagedArchives), uniquingKeysWith: { first, _ in first })
  }

  /// Snapshots (by id, with why) that need a tree, content or chunk the catalog lacks, or one
  /// stored in one of `archives`.
  func snapshotsNeeding(_ archives: Set<String>) throws -> [String: String] {
    var result: [String: String] = [:]
    try catalog.reading {
      for snapshot in try catalog.snapshots() {
        if archives.contains(snapshot.archive) {
          result[snapshot.id] = "the manifest of its archive '\(snapshot.archive)' is damaged"
          continue
        }
        if let why = try missingPart(of: snapshot, archives: archives) { result[snapshot.id] = why }
      }
    }
    return result
  }

  /// Why `snapshot` cannot be restored whole from the catalog, or nil.
  private func missingPart(of snapshot: Snapshot, archives: Set<String>) throws -> String? {
    var stack = [snapshot.rootTree]
    var seen: Set<Digest> = []
    while let digest = stack.popLast() {
      guard seen.insert(digest).inserted else { continue }
      let chain = try catalog.treeChain(digest)
      guard !chain.isEmpty, let tree = try? catalog.tree(digest) else {
        return "a tree it needs (\(digest.hex.prefix(16))) was in a damaged manifest"
      }
      if let link = chain.first(where: { archives.contains($0.archive) }) {
        return "a tree it needs is in archive '\(link.archive)', whose manifest is damaged"
      }
      for entry in tree.entries where !entry.isExcluded {
        if entry.type == .directory, let child = entry.digest { stack.append(child) }
        guard entry.type == .file, entry.size > 0, let content = entry.digest else { continue }
        if let blob = try catalog.blobPosition(content) {
          if archives.contains(blob.archive) {
            return "'\(display(entry.name))' is in archive '\(blob.archive)', whose manifest is damaged"
          }
          continue
        }
        guard let list = try? catalog.chunkList(content) else {
          return "the content of '\(display(entry.name))' was in a damaged manifest"
        }
        for chunk in list.chunks {
          guard let location = try catalog.chunk(chunk.digest), !archives.contains(location.archive) else {
            return "a chunk of '\(display(entry.name))' was in a damaged manifest"
          }
        }
      }
    }
    return nil
  }

  /// `check`'s look at the objects: every manifest and snapshot object read as the store holds
  /// it (not this device's cached copy), decoded, and held against the catalog. Returns the
  /// problems: each damaged object, with the snapshots that need it.
  func checkObjects() throws -> (problems: [String], manifests: Int) {
    guard !isLegacy else { return ([], 0) }
    var problems: [String] = []
    var damagedArchives: [String: String] = [:]
    let manifests = try store.list("manifests")
    for object in manifests {
      do {
        // Read in pieces and checked whole (every record, the checksum), nothing kept.
        let record = try readManifestObject(
          object.name, size: object.size, fromCache: false, into: ManifestSummary())
        if let known = try catalog.archive(named: object.name),
          known.size != record.size || known.checksum != record.checksum
        {
          problems.append(
            "The manifest object of archive '\(object.name)' disagrees with the catalog (size or checksum)")
        }
      } catch  where Repository.isDamage(error) {
        damagedArchives[object.name] = "\(error)"
      }
    }
    let needing = damagedArchives.isEmpty ? [:] : try snapshotsNeeding(Set(damagedArchives.keys))
    for (name, why) in damagedArchives.sorted(by: { $0.key < $1.key }) {
      let snapshots = needing.filter { $0.value.contains("'\(name)'") }.keys.sorted()
      problems.append(
        "Object 'manifests/\(name)' is damaged (\(why))"
          + (snapshots.isEmpty ? "" : "; snapshots needing it: " + snapshots.joined(separator: ", ")))
    }
    for object in try store.list("snapshots") {
      do {
        guard let stored = try store.get("snapshots/" + object.name) else { continue }
        let bytes =
          try key.map {
            try ObjectSealing.open(
              stored, name: "snapshots/" + object.name, key: $0, location: store.location + "/snapshots")
          } ?? stored
        _ = try SnapshotObject.decode(bytes, id: object.name)
      } catch  where Repository.isDamage(error) {
        problems.append("Object 'snapshots/\(object.name)' is damaged (\(error))")
      }
    }
    return (problems, manifests.count)
  }
}
