// What a restore would change in a home, and what it drops (`restore --dry-run`, and the
// "dropped" line of every restore).
//
// Algorithm: walk the live home and the snapshot's data tree together, directory by
// directory, merging the two sorted listings by raw name as `diff` merges two snapshots.
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
// Invariants: nothing is written, created or followed; every descriptor is closed; paths are
// relative to the home, sorted.

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

/// What restoring a snapshot would change in a home.
public struct RestorePreview: Sendable {
  /// Paths the snapshot has and the home lacks.
  public var added: [[UInt8]] = []
  /// Paths in both whose entry differs: the snapshot's replaces the home's.
  public var replaced: [[UInt8]] = []
  /// Paths of the home's data the snapshot lacks.
  public var removed: [[UInt8]] = []
  /// Entries in both that are the same.
  public var unchanged = 0
  public var dropped = DroppedData()
}

extension Repository {
  /// Compares `snapshot`'s data with the home (or app group container) at `home` (nil: none
  /// yet, everything is added). `bundleDirectoryName`: the bundle the restore carries over
  /// (nil for a group's container, which also keeps a top-level `tmp` as data). Without
  /// `listingPaths`, only the counts and the drops are kept (what every restore reports).
  public func previewRestore(
    of snapshot: Snapshot, into home: String?, bundleDirectoryName: String?, listingPaths: Bool = true
  ) throws -> RestorePreview {
    let rules = ScanRules(
      bundleDirectoryName: bundleDirectoryName ?? snapshot.bundleDirectoryName, includeBundle: false,
      skipsTemporaryDirectory: bundleDirectoryName != nil)
    return try catalog.reading {
      var walk = PreviewWalk(repository: self, rules: rules, listing: listingPaths)
      guard let home else {
        try walk.listSnapshot(snapshot.rootTree, under: [], isRoot: true)
        return walk.preview
      }
      let descriptor = try FileDescriptor.open(home, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
      defer { descriptor.close() }
      try walk.run(home: descriptor, root: snapshot.rootTree)
      walk.preview.added.sort { $0.lexicographicallyPrecedes($1) }
      walk.preview.replaced.sort { $0.lexicographicallyPrecedes($1) }
      walk.preview.removed.sort { $0.lexicographicallyPrecedes($1) }
      return walk.preview
    }
  }
}

/// Whether the entry `name` of `directory` carries the exclude-from-backup mark (a symlink
/// cannot: the mark is a `user.` attribute). Uses `lgetxattr(2)`.
func isMarkedExcluded(_ name: [UInt8], in directory: FileDescriptor, type: FileType) -> Bool {
  type != .symlink && directory.entryHasExtendedAttribute(name, excludeFromBackupAttribute)
}

private struct PreviewWalk {
  let repository: Repository
  let rules: ScanRules
  let listing: Bool
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

  mutating func run(home: FileDescriptor, root: Digest) throws {
    var pending: [(path: [UInt8], tree: Digest?)] = [([], root)]
    while let (path, tree) = pending.popLast() {
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
          preview.dropped.temporary.add(try count(status, entryPath, in: home).count)
          continue
        case .caches:
          preview.dropped.caches.add(try count(status, entryPath, in: home).count)
          continue
        case .data: break
        }
        guard let before else {
          if isMarkedExcluded(live.name, in: directory, type: status.type) {
            preview.dropped.excluded.add(try count(status, entryPath, in: home).count)
          } else {
            preview.removed += try count(status, entryPath, in: home, listing: listing).paths
          }
          continue
        }
        if status.type == .directory && before.type == .directory {
          if before.permissions != UInt32(status.permissions) {
            record(\.replaced, entryPath)
          } else {
            preview.unchanged += 1
          }
          pending.append((entryPath, before.digest))
        } else if TreeEntryType(status.type) != before.type || before.size != status.size
          || before.permissions != UInt32(status.permissions)
          || before.modificationTime != status.modificationTime.totalNanoseconds
          || (before.type == .symlink
            && (try? directory.readLink(rawName: live.name)) != before.linkTarget)
        {
          record(\.replaced, entryPath)
          if status.type == .directory {
            preview.removed += try count(status, entryPath, in: home, listing: listing).paths.dropFirst()
          }
          if before.type == .directory, let digest = before.digest {
            try listSnapshot(digest, under: entryPath, isRoot: false)
          }
        } else {
          preview.unchanged += 1
        }
      }
      for entry in snapshotEntries where !seen.contains(entry.name) {
        if path.isEmpty && entry.name == Array(rules.bundleDirectoryName.utf8) { continue }
        try listSnapshot(entry, under: path)
      }
    }
  }

  /// The entries of a snapshot's directory that a restore creates.
  func restoredEntries(of digest: Digest) throws -> [TreeEntry] {
    try repository.catalog.tree(digest).entries.filter { !$0.isExcluded && $0.type != .socket }
  }

  mutating func record(_ list: WritableKeyPath<RestorePreview, [[UInt8]]>, _ path: [UInt8]) {
    if listing { preview[keyPath: list].append(path) }
  }

  /// Adds the snapshot's `entry` at `path` and everything below it (a stack of folders, not
  /// recursion: a snapshot may be 10,000 levels deep). Nothing to do without the listing.
  mutating func listSnapshot(_ entry: TreeEntry, under path: [UInt8]) throws {
    guard listing else { return }
    let entryPath = joinPath(path, entry.name)
    preview.added.append(entryPath)
    if entry.type == .directory, let digest = entry.digest {
      try listSnapshot(digest, under: entryPath, isRoot: false)
    }
  }

  mutating func listSnapshot(_ digest: Digest, under path: [UInt8], isRoot: Bool) throws {
    guard listing else { return }
    var pending: [(Digest, [UInt8])] = [(digest, path)]
    while let (tree, directory) = pending.popLast() {
      for entry in try restoredEntries(of: tree) {
        if isRoot && directory.isEmpty && entry.name == Array(rules.bundleDirectoryName.utf8) { continue }
        let entryPath = joinPath(directory, entry.name)
        preview.added.append(entryPath)
        if entry.type == .directory, let child = entry.digest { pending.append((child, entryPath)) }
      }
    }
  }

  /// Counts the live entry at `path` (with `status`) and, for a folder, everything below it:
  /// files (anything but folders) and their bytes, and with `listing` every path (its own first).
  func count(_ status: FileStatus, _ path: [UInt8], in home: FileDescriptor, listing: Bool = false)
    throws -> (count: FileCount, paths: [[UInt8]])
  {
    var paths: [[UInt8]] = listing ? [path] : []
    guard status.type == .directory else { return (FileCount(files: 1, bytes: status.size), paths) }
    var result = FileCount()
    var pending = [path]
    while let current = pending.popLast() {
      guard let directory = try? home.openBeneath(current, O_RDONLY | O_DIRECTORY) else { continue }
      defer { directory.close() }
      for entry in try directory.entries() {
        guard let child = try directory.status(ofRawName: entry.name) else { continue }
        let childPath = joinPath(current, entry.name)
        if listing { paths.append(childPath) }
        if child.type == .directory {
          pending.append(childPath)
        } else {
          result.add(FileCount(files: 1, bytes: child.size))
        }
      }
    }
    return (result, paths)
  }
}
