// Stage 2 of a backup: walk the scan in depth-first order, and read and hash changed files, on
// a thread of its own.
//
// Algorithm: the reader takes the scanned directories from the scanner one at a time, in
// depth-first order, and tells the archiver, in that order, where each directory begins, each
// of its items (the symlinks and the regular files change detection could not vouch for) and,
// once its whole subtree has gone by, where it ends (so its tree can be built and the
// directory released). It opens each changed regular file by name through the descriptor the
// scan listed its directory with (no path walked, no symlink followed), takes fstat, reads its
// `user.*` attributes, and either stops there (the file is marked "exclude from backup"), reads
// it whole (small files: the archiver can then skip content the repository already holds), or
// streams it in chunks (large files, ContentReader+Stream.swift). SHA-256 runs on whichever
// core has room: on this thread while the archiver keeps up (its buffers come back), else the
// digest is left to the archiver (the message carries none), which hashes what it writes.
// Symlink items pass straight through so the archiver sees every item in order.
//
// A file changed while read (size, mtime, ctime or inode differ between the fstat before and
// after, or it ended early) is read again, up to `maxAttempts` times; a streamed attempt that
// turns out unstable has already gone to the archive, so the archiver appends the next attempt
// as a new member of the same path (later members win in tar). The last attempt is kept
// either way and flagged unstable, for a warning. A file that ended early is padded with
// zeros to the size its header declared; the digest covers those zeros, so the digest always
// describes the member's bytes. Buffers are handed to the archiver, which frees them.
//
// A large file with holes is read by its data regions only and gets the sparse content
// identity (ContentIdentity.swift): see ContentReader+Stream.swift.

import AppboxContainer
import AppboxCore
import AppboxPipeline
import AppboxCrypto
import AppboxRepository
import Glibc

/// What the reader learned about a file when it opened it.
struct OpenedFile {
  var status: EntryStatus
  var attributes: [ExtendedAttribute]
  /// For a file with holes, its data regions (the rest reads as zeros); nil when dense.
  var dataRegions: [Range<Int64>]? = nil
  /// Its digest is the sparse content identity (a file with holes, or one confirmed against a
  /// previous entry of that kind).
  var hasSparseIdentity = false
  var isExcluded: Bool { ScanRules.marksExcluded(attributes) }
  /// Bytes of data the archive stores for it (holes excluded).
  var dataBytes: Int64 { dataRegions?.reduce(0) { $0 + Int64($1.count) } ?? status.size }
}

/// A message from the reader to the archiver, in item order.
enum ContentMessage {
  /// A directory begins: its member (when the archive needs one), then its items follow.
  case directory(ScannedDirectory)
  /// A directory's items and its whole subtree have gone by: its tree can be built.
  case endDirectory(ScannedDirectory)
  /// A changed symlink: nothing to read.
  case symlink(ItemReference)
  /// What the scan has found so far: entries, and files and bytes to read.
  case totals(entries: Int, files: Int, bytes: Int64)
  /// A small file read whole: `buffer[0..<count]` is its content; no digest means the
  /// archiver hashes it.
  case whole(
    item: ItemReference, file: OpenedFile, buffer: PooledBuffer, count: Int, digest: Digest?,
    stable: Bool)
  /// A large file's attempt begins: the header declares `file.status.size` bytes; with
  /// `archiverHashes`, the archiver hashes the chunks (and the `end` carries no digest);
  /// `mode` says how the archiver stores it.
  case begin(item: ItemReference, file: OpenedFile, archiverHashes: Bool, mode: StreamMode)
  /// With `cut` ≥ 0 (files cut into chunks), the chunk being cut ends after `cut` bytes of it.
  case chunk(buffer: PooledBuffer, count: Int, cut: Int32)
  /// `count` zero bytes of a hole, between chunks of a file with holes.
  case hole(count: Int64)
  /// The attempt ended: `short` bytes were missing (to pad); `final` is false when another
  /// attempt follows.
  case end(item: ItemReference, digest: Digest?, short: Int64, stable: Bool, final: Bool)
  /// Read and hashed to the digest the previous snapshot recorded: nothing to store.
  case confirmed(item: ItemReference, file: OpenedFile, digest: Digest)
  /// Marked "exclude from backup": not read.
  case excluded(item: ItemReference, file: OpenedFile)
  /// Gone (or no longer a regular file) by the time it was opened.
  case vanished(item: ItemReference, reason: String?)
  /// Could not be opened (permission denied): left out, and the snapshot is incomplete.
  case unreadable(item: ItemReference, reason: String)
  /// Another path of a file (inode `inode`) read earlier in this run.
  case hardlink(item: ItemReference, inode: UInt64)
}

