import AppboxCore
import AppboxKeychain
import Foundation
import Testing

struct KeychainTests {
  @Test func addThenFindReturnsDataAndAttributes() throws {
    let fixture = try KeychainFixture()
    let added = try fixture.keychain.add(item(label: "Bob", comment: "hint"), for: Clients.notes)
    #expect(added.accessGroup == "ABCDE12345.com.example.notes", "no group means the first group")
    #expect(added.data == nil)
    #expect(added.created != nil && added.created == added.modified)

    let found = try fixture.keychain.find(
      KeychainQuery(service: "svc", account: "acct", limit: .one, returnsData: true), for: Clients.notes)
    #expect(found.count == 1)
    #expect(found[0].data == secret("s3cret"))
    #expect(found[0].label == "Bob" && found[0].comment == "hint")
    #expect(found[0].accessGroup == added.accessGroup && found[0].created == added.created)

    let attributesOnly = try fixture.keychain.find(KeychainQuery(service: "svc"), for: Clients.notes)
    #expect(attributesOnly[0].data == nil && attributesOnly[0].label == "Bob")
  }

  @Test func addingAnExistingItemIsADuplicate() throws {
    let fixture = try KeychainFixture()
    try fixture.keychain.add(item(), for: Clients.notes)
    #expect(status { try fixture.keychain.add(item(data: "other"), for: Clients.notes) } == .duplicateItem)
    let error = try #require(throws: KeychainError.self) {
      try fixture.keychain.add(item(), for: Clients.notes)
    }
    #expect(error.kind == .cannotCreate)
    #expect(error.description.contains("service 'svc' account 'acct'"))
    #expect(!error.description.contains("s3cret"))
    // The same service and account in another class or another group is another item.
    try fixture.keychain.add(item(itemClass: .internet), for: Clients.notes)
    try fixture.keychain.add(item(group: Clients.shared), for: Clients.notes)
    #expect(try fixture.keychain.items(for: Clients.notes).count == 3)
  }

  @Test func updateChangesDataLabelAndCommentAndTheModificationTime() throws {
    let fixture = try KeychainFixture()
    let added = try fixture.keychain.add(item(label: "old label", comment: "old"), for: Clients.notes)
    Thread.sleep(forTimeInterval: 0.01)
    let query = KeychainQuery(service: "svc", account: "acct")
    #expect(
      try fixture.keychain.update(query, changes: KeychainChanges(data: secret("new")), for: Clients.notes)
        == 1)
    #expect(
      try fixture.keychain.update(query, changes: KeychainChanges(comment: "new"), for: Clients.notes) == 1)
    var withData = query
    withData.returnsData = true
    let found = try fixture.keychain.find(withData, for: Clients.notes)[0]
    #expect(found.data == secret("new"))
    #expect(found.label == "old label", "an attribute not in the changes is kept")
    #expect(found.comment == "new")
    #expect(found.created == added.created)
    #expect(try #require(found.modified) > added.modified!)
  }

  @Test func findUpdateAndDeleteOfAMissingItemAreNotFound() throws {
    let fixture = try KeychainFixture()
    let query = KeychainQuery(service: "svc", account: "nobody")
    #expect(status { _ = try fixture.keychain.find(query, for: Clients.notes) } == .itemNotFound)
    #expect(
      status { try fixture.keychain.update(query, changes: .init(label: "x"), for: Clients.notes) }
        == .itemNotFound)
    #expect(status { try fixture.keychain.delete(query, for: Clients.notes) } == .itemNotFound)
    #expect(try fixture.keychain.items(for: Clients.notes).isEmpty, "listing nothing is not an error")
    let error = try #require(throws: KeychainError.self) {
      try fixture.keychain.delete(query, for: Clients.notes)
    }
    #expect(error.kind == .notFound)
  }

  @Test func deleteRemovesEveryMatchOrOneGroup() throws {
    let fixture = try KeychainFixture()
    try fixture.keychain.add(item(), for: Clients.notes)
    try fixture.keychain.add(item(group: Clients.shared), for: Clients.notes)
    try fixture.keychain.add(item("svc", "keep"), for: Clients.notes)
    let inShared = KeychainQuery(service: "svc", account: "acct", accessGroup: Clients.shared)
    #expect(try fixture.keychain.delete(inShared, for: Clients.notes) == 1)
    #expect(try fixture.keychain.items(for: Clients.notes).count == 2)
    try fixture.keychain.add(item(group: Clients.shared), for: Clients.notes)
    #expect(
      try fixture.keychain.delete(KeychainQuery(service: "svc", account: "acct"), for: Clients.notes) == 2)
    #expect(try fixture.keychain.items(for: Clients.notes).map(\.account) == ["keep"])
  }

  @Test func queriesMatchSealedLabelsAndCommentsAndLimitToOne() throws {
    let fixture = try KeychainFixture()
    try fixture.keychain.add(item("svc", "a", label: "work"), for: Clients.notes)
    try fixture.keychain.add(item("svc", "b", label: "home"), for: Clients.notes)
    try fixture.keychain.add(
      item("svc", "c", group: Clients.shared, label: "work", comment: "c"), for: Clients.notes)
    let work = try fixture.keychain.find(KeychainQuery(label: "work"), for: Clients.notes)
    #expect(work.map(\.account) == ["a", "c"], "private group first, then shared")
    #expect(
      try fixture.keychain.find(KeychainQuery(comment: "c"), for: Clients.notes).map(\.account) == ["c"])
    #expect(
      try fixture.keychain.find(KeychainQuery(label: "work", limit: .one), for: Clients.notes).count == 1)
    #expect(try fixture.keychain.delete(KeychainQuery(label: "home"), for: Clients.notes) == 1)
    #expect(
      status { _ = try fixture.keychain.find(KeychainQuery(label: "home"), for: Clients.notes) }
        == .itemNotFound)
  }

  @Test func malformedRequestsAreBadParameters() throws {
    let fixture = try KeychainFixture()
    let keychain = fixture.keychain
    #expect(status { try keychain.add(item(""), for: Clients.notes) } == .invalidParameter)
    #expect(status { try keychain.add(item("svc", ""), for: Clients.notes) } == .invalidParameter)
    #expect(status { try keychain.add(item("a\u{0}b"), for: Clients.notes) } == .invalidParameter)
    #expect(
      status { try keychain.add(item(String(repeating: "x", count: 5000)), for: Clients.notes) }
        == .invalidParameter)
    #expect(status { try keychain.add(item(group: ""), for: Clients.notes) } == .invalidParameter)
    var noData = item()
    noData.data = nil
    #expect(status { try keychain.add(noData, for: Clients.notes) } == .invalidParameter)
    var huge = item()
    huge.data = [UInt8](repeating: 1, count: Keychain.maximumDataByteCount + 1)
    #expect(status { try keychain.add(huge, for: Clients.notes) } == .invalidParameter)
    #expect(
      status { _ = try keychain.find(KeychainQuery(service: ""), for: Clients.notes) } == .invalidParameter)
    try keychain.add(item(), for: Clients.notes)
    let query = KeychainQuery(service: "svc")
    #expect(
      status { try keychain.update(query, changes: KeychainChanges(), for: Clients.notes) }
        == .invalidParameter)
    let error = try #require(throws: KeychainError.self) { try keychain.add(item(""), for: Clients.notes) }
    #expect(error.kind == .invalidArgument)
    // Empty data is a valid secret.
    try keychain.add(item("empty", data: ""), for: Clients.notes)
    let empty = try keychain.find(KeychainQuery(service: "empty", returnsData: true), for: Clients.notes)
    #expect(empty[0].data == [])
  }

  @Test func changesPersistAcrossConnections() throws {
    let fixture = try KeychainFixture()
    try fixture.keychain.add(item(label: "L"), for: Clients.notes)
    let again = try fixture.reopen()
    let found = try again.find(KeychainQuery(service: "svc", returnsData: true), for: Clients.notes)
    #expect(found[0].data == secret("s3cret") && found[0].label == "L")
  }
}
