// libarchive's client callbacks over a file descriptor the caller owns, or over a stream
// object (`ArchiveInput`, `ArchiveOutput`: a repository's sealed or remote archives).
//
// We use our own callbacks instead of `archive_write_open_fd` / `archive_read_open_fd` so that
// (1) a failure of the descriptor itself is told apart from malformed data: the callback records
// the errno, and the reader and writer report `.io` for those and `.badData` / `.invalidArgument`
// for everything libarchive decides on its own (a stream's own error is kept whole and reported
// as it is); and (2) the reader can start at any byte offset of an uncompressed archive. The
// descriptor is never closed here.

import AppboxCore
import CArchive

#if canImport(Glibc)
  import Glibc
#endif

/// Where an archive's bytes go when they do not go to a file descriptor.
public protocol ArchiveOutput: AnyObject {
  /// Takes all of `bytes`, or throws (the writer then reports that error).
  func write(_ bytes: UnsafeRawBufferPointer) throws
}

/// Where an archive's bytes come from when not from a file descriptor.
public protocol ArchiveInput: AnyObject {
  /// Copies the next bytes into `buffer`; returns how many, 0 at the end.
  func read(into buffer: UnsafeMutableRawBufferPointer) throws -> Int
  /// Moves `count` bytes forward without delivering them, when that is cheaper than reading
  /// them; returns false to have them read and dropped instead.
  func skip(_ count: Int64) throws -> Bool
}

/// The write side: hands libarchive's blocks to `write(2)` or to an `ArchiveOutput`.
final class DescriptorSink {
  let fd: Int32
  let output: ArchiveOutput?
  /// The errno of the first failed `write(2)` (EIO for a failed output), if any.
  fileprivate(set) var failure: Int32?
  /// What the output threw, kept to be reported as it is.
  fileprivate(set) var streamError: (any Error)?
  /// Sees every block before it is written (e.g. to checksum the archive as it is made).
  let observer: ((UnsafeRawBufferPointer) -> Void)?
  /// For a framed archive: takes libarchive's uncompressed bytes and delivers zstd frames.
  var framer: FrameWriter?

  init(fd: Int32, observer: ((UnsafeRawBufferPointer) -> Void)? = nil) {
    self.fd = fd
    self.output = nil
    self.observer = observer
  }

  init(output: ArchiveOutput, observer: ((UnsafeRawBufferPointer) -> Void)? = nil) {
    self.fd = -1
    self.output = output
    self.observer = observer
  }

  /// Hands `buffer` to the observer, then writes it; returns an errno when that failed.
  func deliver(_ buffer: UnsafeRawBufferPointer) -> Int32? {
    observer?(buffer)
    return write(buffer)
  }

  /// Writes all of `buffer`, retrying on EINTR and short writes. Uses `write(2)`.
  fileprivate func write(_ buffer: UnsafeRawBufferPointer) -> Int32? {
    if let output {
      do {
        try output.write(buffer)
        return nil
      } catch {
        if streamError == nil { streamError = error }
        return EIO
      }
    }
    var done = 0
    while done < buffer.count {
      let count = Glibc.write(fd, buffer.baseAddress! + done, buffer.count - done)
      if count < 0 {
        if errno == EINTR { continue }
        return errno
      }
      if count == 0 { return EIO }
      done += count
    }
    return nil
  }

  /// Keeps the first failure's errno.
  func record(_ code: Int32) {
    if failure == nil { failure = code }
  }

  /// Connects `handle` to this sink; `self` must outlive the archive.
  ///
  /// Uses `archive_write_open2`.
  func open(_ handle: OpaquePointer) -> Int32 {
    let context = Unmanaged.passUnretained(self).toOpaque()
    return archive_write_open2(handle, context, nil, writeCallback, nil, nil)
  }
}

private func writeCallback(
  _ handle: OpaquePointer?, _ context: UnsafeMutableRawPointer?, _ buffer: UnsafeRawPointer?,
  _ length: Int
) -> la_ssize_t {
  let sink = Unmanaged<DescriptorSink>.fromOpaque(context!).takeUnretainedValue()
  let block = UnsafeRawBufferPointer(start: buffer, count: length)
  if let code = sink.framer.map({ $0.write(block) }) ?? sink.deliver(block) {
    sink.record(code)
    appbox_archive_set_error(handle, code, "write to the archive failed")
    return -1
  }
  return la_ssize_t(length)
}

/// The read side: `read(2)` into a private buffer, `lseek(2)` to skip when the descriptor can seek;
/// or an `ArchiveInput`'s reads and skips.
final class DescriptorSource {
  let fd: Int32
  let input: ArchiveInput?
  /// The errno of the first failed `read(2)` or `lseek(2)` (EIO for a failed input), if any.
  fileprivate(set) var failure: Int32?
  /// What the input threw, kept to be reported as it is.
  fileprivate(set) var streamError: (any Error)?
  /// Whether a `read(2)` found the end of the input (to tell truncation from other damage).
  fileprivate(set) var reachedEnd = false
  fileprivate let buffer: UnsafeMutableRawBufferPointer
  fileprivate let canSeek: Bool
  /// Bytes read ahead by `prefetch` into `buffer`, handed to libarchive by the first read.
  fileprivate var prefetched = 0

