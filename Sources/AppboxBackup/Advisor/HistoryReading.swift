// Reading an app's backup history for `why` and `advise`, through the catalog's public
// questions only (snapshots, trees by digest, where content is stored), never its tables, so
// that this code keeps working when the repository layer changes underneath.
//
// Three ways to read it:
// - `TreeComparer` walks two snapshots' trees together, as `diff` does: equal digests mean
//   equal subtrees, skipped unread; entries are compared in place (TreeCursor, no decoding)
//   and only files whose recorded entry differs come out. Between consecutive backups of a
//   large app that touches a few dozen trees, whatever the app's size.
// - `PathResolver` finds one path's entry in many snapshots, remembering per depth what each
//   directory digest resolved to, so snapshots sharing a directory share the work.
// - `ContentAttribution` says how many bytes a snapshot's archive spent on a changed file:
//   new content stored with that archive (the catalog knows which archive holds each
//   content's copy), or content the engine stores again because it streams large files.
// Invariants: nothing here writes; every tree read is validated by TreeCursor; a tree
// missing from the catalog is `.corruptCatalog`.

import AppboxCore
import AppboxCrypto
import AppboxRepository
import Glibc

/// What history records of one entry: enough to tell whether it changed and what it cost.
struct EntryFacts: Equatable, Sendable {
  var type: TreeEntryType
  var permissions: UInt32
  var size: Int64
  var modificationTime: Int64
  var changeTime: Int64
  var inode: UInt64
  var linkCount: UInt64
  /// Content digest (files) or subtree digest (directories); nil when excluded.
  var digest: Digest?
  var isExcluded: Bool

  init(_ entry: EncodedEntry, in buffer: UnsafeRawBufferPointer) {
    type = entry.type
    permissions = entry.permissions
    size = entry.size
    modificationTime = entry.modificationTime
    changeTime = entry.changeTime
    inode = entry.inode
    linkCount = entry.linkCount
    digest = entry.digest(in: buffer)
    isExcluded = entry.isExcluded
  }

  /// The entry as a `TreeEntry` carrying the fields change detection compares.
  var treeEntry: TreeEntry {
    TreeEntry(
      name: [], type: type, permissions: permissions, size: size, modificationTime: modificationTime,
      changeTime: changeTime, inode: inode, linkCount: linkCount, digest: digest, isExcluded: isExcluded)
  }
}

/// A tree's bytes and where each of its entries starts: parsed (and validated) once by
/// TreeCursor, after which any entry is found without parsing the ones before it.
struct IndexedTree {
  let data: [UInt8]
  /// Entry `i` is `data[offsets[i] ..< offsets[i + 1]]`; the last offset is the end.
  let offsets: [Int32]

  init(_ data: [UInt8]) throws {
    self.data = data
    var offsets: [Int32] = []
    try data.withUnsafeBytes { buffer in
      var cursor = try TreeCursor(buffer)
      offsets.reserveCapacity(cursor.count + 1)
      var end = buffer.count
      while let entry = try cursor.next() {
        offsets.append(Int32(entry.range.lowerBound))
        end = entry.range.upperBound
      }
      offsets.append(Int32(end))
    }
    self.offsets = offsets
  }

  var count: Int { offsets.count - 1 }

  func range(_ index: Int) -> Range<Int> { Int(offsets[index])..<Int(offsets[index + 1]) }

  /// Entry `index`, parsed from `buffer` (this tree's bytes).
  func entry(_ index: Int, in buffer: UnsafeRawBufferPointer) throws -> EncodedEntry {
    try TreeCursor.entry(at: range(index), in: buffer)
  }

  /// The index of the entry named `name`, by binary search over the sorted names.
  func index(of name: [UInt8]) throws -> Int? {
    try data.withUnsafeBytes { buffer in
      try name.withUnsafeBytes { wanted in
        var low = 0
        var high = count
        while low < high {
          let middle = (low + high) / 2
          let order = compareNames(buffer[try entry(middle, in: buffer).nameRange], wanted[...])
          if order == 0 { return middle }
          if order < 0 { low = middle + 1 } else { high = middle }
        }
        return nil
      }
    }
  }
}

