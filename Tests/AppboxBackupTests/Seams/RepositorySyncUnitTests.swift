// Sync (Repository/RepositorySync.swift, RepositoryDamage.swift) without the CLI: two handles
// on one S3 repository, each with a catalog of its own (two devices), see each other's
// snapshots by listing the objects; a damaged manifest or snapshot object is recorded and
// skipped, and costs only the snapshots that need it.

import AppboxCore
import AppboxTestSupport
import Foundation
import Testing

@testable import AppboxBackup
@testable import AppboxRepository

struct RepositorySyncUnitTests {
  /// A handle on `bucket`'s repository with its own cache directory (a device of its own).
  static func handle(_ bucket: String, cache: String) throws -> Repository {
    let cluster = try SwiftCluster.shared()
    let location = try RepositoryLocation.parse(
      "s3://\(bucket)/repo", defaultDirectory: "/nonexistent", environment: cluster.environment)
    return try Repository(
      location: location,
      options: RepositoryOptions(create: true, environment: cluster.environment, cacheDirectory: cache))
  }

  @Test func aSecondHandleSeesTheFirstsSnapshotsAndRestoresThem() throws {
    let fixture = try Fixture()
    let bucket = SwiftCluster.uniqueBucket("sync")
    let first = try Self.handle(bucket, cache: fixture.dir.url("cache-1"))
    let second = try Self.handle(bucket, cache: fixture.dir.url("cache-2"))
    #expect(first.catalogPath != second.catalogPath)
    try fixture.write("Documents/a.txt", "one")
    let expected = try fixture.captureData()
    let made = try first.backup(fixture.app, in: fixture.session)
    #expect(try second.catalog.snapshots().isEmpty)
    try second.sync()
    // (Rows as a catalog holds them: a time read back from one may differ from the backup's
    // `Date` in its last bit.)
    #expect(try second.catalog.snapshots() == first.catalog.snapshots())
    #expect(try second.catalog.snapshots().map(\.id) == [made.snapshot.id])
    #expect(try CatalogContents(second.catalog).differences(from: CatalogContents(first.catalog)) == [])
    // The second device's snapshot lands in the first's catalog after its own, and content
    // the first stored is not stored again.
    try fixture.write("Documents/b.txt", "two")
    let next = try second.backup(fixture.app, in: fixture.session)
    #expect(next.snapshot.kind == .incremental && next.snapshot.bytesAdded == 3)
    try first.sync()
    #expect(try first.catalog.snapshots().map(\.id) == [made.snapshot.id, next.snapshot.id])
    try FileManager.default.removeItem(atPath: fixture.path("Documents/b.txt"))
    try fixture.write("Documents/a.txt", "changed since")
    _ = try second.restore(fixture.app.bundleIdentifier, snapshot: made.snapshot.id, in: fixture.session)
    expectSame(expected, try fixture.captureData())
  }

  @Test func aDamagedObjectIsRecordedAndSkippedAndCostsOnlyItsSnapshots() throws {
    let fixture = try Fixture()
    let bucket = SwiftCluster.uniqueBucket("sync")
    let writer = try Self.handle(bucket, cache: fixture.dir.url("cache-w"))
    try fixture.write("Documents/a.txt", "kept")
    let expected = try fixture.captureData()
    let good = try writer.backup(fixture.app, in: fixture.session).snapshot
    try fixture.write("Documents/b.txt", "lost with its manifest")
    let damaged = try writer.backup(fixture.app, in: fixture.session).snapshot
    try fixture.write("Documents/c.txt", "its snapshot object is damaged")
    let patched = try writer.backup(fixture.app, in: fixture.session).snapshot
    // A flipped bit in one manifest object, garbage for one snapshot object.
    var manifest = try #require(try writer.store.get("manifests/" + damaged.archive))
    manifest[manifest.count / 2] ^= 0x40
    try writer.store.put("manifests/" + damaged.archive, manifest)
    try writer.store.put("snapshots/" + patched.id, Array("not a snapshot object".utf8))

    let reader = try Self.handle(bucket, cache: fixture.dir.url("cache-r"))
    #expect(
      reader.damage.objects.keys.sorted() == ["manifests/" + damaged.archive, "snapshots/" + patched.id])
    // The snapshot whose manifest is damaged is not in the catalog but still listed, with why.
    #expect(try reader.catalog.snapshots().map(\.id) == [good.id, patched.id])
    #expect(reader.damage.unlisted.map(\.id) == [damaged.id])
    let listing = try reader.listing()
    #expect(listing.map(\.snapshot.id) == [good.id, patched.id, damaged.id])
    #expect(listing.last?.damage?.contains(damaged.archive) == true)
    // The damaged snapshot object was replaced by the row its archive's manifest carries.
    #expect(try reader.catalog.snapshot(id: patched.id) == writer.catalog.snapshot(id: patched.id))
    #expect(throws: BackupError.self) {
      _ = try reader.restore(fixture.app.bundleIdentifier, snapshot: damaged.id, in: fixture.session)
    }
    _ = try reader.restore(fixture.app.bundleIdentifier, snapshot: good.id, in: fixture.session)
    expectSame(expected, try fixture.captureData())
  }
}
