// Stage 1 of a backup: scan the home with both cores, detecting changes as it goes.
//
// Algorithm: a shared LIFO of directories to visit and two workers. A worker opens its
// directory by name from its parent's descriptor (O_NOFOLLOW | O_DIRECTORY: a symlink swapped
// in mid-scan is refused, never followed), never by a path from the home, so neither depth nor
// PATH_MAX limits the walk (a 20,000-level chain scans like any other tree). Parent
// descriptors are shared by their children's jobs and closed when the last child has opened;
// past a budget of open descriptors a job keeps no parent and opens its directory beneath the
// home by path instead (`openBeneath`, in pieces shorter than PATH_MAX, no symlink followed).
// The worker lists the directory with getdents, sorts the raw names, and merges them with the
// previous snapshot's tree of the same directory (loaded through its own read-only catalog
// connection, walked in place by a TreeCursor). Each entry costs one fstatat;
// `ChangeDetector` then decides whether the previous entry stands for it. Names live in one
// byte arena per directory and entries refer to them, so an unchanged file costs no
// allocation at all. Directories record their parent and name, not their path: paths are
// built only where a member name or a message needs one. Changed symlinks are read here;
// changed regular files are left for the archiver, which must open them anyway.
// Subdirectories are pushed as new work, carrying their previous entry.
//
// Invariants: nothing is followed (every open and stat uses O_NOFOLLOW/AT_SYMLINK_NOFOLLOW);
// a directory's own metadata comes from fstat on the descriptor that was listed; an
// excluded directory is recorded but not listed; `tmp` (in a home), `Library/Caches` and
// (unless asked) the bundle are skipped by name at their fixed places; an entry that vanishes between
// listing and stat never existed as far as the snapshot is concerned. What the app made
// unreadable (permission denied) or too deep to store (a path over 64 KiB) does not stop the
// scan: a directory that cannot be listed (permission denied, or encrypted under a key the
// file system does not hold) is recorded empty, an entry that cannot be read is
// left out, and each is reported in `unreadable`, which makes the snapshot incomplete. Any
// other failure (an I/O error, a device file) stops the whole scan with an error naming the
// path.

import AppboxContainer
import AppboxCore
import AppboxCrypto
import Glibc
import Synchronization

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
  /// The parent's index (-1 for the home itself) and this directory's name in it.
  var parent = -1
  var name: [UInt8] = []
  /// The length in bytes of the path from the home (0 for the home).
  var pathLength = 0
  /// The home's top-level `Library` (whose `Caches` is skipped).
  var isTopLibrary = false
  /// The bundle directory or something inside it (not counted in files and bytes).
  var isInBundle = false
  var status: FileStatus?
  var attributes: [ExtendedAttribute] = []
  var isExcluded = false
  /// Could not be listed: recorded without entries, and reported as unreadable.
  var isUnreadable = false
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

extension Array where Element == ScannedDirectory {
  /// The path of directory `index` relative to the home ("" for the home), built from the
  /// names of its ancestors.
  func path(of index: Int) -> [UInt8] {
    var names: [[UInt8]] = []
    var current = index
    while current > 0 {
      names.append(self[current].name)
      current = self[current].parent
    }
    var path: [UInt8] = []
    path.reserveCapacity(index > 0 ? self[index].pathLength : 0)
    for name in names.reversed() {
      if !path.isEmpty { path.append(UInt8(ascii: "/")) }
      path.append(contentsOf: name)
    }
    return path
  }
}

/// Something the scan or the archiver could not read; the snapshot records it as incomplete.
struct UnreadableEntry: Sendable, Equatable {
  var path: [UInt8]
  /// Why, for people: "permission denied", "its path is longer than 65536 bytes".
  var reason: String
}

