import AppboxCore
import AppboxCrypto
import AppboxRepository
import AppboxTestSupport
import Foundation
import Glibc
import Testing

/// `ls`, `find`, `diff` and `restore --dry-run` write their rows as they go: the output is
/// what printing it whole gave, JSON stays valid when a listing is empty, and a failure in the
/// middle (a damaged catalog, a stdout that fails) ends as docs/json.md "Streamed listings"
/// says.
struct StreamedListingEndToEndTests {
  static let app = "com.example.notes"
  /// More rows than a table batch (1000) and more bytes than a piece (64 KiB), text or JSON.
  static let many = 4000

  /// A device with Notes and two snapshots. Names sort so that path order is not name order
  /// ("a b", "a-b/y" and "a.txt" before "a/x"); Library/many holds `many` files, and a 1 GB
  /// sparse file comes after the first 1000 rows of `ls --recursive --long Library`.
  /// Between the snapshots: two files changed (a.txt, a/x), one removed, one added, a file
  /// turned into a folder and a folder into a file. Library/zz, after everything, stays.
  struct Fixture {
    let device = Device()
    var home = ""
    var ids: [String] = []
    var repository: String { device.root + "/Backups" }

    init() throws {
      try device.install("Notes-1.0/Notes.app")
      home =
        device.root + "/ApplicationRoot/"
        + (device.applicationRootEntries().first { !$0.hasPrefix(".") } ?? "")
      for path in ["Documents/a/x", "Documents/a.txt", "Documents/a-b/y", "Documents/a b", "Documents/turns"]
      {
        try write(path, "content of \(path)")
      }
      try write("Documents/folder/inside", "inside")
      try FileManager.default.createDirectory(
        atPath: home + "/Documents/empty", withIntermediateDirectories: true)
      for index in 0..<StreamedListingEndToEndTests.many {
        try write(String(format: "Library/many/file-%05d", index), String(repeating: "x", count: index % 97))
      }
      let sparse = try FileDescriptor.open(
        home + "/Library/many/file-01200-sparse", O_WRONLY | O_CREAT, mode: 0o600)
      try sparse.closeAfter { try $0.truncate(to: 1_000_000_000) }
      try write("Library/zz/last", "last")
      ids.append(try backup())
      try write("Documents/a.txt", "changed, and longer")
      try write("Documents/a/x", "changed, and longer")
      unlink(home + "/Documents/a-b/y")
      try write("Documents/a-c", "added")
      unlink(home + "/Documents/turns")
      try write("Documents/turns/now-a-file-inside", "x")
      try FileTree.remove(atPath: home + "/Documents/folder")
      try write("Documents/folder", "a file now")
      ids.append(try backup())
    }

    func write(_ path: String, _ text: String) throws {
      try FileManager.default.createDirectory(
        atPath: splitPath(home + "/" + path).directory, withIntermediateDirectories: true)
      try Data(text.utf8).write(to: URL(fileURLWithPath: home + "/" + path))
    }

    func backup() throws -> String {
      let result = try device.run("--json", "backup", StreamedListingEndToEndTests.app)
      #expect(result.status == 0, "\(result.err)")
      let list = try JSONSerialization.jsonObject(with: Data(result.stdout)) as? [[String: Any]]
      return list?.first?["snapshot"] as? String ?? ""
    }

    func json(_ arguments: String...) throws -> Any {
      let result = try appbox(["--json"] + arguments, root: device.root)
      #expect(result.status == 0, "\(arguments): \(result.err)")
      return try JSONSerialization.jsonObject(with: Data(result.stdout))
    }

    func text(_ arguments: String...) throws -> [String] {
      let result = try appbox(arguments, root: device.root)
      #expect(result.status == 0, "\(arguments): \(result.err)")
      #expect(result.out.hasSuffix("\n"))
      return result.out.split(separator: "\n", omittingEmptySubsequences: false).dropLast().map(String.init)
    }

    /// Removes tree `path`'s row of the snapshot from the catalog: reading it then fails (65).
    func damageTree(_ path: String, of snapshot: String) throws {
      let catalog = try Catalog(path: repository + "/catalog.db", readOnly: true)
      let found = try #require(try catalog.snapshot(id: snapshot))
      var digest = found.rootTree
      for component in path.split(separator: "/") {
        digest = try #require(try catalog.tree(digest).entry(named: Array(component.utf8))?.digest)
      }
      let removed = try runProcess(
        "/usr/bin/python3",
        [
          "-c",
          "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); "
            + "n=c.execute('DELETE FROM trees WHERE digest = ?', (bytes.fromhex(sys.argv[2]),)).rowcount; "
            + "c.commit(); print(n)",
          repository + "/catalog.db", digest.hex,
        ])
      #expect(removed.out == "1\n", "\(removed.err)")
    }
  }

