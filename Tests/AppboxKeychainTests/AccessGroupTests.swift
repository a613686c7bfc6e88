import AppboxKeychain
import Testing

struct AccessGroupTests {
  @Test func clientGroupsFollowThePlatformRule() {
    #expect(Clients.notes.accessGroups == ["ABCDE12345.com.example.notes", "ABCDE12345.shared"])
    // Entitlement groups first, then the application identifier when not already listed.
    let listed = KeychainClient(
      bundleIdentifier: "com.example.a", teamIdentifier: "ABCDE12345",
      keychainAccessGroups: ["ABCDE12345.shared"])
    #expect(listed.accessGroups == ["ABCDE12345.shared", "ABCDE12345.com.example.a"])
    // No team at all: one group of its own, in the teamless namespace.
    let bare = KeychainClient(
      bundleIdentifier: "com.example.c", teamIdentifier: nil, keychainAccessGroups: [])
    #expect(bare.accessGroups == ["noteam:com.example.c"])
    // Groups of another team, or groups without a team, are never granted.
    let stray = KeychainClient(
      bundleIdentifier: "com.example.d", teamIdentifier: "ZZZZZ99999",
      keychainAccessGroups: ["ABCDE12345.shared", "ZZZZZ99999.", "ZZZZZ99999.team"])
    #expect(stray.accessGroups == ["ZZZZZ99999.team", "ZZZZZ99999.com.example.d"])
    let teamless = KeychainClient(
      bundleIdentifier: "com.example.e", teamIdentifier: nil, keychainAccessGroups: ["ABCDE12345.shared"])
    #expect(teamless.accessGroups == ["noteam:com.example.e"])
  }

  @Test func appsOfOneTeamShareThroughTheCommonGroup() throws {
    let fixture = try KeychainFixture()
    try fixture.keychain.add(item(data: "shared secret", group: Clients.shared), for: Clients.notes)
    try fixture.keychain.add(item("private"), for: Clients.notes)
    let seen = try fixture.keychain.find(
      KeychainQuery(service: "svc", account: "acct", returnsData: true), for: Clients.journal)
    #expect(seen.map(\.data) == [secret("shared secret")])
    #expect(
      try fixture.keychain.items(for: Clients.journal).map(\.service) == ["svc"], "not Notes' private item")
    // Journal may change and delete what it shares.
    try fixture.keychain.update(
      KeychainQuery(service: "svc"), changes: KeychainChanges(data: secret("v2")), for: Clients.journal)
    let updated = try fixture.keychain.find(
      KeychainQuery(service: "svc", returnsData: true), for: Clients.notes)
    #expect(updated[0].data == secret("v2"))
  }

  @Test func anotherTeamCannotSeeOrNameTheGroup() throws {
    let fixture = try KeychainFixture()
    let keychain = fixture.keychain
    try keychain.add(item(group: Clients.shared), for: Clients.notes)
    let inShared = KeychainQuery(service: "svc", account: "acct", accessGroup: Clients.shared)
    #expect(status { _ = try keychain.find(inShared, for: Clients.other) } == .missingEntitlement)
    #expect(
      status { try keychain.update(inShared, changes: .init(label: "x"), for: Clients.other) }
        == .missingEntitlement)
    #expect(status { try keychain.delete(inShared, for: Clients.other) } == .missingEntitlement)
    #expect(
      status { try keychain.add(item(group: Clients.shared), for: Clients.other) } == .missingEntitlement)
    // Without naming the group, the item simply is not there for Other.
    #expect(
      status { _ = try keychain.find(KeychainQuery(service: "svc"), for: Clients.other) } == .itemNotFound)
    #expect(try keychain.items(for: Clients.other).isEmpty)
    let error = try #require(throws: KeychainError.self) { try keychain.delete(inShared, for: Clients.other) }
    #expect(error.kind == .denied)
    #expect(
      error.description.contains("org.other.app is not entitled to keychain access group 'ABCDE12345.shared'")
    )
  }

  @Test func uninstallRuleKeepsItemsAnotherAppStillReaches() throws {
    let fixture = try KeychainFixture()
    let keychain = fixture.keychain
    try keychain.add(item("notes private"), for: Clients.notes)
    try keychain.add(item("team", group: Clients.shared), for: Clients.notes)
    try keychain.add(item("journal private"), for: Clients.journal)
    try keychain.add(item("other"), for: Clients.other)

    #expect(
      Keychain.groups(onlyReachableBy: Clients.notes, others: [Clients.journal]) == [
        "ABCDE12345.com.example.notes"
      ])
    #expect(
      try keychain.deleteItems(onlyReachableBy: Clients.notes, others: [Clients.journal, Clients.other]) == 1)
    #expect(try keychain.items(for: Clients.notes).map(\.service) == ["team"])
    #expect(
      try keychain.deleteItems(onlyReachableBy: Clients.notes, others: [Clients.journal, Clients.other]) == 0)
    // With Journal gone too, nobody reaches the shared group any more.
    #expect(try keychain.deleteItems(onlyReachableBy: Clients.journal, others: [Clients.other]) == 2)
    #expect(try keychain.items(for: Clients.journal).isEmpty)
    #expect(try keychain.items(for: Clients.other).map(\.service) == ["other"])
  }
}
