// Stage 1 of a backup: scan the home with both cores, detecting changes as it goes.
//
// Algorithm: a shared LIFO of directories to visit and two workers. A worker opens its
// directory beneath the home with openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS) (a symlink
// swapped in mid-scan cannot lead it out), lists it with getdents, sorts the raw names, and
// merges them with the previous snapshot's tree of the same directory (loaded through its own
// read-only catalog connection, walked in place by a TreeCursor). Each entry costs one
// fstatat; `ChangeDetector` then decides whether the previous entry stands for it. Names live
// in one byte arena per directory and entries refer to them, so an unchanged file costs no
// allocation at all. Changed symlinks are read here; changed regular
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
  /// The name: bytes `nameStart ..< nameStart + nameLength` of the directory's `names`.
  var nameStart: Int32
  var nameLength: Int32
  var status: EntryStatus
  var type: TreeEntryType
  /// The previous snapshot's entry of the same name, if any (in the directory's `previousData`).
  var previous: PreviousEntry?
  /// Change detection found the entry unchanged: `previous` stands for it, byte for byte.
  var isReused = false
  /// The stat matches `previous` but is too recent to be trusted: probably unchanged, to be
  /// confirmed by hashing before anything is written.
  var isRacy = false
  /// The target of a changed symlink.
  var linkTarget: [UInt8]?
  /// For a subdirectory, the index of its `ScannedDirectory`.
  var child: Int?
}

/// Where a previous snapshot's entry sits in its tree, and what the tree builder needs of it.
/// Kept small: a scan holds one per file.
struct PreviousEntry {
  var start: Int32
  var end: Int32
  var size: Int64
  var type: TreeEntryType
  var isExcluded: Bool

  init(_ entry: EncodedEntry) {
    start = Int32(entry.range.lowerBound)
    end = Int32(entry.range.upperBound)
    size = entry.size
    type = entry.type
    isExcluded = entry.isExcluded
  }

  var range: Range<Int> { Int(start)..<Int(end) }
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
  /// The previous tree of this directory, serialized (empty when there is none).
  var previousData: [UInt8] = []
  /// How many entries the previous tree of this directory had (-1: none).
  var previousEntryCount = -1
  /// Every entry's name, each followed by a NUL.
  var names: [UInt8] = []
  var entries: [ScannedEntry] = []

  func name(of entry: ScannedEntry) -> [UInt8] {
    Array(names[Int(entry.nameStart)..<Int(entry.nameStart + entry.nameLength)])
  }
}

/// Which names the scan leaves out.
struct ScanRules: Sendable {
  /// The bundle directory's name, skipped at the top unless `includeBundle`.
  var bundleDirectoryName: String
  var includeBundle: Bool
  /// For export: scan only these top-level names (nil: everything not skipped).
  var onlyTopLevel: Set<[UInt8]>? = nil