/// Which names the scan leaves out.
struct ScanRules: Sendable {
  /// The bundle directory's name, skipped at the top unless `includeBundle`.
  var bundleDirectoryName: String
  var includeBundle: Bool
  /// For export: scan only these top-level names (nil: everything not skipped).
  var onlyTopLevel: Set<[UInt8]>? = nil
  /// Whether a top-level `tmp` is left out (a home's; an app group's container has none, so
  /// a `tmp` there is data).
  var skipsTemporaryDirectory = true

  /// The longest path (bytes, relative to the home) a snapshot stores: deeper entries are
  /// left out and reported. PATH_MAX is no limit (the walk uses descriptors), but every tar
  /// member repeats its whole path, so an unbounded depth would let an app grow an archive
  /// quadratically; 64 KiB is also the longest path a manifest records.
  static let maximumPathLength = 65_536

  func skips(_ name: UnsafeRawBufferPointer, inRoot isRoot: Bool, inTopLibrary isTopLibrary: Bool) -> Bool {
    if isRoot {
      if let onlyTopLevel { return !onlyTopLevel.contains(Array(name)) }
      if skipsTemporaryDirectory && name.elementsEqual("tmp".utf8) { return true }
      if !includeBundle && name.elementsEqual(bundleDirectoryName.utf8) { return true }
      return false
    }
    return isTopLibrary && name.elementsEqual("Caches".utf8)
  }
}

/// A directory descriptor shared by the pending jobs of its subdirectories; closed when the
/// last of them has opened its own.
final class DirectoryHandle: @unchecked Sendable {
  let descriptor: FileDescriptor
  private let live: LiveCount

  init(_ descriptor: FileDescriptor, live: LiveCount) {
    self.descriptor = descriptor
    self.live = live
    live.count.add(1, ordering: .relaxed)
  }

  deinit {
    descriptor.close()
    live.count.subtract(1, ordering: .relaxed)
  }
}

/// How many `DirectoryHandle`s are open.
final class LiveCount: Sendable {
  let count = Atomic<Int>(0)
}

/// The parallel scanner. Use once: `scan()` returns every directory, index 0 being the home.
final class Scanner: @unchecked Sendable {
  /// Open parent descriptors the scan keeps at most (by default); past it, jobs open by path.
  static let defaultDescriptorBudget = 256
  private let descriptorBudget: Int

  private let home: FileDescriptor
  private let rules: ScanRules
  private let catalogPath: String?
  private let previousRoot: Digest?
  private let trustedBefore: Int64
  private let observer: EngineObserver

  private struct Job {
    var index: Int
    var previous: TreeEntry?
    /// The parent directory, open; nil for the home, or when the budget was spent.
    var parent: DirectoryHandle?
  }

  private let mutex = Monitor()
  private var directories: [ScannedDirectory] = []
  private var pending: [Job] = []
  private var active = 0
  private var failure: Error?
  private let live = LiveCount()
  /// What could not be read: the first `unreadableLimit` entries, and how many in all.
  private(set) var unreadable: [UnreadableEntry] = []
  private(set) var unreadableCount = 0
  static let unreadableLimit = 1000
  /// Directories that vanished or turned into something else while the scan ran.
  private(set) var warnings: [(path: String, message: String)] = []

  /// `previousRoot` is the parent snapshot's root tree (nil: no change detection), read from
  /// the catalog at `catalogPath`; entries whose ctime is not before `trustedBefore` minus the
  /// racy window are treated as changed.
  init(
    home: FileDescriptor, rules: ScanRules, catalogPath: String?, previousRoot: Digest?, trustedBefore: Int64,
    observer: EngineObserver, descriptorBudget: Int = Scanner.defaultDescriptorBudget
  ) {
    self.descriptorBudget = descriptorBudget
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
    pending = [Job(index: 0, previous: nil, parent: nil)]
    let threads = (0..<max(1, workers)).map { number in
      WorkerThread(name: "appbox-scan-\(number)") { [self] in try work() }
    }
    var firstError: Error?
    for thread in threads {
      do { try thread.join() } catch { firstError = firstError ?? error }
    }
    pending.removeAll()
    if let error = failure ?? firstError { throw error }
    return directories
  }

