// Browsing a snapshot: the entry at a path, and the entries of a folder, read from the trees.
//
// Algorithm: a path (raw bytes relative to the home, `/`-separated, e.g. `Documents/a.txt`;
// empty or `/` for the snapshot's top) is looked up one component at a time from the
// snapshot's root tree, reading only the trees on the way (each is one catalog row or a delta
// chain: Catalog+Trees.swift), so `ls` of a folder costs the depth of that folder, not the
// snapshot. A recursive listing walks depth first in name order and reports each entry as it
// goes (nothing but the stack of open trees is held).
//
// Invariants: components `.` and `..` and empty ones are refused (a snapshot path never walks
// up); tree names were validated when decoded (no `/`, NUL, `.` or `..`), so every joined path
// stays a relative path below the top. Entries marked "exclude from backup" are recorded but
// hold nothing: they are skipped, as restore skips them.

import AppboxCore
import AppboxCrypto

/// One entry of a snapshot, with its path from the top.
public struct BrowsedEntry: Sendable, Equatable {
  /// The path from the snapshot's top (empty for the top itself).
  public var path: [UInt8]
  public var entry: TreeEntry
}

extension Repository {
  /// The components of a snapshot path; `.invalidRequest` for `..`, `.` or NUL.
  public static func snapshotPathComponents(_ path: [UInt8]) throws -> [[UInt8]] {
    let parts = path.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: true).map(Array.init)
    for part in parts {
      if part == Array("..".utf8) || part == Array(".".utf8) || part.contains(0) {
        throw RepositoryError(
          .invalidRequest,
          "The snapshot path '\(display(path))' must not contain '.', '..' or NUL components")
      }
    }
    return parts
  }

  /// The entry at `path` in `snapshot` (a synthetic directory entry for the top).
  /// `.notFound` when nothing is there, or only an excluded entry.
  public func entry(at path: [UInt8], in snapshot: Snapshot) throws -> BrowsedEntry {
    let components = try Self.snapshotPathComponents(path)
    var current = TreeEntry(
      name: [], type: .directory, permissions: 0o755,
      modificationTime: Int64(snapshot.time.timeIntervalSince1970 * 1e9),
      digest: snapshot.rootTree)
    var walked: [UInt8] = []
    for component in components {
      guard current.type == .directory, let digest = current.digest else {
        throw RepositoryError(
          .notFound,
          "'\(display(walked))' in snapshot \(snapshot.id) is not a folder, so '\(display(path))' is not there"
        )
      }
      walked = joinPath(walked, component)
      guard let next = try catalog.tree(digest).entry(named: component), !next.isExcluded else {
        throw RepositoryError(.notFound, "Snapshot \(snapshot.id) has no '\(display(walked))'")
      }
      current = next
    }
    return BrowsedEntry(path: walked, entry: current)
  }

  /// The entries of the folder at `path` (or the entry itself, when it is not a folder), in
  /// name order; with `recursive`, everything below it, depth first. `body` sees each.
  public func list(
    _ path: [UInt8], in snapshot: Snapshot, recursive: Bool = false, _ body: (BrowsedEntry) throws -> Void
  ) throws {
    let top = try entry(at: path, in: snapshot)
    guard top.entry.type == .directory, let digest = top.entry.digest else {
      try body(top)
      return
    }
    try walk(digest, path: top.path, recursive: recursive, body)
  }

  /// Calls `body` with every entry below tree `digest`, whose path is `path`: depth first in
  /// name order, a folder's contents right after it. An explicit stack of open trees (one per
  /// level), so a chain thousands of folders deep costs no call stack.
  package func walk(
    _ digest: Digest, path: [UInt8], recursive: Bool, _ body: (BrowsedEntry) throws -> Void
  ) throws {
    func entries(of digest: Digest, at path: [UInt8]) throws -> [BrowsedEntry] {
      try catalog.tree(digest).entries.filter { !$0.isExcluded }.map {
        BrowsedEntry(path: joinPath(path, $0.name), entry: $0)
      }
    }
    try walkDepthFirst(
      try entries(of: digest, at: path), visit: body,
      children: { child in
        guard recursive, child.entry.type == .directory, let subtree = child.entry.digest else { return nil }
        return try entries(of: subtree, at: child.path)
      })
  }
}