/// Trees by digest, read through the catalog and indexed. Trees read in the current
/// generation are kept until the next one ends: walking consecutive snapshots reads each
/// changed tree twice (as the newer side of one pair, then the older side of the next), and
/// only once from SQLite. What is kept is bounded (`budget` bytes): a generation that grows past
/// half of it ends early, so a history whose snapshots differ in every directory of a large
/// home costs some trees read twice, not memory in proportion to its directories.
final class TreeReader {
  static let defaultBudget = 16 << 20
  let catalog: Catalog
  let budget: Int
  private var current: [Digest: IndexedTree] = [:]
  private var previous: [Digest: IndexedTree] = [:]
  private var currentBytes = 0

  init(catalog: Catalog, budget: Int = TreeReader.defaultBudget) {
    self.catalog = catalog
    self.budget = budget
  }

  /// Bytes the trees kept in both generations take, about.
  var keptBytes: Int {
    (current.values.reduce(0) { $0 + $1.keptBytes }) + (previous.values.reduce(0) { $0 + $1.keptBytes })
  }

  func tree(_ digest: Digest) throws -> IndexedTree {
    if let tree = current[digest] { return tree }
    if let tree = previous[digest] {
      keep(tree, as: digest)
      return tree
    }
    guard let data = try catalog.treeData(digest) else {
      throw BackupError(.corruptCatalog, "Catalog is missing tree \(digest.hex.prefix(16))")
    }
    let tree = try IndexedTree(data)
    keep(tree, as: digest)
    return tree
  }

  func data(_ digest: Digest) throws -> [UInt8] { try tree(digest).data }

  /// Starts a new generation: trees not read during the one that ends are dropped.
  func advance() {
    previous = current
    current = [:]
    currentBytes = 0
  }

  private func keep(_ tree: IndexedTree, as digest: Digest) {
    if currentBytes + tree.keptBytes > budget / 2 { advance() }
    current[digest] = tree
    currentBytes += tree.keptBytes
  }
}

extension IndexedTree {
  /// What keeping it costs, about: its bytes, its entry offsets and a dictionary slot.
  var keptBytes: Int { data.count + 4 * offsets.count + 64 }
}

/// A file (anything but a directory) that is new, or recorded differently, in a snapshot.
struct FileChange {
  var path: [UInt8]
  var new: EntryFacts
  /// The entry the older snapshot had at this path; nil when it had none (or a directory).
  var old: EntryFacts?
}

/// Compares two snapshots' trees and reports the files that are new or different.
///
/// Two versions of a directory usually differ in a few entries. Their entry lists share a
/// byte-identical head and tail, found with memcmp; entries inside them are identical and
/// are neither parsed nor compared, only the middle is merged by name.
struct TreeComparer {
  let trees: TreeReader

  /// Calls `body` for every non-directory entry under `new` whose record differs from the one
  /// under `old` (nil: everything under `new` is new), with paths under `path`. `skipTop`
  /// leaves out a name of the top tree (the bundle). Identical subtrees are not read.
  func changes(
    from old: Digest?, to new: Digest, under path: [UInt8], skipTop: [UInt8]? = nil,
    _ body: (FileChange) throws -> Void
  ) throws {
    // Depth first with a stack of its own: an app can nest folders thousands deep.
    var pending: [(old: Digest?, new: Digest, path: [UInt8])] = [(old, new, path)]
    var isTop = true
    while let (old, new, path) = pending.popLast() {
      defer { isTop = false }
      if old == new { continue }
      let subtrees = try compare(old, new, under: path, skipping: isTop ? skipTop : nil, body)
      pending.append(contentsOf: subtrees.reversed())
    }
  }

