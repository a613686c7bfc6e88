// Stage 1 of a backup: scan the home with both cores, detecting changes as it goes, and hand
// the directories over one at a time in depth-first order.
//
// Algorithm: the consumer (the content reader) asks for directories with `next()`, which
// returns them in depth-first pre-order (a directory, then each subdirectory's whole subtree,
// in name order). The jobs for the subdirectories of every directory handed over wait on a
// stack whose top is the next directory in that order. Workers scan from the top down: the
// top job first, then, as look-ahead, the next ones, up to `lookaheadDirectories`
// directories and `lookaheadEntries` entries scanned but not yet handed over (the top job is
// always allowed, so the consumer never waits on the budget). When the consumer asks for the
// top job and no worker has taken it yet, the consumer scans it itself instead of sleeping
// until one has (a wake-up per directory cost as much as the scan in a tree of small
// directories). So the scan runs a little ahead of the archive on the other core, and what
// it holds at any time is the directories on the consumer's path plus that bounded
// look-ahead: memory follows the largest directory, not the number of files (a million
// files scan in the memory of one directory's worth).
//
// A worker opens its directory by name from its parent's descriptor (O_NOFOLLOW |
// O_DIRECTORY: a symlink swapped in mid-scan is refused, never followed), never by a path
// from the home, so neither depth nor PATH_MAX limits the walk (a 20,000-level chain scans
// like any other tree). Parent descriptors are shared by their children's jobs and closed
// when the last child has opened (and the reader has read the parent's files); past a budget
// of open descriptors a job keeps no parent and opens its directory beneath the home by path
// instead (`openBeneath`, in pieces shorter than PATH_MAX, no symlink followed). How one
// directory is listed and merged with the previous snapshot's tree is in Scanner+Visit.swift.
//
// Invariants: nothing is followed (every open and stat uses O_NOFOLLOW/AT_SYMLINK_NOFOLLOW);
// a directory's own metadata comes from fstat on the descriptor that was listed; directories
// are handed over exactly once, parents before children, in depth-first name order; the
// first failure stops the workers and is thrown by the next `next()`.

import AppboxContainer
import AppboxCore
import AppboxPipeline
import AppboxCrypto
import AppboxRepository
import Glibc
import Synchronization

/// How many `DirectoryHandle`s are open.
final class LiveCount: Sendable {
  let count = Atomic<Int>(0)
}

/// The parallel scanner. Use once: call `next()` until it returns nil (or stop with `cancel()`),
/// then `finish()`.
final class Scanner: @unchecked Sendable {
  /// Open parent descriptors the scan keeps at most (by default); past it, jobs open by path.
  static let defaultDescriptorBudget = 256
  /// Worker threads besides the consumer, which scans too whenever the next directory is
  /// still waiting: one on two cores (with the consumer, two scanning; a third thread only
  /// preempts them), two from three cores up. (0: the consumer scans alone.)
  static let defaultWorkers = max(1, min(2, sysconf(Int32(_SC_NPROCESSORS_ONLN)) - 1))
  /// Directories (and their entries) scanned ahead of the consumer, at most.
  static let lookaheadDirectories = 64
  static let lookaheadEntries = 32_768
  let descriptorBudget: Int

  let home: FileDescriptor
  let rules: ScanRules
  private let catalogPath: String?
  let previousRoot: Digest?
  let trustedBefore: Int64
  private let observer: EngineObserver
  private let workerCount: Int

  private final class Job {
    let directory: ScannedDirectory
    /// The parent directory, open; nil for the home, or when the budget was spent.
    var parent: DirectoryHandle?
    var state = State.pending
    enum State { case pending, scanning, done }

    init(directory: ScannedDirectory, parent: DirectoryHandle?) {
      self.directory = directory
      self.parent = parent
    }
  }

