// Stage 3a of a backup: read and hash changed files, on their own thread.
//
// Algorithm: for each archive item in order, the reader opens a changed regular file beneath
// the home (no symlink followed anywhere), takes fstat, reads its `user.*` attributes, and
// either stops there (the file is marked "exclude from backup"), reads it whole (small files:
// the archiver can then skip content the repository already holds), or streams it in chunks
// (large files). SHA-256 runs on whichever core has room: on this thread while the
// archiver keeps up (its buffers come back), else the digest is left to the archiver (the
// message carries none), which hashes what it writes. Directory and symlink items pass
// straight through so the archiver sees every item in order.
//
// A file changed while read (size, mtime, ctime or inode differ between the fstat before and
// after, or it ended early) is read again, up to `maxAttempts` times; a streamed attempt that
// turns out unstable has already gone to the archive, so the archiver appends the next attempt
// as a new member of the same path (later members win in tar). The last attempt is kept
// either way and flagged unstable, for a warning. A file that ended early is padded with
// zeros to the size its header declared; the digest covers those zeros, so the digest always
// describes the member's bytes. Buffers are handed to the archiver, which frees them.
//
// A large file with fewer blocks allocated than its size may have holes: its data regions are
// found with SEEK_DATA/SEEK_HOLE, only they are read (pread at their offsets), and each hole is
// handed over as a count of zeros, which the archiver stores as a hole of a sparse member. The
// digest is still that of the whole content, holes hashed as zeros.

import AppboxContainer
import AppboxCore
import AppboxCrypto
import Glibc

/// What the reader learned about a file when it opened it.
struct OpenedFile {
  var status: EntryStatus
  var attributes: [ExtendedAttribute]
  /// For a file with holes, its data regions (the rest reads as zeros); nil when dense.
  var dataRegions: [Range<Int64>]? = nil
  var isExcluded: Bool { attributes.contains { $0.name == excludeFromBackupAttribute } }
  /// Bytes of data the archive stores for it (holes excluded).
  var dataBytes: Int64 { dataRegions?.reduce(0) { $0 + Int64($1.count) } ?? status.size }
}

/// A message from the reader to the archiver, in item order.
enum ContentMessage {
  /// A directory or symlink item: nothing to read.
  case passthrough(item: Int)
  /// A small file read whole: `buffer[0..<count]` is its content; no digest means the
  /// archiver hashes it.
  case whole(
    item: Int, file: OpenedFile, buffer: UnsafeMutableRawBufferPointer, count: Int, digest: Digest?,
    stable: Bool)
  /// A large file's attempt begins: the header declares `file.status.size` bytes; with
  /// `archiverHashes`, the archiver hashes the chunks (and the `end` carries no digest);
  /// `mode` says how the archiver stores it.
  case begin(item: Int, file: OpenedFile, archiverHashes: Bool, mode: StreamMode)
  /// With `cut` ≥ 0 (files cut into chunks), the chunk being cut ends after `cut` bytes of it.
  case chunk(buffer: UnsafeMutableRawBufferPointer, count: Int, cut: Int32)
  /// `count` zero bytes of a hole, between chunks of a file with holes.
  case hole(count: Int64)
  /// The attempt ended: `short` bytes were missing (to pad); `final` is false when another
  /// attempt follows.
  case end(item: Int, digest: Digest?, short: Int64, stable: Bool, final: Bool)
  /// Read and hashed to the digest the previous snapshot recorded: nothing to store.
  case confirmed(item: Int, file: OpenedFile, digest: Digest)
  /// Marked "exclude from backup": not read.
  case excluded(item: Int, file: OpenedFile)
  /// Gone (or no longer a regular file) by the time it was opened.
  case vanished(item: Int, reason: String?)
  /// Could not be opened (permission denied): left out, and the snapshot is incomplete.
  case unreadable(item: Int, reason: String)
  /// Another path of a file (same inode) read earlier in this run as `first`.
  case hardlink(item: Int, first: Int)
}

