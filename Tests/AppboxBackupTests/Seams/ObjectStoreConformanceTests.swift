// One suite for every object store (as restic's internal/backend/test runs one suite against
// every backend): the local directory, the in-memory store and the real OpenStack Swift
// cluster through the S3 store must keep the same promises (Repository/ObjectStore.swift):
// whole objects in and out, replacing puts, nil for what is missing, listings of one
// directory in name order, names with odd bytes, large streamed objects, positional reads,
// concurrent writers, and nothing half-visible: a reader sees an object whole or not at all.

import AppboxCore
import AppboxTestSupport
import Foundation
import Testing

@testable import AppboxBackup
@testable import AppboxRepository

struct ObjectStoreConformanceTests {
  @Test(arguments: StoreKind.allCases)
  func createMakesTheStoreExistAndIsIdempotent(_ kind: StoreKind) throws {
    let fresh = try StoreUnderTest(kind, create: false)
    #expect(try fresh.store.exists() == false)
    try fresh.store.create()
    #expect(try fresh.store.exists())
    try fresh.store.create()
    #expect(try fresh.store.exists())
    #expect(try fresh.store.list("snapshots").isEmpty)
  }

  @Test(arguments: StoreKind.allCases)
  func putGetSizeListAndDelete(_ kind: StoreKind) throws {
    let subject = try StoreUnderTest(kind)
    defer { withExtendedLifetime(subject) {} }  // its directory lives as long as the test
    let store = subject.store
    let bytes = Array("a snapshot object".utf8)
    try store.put("snapshots/0a1b2c3d", bytes)
    try store.put("config", Array("{}\n".utf8))
    #expect(try store.get("snapshots/0a1b2c3d") == bytes)
    #expect(try store.size(of: "snapshots/0a1b2c3d") == Int64(bytes.count))
    #expect(try store.get("config") == Array("{}\n".utf8))
    let listed = try store.list("snapshots")
    #expect(listed.map(\.name) == ["0a1b2c3d"])
    #expect(listed.map(\.size) == [Int64(bytes.count)])
    // Listings carry the store's time (the prune lock compares the two).
    #expect(abs(try #require(listed.first).modified.timeIntervalSince(store.now)) < 120)
    try store.delete(["snapshots/0a1b2c3d"])
    #expect(try store.get("snapshots/0a1b2c3d") == nil)
    #expect(try store.size(of: "snapshots/0a1b2c3d") == nil)
    #expect(try store.list("snapshots").isEmpty)
    #expect(try store.get("config") == Array("{}\n".utf8))
  }

  @Test(arguments: StoreKind.allCases)
  func aPutReplacesTheWholeObject(_ kind: StoreKind) throws {
    let subject = try StoreUnderTest(kind)
    defer { withExtendedLifetime(subject) {} }  // its directory lives as long as the test
    let store = subject.store
    try store.put("locks/holder", patternBytes(70_000, seed: 1))
    try store.put("locks/holder", Array("short".utf8))
    #expect(try store.get("locks/holder") == Array("short".utf8))
    #expect(try store.size(of: "locks/holder") == 5)
    #expect(try store.list("locks").map(\.size) == [5])
    try store.put("locks/holder", [])
    #expect(try store.get("locks/holder") == [])
  }