/// How the archiver stores a file it streams (larger than `ContentReader.wholeReadLimit`).
enum StreamMode {
  /// A member of its own, as it is: a file new at its path or in a full backup (whose archive
  /// stands alone), below the chunking threshold, sparse, or going into a compressed archive
  /// (chunks need direct reads). Hashed once, whole: its chunks are not indexed.
  case whole
  /// Only the chunks the repository lacks, each a member `.appbox/chunks/<hex>`: a large file
  /// of an incremental backup that was a file at the same path before, so seen changing
  /// (edited in place, or saved anew). Chunking is lazy: its first change stores every chunk
  /// (its earlier content was stored whole, unindexed), each later one about the chunks it
  /// touched (docs/performance.md).
  case chunks
  /// A member of its own, as `.whole`, with its chunks indexed at their place in the member's
  /// data: a large database (by its name or its header: `DatabaseFiles`) not seen before, in a
  /// full backup or new at its path. Databases are what apps edit in place, so their first
  /// edit stores only the chunks it touched, at the cost of cutting and hashing their chunks
  /// once more when they are first read.
  case indexed
}

/// Reads the changed files of an archive plan and feeds the archiver.
final class ContentReader {
  static let maxAttempts = 4
  /// Files up to this size are read whole, and an incremental backup skips their content when
  /// the repository already holds it; larger files stream into the archive and are stored
  /// again whenever they are read, even with content the repository holds.
  static let wholeReadLimit = 256 << 10

  private let scanner: Scanner
  let queue: HandoffQueue<ContentMessage>
  /// Buffers for file data; the archiver gives them back. A file up to one buffer is read
  /// whole (so the archiver can skip content the repository holds), larger ones stream.
  let pool: BufferPool
  /// Tests: called with the path and attempt number after each reading, before the fstat
  /// that decides whether the file held still.
  let afterRead: (@Sendable ([UInt8], Int) -> Void)?
  /// Tests pin where hashing happens; nil chooses per file by whether the archiver keeps up.
  private let hashOnReader: Bool?
  /// The device's protection classes by key, to record each file's class.
  private let protectionClasses: [FscryptKeyIdentifier: ProtectionClass]
  /// Whether large files may be chunked (the archive is uncompressed), and whether this is an
  /// incremental backup (only those chunk: the files that were files at their path before).
  private let chunking: (enabled: Bool, incremental: Bool)
  /// Bundle files (by path from the home) whose sealed digest the repository holds: recorded
  /// with that digest, not read.
  private let sealed: [[UInt8]: Digest]
  /// Tests: files with holes get the plain identity (what an older appbox recorded).
  let plainSparseIdentity: Bool
  /// Hashes chunked files whole on a third thread: this one reads and cuts them, the archiver
  /// hashes their chunks. Made when the first one comes.
  var streamHasher: StreamHasher?

  /// Wakes whoever holds pool buffers before this thread waits for one.
  func nudgeConsumers() {
    queue.nudge()
    streamHasher?.nudge()
  }

  init(
    scanner: Scanner, queue: HandoffQueue<ContentMessage>, pool: BufferPool,
    afterRead: (@Sendable ([UInt8], Int) -> Void)? = nil, hashOnReader: Bool? = nil,
    protectionClasses: [FscryptKeyIdentifier: ProtectionClass] = [:],
    chunking: (enabled: Bool, incremental: Bool) = (false, false), sealed: [[UInt8]: Digest] = [:],
    plainSparseIdentity: Bool = false
  ) {
    self.plainSparseIdentity = plainSparseIdentity
    self.chunking = chunking
    self.sealed = sealed
    self.hashOnReader = hashOnReader
    self.protectionClasses = protectionClasses
    self.scanner = scanner
    self.queue = queue
    self.pool = pool
    self.afterRead = afterRead
  }

