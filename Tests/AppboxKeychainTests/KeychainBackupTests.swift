import AppboxKeychain
import AppboxTestSupport
import Foundation
import Testing

struct KeychainBackupTests {
  @Test func exportThenImportOnTheSameDeviceRestoresTheSnapshot() throws {
    let fixture = try KeychainFixture()
    let keychain = fixture.keychain
    try keychain.add(item("a", data: "opensesame1", label: "L", comment: "C"), for: Clients.notes)
    try keychain.add(item("b", data: "team", group: Clients.shared, itemClass: .internet), for: Clients.notes)
    try keychain.add(item("other"), for: Clients.other)
    let before = try keychain.find(KeychainQuery(returnsData: true), for: Clients.notes)
    let export = try #require(try keychain.exportItems(for: Clients.notes))
    #expect(filesContaining(secret("opensesame1"), under: fixture.directory.path) == [])
    #expect(export.firstRange(of: secret("opensesame1")) == nil, "the export is sealed")

    // Change things after the backup: edit, add, delete.
    try keychain.update(
      KeychainQuery(service: "a"), changes: .init(data: secret("edited")), for: Clients.notes)
    try keychain.add(item("later"), for: Clients.notes)
    try keychain.delete(KeychainQuery(service: "b"), for: Clients.notes)

    #expect(try keychain.importItems(export, for: Clients.notes) == .restored(count: 2))
    let after = try keychain.find(KeychainQuery(returnsData: true), for: Clients.notes)
    #expect(after == before, "replace, not merge: 'later' is gone, 'a' and 'b' are as they were")
    #expect(try keychain.items(for: Clients.other).map(\.service) == ["other"], "other apps are untouched")
    // Importing twice is harmless.
    #expect(try keychain.importItems(export, for: Clients.notes) == .restored(count: 2))
    #expect(try keychain.find(KeychainQuery(returnsData: true), for: Clients.notes) == before)
  }

  @Test func nothingToExportIsNil() throws {
    let fixture = try KeychainFixture()
    #expect(try fixture.keychain.exportItems(for: Clients.notes) == nil)
    try fixture.keychain.add(item(), for: Clients.other)
    #expect(try fixture.keychain.exportItems(for: Clients.notes) == nil)
  }

  @Test func importRestoresOnlyGroupsTheClientIsEntitledTo() throws {
    let fixture = try KeychainFixture()
    try fixture.keychain.add(item("private"), for: Clients.notes)
    try fixture.keychain.add(item("team", group: Clients.shared), for: Clients.notes)
    let export = try #require(try fixture.keychain.exportItems(for: Clients.notes))
    try fixture.keychain.delete(KeychainQuery(), for: Clients.notes)
    // Journal shares only the team group: Notes' private item is not Journal's to restore.
    #expect(try fixture.keychain.importItems(export, for: Clients.journal) == .restored(count: 1))
    #expect(try fixture.keychain.items(for: Clients.notes).map(\.service) == ["team"])
    #expect(try fixture.keychain.importItems(export, for: Clients.other) == .restored(count: 0))
    #expect(try fixture.keychain.items(for: Clients.other).isEmpty)
  }

  @Test func anExportFromAnotherDeviceRestoresNothing() throws {
    let here = try KeychainFixture()
    let elsewhere = try KeychainFixture()
    try elsewhere.keychain.add(item(data: "from elsewhere"), for: Clients.notes)
    let export = try #require(try elsewhere.keychain.exportItems(for: Clients.notes))
    try here.keychain.add(item("mine"), for: Clients.notes)

    let result = try here.keychain.importItems(export, for: Clients.notes)
    guard case .otherDevice(let reason) = result else {
      Issue.record("expected .otherDevice, got \(result)")
      return
    }
    #expect(reason.contains("another device"))
    #expect(try here.keychain.items(for: Clients.notes).map(\.service) == ["mine"], "nothing replaced")
  }

  @Test func tamperedOrForeignBytesAreBadData() throws {
    let fixture = try KeychainFixture()
    try fixture.keychain.add(item(), for: Clients.notes)
    let export = try #require(try fixture.keychain.exportItems(for: Clients.notes))
    var tampered = export
    tampered[tampered.count - 20] ^= 0x01
    var truncated = export
    truncated.removeLast(5)
    var badVersion = export
    badVersion[8] = 9
    for bytes in [tampered, truncated, badVersion, Array("not an export".utf8), [], Array(export.prefix(10))]
    {
      let error = try #require(throws: KeychainError.self) {
        try fixture.keychain.importItems(bytes, for: Clients.notes)
      }
      #expect(error.code == .corrupt && error.kind == .badData, "\(error)")
    }
    #expect(try fixture.keychain.items(for: Clients.notes).count == 1, "a refused import changes nothing")
  }
}