  /// The paths below `directory` of the live home, depth first in name order (as `ls
  /// --recursive` walks a snapshot), with whether each is a folder and its size; without
  /// Library/Caches, which backups do not keep.
  func liveListing(_ root: String, _ directory: String) throws -> [(
    path: String, isDirectory: Bool, bytes: Int
  )] {
    var result: [(String, Bool, Int)] = []
    let names = try FileManager.default.contentsOfDirectory(atPath: root + "/" + directory).sorted {
      Array($0.utf8).lexicographicallyPrecedes(Array($1.utf8))
    }
    for name in names {
      let path = directory + "/" + name
      if path == "Library/Caches" { continue }
      var status = stat()
      #expect(lstat(root + "/" + path, &status) == 0)
      let isDirectory = status.st_mode & S_IFMT == S_IFDIR
      result.append((path, isDirectory, Int(status.st_size)))
      if isDirectory { result += try liveListing(root, path) }
    }
    return result
  }

  /// Lines as the commands printed them before streaming: every change, each with its mark,
  /// sorted by path (a stable sort: for one path, the marks in the order given).
  func sortedChanges(_ lists: [(mark: String, paths: [String])]) -> [String] {
    lists.flatMap { list in list.paths.map { (list.mark, $0) } }
      .enumerated().sorted {
        $0.element.1 == $1.element.1
          ? $0.offset < $1.offset
          : Array($0.element.1.utf8).lexicographicallyPrecedes(Array($1.element.1.utf8))
      }.map { $0.element.0 + $0.element.1 }
  }

