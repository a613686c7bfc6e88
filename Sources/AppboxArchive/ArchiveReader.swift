// Reads tar archives (ustar, pax, GNU tar), optionally gzip/zstd/xz/bzip2-compressed, as a
// sequence of `ArchiveEntry` values and their data.
//
// Only libarchive's tar format reader is enabled, so zip, cpio, 7z, ISO images and raw data are
// refused with `.badData` "not a tar archive" instead of being read as something else. Archives
// are untrusted input: every libarchive failure becomes an `ArchiveError` (`.badData`, or `.io`
// when the descriptor itself failed) and the reader then refuses further calls; nothing here traps
// on malformed input. Paths are reported as raw bytes; making them safe to create on disk is the
// restorer's job (absolute paths and `..` are passed through for it to refuse).

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
  private var entriesRead = 0
  private var currentPath: [UInt8]?

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

  private init(
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
      // Enabled even when compression is not allowed, to name the compression in the refusal.
      // ARCHIVE_WARN means "will run the external program", which is fine.
      archive_read_support_filter_gzip(handle)
      archive_read_support_filter_zstd(handle)
      archive_read_support_filter_xz(handle)
      archive_read_support_filter_bzip2(handle)
    }
    let status = UTF8CharacterType.perform { source.open(handle) }
    if status != ArchiveStatus.ok { throw failure(status, .open) }
    if !allowCompressed && archive_filter_code(handle, 0) != ARCHIVE_FILTER_NONE {
      let filter = archive_filter_name(handle, 0).map { String(cString: $0) } ?? "compressed"
      throw ArchiveError(
        kind: .badData, operation: .open, archive: name,
        message: "the archive is \(filter)-compressed; an uncompressed tar archive is required")
    }
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
      let status = archive_read_next_header(handle, &libarchiveEntry)
      // ARCHIVE_WARN: a name that could not be converted keeps its raw bytes, which is what we want.
      // ARCHIVE_RETRY ("Damaged tar archive") would resynchronise past a corrupt header; an archive
      // from a backup has no business being damaged, so that is an error like any other.
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
    entriesRead += 1
    headerOffset = baseOffset + archive_read_header_position(handle)
    currentPath = entry.path
    state = .inEntry
    return entry
  }

  /// Copies the current member's next data bytes into `buffer`; returns 0 at the end of its data.
  /// A member cut short by the end of the file throws `.badData`.
  ///
  /// Uses `archive_read_data`.
  public func readData(into buffer: UnsafeMutableRawBufferPointer) throws(ArchiveError) -> Int {
    guard state == .inEntry else { throw stateError(.readData) }
    guard buffer.count > 0 else { return 0 }
    let count = archive_read_data(handle, buffer.baseAddress, buffer.count)
    if count < 0 { throw failure(Int32(truncatingIfNeeded: count), .readData) }
    return count
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
    let status = archive_read_data_skip(handle)
    if status != ArchiveStatus.ok { throw failure(status, .skipData) }
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
    if let code = source.failure {
      return ArchiveError(
        kind: .io, operation: operation, archive: name, entryPath: path,
        message: "reading the archive failed", errno: code)
    }
    var error = ArchiveError.fromLibarchive(
      handle, kind: .badData, operation: operation, archive: name, entryPath: path,
      fallback: "libarchive status \(status)")
    if operation == .open || (operation == .readHeader && entriesRead == 0 && archive_format(handle) == 0) {
      error.message = "not a tar archive (\(error.message))"
    }
    return error
  }
}
