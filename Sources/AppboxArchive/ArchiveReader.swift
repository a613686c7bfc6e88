// Reads tar archives (ustar, pax, GNU tar, v7, star) as a sequence of `ArchiveEntry` values
// and their data, through every decompression filter libarchive has (gzip, bzip2, xz, lzma,
// lzip, lz4, zstd, compress, lzop, lrzip, grzip, uuencode, rpm's wrapper), one layer of it
// (CompressionDetector.swift); filters that need an outside program name it when it is missing.
//
// Only libarchive's tar format reader is enabled, so zip, cpio, 7z, ISO images and raw data are
// refused with `.badData` "not a tar archive" instead of being read as something else. Archives
// are untrusted input: every libarchive failure becomes an `ArchiveError` (`.badData`, or `.io`
// when the descriptor itself failed) and the reader then refuses further calls; nothing here traps
// on malformed input. What libarchive reports as a warning (a malformed pax record it skipped, a
// header it read around) is kept in `warnings`, for the caller to decide: import refuses unless
// told to be lenient, restore always refuses. Paths are reported as raw bytes; making them safe
// to create on disk is the restorer's job (absolute paths and `..` are passed through for it to
// refuse).
//
// Data comes two ways. `readData(into:)` is the member's logical content, holes of a sparse
// member as zeros. `readChunk(into:)` gives only the bytes the archive holds, each run with its
// offset, so a sparse member can be extracted with its holes left as holes. Both check that the
// runs libarchive delivers are in order, do not overlap, and stay within the member's size.

import AppboxCore
import CArchive

#if canImport(Glibc)
  import Glibc
#endif

/// Reads a tar archive from a file descriptor.
///
/// Not thread-safe; use one reader from one task at a time.
public final class ArchiveReader {
  private enum State { case beforeEntry, inEntry, atEnd, failed }

  private let handle: OpaquePointer
  private let source: DescriptorSource
  private let ownedDescriptor: Int32?
  private let baseOffset: Int64
  private let name: String
  private var state = State.beforeEntry
  private var filter = CompressionFilter.none
  private var entriesRead = 0
  private var currentPath: [UInt8]?
  /// The current member's declared size, whether it is sparse, and how far its data has been
  /// delivered (logical offset).
  private var currentSize: Int64 = 0
  private var currentIsSparse = false
  private var delivered: Int64 = 0
  /// What is left of the block libarchive handed over last, not yet copied to the caller.
  private var pending: (bytes: UnsafeRawPointer, count: Int, offset: Int64)?
  private var blocksDone = false

  /// What libarchive warned about so far, in order: each a member (when known) and a message.
  public private(set) var warnings: [ArchiveWarning] = []

  /// Where the current entry's first header (for pax, its extended header) starts in the
  /// uncompressed stream, counted from the start of the archive; nil before the first entry.
  /// Pass it to `init(fileDescriptor:startingAt:)` to come back to this entry later.
  public private(set) var headerOffset: Int64?

  /// Reads the archive from the descriptor's current position; the descriptor is not closed.
  ///
  /// With `allowCompressed` false, a compressed archive is refused with `.badData`.
  /// Uses `archive_read_support_format_tar` and `archive_read_open1`.
  public convenience init(
    fileDescriptor: Int32, allowCompressed: Bool = true, name: String? = nil
  ) throws(ArchiveError) {
    try self.init(
      descriptor: fileDescriptor, owned: false, startingAt: nil, allowCompressed: allowCompressed,
      name: name ?? "descriptor \(fileDescriptor)")
  }

  /// Reads an uncompressed archive starting at `offset`, which must be where a member's header
  /// begins (`ArchiveWriter.uncompressedOffset` before that member, or a `headerOffset`).
  /// `headerOffset` keeps counting from the start of the archive. The descriptor is not closed.
  ///
  /// Uses `lseek(2)` and `archive_read_open1`.
  public convenience init(
    fileDescriptor: Int32, startingAt offset: Int64, name: String? = nil
  ) throws(ArchiveError) {
    try self.init(
      descriptor: fileDescriptor, owned: false, startingAt: offset, allowCompressed: false,
      name: name ?? "descriptor \(fileDescriptor)")
  }

  /// Reads the archive on `fileDescriptor`, which the reader takes over (and closes when
  /// released, or at once when this fails): from the beginning, or from `offset` as
  /// `init(fileDescriptor:startingAt:)` does.
  public convenience init(
    takingDescriptor fileDescriptor: Int32, startingAt offset: Int64?, name: String
  ) throws(ArchiveError) {
    try self.init(
      descriptor: fileDescriptor, owned: true, startingAt: offset, allowCompressed: offset == nil, name: name)
  }

