// Restore, the data path: archive members → files, with every byte hashed on another thread.
//
// For one archive, the members holding needed content are visited in offset order with one
// sequential reader (an uncompressed archive is entered directly at the first needed offset;
// members in between are skipped by seeking). Each member must be a regular file with the
// path and size the catalog recorded. Its data is written to every planned file with that
// content, each run at its offset, so the holes of a sparse member stay holes (the file gets
// its full length at the end); then each file gets its mode, attributes and times. Chunks, with
// their offsets, go to the hashing thread, which computes each member's content identity (the
// sparse kind, when the tree recorded that one, hashes the data only: a member's holes cost
// nothing; the plain kind hashes them as zeros) and compares it with the tree's digest;
// `finish()` reports any mismatch. A restore in batches (RestorePlanner) gives the extractor
// one batch after another; the reader of an archive is kept for the next batch when what that
// batch needs lies further on (a batch's members come in the order a backup wrote them, so a
// compressed archive is usually read once, not once per batch), and started again from the
// beginning otherwise. Buffers are freed by
// whoever holds them last (the hasher, or `cancel` on error). Any warning libarchive gives
// about an archive appbox wrote means damage, and fails the restore.

import AppboxArchive
import AppboxCore
import AppboxPipeline
import AppboxCrypto
import AppboxRepository
import Glibc
import Synchronization

final class ContentExtractor {
  private enum HashMessage {
    /// A content of `size` bytes begins; `sparse`: its identity is the sparse kind.
    case start(size: Int64, sparse: Bool)
    /// Its bytes `buffer[0..<count]`, at `offset`.
    case chunk(PooledBuffer, Int, offset: Int64)
    case end(expected: Digest, path: [UInt8])
  }

  /// The batch being restored.
  private var plan: RestorePlan
  private let writer: TreeWriter
  private let observer: EngineObserver
  private let queue = HandoffQueue<HashMessage>(capacity: 32 << 20)
  /// Data buffers, handed to the hasher and back: no allocation per chunk.
  private let pool = BufferPool(count: 32, bufferSize: 256 << 10)
  private let hasherThread: WorkerThread<Void>
  private let mismatches = MismatchList()
  /// Indexes into `plan.files` whose content has been written.
  private(set) var written: [Bool]
  /// Readers kept for a later batch, by archive location (at most `keptReaders`, the most
  /// recently used last), each with the offset of the last member it gave.
  private var readers: [(location: String, reader: ArchiveReader, last: Int64)] = []
  private static let keptReaders = 4
  private var filesDone = 0
  private var bytesDone: Int64 = 0

  init(plan: RestorePlan, writer: TreeWriter, observer: EngineObserver) {
    self.plan = plan
    self.writer = writer
    self.observer = observer
    written = [Bool](repeating: false, count: plan.files.count)
    let queue = self.queue
    let mismatches = self.mismatches
    let pool = self.pool
    hasherThread = WorkerThread(name: "appbox-verify-content") {
      let hasher = SHA256Hasher()
      var content: ContentHasher?
      while let message = queue.pop() {
        switch message {
        case .start(let size, let sparse):
          content = ContentHasher(sparse: sparse, size: size, hasher: hasher)
        case .chunk(let buffer, let count, let offset):
          content?.update(UnsafeRawBufferPointer(rebasing: buffer[0..<count]), at: offset)
          pool.give(buffer)
        case .end(let expected, let path):
          if content?.finalize() != expected { mismatches.add(path) }
          content = nil
        }
      }
    }
  }

  deinit {
    let pool = self.pool
    queue.cancel { message in
      if case .chunk(let buffer, _, _) = message { pool.give(buffer) }
    }
    try? hasherThread.join()
  }

  /// Starts the next batch of a restore (the files of `plan` have no content yet).
  func begin(_ plan: RestorePlan) {
    self.plan = plan
    written = [Bool](repeating: false, count: plan.files.count)
  }

  /// A reader of `source` that has not passed `offset`: the one a previous batch left there,
  /// or a new one.
  private func reader(of source: ArchiveSource, before offset: Int64) throws -> ArchiveReader {
    if let kept = readers.firstIndex(where: { $0.location == source.location }) {
      let (_, reader, last) = readers.remove(at: kept)
      if last < offset { return reader }
    }
    return try source.reader(startingAt: offset)
  }

