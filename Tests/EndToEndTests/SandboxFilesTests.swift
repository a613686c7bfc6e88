import AppboxCore
import AppboxPlist
import AppboxTestSupport
import Foundation
import Glibc
import Testing

/// `files`, `defaults` and `exclude` against hostile homes: paths that try to leave
/// Documents or the home are refused with 77 and nothing anywhere changes.
struct SandboxFilesTests {
  @Test(arguments: [false, true])
  func hostilePathsAreRefusedAndTouchNothing(componentWalk: Bool) throws {
    let device = Device()
    let notes = device.home(try device.install("Notes-1.0/Notes.app"))
    let journal = device.home(try device.install("Journal-1.0/Journal.app"))
    try Data("JOURNAL-SECRET".utf8).write(to: URL(fileURLWithPath: journal + "/Documents/secret.txt"))
    try PropertyList.dictionary(["token": .string("JOURNAL-PREF")]).binaryData()
      .write(to: URL(fileURLWithPath: journal + "/Library/Preferences/com.example.journal.plist"))
    try Data("own".utf8).write(to: URL(fileURLWithPath: notes + "/Documents/own.txt"))
    // Symlinks the app planted in its own Documents and Preferences.
    for (name, target) in [
      ("etc", "/etc"), ("journal", journal + "/Documents"), ("up", "../.."),
      ("registry", "../../../registry.db"),
      ("absolute-own", notes + "/Documents/own.txt"),
    ] {
      #expect(symlink(target, notes + "/Documents/" + name) == 0)
    }
    #expect(
      symlink(
        journal + "/Library/Preferences/com.example.journal.plist",
        notes + "/Library/Preferences/com.example.notes.plist") == 0)
    let payload = try device.dir.write("payload.txt", "PAYLOAD")
    let escape = "/tmp/appbox-escape-\(UUID().uuidString)"
    let before = treeSnapshot(device.root + "/ApplicationRoot")
    let registry = contents(device.root + "/registry.db")

