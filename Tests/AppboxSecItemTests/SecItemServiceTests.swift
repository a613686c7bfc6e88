import AppboxCore
import AppboxKeychain
import AppboxPlist
import AppboxSecItem
import Foundation
import Testing

@testable import AppboxSecItemBroker

/// One request at a time through `SecItemService`, against a real keychain on disk.
struct SecItemServiceTests {
  @Test func theFourCallsAnswerWithThePlatformsStatuses() throws {
    let fixture = Fixture()
    let notes = fixture.service()
    #expect(try notes.call(.add, query(extra: [kSecValueData: data("pw1")])).status == errSecSuccess)
    let duplicate = try notes.call(.add, query(extra: [kSecValueData: data("other")]))
    #expect(duplicate.status == errSecDuplicateItem && duplicate.message?.contains("already holds") == true)
    let found = try notes.call(.copyMatching, query(extra: [kSecReturnData: .bool(true)]))
    #expect(found.status == errSecSuccess && found.result == data("pw1"))
    #expect(try notes.call(.update, query(), changes: [kSecValueData: data("pw2")]).status == errSecSuccess)
    #expect(try notes.call(.copyMatching, query(extra: [kSecReturnData: .bool(true)])).result == data("pw2"))
    #expect(try notes.call(.delete, query()).status == errSecSuccess)
    for operation in [SecItemWire.Operation.copyMatching, .delete] {
      let missing = try notes.call(operation, query())
      #expect(missing.status == errSecItemNotFound, "\(operation)")
      #expect(missing.message?.hasPrefix("No keychain item with generic password, service 'svc'") == true)
    }
    #expect(
      try notes.call(.update, query(), changes: [kSecValueData: data("x")]).status == errSecItemNotFound)
    // The item went into the app's first group.
    let keychain = try Keychain(directory: fixture.keychainPath)
    #expect(try keychain.items(for: Apps.notes).isEmpty)
  }

  @Test func groupsFollowTheAppsEntitlementsExactlyAsTheHostCommandDoes() throws {
    let fixture = Fixture()
    let notes = fixture.service(Apps.notes)
    let journal = fixture.service(Apps.journal)
    let other = fixture.service(Apps.other)
    #expect(
      try notes.call(
        .add, query(extra: [kSecValueData: data("shared"), kSecAttrAccessGroup: .string(Apps.shared)])
      )
      .status == errSecSuccess)
    #expect(
      try notes.call(.add, query("private", "acct", [kSecValueData: data("mine")])).status == errSecSuccess)
    // Journal (same team) sees the shared item, not Notes' own; Other sees nothing.
    #expect(
      try journal.call(.copyMatching, query(extra: [kSecReturnData: .bool(true)])).result == data("shared"))
    #expect(try journal.call(.copyMatching, query("private", "acct")).status == errSecItemNotFound)
    #expect(try other.call(.copyMatching, query()).status == errSecItemNotFound)
    for operation in SecItemWire.Operation.allCases {
      var request = query(extra: [kSecAttrAccessGroup: .string(Apps.shared)])
      if operation == .add { request[kSecValueData] = data("x") }
      let refused = try other.call(
        operation, request, changes: operation == .update ? [kSecAttrLabel: .string("x")] : nil)
      #expect(refused.status == errSecMissingEntitlement, "\(operation)")
      #expect(refused.message?.contains("org.other.app is not entitled to keychain access group") == true)
    }
    // Other's own items stay its own.
    #expect(try other.call(.add, query(extra: [kSecValueData: data("z")])).status == errSecSuccess)
    let attributes = try other.call(
      .copyMatching,
      query(nil, nil, [kSecReturnAttributes: .bool(true), kSecMatchLimit: .string(kSecMatchLimitAll)]))
    #expect(
      attributes.result?.array?.map { $0[kSecAttrAccessGroup] } == [.string("ZZZZZ99999.org.other.app")])
  }

  @Test func everyReturnCombinationHasThePlatformsShape() throws {
    let fixture = Fixture()
    let notes = fixture.service()
    for (account, secret) in [("a", "secret-a"), ("b", "secret-b")] {
      let added = try notes.call(
        .add,
        query("combo", account, [kSecValueData: data(secret), kSecAttrComment: .string("c-" + account)]))
      #expect(added.status == errSecSuccess && added.result == nil)
    }
    let limits: [(PropertyList?, Bool)] = [
      (nil, false), (.string(kSecMatchLimitOne), false), (.string(kSecMatchLimitAll), true),
      (.integer(1), false),
      (.integer(2), true), (.integer(5), true),
    ]
    for returnsData in [nil, false, true] as [Bool?] {
      for returnsAttributes in [nil, false, true] as [Bool?] {
        for (limit, many) in limits {
          var request = query("combo", nil)
          if let returnsData { request[kSecReturnData] = .bool(returnsData) }
          if let returnsAttributes { request[kSecReturnAttributes] = .bool(returnsAttributes) }
          if let limit { request[kSecMatchLimit] = limit }
          let reply = try notes.call(.copyMatching, request)
          let label =
            "data \(String(describing: returnsData)) attributes \(String(describing: returnsAttributes)) \(String(describing: limit))"
          #expect(reply.status == errSecSuccess, "\(label)")
          let wantsData = returnsData == true
          let wantsAttributes = returnsAttributes == true
          guard wantsData || wantsAttributes else {
            #expect(reply.result == nil, "\(label)")
            continue
          }
          let items = many ? (reply.result?.array ?? []) : [reply.result].compactMap { $0 }
          #expect(items.count == (many ? 2 : 1), "\(label)")
          for (index, item) in items.enumerated() {
            let account = ["a", "b"][index]
            if wantsAttributes {
              let keys = Set(item.dictionary?.keys.map { $0 } ?? [])
              var expected: Set<String> = [
                kSecClass, kSecAttrService, kSecAttrAccount, kSecAttrAccessGroup, kSecAttrAccessible,
                kSecAttrComment,
                kSecAttrCreationDate, kSecAttrModificationDate,
              ]
              if wantsData { expected.insert(kSecValueData) }
              #expect(keys == expected, "\(label)")
              #expect(
                item[kSecAttrAccount] == .string(account) && item[kSecAttrComment] == .string("c-" + account))
              #expect(item[kSecClass] == .string(kSecClassGenericPassword))
              #expect(item[kSecAttrAccessible] == .string(kSecAttrAccessibleWhenUnlocked))
              #expect(item[kSecAttrAccessGroup] == .string("ABCDE12345.com.example.notes"))
              #expect(item[kSecAttrCreationDate]?.date != nil)
              if wantsData { #expect(item[kSecValueData] == data("secret-" + account)) }
            } else {
              #expect(item == data("secret-" + account), "\(label)")
            }
          }
        }
      }
    }
    // SecItemAdd returns what was asked for too.
    let added = try notes.call(
      .add,
      query(
        "combo", "c",
        [kSecValueData: data("c"), kSecReturnAttributes: .bool(true), kSecReturnData: .bool(true)]))
    #expect(added.result?[kSecAttrAccount] == .string("c") && added.result?[kSecValueData] == data("c"))
    let dataOnly = try notes.call(
      .add, query("combo", "d", [kSecValueData: data("d"), kSecReturnData: .bool(true)]))
    #expect(dataOnly.result == data("d"))
  }

  @Test func accessibilityIsStoredReturnedAndMatched() throws {
    let fixture = Fixture()
    let notes = fixture.service()
    for (account, code) in [("u", kSecAttrAccessibleWhenUnlocked), ("f", kSecAttrAccessibleAfterFirstUnlock)]
    {
      #expect(
        try notes.call(
          .add, query("svc", account, [kSecValueData: data(account), kSecAttrAccessible: .string(code)])
        )
        .status == errSecSuccess)
    }
    let afterFirstUnlock = try notes.call(
      .copyMatching,
      query(
        "svc", nil,
        [
          kSecAttrAccessible: .string(kSecAttrAccessibleAfterFirstUnlock), kSecReturnAttributes: .bool(true),
          kSecMatchLimit: .string(kSecMatchLimitAll),
        ]))
    #expect(afterFirstUnlock.result?.array?.map { $0[kSecAttrAccount] } == [.string("f")])
    let keychain = try Keychain(directory: fixture.keychainPath)
    #expect(
      try keychain.find(KeychainQuery(service: "svc", account: "f"), for: Apps.notes).first?.accessibility
        == .afterFirstUnlock)
    // Deleting by accessibility deletes only that class's items.
    #expect(
      try notes.call(
        .delete, query("svc", nil, [kSecAttrAccessible: .string(kSecAttrAccessibleWhenUnlocked)])
      ).status
        == errSecSuccess)
    #expect(try keychain.items(for: Apps.notes).map(\.account) == ["f"])
    // when-passcode-set needs a passcode: the platform's errSecAuthFailed.
    let passcode = try notes.call(
      .add,
      query(
        "svc", "p",
        [
          kSecValueData: data("p"),
          kSecAttrAccessible: .string(kSecAttrAccessibleWhenPasscodeSetThisDeviceOnly),
        ]))
    #expect(passcode.status == errSecAuthFailed && passcode.message?.contains("passcode") == true)
    let always = try notes.call(
      .add, query("svc", "a", [kSecValueData: data("a"), kSecAttrAccessible: .string("dk")]))
    #expect(always.status == errSecParam && always.message?.contains("kSecAttrAccessibleAlways") == true)
  }

  /// Anything else is errSecParam, naming what is wrong, and changes nothing.
  @Test func malformedRequestsAreRefusedWithErrSecParam() throws {
    let fixture = Fixture()
    let notes = fixture.service()
    let cases: [([UInt8], String)] = [
      (Array("not a plist".utf8), "not a binary property list"),
      (
        Array(PropertyList.dictionary(["operation": .string("SecItemAdd")]).xmlData()),
        "not a binary property list"
      ),
      (Array(PropertyList.array([]).binaryData()), "not a dictionary"),
      (Array(SecItemWire.request(.add, query: query()).prefix(20)), "not a valid property list"),
      (
        Array(PropertyList.dictionary(["query": .dictionary(query())]).binaryData()),
        "operation must be one of"
      ),
      (
        Array(
          PropertyList.dictionary(["operation": .string("SecItemCopyMatching"), "query": .string("x")])
            .binaryData()),
        "needs a query dictionary"
      ),
      (
        Array(
          PropertyList.dictionary([
            "operation": .string("SecItemCopyMatching"), "query": .dictionary(query()), "app": .string("x"),
          ]).binaryData()), "Unknown key 'app' in the request"
      ),
      (SecItemWire.request(.copyMatching, query: [kSecAttrService: .string("svc")]), "needs kSecClass"),
      (
        SecItemWire.request(.copyMatching, query: query(extra: [kSecClass: .string("keys")])),
        "kSecClass must be"
      ),
      (
        SecItemWire.request(.copyMatching, query: query(extra: ["bogus\u{1b}[2J": .bool(true)])),
        "Unknown key 'bogus\\u{1b}[2J'"
      ),
      (
        SecItemWire.request(.copyMatching, query: query(extra: [kSecAttrService: .integer(1)])),
        "svce must be a string"
      ),
      (
        SecItemWire.request(.copyMatching, query: query(extra: [kSecReturnData: .integer(1)])),
        "r_Data must be a boolean"
      ),
      (
        SecItemWire.request(.copyMatching, query: query(extra: [kSecMatchLimit: .integer(0)])),
        "kSecMatchLimit must be"
      ),
      (
        SecItemWire.request(.copyMatching, query: query(extra: [kSecValueData: data("x")])),
        "does not take v_Data"
      ),
      (
        SecItemWire.request(.delete, query: query(extra: [kSecMatchLimit: .string(kSecMatchLimitAll)])),
        "does not take m_Limit"
      ),
      (SecItemWire.request(.add, query: query()), "SecItemAdd needs kSecValueData"),
      (
        SecItemWire.request(.add, query: query(nil, "a", [kSecValueData: data("x")])), "needs kSecAttrService"
      ),
      (SecItemWire.request(.add, query: query(extra: [kSecValueData: .string("x")])), "v_Data must be data"),
      (SecItemWire.request(.update, query: query()), "SecItemUpdate needs attributesToUpdate"),
      (
        SecItemWire.request(.update, query: query(), attributesToUpdate: [kSecAttrService: .string("y")]),
        "SecItemUpdate cannot change svce"
      ),
      (
        SecItemWire.request(.update, query: query(), attributesToUpdate: ["x": .bool(true)]),
        "Unknown key 'x'"
      ),
      (SecItemWire.request(.update, query: query(), attributesToUpdate: [:]), "Nothing to update"),
      (
        SecItemWire.request(.delete, query: query(), attributesToUpdate: [:]), "belongs to SecItemUpdate only"
      ),
      (
        SecItemWire.request(.add, query: query(extra: [kSecValueData: .data(Data(count: (1 << 20) + 1))])),
        "the most an item holds is 1048576"
      ),
      (
        SecItemWire.request(.add, query: query("", "a", [kSecValueData: data("x")])),
        "service must not be empty"
      ),
    ]
    for (request, expected) in cases {
      let reply = try Reply(notes.answer(request))
      #expect(reply.status == errSecParam, "\(expected)")
      #expect(reply.message?.contains(expected) == true, "\(expected): \(reply.message ?? "")")
      #expect(reply.result == nil)
    }
    // Nesting and expansion limits (a request is a dozen keys).
    var deep = PropertyList.bool(true)
    for _ in 0..<40 { deep = .array([deep]) }
    let tooDeep = try Reply(
      notes.answer(SecItemWire.request(.copyMatching, query: query(extra: [kSecAttrLabel: deep]))))
    #expect(tooDeep.status == errSecParam && tooDeep.message?.contains("not a valid property list") == true)
    let bomb = sharedReferenceBomb(levels: 12, width: 16)
    let tooMany = try Reply(notes.answer(bomb))
    #expect(tooMany.status == errSecParam && tooMany.message?.contains("not a valid property list") == true)
    let keychain = try Keychain(directory: fixture.keychainPath)
    #expect(try keychain.items(for: Apps.notes).isEmpty)
  }

  @Test func aReplyBeyondTheLimitIsErrSecAllocate() throws {
    let fixture = Fixture()
    let notes = fixture.service()
    notes.maximumReplySize = 4096
    for index in 0..<4 {
      let secret = PropertyList.data(Data(repeating: UInt8(index), count: 2000))
      #expect(try notes.call(.add, query("big", "\(index)", [kSecValueData: secret])).status == errSecSuccess)
    }
    let one = try notes.call(.copyMatching, query("big", "0", [kSecReturnData: .bool(true)]))
    #expect(one.status == errSecSuccess)
    let all = try notes.call(
      .copyMatching,
      query("big", nil, [kSecReturnData: .bool(true), kSecMatchLimit: .string(kSecMatchLimitAll)]))
    #expect(
      all.status == errSecAllocate && all.result == nil && all.message?.contains("kSecMatchLimit") == true)
  }

  @Test func internetPasswordsAreTheirOwnClass() throws {
    let fixture = Fixture()
    let notes = fixture.service()
    let internet: [String: PropertyList] = [kSecClass: .string(kSecClassInternetPassword)]
    #expect(
      try notes.call(.add, query(extra: internet.merging([kSecValueData: data("web")]) { $1 })).status
        == errSecSuccess)
    #expect(try notes.call(.add, query(extra: [kSecValueData: data("generic")])).status == errSecSuccess)
    let web = try notes.call(
      .copyMatching, query(extra: internet.merging([kSecReturnAttributes: .bool(true)]) { $1 }))
    #expect(web.result?[kSecClass] == .string(kSecClassInternetPassword))
    #expect(
      try notes.call(.copyMatching, query(extra: [kSecReturnData: .bool(true)])).result == data("generic"))
  }
}
