import AppboxCore
import AppboxCrypto
import AppboxTestSupport
import Foundation
import Glibc
import Testing

/// Encrypted repositories, end to end: in a directory and in a bucket.
struct EncryptedBackupEndToEndTests {
  /// Distinctive plaintext the repository must never show.
  static let markers = [
    "QuarterlyPlanZebra", "zebra-content-7731", "com.example.notes", "Notes.app", "Documents/",
    "svc-marker-5521", "acct-marker-9083", "secret-marker-4410", "label-marker-2231", "pre-update",
  ]

  func prepare(_ device: Device) throws -> (password: String, plan: [UInt8]) {
    try device.install("Notes-1.0/Notes.app")
    let plan = Array(String(repeating: "zebra-content-7731 ", count: 300).utf8)
    try Data(plan).write(to: URL(fileURLWithPath: device.home + "/Documents/QuarterlyPlanZebra.txt"))
    let added = try device.run(
      "keychain", "com.example.notes", "add", "--service", "svc-marker-5521", "--account", "acct-marker-9083",
      "--data", "secret-marker-4410", "--label", "label-marker-2231")
    #expect(added.status == 0, "\(added.err)")
    let password = device.dir.url("password")
    try "correct horse battery staple\n".write(toFile: password, atomically: true, encoding: .utf8)
    return (password, plan)
  }

  func expectNoPlaintext(_ files: [(name: String, bytes: [UInt8])], plan: [UInt8]) {
    var needles = Self.markers.map { Array($0.utf8) }
    let digest = SHA256.hash(plan)
    needles.append(Array(digest.hex.utf8))
    digest.withUnsafeBytes { needles.append(Array($0)) }
    for (name, bytes) in files {
      for needle in needles where contains(bytes, needle) {
        Issue.record("'\(String(decoding: needle.prefix(40), as: UTF8.self))' is readable in \(name)")
      }
    }
  }