  /// Opens and reads the archive at `path`; the reader closes the file when released.
  ///
  /// Uses `open(2)`.
  public convenience init(path: String, allowCompressed: Bool = true) throws(ArchiveError) {
    let fd = open(path, O_RDONLY | O_CLOEXEC)
    if fd < 0 {
      let code = errno
      throw ArchiveError(
        kind: code == ENOENT ? .notFound : .io, operation: .open, archive: path,
        message: String(cString: strerror(code)), errno: code)
    }
    try self.init(
      descriptor: fd, owned: true, startingAt: nil, allowCompressed: allowCompressed, name: path)
  }

  /// Reads an archive from `input`. With `offset` nil the input starts at the archive's
  /// beginning (and may be compressed, unless `allowCompressed` is false); with an offset it
  /// starts there, at a member's header of an uncompressed archive, and `headerOffset` counts
  /// from the archive's beginning as for `init(fileDescriptor:startingAt:)`.
  public convenience init(
    input: ArchiveInput, startingAt offset: Int64? = nil, allowCompressed: Bool = true, name: String
  ) throws(ArchiveError) {
    try self.init(
      source: DescriptorSource(input: input), descriptor: -1, owned: false, startingAt: offset,
      allowCompressed: offset == nil && allowCompressed, name: name)
  }

  private convenience init(
    descriptor: Int32, owned: Bool, startingAt offset: Int64?, allowCompressed: Bool, name: String
  ) throws(ArchiveError) {
    let source: DescriptorSource
    do {
      source = try DescriptorSource(fd: descriptor, startingAt: offset)
    } catch {
      if owned { close(descriptor) }
      throw ArchiveError(
        kind: error.kind, operation: .open, archive: name, message: error.message, errno: error.errno)
    }
    try self.init(
      source: source, descriptor: descriptor, owned: owned, startingAt: offset,
      allowCompressed: allowCompressed,
      name: name)
  }

  private init(
    source: DescriptorSource, descriptor: Int32, owned: Bool, startingAt offset: Int64?,
    allowCompressed: Bool,
    name: String
  ) throws(ArchiveError) {
    guard let handle = archive_read_new() else {
      if owned { close(descriptor) }
      throw ArchiveError(kind: .io, operation: .open, archive: name, message: "out of memory", errno: ENOMEM)
    }
    self.handle = handle
    self.source = source
    self.ownedDescriptor = owned ? descriptor : nil
    self.baseOffset = offset ?? 0
    self.name = name
    // From here on a throw runs deinit, which frees the handle and closes an owned descriptor.
    state = .failed
    archive_read_support_format_tar(handle)
    if offset == nil {
      // One filter, chosen from the first bytes (see CompressionDetector.swift for why not
      // libarchive's recursive detection).
      filter = CompressionFilter.detect(try source.prefetch(minimum: 4096))
      if !allowCompressed && filter != .none {
        throw ArchiveError(
          kind: .badData, operation: .open, archive: name,
          message: "the archive is \(filter.name)-compressed; an uncompressed tar archive is required")
      }
      // ARCHIVE_WARN means "will run an outside program", which is fine.
      let status = filter.enable(on: handle)
      if status != ArchiveStatus.ok && status != ArchiveStatus.warn { throw failure(status, .open) }
    }
    let status = UTF8CharacterType.perform { source.open(handle) }
    if status != ArchiveStatus.ok { throw failure(status, .open) }
    state = .beforeEntry
  }

  deinit {
    archive_read_free(handle)
    if let ownedDescriptor { close(ownedDescriptor) }
  }

  /// The next member's header, or nil at the end of the archive. Data of the previous member that
  /// was not read is skipped.
  ///
  /// The path is normalised: leading `./` removed, trailing `/` removed, `./` alone becomes `.`.
  /// Hard-link targets get the same treatment; symlink targets are returned verbatim.
  /// Uses `archive_read_next_header` and `archive_read_header_position`.
  public func nextEntry() throws(ArchiveError) -> ArchiveEntry? {
    switch state {
    case .atEnd: return nil
    case .failed: throw stateError(.readHeader)
    case .beforeEntry, .inEntry: break
    }
    let (status, entry): (Int32, ArchiveEntry?) = UTF8CharacterType.perform {
      var libarchiveEntry: OpaquePointer? = nil
      errno = 0  // libarchive reads ENOMEM in errno as a failed allocation (see ArchiveWriter)
      let status = archive_read_next_header(handle, &libarchiveEntry)
      // ARCHIVE_WARN: the header was read, but libarchive skipped or repaired something in it;
      // it goes into `warnings`. ARCHIVE_RETRY ("Damaged tar archive") would resynchronise past a
      // corrupt header: that is an error like any other.
      guard status == ArchiveStatus.ok || status == ArchiveStatus.warn, let libarchiveEntry else {
        return (status, nil)
      }
      return (status, ArchiveEntry(libarchiveEntry: libarchiveEntry))
    }
    if status == ArchiveStatus.eof {
      state = .atEnd
      currentPath = nil
      return nil
    }
    guard let entry else {
      throw failure(status == ArchiveStatus.ok ? ArchiveStatus.fatal : status, .readHeader)
    }
    if status == ArchiveStatus.warn { recordWarning(entry.path) }
    entriesRead += 1
    headerOffset = baseOffset + archive_read_header_position(handle)
    currentPath = entry.path
    currentSize = entry.type == .regular ? max(entry.size, 0) : 0
    currentIsSparse = entry.sparseRegions != nil
    delivered = 0
    pending = nil
    blocksDone = false
    state = .inEntry
    return entry
  }

