// Stage 1 of a backup: scan the home with both cores, detecting changes as it goes.
//
// Algorithm: a shared LIFO of directories to visit and two workers. A worker opens its
// directory beneath the home with openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS) (a symlink
// swapped in mid-scan cannot lead it out), lists it with getdents, sorts the raw names, and
// merges them with the previous snapshot's tree of the same directory (loaded through its own
// read-only catalog connection). Each entry costs one fstatat; `ChangeDetector` then decides
// whether the previous entry stands for it. Changed symlinks are read here; changed regular
// files are left for the archiver, which must open them anyway. Subdirectories are pushed as
// new work, carrying their previous entry.
//
// Invariants: nothing is followed (every open and stat uses O_NOFOLLOW/AT_SYMLINK_NOFOLLOW);
// a directory's own metadata comes from fstat on the descriptor that was listed; an
// excluded directory is recorded but not listed; `tmp`, `Library/Caches` and (unless asked)
// the bundle are skipped by name at their fixed places; an entry that vanishes between
// listing and stat never existed as far as the snapshot is concerned; any other failure
// (EACCES, a device file) stops the whole scan with an error naming the path.

import AppboxContainer
import AppboxCore
import AppboxCrypto
import Glibc

/// One entry of a scanned directory.
struct ScannedEntry {
  var name: [UInt8]
  var status: FileStatus
  var type: TreeEntryType
  /// The previous snapshot's entry of the same name, if any.
  var previous: TreeEntry?
  /// Set when change detection found the entry unchanged: the previous entry, reused as is.
  var reused: TreeEntry?
  /// The target of a changed symlink.
  var linkTarget: [UInt8]?
  /// For a subdirectory, the index of its `ScannedDirectory`.
  var child: Int?
}

/// One scanned directory.
struct ScannedDirectory {
  var path: [UInt8] = []
  var status: FileStatus?
  var attributes: [ExtendedAttribute] = []
  var isExcluded = false
  /// The directory's own entry is unchanged from the previous snapshot's.
  var isUnchanged = false
  var previousDigest: Digest?
  /// How many entries the previous tree of this directory had (-1: none).
  var previousEntryCount = -1
  var entries: [ScannedEntry] = []
}

/// Which names the scan leaves out.
struct ScanRules: Sendable {
  /// The bundle directory's name, skipped at the top unless `includeBundle`.
  var bundleDirectoryName: String
  var includeBundle: Bool
  /// For export: scan only these top-level names (nil: everything not skipped).
  var onlyTopLevel: Set<[UInt8]>? = nil

  func skips(_ name: [UInt8], in path: [UInt8]) -> Bool {
    if path.isEmpty {
      if let onlyTopLevel { return !onlyTopLevel.contains(name) }
      if name == Array("tmp".utf8) { return true }
      if !includeBundle && name == Array(bundleDirectoryName.utf8) { return true }
      return false
    }
    return path == Array("Library".utf8) && name == Array("Caches".utf8)
  }
}

/// The parallel scanner. Use once: `scan()` returns every directory, index 0 being the home.
final class Scanner: @unchecked Sendable {
  private let home: FileDescriptor
  private let rules: ScanRules
  private let catalogPath: String?
  private let previousRoot: Digest?
  private let trustedBefore: Int64
  private let observer: EngineObserver

  private let mutex = Mutex()
  private var directories: [ScannedDirectory] = []
  private var pending: [(index: Int, previous: TreeEntry?)] = []
  private var active = 0
  private var failure: Error?
  private var entriesSeen = 0

  /// `previousRoot` is the parent snapshot's root tree (nil: no change detection), read from
  /// the catalog at `catalogPath`; entries whose ctime is not before `trustedBefore` minus the
  /// racy window are treated as changed.
  init(home: FileDescriptor, rules: ScanRules, catalogPath: String?, previousRoot: Digest?, trustedBefore: Int64,
       observer: EngineObserver)
  {
    self.home = home
    self.rules = rules
    self.catalogPath = catalogPath
    self.previousRoot = previousRoot
    self.trustedBefore = trustedBefore
    self.observer = observer
  }

  func scan(workers: Int = 2) throws -> [ScannedDirectory] {
    var root = ScannedDirectory()
    root.previousDigest = previousRoot
    directories = [root]
    pending = [(0, nil)]
    let threads = (0..<max(1, workers)).map { number in
      WorkerThread(name: "appbox-scan-\(number)") { [self] in try work() }
    }
    var firstError: Error?
    for thread in threads {
      do { try thread.join() } catch { firstError = firstError ?? error }
    }
    if let error = failure ?? firstError { throw error }
    return directories
  }