  @Test func aLocalEncryptedRepositoryHoldsNoPlaintextAndDecryptsForTar() throws {
    let device = Device()
    let (password, plan) = try prepare(device)
    let repository = device.dir.url("vault")
    let made = try device.run("repo", "init", "--repo", repository, "--encrypt", "--password-file", password)
    #expect(made.status == 0, "\(made.err)")
    let backup = try device.run(
      "--json", "backup", "com.example.notes", "--repo", repository, "--password-file", password)
    #expect(backup.status == 0, "\(backup.err)")
    let snapshot = try #require(
      (try JSONSerialization.jsonObject(with: Data(backup.stdout)) as? [[String: Any]])?.first?["snapshot"]
        as? String)
    #expect(!FileManager.default.fileExists(atPath: repository + "/catalog.db"))
    var files: [(name: String, bytes: [UInt8])] = []
    let enumerator = FileManager.default.enumerator(atPath: repository)
    while let relative = enumerator?.nextObject() as? String {
      var isDirectory: ObjCBool = false
      guard FileManager.default.fileExists(atPath: repository + "/" + relative, isDirectory: &isDirectory),
        !isDirectory.boolValue
      else { continue }
      files.append((relative, Array(try Data(contentsOf: URL(fileURLWithPath: repository + "/" + relative)))))
    }
    #expect(
      files.contains { $0.name.hasPrefix("archives/") } && files.contains { $0.name.hasPrefix("keys/") })
    expectNoPlaintext(files, plan: plan)

    let show = try device.run("--json", "repo", "show", "--repo", repository, "--password-file", password)
    let summary = try JSONSerialization.jsonObject(with: Data(show.stdout)) as? [String: Any]
    #expect(summary?["encrypted"] as? Bool == true && summary?["snapshots"] as? Int == 1)

    // The plain pax tar, for GNU tar.
    let tar = try device.run(
      "archive", "decrypt", snapshot, "--repo", repository, "--password-file", password)
    #expect(tar.status == 0, "\(tar.err)")
    let listing = try runProcess(
      "/usr/bin/tar", ["--warning=no-unknown-keyword", "--zstd", "-t"], input: tar.stdout)
    #expect(listing.status == 0, "\(listing.err)")
    #expect(listing.out.contains("Documents/QuarterlyPlanZebra.txt"))
    let target = TemporaryDirectory("decrypted")
    let extract = try runProcess(
      "/usr/bin/tar", ["--warning=no-unknown-keyword", "--zstd", "-x", "-C", target.path], input: tar.stdout)
    #expect(extract.status == 0, "\(extract.err)")
    #expect(
      Array(try Data(contentsOf: URL(fileURLWithPath: target.url("Documents/QuarterlyPlanZebra.txt"))))
        == plan)

    // Restore, and check with every byte hashed.
    try FileManager.default.removeItem(atPath: device.home + "/Documents/QuarterlyPlanZebra.txt")
    let restored = try device.run(
      "restore", "com.example.notes", "--repo", repository, "--password-file", password)
    #expect(restored.status == 0, "\(restored.err)")
    #expect(
      Array(try Data(contentsOf: URL(fileURLWithPath: device.home + "/Documents/QuarterlyPlanZebra.txt")))
        == plan)
    #expect(
      try device.run("check", "--read-data", "--repo", repository, "--password-file", password).status == 0)
  }

  /// Large files are stored whole here (content-defined chunks are for local unencrypted
  /// repositories, whose archives restore reads in place): an in-place edit of a 3 MiB file
  /// between two backups restores byte for byte, from either snapshot.
  @Test func aLargeFileEditedInPlaceRestoresFromAnEncryptedRepository() throws {
    let device = Device()
    let (password, _) = try prepare(device)
    let repository = device.dir.url("vault")
    #expect(
      try device.run("repo", "init", "--repo", repository, "--encrypt", "--password-file", password).status
        == 0)
    let path = device.home + "/Documents/media.bin"
    var generator = SystemRandomNumberGenerator()
    var original = [UInt8](repeating: 0, count: 3 << 20)
    for index in stride(from: 0, to: original.count, by: 8) {
      withUnsafeBytes(of: generator.next() as UInt64) {
        original.replaceSubrange(index..<index + 8, with: $0)
      }
    }
    try Data(original).write(to: URL(fileURLWithPath: path))
    func backup() throws -> String {
      let run = try device.run(
        "--json", "backup", "com.example.notes", "--repo", repository, "--password-file", password)
      #expect(run.status == 0, "\(run.err)")
      return try #require(
        (try JSONSerialization.jsonObject(with: Data(run.stdout)) as? [[String: Any]])?.first?["snapshot"]
          as? String)
    }
    let first = try backup()
    var edited = original
    for index in 1_000_000..<1_065_536 { edited[index] ^= 0x5A }
    let handle = try #require(FileHandle(forUpdatingAtPath: path))
    try handle.seek(toOffset: 1_000_000)
    try handle.write(contentsOf: edited[1_000_000..<1_065_536])
    try handle.close()
    usleep(200_000)
    let second = try backup()
    for (snapshot, expected) in [(first, original), (second, edited)] {
      try FileManager.default.removeItem(atPath: path)
      let restored = try device.run(
        "restore", "com.example.notes", "--snapshot", snapshot, "--repo", repository, "--password-file",
        password)
      #expect(restored.status == 0, "\(restored.err)")
      #expect(Array(try Data(contentsOf: URL(fileURLWithPath: path))) == expected)
    }
    #expect(
      try device.run("check", "--read-data", "--repo", repository, "--password-file", password).status == 0)
  }

  @Test func anEncryptedBucketHoldsNoPlaintext() throws {
    let bucket = try Bucket()
    let device = Device()
    let (password, plan) = try prepare(device)
    #expect(try device.s3(bucket, "repo", "init", "--encrypt", "--password-file", password).status == 0)
    _ = try device.backup(to: bucket, environment: ["APPBOX_PASSWORD_FILE": password])
    try Data("a second version".utf8).write(to: URL(fileURLWithPath: device.home + "/Documents/more.txt"))
    _ = try device.backup(to: bucket, environment: ["APPBOX_PASSWORD_FILE": password])
    let objects = try allObjects(bucket)
    #expect(
      objects.contains { $0.key.contains("/manifests/") }
        && objects.contains { $0.key.contains("/snapshots/") })
    expectNoPlaintext(objects.map { ($0.key, $0.bytes) }, plan: plan)
    let denied = try device.s3(bucket, "snapshots")
    #expect(denied.status == 77, "\(denied.err)")
    let check = try device.s3(bucket, "check", "--read-data", environment: ["APPBOX_PASSWORD_FILE": password])
    #expect(check.status == 0, "\(check.out) \(check.err)")
  }

  @Test func aWrongPasswordIs77AndPasswdChangesItWithoutRewritingData() throws {
    let device = Device()
    let (password, _) = try prepare(device)
    let repository = device.dir.url("vault")
    #expect(
      try device.run("repo", "init", "--repo", repository, "--encrypt", "--password-file", password).status
        == 0)
    #expect(
      try device.run("backup", "com.example.notes", "--repo", repository, "--password-file", password).status
        == 0)
    // The device keeps the key it unlocked (sealed under its device key), checked against the
    // password: a wrong one is still refused.
    let caches = try FileManager.default.contentsOfDirectory(atPath: device.root + "/.appbox/cache")
    #expect(
      caches.contains { FileManager.default.fileExists(atPath: device.root + "/.appbox/cache/\($0)/key") })
    let wrong = try device.run("snapshots", "--repo", repository, input: Array("not it\n".utf8))
    #expect(wrong.status == 77, "\(wrong.err)")
    #expect(wrong.err.contains("Wrong password") && wrong.err.split(separator: "\n").count == 1)
    let archives = try FileManager.default.contentsOfDirectory(atPath: repository + "/archives")
    let sizes = try archives.map {
      try FileManager.default.attributesOfItem(atPath: repository + "/archives/" + $0)[.size] as? Int
    }

    let changed = try device.run(
      "repo", "passwd", "--repo", repository, input: Array("correct horse battery staple\nnew secret\n".utf8))
    #expect(changed.status == 0, "\(changed.err)")
    #expect(try device.run("snapshots", "--repo", repository, "--password-file", password).status == 77)
    let opened = try device.run("snapshots", "--repo", repository, input: Array("new secret\n".utf8))
    #expect(opened.status == 0 && opened.out.contains("com.example.notes"), "\(opened.err)")
    #expect(try FileManager.default.contentsOfDirectory(atPath: repository + "/archives") == archives)
    #expect(
      try archives.map {
        try FileManager.default.attributesOfItem(atPath: repository + "/archives/" + $0)[.size] as? Int
      }
        == sizes)
    #expect(try FileManager.default.contentsOfDirectory(atPath: repository + "/keys").count == 1)
    // An encrypted repository cannot be made over an existing one.
    let again = try device.run("repo", "init", "--repo", repository, "--encrypt", "--password-file", password)
    #expect(again.status == 73, "\(again.err)")
  }

  @Test func aFlippedBitInAnArchiveIsDetected() throws {
    let device = Device()
    let (password, _) = try prepare(device)
    let repository = device.dir.url("vault")
    #expect(
      try device.run("repo", "init", "--repo", repository, "--encrypt", "--password-file", password).status
        == 0)
    #expect(
      try device.run("backup", "com.example.notes", "--repo", repository, "--password-file", password).status
        == 0)
    let archive = try #require(
      try FileManager.default.contentsOfDirectory(atPath: repository + "/archives").first)
    let path = repository + "/archives/" + archive
    var bytes = Array(try Data(contentsOf: URL(fileURLWithPath: path)))
    bytes[bytes.count / 2] ^= 0x01
    try Data(bytes).write(to: URL(fileURLWithPath: path))
    let check = try device.run("check", "--read-data", "--repo", repository, "--password-file", password)
    #expect(check.status == 65, "\(check.out)")
    #expect(check.out.contains("does not authenticate"), "\(check.out)")
    try FileManager.default.removeItem(atPath: device.home + "/Documents/QuarterlyPlanZebra.txt")
    let restore = try device.run(
      "restore", "com.example.notes", "--repo", repository, "--password-file", password)
    #expect(restore.status == 65, "\(restore.err)")
    #expect(!FileManager.default.fileExists(atPath: device.home + "/Documents/QuarterlyPlanZebra.txt"))
  }

  @Test func keychainItemsReachAnotherDeviceOnlyThroughAnEncryptedRepository() throws {
    let device = Device()
    let (password, _) = try prepare(device)
    let bound = try device.run(
      "keychain", "com.example.notes", "add", "--service", "bound", "--account", "me", "--data", "stays-here",
      "--accessible", "when-unlocked-this-device-only")
    #expect(bound.status == 0, "\(bound.err)")
    let vault = device.dir.url("vault")
    let plain = device.dir.url("plain")
    #expect(
      try device.run("repo", "init", "--repo", vault, "--encrypt", "--password-file", password).status == 0)
    #expect(
      try device.run("backup", "com.example.notes", "--repo", vault, "--password-file", password).status == 0)
    #expect(try device.run("repo", "init", "--repo", plain).status == 0)
    #expect(try device.run("backup", "com.example.notes", "--repo", plain).status == 0)

    // From the unencrypted repository: the data, but no keychain item (as before).
    let second = Device()
    #expect(try second.run("device", "init").status == 0)
    let fromPlain = try second.run(
      "--json", "restore", "com.example.notes", "--snapshot", "latest", "--repo", plain)
    #expect(fromPlain.status == 0, "\(fromPlain.err)")
    #expect(fromPlain.err.contains("another device"))
    #expect(
      try second.run(
        "keychain", "com.example.notes", "get", "--service", "svc-marker-5521", "--account",
        "acct-marker-9083"
      )
      .status == 66)

    // From the encrypted one: the portable item comes back; the this-device-only one never does.
    let third = Device()
    #expect(try third.run("device", "init").status == 0)
    let fromVault = try third.run(
      "--json", "restore", "com.example.notes", "--snapshot", "latest", "--repo", vault, "--password-file",
      password)
    #expect(fromVault.status == 0, "\(fromVault.err)")
    let result = try JSONSerialization.jsonObject(with: Data(fromVault.stdout)) as? [String: Any]
    #expect(result?["keychainRestored"] as? Bool == true)
    #expect(fromVault.err.contains("this-device-only"), "\(fromVault.err)")
    let item = try third.run(
      "keychain", "com.example.notes", "get", "--service", "svc-marker-5521", "--account", "acct-marker-9083")
    #expect(item.status == 0 && item.out.contains("secret-marker-4410"), "\(item.err)")
    let list = try third.run("--json", "keychain", "com.example.notes", "list")
    #expect(list.out.contains("label-marker-2231"))
    #expect(
      try third.run("keychain", "com.example.notes", "get", "--service", "bound", "--account", "me").status
        == 66)
    // And on the device that made it, both come back.
    #expect(try device.run("keychain", "com.example.notes", "reset").status == 0)
    #expect(
      try device.run("restore", "com.example.notes", "--repo", vault, "--password-file", password).status == 0
    )
    #expect(
      try device.run("keychain", "com.example.notes", "get", "--service", "bound", "--account", "me").out
        .contains("stays-here"))
  }
}