  /// Prepares reading `fd` from `offset` (nil: from where the descriptor is now).
  ///
  /// Uses `lseek(2)`.
  init(fd: Int32, startingAt offset: Int64?) throws(ArchiveError) {
    self.fd = fd
    self.input = nil
    // 64 KiB: a few tar records per read(2) without holding much memory.
    buffer = .allocate(byteCount: 64 * 1024, alignment: 16)
    var stats = stat()
    canSeek = fstat(fd, &stats) == 0 && (stats.st_mode & Glibc.S_IFMT) == Glibc.S_IFREG
    if let offset, lseek(fd, off_t(offset), SEEK_SET) < 0 {
      let code = errno
      buffer.deallocate()
      throw ArchiveError(
        kind: offset < 0 ? .invalidArgument : .io, operation: .open, archive: "descriptor \(fd)",
        message: "cannot seek to offset \(offset)", errno: code)
    }
  }

  /// Reads from `input`, which is where the archive (or the member it starts at) begins.
  init(input: ArchiveInput) {
    self.fd = -1
    self.input = input
    buffer = .allocate(byteCount: 64 * 1024, alignment: 16)
    canSeek = true
  }

  deinit { buffer.deallocate() }

  /// One read into the private buffer at `offset`: `read(2)`, or the input's. Returns -1
  /// with `failure` (and `streamError`) set when it failed.
  fileprivate func fill(at offset: Int) -> Int {
    let room = UnsafeMutableRawBufferPointer(rebasing: buffer[offset...])
    if let input {
      do {
        return try input.read(into: room)
      } catch {
        if streamError == nil { streamError = error }
        if failure == nil { failure = EIO }
        return -1
      }
    }
    while true {
      let count = read(fd, room.baseAddress, room.count)
      if count >= 0 { return count }
      if errno == EINTR { continue }
      if failure == nil { failure = errno }
      return -1
    }
  }

  /// Reads the start of the input (up to `minimum` bytes, fewer at the end) without losing it:
  /// libarchive's first read gets these bytes. Uses `read(2)`.
  func prefetch(minimum: Int) throws(ArchiveError) -> [UInt8] {
    while prefetched < min(minimum, buffer.count) {
      let count = fill(at: prefetched)
      if count < 0 {
        if let streamError {
          throw ArchiveError(
            kind: (streamError as? any AppboxFailure)?.kind ?? .io, operation: .open, archive: "input",
            message: "\(streamError)")
        }
        throw ArchiveError(
          kind: .io, operation: .open, archive: "descriptor \(fd)", message: "reading the archive failed",
          errno: failure)
      }
      if count == 0 {
        reachedEnd = true
        break
      }
      prefetched += count
    }
    return Array(UnsafeRawBufferPointer(rebasing: buffer[0..<prefetched]))
  }

  /// Connects `handle` to this source; `self` must outlive the archive.
  ///
  /// Uses `archive_read_set_callback_data`, `archive_read_set_read_callback`,
  /// `archive_read_set_skip_callback` and `archive_read_open1`.
  func open(_ handle: OpaquePointer) -> Int32 {
    let context = Unmanaged.passUnretained(self).toOpaque()
    archive_read_set_callback_data(handle, context)
    archive_read_set_read_callback(handle, readCallback)
    archive_read_set_skip_callback(handle, skipCallback)
    return archive_read_open1(handle)
  }
}

private func readCallback(
  _ handle: OpaquePointer?, _ context: UnsafeMutableRawPointer?,
  _ output: UnsafeMutablePointer<UnsafeRawPointer?>?
) -> la_ssize_t {
  let source = Unmanaged<DescriptorSource>.fromOpaque(context!).takeUnretainedValue()
  output?.pointee = UnsafeRawPointer(source.buffer.baseAddress)
  if source.prefetched > 0 {
    defer { source.prefetched = 0 }
    return la_ssize_t(source.prefetched)
  }
  let count = source.fill(at: 0)
  if count == 0 { source.reachedEnd = true }
  if count >= 0 { return la_ssize_t(count) }
  appbox_archive_set_error(handle, source.failure ?? EIO, "read from the archive failed")
  return -1
}

private func skipCallback(
  _ handle: OpaquePointer?, _ context: UnsafeMutableRawPointer?, _ request: la_int64_t
) -> la_int64_t {
  let source = Unmanaged<DescriptorSource>.fromOpaque(context!).takeUnretainedValue()
  // Returning 0 tells libarchive to read and discard instead (pipes, or nothing to skip).
  guard source.canSeek, request > 0, source.prefetched == 0 else { return 0 }
  if let input = source.input {
    do {
      return try input.skip(request) ? request : 0
    } catch {
      if source.streamError == nil { source.streamError = error }
      if source.failure == nil { source.failure = EIO }
      appbox_archive_set_error(handle, EIO, "seek in the archive failed")
      return -1
    }
  }
  if lseek(source.fd, off_t(request), SEEK_CUR) < 0 {
    let code = errno
    if source.failure == nil { source.failure = code }
    appbox_archive_set_error(handle, code, "seek in the archive failed")
    return -1
  }
  // Skipping past the end is fine: the next read returns 0 and libarchive reports truncation.
  return request
}
