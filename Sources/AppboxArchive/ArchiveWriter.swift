// Writes a POSIX pax tar stream, optionally gzip- or zstd-compressed, or framed (independent zstd
// frames, compressed or stored per content: FrameWriter.swift), to a descriptor.
//
// Format choices and why:
// - pax, not pax_restricted: restricted pax writes an extended header only when ustar cannot hold
//   a field, and sub-second mtimes alone do not count, so nanoseconds would be lost.
// - `xattrheader=SCHILY`: libarchive otherwise writes every xattr twice, once as
//   `LIBARCHIVE.xattr.*`, which GNU tar warns about.
// - Output goes to write(2) in 128 KiB blocks rather than tar's traditional 10240 bytes: measured
//   here, that takes a 200 MiB uncompressed member from ~2000 to ~3600 MiB/s (raw write(2) of the
//   same bytes: ~4300), because libarchive hands whole blocks straight from the caller's buffer.
//   The block size does not change the archive's bytes, only how they are written. A framed
//   archive has libarchive write unbuffered (block size 0): the framer buffers each frame itself,
//   and the uncompressed offset is then exactly what the framer has received.
// - The last block is not padded to a full block: padding a compressed stream with zeros makes
//   `gzip -t` and `zstd -t` complain. The tar stream still ends with the two zero blocks that mark
//   the end of an archive.
//
// Invariants: at most one entry is open; an entry's data is exactly its declared size (short data
// is an error unless the caller asks for zero padding explicitly); after any libarchive failure
// the writer only reports errors; a writer released without `finish()` is abandoned with
// `archive_write_fail`, so the file never looks like a complete archive by accident.

import AppboxCore
import CArchive

#if canImport(Glibc)
  import Glibc
#endif

/// Writes tar members to a file descriptor it does not own and never closes.
///
/// Not thread-safe; use one writer from one task at a time.
public final class ArchiveWriter {
  private enum State { case idle, inEntry, finished, failed }

  private let handle: OpaquePointer
  private let scratchEntry: OpaquePointer
  private let sink: DescriptorSink
  private let name: String
  private var state = State.idle
  private var currentPath: [UInt8]?
  private var remaining: Int64 = 0
  /// The current member's logical position and, for a sparse member, its data regions: bytes
  /// given for a hole are dropped by libarchive, so they must be zeros (checked).
  private var position: Int64 = 0
  private var sparseRegions: [ArchiveDataRegion]?
  /// For a framed archive: what the current member's data is, until its first bytes decide
  /// which kind of frame they go to (nil once decided).
  private var pendingContent: ContentKind?

  /// Starts a pax archive on `fileDescriptor`.
  ///
  /// `compressionLevel` is passed to the filter (gzip 1...9, zstd 1...22); nil uses its default.
  /// `name` labels errors (e.g. the archive's path); it defaults to "descriptor N".
  /// `outputObserver`, when given, sees every block of the final (compressed) stream just before
  /// it is written, in order: the way to checksum an archive while it is made. It runs on the
  /// writing thread and must not keep the buffer.
  /// Uses `archive_write_set_format_pax`, `archive_write_add_filter_gzip` / `_zstd` and
  /// `archive_write_open2`.
  /// With `framing`, the archive is framed zstd (`compression` must be `.zstd`, without a
  /// level: the options hold it).
  public convenience init(
    fileDescriptor: Int32, compression: ArchiveCompression, compressionLevel: Int? = nil,
    name: String? = nil, outputObserver: ((UnsafeRawBufferPointer) -> Void)? = nil,
    framing: FrameOptions? = nil
  ) throws(ArchiveError) {
    try self.init(
      sink: DescriptorSink(fd: fileDescriptor, observer: outputObserver), compression: compression,
      compressionLevel: compressionLevel, name: name ?? "descriptor \(fileDescriptor)", framing: framing)
  }

  /// Starts a pax archive whose bytes go to `output` (a repository's sealed or remote archive);
  /// otherwise as `init(fileDescriptor:...)`. An error `output` throws is reported as it is.
  public convenience init(
    output: ArchiveOutput, compression: ArchiveCompression, compressionLevel: Int? = nil, name: String,
    outputObserver: ((UnsafeRawBufferPointer) -> Void)? = nil, framing: FrameOptions? = nil
  ) throws(ArchiveError) {
    try self.init(
      sink: DescriptorSink(output: output, observer: outputObserver), compression: compression,
      compressionLevel: compressionLevel, name: name, framing: framing)
  }

