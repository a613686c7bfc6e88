// Partial and targeted restores: `restore APP --include PATH…` replaces only those paths in the
// live home; `restore APP --target DIR` writes the snapshot's data (or the included paths) as
// a plain tree under DIR, the app untouched (it need not be installed).
//
// Selecting: the included paths are turned into pruned copies of the trees on their way (each
// directory from the top down to an included path keeps only the entries leading to included
// paths; an included entry keeps its whole subtree), handed to the restore plan as an overlay
// (RestorePlan `overlay`), so the ordinary restore (Restorer.swift: every archive and byte
// verified, holes kept, owners, protection classes) builds exactly the included paths and
// nothing else, reading only their trees and contents.
//
// Swapping included paths in (all or nothing), after the selection is built and verified in a
// staging directory beside the homes (HomeSwap.swift's staging area) and made durable (syncfs):
// for each included path, in order, its live parent is opened beneath the home, refusing
// symlinks on the way (the app controls the home), and
// - when the live path exists, the staged one and it are exchanged (renameat2 RENAME_EXCHANGE);
// - when it does not, the highest staged ancestor the home lacks is moved in (RENAME_NOREPLACE).
// A failure undoes the operations done so far, in reverse, so the home ends as it was. Then the
// staging directory, now holding the old versions, is removed.
// Crash safety: each exchange or move is one rename, so after a crash each included path is
// wholly its old or wholly its new version, never a mix; the staging directory left behind has
// no journal and is removed by the next mutating command (HomeSwapRecovery).
// Targets: DIR is created when missing (its parent must exist) or must be empty; the tree is
// built in it through descriptors (no path outside DIR is ever resolved: names come from
// validated trees, and every directory is opened beneath DIR without following symlinks). A
// failure removes what was written (and DIR, when this restore created it).

import AppboxContainer
import AppboxCore
import AppboxCrypto
import AppboxRepository
import Foundation
import Glibc

/// What a partial or targeted restore did.
public struct PartialRestoreResult: Sendable {
  public var snapshot: Snapshot
  /// The included paths (home-relative), or empty for the whole data.
  public var paths: [[UInt8]]
  public var files: Int
  public var bytes: Int64
  public var warnings: [String]
}

extension Repository {
  /// The snapshot's root replaced by pruned trees holding only `paths` (and the trees for the
  /// overlay). `.notFound` when a path is not in the snapshot.
  func selecting(_ paths: [[UInt8]], of snapshot: Snapshot) throws -> (
    root: Digest, overlay: [Digest: [UInt8]]
  ) {
    final class Node {
      var children: [[UInt8]: Node] = [:]
      var whole = false
    }
    let top = Node()
    for path in paths {
      let components = try Self.snapshotPathComponents(path)
      guard let first = components.first else {
        throw BackupError(.invalidRequest, "--include needs a path inside the home, such as Documents/a.txt")
      }
      if first == Array(snapshot.bundleDirectoryName.utf8) {
        throw BackupError(
          .invalidRequest, "'\(display(path))' is in the bundle, which a restore never replaces")
      }
      _ = try entry(at: path, in: snapshot)
      var node = top
      for component in components {
        if node.whole { break }
        let next = node.children[component] ?? Node()
        node.children[component] = next
        node = next
      }
      node.whole = true
      node.children = [:]
    }
    var overlay: [Digest: [UInt8]] = [:]
    func prune(_ digest: Digest, _ node: Node) throws -> Digest {
      var kept: [TreeEntry] = []
      for var entry in try catalog.tree(digest).entries {
        guard let child = node.children[entry.name] else { continue }
        if !child.whole {
          guard entry.type == .directory, let subtree = entry.digest else { continue }
          entry.digest = try prune(subtree, child)
        }
        kept.append(entry)
      }
      let (data, pruned) = Tree(entries: kept).encodedWithDigest()
      overlay[pruned] = data
      return pruned
    }
    return (try prune(snapshot.rootTree, top), overlay)
  }

