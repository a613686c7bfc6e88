// What a restore would change in a home, and what it drops (`restore --dry-run`, and the
// "dropped" line of every restore).
//
// Algorithm: walk the live home and the snapshot's data tree together, directory by
// directory, merging the two listings by raw name as `diff` merges two snapshots.
// The live side is read through descriptors (each folder opened beneath the home with
// openat2, nothing followed; one stat per entry, and for the exclude-from-backup mark one
// lgetxattr); the snapshot side from the catalog's trees. The backup's own rules decide what
// the restore drops: `ScanRules.skips` names the bundle (carried over, never compared), `tmp`
// and `Library/Caches` (emptied); a live entry carrying the mark (`isMarkedExcluded`) with no
// unmarked entry in the snapshot goes too, since backups never store it. Entries the snapshot
// marked, and sockets, are not restored (RestorePlan), so they count as absent there.
// A name on the snapshot's side only is added (with everything below it), on the live side
// only removed; on both, a file is replaced when its type, size, permissions, modification
// time or link target differ (rsync's quick check: contents are not read), and folders are
// compared by permissions and descended into.
//
// Order: changes are handed on in the byte order of their whole paths, as `diff` hands on
// its changes: each folder's steps are sorted by key (a name for the entry, the name and a
// '/' for what lies below it), and a stack of folders, one per level, is walked.
//
// Invariants: nothing is written, created or followed; every descriptor is closed before the
// next folder is read. Memory is the steps of the folders on one path, never the changes:
// the caller is handed each one.

import AppboxContainer
import AppboxCore
import AppboxCrypto
import AppboxRepository
import Glibc

/// Files and bytes.
public struct FileCount: Sendable, Equatable {
  public var files = 0
  public var bytes: Int64 = 0
  public init(files: Int = 0, bytes: Int64 = 0) {
    self.files = files
    self.bytes = bytes
  }
  mutating func add(_ other: FileCount) {
    files += other.files
    bytes += other.bytes
  }
}

/// What a restore removes that no snapshot could bring back: files marked exclude-from-backup,
/// and what Library/Caches and tmp hold (a restore leaves both empty).
public struct DroppedData: Sendable, Equatable {
  public var excluded = FileCount()
  public var caches = FileCount()
  public var temporary = FileCount()
  public init() {}
  public var total: FileCount {
    var sum = excluded
    sum.add(caches)
    sum.add(temporary)
    return sum
  }
}

/// A path restoring a snapshot would change in a home.
public struct RestoreChange: Sendable, Equatable {
  public enum Kind: Sendable, Hashable, CaseIterable {
    /// The snapshot has it and the home lacks it.
    case added
    /// Both have it and the entries differ: the snapshot's replaces the home's.
    case replaced
    /// Part of the home's data that the snapshot lacks.
    case removed
  }
  public var kind: Kind
  /// The path, relative to the home.
  public var path: [UInt8]
}

/// What restoring a snapshot would leave as it is, and drop.
public struct RestorePreview: Sendable {
  /// Entries in both that are the same.
  public var unchanged = 0
  public var dropped = DroppedData()
  public init() {}
}

