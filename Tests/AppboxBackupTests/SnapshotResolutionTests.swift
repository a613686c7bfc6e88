import AppboxCrypto
import AppboxTestSupport
import Foundation
import Testing

@testable import AppboxBackup
@testable import AppboxRepository

/// Snapshot ids: whole, unique prefixes, `latest`, ambiguity.
struct SnapshotResolutionTests {
  /// A repository whose catalog holds snapshots of the given ids (apps alternate when asked).
  func repository(ids: [(String, String)]) throws -> (TemporaryDirectory, Repository) {
    let dir = TemporaryDirectory("resolve")
    let repository = try Repository(path: dir.url("repo"), environment: [:])
    try repository.catalog.insert(
      ArchiveRecord(name: "a.tar", size: 0, checksum: 0, compression: .none, created: Date()))
    for (index, (id, app)) in ids.enumerated() {
      try repository.catalog.insert(
        Snapshot(
          id: id, app: app, device: "D", containerID: "C", version: "1", bundleDirectoryName: "Notes.app",
          seal: "", time: Date(timeIntervalSince1970: 1_700_000_000 + Double(index)), kind: .full, tag: nil,
          parent: nil, rootTree: SHA256.hash([UInt8(index)]), files: 0, bytes: 0, bytesAdded: 0,
          archive: "a.tar", keychainOffset: nil, warnings: 0))
    }
    return (dir, repository)
  }

  @Test func aUniquePrefixOfFourOrMoreDigitsNamesItsSnapshot() throws {
    let (dir, repository) = try repository(ids: [
      ("abcd1111", "com.a"), ("abcd2222", "com.b"), ("ef019999", "com.a"),
    ])
    defer { withExtendedLifetime(dir) {} }
    #expect(try repository.snapshot("ef01").id == "ef019999")
    #expect(try repository.snapshot("ABCD1").id == "abcd1111")
    #expect(try repository.snapshot("abcd2222").id == "abcd2222")
    // Scoped by app, a prefix two apps share is unique.
    #expect(try repository.snapshot("abcd", app: "com.b").id == "abcd2222")
    #expect(try repository.snapshot("latest", app: "com.a").id == "ef019999")
  }

  @Test func anAmbiguousPrefixIsAUsageErrorListingTheCandidates() throws {
    let (dir, repository) = try repository(ids: [("abcd1111", "com.a"), ("abcd2222", "com.b")])
    defer { withExtendedLifetime(dir) {} }
    do {
      _ = try repository.snapshot("abcd")
      Issue.record("an ambiguous prefix resolved")
    } catch let error as BackupError {
      #expect(error.code == .invalidRequest && error.kind == .invalidArgument)
      #expect(error.message.contains("abcd1111 (com.a,") && error.message.contains("abcd2222 (com.b,"))
    }
    #expect(
      throws: BackupError(.invalidRequest, "Snapshot id 'abc' is too short: give at least 4 hex digits")
    ) {
      try repository.snapshot("abc")
    }
    #expect { try repository.snapshot("9999") } throws: { ($0 as? BackupError)?.code == .notFound }
    #expect { try repository.snapshot("latest") } throws: { ($0 as? BackupError)?.code == .invalidRequest }
    #expect { try repository.snapshot("abcd1111", app: "com.b") } throws: {
      ($0 as? BackupError)?.code == .notFound
    }
  }
}