  /// Compares one pair of trees: reports the files, returns the subdirectories to compare.
  private func compare(
    _ old: Digest?, _ new: Digest, under path: [UInt8], skipping skipTop: [UInt8]?,
    _ body: (FileChange) throws -> Void
  ) throws -> [(old: Digest?, new: Digest, path: [UInt8])] {
    let after = try trees.tree(new)
    let before = try old.map { try trees.tree($0) }
    var subtrees: [(old: Digest?, new: Digest, path: [UInt8])] = []
    let (newRange, oldRange) =
      before.map { Self.differingEntries(before: $0, after: after) } ?? (0..<after.count, 0..<0)
    try after.data.withUnsafeBytes { newBuffer in
      try (before?.data ?? []).withUnsafeBytes { oldBuffer in
        var oldIndex = oldRange.lowerBound
        var oldEntry = oldIndex < oldRange.upperBound ? try before!.entry(oldIndex, in: oldBuffer) : nil
        for newIndex in newRange {
          let entry = try after.entry(newIndex, in: newBuffer)
          let name = newBuffer[entry.nameRange]
          if let skipTop, skipTop.withUnsafeBytes({ compareNames(name, $0[...]) == 0 }) { continue }
          // Advance the older listing to the first name not before this one.
          var match: EncodedEntry?
          while let candidate = oldEntry {
            let order = compareNames(oldBuffer[candidate.nameRange], name)
            if order < 0 {
              oldIndex += 1
              oldEntry = oldIndex < oldRange.upperBound ? try before!.entry(oldIndex, in: oldBuffer) : nil
              continue
            }
            if order == 0 { match = candidate }
            break
          }
          if let match, compareNames(oldBuffer[match.range], newBuffer[entry.range]) == 0 { continue }
          let entryPath = joinPath(path, Array(name))
          let facts = EntryFacts(entry, in: newBuffer)
          if entry.type == .directory {
            guard let digest = facts.digest else { continue }  // excluded: nothing recorded inside
            let previous = match.flatMap { $0.type == .directory ? $0.digest(in: oldBuffer) : nil }
            subtrees.append((previous, digest, entryPath))
          } else {
            let previous = match.flatMap { $0.type == .directory ? nil : EntryFacts($0, in: oldBuffer) }
            try body(FileChange(path: entryPath, new: facts, old: previous))
          }
        }
      }
    }
    return subtrees
  }

  /// The entries of `after` and of `before` that can differ: those outside the longest
  /// byte-identical head and tail of their entry lists (entries there are the same, at the
  /// same distance from the start or from the end).
  static func differingEntries(before: IndexedTree, after: IndexedTree) -> (Range<Int>, Range<Int>) {
    let oldStart = Int(before.offsets[0])
    let newStart = Int(after.offsets[0])
    let oldLength = before.data.count - oldStart
    let newLength = after.data.count - newStart
    let (head, tail) = before.data.withUnsafeBytes { old in
      after.data.withUnsafeBytes { new in
        let limit = min(oldLength, newLength)
        let head = commonPrefix(old.baseAddress! + oldStart, new.baseAddress! + newStart, limit)
        let tail = commonSuffix(
          old.baseAddress! + before.data.count, new.baseAddress! + after.data.count, limit - head)
        return (head, tail)
      }
    }
    // Entries wholly inside the head: the same offsets on both sides.
    var first = 0
    while first < after.count && first < before.count && Int(after.offsets[first + 1]) - newStart <= head
      && after.offsets[first + 1] - after.offsets[0] == before.offsets[first + 1] - before.offsets[0]
    {
      first += 1
    }
    // Entries wholly inside the tail: from the end, while both sides start an entry at the
    // same distance from their ends.
    var newEnd = after.count
    var oldEnd = before.count
    while newEnd > first && oldEnd > first {
      let newFromEnd = after.data.count - Int(after.offsets[newEnd - 1])
      let oldFromEnd = before.data.count - Int(before.offsets[oldEnd - 1])
      guard newFromEnd == oldFromEnd, newFromEnd <= tail else { break }
      newEnd -= 1
      oldEnd -= 1
    }
    return (first..<newEnd, first..<oldEnd)
  }
}

/// How many leading bytes two buffers share (at most `limit`).
func commonPrefix(_ a: UnsafeRawPointer, _ b: UnsafeRawPointer, _ limit: Int) -> Int {
  var low = 0
  // Whole blocks by memcmp, then the last block byte by byte.
  let block = 256
  while low + block <= limit && memcmp(a + low, b + low, block) == 0 { low += block }
  while low < limit
    && a.load(fromByteOffset: low, as: UInt8.self) == b.load(fromByteOffset: low, as: UInt8.self)
  {
    low += 1
  }
  return low
}

/// How many trailing bytes two buffers share, given pointers just past their ends.
func commonSuffix(_ aEnd: UnsafeRawPointer, _ bEnd: UnsafeRawPointer, _ limit: Int) -> Int {
  var length = 0
  let block = 256
  while length + block <= limit && memcmp(aEnd - length - block, bEnd - length - block, block) == 0 {
    length += block
  }
  while length < limit
    && (aEnd - length - 1).load(as: UInt8.self) == (bEnd - length - 1).load(as: UInt8.self)
  {
    length += 1
  }
  return length
}

