import AppboxCore
import AppboxKeychain
import AppboxStore
import AppboxTestSupport
import Foundation
import Glibc
import Testing

/// What lands on disk: modes, the device key, encryption at rest, and concurrent writers.
struct KeychainStorageTests {
  func mode(_ path: String) -> mode_t {
    var st = stat()
    return lstat(path, &st) == 0 ? st.st_mode & 0o7777 : 0
  }

  @Test func directoryIsPrivateAndKeyAndDatabaseAre0600() throws {
    let fixture = try KeychainFixture()
    #expect(mode(fixture.path) == 0o700)
    #expect(mode(fixture.path + "/device.key") == 0o600)
    #expect(mode(fixture.path + "/keychain.db") == 0o600)
    let key = try #require(FileManager.default.contents(atPath: fixture.path + "/device.key"))
    #expect(key.count == 32)
    // A directory someone widened is made private again on open.
    #expect(chmod(fixture.path, 0o755) == 0)
    _ = try fixture.reopen()
    #expect(mode(fixture.path) == 0o700)
  }

  @Test func theKeyIsMadeOnceEvenWhenOpenersRace() throws {
    let directory = TemporaryDirectory("keychain-race")
    let path = directory.url("Keychains")
    let failures = Failures()
    DispatchQueue.concurrentPerform(iterations: 8) { _ in
      do { _ = try Keychain(directory: path) } catch { failures.append("\(error)") }
    }
    #expect(failures.all.isEmpty)
    let key = try #require(FileManager.default.contents(atPath: path + "/device.key"))
    #expect(key.count == 32)
    let names = try FileManager.default.contentsOfDirectory(atPath: path)
    #expect(!names.contains { $0.contains(".tmp-") }, "no temp key left behind: \(names)")
    // Everyone agreed on that key: an item added by one connection opens in another.
    try Keychain(directory: path).add(item(), for: Clients.notes)
    #expect(
      try Keychain(directory: path).find(KeychainQuery(returnsData: true), for: Clients.notes)[0].data != nil)
  }

  @Test func aMissingKeyIsNotReplacedWhileItemsNeedIt() throws {
    let fixture = try KeychainFixture()
    try fixture.keychain.add(item(), for: Clients.notes)
    #expect(unlink(fixture.path + "/device.key") == 0)
    #expect(status { _ = try fixture.reopen() } == .corrupt)
    #expect(!FileManager.default.fileExists(atPath: fixture.path + "/device.key"))
  }

  @Test func aDamagedKeyFileIsCorrupt() throws {
    let fixture = try KeychainFixture()
    try Data(repeating: 1, count: 31).write(to: URL(fileURLWithPath: fixture.path + "/device.key"))
    #expect(status { _ = try fixture.reopen() } == .corrupt)
    try Data(repeating: 1, count: 5000).write(to: URL(fileURLWithPath: fixture.path + "/device.key"))
    #expect(status { _ = try fixture.reopen() } == .corrupt)
    #expect(unlink(fixture.path + "/device.key") == 0)
    #expect(symlink("/etc/hostname", fixture.path + "/device.key") == 0)
    #expect(status { _ = try fixture.reopen() } == .corrupt)
  }

  @Test func aKeyFromAnotherDeviceCannotOpenTheItems() throws {
    let fixture = try KeychainFixture()
    try fixture.keychain.add(item(), for: Clients.notes)
    try Data(repeating: 7, count: 32).write(to: URL(fileURLWithPath: fixture.path + "/device.key"))
    let other = try fixture.reopen()
    #expect(status { _ = try other.find(KeychainQuery(), for: Clients.notes) } == .corrupt)
    // A row that no longer opens can still be deleted.
    #expect(try other.delete(KeychainQuery(service: "svc"), for: Clients.notes) == 1)
  }

  @Test func aSealedValueMovedToAnotherRowFailsAuthentication() throws {
    let fixture = try KeychainFixture()
    try fixture.keychain.add(item("bank", "alice", data: "alice's pin"), for: Clients.notes)
    try fixture.keychain.add(item("bank", "mallory", data: "mallory's pin"), for: Clients.notes)
    // Copy Alice's sealed secret over Mallory's row, as someone with write access to the file could.
    let database = try Database(path: fixture.path + "/keychain.db")
    try database.execute(
      "UPDATE items SET sealed = (SELECT sealed FROM items WHERE account = 'alice') WHERE account = 'mallory'"
    )
    let query = KeychainQuery(service: "bank", account: "mallory", returnsData: true)
    let error = try #require(throws: KeychainError.self) {
      try fixture.keychain.find(query, for: Clients.notes)
    }
    #expect(error.code == .corrupt && error.kind == .badData)
    #expect(error.description.contains("mallory"))
  }

  @Test func noSecretIsEverOnDiskInPlainText() throws {
    let fixture = try KeychainFixture()
    let root = fixture.directory.path
    let first = "first-\(UUID().uuidString)"
    let second = "second-\(UUID().uuidString)"
    let label = "label-\(UUID().uuidString)"
    let comment = "comment-\(UUID().uuidString)"
    func leaks() -> [String] {
      [first, second, label, comment].flatMap { filesContaining(secret($0), under: root) }
    }
    try fixture.keychain.add(item(data: first, label: label, comment: comment), for: Clients.notes)
    #expect(
      FileManager.default.fileExists(atPath: fixture.path + "/keychain.db-wal"), "the change sits in the WAL")
    #expect(leaks() == [])
    try fixture.keychain.update(
      KeychainQuery(service: "svc"), changes: .init(data: secret(second)), for: Clients.notes)
    #expect(leaks() == [])
    try fixture.keychain.delete(KeychainQuery(service: "svc"), for: Clients.notes)
    #expect(leaks() == [])
    // After a checkpoint the pages live in the main file: still only ciphertext.
    let database = try Database(path: fixture.path + "/keychain.db")
    try database.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    #expect(leaks() == [])
    // And the check itself works: the same search finds bytes that are there.
    #expect(filesContaining(Array("CREATE TABLE items".utf8), under: root) == ["Keychains/keychain.db"])
  }

  @Test func concurrentWritersLoseNothing() throws {
    let fixture = try KeychainFixture()
    let path = fixture.path
    let failures = Failures()
    DispatchQueue.concurrentPerform(iterations: 2) { writer in
      do {
        let keychain = try Keychain(directory: path)  // one connection per writer
        for index in 0..<50 {
          try keychain.add(item("svc", "writer\(writer)-\(index)"), for: Clients.notes)
        }
      } catch {
        failures.append("\(error)")
      }
    }
    #expect(failures.all.isEmpty)
    #expect(try fixture.keychain.items(for: Clients.notes).count == 100)
  }
}

final class Failures: @unchecked Sendable {
  private let lock = NSLock()
  private var storage: [String] = []
  func append(_ failure: String) { lock.withLock { storage.append(failure) } }
  var all: [String] { lock.withLock { storage } }
}