  /// How many members have been read so far.
  public var memberCount: Int { entriesRead }

  /// Where the current member's data, as delivered so far, ends: its size for a sparse member
  /// once all data was read (a trailing hole counts), else the bytes delivered.
  public var deliveredLength: Int64 { currentIsSparse && blocksDone ? currentSize : delivered }

  /// Copies the current member's next bytes of logical content into `buffer`; returns 0 at the
  /// end. Holes of a sparse member, a trailing one included, read as zeros; a dense member gives
  /// exactly the bytes the archive holds. A member cut short by the end of the file throws
  /// `.badData`.
  ///
  /// Uses `archive_read_data_block`.
  public func readData(into buffer: UnsafeMutableRawBufferPointer) throws(ArchiveError) -> Int {
    guard state == .inEntry else { throw stateError(.readData) }
    guard buffer.count > 0 else { return 0 }
    try fillPending()
    guard let block = pending else {
      // No more data: a sparse member's trailing hole reads as zeros.
      guard currentIsSparse, delivered < currentSize else { return 0 }
      let count = Int(min(Int64(buffer.count), currentSize - delivered))
      buffer.baseAddress!.initializeMemory(as: UInt8.self, repeating: 0, count: count)
      delivered += Int64(count)
      return count
    }
    if block.offset > delivered {
      let count = Int(min(Int64(buffer.count), block.offset - delivered))
      buffer.baseAddress!.initializeMemory(as: UInt8.self, repeating: 0, count: count)
      delivered += Int64(count)
      return count
    }
    return take(from: block, into: buffer)
  }

  /// The current member's next run of data the archive holds: copied into `buffer` (as much as
  /// fits) with its logical offset, or nil after the last. Offsets only grow; what lies between
  /// two runs, or after the last run up to the member's size, is a hole.
  ///
  /// Uses `archive_read_data_block`.
  public func readChunk(into buffer: UnsafeMutableRawBufferPointer) throws(ArchiveError) -> ArchiveChunk? {
    guard state == .inEntry else { throw stateError(.readData) }
    guard buffer.count > 0 else { return nil }
    try fillPending()
    guard let block = pending else { return nil }
    delivered = block.offset
    let offset = block.offset
    return ArchiveChunk(offset: offset, count: take(from: block, into: buffer))
  }

  /// Copies the front of `block` into `buffer` and keeps the rest pending.
  private func take(
    from block: (bytes: UnsafeRawPointer, count: Int, offset: Int64),
    into buffer: UnsafeMutableRawBufferPointer
  ) -> Int {
    let count = min(buffer.count, block.count)
    buffer.baseAddress!.copyMemory(from: block.bytes, byteCount: count)
    delivered = block.offset + Int64(count)
    pending =
      count == block.count
      ? nil : (block.bytes + count, block.count - count, block.offset + Int64(count))
    return count
  }

  /// Makes `pending` the next non-empty block, checking where libarchive says it belongs.
  private func fillPending() throws(ArchiveError) {
    while pending == nil && !blocksDone {
      var bytes: UnsafeRawPointer? = nil
      var count = 0
      var offset: la_int64_t = 0
      let status = archive_read_data_block(handle, &bytes, &count, &offset)
      if status == ArchiveStatus.eof {
        blocksDone = true
        return
      }
      if status == ArchiveStatus.warn {
        recordWarning(currentPath)
      } else if status != ArchiveStatus.ok {
        throw failure(status, .readData)
      }
      guard count > 0, let bytes else { continue }
      // A hostile sparse map could make libarchive go back over data it gave, or past the size.
      let limit = currentIsSparse ? currentSize : Int64.max
      guard offset >= delivered, offset <= limit, Int64(count) <= limit - offset else {
        state = .failed
        throw ArchiveError(
          kind: .badData, operation: .readData, archive: name, entryPath: currentPath,
          message: currentIsSparse
            ? "its sparse map puts data out of order, twice, or past the member's size (\(currentSize) bytes)"
            : "libarchive delivered its data out of order")
      }
      if !currentIsSparse && offset != delivered {
        state = .failed
        throw ArchiveError(
          kind: .badData, operation: .readData, archive: name, entryPath: currentPath,
          message: "a member that is not sparse has a gap in its data")
      }
      pending = (bytes, count, offset)
    }
  }