extension Repository {
  /// Compares `snapshot`'s data with the home (or app group container) at `home` (nil: none
  /// yet, everything is added). `bundleDirectoryName`: the bundle the restore carries over
  /// (nil for a group's container, which also keeps a top-level `tmp` as data). Calls `body`
  /// with each change whose kind is in `kinds`, in the byte order of their paths; folders
  /// wholly added or removed are read only for the kinds asked for. Returns the counts.
  public func previewRestore(
    of snapshot: Snapshot, into home: String?, bundleDirectoryName: String?,
    kinds: Set<RestoreChange.Kind> = [], _ body: (RestoreChange) throws -> Void = { _ in }
  ) throws -> RestorePreview {
    let rules = ScanRules(
      bundleDirectoryName: bundleDirectoryName ?? snapshot.bundleDirectoryName, includeBundle: false,
      skipsTemporaryDirectory: bundleDirectoryName != nil)
    return try catalog.reading {
      guard let home else {
        var walk = PreviewWalk(repository: self, home: nil, rules: rules, kinds: kinds)
        try walk.run(from: .add(snapshot.rootTree, path: []), body)
        return walk.preview
      }
      let descriptor = try FileDescriptor.open(home, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
      defer { descriptor.close() }
      var walk = PreviewWalk(repository: self, home: descriptor, rules: rules, kinds: kinds)
      try walk.run(from: .compare(path: [], tree: snapshot.rootTree), body)
      return walk.preview
    }
  }
}

/// Whether the entry `name` of `directory` carries the exclude-from-backup mark (a symlink
/// cannot: the mark is a `user.` attribute). Uses `lgetxattr(2)`.
func isMarkedExcluded(_ name: [UInt8], in directory: FileDescriptor, type: FileType) -> Bool {
  type != .symlink && directory.entryHasExtendedAttribute(name, excludeFromBackupAttribute)
}

/// One step of the walk: a change to hand on, or a folder to read.
private enum PreviewStep {
  case report(RestoreChange)
  /// A live folder (the home's top for the empty path) and the snapshot's (nil: it has none).
  case compare(path: [UInt8], tree: Digest?)
  /// A snapshot folder the home lacks: everything below it is added.
  case add(Digest, path: [UInt8])
  /// A live folder the snapshot lacks: everything below it is removed.
  case remove(path: [UInt8])
}

private struct PreviewWalk {
  let repository: Repository
  /// Nil: the app has no home yet (only `add` steps).
  let home: FileDescriptor?
  let rules: ScanRules
  let kinds: Set<RestoreChange.Kind>
  var preview = RestorePreview()

  /// What a live name at the top of the home, or in its top-level Library, stands for.
  enum Place { case data, bundle, temporary, caches }

  func place(of name: [UInt8], in path: [UInt8]) -> Place {
    let isRoot = path.isEmpty
    let isTopLibrary = path == Array("Library".utf8)
    guard isRoot || isTopLibrary else { return .data }
    let skipped = name.withUnsafeBytes { rules.skips($0, inRoot: isRoot, inTopLibrary: isTopLibrary) }
    guard skipped else { return .data }
    if isTopLibrary { return .caches }
    return name == Array(rules.bundleDirectoryName.utf8) ? .bundle : .temporary
  }

  /// Walks from `first` depth first, a stack of folders whose steps are in path order.
  mutating func run(from first: PreviewStep, _ body: (RestoreChange) throws -> Void) throws {
    try walkDepthFirst(
      try steps(first), visit: { step in if case .report(let change) = step { try body(change) } },
      children: { step in
        if case .report = step { return nil }
        return try steps(step)
      })
  }