  @Test(arguments: StoreKind.allCases)
  func missingObjectsAreNilAndDeletingThemIsNoError(_ kind: StoreKind) throws {
    let subject = try StoreUnderTest(kind)
    defer { withExtendedLifetime(subject) {} }  // its directory lives as long as the test
    let store = subject.store
    #expect(try store.get("manifests/00000000.tar") == nil)
    #expect(try store.size(of: "manifests/00000000.tar") == nil)
    #expect(try store.list("manifests").isEmpty)
    #expect(try store.list("no-such-directory").isEmpty)
    try store.delete(["manifests/00000000.tar"])
    try store.delete(["manifests/00000001.tar", "manifests/00000002.tar"])
    try store.put("manifests/present.tar", [1])
    try store.delete(["manifests/gone.tar", "manifests/present.tar"])
    #expect(try store.list("manifests").isEmpty)
    // Reading a missing object fails (when the reader is made or at its first read) with the
    // not-found error, naming the object.
    var thrown: (any Error)?
    do {
      let reader = try store.reader("archives/00000000.tar", size: 100)
      _ = try readOnce(reader, at: 0, count: 100)
    } catch {
      thrown = error
    }
    let error = try #require(thrown as? any AppboxFailure, "\(String(describing: thrown))")
    #expect(error.description.contains("00000000.tar"), "\(error)")
    withKnownIssue(
      "the local store calls a missing object a damaged archive (65); S3 and memory say not found (66)"
    ) {
      #expect(error.kind == .notFound, "\(error)")
    } when: {
      kind == .local
    }
  }

  @Test(arguments: StoreKind.allCases)
  func listingsHoldOnlyTheDirectoryItselfInNameOrder(_ kind: StoreKind) throws {
    let subject = try StoreUnderTest(kind)
    defer { withExtendedLifetime(subject) {} }  // its directory lives as long as the test
    let store = subject.store
    for name in ["archives/b.tar", "archives/a.tar", "archives/c.tar.zst", "archives-old/x.tar", "archivesq"]
    {
      try store.put(name, Array(name.utf8))
    }
    try store.put("archives/nested/deeper.tar", [1, 2, 3])
    try store.put("manifests/a.tar", [9])
    let listed = try store.list("archives")
    #expect(listed.map(\.name) == ["a.tar", "b.tar", "c.tar.zst"])
    #expect(listed.map(\.size) == [14, 14, 18])
    #expect(try store.names("archives") == ["a.tar", "b.tar", "c.tar.zst"])
    #expect(try store.names("archives/nested") == ["deeper.tar"])
    #expect(try store.names("archive").isEmpty)
    #expect(try store.list("archives-old").map(\.name) == ["x.tar"])
    #expect(try store.list("archives/nested").map(\.name) == ["deeper.tar"])
    #expect(try store.list("manifests").map(\.name) == ["a.tar"])
    #expect(try store.list("archive").isEmpty)
  }

  @Test(arguments: StoreKind.allCases)
  func storesSideBySideDoNotSeeEachOthersObjects(_ kind: StoreKind) throws {
    let subject = try StoreUnderTest(kind)
    let neighbour = try subject.sibling()
    try subject.store.put("snapshots/mine", [1])
    try neighbour.put("snapshots/theirs", [2])
    #expect(try subject.store.list("snapshots").map(\.name) == ["mine"])
    #expect(try neighbour.list("snapshots").map(\.name) == ["theirs"])
    #expect(try subject.store.get("snapshots/theirs") == nil)
    try subject.store.delete(["snapshots/theirs"])
    #expect(try neighbour.get("snapshots/theirs") == [2])
  }

  /// Names as appbox makes them are hex ids, but the store must not care: every byte a
  /// component may hold on a file system and in an S3 key, except a leading dot (local
  /// temp files) and '/'.
  static let oddNames = [
    "space in it", "plus+sign", "percent%20encoded", "ampersand&equals=1", "question?mark",
    "hash#tag", "tilde~", "star*", "quote'double\"", "colon:semicolon;", "comma,", "brackets[](){}<>",
    "dollar$at@caret^", "backtick`pipe|", "back\\slash", "ünïcødé-名前-🗄", "trailing.dot.", "x",
    String(repeating: "long", count: 50),
  ]