/// Issue 26: an empty or absent password was reported as "Wrong password". It is still 77
/// (the repository refuses to open), and the line says no password was given.
struct EmptyPasswordTests {
  @Test func anEmptyOrAbsentPasswordIsNamedAsSuch() throws {
    let device = Device()
    try device.install("Notes-1.0/Notes.app")
    let vault = device.dir.url("vault")
    let password = try device.dir.write("pw", "correct horse\n", mode: 0o600)
    let empty = try device.dir.write("empty", "", mode: 0o600)
    let blankLine = try device.dir.write("blank", "\n", mode: 0o600)
    #expect(
      try device.run("repo", "init", "--repo", vault, "--encrypt", "--password-file", password).status == 0)
    let attempts = [
      try device.run("snapshots", "--repo", vault),  // nothing on standard input
      try device.run("snapshots", "--repo", vault, "--password-file", empty),
      try device.run("snapshots", "--repo", vault, "--password-file", blankLine),
      try device.run("--json", "snapshots", "--repo", vault, environment: ["APPBOX_PASSWORD_FILE": empty]),
    ]
    for result in attempts {
      #expect(result.status == 77, "\(result.err)")
      #expect(!result.err.contains("Wrong password"), "\(result.err)")
      #expect(
        result.err.hasPrefix(
          "Error: No password for the encrypted repository '\(vault)': the password given is empty"),
        "\(result.err)")
      #expect(result.err.split(separator: "\n").count == 1)
    }
    let document = try JSONSerialization.jsonObject(with: Data(attempts[3].stdout)) as? [String: Any]
    #expect((document?["error"] as? [String: Any])?["status"] as? Int == 77)
    // An empty new password is refused too, before anything is made.
    let none = try device.run(
      "repo", "init", "--repo", device.dir.url("other"), "--encrypt", "--password-file", empty)
    #expect(none.status != 0 && none.err.contains("empty"), "\(none.err)")
    #expect(!FileManager.default.fileExists(atPath: device.dir.url("other") + "/config"))
  }
}