  private init(
    sink: DescriptorSink, compression: ArchiveCompression, compressionLevel: Int?, name: String,
    framing: FrameOptions?
  ) throws(ArchiveError) {
    let handle = archive_write_new()
    let scratchEntry = archive_entry_new()
    guard let handle, let scratchEntry else {
      archive_write_free(handle)
      archive_entry_free(scratchEntry)
      throw ArchiveError(kind: .io, operation: .open, archive: name, message: "out of memory", errno: ENOMEM)
    }
    self.handle = handle
    self.scratchEntry = scratchEntry
    self.sink = sink
    self.name = name
    // From here on a throw runs deinit, which abandons and frees what was made.
    state = .failed
    try check(archive_write_set_format_pax(handle), .open)
    try check(archive_write_set_options(handle, "xattrheader=SCHILY"), .open)
    if let framing {
      guard compression == .zstd, compressionLevel == nil else {
        throw ArchiveError(
          kind: .invalidArgument, operation: .open, archive: name,
          message: "a framed archive is zstd, with the level in its frame options")
      }
      guard let framer = FrameWriter(options: framing, deliver: { [unowned sink] in sink.deliver($0) }) else {
        throw ArchiveError(
          kind: .invalidArgument, operation: .open, archive: name, message: "the frame options are not valid")
      }
      sink.framer = framer
      try check(archive_write_set_bytes_per_block(handle, 0), .open)
      try check(UTF8CharacterType.perform { sink.open(handle) }, .open)
      state = .idle
      return
    }
    switch compression {
    case .none:
      if let compressionLevel {
        throw ArchiveError(
          kind: .invalidArgument, operation: .open, archive: name,
          message: "compression level \(compressionLevel) given without compression")
      }
    case .gzip:
      try check(archive_write_add_filter_gzip(handle), .open)
    case .zstd:
      try check(archive_write_add_filter_zstd(handle), .open)
    }
    if let compressionLevel, compression != .none {
      let status = archive_write_set_filter_option(
        handle, compression.rawValue, "compression-level", String(compressionLevel))
      if status != ArchiveStatus.ok {
        throw ArchiveError(
          kind: .invalidArgument, operation: .open, archive: name,
          message: "compression level \(compressionLevel) is not valid for \(compression.rawValue)")
      }
    }
    try check(archive_write_set_bytes_per_block(handle, 128 * 1024), .open)
    try check(archive_write_set_bytes_in_last_block(handle, 1), .open)
    try check(UTF8CharacterType.perform { sink.open(handle) }, .open)
    state = .idle
  }

  deinit {
    // Frames not yet written stay unwritten: an abandoned archive gets nothing more.
    if state != .finished { sink.framer?.stop() }
    if state != .finished { archive_write_fail(handle) }
    archive_write_free(handle)
    archive_entry_free(scratchEntry)
  }

  /// Where the next header will start in the uncompressed tar stream, in bytes.
  ///
  /// Read it after `finishEntry()` (or before the first header) to record where a member begins;
  /// `ArchiveReader(fileDescriptor:startingAt:)` can start there later. Inside an entry it is the
  /// end of what has been written so far (data padding to 512 bytes is added by `finishEntry`).
  /// It counts from where the writer started on the descriptor and includes bytes libarchive has
  /// accepted but not yet written, so for an uncompressed archive it is ahead of the file until
  /// `finish()` flushes, and equal to the archive's length after. With compression it is still
  /// the uncompressed position (the compressor is filter 0's consumer); `archive_filter_bytes(a,
  /// -1)` would instead report compressed bytes emitted so far, which lag by the compressor's
  /// buffer and say nothing about member boundaries. Uses `archive_filter_bytes(a, 0)`.
  public var uncompressedOffset: Int64 { archive_filter_bytes(handle, 0) }

  /// Whether the archive is framed zstd.
  public var isFramed: Bool { sink.framer != nil }

