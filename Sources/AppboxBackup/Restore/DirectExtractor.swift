// Restore, the fast data path: content read in place from uncompressed and framed archives at
// the data offsets the catalog recorded, by two workers, each creating, writing, hashing and
// finishing its own files. A framed archive's ranges are read through its frame index, each
// worker decoding the frames its units cover with its own decoder (which keeps the frame it
// decoded last).
//
// Why: tar -x is one thread doing open/write/chmod/utimens/close per file, nearly all of it
// kernel time. A restore must also hash every byte (SHA-256, ~1.4 GB/s on one core) and used
// to parse every member header through libarchive and copy every byte twice; on two cores,
// the kernel work of creating files and the hashing now split evenly instead of queueing on
// one thread.
//
// Algorithm: the work is cut into units in archive order: runs of consecutive small members
// (at most `batchBytes` from the first byte of the first to the last byte of the last,
// headers in between included) read with one pread each (in a framed archive a unit also takes
// every member that starts in a frame it already covers, so no frame is decoded by both
// workers), a large member alone (read in pieces), and each file stored as chunks (its chunks
// read one by one, in file order). A
// worker takes the next unit, reads it into its own buffer, and for each content creates the
// first planned file with it (O_CREAT | O_EXCL | O_NOFOLLOW beneath its directory, through the
// worker's own descriptors), writes it, hashes it, and only when the digest matches the one
// the tree recorded applies attributes, owner, mode and times; every other file with the same
// content is then copied from it, holes kept. Zero chunks of a chunked file are not written
// (they stay holes; the file gets its length at the end).
//
// Invariants: every byte written is hashed by the same worker before its file is finished (a
// copy is made only from a file whose content was verified); a
// mismatch, a short read or any failure stops both workers and is thrown (the caller discards
// the staging directory); each file is created by exactly one unit; nothing is written outside
// the target (directories are opened beneath it, never following a symlink).

import AppboxArchive
import AppboxContainer
import AppboxCore
import AppboxPipeline
import AppboxCrypto
import AppboxRepository
import Glibc
import Synchronization

/// What the fast path restores: contents whose bytes sit at known offsets of uncompressed or
/// framed archives.
struct DirectWork {
  /// An archive read in place: its path, and its frame index when framed.
  struct Archive {
    var path: String
    var record: ArchiveRecord
    var frames: FrameIndex?
  }
  /// A content stored whole: `size` bytes at `dataOffset` of archive `archive`.
  struct Blob {
    var digest: Digest
    var archive: Int32
    var dataOffset: Int64
    var size: Int64
  }
  /// A content stored as chunks, each at its location.
  struct Chunked {
    var digest: Digest
    var size: Int64
    var chunks: [(archive: Int32, dataOffset: Int64, size: Int64)]
  }

  /// The archives; `Blob.archive` and chunks index into it.
  var archives: [Archive] = []
  var blobs: [Blob] = []
  var chunked: [Chunked] = []
  var isEmpty: Bool { blobs.isEmpty && chunked.isEmpty }
}

final class DirectExtractor: Sendable {
  /// A run of members read with one pread is at most this long.
  static let batchBytes = 1 << 20

  private enum Unit {
    case blobs(Range<Int>)
    case chunked(Int)
  }

  private let plan: RestorePlan
  private let work: DirectWork
  private let target: FileDescriptor
  private let owner: UInt32?
  /// What the workers share is set before they start: the units in archive order, and the
  /// archives open. The protected-file writer is no part of it: it is not shared between
  /// threads, so only the calling thread gets it (and works alone when there is one).
  private let units: [Unit]
  private let archives: [ArchiveRangeReader]
  private let nextUnit = Atomic<Int>(0)
  private let stopped = Atomic<Bool>(false)
  private let firstError = Mutex<(any Error)?>(nil)
  /// By index into `plan.files`: written here. Each file is set by exactly one worker.
  let written: WrittenFiles
  private let filesDone = Atomic<Int>(0)
  private let bytesDone = Atomic<Int>(0)

  /// Restores `work` into `target`; files below Documents, Library and tmp go to `owner`.
  /// Opens the archives of `work`.
  init(plan: RestorePlan, work: DirectWork, target: FileDescriptor, owner: UInt32?) throws {
    self.plan = plan
    self.work = work
    self.target = target
    self.owner = owner
    written = WrittenFiles(count: plan.files.count)
    archives =
      work.isEmpty
      ? []
      : try work.archives.map { try ArchiveRangeReader(path: $0.path, record: $0.record, frames: $0.frames) }
    units = work.isEmpty ? [] : Self.makeUnits(work)
  }

  /// Runs the workers (this thread is one of them); `progress` is called on this thread.
  /// Protected files are created one at a time (the writer is not shared between threads):
  /// with `protectedFiles`, this thread works alone.
  func run(workers requested: Int, protectedFiles: ProtectedFileWriter?, progress: (Int, Int64) -> Void)
    throws
  {
    if work.isEmpty { return }
    let count = protectedFiles == nil ? max(1, requested) : 1
    let helpers = (1..<count).map { number in
      WorkerThread(name: "appbox-restore-\(number)") { [self] in try work(protectedFiles: nil) { _, _ in } }
    }
    var mine: Error?
    do { try work(protectedFiles: protectedFiles, report: progress) } catch { mine = error }
    if mine != nil { stopped.store(true, ordering: .relaxed) }
    for helper in helpers { try? helper.join() }
    if let error = firstError.withLock({ $0 }) ?? mine { throw error }
    progress(filesDone.load(ordering: .relaxed), Int64(bytesDone.load(ordering: .relaxed)))
  }

