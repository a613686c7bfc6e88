import AppboxBackup
import AppboxRepository
import AppboxCore
import AppboxTestSupport
import Foundation
import Glibc
import Testing

/// ls, dump, find and restore --include/--target through the CLI, on encrypted and S3
/// repositories, compared byte for byte with a real restore.
struct BrowseEndToEndTests {
  static let hostile = "evil\nname\u{1B}]52;c;aGk=\u{07}"

  enum Kind { case plain, encrypted, s3 }

  /// A device with Notes, data, a repository of `kind` and two snapshots; returns the extra
  /// arguments every repository command needs, the environment and the snapshot ids.
  func prepare(_ device: Device, _ kind: Kind) throws -> (
    arguments: [String], environment: [String: String], ids: [String]
  ) {
    let home = device.root + "/ApplicationRoot/" + (try device.install("Notes-1.0/Notes.app"))
    func write(_ path: String, _ bytes: [UInt8]) throws {
      try FileManager.default.createDirectory(
        atPath: splitPath(home + "/" + path).directory, withIntermediateDirectories: true)
      try Data(bytes).write(to: URL(fileURLWithPath: home + "/" + path))
    }
    try write("Documents/a.txt", Array("alpha".utf8))
    try write("Documents/sub/" + Self.hostile, Array("hostile".utf8))
    #expect(symlink("../a.txt", home + "/Documents/sub/link") == 0)
    #expect(link(home + "/Documents/a.txt", home + "/Documents/hard") == 0)
    try FileDescriptor.open(home + "/Documents/a.txt", O_RDONLY).closeAfter {
      try $0.setExtendedAttribute("user.note", Array("kept".utf8))
    }
    var random = SystemRandomNumberGenerator()
    try write("Documents/big.bin", (0..<(2 << 20)).map { _ in UInt8.random(in: 0...255, using: &random) })
    for index in 0..<40 {
      try write("Library/many/file-\(index)", Array("content \(index) of the folder".utf8))
    }
    var arguments: [String] = []
    var environment: [String: String] = [:]
    switch kind {
    case .plain:
      arguments = ["--repo", device.dir.url("repo")]
    case .encrypted:
      let password = device.dir.url("password")
      try "browse password\n".write(toFile: password, atomically: true, encoding: .utf8)
      arguments = ["--repo", device.dir.url("vault"), "--password-file", password]
    case .s3:
      let cluster = try SwiftCluster.shared()
      environment = cluster.environment
      arguments = ["--repo", "s3://\(SwiftCluster.uniqueBucket("browse"))/repo"]
    }
    let initialize =
      kind == .encrypted
      ? ["repo", "init", "--encrypt"] + arguments : ["repo", "init"] + arguments
    let made = try appbox(initialize, root: device.root, environment: environment)
    #expect(made.status == 0, "\(made.err)")
    var ids: [String] = []
    for round in 0..<2 {
      if round == 1 {
        let fd = try FileDescriptor.open(home + "/Documents/big.bin", O_WRONLY)
        try fd.closeAfter { fd in
          try [UInt8](repeating: 7, count: 4096).withUnsafeBytes { try fd.writeAll($0, at: 1 << 20) }
        }
        try write("Library/many/file-7", Array("changed".utf8))
      }
      let backup = try appbox(
        ["--json", "backup", "com.example.notes"] + arguments, root: device.root, environment: environment)
      #expect(backup.status == 0, "\(backup.err)")
      let list = try JSONSerialization.jsonObject(with: Data(backup.stdout)) as? [[String: Any]]
      ids.append(list?.first?["snapshot"] as? String ?? "")
    }
    return (arguments, environment, ids)
  }