  /// The frames of a framed archive written so far (the bytes of the current frame are not in
  /// it until `endFrame()`); nil for any other archive.
  public var frameIndex: FrameIndex? { sink.framer?.index }

  /// Uncompressed bytes that went into compressed and into stored frames so far.
  public var framedBytes: (compressed: Int64, stored: Int64)? {
    sink.framer.map { ($0.compressedBytes, $0.storedBytes) }
  }

  /// Ends the current frame of a framed archive, so that the next member starts a frame (the
  /// manifest does: everything before it is then in `frameIndex`). Nothing for other archives.
  public func endFrame() throws(ArchiveError) {
    try require(.idle, .writeHeader, nil)
    if let code = sink.framer?.endFrame() { throw framingFailure(code, .writeHeader, nil) }
  }

  /// Writes `entry`'s header. For a regular file, exactly `entry.size` bytes of data must follow.
  ///
  /// Names that are not valid UTF-8 are stored byte for byte with a `hdrcharset=BINARY` pax
  /// record (GNU tar 1.34 extracts them correctly but prints "Ignoring unknown extended header
  /// keyword 'hdrcharset'"; `--warning=no-unknown-keyword` silences that).
  /// Uses `archive_write_header`.
  /// `content` says what the data is, when the caller knows better than the member's name (a
  /// chunk of a media file); it only decides how a framed archive stores it.
  public func writeHeader(_ entry: ArchiveEntry, content: ContentKind = .unknown) throws(ArchiveError) {
    try require(.idle, .writeHeader, entry.path)
    if let reason = entry.invalidReason {
      throw ArchiveError(
        kind: .invalidArgument, operation: .writeHeader, archive: name, entryPath: entry.path,
        message: reason)
    }
    let content = content == .unknown ? ContentKind.of(path: entry.path) : content
    if let framer = sink.framer,
      let code = framer.beginMember(dataSize: entry.dataSize, incompressible: content == .incompressible)
    {
      throw framingFailure(code, .writeHeader, entry.path)
    }
    archive_entry_clear(scratchEntry)
    entry.copy(into: scratchEntry)
    // libarchive tells a name it cannot convert (stored raw, ARCHIVE_WARN) from a failed
    // allocation (ARCHIVE_FATAL) by `errno == ENOMEM`, so a stale ENOMEM left by an earlier
    // call would fail the header: errno starts clean.
    let status = UTF8CharacterType.perform {
      errno = 0
      return archive_write_header(handle, scratchEntry)
    }
    // ARCHIVE_WARN: the header was written, but a name could not be converted to UTF-8 and was
    // stored as raw bytes (hdrcharset=BINARY); that is the byte-exact outcome we want.
    if status != ArchiveStatus.ok && status != ArchiveStatus.warn {
      throw failure(status, .writeHeader, entry.path)
    }
    currentPath = entry.path
    remaining = entry.dataSize
    position = 0
    sparseRegions = entry.storedSparseRegions
    pendingContent = sink.framer == nil || entry.dataSize == 0 ? nil : content
    state = .inEntry
  }

  /// Appends file data to the current entry, straight from `buffer` (libarchive copies it into
  /// its block buffer or compressor; nothing else does).
  ///
  /// Uses `archive_write_data`.
  public func writeData(_ buffer: UnsafeRawBufferPointer) throws(ArchiveError) {
    try require(.inEntry, .writeData, currentPath)
    guard buffer.count > 0 else { return }
    guard Int64(buffer.count) <= remaining else {
      throw ArchiveError(
        kind: .invalidArgument, operation: .writeData, archive: name, entryPath: currentPath,
        message: "\(buffer.count) bytes exceed the \(remaining) bytes left of the declared size")
    }
    if let sparseRegions, !Self.holesAreZero(buffer, at: position, regions: sparseRegions) {
      throw ArchiveError(
        kind: .invalidArgument, operation: .writeData, archive: name, entryPath: currentPath,
        message: "data that is not zeros falls in a hole of the sparse map")
    }
    try feed(buffer)
  }

