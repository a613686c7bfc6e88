import AppboxCore
import AppboxTestSupport
import Foundation
import Glibc
import Testing

/// `appbox keychain APP ...` through the real binary: output, statuses and bytes on disk.
struct KeychainEndToEndTests {
  static let notes = "com.example.notes"
  static let journal = "com.example.journal"
  static let other = "org.other.app"
  static let shared = "ABCDE12345.shared"

  /// A device with Notes and Journal (team ABCDE12345) and Other (team ZZZZZ99999).
  func threeApps() throws -> Device {
    let device = Device()
    try device.install("Notes-1.0/Notes.app")
    try device.install("Journal-1.0/Journal.app")
    try device.install("Other-1.0/Other.app")
    return device
  }

  @Test func addGetUpdateDeleteWithTheirStatuses() throws {
    let device = try threeApps()
    let add = try device.run(
      "keychain", Self.notes, "add", "--service", "mail", "--account", "bob", "--data", "pw1")
    #expect(add.status == 0, "\(add.err)")
    #expect(
      add.out.contains(
        "generic password service 'mail' account 'bob' in group 'ABCDE12345.com.example.notes'"))

    let duplicate = try device.run(
      "keychain", Self.notes, "add", "--service", "mail", "--account", "bob", "--data", "x")
    #expect(duplicate.status == 73)
    #expect(duplicate.err.hasPrefix("Error: The keychain already holds"))
    #expect(duplicate.err.split(separator: "\n").count == 1)

    let get = try device.run("keychain", Self.notes, "get", "--service", "mail", "--account", "bob")
    #expect(get.status == 0 && get.out == "pw1", "raw data, no newline added")

