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
//
// Order: changes are handed on in the byte order of their whole paths, as a sort of all of
// them would give (a path both added and removed, when its type changed: added first). Within
// a folder that is not name order: "a.txt" comes before "a/b", since '.' sorts before '/'.
// So each folder's steps are sorted by key, a name for the entry itself and the name with a
// '/' after it for what lies below it, and a stack of folders (one per level) is walked.
//
// Invariants: memory is the steps of the folders on one path, never the changes; with
// `kinds`, subtrees wholly added or removed are read only when that kind is asked for.

import AppboxCore
import AppboxCrypto

/// A path that differs between two snapshots.
public struct SnapshotChange: Sendable, Equatable {
  public enum Kind: Sendable, Hashable, CaseIterable {
    /// In the newer snapshot only.
    case added
    /// In the older snapshot only.
    case removed
    /// In both, and different.
    case changed
  }
  public var kind: Kind
  /// The path, relative to the home.
  public var path: [UInt8]
}

/// What differs between two snapshots, paths relative to the home, sorted.
public struct SnapshotDiff: Sendable, Equatable {
  public var added: [[UInt8]] = []
  public var removed: [[UInt8]] = []
  public var changed: [[UInt8]] = []
}

extension Repository {
  /// The differences from snapshot `old` to snapshot `new`, all held in memory (the CLI
  /// streams them with `diff(_:_:kinds:_:)`).
  public func diff(_ old: Snapshot, _ new: Snapshot) throws -> SnapshotDiff {
    var result = SnapshotDiff()
    try diff(old, new) { change in
      switch change.kind {
      case .added: result.added.append(change.path)
      case .removed: result.removed.append(change.path)
      case .changed: result.changed.append(change.path)
      }
    }
    return result
  }

  /// Calls `body` with each difference from snapshot `old` to snapshot `new` whose kind is
  /// in `kinds`, in the byte order of their paths.
  public func diff(
    _ old: Snapshot, _ new: Snapshot, kinds: Set<SnapshotChange.Kind> = Set(SnapshotChange.Kind.allCases),
    _ body: (SnapshotChange) throws -> Void
  ) throws {
    try walkDepthFirst(
      try steps(.compare(old.rootTree, new.rootTree, path: []), kinds: kinds),
      visit: { step in if case .report(let change) = step { try body(change) } },
      children: { step in
        if case .report = step { return nil }
        return try steps(step, kinds: kinds)
      })
  }

  /// The steps below a `compare` or `list` step, sorted by the path order they report in.
  private func steps(_ parent: DiffStep, kinds: Set<SnapshotChange.Kind>) throws -> [DiffStep] {
    var keyed: [(key: [UInt8], step: DiffStep)] = []
    /// A change at `name`, and below it, when `subtree` is given, everything in it of `kind`.
    func report(_ kind: SnapshotChange.Kind, _ name: [UInt8], _ path: [UInt8], subtree: Digest? = nil) {
      guard kinds.contains(kind) else { return }
      keyed.append((name, .report(SnapshotChange(kind: kind, path: path))))
      if let subtree { keyed.append((name + [UInt8(ascii: "/")], .list(kind, subtree, path: path))) }
    }
    func subtree(_ entry: TreeEntry) -> Digest? { entry.type == .directory ? entry.digest : nil }
    switch parent {
    case .report: return []
    case .list(let kind, let digest, let path):
      for entry in try catalog.tree(digest).entries {
        report(kind, entry.name, joinPath(path, entry.name), subtree: subtree(entry))
      }
    case .compare(let old, let new, let path):
      if old == new { return [] }
      let before = try catalog.tree(old).entries
      let after = try catalog.tree(new).entries
      var i = 0
      var j = 0
      while i < before.count || j < after.count {
        if j == after.count || (i < before.count && before[i].name.lexicographicallyPrecedes(after[j].name)) {
          report(.removed, before[i].name, joinPath(path, before[i].name), subtree: subtree(before[i]))
          i += 1
          continue
        }
        if i == before.count || after[j].name.lexicographicallyPrecedes(before[i].name) {
          report(.added, after[j].name, joinPath(path, after[j].name), subtree: subtree(after[j]))
          j += 1
          continue
        }
        let a = before[i]
        let b = after[j]
        let entryPath = joinPath(path, a.name)
        if a.type == .directory && b.type == .directory {
          if a.permissions != b.permissions || a.extendedAttributes != b.extendedAttributes
            || a.isExcluded != b.isExcluded
          {
            report(.changed, a.name, entryPath)
          }
          let below = a.name + [UInt8(ascii: "/")]
          switch (a.digest, b.digest) {
          case (let x?, let y?): keyed.append((below, .compare(x, y, path: entryPath)))
          case (nil, let y?) where kinds.contains(.added):
            keyed.append((below, .list(.added, y, path: entryPath)))
          case (let x?, nil) where kinds.contains(.removed):
            keyed.append((below, .list(.removed, x, path: entryPath)))
          default: break
          }
        } else if a.type != b.type {
          report(.added, b.name, entryPath, subtree: subtree(b))
          report(.removed, a.name, entryPath, subtree: subtree(a))
        } else if a.digest != b.digest || a.size != b.size || a.permissions != b.permissions
          || a.modificationTime != b.modificationTime || a.linkTarget != b.linkTarget
          || a.extendedAttributes != b.extendedAttributes || a.isExcluded != b.isExcluded
        {
          report(.changed, a.name, entryPath)
        }
        i += 1
        j += 1
      }
    }
    // A stable sort: a path added and removed (its type changed) stays added first.
    return keyed.enumerated().sorted {
      $0.element.key == $1.element.key
        ? $0.offset < $1.offset : $0.element.key.lexicographicallyPrecedes($1.element.key)
    }.map(\.element.step)
  }
}

/// One step of a diff's walk: a change to hand on, or a folder to read.
private enum DiffStep {
  case report(SnapshotChange)
  /// Two versions of a folder, to merge.
  case compare(Digest, Digest, path: [UInt8])
  /// A folder wholly added or removed: everything below it is of that kind.
  case list(SnapshotChange.Kind, Digest, path: [UInt8])
}
