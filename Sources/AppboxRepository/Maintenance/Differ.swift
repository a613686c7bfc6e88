// Diff of two snapshots: added, removed and changed paths.
//
// Algorithm: walk both trees together from their roots. Equal digests mean equal subtrees,
// which are skipped without being read. Otherwise the two listings are merged by name: a
// name on one side only is added or removed (with everything below it), a name on both sides
// is changed when what a user sees differs (type, content, size, mode, mtime, link target,
// attributes, exclusion); directories on both sides are descended into, and reported as
// changed themselves only for mode, attribute or exclusion changes (their mtime moves with
// every added or removed child, which the children already report). Inode, ctime and link
// count changes alone (as after a restore) are not differences.

import AppboxCrypto

/// What differs between two snapshots, paths relative to the home, sorted.
public struct SnapshotDiff: Sendable, Equatable {
  public var added: [[UInt8]] = []
  public var removed: [[UInt8]] = []
  public var changed: [[UInt8]] = []
}

extension Repository {
  /// The differences from snapshot `old` to snapshot `new`.
  public func diff(_ old: Snapshot, _ new: Snapshot) throws -> SnapshotDiff {
    var result = SnapshotDiff()
    try compare(old.rootTree, new.rootTree, path: [], into: &result)
    result.added.sort { $0.lexicographicallyPrecedes($1) }
    result.removed.sort { $0.lexicographicallyPrecedes($1) }
    result.changed.sort { $0.lexicographicallyPrecedes($1) }
    return result
  }

  private func compare(_ old: Digest, _ new: Digest, path: [UInt8], into result: inout SnapshotDiff) throws {
    if old == new { return }
    let before = try catalog.tree(old).entries
    let after = try catalog.tree(new).entries
    var i = 0
    var j = 0
    while i < before.count || j < after.count {
      if j == after.count || (i < before.count && before[i].name.lexicographicallyPrecedes(after[j].name)) {
        try list(before[i], under: path, into: &result.removed)
        i += 1
      } else if i == before.count || after[j].name.lexicographicallyPrecedes(before[i].name) {
        try list(after[j], under: path, into: &result.added)
        j += 1
      } else {
        let a = before[i]
        let b = after[j]
        let entryPath = joinPath(path, a.name)
        if a.type == .directory && b.type == .directory {
          if a.permissions != b.permissions || a.extendedAttributes != b.extendedAttributes
            || a.isExcluded != b.isExcluded
          {
            result.changed.append(entryPath)
          }
          if let x = a.digest, let y = b.digest {
            try compare(x, y, path: entryPath, into: &result)
          } else if let y = b.digest, a.digest == nil {
            try listTree(y, under: entryPath, into: &result.added)
          } else if let x = a.digest, b.digest == nil {
            try listTree(x, under: entryPath, into: &result.removed)
          }
        } else if a.type != b.type {
          try list(a, under: path, into: &result.removed)
          try list(b, under: path, into: &result.added)
        } else if a.digest != b.digest || a.size != b.size || a.permissions != b.permissions
          || a.modificationTime != b.modificationTime || a.linkTarget != b.linkTarget
          || a.extendedAttributes != b.extendedAttributes || a.isExcluded != b.isExcluded
        {
          result.changed.append(entryPath)
        }
        i += 1
        j += 1
      }
    }
  }

  /// `entry` and, for a directory, everything below it.
  private func list(_ entry: TreeEntry, under path: [UInt8], into paths: inout [[UInt8]]) throws {
    let entryPath = joinPath(path, entry.name)
    paths.append(entryPath)
    if entry.type == .directory, let digest = entry.digest {
      try listTree(digest, under: entryPath, into: &paths)
    }
  }

  private func listTree(_ digest: Digest, under path: [UInt8], into paths: inout [[UInt8]]) throws {
    for entry in try catalog.tree(digest).entries { try list(entry, under: path, into: &paths) }
  }
}