  /// All of the current member's remaining data, in memory: for small members (property lists,
  /// tests). Stream large ones with `readData(into:)`. Uses `archive_read_data`.
  public func readAllData() throws(ArchiveError) -> [UInt8] {
    var result: [UInt8] = []
    let chunk = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 * 1024, alignment: 16)
    defer { chunk.deallocate() }
    while true {
      let count = try readData(into: chunk)
      if count == 0 { return result }
      result.append(contentsOf: chunk[0..<count])
    }
  }

  /// Skips the rest of the current member's data (seeking when the file allows).
  ///
  /// Uses `archive_read_data_skip`.
  public func skipData() throws(ArchiveError) {
    guard state == .inEntry else { throw stateError(.skipData) }
    pending = nil
    let status = archive_read_data_skip(handle)
    if status == ArchiveStatus.warn {
      recordWarning(currentPath)
    } else if status != ArchiveStatus.ok {
      throw failure(status, .skipData)
    }
    blocksDone = true
  }

  private func recordWarning(_ path: [UInt8]?) {
    let message =
      archive_error_string(handle).map { String(cString: $0) } ?? "libarchive warned without a reason"
    archive_clear_error(handle)
    // A name that is not valid UTF-8 (GNU tar stores such names in pax records as they are):
    // libarchive keeps its raw bytes, which is exactly what appbox wants. Not damage.
    if message.hasSuffix("can't be converted from UTF-8 to current locale.") { return }
    warnings.append(ArchiveWarning(entryPath: path, message: message))
  }

  private func stateError(_ operation: ArchiveError.Operation) -> ArchiveError {
    let failed = state == .failed
    return ArchiveError(
      kind: failed ? .badData : .invalidArgument, operation: operation, archive: name, entryPath: currentPath,
      message: failed ? "the archive could not be read earlier" : "no entry is current")
  }

  /// Classifies a libarchive failure: a failed `read(2)`/`lseek(2)` is `.io`; anything else is bad
  /// data (truncated, corrupt, or not a tar archive at all). Either way the reader stops.
  private func failure(_ status: Int32, _ operation: ArchiveError.Operation) -> ArchiveError {
    state = .failed
    let path = operation == .readHeader ? nil : currentPath
    if let streamError = source.streamError {
      return ArchiveError(
        kind: (streamError as? any AppboxFailure)?.kind ?? .io, operation: operation, archive: name,
        entryPath: path, message: "\(streamError)")
    }
    if let code = source.failure {
      return ArchiveError(
        kind: .io, operation: operation, archive: name, entryPath: path,
        message: "reading the archive failed", errno: code)
    }
    var error = ArchiveError.fromLibarchive(
      handle, kind: .badData, operation: operation, archive: name, entryPath: path,
      fallback: fallbackReason(operation))
    if let program = Self.missingProgram(in: error.message) {
      error.kind = .unavailable
      error.message =
        "it is compressed with a format that needs the program '\(program)', which could not be run "
        + "(install it, or decompress the archive first)"
      return error
    }
    if error.message.hasPrefix("Child process exited") {
      error.message =
        "the program that decompresses \(filter.name) failed (\(error.message)): the data is damaged"
      return error
    }
    if operation == .open || (operation == .readHeader && entriesRead == 0 && archive_format(handle) == 0) {
      error.message = "not a tar archive (\(error.message))"
    }
    return error
  }

  /// A reason for a failure libarchive gave no message for (it has none for a header cut short
  /// by the end of the input, for one).
  private func fallbackReason(_ operation: ArchiveError.Operation) -> String {
    if source.reachedEnd {
      switch operation {
      case .readHeader:
        return "the archive is truncated: it ends inside the header of member \(entriesRead + 1)"
      case .readData, .skipData:
        return "the archive is truncated: it ends inside this member's data"
      default:
        return "the archive is truncated"
      }
    }
    return "the archive is damaged (libarchive stopped without a reason)"
  }

  /// The outside program a filter could not start, from libarchive's message
  /// (`Can't initialize filter; unable to run program "grzip -d"`).
  static func missingProgram(in message: String) -> String? {
    guard let marker = message.range(of: "unable to run program \"") else { return nil }
    let command = message[marker.upperBound...].prefix { $0 != "\"" }
    return command.split(separator: " ").first.map(String.init)
  }
}