  /// Records an entry the snapshot leaves out (call with the mutex held).
  private func recordUnreadable(_ path: [UInt8], _ reason: String) {
    unreadableCount += 1
    if unreadable.count < Scanner.unreadableLimit {
      unreadable.append(UnreadableEntry(path: path, reason: reason))
    }
  }

  private func work() throws {
    var catalog: Catalog?
    let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 * 1024, alignment: 16)
    defer { buffer.deallocate() }
    while true {
      let next: (job: Job, directory: ScannedDirectory, path: [UInt8]?)? = mutex.withLock {
        while pending.isEmpty && active > 0 && failure == nil { mutex.wait() }
        if failure != nil || pending.isEmpty { return nil }
        active += 1
        let job = pending.removeLast()
        // Only a job without its parent's descriptor needs the whole path.
        let path = job.parent == nil && job.index != 0 ? directories.path(of: job.index) : nil
        return (job, directories[job.index], path)
      }
      guard var (job, directory, path) = next else { return }
      do {
        if catalog == nil, previousRoot != nil, let catalogPath {
          // One read transaction for the whole scan: the WAL read lock is taken once.
          catalog = try Catalog(path: catalogPath, readOnly: true)
          try catalog!.database.execute("BEGIN DEFERRED TRANSACTION")
        }
        let previousDigest = job.index == 0 ? previousRoot : job.previous?.digest
        let previousData = try previousDigest.map { digest -> [UInt8] in
          guard let data = try catalog!.treeData(digest) else {
            throw BackupError(.corruptCatalog, "Catalog is missing tree \(digest.hex.prefix(16))")
          }
          return data
        }
        var outcome = try visit(
          job: job, directory: directory, path: path, previousData: previousData ?? [], buffer: buffer)
        job.parent = nil  // opened: the parent's descriptor closes once its last child has opened
        outcome.directory.previousDigest = previousDigest
        let subdirectories = outcome.directory.entries.indices.filter {
          outcome.directory.entries[$0].type == .directory
        }
        var handle: DirectoryHandle?
        if let descriptor = outcome.descriptor {
          if !subdirectories.isEmpty && live.count.load(ordering: .relaxed) < descriptorBudget {
            handle = DirectoryHandle(descriptor, live: live)
          } else {
            descriptor.close()
          }
        }
        let finished = outcome.directory
        let previousDirectories = outcome.previousDirectories
        let unreadableHere = outcome.unreadable
        let warning = outcome.warning
        mutex.withLock {
          var result = finished
          for position in subdirectories {
            let entry = result.entries[position]
            var child = ScannedDirectory()
            child.parent = job.index
            child.name = result.name(of: entry)
            child.pathLength = (job.index == 0 ? 0 : result.pathLength + 1) + child.name.count
            child.isTopLibrary = job.index == 0 && child.name.elementsEqual("Library".utf8)
            child.isInBundle =
              result.isInBundle
              || (job.index == 0 && child.name.elementsEqual(rules.bundleDirectoryName.utf8))
            let childIndex = directories.count
            directories.append(child)
            result.entries[position].child = childIndex
            pending.append(Job(index: childIndex, previous: previousDirectories[position], parent: handle))
          }
          directories[job.index] = result
          for entry in unreadableHere { recordUnreadable(entry.path, entry.reason) }
          if let warning { warnings.append(warning) }
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

  private struct Visit {
    var directory: ScannedDirectory
    /// The listed directory, open, for its subdirectories' jobs (nil when not listed).
    var descriptor: FileDescriptor?
    /// By entry position: the previous entries of subdirectories, decoded.
    var previousDirectories: [Int: TreeEntry] = [:]
    var unreadable: [UnreadableEntry] = []
    var warning: (path: String, message: String)?
  }

  /// Opens the job's directory: from its parent's descriptor by name, the home itself, or
  /// (when no parent descriptor was kept) by path beneath the home.
  private func open(_ job: Job, directory: ScannedDirectory, path: [UInt8]?, flags: Int32) throws
    -> FileDescriptor
  {
    if let parent = job.parent {
      return try parent.descriptor.open(rawName: directory.name, flags | O_NOFOLLOW)
    }
    if job.index == 0 { return try home.open(".", flags) }
    return try home.openBeneath(path ?? [], flags)
  }

  /// Lists one directory and stats its entries, merging them with the previous tree's.
  private func visit(
    job: Job, directory scanned: ScannedDirectory, path knownPath: [UInt8]?, previousData: [UInt8],
    buffer: UnsafeMutableRawBufferPointer
  ) throws -> Visit {
    var result = scanned
    let isRoot = job.index == 0
    // Paths are built only for messages (and for a job without its parent's descriptor).
    var builtPath: [UInt8]?
    func path() -> [UInt8] {
      if let builtPath { return builtPath }
      let made = knownPath ?? mutex.withLock { directories.path(of: job.index) }
      builtPath = made
      return made
    }
    let directory: FileDescriptor
    do {
      directory = try open(job, directory: scanned, path: knownPath, flags: O_RDONLY | O_DIRECTORY)
    } catch let error as SystemError where !isRoot {
      switch error.errno {
      case .permissionDenied, .notPermitted:
        // Recorded as it is seen from outside, without content: its own status comes from a
        // descriptor that needs no permission on it (O_PATH).
        let status = try? open(
          job, directory: scanned, path: knownPath, flags: FileDescriptor.pathOnlyFlag | O_DIRECTORY
        )
        .closeAfter { try $0.status() }
        guard let status else { return Visit(directory: result) }  // gone meanwhile
        result.status = status
        result.isUnreadable = true
        if let previous = job.previous,
          ChangeDetector.isUnchanged(status, previous: previous, trustedBefore: trustedBefore)
        {
          result.attributes = previous.extendedAttributes
          result.isExcluded = previous.isExcluded
        }
        if result.isExcluded { return Visit(directory: result) }
        return Visit(
          directory: result,
          unreadable: [UnreadableEntry(path: path(), reason: "cannot list it (\(error.errno))")])
      case .noEntry, .notDirectory, .tooManyLinks:
        // Gone, or replaced by a file or a symlink: it never existed for this snapshot.
        return Visit(
          directory: result,
          warning: (display(path()), "not backed up: it was moved or replaced during the backup"))
      default:
        throw backupFailure(error, path: display(path()))
      }
    }
    var keepOpen = false
    defer { if !keepOpen { directory.close() } }
    let status = try directory.status()
    result.status = status
    if !isRoot {
      if let previous = job.previous,
        ChangeDetector.isUnchanged(status, previous: previous, trustedBefore: trustedBefore)
      {
        result.attributes = previous.extendedAttributes
        result.isExcluded = previous.isExcluded
        result.isUnchanged = true
      } else {
        result.attributes = try directory.userExtendedAttributes().map {
          ExtendedAttribute(name: $0.name, value: $0.value)
        }
        result.isExcluded = result.attributes.contains { $0.name == excludeFromBackupAttribute }
      }
      if result.isExcluded { return Visit(directory: result) }
      if let reason = try unlistableEncryption(of: directory) {
        result.isUnreadable = true
        return Visit(directory: result, unreadable: [UnreadableEntry(path: path(), reason: reason)])
      }
    }
    var visit = Visit(directory: result)
    var names: [UInt8] = []
    var spans: [(start: Int32, length: Int32)] = []
    do {
      try directory.forEachEntry(buffer: buffer) { name, length, _ in
        let bytes = UnsafeRawBufferPointer(start: name, count: length)
        if rules.skips(bytes, inRoot: isRoot, inTopLibrary: result.isTopLibrary) { return }
        spans.append((Int32(names.count), Int32(length)))
        names.append(contentsOf: bytes)
        names.append(0)
      }
    } catch let error as SystemError {
      throw backupFailure(error, path: isRoot ? "." : display(path()))
    }
    names.withUnsafeBytes { arena in
      spans.sort { compareBytes(arena, $0, arena, $1) < 0 }
    }
    result.previousData = previousData
    result.entries.reserveCapacity(spans.count)
    let entryPrefix = isRoot ? 0 : result.pathLength + 1
    func entryPath(_ name: [UInt8]) -> [UInt8] { joinPath(isRoot ? [] : path(), name) }
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
          let name = { Array(UnsafeRawBufferPointer(start: cName, count: Int(span.length))) }
          if entryPrefix + Int(span.length) > ScanRules.maximumPathLength {
            visit.unreadable.append(
              UnreadableEntry(
                path: entryPath(name()),
                reason: "its path is longer than \(ScanRules.maximumPathLength) bytes"))
            continue
          }
          let status: FileStatus
          do {
            guard let found = try directory.status(ofCName: cName) else { continue }  // vanished
            status = found
          } catch let error as SystemError
            where error.errno == .permissionDenied || error.errno == .notPermitted
          {
            visit.unreadable.append(
              UnreadableEntry(path: entryPath(name()), reason: "cannot stat it (\(error.errno))"))
            continue
          } catch let error as SystemError {
            throw backupFailure(error, path: display(entryPath(name())))
          }
          guard let type = TreeEntryType(status.type) else {
            throw BackupError(
              .unreadable(.badData),
              "Unable to back up '\(display(entryPath(name())))': device files do not belong in a home")
          }
          var entry = ScannedEntry(
            nameStart: span.start, nameLength: span.length, status: EntryStatus(status), type: type,
            previous: match.map(PreviousEntry.init))
          if type == .directory {
            if let match, match.type == .directory {
              visit.previousDirectories[result.entries.count] = try Tree.materialize(match, in: old)
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
            do {
              entry.linkTarget = try directory.readLink(rawName: name())
            } catch let error as SystemError where error.errno == .noEntry || error.errno == .invalidArgument
            {
              continue  // gone, or no longer a symlink: it never existed for this snapshot
            } catch let error as SystemError
              where error.errno == .permissionDenied || error.errno == .notPermitted
            {
              visit.unreadable.append(
                UnreadableEntry(path: entryPath(name()), reason: "cannot read the link (\(error.errno))"))
              continue
            } catch let error as SystemError {
              throw backupFailure(error, path: display(entryPath(name())))
            }
          }
          result.entries.append(entry)
        }
      }
    }
    result.names = names
    visit.directory = result
    if result.entries.contains(where: { $0.type == .directory }) {
      keepOpen = true
      visit.descriptor = directory
    }
    return visit
  }
}

/// Why the open directory `directory` cannot be listed for a snapshot, or nil when it can: it
/// is encrypted (an fscrypt policy no protection class of appbox sets on a directory) under a
/// key the file system does not hold, so its names are placeholders and its files cannot be
/// opened. It is then recorded as a folder appbox cannot read is: without content, in
/// `unreadable`. Uses `ioctl(FS_IOC_GET_ENCRYPTION_POLICY_EX)` and
/// `ioctl(FS_IOC_GET_ENCRYPTION_KEY_STATUS)`.
func unlistableEncryption(of directory: FileDescriptor) throws -> String? {
  guard let identifier = try directory.encryptionPolicy() else { return nil }
  if try directory.encryptionKeyStatus(identifier) == .present { return nil }
  return "cannot list it (encrypted with a key that is not available)"
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

/// Turns a failed system call on a file of the home into the backup's error, in the words
/// of `SystemError`: "Unable to read link 'Documents/x': input/output error".
func backupFailure(_ error: SystemError, path: String) -> BackupError {
  BackupError(
    .unreadable(error.kind == .denied ? .denied : .io),
    "Unable to \(error.operation) '\(path)': \(error.errno)")
}