  /// The bytes a worker's buffer holds: the longest unit, or a chunk.
  static let bufferBytes = max(4 * batchBytes, ChunkingParameters.largestStored)

  private static func makeUnits(_ work: DirectWork) -> [Unit] {
    var units: [Unit] = []
    var start = 0
    while start < work.blobs.count {
      var end = start + 1
      let first = work.blobs[start]
      let frames = work.archives[Int(first.archive)].frames
      if first.size < Int64(Self.batchBytes) {
        while end < work.blobs.count {
          let next = work.blobs[end]
          let previous = work.blobs[end - 1]
          guard next.archive == first.archive, next.dataOffset >= previous.dataOffset else { break }
          let span = next.dataOffset + next.size - first.dataOffset
          // A member starting in a frame this unit decodes anyway comes along.
          if let frames, span <= Int64(Self.bufferBytes),
            let covered = frames.frame(containing: previous.dataOffset + max(previous.size, 1) - 1),
            next.dataOffset < frames.frames[covered].uncompressedEnd
          {
            end += 1
            continue
          }
          guard span <= Int64(Self.batchBytes) else { break }
          end += 1
        }
      }
      units.append(.blobs(start..<end))
      start = end
    }
    units += work.chunked.indices.map { .chunked($0) }
    return units
  }

  private func fail(_ error: Error) {
    firstError.withLock { if $0 == nil { $0 = error } }
    stopped.store(true, ordering: .relaxed)
  }

  private func work(protectedFiles: ProtectedFileWriter?, report: (Int, Int64) -> Void) throws {
    let worker = Worker(extractor: self, protectedFiles: protectedFiles)
    defer { worker.close() }
    do {
      var sinceReport = 0
      while !stopped.load(ordering: .relaxed) {
        let index = nextUnit.wrappingAdd(1, ordering: .relaxed).oldValue
        guard index < units.count else { break }
        switch units[index] {
        case .blobs(let range): try worker.restore(range)
        case .chunked(let index): try worker.restore(work.chunked[index])
        }
        sinceReport += 1
        if sinceReport >= 64 {
          sinceReport = 0
          report(filesDone.load(ordering: .relaxed), Int64(bytesDone.load(ordering: .relaxed)))
        }
      }
    } catch {
      fail(error)
      throw error
    }
  }

  /// One worker's buffer, hasher and directory descriptors.
  private final class Worker {
    let extractor: DirectExtractor
    let protectedFiles: ProtectedFileWriter?
    let buffer = UnsafeMutableRawBufferPointer.allocate(
      byteCount: DirectExtractor.bufferBytes, alignment: 4096)
    let hasher = SHA256Hasher()
    /// Decodes the frames of framed archives (this worker's own; it keeps the last one).
    let decoder = FrameDecoder()
    /// The worker's own way to its files' directories: from one to the next by name.
    let cursor: PlanCursor

    init(extractor: DirectExtractor, protectedFiles: ProtectedFileWriter?) {
      self.extractor = extractor
      self.protectedFiles = protectedFiles
      cursor = PlanCursor(target: extractor.target)
    }

    func close() {
      cursor.closeAll()
      buffer.deallocate()
    }

    var plan: RestorePlan { extractor.plan }

    func directory(_ index: Int32) throws -> FileDescriptor { try cursor.directory(index, in: plan) }

    /// Creates file `index` of the plan, empty, open for writing.
    func create(_ index: Int) throws -> FileDescriptor {
      let item = plan.files[index]
      let parent = try directory(item.parent)
      if item.protectionClass != .none, let protected = protectedFiles {
        return try protected.createFile(
          rawName: plan.name(of: item), in: parent, class: item.protectionClass, mode: 0o600)
      }
      return try parent.open(
        rawName: plan.name(of: item), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, mode: 0o600)
    }

    /// Gives file `index` (open as `fd`) its owner, attributes, mode and times.
    func finishFile(_ index: Int, _ fd: FileDescriptor, size: Int64) throws {
      let item = plan.files[index]
      if let owner = extractor.owner, item.isData { try fd.setOwner(owner, owner) }
      try TreeWriter.applyMetadata(item, to: fd)
      if size >= 64 << 10 { fd.startWriteback(offset: 0, length: size) }
      extractor.written[index] = true
    }