  let mutex = Monitor()
  /// Jobs for the subdirectories of the directories handed over; the top is the next one.
  private var stack: [Job] = []
  private var started = false
  private var finished = false
  private var failure: Error?
  private var scanning = 0
  /// Scanned and not handed over yet (the top job's excepted).
  private var aheadDirectories = 0
  private var aheadEntries = 0
  private var threads: [WorkerThread<Void>] = []
  /// The consumer's own catalog connection and buffer, for the directories it scans itself.
  private var consumerCatalog: Catalog?
  private var consumerBuffer: UnsafeMutableRawBufferPointer?
  let live = LiveCount()
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
    observer: EngineObserver, descriptorBudget: Int = Scanner.defaultDescriptorBudget,
    workers: Int = Scanner.defaultWorkers
  ) {
    self.descriptorBudget = descriptorBudget
    self.home = home
    self.rules = rules
    self.catalogPath = catalogPath
    self.previousRoot = previousRoot
    self.trustedBefore = trustedBefore
    self.observer = observer
    workerCount = max(0, workers)
  }

  deinit { finish() }

  /// The next directory in depth-first order (the home first), or nil after the last.
  /// Throws the scan's first failure. When the next directory is still waiting for a worker,
  /// the caller scans it itself rather than sleep until a worker has: a hand-over between
  /// threads costs a wake-up (an interrupt between CPUs, dearer still in a virtual machine)
  /// per directory, which in a tree of small directories cost as much as scanning them.
  func next() throws -> ScannedDirectory? {
    if !started {
      started = true
      stack = [
        Job(directory: ScannedDirectory(parent: nil, name: [], previous: nil, rules: rules), parent: nil)
      ]
      threads = (0..<workerCount).map { number in
        WorkerThread(name: "appbox-scan-\(number)") { [self] in try work() }
      }
    }
    while true {
      let step: Result<Step, Error> = mutex.withLock {
        while true {
          if let failure { return .failure(failure) }
          guard let top = stack.last else {
            finished = true
            mutex.broadcast()
            return .success(.end)
          }
          switch top.state {
          case .done: return .success(.handOver(handOverTop()))
          case .pending:
            top.state = .scanning
            scanning += 1
            return .success(.scan(top))
          case .scanning: mutex.wait()
          }
        }
      }
      switch try step.get() {
      case .handOver(let directory): return directory
      case .end: return nil
      case .scan(let job):
        if consumerBuffer == nil {
          consumerBuffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 * 1024, alignment: 16)
        }
        // A failure is recorded: the next step throws it.
        _ = scan(job, catalog: &consumerCatalog, buffer: consumerBuffer!)
      }
    }
  }

  private enum Step {
    case handOver(ScannedDirectory)
    case scan(Job)
    case end
  }

  /// Takes the top job, done, off the stack and pushes its subdirectories' jobs (call with the
  /// mutex held).
  private func handOverTop() -> ScannedDirectory {
    let job = stack.removeLast()
    let directory = job.directory
    aheadDirectories -= 1
    aheadEntries -= directory.entries.count
    // Its subdirectories' jobs, the first on top.
    for position in directory.entries.indices.reversed()
    where directory.entries[position].type == .directory {
      let entry = directory.entries[position]
      let child = ScannedDirectory(
        parent: directory, name: directory.name(of: entry), position: Int32(position),
        previous: directory.previousSubdirectories[Int32(position)], rules: rules)
      stack.append(Job(directory: child, parent: directory.handle))
    }
    directory.previousSubdirectories = [:]
    // The subdirectories' jobs hold the descriptor now; the reader needs it only for files.
    if !directory.needsReading { directory.handle = nil }
    mutex.broadcast()
    return directory
  }

  /// Stops the workers (after the last `next()`, or early) and waits for them.
  func finish() {
    mutex.withLock {
      finished = true
      mutex.broadcast()
    }
    for thread in threads { try? thread.join() }
    threads = []
    consumerCatalog = nil
    consumerBuffer?.deallocate()
    consumerBuffer = nil
    mutex.withLock { stack.removeAll() }
  }

  /// Records an entry the snapshot leaves out (call with the mutex held).
  private func recordUnreadable(_ path: [UInt8], _ reason: String) {
    unreadableCount += 1
    if unreadable.count < Scanner.unreadableLimit {
      unreadable.append(UnreadableEntry(path: path, reason: reason))
    }
  }

  /// The job a worker should scan next (call with the mutex held): the pending job nearest
  /// the top, when it is the top or the look-ahead budget allows.
  private func pickJob() -> Job? {
    var index = stack.count - 1
    var looked = 0
    while index >= 0 && looked <= Scanner.lookaheadDirectories + workerCount {
      let job = stack[index]
      if job.state == .pending {
        let isNext = index == stack.count - 1
        let roomAhead =
          aheadDirectories + scanning < Scanner.lookaheadDirectories
          && aheadEntries < Scanner.lookaheadEntries
        return isNext || roomAhead ? job : nil
      }
      index -= 1
      looked += 1
    }
    return nil
  }

  private func work() throws {
    var catalog: Catalog?
    let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 * 1024, alignment: 16)
    defer { buffer.deallocate() }
    while true {
      let next: Job? = mutex.withLock {
        while true {
          if finished || failure != nil { return nil }
          if let job = pickJob() {
            job.state = .scanning
            scanning += 1
            return job
          }
          mutex.wait()
        }
      }
      guard let job = next else { return }
      guard scan(job, catalog: &catalog, buffer: buffer) else { return }
    }
  }

  /// Scans one job taken for scanning (by a worker or by the consumer, each with a catalog
  /// connection and a buffer of its own) and marks it done; false after a failure, which is
  /// recorded for `next()` to throw.
  private func scan(_ job: Job, catalog: inout Catalog?, buffer: UnsafeMutableRawBufferPointer) -> Bool {
    do {
      if catalog == nil, previousRoot != nil, let catalogPath {
        // One read transaction for the whole scan: the WAL read lock is taken once.
        catalog = try Catalog(path: catalogPath, readOnly: true)
        try catalog!.database.execute("BEGIN DEFERRED TRANSACTION")
      }
      let directory = job.directory
      let previousDigest = directory.depth == 0 ? previousRoot : directory.previous?.digest
      let previousData = try previousDigest.map { digest -> [UInt8] in
        guard let data = try catalog!.treeData(digest) else {
          throw BackupError(.corruptCatalog, "Catalog is missing tree \(digest.hex.prefix(16))")
        }
        return data
      }
      let outcome = try visit(
        directory, parent: job.parent, previousData: previousData ?? [], buffer: buffer)
      job.parent = nil  // opened: the parent's descriptor closes once nobody else needs it
      directory.previousDigest = previousDigest
      mutex.withLock {
        for entry in outcome.unreadable { recordUnreadable(entry.path, entry.reason) }
        if let warning = outcome.warning { warnings.append(warning) }
        job.state = .done
        scanning -= 1
        aheadDirectories += 1
        aheadEntries += directory.entries.count
        mutex.broadcast()
      }
      return true
    } catch {
      mutex.withLock {
        if failure == nil { failure = error }
        scanning -= 1
        mutex.broadcast()
      }
      return false
    }
  }
}