  @Test(arguments: StoreKind.allCases)
  func namesWithOddBytesRoundTrip(_ kind: StoreKind) throws {
    let subject = try StoreUnderTest(kind)
    defer { withExtendedLifetime(subject) {} }  // its directory lives as long as the test
    let store = subject.store
    for name in Self.oddNames { try store.put("keys/" + name, Array(name.utf8)) }
    for name in Self.oddNames {
      #expect(try store.get("keys/" + name) == Array(name.utf8), "\(name)")
      #expect(try store.size(of: "keys/" + name) == Int64(name.utf8.count), "\(name)")
    }
    let listed = try store.list("keys")
    #expect(Set(listed.map(\.name)) == Set(Self.oddNames))
    #expect(listed.count == Self.oddNames.count)
    let name = Self.oddNames[0]
    var reader = try store.reader("keys/" + name, size: Int64(name.utf8.count))
    #expect(try readAll(reader) == Array(name.utf8))
    reader = try store.reader("keys/" + Self.oddNames[15], size: Int64(Self.oddNames[15].utf8.count))
    #expect(try readAll(reader, from: 3) == Array(Array(Self.oddNames[15].utf8)[3...]))
    try store.delete(Self.oddNames.map { "keys/" + $0 })
    #expect(try store.list("keys").isEmpty)
  }

  @Test(arguments: StoreKind.allCases)
  func emptyObjectsExistAndAreEmpty(_ kind: StoreKind) throws {
    let subject = try StoreUnderTest(kind)
    defer { withExtendedLifetime(subject) {} }  // its directory lives as long as the test
    let store = subject.store
    try store.put("garbage/1a2b3c4d.tar", [])
    #expect(try store.get("garbage/1a2b3c4d.tar") == [])
    #expect(try store.size(of: "garbage/1a2b3c4d.tar") == 0)
    #expect(try store.list("garbage").map(\.size) == [0])
    let upload = try store.upload("archives/empty.tar")
    #expect(try upload.commit() == 0)
    #expect(try store.get("archives/empty.tar") == [])
    #expect(try readAll(try store.reader("archives/empty.tar", size: 0)).isEmpty)
  }

  @Test(arguments: StoreKind.allCases)
  func putAllWritesEveryObject(_ kind: StoreKind) throws {
    let subject = try StoreUnderTest(kind)
    defer { withExtendedLifetime(subject) {} }  // its directory lives as long as the test
    let store = subject.store
    let objects = (0..<5).map { index in
      (
        name: (index < 3 ? "snapshots/" : "manifests/") + "object\(index)",
        bytes: patternBytes(100 + index, seed: 7)
      )
    }
    try store.putAll(objects)
    for object in objects { #expect(try store.get(object.name) == object.bytes, "\(object.name)") }
    #expect(try store.list("snapshots").count == 3)
    #expect(try store.list("manifests").count == 2)
  }
}

/// The local store's name-only listing (one read of the directory, the types from `d_type`)
/// names exactly what its full listing names: regular files, and not a temp file, a dot-file,
/// a subdirectory, a symlink (even to an object) or a FIFO.
@Test func aLocalDirectorysNamesAreItsListingsNames() throws {
  let directory = TemporaryDirectory("names")
  let store = LocalObjectStore(root: directory.url("repo"))
  try store.create()
  try store.put("archives/a.tar", [1])
  try store.put("archives/b.tar.zst", [2, 3])
  let archives = directory.url("repo") + "/archives"
  #expect(FileManager.default.createFile(atPath: archives + "/.appbox-upload-x", contents: Data([9])))
  #expect(FileManager.default.createFile(atPath: archives + "/.hidden", contents: Data([9])))
  try FileManager.default.createDirectory(atPath: archives + "/sub.tar", withIntermediateDirectories: false)
  try FileManager.default.createSymbolicLink(atPath: archives + "/link.tar", withDestinationPath: "a.tar")
  #expect(mkfifo(archives + "/fifo.tar", 0o600) == 0)
  #expect(try store.names("archives") == ["a.tar", "b.tar.zst"])
  #expect(try store.list("archives").map(\.name) == ["a.tar", "b.tar.zst"])
  #expect(try store.names("missing").isEmpty)
}
