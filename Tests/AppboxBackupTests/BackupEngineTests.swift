import AppboxArchive
import AppboxContainer
import AppboxCore
import AppboxCrypto
import AppboxTestSupport
import Foundation
import Glibc
import Testing

@testable import AppboxBackup
@testable import AppboxRepository

/// Member paths of an archive, in order.
func memberPaths(_ path: String) throws -> [String] {
  let reader = try ArchiveReader(path: path)
  var paths: [String] = []
  while let entry = try reader.nextEntry() { paths.append(entry.displayPath) }
  return paths
}

struct BackupEngineTests {
  @Test func fullThenIncrementalThenNoChange() throws {
    let fixture = try Fixture()
    try fixture.write("Documents/a.txt", "alpha")
    try fixture.write("Documents/sub/b.txt", "beta")
    try fixture.write("Library/Preferences/com.example.notes.plist", "prefs")
    try fixture.write("Library/Caches/cache.bin", "cache")
    try fixture.write("tmp/scratch", "scratch")

    let first = try fixture.backup()
    #expect(first.snapshot.kind == .full)
    #expect(first.snapshot.files == 4)  // a.txt, b.txt, the plist, the metadata file
    let members = try memberPaths(first.archivePath)
    #expect(members.contains("Documents/a.txt") && members.contains("Notes.app/Notes"))
    #expect(!members.contains { $0.hasPrefix("tmp") || $0.hasPrefix("Library/Caches") })
    #expect(members.last == ".appbox/manifest")
    let catalog = fixture.repository.catalog
    let trees = try catalog.count("trees")
    let blobs = try catalog.count("blobs")

    try fixture.trustSnapshots()
    let same = try fixture.backup()
    #expect(same.snapshot.kind == .incremental)
    #expect(same.snapshot.parent == first.snapshot.id)
    #expect(same.newTrees == 0 && same.newBlobs == 0 && same.snapshot.bytesAdded == 0)
    #expect(same.snapshot.rootTree == first.snapshot.rootTree)
    #expect(try memberPaths(same.archivePath) == [".appbox/manifest"])
    #expect(try catalog.count("trees") == trees && catalog.count("blobs") == blobs)
    #expect(try catalog.count("snapshots") == 2 && catalog.count("archives") == 2)
    let size = try FileManager.default.attributesOfItem(atPath: same.archivePath)[.size] as? Int ?? 0
    #expect(size < 8192)

    try fixture.write("Documents/a.txt", "alpha, changed")
    try fixture.write("Documents/new.txt", "new")
    try FileManager.default.removeItem(atPath: fixture.path("Documents/sub/b.txt"))
    try fixture.trustSnapshots()
    let third = try fixture.backup()
    #expect(third.snapshot.kind == .incremental)
    #expect(third.newBlobs == 2)
    #expect(third.snapshot.bytesAdded == Int64("alpha, changed".utf8.count + "new".utf8.count))
    #expect(third.snapshot.files == 4)
    let changed = try memberPaths(third.archivePath)
    #expect(changed.contains("Documents/a.txt") && changed.contains("Documents/new.txt"))
    #expect(
      !changed.contains { $0.hasPrefix("Notes.app") || $0 == "Library/Preferences/com.example.notes.plist" })
    let diff = try fixture.repository.diff(first.snapshot, third.snapshot)
    #expect(diff.added == [Array("Documents/new.txt".utf8)])
    #expect(diff.removed == [Array("Documents/sub/b.txt".utf8)])
    #expect(diff.changed == [Array("Documents/a.txt".utf8)])
  }

  @Test func aLargeFileTooRecentToTrustIsHashedAndNotStoredAgain() throws {
    let fixture = try Fixture()
    try fixture.write("Documents/big.bin", bytes: (0..<3_000_000).map { UInt8(truncatingIfNeeded: $0 &* 7) })
    _ = try fixture.backup()
    // No trustSnapshots(): the file's ctime is within the racy window of the first snapshot.
    let again = try fixture.backup()
    #expect(again.snapshot.bytesAdded == 0 && again.newBlobs == 0)
    #expect(!(try memberPaths(again.archivePath).contains("Documents/big.bin")))
    expectSame(try fixture.captureData(), try restoredData(fixture, again.snapshot))
  }

  @Test func theBundleIsStoredOnTheFirstSnapshotAndAfterItsSealChanges() throws {
    let fixture = try Fixture()
    let first = try fixture.backup()
    #expect(try memberPaths(first.archivePath).contains("Notes.app/_CodeSignature/CodeResources"))
    let second = try fixture.backup()
    #expect(!(try memberPaths(second.archivePath).contains { $0.hasPrefix("Notes.app") }))
    // What an update does: a new seal, and bundle files that differ.
    fixture.app.seal = String(repeating: "0", count: 64)
    try fixture.write("Notes.app/Notes", "#!/bin/sh\necho version 2\n", mode: 0o755)
    let third = try fixture.backup()
    let members = try memberPaths(third.archivePath)
    #expect(members.contains("Notes.app/Notes"))
    // Unchanged bundle content is already in the repository and is not stored twice.
    #expect(!members.contains("Notes.app/Info.plist"))
    // A full backup stores all the data again, but not the unchanged bundle ("not on every backup").
    try fixture.write("Documents/a.txt", "a")
    let full = try fixture.backup(BackupOptions(full: true))
    #expect(full.snapshot.kind == .full)
    let fullMembers = try memberPaths(full.archivePath)
    #expect(!fullMembers.contains { $0.hasPrefix("Notes.app") })
    #expect(fullMembers.contains("Documents/a.txt"))
    #expect(fullMembers.contains(".com.apple.mobile_container_manager.metadata.plist"))
  }

  @Test func excludedFilesAndFoldersAreRecordedButNotStored() throws {
    let fixture = try Fixture()
    try fixture.write("Documents/keep.txt", "keep")
    try fixture.write("Documents/big.bin", "not this")
    try fixture.write("Documents/Downloads/file", "nor this")
    try fixture.setAttribute("Documents/big.bin", excludeFromBackupAttribute, [])
    try fixture.setAttribute("Documents/Downloads", excludeFromBackupAttribute, [1])
    let result = try fixture.backup()
    let members = try memberPaths(result.archivePath)
    #expect(members.contains("Documents/keep.txt"))
    #expect(!members.contains { $0.contains("big.bin") || $0.contains("Downloads") })
    let documents = try fixture.repository.catalog.tree(
      try #require(
        try fixture.repository.catalog.tree(result.snapshot.rootTree).entry(named: Array("Documents".utf8))?
          .digest))
    #expect(documents.entry(named: Array("big.bin".utf8))?.isExcluded == true)
    #expect(documents.entry(named: Array("Downloads".utf8))?.isExcluded == true)
    #expect(documents.entry(named: Array("Downloads".utf8))?.digest == nil)
  }

  /// After an update the next backup stores the new bundle, taking each file's digest from the
  /// seal the registry vouches for: files whose content the repository holds are not read.
  @Test func aNewBundleIsStoredWithoutRereadingWhatTheRepositoryHolds() throws {
    let fixture = try Fixture()
    _ = try fixture.backup()
    fixture.app = try #require(try fixture.session.lockApp(bundleIdentifier: fixture.app.bundleIdentifier))
    _ = try fixture.session.update(
      fixture.app, toBundleAt: fixturePath("bundles/Notes-2.0/Notes.app"), allowDowngrade: false
    ) { _ in nil }
    fixture.session.finishDeferredWork()
    fixture.app = try fixture.session.registry.app(fixture.app.bundleIdentifier)
    let read = Recorder()
    var options = BackupOptions()
    options.afterRead = { path, _ in read.add(String(decoding: path, as: UTF8.self)) }
    let result = try fixture.backup(options)
    #expect(read.all.contains("Notes.app/Info.plist"))
    #expect(!read.all.contains("Notes.app/archived-expanded-entitlements.xcent"), "\(read.all)")
    // The snapshot holds the new bundle, restorable and sealed.
    let extracted = TemporaryDirectory("bundle")
    let bundle = try fixture.repository.extractBundle(of: result.snapshot, into: extracted.path)
    #expect(
      try Seal.verify(bundleAt: bundle, expectedDigest: fixture.app.seal) == .valid)
  }

  @Test func aFileThatChangesOnceWhileReadIsReadAgain() throws {
    let fixture = try Fixture()
    let path = try fixture.write("Documents/log.txt", "start")
    let observer = RecordingObserver()
    var options = BackupOptions()
    options.afterRead = { file, attempt in
      if String(decoding: file, as: UTF8.self) == "Documents/log.txt" && attempt == 1 {
        try? FileHandle(forWritingAtPath: path).map { handle in
          handle.seekToEndOfFile()
          handle.write(Data(" more".utf8))
          try handle.close()
        }
      }
    }
    let result = try fixture.backup(options, observer: observer)
    #expect(observer.warnings.isEmpty)
    #expect(result.snapshot.warnings == 0)
    let restored = try restoredData(fixture, result.snapshot)
    #expect(restored[Array("Documents/log.txt".utf8)]?.content == Array("start more".utf8))
  }

  @Test(arguments: [16, 3 << 20])
  func aFileThatKeepsChangingIsKeptWithAWarning(size: Int) throws {
    let fixture = try Fixture()
    let path = try fixture.write("Documents/busy.bin", bytes: [UInt8](repeating: 7, count: size))
    let observer = RecordingObserver()
    var options = BackupOptions()
    options.afterRead = { file, _ in
      guard String(decoding: file, as: UTF8.self) == "Documents/busy.bin" else { return }
      try? FileHandle(forWritingAtPath: path).map { handle in
        handle.seekToEndOfFile()
        handle.write(Data([1]))
        try handle.close()
      }
    }
    let result = try fixture.backup(options, observer: observer)
    #expect(observer.warnings.count == 1)
    #expect(observer.warnings.first?.contains("kept changing") == true)
    #expect(result.snapshot.warnings == 1)
    // Whatever was kept is restorable and verifies.
    let restored = try restoredData(fixture, result.snapshot)
    let content = try #require(restored[Array("Documents/busy.bin".utf8)]?.content)
    #expect(content.count >= size)
    #expect(try fixture.repository.check(readData: true).isClean)
  }

  @Test func aFileDeletedBeforeItIsReadIsLeftOut() throws {
    let fixture = try Fixture()
    try fixture.write("Documents/a.txt", "a")
    let doomed = try fixture.write("Documents/b.txt", "b")
    var options = BackupOptions()
    options.afterRead = { file, _ in
      if String(decoding: file, as: UTF8.self) == "Documents/a.txt" { unlink(doomed) }
    }
    let result = try fixture.backup(options)
    let restored = try restoredData(fixture, result.snapshot)
    #expect(restored[Array("Documents/a.txt".utf8)] != nil)
    #expect(restored[Array("Documents/b.txt".utf8)] == nil)
  }

  @Test func hardLinksAreStoredOnceAndRecordedAsLinks() throws {
    let fixture = try Fixture()
    try fixture.write("Documents/original", "shared content")
    #expect(link(fixture.path("Documents/original"), fixture.path("Documents/alias")) == 0)
    let result = try fixture.backup()
    let reader = try ArchiveReader(path: result.archivePath)
    var types: [String: ArchiveEntryType] = [:]
    while let entry = try reader.nextEntry() { types[entry.displayPath] = entry.type }
    // The first path in name order carries the data; the other links to it.
    #expect(types["Documents/alias"] == .regular)
    #expect(types["Documents/original"] == .hardlink)
    let restored = try restoredData(fixture, result.snapshot)
    #expect(restored[Array("Documents/alias".utf8)]?.hardLinks == [Array("Documents/original".utf8)])
  }

  @Test func aTaggedSnapshotCanBeFoundAgain() throws {
    let fixture = try Fixture()
    let tagged = try fixture.backup(BackupOptions(tag: "pre-update"))
    _ = try fixture.backup()
    let found = try fixture.repository.latestSnapshot(app: fixture.app.bundleIdentifier, tag: "pre-update")
    #expect(found?.id == tagged.snapshot.id && found?.tag == "pre-update")
    #expect(try fixture.repository.latestSnapshot(app: fixture.app.bundleIdentifier)?.tag == nil)
  }

  @Test func keychainItemsTravelInTheArchive() throws {
    let fixture = try Fixture()
    let items: [UInt8] = Array("sealed keychain bytes".utf8)
    let result = try fixture.backup(BackupOptions(keychain: FakeKeychain(exported: items)))
    #expect(result.snapshot.keychainOffset != nil)
    #expect(try memberPaths(result.archivePath).suffix(2) == [".appbox/keychain", ".appbox/manifest"])
    let keychain = FakeKeychain(exported: nil, outcome: .otherDevice(reason: "made on another device"))
    let restored = try fixture.repository.restore(
      fixture.app.bundleIdentifier, in: fixture.session, keychain: keychain)
    #expect(keychain.imports == [items])
    #expect(restored.keychain == .otherDevice(reason: "made on another device"))
    let none = try fixture.backup(BackupOptions(keychain: FakeKeychain(exported: nil)))
    #expect(none.snapshot.keychainOffset == nil)
  }

  @Test func aSecondWriterOfTheSameAppIsBusy() throws {
    let fixture = try Fixture()
    let impatient = try Repository(path: fixture.repository.path, lockWait: LockWait(seconds: 0.3)!)
    do {
      let held = try fixture.repository.lockApp(fixture.app.bundleIdentifier)
      // The lock wait the repository was given is the one its app lock waits.
      let start = ContinuousClock.now
      #expect {
        try impatient.backup(fixture.app, in: fixture.session)
      } throws: { ($0 as? LockBusyError)?.kind == .busy }
      #expect(ContinuousClock.now - start >= .milliseconds(300))
      withExtendedLifetime(held) {}
    }
    #expect(try impatient.backup(fixture.app, in: fixture.session).snapshot.kind == .full)
  }

  @Test func debrisOfAKilledBackupIsRemovedByTheNext() throws {
    let fixture = try Fixture()
    let archives = fixture.repository.archivesPath
    #expect(
      FileManager.default.createFile(atPath: archives + "/.tmp-deadbeef.tar", contents: Data("partial".utf8)))
    #expect(
      FileManager.default.createFile(atPath: archives + "/cafebabe.tar", contents: Data("uncommitted".utf8)))
    #expect(try fixture.repository.unknownArchiveFiles().count == 2)
    #expect(try fixture.repository.check().isClean)
    let result = try fixture.backup()
    #expect(try FileManager.default.contentsOfDirectory(atPath: archives) == [result.snapshot.archive])
  }
}