  @Test func streamedListingsAreWhatPrintingThemWholeGave() throws {
    let fixture = try Fixture()
    let latest = fixture.ids[1]
    // ls --recursive: the snapshot's entries in walk order, as the live home has them.
    for folder in ["Documents", "Library"] {
      let object = try #require(try fixture.json("ls", latest, folder, "--recursive") as? [String: Any])
      #expect(object.keys.sorted() == ["app", "entries", "path", "snapshot"])
      #expect(object["snapshot"] as? String == latest && object["path"] as? String == folder)
      let entries = try #require(object["entries"] as? [[String: Any]])
      let live = try liveListing(fixture.home, folder)
      #expect(entries.compactMap { $0["path"] as? String } == live.map(\.path))
      #expect(
        entries.compactMap { $0["type"] as? String } == live.map { $0.isDirectory ? "directory" : "file" })
      #expect(
        zip(entries, live).allSatisfy { $1.isDirectory || $0["bytes"] as? Int == $1.bytes },
        "sizes of \(folder)")
      // The text is the same rows: a folder's path ends in '/'.
      let lines = try fixture.text("ls", latest, folder, "--recursive")
      #expect(lines == live.map { $0.path + ($0.isDirectory ? "/" : "") })
    }

    // --long: the table's header, then a row per entry; the first 1000 rows are padded to
    // their widest cell (as a table of them alone), and later rows never narrower.
    let long = try fixture.text("ls", latest, "Library", "--recursive", "--long")
    let live = try liveListing(fixture.home, "Library")
    #expect(long.count == live.count + 1)
    #expect(
      long[0].hasPrefix("MODE        BYTES")
        && long[0].hasSuffix("MODIFIED" + String(repeating: " ", count: 14) + "PATH"))
    func pathColumn(_ line: String) -> Int {
      line.distance(from: line.startIndex, to: line.range(of: " Library/")?.upperBound ?? line.endIndex) - 8
    }
    let firstBatch = long[1...1000].map(pathColumn)
    #expect(Set(firstBatch).count == 1)
    #expect(
      long[0].distance(from: long[0].startIndex, to: long[0].range(of: "PATH")!.lowerBound) == firstBatch[0])
    let later = long[1001...].map(pathColumn)
    #expect(later.allSatisfy { $0 >= firstBatch[0] })
    #expect(later.contains { $0 > firstBatch[0] }, "the 1 GB file widens BYTES after the first batch")
    for (line, entry) in zip(long.dropFirst(), live) {
      let cells = line.split(separator: " ", omittingEmptySubsequences: true)
      #expect(cells.count == 4 && cells[3] == entry.path + (entry.isDirectory ? "/" : ""), "\(line)")
      #expect(entry.isDirectory || Int(cells[1]) == entry.bytes, "\(line)")
    }

    // find: newest snapshot first, each in walk order; the text has one row per match.
    let found = try #require(try fixture.json("find", "file-0*") as? [[String: Any]])
    let names = live.map(\.path).filter { $0.hasPrefix("Library/many/file-0") }
    #expect(found.count == 2 * names.count)
    #expect(
      found.compactMap { $0["snapshot"] as? String } == Array(repeating: latest, count: names.count)
        + Array(repeating: fixture.ids[0], count: names.count))
    #expect(found.compactMap { $0["path"] as? String } == names + names)
    #expect(
      found.first.map { Set($0.keys) } == [
        "snapshot", "app", "time", "path", "escapedPath", "type", "mode", "bytes", "modified",
      ])
    let findRows = try fixture.text("find", "file-0*")
    #expect(findRows.count == found.count + 1 && findRows[0].hasPrefix("SNAPSHOT  APP "))
    #expect(
      zip(findRows.dropFirst(), found).allSatisfy { $0.hasSuffix(" " + ($1["path"] as? String ?? "?")) })

    // diff: the arrays of one walk each, and the text as the sorted merge of them.
    let diff = try #require(try fixture.json("diff", fixture.ids[0], latest) as? [String: Any])
    #expect(Array(diff.keys).sorted() == ["added", "changed", "newSnapshot", "oldSnapshot", "removed"])
    let added = try #require(diff["added"] as? [String])
    let removed = try #require(diff["removed"] as? [String])
    let changed = try #require(diff["changed"] as? [String])
    #expect(
      added == ["Documents/a-c", "Documents/folder", "Documents/turns", "Documents/turns/now-a-file-inside"])
    #expect(removed == ["Documents/a-b/y", "Documents/folder", "Documents/folder/inside", "Documents/turns"])
    #expect(changed == ["Documents/a.txt", "Documents/a/x"])
    let diffText = try fixture.text("diff", fixture.ids[0], latest)
    #expect(diffText == sortedChanges([("+ ", added), ("- ", removed), ("M ", changed)]))
    #expect(
      diffText == [
        "- Documents/a-b/y", "+ Documents/a-c", "M Documents/a.txt", "M Documents/a/x", "+ Documents/folder",
        "- Documents/folder", "- Documents/folder/inside", "+ Documents/turns", "- Documents/turns",
        "+ Documents/turns/now-a-file-inside",
      ])

    // restore --dry-run of the first snapshot: the same, with its leading and closing lines.
    let dry = try #require(
      try fixture.json("restore", Self.app, "--snapshot", fixture.ids[0], "--dry-run") as? [String: Any])
    let wouldAdd = try #require(dry["added"] as? [String])
    let wouldReplace = try #require(dry["replaced"] as? [String])
    let wouldRemove = try #require(dry["removed"] as? [String])
    #expect(wouldAdd == ["Documents/a-b/y", "Documents/folder/inside"])
    #expect(wouldReplace == ["Documents/a.txt", "Documents/a/x", "Documents/folder", "Documents/turns"])
    #expect(wouldRemove == ["Documents/a-c", "Documents/turns/now-a-file-inside"])
    let rehearsed = try fixture.text("restore", Self.app, "--snapshot", fixture.ids[0], "--dry-run")
    #expect(rehearsed.first?.hasPrefix("Would restore \(Self.app) from snapshot \(fixture.ids[0])") == true)
    #expect(
      Array(rehearsed.dropFirst().prefix(8))
        == sortedChanges([("+ ", wouldAdd), ("~ ", wouldReplace), ("- ", wouldRemove)]))
    let unchanged = try #require(dry["unchanged"] as? Int)
    #expect(
      rehearsed.suffix(2) == [
        "2 added, 4 replaced, 2 removed, \(unchanged) unchanged", "Dry run: nothing was changed.",
      ])
  }

  @Test func emptyListingsAreValidDocuments() throws {
    let fixture = try Fixture()
    let latest = fixture.ids[1]
    let ls = try fixture.device.run("--json", "ls", latest, "Documents/empty", "--recursive")
    #expect(ls.status == 0, "\(ls.err)")
    #expect(
      ls.out == """
        {
          "snapshot": "\(latest)",
          "app": "\(Self.app)",
          "path": "Documents/empty",
          "entries": []
        }

        """)
    let find = try fixture.device.run("--json", "find", "nothing-is-called-this")
    #expect(find.status == 0 && find.out == "[]\n", "\(find.err)")
    let diff = try fixture.device.run("--json", "diff", latest, latest)
    #expect(
      diff.out == """
        {
          "oldSnapshot": "\(latest)",
          "newSnapshot": "\(latest)",
          "added": [],
          "removed": [],
          "changed": []
        }

        """)
    #expect(try fixture.text("ls", latest, "Documents/empty") == ["Documents/empty is empty."])
    #expect(
      try fixture.text("find", "nothing-is-called-this")
        == ["No snapshot holds a path matching 'nothing-is-called-this'."])
    #expect(try fixture.text("diff", latest, latest) == ["No differences between \(latest) and \(latest)."])
  }

  /// A tree the catalog lost, reached after more than a piece of output: stdout keeps the
  /// rows before it (the JSON cut after its last whole element), stderr has the one error
  /// line, and the status is the failure's. A short listing that fails is the error document.
  @Test func aFailureMidListingCutsTheOutputAfterItsLastRow() throws {
    let fixture = try Fixture()
    let latest = fixture.ids[1]
    try fixture.damageTree("Library/zz", of: latest)
    let before = try liveListing(fixture.home, "Library").prefix { !$0.path.hasPrefix("Library/zz/") }

    let json = try fixture.device.run("--json", "ls", latest, "Library", "--recursive")
    #expect(json.status == 65)
    #expect(json.err.hasPrefix("Error: Catalog is missing tree "), "\(json.err)")
    #expect(json.err.filter { $0 == "\n" }.count == 1)
    #expect((try? JSONSerialization.jsonObject(with: Data(json.stdout))) == nil)
    #expect(json.out.hasSuffix("\n    }"))
    let closed = try #require(
      try JSONSerialization.jsonObject(with: Data((json.out + "\n  ]\n}").utf8)) as? [String: Any])
    let entries = try #require(closed["entries"] as? [[String: Any]])
    #expect(entries.compactMap { $0["path"] as? String } == before.map(\.path))

    let text = try fixture.device.run("ls", latest, "Library", "--recursive")
    #expect(text.status == 65)
    #expect(text.err == json.err)
    #expect(text.out == before.map { $0.path + ($0.isDirectory ? "/" : "") + "\n" }.joined())

    // The same failure before the first piece: as any command's failure.
    let short = try fixture.device.run("--json", "ls", latest, "Library/zz", "--recursive")
    #expect(short.status == 65)
    let document = try JSONSerialization.jsonObject(with: Data(short.stdout)) as? [String: Any]
    let error = try #require(document?["error"] as? [String: Any])
    #expect(error["status"] as? Int == 65 && short.err == "Error: \(error["message"] as? String ?? "?")\n")
    let shortText = try fixture.device.run("ls", latest, "Library/zz", "--recursive")
    #expect(shortText.status == 65 && shortText.stdout.isEmpty)
  }

  /// A stdout that fails stops the walk where it failed: the status is the write's (74) or
  /// SIGPIPE's, not that of the damaged tree further on, which the walk never reaches.
  @Test func aFailingStdoutStopsTheWalk() throws {
    let fixture = try Fixture()
    let latest = fixture.ids[1]
    try fixture.damageTree("Library/zz", of: latest)
    for arguments in [
      ["--json", "ls", latest, "Library", "--recursive"], ["ls", latest, "Library", "--recursive"],
    ] {
      let full = try FileDescriptor.open("/dev/full", O_WRONLY)
      let errors = try FileDescriptor.open(fixture.device.dir.url("stderr"), O_WRONLY | O_CREAT | O_TRUNC)
      let child = try spawnProcess(
        productsDirectory + "/appbox", ["--root", fixture.device.root] + arguments, stdout: full.rawValue,
        stderr: errors.rawValue)
      full.close()
      errors.close()
      #expect(child.wait() == 74)
      let err = try String(contentsOfFile: fixture.device.dir.url("stderr"), encoding: .utf8)
      #expect(err == "Error: Unable to write standard output: no space left on device\n", "\(arguments)")

      // A closed pipe: SIGPIPE ends appbox, as it ends any tool in a pipeline.
      let pipe = try FileDescriptor.pipe()
      pipe.read.close()
      let piped = try spawnProcess(
        productsDirectory + "/appbox", ["--root", fixture.device.root] + arguments,
        stdout: pipe.write.rawValue)
      pipe.write.close()
      #expect(piped.wait() == 128 + SIGPIPE)
    }
  }
}
