// Stage 2 of a backup, large files: stream a file larger than one buffer to the archiver, in
// buffers, hashing it on the way (here, on the archiver, or on a third thread for chunked
// files, whichever has room).
//
// A file with fewer blocks allocated than its size may have holes: its data regions are found
// with SEEK_DATA/SEEK_HOLE, only they are read (pread at their offsets), and each hole is
// handed over as a count of zeros, which the archiver stores as a hole of a sparse member. Such
// a file gets the sparse content identity (ContentIdentity.swift), hashed here from the data
// at its offsets: the holes are never hashed, so the file costs what its data costs, whatever
// its apparent size. A dense file's identity stays the SHA-256 of its bytes.
//
// A streamed attempt that turns out unstable (the file changed while read) has already gone to
// the archive; the archiver appends the next attempt as a new member of the same path (later
// members win in tar). A file that ended early is padded to the size its header declared; the
// digest covers those zeros, so it always describes the member's bytes.

import AppboxCore
import AppboxCrypto
import AppboxRepository
import Glibc

extension ContentReader {
  /// How a streamed attempt ended.
  enum StreamOutcome {
    case done
    /// The file changed while it was read: read it again.
    case again
    /// The archiver cancelled.
    case cancelled
  }

  /// Streams one attempt of a file larger than a buffer.
  func stream(
    _ item: ItemReference, fd: FileDescriptor, file: OpenedFile, before: FileStatus, path: [UInt8],
    attempt: Int,
    hasher: SHA256Hasher
  ) throws -> StreamOutcome {
    let isLast = attempt == ContentReader.maxAttempts
    var opened = file
    if before.mayBeSparse { opened.dataRegions = (try? fd.dataRegions(size: before.size)) ?? nil }
    let sparse = opened.dataRegions != nil
    opened.hasSparseIdentity = sparse && !plainSparseIdentity
    let mode = streamMode(item, path: path, fd: fd, size: before.size, sparse: sparse)
    // A chunked file is hashed twice, whole and chunk by chunk, and cut (the gear hash):
    // this thread reads and cuts, a third hashes it whole, the archiver hashes the chunks. A
    // sparse file is hashed here (its identity needs the offsets).
    let identity =
      opened.hasSparseIdentity ? ContentHasher(sparse: true, size: before.size, hasher: hasher) : nil
    let archiverHashes = mode == .whole && identity == nil && archiverHasRoom
    var chunker = mode == .whole ? nil : Chunker()
    let wholeHasher = mode == .whole ? nil : startedStreamHasher()
    guard queue.push(.begin(item: item, file: opened, archiverHashes: archiverHashes, mode: mode)) else {
      return .cancelled
    }
    var remaining = before.size
    var position: Int64 = 0
    var endedEarly = false
    runs: for run in opened.dataRegions ?? [0..<before.size] {
      if run.lowerBound > position {
        let gap = run.lowerBound - position
        if !archiverHashes && identity == nil { hashZeros(gap, into: hasher) }
        guard queue.push(.hole(count: gap)) else { return .cancelled }
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
        let data = UnsafeRawBufferPointer(rebasing: buffer[0..<n])
        if let identity {
          identity.update(data, at: position)
        } else if let wholeHasher {
          wholeHasher.feed(buffer, count: n)
        } else if !archiverHashes {
          hasher.update(data)
        }
        remaining -= Int64(n)
        position += Int64(n)
        var cut: Int32 = -1
        if chunker != nil { cut = Self.cut(data, with: &chunker!) }
        guard queue.push(.chunk(buffer: buffer, count: n, cut: cut), cost: n) else {
          pool.give(buffer)
          return .cancelled
        }
      }
    }
    if !endedEarly && remaining > 0 && sparse {
      // The hole at the end of the file.
      if !archiverHashes && identity == nil { hashZeros(remaining, into: hasher) }
      guard queue.push(.hole(count: remaining)) else { return .cancelled }
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
          return .cancelled
        }
      }
    }
    // A short file's missing bytes are zeros: the plain identity hashes them; the sparse one
    // has nothing to add for zeros.
    if remaining > 0 && !archiverHashes && identity == nil { hashZeros(remaining, into: hasher) }
    afterRead?(path, attempt)
    let after = try fd.status()
    let stable = !wasShort && Self.same(before, after)
    let digest = identity?.finalize() ?? wholeHasher?.finish() ?? (archiverHashes ? nil : hasher.finalize())
    guard
      queue.push(
        .end(item: item, digest: digest, short: remaining, stable: stable, final: stable || isLast))
    else { return .cancelled }
    return stable || isLast ? .done : .again
  }

  /// Reads the whole file and tells whether its identity (sparse or plain, as `sparse` says) is
  /// `digest` and it held still meanwhile. The sparse identity reads only the data regions.
  func hashMatches(
    _ fd: FileDescriptor, _ digest: Digest, sparse: Bool, before: FileStatus, hasher: SHA256Hasher,
    path: [UInt8]
  ) throws -> Bool {
    let buffer = pool.take(beforeWaiting: nudgeConsumers)
    defer { pool.give(buffer) }
    let identity = ContentHasher(sparse: sparse, size: before.size, hasher: hasher)
    do {
      let regions =
        sparse && before.mayBeSparse
        ? (try fd.dataRegions(size: before.size) ?? [0..<before.size]) : [0..<before.size]
      for region in regions {
        var position = region.lowerBound
        while position < region.upperBound {
          let wanted = Int(min(Int64(buffer.count), region.upperBound - position))
          let n = try fd.read(into: UnsafeMutableRawBufferPointer(rebasing: buffer[0..<wanted]), at: position)
          if n == 0 { break }
          identity.update(UnsafeRawBufferPointer(rebasing: buffer[0..<n]), at: position)
          position += Int64(n)
        }
      }
      // Growth past the size read shows in the fstat (size and mtime move with every write).
      let after = try fd.status()
      return identity.finalize() == digest && Self.same(before, after)
    } catch let error as SystemError {
      _ = identity.finalize()
      throw backupFailure(error, path: display(path))
    }
  }
}