/// Where a path stands in one snapshot.
enum PathRecord: Equatable {
  /// Recorded, with its entry.
  case present(EntryFacts)
  /// Not recorded: the snapshot has no entry of that name.
  case absent
  /// Not recorded: the ancestor `depth` components long was marked exclude-from-backup.
  case insideExcluded(depth: Int)
  /// Not recorded: the ancestor `depth` components long is not a directory.
  case insideNonDirectory(depth: Int)

  var facts: EntryFacts? {
    if case .present(let facts) = self { return facts }
    return nil
  }
}

/// Finds one path's entry in snapshot after snapshot, resolving each directory digest once.
final class PathResolver {
  let trees: TreeReader
  let components: [[UInt8]]
  private var memo: [[Digest: PathRecord]]

  init(trees: TreeReader, components: [[UInt8]]) {
    self.trees = trees
    self.components = components
    memo = Array(repeating: [:], count: components.count)
  }

  /// The record of the path in the snapshot whose root tree is `root`.
  func record(inRoot root: Digest) throws -> PathRecord { try resolve(depth: 0, tree: root) }

  /// The record of the path's components from `depth` on, in the tree `digest`.
  private func resolve(depth: Int, tree digest: Digest) throws -> PathRecord {
    if let known = memo[depth][digest] { return known }
    let tree = try trees.tree(digest)
    let found: (facts: EntryFacts, isDirectory: Bool)? = try tree.index(of: components[depth]).map { index in
      try tree.data.withUnsafeBytes { buffer in
        let entry = try tree.entry(index, in: buffer)
        return (EntryFacts(entry, in: buffer), entry.type == .directory)
      }
    }
    let record: PathRecord
    if let found {
      if depth == components.count - 1 {
        record = .present(found.facts)
      } else if !found.isDirectory {
        record = .insideNonDirectory(depth: depth + 1)
      } else if let child = found.facts.digest {
        record = try resolve(depth: depth + 1, tree: child)
      } else {
        record = .insideExcluded(depth: depth + 1)
      }
    } else {
      record = .absent
    }
    memo[depth][digest] = record
    return record
  }
}

/// The bytes a snapshot's archive spent on its changed files, the way the backup engine
/// stores content: new content once, where the catalog records its copy; content the
/// repository already held costs nothing when the file is small (read whole, deduplicated)
/// and its full size when the file streams (over `ContentReader.wholeReadLimit`), except that
/// a large file that was a file before, backed up incrementally into an uncompressed archive,
/// costs only the chunks it added there (`StreamMode.chunks`); the later paths of a
/// hard-linked inode cost nothing.
struct ContentAttribution {
  let catalog: Catalog
  let snapshot: Snapshot
  private var digests: Set<Digest> = []
  private var inodes: Set<UInt64> = []

  init(catalog: Catalog, snapshot: Snapshot) {
    self.catalog = catalog
    self.snapshot = snapshot
  }

  mutating func bytesAdded(by change: FileChange) throws -> Int64 {
    let new = change.new
    guard new.type == .file, !new.isExcluded, let digest = new.digest, new.size > 0 else { return 0 }
    if new.linkCount > 1 && !inodes.insert(new.inode).inserted { return 0 }
    let streams = new.size > Int64(ContentReader.wholeReadLimit)
    let chunked =
      snapshot.kind == .incremental && new.size >= ChunkingParameters.threshold && change.old?.type == .file
      && !snapshot.archive.hasSuffix(".gz") && !snapshot.archive.hasSuffix(".zst")
    if chunked {
      // Only the chunks first stored with this archive; the same content again costs nothing.
      guard digests.insert(digest).inserted else { return 0 }
      return try catalog.contentBytes(digest, storedIn: snapshot.archive)
    }
    if digest != change.old?.digest, digests.insert(digest).inserted {
      let stored = try catalog.contentBytes(digest, storedIn: snapshot.archive)
      // Content the repository held already (a file back to an earlier version): the catalog
      // keeps the first copy's location, but a streamed file was written again all the same.
      if stored > 0 || !streams { return stored }
      return new.size
    }
    // Read again with content the repository holds: only a streamed file is stored again.
    return streams ? new.size : 0
  }
}