/// Restores `snapshot`'s data into a fresh directory and captures it.
func restoredData(_ fixture: Fixture, _ snapshot: Snapshot) throws -> [[UInt8]: CapturedEntry] {
  let target = fixture.dir.url("restored-\(UUID().uuidString)")
  #expect(mkdir(target, 0o755) == 0)
  let fd = try FileDescriptor.open(target, O_RDONLY | O_DIRECTORY)
  try fd.closeAfter { _ = try fixture.repository.materialize(snapshot, part: .data, into: $0) }
  return try captureTree(target)
}

/// Content is hashed on the reader's thread or on the archiver's, whichever has room; both
/// placements must record the same digests and restore the same bytes.
struct HashPlacementTests {
  @Test(arguments: [true, false])
  func digestsAndRestoresAreTheSameWhereverHashingRuns(_ onReader: Bool) throws {
    let fixture = try Fixture()
    try fixture.write("Documents/small.txt", "small")
    try fixture.write("Documents/empty", "")
    // Larger than one 256 KiB buffer: streamed in chunks.
    try fixture.write(
      "Documents/large.bin", bytes: (0..<1_000_003).map { UInt8(truncatingIfNeeded: $0 &* 31) })
    var options = BackupOptions()
    options.hashOnReader = onReader
    let result = try fixture.backup(options)
    let locations = try fixture.repository.catalog.blobs(inArchive: result.snapshot.archive)
    let expected = try Dictionary(
      uniqueKeysWithValues: ["Documents/small.txt", "Documents/large.bin"].map { path in
        (Array(path.utf8), SHA256.hash(try Data(contentsOf: URL(fileURLWithPath: fixture.path(path)))))
      })
    for (path, digest) in expected {
      #expect(
        locations.contains { $0.path == path && $0.digest == digest },
        "\(String(decoding: path, as: UTF8.self))")
    }
    expectSame(try fixture.captureData(), try restoredData(fixture, result.snapshot))
  }
}

/// Strings recorded from another thread.
final class Recorder: @unchecked Sendable {
  private let lock = NSLock()
  private var items: [String] = []
  func add(_ item: String) { lock.withLock { items.append(item) } }
  var all: [String] { lock.withLock { items } }
}
