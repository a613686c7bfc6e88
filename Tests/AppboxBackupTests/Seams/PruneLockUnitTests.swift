// The prune lock of an S3 repository (Repository/PruneLock.swift) without the CLI, on the
// real Swift cluster: taking it writes one lock object naming this process; a second taker
// is refused as busy (75) naming the holder and leaves no object behind; the holder keeps its
// object fresh; a lock of a dead process, or one not refreshed for the stale time, is taken
// over; releasing deletes the object, and it stays deleted.

import AppboxCore
import AppboxTestSupport
import Foundation
import Glibc
import Testing

@testable import AppboxBackup
@testable import AppboxRepository

struct PruneLockUnitTests {
  /// A handle on a fresh repository in its own bucket, with `environment` added.
  static func repository(
    _ directory: TemporaryDirectory, bucket: String, cache: String = "cache",
    environment: [String: String] = [:]
  ) throws -> Repository {
    let cluster = try SwiftCluster.shared()
    // The default settle time (1 s): Swift's s3api stamps objects to the second (rounded up),
    // so a shorter one would let two takers that wrote in the same second both win.
    let env = cluster.environment.merging(environment) { $1 }
    let location = try RepositoryLocation.parse(
      "s3://\(bucket)/repo", defaultDirectory: "/nonexistent", environment: env)
    return try Repository(
      location: location,
      options: RepositoryOptions(create: true, environment: env, cacheDirectory: directory.url(cache)))
  }

  static func record(_ bytes: [UInt8]?) -> [String: Any] {
    bytes.flatMap { try? JSONSerialization.jsonObject(with: Data($0)) as? [String: Any] } ?? [:]
  }

  static func hostName() -> String {
    var name = [CChar](repeating: 0, count: 256)
    gethostname(&name, name.count - 1)
    return String(decoding: name.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
  }

  @Test func takingWritesOneLockObjectAndASecondTakerIsBusyNamingTheHolder() throws {
    let directory = TemporaryDirectory("prune-lock")
    let bucket = SwiftCluster.uniqueBucket("lock")
    let first = try Self.repository(directory, bucket: bucket, cache: "one")
    let second = try Self.repository(directory, bucket: bucket, cache: "two")
    do {
      let held = try PruneLock.acquire(in: first, purpose: "forget")
      #expect(try first.store.list("locks").map(\.name) == [held.name])
      let owner = Self.record(try first.store.get("locks/" + held.name))
      #expect(owner["pid"] as? Int == Int(getpid()) && owner["host"] as? String == Self.hostName())
      #expect(owner["purpose"] as? String == "forget")
      try held.verify()
      var thrown: (any Error)?
      do { _ = try PruneLock.acquire(in: second, purpose: "forget") } catch { thrown = error }
      let busy = try #require(thrown as? BackupError)
      #expect(busy.code == .busy && busy.kind == .busy, "\(busy)")
      #expect(
        busy.message.contains("locks/\(held.name)") && busy.message.contains("\"pid\":\(getpid())"), "\(busy)"
      )
      // The loser took its own object away again.
      #expect(try first.store.list("locks").map(\.name) == [held.name])
      withExtendedLifetime(held) {}
    }
    // Released: the object is gone and the second taker gets it.
    #expect(try first.store.list("locks").isEmpty)
    let next = try PruneLock.acquire(in: second, purpose: "forget")
    #expect(try second.store.list("locks").map(\.name) == [next.name])
  }

  @Test func theHolderRefreshesItsLockAndAReleasedLockStaysReleased() throws {
    let directory = TemporaryDirectory("prune-lock")
    let bucket = SwiftCluster.uniqueBucket("lock")
    // Stale after 2 s: the holder rewrites its object every half second.
    let repository = try Self.repository(
      directory, bucket: bucket, environment: ["APPBOX_S3_LOCK_STALE": "2"])
    var name = ""
    do {
      let held = try PruneLock.acquire(in: repository, purpose: "forget")
      name = held.name
      var refreshed = false
      for _ in 0..<200 where !refreshed {
        usleep(50_000)
        refreshed =
          Self.record(try repository.store.get("locks/" + held.name))["purpose"] as? String
          == "forget (refreshed)"
      }
      #expect(refreshed, "the lock object was never rewritten")
      #expect(try repository.store.list("locks").map(\.name) == [held.name])
      try held.verify()
      withExtendedLifetime(held) {}
    }
    #expect(try repository.store.list("locks").isEmpty)
    // Longer than a refresh interval: no late refresh brings the object back.
    usleep(1_200_000)
    #expect(try repository.store.get("locks/" + name) == nil)
    #expect(try repository.store.list("locks").isEmpty)
  }

  @Test func aLockOfADeadProcessOnThisHostIsTakenOver() throws {
    let directory = TemporaryDirectory("prune-lock")
    let repository = try Self.repository(directory, bucket: SwiftCluster.uniqueBucket("lock"))
    let gone = try spawnProcess("/bin/true", [])
    #expect(gone.wait() == 0)
    let body = try JSONSerialization.data(
      withJSONObject: [
        "host": Self.hostName(), "pid": Int(gone.pid), "purpose": "forget", "created": "2020-01-01T00:00:00Z",
      ],
      options: [.sortedKeys])
    try repository.store.put("locks/ffffffffffffffffffffffffffffffff", Array(body))
    let held = try PruneLock.acquire(in: repository, purpose: "forget")
    #expect(try repository.store.list("locks").map(\.name) == [held.name])
    withExtendedLifetime(held) {}
  }

  @Test func aLockNotRefreshedForTheStaleTimeIsTakenOverAndAFreshOneIsNot() throws {
    let directory = TemporaryDirectory("prune-lock")
    let bucket = SwiftCluster.uniqueBucket("lock")
    let repository = try Self.repository(
      directory, bucket: bucket, environment: ["APPBOX_S3_LOCK_STALE": "2"])
    // Another host's lock: its process cannot be looked up, only its age counts.
    let body = try JSONSerialization.data(
      withJSONObject: [
        "host": "elsewhere.invalid", "pid": 1, "purpose": "forget", "created": "2020-01-01T00:00:00Z",
      ],
      options: [.sortedKeys])
    // Named to sort first: written in the same second as a taker's, it is still the older.
    let foreign = "locks/00000000000000000000000000000000"
    try repository.store.put(foreign, Array(body))
    // Fresh (by the default stale time of 600 s), it holds: the taker is busy after 5 s.
    let patient = try Self.repository(directory, bucket: bucket, cache: "patient")
    #expect(throws: BackupError(.busy, "")) {
      do { _ = try PruneLock.acquire(in: patient, purpose: "forget") } catch let error as BackupError {
        throw BackupError(error.code, "")
      }
    }
    #expect(try repository.store.list("locks").map { "locks/" + $0.name } == [foreign])
    // Once the store's clock says it has not been refreshed for the stale time, it is deleted
    // and the lock taken.
    while let object = try repository.store.list("locks").first,
      repository.store.now.timeIntervalSince(object.modified) <= 2.5
    {
      usleep(100_000)
    }
    let held = try PruneLock.acquire(in: repository, purpose: "forget")
    #expect(try repository.store.get(foreign) == nil)
    #expect(try repository.store.list("locks").map(\.name) == [held.name])
    withExtendedLifetime(held) {}
  }
}
