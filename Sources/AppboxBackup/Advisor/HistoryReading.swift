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

/// Trees by digest, read through the catalog. Trees read in the current generation are kept
/// until the next one ends: walking consecutive snapshots reads each changed tree twice (as
/// the newer side of one pair, then the older side of the next), and only once from SQLite.
final class TreeReader {
  let catalog: Catalog
  private var current: [Digest: [UInt8]] = [:]
  private var previous: [Digest: [UInt8]] = [:]

  init(catalog: Catalog) { self.catalog = catalog }

  func data(_ digest: Digest) throws -> [UInt8] {
    if let data = current[digest] { return data }
    if let data = previous[digest] {
      current[digest] = data
      return data
    }
    guard let data = try catalog.treeData(digest) else {
      throw BackupError(.corruptCatalog, "Catalog is missing tree \(digest.hex.prefix(16))")
    }
    current[digest] = data
    return data
  }

  /// Starts a new generation: trees not read during the one that ends are dropped.
  func advance() {
    previous = current
    current = [:]
  }
}

/// A file (anything but a directory) that is new, or recorded differently, in a snapshot.
struct FileChange {
  var path: [UInt8]
  var new: EntryFacts
  /// The entry the older snapshot had at this path; nil when it had none (or a directory).
  var old: EntryFacts?
}

/// Compares two snapshots' trees and reports the files that are new or different.
struct TreeComparer {
  let trees: TreeReader

  /// Calls `body` for every non-directory entry under `new` whose record differs from the one
  /// under `old` (nil: everything under `new` is new), with paths under `path`. `skipTop`
  /// leaves out names of the top tree (the bundle). Identical subtrees are not read.
  func changes(
    from old: Digest?, to new: Digest, under path: [UInt8], skipTop: [UInt8]? = nil,
    _ body: (FileChange) throws -> Void
  ) throws {
    if old == new { return }
    let newData = try trees.data(new)
    let oldData = try old.map { try trees.data($0) } ?? []
    var subtrees: [(old: Digest?, new: Digest, path: [UInt8])] = []
    try newData.withUnsafeBytes { after in
      try oldData.withUnsafeBytes { before in
        var newCursor = try TreeCursor(after)
        var oldCursor = oldData.isEmpty ? nil : try TreeCursor(before)
        var oldEntry = try oldCursor?.next()
        while let entry = try newCursor.next() {
          let name = after[entry.nameRange]
          if let skipTop, name.elementsEqual(skipTop) { continue }
          // Advance the older listing to the first name not before this one.
          var match: EncodedEntry?
          while let candidate = oldEntry {
            let order = compareNames(before[candidate.nameRange], name)
            if order < 0 {
              oldEntry = try oldCursor!.next()
              continue
            }
            if order == 0 { match = candidate }
            break
          }
          if let match, before[match.range].elementsEqual(after[entry.range]) { continue }
          let entryPath = joinPath(path, Array(name))
          let facts = EntryFacts(entry, in: after)
          if entry.type == .directory {
            guard let digest = facts.digest else { continue }  // excluded: nothing recorded inside
            let previous = match.flatMap { $0.type == .directory ? $0.digest(in: before) : nil }
            subtrees.append((previous, digest, entryPath))
          } else {
            let previous = match.flatMap { $0.type == .directory ? nil : EntryFacts($0, in: before) }
            try body(FileChange(path: entryPath, new: facts, old: previous))
          }
        }
      }
    }
    for subtree in subtrees {
      try changes(from: subtree.old, to: subtree.new, under: subtree.path, body)
    }
  }
}

/// Orders two names as `[UInt8].lexicographicallyPrecedes` does: <0, 0 or >0.
func compareNames(_ a: Slice<UnsafeRawBufferPointer>, _ b: Slice<UnsafeRawBufferPointer>) -> Int {
  let common = min(a.count, b.count)
  if common > 0 {
    let order = memcmp(a.base.baseAddress! + a.startIndex, b.base.baseAddress! + b.startIndex, common)
    if order != 0 { return Int(order) }
  }
  return a.count - b.count
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
    let data = try trees.data(digest)
    let wanted = components[depth]
    let found: (facts: EntryFacts, isDirectory: Bool)? = try data.withUnsafeBytes { buffer in
      var cursor = try TreeCursor(buffer)
      while let entry = try cursor.next() {
        let order = wanted.withUnsafeBytes { compareNames(buffer[entry.nameRange], $0[...]) }
        if order == 0 { return (EntryFacts(entry, in: buffer), entry.type == .directory) }
        if order > 0 { return nil }
      }
      return nil
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
/// and its full size when the file streams (over `ContentReader.wholeReadLimit`); the later
/// paths of a hard-linked inode cost nothing.
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
    if digest != change.old?.digest, digests.insert(digest).inserted {
      return try catalog.contentBytes(digest, storedIn: snapshot.archive)
    }
    // Read again with content the repository holds: only a streamed file is stored again.
    return streams ? new.size : 0
  }
}