  func check(_ kind: Kind) throws {
    let device = Device()
    let (arguments, environment, ids) = try prepare(device, kind)
    func run(_ command: [String], input: [UInt8] = []) throws -> ProcessResult {
      try appbox(command + arguments, root: device.root, environment: environment, input: input)
    }
    let home =
      device.root + "/ApplicationRoot/"
      + (try FileManager.default.contentsOfDirectory(atPath: device.root + "/ApplicationRoot").first {
        !$0.hasPrefix(".")
      } ?? "")
    let skipping: Set<String> = ["Notes.app", "tmp", "Library/Caches"]
    let live = try captureTree(home, skipping: skipping)
    let prefix = String(ids[1].prefix(5))

    // One file, byte for byte.
    let big = try run(["dump", prefix, "Documents/big.bin"])
    #expect(big.status == 0, "\(big.err)")
    #expect(big.stdout == live[Array("Documents/big.bin".utf8)]?.content)

    // The whole snapshot as a tar, extracted by GNU tar.
    let tar = try run(["dump", "latest", "/", "--app", "com.example.notes"])
    #expect(tar.status == 0, "\(tar.err)")
    let extracted = device.dir.url("extracted")
    try FileManager.default.createDirectory(atPath: extracted, withIntermediateDirectories: false)
    let untar = try runProcess(
      "/usr/bin/tar",
      ["--warning=no-unknown-keyword", "--xattrs", "--xattrs-include=user.*", "-x", "-C", extracted],
      input: tar.stdout)
    #expect(untar.status == 0, "\(untar.err)")
    expectSameTree(live, try captureTree(extracted, skipping: skipping))

    // --target: a plain tree.
    let target = device.dir.url("target")
    let targeted = try run(["restore", "com.example.notes", "--snapshot", prefix, "--target", target])
    #expect(targeted.status == 0, "\(targeted.err)")
    let plain = try captureTree(target)
    expectSameTree(live, plain)

    // ls escapes the hostile name; JSON carries it as it is.
    let listed = try run(["ls", prefix, "Documents/sub"])
    #expect(
      listed.status == 0 && !listed.stdout.contains(0x1B) && listed.out.contains("evil\\nname"),
      "\(listed.err)")
    let json = try run(["--json", "ls", prefix, "Documents/sub"])
    let object = try JSONSerialization.jsonObject(with: Data(json.stdout)) as? [String: Any]
    let paths = (object?["entries"] as? [[String: Any]])?.compactMap { $0["path"] as? String }
    #expect(paths == ["Documents/sub/" + Self.hostile, "Documents/sub/link"])

    // A real restore after the data changed: what --target gave.
    try Data("scribbled".utf8).write(to: URL(fileURLWithPath: home + "/Documents/a.txt"))
    let restored = try run(["restore", "com.example.notes", "--snapshot", ids[1]])
    #expect(restored.status == 0, "\(restored.err)")
    expectSameTree(plain, try captureTree(home, skipping: skipping))