    let app = "com.example.notes"
    let attempts: [[String]] = [
      ["files", app, "pull", "../../../registry.db"], ["files", app, "pull", "/etc/passwd"],
      ["files", app, "pull", "etc/passwd"], ["files", app, "pull", "journal/secret.txt"],
      ["files", app, "pull", "registry"], ["files", app, "pull", "up/registry.db"],
      ["files", app, "pull", "absolute-own"],
      ["files", app, "pull", "journal/secret.txt", device.dir.url("out")],
      ["files", app, "ls", "etc"], ["files", app, "ls", "journal"], ["files", app, "ls", "up"],
      ["files", app, "ls", ".."], ["files", app, "ls", "/etc"],
      ["files", app, "push", payload, "etc/evil"], ["files", app, "push", payload, "journal/evil"],
      ["files", app, "push", payload, "journal/"], ["files", app, "push", payload, "up/evil"],
      ["files", app, "push", payload, "../evil"], ["files", app, "push", payload, escape],
      ["files", app, "push", payload, "etc"],
      ["files", app, "rm", "journal/secret.txt"], ["files", app, "rm", "etc/passwd"],
      ["files", app, "rm", "../x"],
      ["files", app, "rm", "/etc/passwd"], ["files", app, "rm", "up/registry.db"],
      ["defaults", app, "read"], ["defaults", app, "read", "token"],
      ["defaults", app, "write", "token", "evil"],
      ["defaults", app, "delete", "token"],
      ["exclude", app, "Documents/journal/secret.txt"], ["exclude", app, "Documents/etc/passwd"],
      ["exclude", app, "Documents/up/registry.db"], ["exclude", app, "Documents/journal"],
      ["exclude", app, "../x"], ["exclude", app, "/etc/passwd"], ["exclude", app, "Documents/../../x"],
    ]
    for arguments in attempts {
      let result = try appbox(
        arguments, root: device.root, environment: componentWalk ? ["APPBOX_NO_OPENAT2": "1"] : [:])
      #expect(result.status == 77, "\(arguments): \(result.status) \(result.err)")
      #expect(
        result.err.hasPrefix("Error: ") && result.err.split(separator: "\n").count == 1, "\(result.err)")
      #expect(result.out.isEmpty, "\(arguments) printed \(result.out)")
    }
    #expect(treeSnapshot(device.root + "/ApplicationRoot") == before)
    #expect(contents(device.root + "/registry.db") == registry)
    #expect(!exists(escape) && !exists(device.dir.url("out")))
    #expect(!isExcluded(journal + "/Documents/secret.txt") && !isExcluded("/etc/passwd"))

    // Removing a planted symlink removes the link itself, never its target.
    #expect(try device.run("files", app, "rm", "journal").status == 0)
    #expect(!exists(notes + "/Documents/journal"))
    #expect(contents(journal + "/Documents/secret.txt") == Array("JOURNAL-SECRET".utf8))
  }

  @Test func pushAndPullRoundTripBytesExactly() throws {
    let device = Device()
    let notes = device.home(try device.install("Notes-1.0/Notes.app"))
    let bytes = (0..<300_000).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ $0 >> 9) }
    let source = try device.dir.write("host/blob.bin", bytes: bytes)

    let push = try device.run("files", "com.example.notes", "push", source)
    #expect(push.status == 0, "\(push.err)")
    #expect(push.out == "Pushed 300000 bytes to Documents/blob.bin\n")
    #expect(contents(notes + "/Documents/blob.bin") == bytes)
    #expect(try device.run("files", "com.example.notes", "pull", "blob.bin").stdout == bytes)
    #expect(try device.run("files", "com.example.notes", "pull", "blob.bin", "-").stdout == bytes)

    let pulled = try device.run(
      "files", "com.example.notes", "pull", "blob.bin", device.dir.url("host/copy.bin"))
    #expect(pulled.out == "Pulled 300000 bytes to \(device.dir.url("host/copy.bin"))\n", "\(pulled.err)")
    #expect(contents(device.dir.url("host/copy.bin")) == bytes)
    try device.dir.makeDirectory("into")
    #expect(
      try device.run("files", "com.example.notes", "pull", "blob.bin", device.dir.url("into")).status == 0)
    #expect(contents(device.dir.url("into/blob.bin")) == bytes)

    // From stdin, into a folder, and over an existing file: atomic replacement, no debris.
    let stdin = try device.run(
      "files", "com.example.notes", "push", "-", "stdin.bin", input: Array(bytes.reversed()))
    #expect(stdin.status == 0, "\(stdin.err)")
    #expect(contents(notes + "/Documents/stdin.bin") == Array(bytes.reversed()))
    try FileManager.default.createDirectory(
      atPath: notes + "/Documents/Folder", withIntermediateDirectories: false)
    #expect(
      try device.run("files", "com.example.notes", "push", source, "Folder").out
        == "Pushed 300000 bytes to Documents/Folder/blob.bin\n")
    #expect(contents(notes + "/Documents/Folder/blob.bin") == bytes)
    let smaller = try device.dir.write("host/small.bin", "small")
    #expect(try device.run("files", "com.example.notes", "push", smaller, "blob.bin").status == 0)
    #expect(contents(notes + "/Documents/blob.bin") == Array("small".utf8))
    #expect(
      try FileManager.default.contentsOfDirectory(atPath: notes + "/Documents").sorted()
        == ["Folder", "blob.bin", "stdin.bin"])

    // A symlink at the destination name is replaced, not written through.
    try Data("own".utf8).write(to: URL(fileURLWithPath: notes + "/Documents/own.txt"))
    #expect(symlink("own.txt", notes + "/Documents/alias") == 0)
    #expect(try device.run("files", "com.example.notes", "push", smaller, "alias").status == 0)
    #expect(contents(notes + "/Documents/own.txt") == Array("own".utf8))
    #expect(
      contents(notes + "/Documents/alias") == Array("small".utf8) && !isSymlink(notes + "/Documents/alias"))

    let listing = try #require(try device.json("files", "com.example.notes", "ls") as? [[String: Any]])
    #expect(listing.map { $0["name"] as? String } == ["Folder", "alias", "blob.bin", "own.txt", "stdin.bin"])
    #expect(listing.first?["type"] as? String == "directory")
    #expect(try device.run("files", "com.example.notes", "pull", "missing.bin").status == 66)
    #expect(try device.run("files", "com.example.notes", "rm", "missing.bin").status == 66)
    #expect(try device.run("files", "com.example.notes", "rm", "Folder").out == "Removed Documents/Folder\n")
    #expect(!exists(notes + "/Documents/Folder"))
  }

  @Test func caseSensitiveNamesStayApart() throws {
    let device = Device()
    let notes = device.home(try device.install("Notes-1.0/Notes.app"))
    let lower = try device.dir.write("lower/a.txt", "lower")
    let upper = try device.dir.write("upper/A.txt", "UPPER")
    #expect(try device.run("files", "com.example.notes", "push", lower).status == 0)
    #expect(try device.run("files", "com.example.notes", "push", upper).status == 0)
    let names = try #require(try device.json("files", "com.example.notes", "ls") as? [[String: Any]])
    #expect(names.map { $0["name"] as? String } == ["A.txt", "a.txt"])
    #expect(try device.run("files", "com.example.notes", "pull", "a.txt").out == "lower")
    #expect(try device.run("files", "com.example.notes", "pull", "A.txt").out == "UPPER")

    #expect(try device.run("defaults", "com.example.notes", "write", "key", "lower").status == 0)
    #expect(try device.run("defaults", "com.example.notes", "write", "Key", "upper").status == 0)
    #expect(try device.run("defaults", "com.example.notes", "read", "key").out == "lower\n")
    #expect(try device.run("defaults", "com.example.notes", "read", "Key").out == "upper\n")
    #expect(try device.run("defaults", "com.example.notes", "read", "KEY").status == 66)

    #expect(try device.run("exclude", "com.example.notes", "Documents/a.txt").status == 0)
    #expect(isExcluded(notes + "/Documents/a.txt") && !isExcluded(notes + "/Documents/A.txt"))
    #expect(try device.run("files", "com.example.notes", "rm", "a.txt").status == 0)
    #expect(!exists(notes + "/Documents/a.txt"))
    #expect(contents(notes + "/Documents/A.txt") == Array("UPPER".utf8))
  }

  @Test func appsThatDoNotOptInShareNothing() throws {
    let device = Device()
    let journal = device.home(try device.install("Journal-1.0/Journal.app"))
    try Data("private".utf8).write(to: URL(fileURLWithPath: journal + "/Documents/private.txt"))
    let payload = try device.dir.write("payload.txt", "PAYLOAD")
    for arguments in [["ls"], ["push", payload], ["pull", "private.txt"], ["rm", "private.txt"]] {
      let result = try appbox(["files", "com.example.journal"] + arguments, root: device.root)
      #expect(result.status == 77, "\(arguments)")
      #expect(
        result.err == "Error: com.example.journal does not share its files (its Info.plist does not set "
          + "UIFileSharingEnabled to true)\n")
      #expect(result.out.isEmpty)
    }
    #expect(try FileManager.default.contentsOfDirectory(atPath: journal + "/Documents") == ["private.txt"])
  }
}

func isSymlink(_ path: String) -> Bool {
  var st = stat()
  return lstat(path, &st) == 0 && FileStatus(st).type == .symlink
}