  private func work() throws {
    var catalog: Catalog?
    var visited = 0
    while true {
      let job: (index: Int, previous: TreeEntry?)? = mutex.withLock {
        while pending.isEmpty && active > 0 && failure == nil { mutex.wait() }
        if failure != nil || pending.isEmpty { return nil }
        active += 1
        return pending.removeLast()
      }
      guard let job else { return }
      do {
        if catalog == nil, previousRoot != nil, let catalogPath {
          catalog = try Catalog(path: catalogPath, readOnly: true)
        }
        let path = mutex.withLock { directories[job.index].path }
        let previousDigest = job.index == 0 ? previousRoot : job.previous?.digest
        var result = try visit(path: path, previous: job.previous, isRoot: job.index == 0,
                               previousTree: { try previousDigest.map { try catalog!.tree($0) } })
        result.previousDigest = previousDigest
        visited += result.entries.count
        mutex.withLock {
          for position in result.entries.indices where result.entries[position].type == .directory {
            let entry = result.entries[position]
            var child = ScannedDirectory()
            child.path = joinPath(path, entry.name)
            let childIndex = directories.count
            directories.append(child)
            result.entries[position].child = childIndex
            let previous = entry.previous.flatMap { $0.type == .directory ? $0 : nil }
            pending.append((childIndex, previous))
          }
          directories[job.index] = result
          active -= 1
          entriesSeen += result.entries.count
          mutex.broadcast()
        }
      } catch {
        mutex.withLock {
          if failure == nil { failure = error }
          active -= 1
          mutex.broadcast()
        }
        return
      }
    }
  }

  /// Lists one directory and stats its entries.
  private func visit(path: [UInt8], previous: TreeEntry?, isRoot: Bool, previousTree: () throws -> Tree?)
    throws -> ScannedDirectory
  {
    let shown = path.isEmpty ? "." : display(path)
    let directory: FileDescriptor
    do {
      directory = try home.openBeneath(path, O_RDONLY | O_DIRECTORY, displayPath: shown)
    } catch let error as SystemError {
      throw unreadable(error, path: shown)
    }
    defer { directory.close() }
    var result = ScannedDirectory()
    result.path = path
    let status = try directory.status()
    result.status = status
    if !isRoot {
      if let previous, ChangeDetector.isUnchanged(status, previous: previous, trustedBefore: trustedBefore) {
        result.attributes = previous.extendedAttributes
        result.isExcluded = previous.isExcluded
        result.isUnchanged = true
      } else {
        result.attributes = try directory.userExtendedAttributes().map { ExtendedAttribute(name: $0.name, value: $0.value) }
        result.isExcluded = result.attributes.contains { $0.name == excludeFromBackupAttribute }
      }
      if result.isExcluded { return result }
    }
    let listed: [DirectoryEntry]
    do {
      listed = try directory.entries()
    } catch let error as SystemError {
      throw unreadable(error, path: shown)
    }
    var names = listed.map(\.name).filter { !rules.skips($0, in: path) }
    names.sort { $0.lexicographicallyPrecedes($1) }
    let previousListing = try previousTree()
    let old = previousListing?.entries ?? []
    if previousListing != nil { result.previousEntryCount = old.count }
    var oldIndex = 0
    result.entries.reserveCapacity(names.count)
    for name in names {
      while oldIndex < old.count && old[oldIndex].name.lexicographicallyPrecedes(name) { oldIndex += 1 }
      let previousEntry = oldIndex < old.count && old[oldIndex].name == name ? old[oldIndex] : nil
      let entryPath = joinPath(path, name)
      let status: FileStatus
      do {
        guard let found = try directory.status(ofRawName: name) else { continue }  // vanished
        status = found
      } catch let error as SystemError {
        throw unreadable(error, path: display(entryPath))
      }
      guard let type = TreeEntryType(status.type) else {
        throw BackupError(
          .unreadable(.badData), "Unable to back up '\(display(entryPath))': device files do not belong in a home")
      }
      var entry = ScannedEntry(name: name, status: status, type: type, previous: previousEntry)
      if type != .directory,
        ChangeDetector.isUnchanged(status, previous: previousEntry, trustedBefore: trustedBefore)
      {
        entry.reused = previousEntry
      } else if type == .symlink {
        do {
          entry.linkTarget = try directory.readLink(rawName: name)
        } catch let error as SystemError {
          throw unreadable(error, path: display(entryPath))
        }
      }
      result.entries.append(entry)
    }
    return result
  }
}

/// Turns a failed system call on a file of the home into the backup's error.
func unreadable(_ error: SystemError, path: String) -> BackupError {
  BackupError(.unreadable(error.kind == .denied ? .denied : .io),
              "Unable to back up '\(path)': cannot \(error.operation) it (\(error.errno))")
}