    // find, in both snapshots.
    let found = try run(["--json", "find", "file-7"])
    let matches = try JSONSerialization.jsonObject(with: Data(found.stdout)) as? [[String: Any]]
    #expect(matches?.compactMap { $0["snapshot"] as? String } == [ids[1], ids[0]])
    #expect(matches?.compactMap { $0["bytes"] as? Int } == [7, "content 7 of the folder".count])
  }

  @Test func aPlainRepositoryBrowsesAsARestoreGives() throws { try check(.plain) }
  @Test func anEncryptedRepositoryBrowsesAsARestoreGives() throws { try check(.encrypted) }
  @Test func anS3RepositoryBrowsesAsARestoreGives() throws { try check(.s3) }

  @Test func aCrashBetweenIncludedPathsLeavesEachWhollyOldOrNew() throws {
    let device = Device()
    let (arguments, _, ids) = try prepare(device, .plain)
    let home =
      device.root + "/ApplicationRoot/"
      + (try FileManager.default.contentsOfDirectory(atPath: device.root + "/ApplicationRoot").first {
        !$0.hasPrefix(".")
      } ?? "")
    try Data("new a".utf8).write(to: URL(fileURLWithPath: home + "/Documents/a.txt"))
    try FileTree.remove(atPath: home + "/Library/many")
    try FileManager.default.createDirectory(
      atPath: home + "/Library/many", withIntermediateDirectories: false)
    try Data("live".utf8).write(to: URL(fileURLWithPath: home + "/Library/many/only-live"))
    let crashed = try appbox(
      [
        "restore", "com.example.notes", "--snapshot", ids[0], "--include", "Documents/a.txt", "--include",
        "Library/many",
      ]
        + arguments, root: device.root, environment: ["APPBOX_CRASH_AT": "restore.include.swapped"])
    #expect(crashed.status != 0)
    // The first path is the snapshot's, the second still wholly the live one.
    #expect(try String(contentsOfFile: home + "/Documents/a.txt", encoding: .utf8) == "alpha")
    #expect(try FileManager.default.contentsOfDirectory(atPath: home + "/Library/many") == ["only-live"])
    // The next mutating command removes the staging directory (the old a.txt with it).
    #expect(try device.run("exclude", "com.example.notes", "Documents/a.txt").status == 0)
    #expect(device.applicationRootEntries().filter { $0.hasPrefix(".") } == [])
    // Done again to the end: both paths are the snapshot's.
    let again = try appbox(
      [
        "restore", "com.example.notes", "--snapshot", ids[0], "--include", "Documents/a.txt", "--include",
        "Library/many",
      ]
        + arguments, root: device.root)
    #expect(again.status == 0, "\(again.err)")
    #expect(try FileManager.default.contentsOfDirectory(atPath: home + "/Library/many").count == 40)
  }

  @Test func usageErrorsAndMissingThings() throws {
    let device = Device()
    let (arguments, _, ids) = try prepare(device, .plain)
    func status(_ command: String...) throws -> Int32 {
      try appbox(command + arguments, root: device.root).status
    }
    #expect(try status("ls", "ab") == 64)
    #expect(try status("ls", "latest") == 64)
    #expect(try status("ls", ids[0], "Documents/../..") == 64)
    #expect(try status("ls", ids[0], "Documents/none") == 66)
    #expect(try status("dump", "ffff0000", "Documents/a.txt") == 66)
    #expect(try status("--json", "dump", ids[0], "Documents/a.txt") == 64)
    #expect(
      try status("restore", "com.example.notes", "--snapshot", ids[0], "--include", "Notes.app/Info.plist")
        == 64)
    #expect(try status("forget", "com.example.notes") == 64)
    #expect(try status("forget", "com.example.notes", "--keep-within", "3w") == 64)
    let tagged = try appbox(
      ["--json", "backup", "com.example.notes", "--tag", "release-1"] + arguments, root: device.root)
    #expect(tagged.status == 0, "\(tagged.err)")
    let listed = try appbox(["--json", "snapshots", "--tag", "release-1"] + arguments, root: device.root)
    let rows = try JSONSerialization.jsonObject(with: Data(listed.stdout)) as? [[String: Any]]
    #expect(rows?.count == 1)
    let dry = try appbox(
      ["--json", "forget", "com.example.notes", "--keep-last", "1", "--keep-tag", "release-1", "--dry-run"]
        + arguments,
      root: device.root)
    let decision = try JSONSerialization.jsonObject(with: Data(dry.stdout)) as? [String: Any]
    #expect((decision?["removed"] as? [String])?.sorted() == ids.sorted())
    #expect(try appbox(["snapshots", "--json"] + arguments, root: device.root).stdout.count > 0)
    let after =
      try JSONSerialization.jsonObject(
        with: Data(try appbox(["--json", "snapshots"] + arguments, root: device.root).stdout))
      as? [[String: Any]]
    #expect(after?.count == 3)
  }
}

private func expectSameTree(
  _ expected: [[UInt8]: CapturedEntry], _ actual: [[UInt8]: CapturedEntry],
  sourceLocation: SourceLocation = #_sourceLocation
) {
  let lines = differences(expected, actual)
  #expect(lines.isEmpty, "\(lines.joined(separator: "\n"))", sourceLocation: sourceLocation)
}