  /// Runs on the reader thread; closes the queue when done or failed, and stops the scan.
  func run() throws {
    defer {
      streamHasher?.close()
      queue.close()
      scanner.finish()
    }
    let hasher = SHA256Hasher()
    // Inodes of files with several links already read: later paths become hard links.
    var linked: Set<UInt64> = []
    // The directories whose subtrees are not done yet, from the home down.
    var open: [ScannedDirectory] = []
    var path = DirectoryPath()
    var totals = (entries: 0, files: 0, bytes: Int64(0), directories: 0)
    while let directory = try scanner.next() {
      while let top = open.last, top.depth >= directory.depth {
        open.removeLast()
        guard queue.push(.endDirectory(top)) else { return }
      }
      open.append(directory)
      path.enter(directory)
      guard queue.push(.directory(directory)) else { return }
      totals.entries += directory.entries.count
      totals.directories += 1
      for position in directory.entries.indices {
        let entry = directory.entries[position]
        guard !entry.isReused else { continue }
        let item = ItemReference(directory: directory, position: Int32(position))
        switch entry.type {
        case .symlink:
          guard queue.push(.symlink(item)) else { return }
        case .file:
          totals.files += 1
          totals.bytes += entry.status.size
          if entry.status.linkCount > 1 && !linked.insert(entry.status.inode).inserted {
            guard queue.push(.hardlink(item: item, inode: entry.status.inode)) else { return }
            continue
          }
          guard let handle = directory.handle else {
            throw BackupError(.corruptCatalog, "The scan of '\(display(path.bytes))' kept no descriptor")
          }
          let name = item.name
          guard
            try read(
              item: item, name: name, in: handle.descriptor, path: path.path(of: name),
              probable: probableDigest(of: entry, in: directory), hasher: hasher)
          else { return }
        default:
          break
        }
      }
      // Done with its files: its descriptor stays open only for its subdirectories' scans.
      directory.handle = nil
      if totals.directories % 256 == 0 {
        guard queue.push(.totals(entries: totals.entries, files: totals.files, bytes: totals.bytes)) else {
          return
        }
      }
    }
    while let top = open.popLast() {
      guard queue.push(.endDirectory(top)) else { return }
    }
    _ = queue.push(.totals(entries: totals.entries, files: totals.files, bytes: totals.bytes))
  }

  /// For a file whose stat matched the previous snapshot but was too recent to trust: the
  /// content digest recorded then.
  private func probableDigest(of entry: ScannedEntry, in directory: ScannedDirectory) -> Digest? {
    entry.isRacy ? directory.previousContent(of: entry)?.digest : nil
  }

  /// Whether to leave hashing to the archiver: it keeps up (most buffers are back).
  var archiverHasRoom: Bool { hashOnReader.map { !$0 } ?? pool.isMostlyFree }

  /// Reads one file (all attempts). Returns false when the archiver cancelled.
  private func read(
    item: ItemReference, name: [UInt8], in directory: FileDescriptor, path: [UInt8], probable: Digest?,
    hasher: SHA256Hasher
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
      if attempt == 1, before.size > Int64(pool.bufferSize), let probable {
        // Most likely unchanged (only its stat was too recent to trust): hash it first, and
        // write it only if the digest differs. Small files need no such care: the archiver
        // skips content the repository already holds.
        let sparse = item.entry.previous?.hasSparseIdentity ?? false
        if try hashMatches(fd, probable, sparse: sparse, before: before, hasher: hasher, path: path) {
          var confirmed = file
          confirmed.hasSparseIdentity = sparse
          return queue.push(.confirmed(item: item, file: confirmed, digest: probable))
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

      switch try stream(
        item, fd: fd, file: file, before: before, path: path, attempt: attempt, hasher: hasher)
      {
      case .cancelled: return false
      case .done: return true
      case .again: continue
      }
    }
  }

  func startedStreamHasher() -> StreamHasher {
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

  /// How the archiver will store item `item` (at `path`, open as `fd`), a file of `size` bytes
  /// being streamed: as chunks only once it has been seen changing (it was a file at this path
  /// in the parent snapshot and is read again), so a file that never changes is hashed once,
  /// whole; a database is indexed the first time (`.indexed`).
  func streamMode(_ item: ItemReference, path: [UInt8], fd: FileDescriptor, size: Int64, sparse: Bool)
    -> StreamMode
  {
    guard chunking.enabled, !sparse, size >= ChunkingParameters.threshold else { return .whole }
    if chunking.incremental, item.entry.previous?.type == .file { return .chunks }
    return DatabaseFiles.isDatabase(path: path, fd: fd) ? .indexed : .whole
  }

  /// Whether two stats of one open file say it did not change in between.
  static func same(_ a: FileStatus, _ b: FileStatus) -> Bool {
    a.size == b.size && a.modificationTime == b.modificationTime && a.changeTime == b.changeTime
      && a.inode == b.inode
  }
}