  /// Writes the data of `snapshot` (only `paths`, when given) as a plain tree in `directory`,
  /// which must be empty or missing (its parent must exist).
  public func restore(
    _ snapshot: Snapshot, paths: [[UInt8]] = [], toTarget directory: String,
    observer: EngineObserver = SilentObserver()
  ) throws -> PartialRestoreResult {
    let lock = try lockRepository(exclusive: false)
    defer { withExtendedLifetime(lock) {} }
    if let why = damage.affected[snapshot.id] {
      throw BackupError(.corruptArchive, "Snapshot \(snapshot.id) cannot be restored: \(why)")
    }
    var selected = snapshot
    var overlay: [Digest: [UInt8]] = [:]
    if !paths.isEmpty { (selected.rootTree, overlay) = try selecting(paths, of: snapshot) }
    let created = Glibc.mkdir(directory, 0o755) == 0
    if !created && Errno.current != .exists { throw SystemError("create directory", path: directory) }
    let target: FileDescriptor
    do {
      target = try FileDescriptor.open(directory, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
    } catch let error as SystemError where error.errno == .notDirectory || error.errno == .tooManyLinks {
      throw BackupError(.cannotCreate, "The target '\(directory)' is not a directory")
    }
    defer { target.close() }
    if !created {
      guard try target.entries().isEmpty else {
        throw BackupError(
          .cannotCreate, "The target '\(directory)' is not empty: give a new or empty directory")
      }
    }
    observer.engine(.started(operation: "restore", app: snapshot.app))
    do {
      let report = try materialize(selected, part: .data, into: target, overlay: overlay, observer: observer)
      observer.engine(.finished(operation: "restore", app: snapshot.app))
      return PartialRestoreResult(
        snapshot: snapshot, paths: paths, files: report.files, bytes: report.bytes, warnings: report.warnings)
    } catch {
      try? FileTree.removeContents(of: target)
      if created { Glibc.rmdir(directory) }
      throw error
    }
  }

  /// Replaces `paths` (home-relative) of the installed app `app`'s home with their versions in
  /// `snapshot`, all or nothing.
  public func restore(
    _ snapshot: Snapshot, paths: [[UInt8]], into app: AppRecord, in session: DeviceSession,
    observer: EngineObserver = SilentObserver()
  ) throws -> PartialRestoreResult {
    guard !paths.isEmpty else { throw BackupError(.invalidRequest, "--include needs at least one path") }
    let lock = try lockRepository(exclusive: false)
    defer { withExtendedLifetime(lock) {} }
    if let why = damage.affected[snapshot.id] {
      throw BackupError(.corruptArchive, "Snapshot \(snapshot.id) cannot be restored: \(why)")
    }
    let running = try holdNotRunning(app, session: session)
    defer { withExtendedLifetime(running) {} }
    var selected = snapshot
    let overlay: [Digest: [UInt8]]
    (selected.rootTree, overlay) = try selecting(paths, of: snapshot)
    observer.engine(.started(operation: "restore", app: app.bundleIdentifier))
    let owner = AppUser.dataOwner(of: app)
    let staging = try HomeStagingArea.create(in: session)
    defer { staging.discard() }
    let report = try materialize(
      selected, part: .data, into: staging.descriptor, protectingOn: session, owner: owner, overlay: overlay,
      observer: observer)
    try staging.descriptor.syncFileSystem()
    CrashPoint.hit("restore.include.staged")
    observer.engine(.phase(.swapping))
    let home = try FileDescriptor.open(
      session.home(of: app).path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
    defer { home.close() }
    try IncludedPathSwap(staging: staging.descriptor, home: home).swap(
      paths.map { try Self.snapshotPathComponents($0) })
    observer.engine(.finished(operation: "restore", app: app.bundleIdentifier))
    return PartialRestoreResult(
      snapshot: snapshot, paths: paths, files: report.files, bytes: report.bytes, warnings: report.warnings)
  }
}

/// Swaps staged paths into a live home one rename each, undoing them all on a failure.
struct IncludedPathSwap {
  let staging: FileDescriptor
  let home: FileDescriptor

  private enum Done {
    /// Exchanged: doing it again undoes it.
    case exchanged(stagedParent: [[UInt8]], liveParent: [[UInt8]], name: [UInt8])
    /// Moved in: moving it back undoes it.
    case moved(stagedParent: [[UInt8]], liveParent: [[UInt8]], name: [UInt8])
  }

  private func open(_ base: FileDescriptor, _ components: [[UInt8]]) throws -> FileDescriptor {
    try base.openBeneath(
      Array(components.joined(separator: [UInt8(ascii: "/")])),
      O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC,
      symlinks: .refuse)
  }

  /// Checks every path first (a symlink or file on the way refuses the whole restore before
  /// anything moved), then swaps them in.
  func swap(_ paths: [[[UInt8]]]) throws {
    try swap(paths, rehearsing: true)
    try swap(paths, rehearsing: false)
  }

  private func swap(_ paths: [[[UInt8]]], rehearsing: Bool) throws {
    var done: [Done] = []
    do {
      for path in paths.sorted(by: { $0.count < $1.count }) {
        // A path moved in with an ancestor the home lacked is in place already.
        let stagedParent = Array(path.dropLast())
        guard let stagedDirectory = try? open(staging, stagedParent) else { continue }
        defer { stagedDirectory.close() }
        guard try stagedDirectory.status(ofRawName: path.last!) != nil else { continue }
        // The highest ancestor (or the path itself) the live home lacks.
        var depth = 0
        var liveParent = home
        var opened: [FileDescriptor] = []
        defer { opened.forEach { $0.close() } }
        while depth < path.count - 1 {
          guard let status = try liveParent.status(ofRawName: path[depth]) else { break }
          guard status.type == .directory else {
            throw BackupError(
              .cannotCreate,
              "'\(display(Array(path.prefix(depth + 1).joined(separator: [UInt8(ascii: "/")]))))' in the home is "
                + "not a folder (a symlink or a file), so it cannot hold what the snapshot has there")
          }
          let next = try open(liveParent, [path[depth]])
          opened.append(next)
          liveParent = next
          depth += 1
        }
        let name = path[depth]
        let from = Array(path.prefix(depth))
        if rehearsing { continue }
        if depth == path.count - 1, try liveParent.status(ofRawName: name) != nil {
          let source = try open(staging, from)
          defer { source.close() }
          try source.rename(rawName: name, to: name, in: liveParent, flags: .exchange)
          done.append(.exchanged(stagedParent: from, liveParent: from, name: name))
        } else {
          let source = try open(staging, from)
          defer { source.close() }
          try source.rename(rawName: name, to: name, in: liveParent, flags: .noReplace)
          done.append(.moved(stagedParent: from, liveParent: from, name: name))
        }
        CrashPoint.hit("restore.include.swapped")
      }
    } catch {
      for step in done.reversed() {
        switch step {
        case .exchanged(let stagedParent, let liveParent, let name),
          .moved(let stagedParent, let liveParent, let name):
          guard let source = try? open(staging, stagedParent), let live = try? open(home, liveParent) else {
            continue
          }
          if case .exchanged = step {
            try? source.rename(rawName: name, to: name, in: live, flags: .exchange)
          } else {
            try? live.rename(rawName: name, to: name, in: source, flags: .noReplace)
          }
          source.close()
          live.close()
        }
      }
      throw error
    }
  }
}
