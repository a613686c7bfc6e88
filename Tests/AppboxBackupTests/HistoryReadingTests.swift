import AppboxCrypto
import AppboxTestSupport
import Foundation
import Testing

@testable import AppboxBackup
@testable import AppboxRepository

struct HistoryReadingTests {
  /// A catalog holding the trees it is given.
  final class Trees {
    let dir = TemporaryDirectory("history")
    let catalog: Catalog
    init() throws { catalog = try Catalog(path: dir.url("catalog.db")) }

    @discardableResult
    func add(_ entries: [TreeEntry]) throws -> Digest {
      let (data, digest) = Tree(entries: entries.sorted { $0.name.lexicographicallyPrecedes($1.name) })
        .encodedWithDigest()
      try catalog.insertTree(digest, data: data, archive: "test")
      return digest
    }
  }

  static func file(_ name: String, size: Int64, time: Int64 = 1) -> TreeEntry {
    TreeEntry(
      name: Array(name.utf8), type: .file, permissions: 0o644, size: size, modificationTime: time,
      changeTime: time, inode: UInt64(size), digest: SHA256.hash(Array("\(name)-\(size)-\(time)".utf8)))
  }

  /// What the comparer should report, the slow way: every entry of `new` that `old` lacks or
  /// records differently.
  static func naiveChanges(_ old: [TreeEntry], _ new: [TreeEntry]) -> Set<String> {
    var before: [[UInt8]: TreeEntry] = [:]
    for entry in old { before[entry.name] = entry }
    return Set(new.filter { before[$0.name] != $0 }.map { String(decoding: $0.name, as: UTF8.self) })
  }

  @Test func theComparerFindsExactlyTheChangedEntriesWhateverTheEdits() throws {
    let trees = try Trees()
    let reader = TreeReader(catalog: trees.catalog)
    let comparer = TreeComparer(trees: reader)
    var random = SeededRandom(seed: 2024)
    for round in 0..<140 {
      // Around the one-byte/two-byte boundary of the entry count, and larger lists.
      let count = [1, 2, 126, 127, 128, 129, 400][round % 7]
      var old = (0..<count).map { Self.file(String(format: "f%05d", $0 * 2), size: Int64(100 + $0)) }
      if round % 5 == 0 {
        old = old.map {
          var e = $0
          e.name = Array("same-prefix-".utf8) + e.name
          return e
        }
      }
      var new = old
      for _ in 0..<(1 + random.below(4)) {
        switch random.below(4) {
        case 0 where !new.isEmpty: new.remove(at: random.below(new.count))
        case 1: new.append(Self.file(String(format: "f%05d", random.below(count * 2) * 2 + 1), size: 7))
        default:
          guard !new.isEmpty else { continue }
          let index = random.below(new.count)
          new[index] = Self.file(
            String(decoding: new[index].name, as: UTF8.self), size: new[index].size, time: 2)
        }
      }
      var seen: Set<[UInt8]> = []
      new = new.filter { seen.insert($0.name).inserted }
      let oldDigest = try trees.add(old)
      let newDigest = try trees.add(new)
      var reported: [String] = []
      try comparer.changes(from: oldDigest, to: newDigest, under: []) { change in
        reported.append(String(decoding: change.path, as: UTF8.self))
      }
      #expect(Set(reported) == Self.naiveChanges(old, new), "round \(round)")
      #expect(reported.count == Set(reported).count)
      reader.advance()
    }
  }

  @Test func subtreesAreComparedOnlyWhereTheirDigestsDiffer() throws {
    let trees = try Trees()
    let same = try trees.add([Self.file("kept", size: 1)])
    let before = try trees.add([Self.file("a", size: 1), Self.file("b", size: 2)])
    let after = try trees.add([Self.file("a", size: 1), Self.file("b", size: 3), Self.file("c", size: 4)])
    func directory(_ name: String, _ digest: Digest) -> TreeEntry {
      TreeEntry(name: Array(name.utf8), type: .directory, permissions: 0o755, digest: digest)
    }
    let oldRoot = try trees.add([directory("Documents", before), directory("Library", same)])
    let newRoot = try trees.add([directory("Documents", after), directory("Library", same)])
    var changes: [FileChange] = []
    try TreeComparer(trees: TreeReader(catalog: trees.catalog)).changes(from: oldRoot, to: newRoot, under: [])
    {
      changes.append($0)
    }
    #expect(changes.map { String(decoding: $0.path, as: UTF8.self) } == ["Documents/b", "Documents/c"])
    #expect(changes[0].old?.size == 2 && changes[0].new.size == 3 && changes[1].old == nil)

    let resolver = PathResolver(
      trees: TreeReader(catalog: trees.catalog), components: [Array("Documents".utf8), Array("c".utf8)])
    #expect(try resolver.record(inRoot: newRoot).facts?.size == 4)
    #expect(try resolver.record(inRoot: oldRoot) == .absent)
    let throughFile = PathResolver(
      trees: TreeReader(catalog: trees.catalog), components: ["Documents", "a", "x"].map { Array($0.utf8) })
    #expect(try throughFile.record(inRoot: newRoot) == .insideNonDirectory(depth: 2))
  }