  /// Appends `count` zero bytes to the current entry: the holes of a sparse member (libarchive
  /// stores nothing for them), or zeros in a dense one. Uses `archive_write_data`.
  public func writeZeros(_ count: Int64) throws(ArchiveError) {
    try require(.inEntry, .writeData, currentPath)
    guard count <= remaining else {
      throw ArchiveError(
        kind: .invalidArgument, operation: .writeData, archive: name, entryPath: currentPath,
        message: "\(count) bytes exceed the \(remaining) bytes left of the declared size")
    }
    var left = count
    while left > 0 {
      let chunk = Int(min(left, Int64(ZeroPages.bytes.count)))
      try feed(UnsafeRawBufferPointer(rebasing: ZeroPages.bytes[0..<chunk]), zeros: true)
      left -= Int64(chunk)
    }
  }

  private func feed(_ buffer: UnsafeRawBufferPointer, zeros: Bool = false) throws(ArchiveError) {
    if let content = pendingContent, let framer = sink.framer {
      pendingContent = nil
      let incompressible =
        !zeros
        && (content == .incompressible
          || (content == .unknown && ContentKind.of(leadingBytes: buffer) == .incompressible))
      if let code = framer.beginData(incompressible: incompressible, size: remaining) {
        throw framingFailure(code, .writeData, currentPath)
      }
    }
    let written = archive_write_data(handle, buffer.baseAddress, buffer.count)
    if written != buffer.count {
      throw failure(
        written < 0 ? Int32(truncatingIfNeeded: written) : ArchiveStatus.fatal, .writeData, currentPath)
    }
    remaining -= Int64(written)
    position += Int64(written)
  }

  /// Whether the bytes of `buffer` (starting at logical `offset`) that fall outside every data
  /// region are all zero.
  static func holesAreZero(
    _ buffer: UnsafeRawBufferPointer, at offset: Int64, regions: [ArchiveDataRegion]
  ) -> Bool {
    var cursor = offset
    let end = offset + Int64(buffer.count)
    // Regions are few and sorted; find the first that ends after the cursor.
    var index = regions.firstIndex { $0.end > cursor } ?? regions.count
    while cursor < end {
      let holeEnd = index < regions.count ? min(regions[index].offset, end) : end
      if cursor < holeEnd {
        let slice = UnsafeRawBufferPointer(rebasing: buffer[Int(cursor - offset)..<Int(holeEnd - offset)])
        if !isAllZero(slice) { return false }
        cursor = holeEnd
      }
      guard index < regions.count, cursor < end else { break }
      cursor = min(regions[index].end, end)
      index += 1
    }
    return true
  }

  /// Appends `bytes` to the current entry. Uses `archive_write_data`.
  public func writeData(_ bytes: [UInt8]) throws(ArchiveError) {
    do {
      try bytes.withUnsafeBytes { buffer in try writeData(buffer) }
    } catch let error as ArchiveError {
      throw error
    } catch {
      fatalError("unreachable: writeData throws only ArchiveError")
    }
  }

  /// Data bytes the current entry still expects.
  public var remainingDataSize: Int64 { state == .inEntry ? remaining : 0 }

  /// Ends the current entry; all of its declared data must have been written.
  ///
  /// Uses `archive_write_finish_entry`.
  public func finishEntry() throws(ArchiveError) {
    try require(.inEntry, .finishEntry, currentPath)
    if remaining > 0 {
      throw ArchiveError(
        kind: .invalidArgument, operation: .finishEntry, archive: name, entryPath: currentPath,
        message: "\(remaining) bytes of the declared size were not written")
    }
    try finishCurrentEntry()
  }

  /// Ends the current entry, filling any data not written with zero bytes, and returns how many
  /// were added. For a file that shrank while it was being read: the header already promised its
  /// old size. Uses `archive_write_finish_entry`, which writes the zeros.
  @discardableResult
  public func finishEntryPaddingWithZeros() throws(ArchiveError) -> Int64 {
    try require(.inEntry, .finishEntry, currentPath)
    let padded = remaining
    // A sparse member's map goes out with its first data (libarchive writes it then): feed the
    // missing bytes through the map, where holes cost nothing, rather than pad behind it.
    if sparseRegions != nil && padded > 0 { try writeZeros(padded) }
    try finishCurrentEntry()
    return padded
  }