/// How the archiver stores a file it streams (larger than `ContentReader.wholeReadLimit`).
enum StreamMode {
  /// A member of its own, as it is: below the chunking threshold, sparse, or going into a
  /// compressed archive (chunks need direct reads).
  case whole
  /// A member of its own, with its content-defined chunks indexed, so that a later edit of
  /// the file stores only the chunks it changed: a large file new at its path, or in a full
  /// backup (whose archive stands alone).
  case wholeIndexed
  /// Only the chunks the repository lacks, each a member `.appbox/chunks/<hex>`: a large file
  /// of an incremental backup that was a file at the same path before (edited in place, or
  /// saved anew), most of whose chunks the repository probably holds.
  case chunks
}

/// Reads the changed files of an archive plan and feeds the archiver.
final class ContentReader: @unchecked Sendable {
  static let maxAttempts = 4
  /// Files up to this size are read whole, and an incremental backup skips their content when
  /// the repository already holds it; larger files stream into the archive and are stored
  /// again whenever they are read, even with content the repository holds.
  static let wholeReadLimit = 256 << 10

  private let home: FileDescriptor
  private let plan: ArchivePlan
  private let queue: HandoffQueue<ContentMessage>
  /// Buffers for file data; the archiver gives them back. A file up to one buffer is read
  /// whole (so the archiver can skip content the repository holds), larger ones stream.
  private let pool: BufferPool
  /// Tests: called with the path and attempt number after each reading, before the fstat
  /// that decides whether the file held still.
  private let afterRead: (@Sendable ([UInt8], Int) -> Void)?
  /// Tests pin where hashing happens; nil chooses per file by whether the archiver keeps up.
  private let hashOnReader: Bool?
  /// The device's protection classes by key, to record each file's class.
  private let protectionClasses: [FscryptKeyIdentifier: ProtectionClass]
  /// Whether large files are chunked (the archive is uncompressed), and whether those that
  /// were files before may be stored as new chunks only (an incremental backup).
  private let chunking: (enabled: Bool, incremental: Bool)
  /// Bundle files (by path from the home) whose sealed digest the repository holds: recorded
  /// with that digest, not read.
  private let sealed: [[UInt8]: Digest]
  /// Hashes chunked files whole on a third thread: this one reads and cuts them, the archiver
  /// hashes their chunks. Made when the first one comes.
  private var streamHasher: StreamHasher?

  /// Wakes whoever holds pool buffers before this thread waits for one.
  private func nudgeConsumers() {
    queue.nudge()
    streamHasher?.nudge()
  }

  init(
    home: FileDescriptor, plan: ArchivePlan, queue: HandoffQueue<ContentMessage>, pool: BufferPool,
    afterRead: (@Sendable ([UInt8], Int) -> Void)? = nil, hashOnReader: Bool? = nil,
    protectionClasses: [FscryptKeyIdentifier: ProtectionClass] = [:],
    chunking: (enabled: Bool, incremental: Bool) = (false, false), sealed: [[UInt8]: Digest] = [:]
  ) {
    self.chunking = chunking
    self.sealed = sealed
    self.hashOnReader = hashOnReader
    self.protectionClasses = protectionClasses
    self.home = home
    self.plan = plan
    self.queue = queue
    self.pool = pool
    self.afterRead = afterRead
  }

