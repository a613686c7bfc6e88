// `find`: which snapshots hold a path matching a glob, and what the entry was in each.
//
// Algorithm: the pattern is a shell glob (fnmatch(3): `*`, `?`, `[…]`, `\` escapes). Without a
// `/` it is matched against each entry's name (as `find -name`); with one, against the entry's
// whole path from the home (`Documents/*.txt`; `*` then also crosses `/`). The snapshots (of
// one app, or of all; only the `newest` most recent when given) are walked from their root
// trees, and each (tree digest, path) pair is searched once: snapshots share most of their
// trees (an unchanged folder keeps its digest), so a hundred snapshots cost about one walk plus
// the folders that changed between them, and the matches of a shared folder are reused.
//
// Invariants: read-only; excluded entries are not reported (restore does not bring them back).

import AppboxCore
import AppboxCrypto
import Foundation
import Glibc

/// One match: a snapshot and the entry in it.
public struct FoundEntry: Sendable {
  public var snapshot: Snapshot
  public var path: [UInt8]
  public var entry: TreeEntry
}

extension Repository {
  /// The entries matching `pattern` in the snapshots of `app` (every app when nil), newest
  /// snapshot first; with `newest`, only the newest that many snapshots are searched.
  public func find(_ pattern: [UInt8], app: String? = nil, newest: Int? = nil) throws -> [FoundEntry] {
    guard !pattern.isEmpty, !pattern.contains(0) else {
      throw RepositoryError(.invalidRequest, "find needs a pattern, such as '*.sqlite' or 'Documents/*.txt'")
    }
    let matchesPath = pattern.contains(UInt8(ascii: "/"))
    var snapshots = try catalog.snapshots(app: app).reversed() as [Snapshot]
    if let newest { snapshots = Array(snapshots.prefix(newest)) }
    struct Key: Hashable {
      var digest: Digest
      var path: [UInt8]
    }
    var memo: [Key: [BrowsedEntry]] = [:]
    func matches(_ text: [UInt8]) -> Bool {
      withCName(pattern) { cPattern in withCName(text) { fnmatch(cPattern, $0, 0) == 0 } }
    }
    // The matches below tree `digest` (at `path`), in path order, computed once per pair: a
    // changed folder re-reads only its own tree and reuses the matches of its unchanged
    // subfolders. Recursive: a level costs one small frame, and paths are at most 64 KiB.
    func search(_ digest: Digest, path: [UInt8]) throws -> [BrowsedEntry] {
      let key = Key(digest: digest, path: path)
      if let known = memo[key] { return known }
      var found: [BrowsedEntry] = []
      for entry in try catalog.tree(digest).entries where !entry.isExcluded {
        let full = joinPath(path, entry.name)
        if matches(matchesPath ? full : entry.name) { found.append(BrowsedEntry(path: full, entry: entry)) }
        if entry.type == .directory, let subtree = entry.digest { found += try search(subtree, path: full) }
      }
      memo[key] = found
      return found
    }
    var results: [FoundEntry] = []
    try catalog.reading {
      for snapshot in snapshots {
        for match in try search(snapshot.rootTree, path: []) {
          results.append(FoundEntry(snapshot: snapshot, path: match.path, entry: match.entry))
        }
      }
    }
    return results
  }
}