  /// Writes the end-of-archive marker, flushes the compressor and the last block, and reports any
  /// error that only shows now (e.g. ENOSPC on the final write). Does not close the descriptor.
  ///
  /// Uses `archive_write_close`.
  public func finish() throws(ArchiveError) {
    if state == .inEntry { try finishEntry() }
    try require(.idle, .finish, nil)
    let status = archive_write_close(handle)
    if status != ArchiveStatus.ok { throw failure(status, .finish, nil) }
    if let code = sink.framer?.endFrame() { throw framingFailure(code, .finish, nil) }
    sink.framer?.stop()
    state = .finished
  }

  /// Abandons the archive: nothing more is written, not even the end marker.
  ///
  /// Uses `archive_write_fail`.
  public func abort() {
    if state != .finished {
      sink.framer?.stop()
      archive_write_fail(handle)
      state = .failed
    }
  }

  private func finishCurrentEntry() throws(ArchiveError) {
    let status = archive_write_finish_entry(handle)
    if status != ArchiveStatus.ok && status != ArchiveStatus.warn {
      throw failure(status, .finishEntry, currentPath)
    }
    remaining = 0
    position = 0
    sparseRegions = nil
    pendingContent = nil
    currentPath = nil
    state = .idle
  }

  private func require(
    _ expected: State, _ operation: ArchiveError.Operation, _ path: [UInt8]?
  ) throws(ArchiveError) {
    if state == expected { return }
    let message: String
    switch state {
    case .idle: message = "no entry is open"
    case .inEntry: message = "the previous entry is not finished"
    case .finished: message = "the archive is already finished"
    case .failed: message = "the archive failed earlier or was aborted"
    }
    throw ArchiveError(
      kind: state == .failed ? .io : .invalidArgument, operation: operation, archive: name, entryPath: path,
      message: message)
  }

  private func check(_ status: Int32, _ operation: ArchiveError.Operation) throws(ArchiveError) {
    if status != ArchiveStatus.ok { throw failure(status, operation, nil) }
  }

  /// A failure of the framer (an output error while a frame was written, or libzstd's): the
  /// archive is abandoned.
  private func framingFailure(
    _ code: Int32, _ operation: ArchiveError.Operation, _ path: [UInt8]?
  ) -> ArchiveError {
    sink.record(code)
    if sink.streamError != nil { return failure(ArchiveStatus.fatal, operation, path) }
    state = .failed
    if let reason = sink.framer?.compressionError {
      return ArchiveError(
        kind: .io, operation: operation, archive: name, entryPath: path, message: "zstd failed: \(reason)")
    }
    return ArchiveError(
      kind: .io, operation: operation, archive: name, entryPath: path, message: "write to the archive failed",
      errno: code)
  }

  /// Classifies a libarchive failure: a failed `write(2)` is `.io`; an entry libarchive refused
  /// (ARCHIVE_FAILED, the archive stays usable) is `.invalidArgument`; anything fatal is `.io`.
  private func failure(
    _ status: Int32, _ operation: ArchiveError.Operation, _ path: [UInt8]?
  ) -> ArchiveError {
    if let streamError = sink.streamError {
      state = .failed
      return ArchiveError(
        kind: (streamError as? any AppboxFailure)?.kind ?? .io, operation: operation, archive: name,
        entryPath: path, message: "\(streamError)", errno: streamError.isOutOfSpace ? ENOSPC : nil)
    }
    let kind: FailureKind
    if sink.failure != nil || status != ArchiveStatus.failed {
      kind = .io
      state = .failed
    } else {
      kind = .invalidArgument
    }
    var error = ArchiveError.fromLibarchive(
      handle, kind: kind, operation: operation, archive: name, entryPath: path,
      fallback: "libarchive status \(status)")
    if let code = sink.failure { error.errno = code }
    return error
  }
}

/// Read-only zero-filled memory to feed libarchive the holes of sparse members: mapped once,
/// never written, so every page is the kernel's shared zero page (no memory is used).
enum ZeroPages {
  nonisolated(unsafe) static let bytes: UnsafeRawBufferPointer = {
    let size = 64 << 20
    let mapped = mmap(nil, size, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0)
    if let mapped, mapped != MAP_FAILED { return UnsafeRawBufferPointer(start: mapped, count: size) }
    let fallback = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16)
    fallback.initializeMemory(as: UInt8.self, repeating: 0)
    return UnsafeRawBufferPointer(fallback)
  }()
}