  /// Runs on the reader thread; closes the queue when done or failed.
  func run() throws {
    defer {
      streamHasher?.close()
      queue.close()
    }
    let hasher = SHA256Hasher()
    var firstPathOfInode: [UInt64: Int] = [:]
    // The directory of the current files, open: each file is then one openat of a plain name
    // (items come grouped by directory), instead of a path walk from the home. A directory
    // whose parent is the one open is opened from it by name (depth-first order makes that
    // the common case), so a deep tree costs no long path walks.
    var open: (index: Int, descriptor: FileDescriptor, path: [UInt8])?
    defer { open?.descriptor.close() }
    for (index, item) in plan.items.enumerated() {
      guard case .file(let directory, let entry) = item else {
        guard queue.push(.passthrough(item: index)) else { return }
        continue
      }
      let scanned = plan.directories[directory].entries[entry]
      if scanned.status.linkCount > 1 {
        if let first = firstPathOfInode[scanned.status.inode] {
          guard queue.push(.hardlink(item: index, first: first)) else { return }
          continue
        }
        firstPathOfInode[scanned.status.inode] = index
      }
      let name = plan.directories[directory].name(of: scanned)
      if open?.index != directory {
        let parentPath = plan.directories.path(of: directory)
        let opened: FileDescriptor
        do {
          if let open, plan.directories[directory].parent == open.index {
            opened = try open.descriptor.open(
              rawName: plan.directories[directory].name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
          } else {
            opened = try home.openBeneath(
              parentPath, O_RDONLY | O_DIRECTORY, displayPath: display(parentPath))
          }
        } catch let error as SystemError
          where error.errno == .noEntry || error.errno == .tooManyLinks || error.errno == .notDirectory
        {
          guard queue.push(.vanished(item: index, reason: "its directory was moved during the backup")) else {
            return
          }
          continue
        } catch let error as SystemError
          where error.errno == .permissionDenied || error.errno == .notPermitted
        {
          let reason = "cannot open its directory (\(error.errno))"
          guard queue.push(.unreadable(item: index, reason: reason)) else { return }
          continue
        } catch let error as SystemError {
          throw backupFailure(error, path: display(parentPath))
        }
        open?.descriptor.close()
        open = (directory, opened, parentPath)
      }
      let path = joinPath(open!.path, name)
      guard try read(item: index, name: name, in: open!.descriptor, path: path, hasher: hasher) else {
        return
      }
    }
  }

  /// Whether to leave hashing to the archiver: it keeps up (most buffers are back).
  private var archiverHasRoom: Bool { hashOnReader.map { !$0 } ?? pool.isMostlyFree }

  /// Reads one file (all attempts). Returns false when the archiver cancelled.
  private func read(
    item: Int, name: [UInt8], in directory: FileDescriptor, path: [UInt8], hasher: SHA256Hasher
  )
    throws -> Bool
  {
    var attempt = 0
    while true {
      attempt += 1
      let isLast = attempt == ContentReader.maxAttempts
      let fd: FileDescriptor
      do {
        fd = try directory.open(rawName: name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK)
      } catch let error as SystemError where error.errno == .noEntry {
        return queue.push(.vanished(item: item, reason: nil))
      } catch let error as SystemError where error.errno == .tooManyLinks {
        return queue.push(
          .vanished(item: item, reason: "it was replaced by a symbolic link during the backup"))
      } catch let error as SystemError where error.errno == .permissionDenied || error.errno == .notPermitted
      {
        return queue.push(.unreadable(item: item, reason: "cannot open it (\(error.errno))"))
      } catch let error as SystemError where error.errno == .keyNotAvailable {
        // Encrypted under a key that is not there: a class key is checked before the backup
        // starts (a locked device refuses it), so this one is a key appbox never had.
        return queue.push(
          .unreadable(item: item, reason: "cannot open it (encrypted with a key that is not available)"))
      } catch let error as SystemError {
        throw backupFailure(error, path: display(path))
      }
      defer { fd.close() }
      let before: FileStatus
      let attributes: [ExtendedAttribute]
      do {
        before = try fd.status()
        guard before.type == .regular else {
          return queue.push(
            .vanished(item: item, reason: "it stopped being a regular file during the backup"))
        }
        attributes = try backupAttributes(of: fd, classes: protectionClasses)
      } catch let error as SystemError {
        throw backupFailure(error, path: display(path))
      }
      let file = OpenedFile(status: EntryStatus(before), attributes: attributes)
      if file.isExcluded { return queue.push(.excluded(item: item, file: file)) }
      if !sealed.isEmpty, let digest = sealed[path] {
        return queue.push(.confirmed(item: item, file: file, digest: digest))
      }
      if attempt == 1, before.size > Int64(pool.bufferSize), let probable = plan.probableDigests[item] {
        // Most likely unchanged (only its stat was too recent to trust): hash it first, and
        // write it only if the digest differs. Small files need no such care: the archiver
        // skips content the repository already holds.
        if try hashMatches(fd, probable, before: before, hasher: hasher, path: path) {
          return queue.push(.confirmed(item: item, file: file, digest: probable))
        }
        continue
      }

      if before.size <= Int64(pool.bufferSize) {
        // Read the declared size; growth shows in the fstat after (size, mtime and ctime move
        // with every write), which spares a read(2) that only confirms the end of the file.
        let buffer = pool.take(beforeWaiting: nudgeConsumers)
        var count = 0
        do {
          while count < Int(before.size) {
            let n = try fd.read(
              into: UnsafeMutableRawBufferPointer(rebasing: buffer[count..<Int(before.size)]))
            if n == 0 { break }
            count += n
          }
        } catch let error as SystemError {
          pool.give(buffer)
          throw backupFailure(error, path: display(path))
        }
        afterRead?(path, attempt)
        let after = try fd.status()
        let stable = count == Int(before.size) && Self.same(before, after)
        if !stable && !isLast {
          pool.give(buffer)
          continue
        }
        var digest: Digest?
        if !archiverHasRoom {  // the archiver is behind: hash here
          hasher.update(UnsafeRawBufferPointer(rebasing: buffer[0..<count]))
          digest = hasher.finalize()
        }
        var kept = file
        kept.status.size = Int64(count)
        let message = ContentMessage.whole(
          item: item, file: kept, buffer: buffer, count: count, digest: digest, stable: stable)
        if !queue.push(message, cost: count + 256) {
          pool.give(buffer)
          return false
        }
        return true
      }

      var opened = file
      if before.mayBeSparse { opened.dataRegions = (try? fd.dataRegions(size: before.size)) ?? nil }
      let mode = streamMode(item, size: before.size, sparse: opened.dataRegions != nil)
      // A chunked file is hashed twice, whole and chunk by chunk, and cut (the gear hash):
      // this thread reads and cuts, a third hashes it whole, the archiver hashes the chunks.
      let archiverHashes = mode == .whole && archiverHasRoom
      var chunker = mode == .whole ? nil : Chunker()
      let wholeHasher = mode == .whole ? nil : startedStreamHasher()
      guard queue.push(.begin(item: item, file: opened, archiverHashes: archiverHashes, mode: mode)) else {
        return false
      }
      var remaining = before.size
      var position: Int64 = 0
      var endedEarly = false
      runs: for run in opened.dataRegions ?? [0..<before.size] {
        if run.lowerBound > position {
          let gap = run.lowerBound - position
          if !archiverHashes { Self.hashZeros(gap, into: hasher) }
          guard queue.push(.hole(count: gap)) else { return false }
          position = run.lowerBound
          remaining -= gap
        }
        while position < run.upperBound {
          let size = Int(min(Int64(pool.bufferSize), run.upperBound - position))
          let buffer = pool.take(beforeWaiting: nudgeConsumers)
          let n: Int
          do {
            // Never more than the header declared: growth shows in the fstat after.
            n = try fd.read(into: UnsafeMutableRawBufferPointer(rebasing: buffer[0..<size]), at: position)
          } catch let error as SystemError {
            pool.give(buffer)
            throw backupFailure(error, path: display(path))
          }
          if n == 0 {
            pool.give(buffer)
            endedEarly = true
            break runs
          }
          if let wholeHasher {
            wholeHasher.feed(buffer, count: n)
          } else if !archiverHashes {
            hasher.update(UnsafeRawBufferPointer(rebasing: buffer[0..<n]))
          }
          remaining -= Int64(n)
          position += Int64(n)
          var cut: Int32 = -1
          if chunker != nil {
            cut = Self.cut(UnsafeRawBufferPointer(rebasing: buffer[0..<n]), with: &chunker!)
          }
          guard queue.push(.chunk(buffer: buffer, count: n, cut: cut), cost: n) else {
            pool.give(buffer)
            return false
          }
        }
      }
      if !endedEarly && remaining > 0 && opened.dataRegions != nil {
        // The hole at the end of the file.
        if !archiverHashes { Self.hashZeros(remaining, into: hasher) }
        guard queue.push(.hole(count: remaining)) else { return false }
        remaining = 0
      }
      let wasShort = remaining > 0
      if var cutting = chunker, remaining > 0 {
        // A chunked file that ended early gets its missing bytes as zeros here, cut like the
        // rest (the archiver pads a whole member; chunks need the cuts).
        while remaining > 0 {
          let count = Int(min(Int64(pool.bufferSize), remaining))
          let buffer = pool.take(beforeWaiting: nudgeConsumers)
          let zeros = UnsafeMutableRawBufferPointer(rebasing: buffer[0..<count])
          zeros.initializeMemory(as: UInt8.self, repeating: 0)
          wholeHasher?.feed(buffer, count: count)
          remaining -= Int64(count)
          let cut = Self.cut(UnsafeRawBufferPointer(zeros), with: &cutting)
          guard queue.push(.chunk(buffer: buffer, count: count, cut: cut), cost: count) else {
            pool.give(buffer)
            return false
          }
        }
      }
      if remaining > 0 && !archiverHashes { Self.hashZeros(remaining, into: hasher) }
      afterRead?(path, attempt)
      let after = try fd.status()
      let stable = !wasShort && Self.same(before, after)
      guard
        queue.push(
          .end(
            item: item, digest: wholeHasher?.finish() ?? (archiverHashes ? nil : hasher.finalize()),
            short: remaining, stable: stable,
            final: stable || isLast))
      else { return false }
      if stable || isLast { return true }
    }
  }

  private func startedStreamHasher() -> StreamHasher {
    if let streamHasher { return streamHasher }
    let started = StreamHasher(pool: pool)
    streamHasher = started
    return started
  }

  /// Where the chunk being cut ends in `data` (the next bytes of the file): the index after its
  /// last byte, or -1 when it goes on past `data`. A buffer is never longer than the shortest
  /// chunk, so it holds at most one cut.
  static func cut(_ data: UnsafeRawBufferPointer, with chunker: inout Chunker) -> Int32 {
    let (count, boundary) = chunker.consume(data)
    guard boundary else { return -1 }
    if count < data.count {
      let (_, again) = chunker.consume(UnsafeRawBufferPointer(rebasing: data[count...]))
      precondition(!again, "a read buffer is longer than the shortest chunk")
    }
    return Int32(count)
  }

  /// How the archiver will store item `item`, a file of `size` bytes being streamed.
  private func streamMode(_ item: Int, size: Int64, sparse: Bool) -> StreamMode {
    guard chunking.enabled, !sparse, size >= ChunkingParameters.threshold else { return .whole }
    guard chunking.incremental, case .file(let directory, let entry) = plan.items[item],
      plan.directories[directory].entries[entry].previous?.type == .file
    else { return .wholeIndexed }
    return .chunks
  }

  /// Reads the whole file and tells whether it hashes to `digest` and held still meanwhile.
  private func hashMatches(
    _ fd: FileDescriptor, _ digest: Digest, before: FileStatus, hasher: SHA256Hasher, path: [UInt8]
  ) throws -> Bool {
    let buffer = pool.take(beforeWaiting: nudgeConsumers)
    defer { pool.give(buffer) }
    var total: Int64 = 0
    do {
      while true {
        let n = try fd.read(into: buffer)
        if n == 0 { break }
        hasher.update(UnsafeRawBufferPointer(rebasing: buffer[0..<n]))
        total += Int64(n)
      }
      let after = try fd.status()
      return hasher.finalize() == digest && total == before.size && Self.same(before, after)
    } catch let error as SystemError {
      _ = hasher.finalize()
      throw backupFailure(error, path: display(path))
    }
  }

  /// Whether two stats of one open file say it did not change in between.
  static func same(_ a: FileStatus, _ b: FileStatus) -> Bool {
    a.size == b.size && a.modificationTime == b.modificationTime && a.changeTime == b.changeTime
      && a.inode == b.inode
  }

  static func hashZeros(_ count: Int64, into hasher: SHA256Hasher) {
    let zeros = [UInt8](repeating: 0, count: 64 * 1024)
    var left = count
    zeros.withUnsafeBytes { buffer in
      while left > 0 {
        let n = Int(min(left, Int64(buffer.count)))
        hasher.update(UnsafeRawBufferPointer(rebasing: buffer[0..<n]))
        left -= Int64(n)
      }
    }
  }
}