  /// The steps below a folder step, sorted by the path order they report in.
  mutating func steps(_ parent: PreviewStep) throws -> [PreviewStep] {
    var keyed: [(key: [UInt8], step: PreviewStep)] = []
    func report(_ kind: RestoreChange.Kind, _ name: [UInt8], _ path: [UInt8]) {
      if kinds.contains(kind) { keyed.append((name, .report(RestoreChange(kind: kind, path: path)))) }
    }
    func below(_ name: [UInt8], _ step: PreviewStep) {
      switch step {
      case .add where !kinds.contains(.added), .remove where !kinds.contains(.removed): return
      default: keyed.append((name + [UInt8(ascii: "/")], step))
      }
    }
    switch parent {
    case .report: return []
    case .add(let digest, let path):
      for entry in try restoredEntries(of: digest) {
        if path.isEmpty && entry.name == Array(rules.bundleDirectoryName.utf8) { continue }
        let entryPath = joinPath(path, entry.name)
        report(.added, entry.name, entryPath)
        if entry.type == .directory, let child = entry.digest {
          below(entry.name, .add(child, path: entryPath))
        }
      }
    case .remove(let path):
      // A folder that cannot be opened (gone meanwhile) lists nothing below it.
      guard let directory = try? home?.openBeneath(path, O_RDONLY | O_DIRECTORY) else { return [] }
      defer { directory.close() }
      for entry in try directory.entries() {
        guard let status = try directory.status(ofRawName: entry.name) else { continue }
        let entryPath = joinPath(path, entry.name)
        report(.removed, entry.name, entryPath)
        if status.type == .directory { below(entry.name, .remove(path: entryPath)) }
      }
    case .compare(let path, let tree):
      guard let home else { return [] }
      let directory = try path.isEmpty ? home.duplicate() : home.openBeneath(path, O_RDONLY | O_DIRECTORY)
      defer { directory.close() }
      let snapshotEntries = try tree.map { try restoredEntries(of: $0) } ?? []
      var recorded: [[UInt8]: TreeEntry] = [:]
      for entry in snapshotEntries { recorded[entry.name] = entry }
      var seen = Set<[UInt8]>()
      for live in try directory.entries() {
        guard let status = try directory.status(ofRawName: live.name) else { continue }
        let entryPath = joinPath(path, live.name)
        let before = recorded[live.name]
        seen.insert(live.name)
        switch place(of: live.name, in: path) {
        case .bundle: continue
        case .temporary:
          preview.dropped.temporary.add(try count(status, entryPath, in: home))
          continue
        case .caches:
          preview.dropped.caches.add(try count(status, entryPath, in: home))
          continue
        case .data: break
        }
        guard let before else {
          if isMarkedExcluded(live.name, in: directory, type: status.type) {
            preview.dropped.excluded.add(try count(status, entryPath, in: home))
          } else {
            report(.removed, live.name, entryPath)
            if status.type == .directory { below(live.name, .remove(path: entryPath)) }
          }
          continue
        }
        if status.type == .directory && before.type == .directory {
          if before.permissions != UInt32(status.permissions) {
            report(.replaced, live.name, entryPath)
          } else {
            preview.unchanged += 1
          }
          keyed.append((live.name + [UInt8(ascii: "/")], .compare(path: entryPath, tree: before.digest)))
        } else if TreeEntryType(status.type) != before.type || before.size != status.size
          || before.permissions != UInt32(status.permissions)
          || before.modificationTime != status.modificationTime.totalNanoseconds
          || (before.type == .symlink
            && (try? directory.readLink(rawName: live.name)) != before.linkTarget)
        {
          // At most one side is a folder here: what is below it goes, or comes.
          report(.replaced, live.name, entryPath)
          if status.type == .directory { below(live.name, .remove(path: entryPath)) }
          if before.type == .directory, let digest = before.digest {
            below(live.name, .add(digest, path: entryPath))
          }
        } else {
          preview.unchanged += 1
        }
      }
      for entry in snapshotEntries where !seen.contains(entry.name) {
        if path.isEmpty && entry.name == Array(rules.bundleDirectoryName.utf8) { continue }
        let entryPath = joinPath(path, entry.name)
        report(.added, entry.name, entryPath)
        if entry.type == .directory, let digest = entry.digest {
          below(entry.name, .add(digest, path: entryPath))
        }
      }
    }
    // Keys are unique (a name, or a name and '/'), so any sort gives the one order.
    return keyed.sorted { $0.key.lexicographicallyPrecedes($1.key) }.map(\.step)
  }

  /// The entries of a snapshot's directory that a restore creates.
  func restoredEntries(of digest: Digest) throws -> [TreeEntry] {
    try repository.catalog.tree(digest).entries.filter { !$0.isExcluded && $0.type != .socket }
  }

  /// Counts the live entry at `path` (with `status`) and, for a folder, everything below it:
  /// files (anything but folders) and their bytes.
  func count(_ status: FileStatus, _ path: [UInt8], in home: FileDescriptor) throws -> FileCount {
    guard status.type == .directory else { return FileCount(files: 1, bytes: status.size) }
    var result = FileCount()
    var pending = [path]
    while let current = pending.popLast() {
      guard let directory = try? home.openBeneath(current, O_RDONLY | O_DIRECTORY) else { continue }
      defer { directory.close() }
      for entry in try directory.entries() {
        guard let child = try directory.status(ofRawName: entry.name) else { continue }
        if child.type == .directory {
          pending.append(joinPath(current, entry.name))
        } else {
          result.add(FileCount(files: 1, bytes: child.size))
        }
      }
    }
    return result
  }
}