  /// Writes the content of `locations` (all in archive `source`) to the planned files.
  func extract(from source: ArchiveSource, locations: [BlobLocation]) throws {
    let sorted = locations.sorted { $0.offset < $1.offset }
    guard let first = sorted.first, let last = sorted.last else { return }
    let path = source.location
    let reader = try reader(of: source, before: first.offset)
    func damaged(_ what: String) -> BackupError {
      BackupError(.corruptArchive, "Archive '\(path)' is damaged: \(what)")
    }
    var index = 0
    do {
      while index < sorted.count, let entry = try reader.nextEntry() {
        guard let offset = reader.headerOffset, offset >= sorted[index].offset else { continue }
        let location = sorted[index]
        guard offset == location.offset else {
          throw damaged("no member starts at offset \(location.offset)")
        }
        index += 1
        guard entry.type == .regular, entry.path == location.path, entry.size == location.size else {
          throw damaged(
            "the member at offset \(offset) is not '\(display(location.path))' of \(location.size) bytes")
        }
        try copy(from: reader, location: location)
      }
    } catch let error as ArchiveError {
      throw damaged(error.message)
    }
    if index < sorted.count { throw damaged("it ends before the member '\(display(sorted[index].path))'") }
    if let warning = reader.warnings.first { throw damaged("libarchive warned: \(warning)") }
    readers.append((path, reader, last.offset))
    if readers.count > Self.keptReaders { readers.removeFirst() }
  }

  private func copy(from reader: ArchiveReader, location: BlobLocation) throws {
    let targets = plan.files(withContent: location.digest)
    var descriptors: [FileDescriptor] = []
    defer { descriptors.forEach { $0.close() } }
    for target in targets { descriptors.append(try writer.createFile(plan.files[target])) }
    var position: Int64 = 0
    queue.push(.start(size: location.size, sparse: plan.hasSparseIdentity(location.digest)))
    while true {
      let buffer = pool.take(beforeWaiting: queue.nudge)
      let chunk: ArchiveChunk?
      do {
        chunk = try reader.readChunk(into: buffer.bytes)
      } catch {
        pool.give(buffer)
        throw error
      }
      guard let chunk else {
        pool.give(buffer)
        break
      }
      let data = UnsafeRawBufferPointer(rebasing: buffer[0..<chunk.count])
      do {
        for descriptor in descriptors { try descriptor.writeAll(data, at: chunk.offset) }
      } catch {
        pool.give(buffer)
        throw error
      }
      position = chunk.offset + Int64(chunk.count)
      queue.push(.chunk(buffer, chunk.count, offset: chunk.offset), cost: chunk.count)
    }
    let total = reader.deliveredLength
    // What lies past the last data (a trailing hole) is zeros: the hasher counts them in.
    queue.push(.end(expected: location.digest, path: location.path))
    guard total == location.size else {
      throw BackupError(.corruptArchive, "The member '\(display(location.path))' is shorter than recorded")
    }
    if total > position {
      for descriptor in descriptors { try descriptor.truncate(to: total) }
    }
    for (descriptor, target) in zip(descriptors, targets) {
      try TreeWriter.applyMetadata(plan.files[target], to: descriptor)
      // The staged tree is made durable with one syncfs before the swap; starting the
      // writeback of larger files now lets the disk work while extraction goes on.
      if total >= 64 << 10 { descriptor.startWriteback(offset: 0, length: total) }
      written[target] = true
    }
    filesDone += targets.count
    bytesDone += total * Int64(targets.count)
    observer.engine(.progress(files: filesDone, bytes: bytesDone))
  }

  /// Waits for the hashing thread; throws `.corruptArchive` when any content did not match.
  func finish() throws {
    readers.removeAll()
    queue.close()
    try hasherThread.join()
    if let path = mismatches.first {
      throw BackupError(
        .corruptArchive,
        "The content of '\(display(path))' does not match its recorded SHA-256: an archive is damaged")
    }
  }
}

/// Paths whose content did not match, filled by the hashing thread.
private final class MismatchList: Sendable {
  private let paths = Mutex<[[UInt8]]>([])
  func add(_ path: [UInt8]) { paths.withLock { $0.append(path) } }
  var first: [UInt8]? { paths.withLock { $0.first } }
}