  func skips(_ name: UnsafeRawBufferPointer, in path: [UInt8]) -> Bool {
    if path.isEmpty {
      if let onlyTopLevel { return !onlyTopLevel.contains(Array(name)) }
      if name.elementsEqual("tmp".utf8) { return true }
      if !includeBundle && name.elementsEqual(bundleDirectoryName.utf8) { return true }
      return false
    }
    return path.count == 7 && path.elementsEqual("Library".utf8) && name.elementsEqual("Caches".utf8)
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

  /// `previousRoot` is the parent snapshot's root tree (nil: no change detection), read from
  /// the catalog at `catalogPath`; entries whose ctime is not before `trustedBefore` minus the
  /// racy window are treated as changed.
  init(
    home: FileDescriptor, rules: ScanRules, catalogPath: String?, previousRoot: Digest?, trustedBefore: Int64,
    observer: EngineObserver
  ) {
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
    let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 * 1024, alignment: 16)
    defer { buffer.deallocate() }
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
          // One read transaction for the whole scan: the WAL read lock is taken once.
          catalog = try Catalog(path: catalogPath, readOnly: true)
          try catalog!.database.execute("BEGIN DEFERRED TRANSACTION")
        }
        let path = mutex.withLock { directories[job.index].path }
        let previousDigest = job.index == 0 ? previousRoot : job.previous?.digest
        let previousData = try previousDigest.map { digest -> [UInt8] in
          guard let data = try catalog!.treeData(digest) else {
            throw BackupError(.corruptCatalog, "Catalog is missing tree \(digest.hex.prefix(16))")
          }
          return data
        }
        var (result, previousDirectories) = try visit(
          path: path, previous: job.previous, isRoot: job.index == 0, previousData: previousData ?? [],
          buffer: buffer)
        result.previousDigest = previousDigest
        mutex.withLock {
          for position in result.entries.indices where result.entries[position].type == .directory {
            let entry = result.entries[position]
            var child = ScannedDirectory()
            child.path = joinPath(path, result.name(of: entry))
            let childIndex = directories.count
            directories.append(child)
            result.entries[position].child = childIndex
            pending.append((childIndex, previousDirectories[position]))
          }
          directories[job.index] = result
          active -= 1
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

  /// Lists one directory and stats its entries, merging them with the previous tree's.
  /// Also returns, by entry position, the previous entries of subdirectories, decoded.
  private func visit(
    path: [UInt8], previous: TreeEntry?, isRoot: Bool, previousData: [UInt8],
    buffer: UnsafeMutableRawBufferPointer
  ) throws -> (ScannedDirectory, [Int: TreeEntry]) {
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
        result.attributes = try directory.userExtendedAttributes().map {
          ExtendedAttribute(name: $0.name, value: $0.value)
        }
        result.isExcluded = result.attributes.contains { $0.name == excludeFromBackupAttribute }
      }
      if result.isExcluded { return (result, [:]) }
    }
    var previousDirectories: [Int: TreeEntry] = [:]
    var names: [UInt8] = []
    var spans: [(start: Int32, length: Int32)] = []
    do {
      try directory.forEachEntry(buffer: buffer) { name, length, _ in
        let bytes = UnsafeRawBufferPointer(start: name, count: length)
        if rules.skips(bytes, in: path) { return }
        spans.append((Int32(names.count), Int32(length)))
        names.append(contentsOf: bytes)
        names.append(0)
      }
    } catch let error as SystemError {
      throw unreadable(error, path: shown)
    }
    names.withUnsafeBytes { arena in
      spans.sort { compareBytes(arena, $0, arena, $1) < 0 }
    }
    result.previousData = previousData
    result.entries.reserveCapacity(spans.count)
    try previousData.withUnsafeBytes { old in
      var cursor = previousData.isEmpty ? nil : try TreeCursor(old)
      result.previousEntryCount = cursor?.count ?? -1
      var candidate = try cursor?.next()
      try names.withUnsafeBytes { arena in
        for span in spans {
          while let current = candidate,
            compareBytes(
              old, (Int32(current.nameRange.lowerBound), Int32(current.nameRange.count)), arena, span) < 0
          {
            candidate = try cursor!.next()
          }
          var match: EncodedEntry?
          if let current = candidate,
            compareBytes(
              old, (Int32(current.nameRange.lowerBound), Int32(current.nameRange.count)), arena, span) == 0
          {
            match = current
          }
          let cName = (arena.baseAddress! + Int(span.start)).assumingMemoryBound(to: CChar.self)
          let status: FileStatus
          do {
            guard let found = try directory.status(ofCName: cName) else { continue }  // vanished
            status = found
          } catch let error as SystemError {
            throw unreadable(
              error,
              path: display(
                joinPath(path, Array(UnsafeRawBufferPointer(start: cName, count: Int(span.length))))))
          }
          guard let type = TreeEntryType(status.type) else {
            let entryPath = display(
              joinPath(path, Array(UnsafeRawBufferPointer(start: cName, count: Int(span.length)))))
            throw BackupError(
              .unreadable(.badData), "Unable to back up '\(entryPath)': device files do not belong in a home")
          }
          var entry = ScannedEntry(
            nameStart: span.start, nameLength: span.length, status: EntryStatus(status), type: type,
            previous: match.map(PreviousEntry.init))
          if type == .directory {
            if let match, match.type == .directory {
              previousDirectories[result.entries.count] = try Tree.materialize(match, in: old)
            }
          } else if let match,
            ChangeDetector.isUnchanged(status, previous: match, trustedBefore: trustedBefore)
          {
            entry.isReused = true
          } else if type == .file, let match, match.hasDigest,
            ChangeDetector.isUnchanged(status, previous: match, trustedBefore: .max)
          {
            entry.isRacy = true
          } else if type == .symlink {
            let name = Array(UnsafeRawBufferPointer(start: cName, count: Int(span.length)))
            do {
              entry.linkTarget = try directory.readLink(rawName: name)
            } catch let error as SystemError {
              throw unreadable(error, path: display(joinPath(path, name)))
            }
          }
          result.entries.append(entry)
        }
      }
    }
    result.names = names
    return (result, previousDirectories)
  }
}

/// Compares two names held in byte buffers, as `[UInt8].lexicographicallyPrecedes` orders them.
@inline(__always)
func compareBytes(
  _ a: UnsafeRawBufferPointer, _ x: (start: Int32, length: Int32), _ b: UnsafeRawBufferPointer,
  _ y: (start: Int32, length: Int32)
) -> Int {
  let common = Int(min(x.length, y.length))
  let order = memcmp(a.baseAddress! + Int(x.start), b.baseAddress! + Int(y.start), common)
  if order != 0 { return Int(order) }
  return Int(x.length) - Int(y.length)
}

/// Turns a failed system call on a file of the home into the backup's error.
func unreadable(_ error: SystemError, path: String) -> BackupError {
  BackupError(
    .unreadable(error.kind == .denied ? .denied : .io),
    "Unable to back up '\(path)': cannot \(error.operation) it (\(error.errno))")
}
