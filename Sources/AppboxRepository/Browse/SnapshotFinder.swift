// `find`: which snapshots hold a path matching a glob, and what the entry was in each.
//
// Algorithm: the pattern is a shell glob (fnmatch(3): `*`, `?`, `[…]`, `\` escapes). Without a
// `/` it is matched against each entry's name (as `find -name`); with one, against the entry's
// whole path from the home (`Documents/*.txt`; `*` then also crosses `/`). The snapshots (of
// one app, or of all; only the `newest` most recent when given) are walked from their root
// trees, newest first, depth first in name order, and each match is handed on as it is found.
// Snapshots share most of their trees (an unchanged folder keeps its digest): a tree found to
// hold no match below it is remembered (`barren`, by digest, and by path too when the pattern
// matches paths) and not entered again, so a hundred snapshots cost about one walk plus the
// folders that changed, plus those on the way to matches, which are walked again for each
// snapshot that holds them (each such walk reports matches).
//
// Invariants: read-only; excluded entries are not reported (restore does not bring them back).
// Memory is the open trees of one path (one per level, as `walk`) and the set of barren
// trees: bounded by the trees searched, whatever the number of matches.

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
  /// Calls `body` with each entry matching `pattern` in the snapshots of `app` (every app
  /// when nil), newest snapshot first, each snapshot's in path order (depth first); with
  /// `newest`, only the newest that many snapshots are searched.
  public func find(
    _ pattern: [UInt8], app: String? = nil, newest: Int? = nil, _ body: (FoundEntry) throws -> Void
  ) throws {
    guard !pattern.isEmpty, !pattern.contains(0) else {
      throw RepositoryError(.invalidRequest, "find needs a pattern, such as '*.sqlite' or 'Documents/*.txt'")
    }
    let matchesPath = pattern.contains(UInt8(ascii: "/"))
    var snapshots = try catalog.snapshots(app: app).reversed() as [Snapshot]
    if let newest { snapshots = Array(snapshots.prefix(newest)) }
    struct Key: Hashable {
      var digest: Digest
      /// Empty when the pattern matches names: a tree's matches then do not depend on its path.
      var path: [UInt8]
    }
    func matches(_ text: [UInt8]) -> Bool {
      withCName(pattern) { cPattern in withCName(text) { fnmatch(cPattern, $0, 0) == 0 } }
    }
    var barren = Set<Key>()
    struct Level {
      var key: Key
      var entries: [TreeEntry]
      var next = 0
      var path: [UInt8]
      var found = false
    }
    try catalog.reading {
      for snapshot in snapshots {
        let root = Key(digest: snapshot.rootTree, path: [])
        if barren.contains(root) { continue }
        var stack = [Level(key: root, entries: try catalog.tree(snapshot.rootTree).entries, path: [])]
        while let level = stack.last {
          guard level.next < level.entries.count else {
            stack.removeLast()
            if !level.found {
              barren.insert(level.key)
            } else if !stack.isEmpty {
              stack[stack.count - 1].found = true
            }
            continue
          }
          let entry = level.entries[level.next]
          stack[stack.count - 1].next += 1
          if entry.isExcluded { continue }
          let full = joinPath(level.path, entry.name)
          if matches(matchesPath ? full : entry.name) {
            stack[stack.count - 1].found = true
            try body(FoundEntry(snapshot: snapshot, path: full, entry: entry))
          }
          if entry.type == .directory, let subtree = entry.digest {
            let key = Key(digest: subtree, path: matchesPath ? full : [])
            if !barren.contains(key) {
              stack.append(Level(key: key, entries: try catalog.tree(subtree).entries, path: full))
            }
          }
        }
      }
    }
  }
}