    /// Content `digest` of `size` bytes was written to `primary` (file `first`, still open)
    /// and hashed: checks the digest, finishes the file, then gives every other planned file
    /// with that content a copy of it (holes kept), one at a time, so a content shared by
    /// thousands of files needs no more descriptors than one.
    func finish(_ first: Int, _ primary: FileDescriptor, digest: Digest, size: Int64) throws {
      defer { primary.close() }
      guard hasher.finalize() == digest else {
        throw BackupError(
          .corruptArchive,
          "The content of '\(display(plan.path(of: plan.files[first])))' does not match its recorded SHA-256: an archive is damaged"
        )
      }
      var count = 1
      let others = plan.files(withContent: digest).filter { $0 != first }
      if !others.isEmpty {
        // Read back through a descriptor of its own (the first was opened write-only).
        let item = plan.files[first]
        let source = try directory(item.parent).open(rawName: plan.name(of: item), O_RDONLY | O_NOFOLLOW)
        defer { source.close() }
        let regions = try source.dataRegions(size: size) ?? (size > 0 ? [0..<size] : [])
        for index in others {
          let copy = try create(index)
          try copy.closeAfter { copy in
            for region in regions {
              var position = region.lowerBound
              while position < region.upperBound {
                let wanted = Int(min(Int64(buffer.count), region.upperBound - position))
                let n = try source.readAll(
                  into: UnsafeMutableRawBufferPointer(rebasing: buffer[0..<wanted]), at: position)
                guard n == wanted else {
                  throw SystemError("read", path: display(plan.path(of: plan.files[first])), errno: .ioError)
                }
                try copy.writeAll(UnsafeRawBufferPointer(rebasing: buffer[0..<n]), at: position)
                position += Int64(n)
              }
            }
            try copy.truncate(to: size)
            try finishFile(index, copy, size: size)
          }
          count += 1
        }
      }
      // Its metadata last: its final mode may not let this process read it back.
      try finishFile(first, primary, size: size)
      _ = extractor.filesDone.wrappingAdd(count, ordering: .relaxed)
      _ = extractor.bytesDone.wrappingAdd(Int(size) * count, ordering: .relaxed)
    }

    private func read(_ archive: Int32, at offset: Int64, count: Int) throws -> UnsafeRawBufferPointer {
      let slice = UnsafeMutableRawBufferPointer(rebasing: buffer[0..<count])
      try extractor.archives[Int(archive)].read(into: slice, at: offset, decoder: decoder)
      return UnsafeRawBufferPointer(slice)
    }

    /// Restores consecutive blobs `range` of the work.
    func restore(_ range: Range<Int>) throws {
      let blobs = extractor.work.blobs
      let first = blobs[range.lowerBound]
      if range.count == 1 && first.size > Int64(buffer.count) {
        try restoreLarge(first)
        return
      }
      let last = blobs[range.upperBound - 1]
      let span = try read(
        first.archive, at: first.dataOffset, count: Int(last.dataOffset + last.size - first.dataOffset))
      for blob in blobs[range] {
        let start = Int(blob.dataOffset - first.dataOffset)
        let data = UnsafeRawBufferPointer(rebasing: span[start..<(start + Int(blob.size))])
        guard let index = plan.firstFile(withContent: blob.digest).map(Int.init) else { continue }
        let fd = try create(index)
        do {
          try fd.writeAll(data, at: 0)
        } catch {
          fd.close()
          throw error
        }
        hasher.update(data)
        try finish(index, fd, digest: blob.digest, size: blob.size)
      }
    }

    /// A blob larger than the buffer, read and written piece by piece.
    private func restoreLarge(_ blob: DirectWork.Blob) throws {
      guard let index = plan.firstFile(withContent: blob.digest).map(Int.init) else { return }
      let fd = try create(index)
      do {
        var done: Int64 = 0
        while done < blob.size {
          let count = Int(min(Int64(buffer.count), blob.size - done))
          let data = try read(blob.archive, at: blob.dataOffset + done, count: count)
          try fd.writeAll(data, at: done)
          hasher.update(data)
          done += Int64(count)
        }
      } catch {
        fd.close()
        _ = hasher.finalize()
        throw error
      }
      try finish(index, fd, digest: blob.digest, size: blob.size)
    }

    /// A content stored as chunks: each read where it lies and written at its place, in
    /// order, so the whole file's digest is hashed as it is assembled.
    func restore(_ content: DirectWork.Chunked) throws {
      guard let index = plan.firstFile(withContent: content.digest).map(Int.init) else { return }
      let fd = try create(index)
      do {
        var position: Int64 = 0
        for chunk in content.chunks {
          let data = try read(chunk.archive, at: chunk.dataOffset, count: Int(chunk.size))
          if !isAllZero(data) { try fd.writeAll(data, at: position) }
          hasher.update(data)
          position += chunk.size
        }
        try fd.truncate(to: content.size)
      } catch {
        fd.close()
        _ = hasher.finalize()
        throw error
      }
      try finish(index, fd, digest: content.digest, size: content.size)
    }
  }
}

/// Which files of a restore plan the fast path wrote, set by the workers (each file by one).
final class WrittenFiles: Sendable {
  private let flags: Mutex<[Bool]>
  init(count: Int) { flags = Mutex([Bool](repeating: false, count: count)) }
  subscript(index: Int) -> Bool {
    get { flags.withLock { $0[index] } }
    set { flags.withLock { $0[index] = newValue } }
  }
}