  @Test func aChainOfFoldersThousandsDeepIsWalkedWithoutRecursion() throws {
    let trees = try Trees()
    var digest = try trees.add([Self.file("bottom.txt", size: 9)])
    let depth = 10_000
    try trees.catalog.database.inTransaction {
      for _ in 0..<depth {
        digest = try trees.add([
          TreeEntry(name: [UInt8(ascii: "d")], type: .directory, permissions: 0o755, digest: digest)
        ])
      }
    }
    let root = try trees.add([
      TreeEntry(name: Array("Documents".utf8), type: .directory, permissions: 0o755, digest: digest)
    ])
    var found: [FileChange] = []
    try TreeComparer(trees: TreeReader(catalog: trees.catalog)).changes(from: nil, to: root, under: []) {
      found.append($0)
    }
    #expect(found.count == 1 && found[0].path.count == "Documents".count + 2 * depth + "/bottom.txt".count)
    // The latest-snapshot walk of advise, over the same chain.
    var collector = FindingCollector(catalog: trees.catalog)
    var files: [[UInt8]: FileActivity] = [:]
    let snapshot = Snapshot(
      id: "00000000", app: "x", device: "d", containerID: "c", version: "1", bundleDirectoryName: "X.app",
      seal: "", time: Date(), kind: .full, parent: nil, rootTree: root, files: 1, bytes: 9, bytesAdded: 9,
      archive: "a", keychainOffset: nil, warnings: 0)
    try collector.walk(snapshot, files: &files)
    #expect(collector.directoryTotals[Array("Documents".utf8)]?.files == 1)
    #expect(collector.directoryTotals.count == depth + 1)
  }

  /// A history whose snapshots differ in every directory of a wide home: the trees kept stay
  /// within the reader's budget at every step, and what the comparer reports is the same as
  /// with a budget that keeps everything.
  @Test func theTreesKeptStayWithinTheBudgetWhateverTheHistory() throws {
    let trees = try Trees()
    var roots: [Digest] = []
    for version in 0..<4 {
      let folders = try (0..<120).map { folder in
        let files = (0..<40).map { index in
          // Every folder (each its own tree) changes one file in each version.
          Self.file("file-\(index)", size: Int64(folder * 100 + index), time: index == version ? 2 : 1)
        }
        let digest = try trees.add(files)
        return TreeEntry(
          name: Array("folder-\(folder)".utf8), type: .directory, permissions: 0o755, digest: digest)
      }
      let documents = try trees.add(folders)
      roots.append(
        try trees.add([
          TreeEntry(name: Array("Documents".utf8), type: .directory, permissions: 0o755, digest: documents)
        ]))
    }
    func changes(budget: Int) throws -> (reported: [String], mostKept: Int) {
      let reader = TreeReader(catalog: trees.catalog, budget: budget)
      let comparer = TreeComparer(trees: reader)
      var reported: [String] = []
      var mostKept = 0
      for index in 1..<roots.count {
        try comparer.changes(from: roots[index - 1], to: roots[index], under: []) { change in
          reported.append(String(decoding: change.path, as: UTF8.self))
          mostKept = max(mostKept, reader.keptBytes)
        }
        reader.advance()
      }
      return (reported, mostKept)
    }
    let everything = try changes(budget: 1 << 30)
    let bounded = try changes(budget: 64 << 10)
    #expect(everything.reported.count == 3 * 120 * 2)
    #expect(bounded.reported == everything.reported)
    #expect(bounded.mostKept <= 64 << 10)
    // Without the bound, the walk keeps every tree it read.
    #expect(everything.mostKept > 4 * (64 << 10))
  }
}
