import AppboxCore
import AppboxCrypto
import AppboxStore
import AppboxTestSupport
import Foundation
import Testing

@testable import AppboxKeychain

/// Accessibility classes without a passcode (the file protection layer, which makes them
/// unavailable while locked, is tested end to end on an encrypted file system).
struct AccessibilityTests {
  @Test func itemsKeepTheirClassAndDefaultToWhenUnlocked() throws {
    let fixture = try KeychainFixture()
    try fixture.keychain.add(item("a"), for: Clients.notes)
    var b = item("b", data: "bee")
    b.accessibility = .afterFirstUnlockThisDeviceOnly
    try fixture.keychain.add(b, for: Clients.notes)
    let found = try fixture.keychain.find(KeychainQuery(returnsData: true), for: Clients.notes)
    #expect(found.map(\.accessibility) == [.whenUnlocked, .afterFirstUnlockThisDeviceOnly])
    #expect(found.map(\.data) == [secret("s3cret"), secret("bee")])
    #expect(
      try fixture.keychain.items(for: Clients.notes).map(\.accessibility.isThisDeviceOnly) == [false, true])
  }

  @Test func thePermanentClassSecretsAreMadeWithTheKeychain() throws {
    let fixture = try KeychainFixture()
    for secret in [KeychainClassSecret.whenUnlocked, .afterFirstUnlock] {
      let path = Keychain.classSecretPath(secret, keychainDirectory: fixture.path)
      var st = stat()
      #expect(stat(path, &st) == 0 && st.st_size == 32 && st.st_mode & 0o777 == 0o600)
    }
    var st = stat()
    #expect(stat(Keychain.classSecretPath(.whenPasscodeSet, keychainDirectory: fixture.path), &st) != 0)
  }

  @Test func whenPasscodeSetItemsNeedThePasscodeSecretAndGoWithIt() throws {
    let fixture = try KeychainFixture()
    var pinned = item("pin", data: "1234")
    pinned.accessibility = .whenPasscodeSetThisDeviceOnly
    #expect { try fixture.keychain.add(pinned, for: Clients.notes) } throws: {
      ($0 as? KeychainError)?.code == .passcodeRequired && ($0 as? KeychainError)?.kind == .unavailable
    }
    // What the protection layer does when a passcode is set (it writes the file encrypted).
    let path = Keychain.classSecretPath(.whenPasscodeSet, keychainDirectory: fixture.path)
    try fixture.keychain.createPasscodeSecret { bytes in
      try AtomicFile.write(bytes, toPath: path, mode: 0o600)
    }
    try fixture.keychain.add(pinned, for: Clients.notes)
    try fixture.keychain.add(item("plain"), for: Clients.notes)
    #expect(
      try fixture.keychain.find(KeychainQuery(service: "pin", returnsData: true), for: Clients.notes)[0].data
        == secret("1234"))
    // Cleared: the items go, the others stay.
    #expect(try fixture.keychain.forgetPasscodeSecret() == 1)
    #expect(try fixture.keychain.items(for: Clients.notes).map(\.service) == ["plain"])
  }

  @Test func aRestoreSkipsItemsSealedUnderAPasscodeSecretTheDeviceNoLongerHas() throws {
    let fixture = try KeychainFixture()
    let path = Keychain.classSecretPath(.whenPasscodeSet, keychainDirectory: fixture.path)
    try fixture.keychain.createPasscodeSecret { bytes in
      try AtomicFile.write(bytes, toPath: path, mode: 0o600)
    }
    var pinned = item("pin")
    pinned.accessibility = .whenPasscodeSetThisDeviceOnly
    try fixture.keychain.add(pinned, for: Clients.notes)
    try fixture.keychain.add(item("plain"), for: Clients.notes)
    let export = try #require(try fixture.keychain.exportItems(for: Clients.notes))
    #expect(try fixture.keychain.importItems(export, for: Clients.notes) == .restored(count: 2))
    // A new passcode era: a new secret, so the old item could never be opened again.
    try fixture.keychain.createPasscodeSecret { bytes in
      try AtomicFile.write(bytes, toPath: path, mode: 0o600)
    }
    #expect(try fixture.keychain.importItems(export, for: Clients.notes) == .restored(count: 1))
    #expect(
      try fixture.keychain.find(KeychainQuery(returnsData: true), for: Clients.notes).map(\.service) == [
        "plain"
      ])
  }

  @Test func exportsKeepItemsSealedAndTheirClass() throws {
    let fixture = try KeychainFixture()
    var b = item("b", data: "unmistakable-secret")
    b.accessibility = .afterFirstUnlock
    try fixture.keychain.add(b, for: Clients.notes)
    let export = try #require(try fixture.keychain.exportItems(for: Clients.notes))
    #expect(export.firstRange(of: secret("unmistakable-secret")) == nil)
    try fixture.keychain.delete(KeychainQuery(service: "b"), for: Clients.notes)
    #expect(try fixture.keychain.importItems(export, for: Clients.notes) == .restored(count: 1))
    let restored = try fixture.keychain.find(KeychainQuery(returnsData: true), for: Clients.notes)[0]
    #expect(restored.accessibility == .afterFirstUnlock && restored.data == secret("unmistakable-secret"))
  }

  @Test func rowsFromBeforeClassesAreReadableAndResealedUnderTheirClassKey() throws {
    let fixture = try KeychainFixture()
    let keychain = fixture.keychain
    try keychain.add(item("old", data: "legacy", label: "L"), for: Clients.notes)
    // Make the row what schema version 1 wrote: sealed under the device's item key alone.
    let row = try keychain.rows(inGroups: Clients.notes.accessGroups, opening: true)[0]
    let legacy = try row.secret!.seal(key: keychain.key.itemKey, associatedData: row.associatedData)
    try keychain.database.execute(
      "UPDATE items SET sealed = ?1, key_version = 0 WHERE id = ?2", .blob(legacy), .integer(row.id))

    let before = try keychain.find(KeychainQuery(returnsData: true), for: Clients.notes)
    #expect(before.map(\.data) == [secret("legacy")] && before[0].label == "L")
    #expect(try keychain.resealLegacyItems() == 1)
    #expect(try keychain.database.scalar("SELECT key_version FROM items") == .integer(1))
    let resealed = try keychain.rows(inGroups: Clients.notes.accessGroups, opening: false)[0].sealed
    #expect(throws: CryptoFailure.self) {
      try SealedSecret.open(
        resealed, key: keychain.key.itemKey, associatedData: row.associatedData, item: "x")
    }
    #expect(try keychain.find(KeychainQuery(returnsData: true), for: Clients.notes) == before)
    #expect(try keychain.resealLegacyItems() == 0)
  }

  @Test func aVersion1KeychainMigratesInPlace() throws {
    let directory = TemporaryDirectory("keychain-v1")
    let path = directory.url("Keychains")
    try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    try AtomicFile.write(try SecureRandom.bytes(32), toPath: path + "/device.key", mode: 0o600)
    do {
      let database = try Database(path: path + "/keychain.db")
      try database.migrate(Array(Keychain.migrations.prefix(1)))
      try database.execute(
        """
        INSERT INTO items(class, service, account, access_group, created, modified, sealed)
        VALUES ('generic', 's', 'a', 'ABCDE12345.com.example.notes', 0, 0, x'00')
        """)
    }
    let keychain = try Keychain(directory: path)
    let items = try keychain.rows(inGroups: Clients.notes.accessGroups, opening: false)
    #expect(items.count == 1 && items[0].accessibility == .whenUnlocked && items[0].keyVersion == 0)
  }
}

/// The error a wrong key gives when opening a sealed secret (the keychain reports it as corrupt).
typealias CryptoFailure = KeychainError
