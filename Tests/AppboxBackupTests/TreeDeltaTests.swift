import AppboxCrypto
import AppboxTestSupport
import Foundation
import Testing

@testable import AppboxBackup
@testable import AppboxRepository

struct TreeDeltaTests {
  /// A directory of `count` files, as the scanner would record it.
  static func tree(_ count: Int, seed: UInt64 = 1) -> Tree {
    var random = SeededRandom(seed: seed)
    let entries = (0..<count).map { index in
      TreeEntry(
        name: Array(String(format: "file-%05d.bin", index).utf8), type: .file, permissions: 0o644, uid: 501,
        gid: 501, size: Int64(random.below(1 << 20)),
        modificationTime: 1_700_000_000_000_000_000 + Int64(index),
        changeTime: 1_700_000_000_000_000_000 + Int64(index), inode: UInt64(1000 + index),
        digest: SHA256.hash(Array("\(index)-\(seed)".utf8)))
    }
    return Tree(entries: entries)
  }

  /// Deltas decode to exactly the new tree, whatever the edit: entries changed, added,
  /// removed, the first and the last.
  @Test func deltasRoundTripEveryKindOfEdit() throws {
    let base = Self.tree(50)
    var random = SeededRandom(seed: 9)
    for round in 0..<40 {
      var edited = base
      for _ in 0..<(1 + random.below(4)) {
        switch random.below(3) {
        case 0:
          let index = random.below(edited.entries.count)
          edited.entries[index].size += 1
          edited.entries[index].digest = SHA256.hash([UInt8(round)])
        case 1:
          edited.entries.remove(at: random.below(edited.entries.count))
        default:
          let name = Array("added-\(round)-\(random.below(1000))".utf8)
          if edited.entry(named: name) == nil {
            edited.entries.append(
              TreeEntry(name: name, type: .symlink, permissions: 0o777, linkTarget: [0x2F]))
            edited.entries.sort { $0.name.lexicographicallyPrecedes($1.name) }
          }
        }
      }
      let old = base.encoded()
      let new = edited.encoded()
      let delta = try TreeDelta.make(from: old, to: new)
      #expect(try TreeDelta.apply(delta, to: old) == new, "round \(round)")
    }
    // One changed entry of fifty costs about one entry.
    var one = base
    one.entries[25].size += 1
    let delta = try TreeDelta.make(from: base.encoded(), to: one.encoded())
    #expect(delta.count < base.encoded().count / 20, "\(delta.count) of \(base.encoded().count)")
  }

  /// A delta is untrusted input (catalogs are rebuilt from archives): anything malformed is
  /// refused, never trapped on.
  @Test func malformedDeltasAreRefused() throws {
    let base = Self.tree(10).encoded()
    var edited = Self.tree(10)
    edited.entries[3].size += 1
    let good = try TreeDelta.make(from: base, to: edited.encoded())
    var cases: [[UInt8]] = [
      [], [0x00], Array(good.dropLast()), good + [0x00],
      [TreeDelta.tag, 10, 0x00],  // a zero-length op
      [TreeDelta.tag, 10, 21, 0x00],  // copy 10 from 0... then nothing: fine length, see below
      [TreeDelta.tag, 4, 0x0B, 0x00],  // copy 5 bytes into a 4-byte target
      [TreeDelta.tag, 5, 0x0B, 0xFF, 0xFF, 0x03],  // copy from far outside the base
      [TreeDelta.tag, 0xFF, 0xFF, 0xFF, 0xFF, 0x0F],  // an absurd length
    ]
    cases[5] = [TreeDelta.tag, 11, 21, 0x00]  // claims 11 bytes, copies 10
    for bad in cases {
      #expect(throws: BackupError.self, "\(bad.prefix(12))") { try TreeDelta.apply(bad, to: base) }
    }
    // Every truncation and most bit flips: an error or a different tree, never a trap.
    for index in good.indices {
      var damaged = good
      damaged[index] ^= 0x41
      _ = try? TreeDelta.apply(damaged, to: base)
      _ = try? TreeDelta.apply(Array(good[0..<index]), to: base)
    }
  }

  /// In the catalog: chains resolve, a delta against the wrong base or with its base gone is
  /// `.corruptCatalog`, and chains stay within the maximum depth.
  @Test func catalogChainsResolveAndRefuseDamage() throws {
    let dir = TemporaryDirectory("deltas")
    let catalog = try Catalog(path: dir.url("catalog.db"))
    var versions = [Self.tree(40)]
    for round in 1...20 {
      var next = versions[round - 1]
      next.entries[round].size += Int64(round)
      versions.append(next)
    }
    var stored: [StoredTree] = []
    var previous: (digest: Digest, data: [UInt8], depth: Int)?
    for version in versions {
      let (data, digest) = version.encodedWithDigest()
      let tree = StoredTree.choosing(digest: digest, data: data, base: previous)
      try catalog.insertTree(tree, archive: "a.tar")
      stored.append(tree)
      previous = (digest, data, try #require(try catalog.treeDepth(digest)))
    }
    #expect(stored.contains { $0.base == nil } && stored.filter { $0.base != nil }.count >= 16)
    for (version, tree) in zip(versions, stored) {
      #expect(try catalog.treeData(tree.digest) == version.encoded())
      #expect(try #require(try catalog.treeDepth(tree.digest)) <= Catalog.maximumDeltaDepth)
    }
    // A delta stored against the wrong base decodes to bytes that do not hash to its digest.
    let wrong = try #require(stored.last { $0.base != nil })
    let other = try #require(stored.first { $0.base == nil && $0.digest != wrong.base })
    try catalog.database.execute(
      "UPDATE trees SET base = ?1 WHERE digest = ?2", .blob(other.digest.bytes), .blob(wrong.digest.bytes))
    #expect(throws: BackupError.self) { try catalog.treeData(wrong.digest) }
    // Its base gone: refused, not silently missing.
    try catalog.database.execute(
      "UPDATE trees SET base = ?1 WHERE digest = ?2", .blob(SHA256.hash([1]).bytes), .blob(wrong.digest.bytes)
    )
    #expect(throws: BackupError.self) { try catalog.treeData(wrong.digest) }
    // A whole copy of a tree (from a later manifest) replaces its delta.
    try catalog.insertTree(
      wrong.digest, data: versions[stored.firstIndex(of: wrong)!].encoded(), archive: "b.tar")
    #expect(try catalog.storedTree(wrong.digest)?.base == nil)
    #expect(try catalog.treeData(wrong.digest) != nil)
  }
}