    let update = try device.run(
      "keychain", Self.notes, "update", "--service", "mail", "--account", "bob", "--data", "pw2", "--label",
      "Mail")
    #expect(update.status == 0, "\(update.err)")
    #expect(
      try device.run("keychain", Self.notes, "get", "--service", "mail", "--account", "bob").out == "pw2")

    let object = try #require(
      try device.json("keychain", Self.notes, "get", "--service", "mail", "--account", "bob")
        as? [String: Any])
    #expect(
      Set(object.keys) == [
        "class", "service", "account", "accessGroup", "label", "comment", "created", "modified", "data",
        "accessible",
      ])
    #expect(object["data"] as? String == Data("pw2".utf8).base64EncodedString())
    #expect(object["label"] as? String == "Mail" && object["comment"] is NSNull)
    #expect(object["class"] as? String == "generic")

    let deleted = try #require(
      try device.json("keychain", Self.notes, "delete", "--service", "mail", "--account", "bob")
        as? [String: Any])
    #expect(deleted["deleted"] as? Int == 1)
    for subcommand in ["get", "delete"] {
      let missing = try device.run(
        "keychain", Self.notes, subcommand, "--service", "mail", "--account", "bob")
      #expect(missing.status == 66, "\(subcommand)")
      #expect(missing.err.hasPrefix("Error: No keychain item with service 'mail', account 'bob'"))
    }
    let updateMissing = try device.run(
      "keychain", Self.notes, "update", "--service", "mail", "--account", "bob", "--data", "x")
    #expect(updateMissing.status == 66)
    #expect(try device.run("keychain", "com.example.nope", "list").status == 66)
  }

  @Test func malformedCommandsAreUsageErrors() throws {
    let device = try threeApps()
    let secretFile = device.dir.url("secret")
    try Data("pw".utf8).write(to: URL(fileURLWithPath: secretFile))
    let cases: [([String], String)] = [
      (["add", "--service", "s", "--account", "a", "--data", "x", "--data-file", secretFile], "not both"),
      (["add", "--service", "s", "--account", "a"], "missing --data or --data-file"),
      (["add", "--service", "", "--account", "a", "--data", "x"], "service must not be empty"),
      (["add", "--account", "a", "--data", "x"], "missing --service"),
      (
        ["add", "--service", "s", "--account", "a", "--data", "x", "--class", "certificate"],
        "--class must be one of"
      ),
      (["update", "--service", "s", "--account", "a"], "nothing to update"),
      (["get", "--service", "s", "--account", ""], "account must not be empty"),
    ]
    for (arguments, message) in cases {
      let result = try appbox(["keychain", Self.notes] + arguments, root: device.root)
      #expect(result.status == 64, "\(arguments): \(result.err)")
      #expect(result.err.contains(message), "\(arguments): \(result.err)")
    }
    let noFile = try device.run(
      "keychain", Self.notes, "add", "--service", "s", "--account", "a", "--data-file", device.dir.url("nope")
    )
    #expect(noFile.status == 66)
    #expect((try device.json("keychain", Self.notes, "list") as? [Any])?.isEmpty == true)
  }

  @Test func secretsComeFromFilesAndStandardInputByteForByte() throws {
    let device = try threeApps()
    let binary: [UInt8] = [0, 1, 2, 0xFF, 0x0A, 0x0D, 0x80, 0x41]
    let file = device.dir.url("secret.bin")
    try Data(binary).write(to: URL(fileURLWithPath: file))
    #expect(
      try device.run("keychain", Self.notes, "add", "--service", "f", "--account", "a", "--data-file", file)
        .status == 0)
    #expect(
      try device.run("keychain", Self.notes, "get", "--service", "f", "--account", "a").stdout == binary)

    let piped = try device.run(
      "keychain", Self.notes, "add", "--service", "p", "--account", "a", "--data-file", "-",
      input: Array("from a pipe\n".utf8))
    #expect(piped.status == 0, "\(piped.err)")
    #expect(
      try device.run("keychain", Self.notes, "get", "--service", "p", "--account", "a").out == "from a pipe\n"
    )
    let updated = try device.run(
      "keychain", Self.notes, "update", "--service", "p", "--account", "a", "--data-file", "-",
      input: Array("rotated".utf8))
    #expect(updated.status == 0)
    #expect(
      try device.run("keychain", Self.notes, "get", "--service", "p", "--account", "a").out == "rotated")
  }

  @Test func aTeamSharesThroughItsGroupAndOtherTeamsAreRefused() throws {
    let device = try threeApps()
    #expect(
      try device.run(
        "keychain", Self.notes, "add", "--service", "sync", "--account", "token", "--data", "team-secret",
        "--group",
        Self.shared, "--class", "internet"
      ).status == 0)
    let journal = try device.run("keychain", Self.journal, "get", "--service", "sync", "--account", "token")
    #expect(journal.status == 0 && journal.out == "team-secret")

    let refused = try device.run(
      "keychain", Self.other, "get", "--service", "sync", "--account", "token", "--group", Self.shared)
    #expect(refused.status == 77)
    #expect(
      refused.err == "Error: org.other.app is not entitled to keychain access group 'ABCDE12345.shared' "
        + "(its groups: ZZZZZ99999.org.other.app)\n")
    let addRefused = try device.run(
      "keychain", Self.other, "add", "--service", "x", "--account", "y", "--data", "z", "--group", Self.shared
    )
    #expect(addRefused.status == 77)
    #expect(
      try device.run("keychain", Self.other, "get", "--service", "sync", "--account", "token").status == 66)

    let list = try #require(try device.json("keychain", Self.journal, "list") as? [[String: Any]])
    #expect(list.count == 1)
    #expect(list[0]["accessGroup"] as? String == Self.shared && list[0]["class"] as? String == "internet")
    #expect(list[0]["data"] == nil, "list never shows secrets")
    let text = try device.run("keychain", Self.journal, "list")
    #expect(text.out.contains("internet") && !text.out.contains("team-secret"))
  }

  @Test func noSecretIsFoundInPlainTextAnywhereUnderTheRoot() throws {
    let device = try threeApps()
    let first = "first-\(UUID().uuidString)"
    let second = "second-\(UUID().uuidString)"
    func leaks() -> [String] {
      [first, second].flatMap { filesContaining(Array($0.utf8), under: device.root) }
    }
    try device.run(
      "keychain", Self.notes, "add", "--service", "s", "--account", "a", "--data-file", "-",
      input: Array(first.utf8))
    #expect(leaks() == [])
    #expect(try device.run("keychain", Self.notes, "get", "--service", "s", "--account", "a").out == first)
    try device.run("keychain", Self.notes, "update", "--service", "s", "--account", "a", "--data", second)
    #expect(leaks() == [])
    try device.run("keychain", Self.notes, "delete", "--service", "s", "--account", "a")
    #expect(leaks() == [])
    #expect(
      !filesContaining(Array("CREATE TABLE items".utf8), under: device.root).isEmpty,
      "the search sees the store")
  }

  @Test func twoProcessesAddingAtOnceLoseNothing() throws {
    let device = try threeApps()
    let failures = Failures()
    DispatchQueue.concurrentPerform(iterations: 2) { writer in
      for index in 0..<50 {
        do {
          let result = try appbox(
            [
              "keychain", Self.notes, "add", "--service", "load", "--account", "w\(writer)-\(index)",
              "--data", "x",
            ],
            root: device.root, environment: ["APPBOX_LOCK_TIMEOUT": "60"])
          if result.status != 0 { failures.append("w\(writer)-\(index): \(result.status) \(result.err)") }
        } catch {
          failures.append("\(error)")
        }
      }
    }
    #expect(failures.all.isEmpty)
    let list = try #require(try device.json("keychain", Self.notes, "list") as? [[String: Any]])
    #expect(list.count == 100)
    #expect(Set(list.compactMap { $0["account"] as? String }).count == 100)
  }

  @Test func theDeviceKeyIsCreatedWithTheDeviceAndPrivate() throws {
    let device = Device()
    #expect(try device.run("device", "init").status == 0)
    var st = stat()
    #expect(lstat(device.root + "/Keychains", &st) == 0 && st.st_mode & 0o777 == 0o700)
    #expect(lstat(device.root + "/Keychains/device.key", &st) == 0 && st.st_mode & 0o777 == 0o600)
    #expect(st.st_size == 32)
    let key = FileManager.default.contents(atPath: device.root + "/Keychains/device.key")
    try device.install("Notes-1.0/Notes.app")
    try device.run("keychain", Self.notes, "add", "--service", "s", "--account", "a", "--data", "x")
    #expect(
      FileManager.default.contents(atPath: device.root + "/Keychains/device.key") == key, "never replaced")
  }

  @Test func aRootMadeBeforeTheKeychainGetsItsKeyOnFirstUse() throws {
    let device = Device()
    try device.install("Notes-1.0/Notes.app")
    try FileTree.remove(atPath: device.root + "/Keychains")
    let add = try device.run("keychain", Self.notes, "add", "--service", "s", "--account", "a", "--data", "x")
    #expect(add.status == 0, "\(add.err)")
    var st = stat()
    #expect(lstat(device.root + "/Keychains/device.key", &st) == 0 && st.st_mode & 0o777 == 0o600)
    #expect(try device.run("keychain", Self.notes, "get", "--service", "s", "--account", "a").out == "x")
  }
}

final class Failures: @unchecked Sendable {
  private let lock = NSLock()
  private var storage: [String] = []
  func append(_ failure: String) { lock.withLock { storage.append(failure) } }
  var all: [String] { lock.withLock { storage } }
}
