import AppboxKeychain
import AppboxStore
import AppboxTestSupport
import Foundation
import Testing

/// Access groups in two namespaces: an app without a team cannot name a team's group, whatever
/// bundle identifier it declares, and a keychain from before the namespaces is migrated.
struct KeychainIdentityTests {
  /// Teamless apps whose bundle identifiers spell Notes' own group and the team's shared one.
  static let impostor = KeychainClient(
    bundleIdentifier: "ABCDE12345.com.example.notes", teamIdentifier: nil, keychainAccessGroups: [])
  static let sharedImpostor = KeychainClient(
    bundleIdentifier: "ABCDE12345.shared", teamIdentifier: nil,
    keychainAccessGroups: ["ABCDE12345.shared"])

  @Test func aTeamlessAppNamedLikeATeamGroupSeesNothingOfIt() throws {
    let fixture = try KeychainFixture()
    let keychain = fixture.keychain
    try keychain.add(item("private", data: "notes only"), for: Clients.notes)
    try keychain.add(item("team", data: "team only", group: Clients.shared), for: Clients.notes)
    #expect(Self.impostor.accessGroups == ["noteam:ABCDE12345.com.example.notes"])
    #expect(Self.sharedImpostor.accessGroups == ["noteam:ABCDE12345.shared"])
    for impostor in [Self.impostor, Self.sharedImpostor] {
      #expect(try keychain.items(for: impostor).isEmpty)
      #expect(
        status { _ = try keychain.find(KeychainQuery(service: "private"), for: impostor) } == .itemNotFound)
      for group in [Clients.notes.accessGroups[0], Clients.shared] {
        let named = KeychainQuery(service: "private", accessGroup: group)
        #expect(status { _ = try keychain.find(named, for: impostor) } == .missingEntitlement)
        #expect(status { try keychain.delete(named, for: impostor) } == .missingEntitlement)
        #expect(
          status { try keychain.update(named, changes: .init(data: secret("x")), for: impostor) }
            == .missingEntitlement)
        #expect(
          status { try keychain.add(item("planted", group: group), for: impostor) } == .missingEntitlement)
      }
      // What it adds stays in its own namespace, invisible to the team.
      try keychain.add(item("own"), for: impostor)
    }
    #expect(try keychain.items(for: Clients.notes).map(\.service).sorted() == ["private", "team"])
    #expect(
      try keychain.items(for: Self.impostor).map(\.accessGroup) == ["noteam:ABCDE12345.com.example.notes"])
  }

  @Test func namespacesAndAmbiguousIdentifiers() {
    #expect(KeychainAccessGroup.isAmbiguous("ABCDE12345.com.example.notes"))
    #expect(KeychainAccessGroup.isAmbiguous("0123456789.x"))
    #expect(!KeychainAccessGroup.isAmbiguous("com.example.notes"))
    #expect(!KeychainAccessGroup.isAmbiguous("abcde12345.com.example"), "team identifiers are uppercase")
    #expect(!KeychainAccessGroup.isAmbiguous("ABCDE123456.x"), "eleven characters")
    #expect(!KeychainAccessGroup.isAmbiguous("ABCDE12345"), "no second label")
    // A team identifier that is not letters and digits gets no group at all.
    let odd = KeychainClient(
      bundleIdentifier: "com.example.x", teamIdentifier: "noteam:com", keychainAccessGroups: ["noteam:com.x"])
    #expect(odd.accessGroups.isEmpty)
  }

  /// The keychain of a device an appbox before namespaces made (Fixtures/devices/README.md):
  /// nothing acts for an app until the migration ran; then the teamless Vault keeps its item
  /// (still sealed as it was, and opened), and the impostors get nothing.
  @Test func aSchema2KeychainIsMigratedWithTheInstalledApps() throws {
    let directory = TemporaryDirectory("keychain-v2")
    let root = try extractFixtureDevice("keychain-v2", into: directory)
    let keychain = try Keychain(directory: root + "/Keychains")
    let vault = KeychainClient(
      bundleIdentifier: "com.example.vault", teamIdentifier: nil, keychainAccessGroups: [])
    #expect(try keychain.hasLegacyIdentities)
    #expect(status { _ = try keychain.items(for: vault) } == .migrationPending)
    #expect(status { _ = try keychain.exportItems(for: Clients.notes) } == .migrationPending)
    let result = try #require(
      try keychain.migrateIdentities(
        teamless: ["com.example.vault", "ABCDE12345.com.example.notes", "ABCDE12345.shared"],
        teamGroups: Set(Clients.notes.accessGroups)))
    #expect(result.moved == 1)
    #expect(result.keptForTeams == ["ABCDE12345.com.example.notes", "ABCDE12345.shared"])
    #expect(try !keychain.hasLegacyIdentities)
    #expect(try keychain.migrateIdentities(teamless: [], teamGroups: []) == nil, "once")

    let found = try keychain.find(KeychainQuery(service: "vault", returnsData: true), for: vault)
    #expect(found.map(\.data) == [secret("vault-secret")])
    #expect(found.map(\.label) == ["vault label"] && found.map(\.accessGroup) == ["noteam:com.example.vault"])
    for impostor in [Self.impostor, Self.sharedImpostor] {
      #expect(try keychain.items(for: impostor).isEmpty)
    }
    // Notes keeps its items, and what the impostor planted in its group then (it cannot be
    // told apart from Notes' own).
    #expect(
      try keychain.items(for: Clients.notes).map(\.service).sorted() == ["notes-private", "planted", "team"])
    // An update seals the moved row anew, bound to its new group; another connection reads it.
    try keychain.update(
      KeychainQuery(service: "vault"), changes: KeychainChanges(data: secret("v2")), for: vault)
    let reopened = try Keychain(directory: root + "/Keychains")
    #expect(
      try reopened.find(KeychainQuery(service: "vault", returnsData: true), for: vault).map(\.data)
        == [secret("v2")])
    // A row moved to another group by hand does not open there: the seal names its group.
    let database = try Database(path: root + "/Keychains/keychain.db")
    try database.execute("UPDATE items SET access_group = 'ABCDE12345.shared' WHERE service = 'vault'")
    #expect(
      status { _ = try reopened.find(KeychainQuery(service: "vault", returnsData: true), for: Clients.notes) }
        == .corrupt)
  }

  /// An export made before the migration (the device part names the bare group) restores
  /// into the teamless group, still sealed as it was.
  @Test func anExportOfAMovedRowRestoresAndSurvivesAnotherExport() throws {
    let directory = TemporaryDirectory("keychain-v2-export")
    let root = try extractFixtureDevice("keychain-v2", into: directory)
    let keychain = try Keychain(directory: root + "/Keychains")
    try keychain.migrateIdentities(teamless: ["com.example.vault"], teamGroups: [])
    let vault = KeychainClient(
      bundleIdentifier: "com.example.vault", teamIdentifier: nil, keychainAccessGroups: [])
    // Exported while the row keeps its old seal (payload version 4), then restored.
    let export = try #require(try keychain.exportItems(for: vault))
    try keychain.delete(KeychainQuery(service: "vault"), for: vault)
    #expect(try keychain.importItems(export, for: vault) == .restored(count: 1))
    #expect(
      try keychain.find(KeychainQuery(service: "vault", returnsData: true), for: vault).map(\.data)
        == [secret("vault-secret")])
  }

  @Test func aQuotaBoundsItemsAndBytesAndWritesNothingBeyondIt() throws {
    let fixture = try KeychainFixture()
    let keychain = fixture.keychain
    keychain.quota = KeychainQuota(items: 3, bytes: 4096)
    try keychain.add(item("s0", data: "small"), for: Clients.notes)
    try keychain.add(item("s1", data: "small"), for: Clients.notes)
    try keychain.add(item("t", data: "small", group: Clients.shared), for: Clients.notes)
    #expect(status { try keychain.add(item("s3"), for: Clients.notes) } == .quotaExceeded)
    // The shared item counts for Journal too; Other, of another team, has its own quota.
    try keychain.add(item("j0"), for: Clients.journal)
    try keychain.add(item("j1"), for: Clients.journal)
    #expect(status { try keychain.add(item("j2"), for: Clients.journal) } == .quotaExceeded)
    try keychain.add(item("o"), for: Clients.other)
    let usage = try keychain.usage(for: Clients.notes)
    #expect(usage.items == 3 && usage.quota == KeychainQuota(items: 3, bytes: 4096))
    // Bytes: an update that would grow past the bound changes nothing.
    let big = [UInt8](repeating: 7, count: 5000)
    #expect(
      status {
        try keychain.update(KeychainQuery(service: "s0"), changes: .init(data: big), for: Clients.notes)
      }
        == .quotaExceeded)
    #expect(
      try keychain.find(KeychainQuery(service: "s0", returnsData: true), for: Clients.notes).map(\.data)
        == [secret("small")])
    try keychain.delete(KeychainQuery(service: "s1"), for: Clients.notes)
    let error = try #require(throws: KeychainError.self) {
      try keychain.add(KeychainItem(service: "s1", account: "a", data: big), for: Clients.notes)
    }
    #expect(error.kind == .cannotCreate && error.message.contains("4096 bytes"), "\(error)")
    #expect(try keychain.usage(for: Clients.notes).items == 2)
  }
}
