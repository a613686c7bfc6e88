import CSystem
import Foundation
import Glibc

/// An open file descriptor. It does not close itself: pair every open with `close()`
/// or use `closeAfter(_:)`. Every call retries on EINTR (except `close`) and throws
/// `SystemError` naming the operation.
public struct FileDescriptor: Hashable, Sendable {
  public let rawValue: Int32
  public init(rawValue: Int32) { self.rawValue = rawValue }

  /// The current directory, for the `*at` calls.
  public static let currentDirectory = FileDescriptor(rawValue: AT_FDCWD)

  /// Opens `path` (relative paths against the current directory). Always adds `O_CLOEXEC`.
  /// Uses `open(2)`.
  public static func open(_ path: String, _ flags: Int32, mode: mode_t = 0o644) throws -> FileDescriptor {
    try currentDirectory.open(path, flags, mode: mode)
  }

  /// Opens `name` relative to this directory. Always adds `O_CLOEXEC`. Uses `openat(2)`.
  public func open(_ name: String, _ flags: Int32, mode: mode_t = 0o644, displayPath: String? = nil) throws
    -> FileDescriptor
  {
    let fd = retryingOnInterrupt { Glibc.openat(rawValue, name, flags | O_CLOEXEC, mode) }
    guard fd >= 0 else { throw SystemError("open", path: displayPath ?? name) }
    return FileDescriptor(rawValue: fd)
  }

  /// Opens a directory entry by raw name bytes (names need not be UTF-8). Uses `openat(2)`.
  public func open(rawName: [UInt8], _ flags: Int32, mode: mode_t = 0o644) throws -> FileDescriptor {
    let fd = withCName(rawName) { name in
      retryingOnInterrupt { Glibc.openat(rawValue, name, flags | O_CLOEXEC, mode) }
    }
    guard fd >= 0 else { throw SystemError("open", path: String(decoding: rawName, as: UTF8.self)) }
    return FileDescriptor(rawValue: fd)
  }

  /// Closes the descriptor, ignoring errors (there is nothing useful to do; data that
  /// matters is fsynced first). Uses `close(2)`.
  public func close() { _ = Glibc.close(rawValue) }

  /// Runs `body`, then closes the descriptor whether or not it threw.
  public func closeAfter<R>(_ body: (FileDescriptor) throws -> R) rethrows -> R {
    defer { close() }
    return try body(self)
  }

  /// Reads up to `buffer.count` bytes; returns 0 at end of file. Uses `read(2)`.
  public func read(into buffer: UnsafeMutableRawBufferPointer) throws -> Int {
    let n = retryingOnInterrupt { Glibc.read(rawValue, buffer.baseAddress, buffer.count) }
    guard n >= 0 else { throw SystemError("read") }
    return n
  }

  /// Reads the whole file from the current position, refusing files larger than `limit`.
  /// Uses `read(2)`.
  public func readAll(limit: Int = 1 << 30) throws -> [UInt8] {
    var result: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 64 * 1024)
    while true {
      let n = try chunk.withUnsafeMutableBytes { try read(into: $0) }
      if n == 0 { return result }
      result.append(contentsOf: chunk[0..<n])
      if result.count > limit { throw SystemError("read", errno: Errno(rawValue: EFBIG)) }
    }
  }

  /// Writes all of `buffer`, looping over short writes. Uses `write(2)`.
  public func writeAll(_ buffer: UnsafeRawBufferPointer) throws {
    var offset = 0
    while offset < buffer.count {
      let n = retryingOnInterrupt {
        Glibc.write(rawValue, buffer.baseAddress! + offset, buffer.count - offset)
      }
      guard n >= 0 else { throw SystemError("write") }
      offset += n
    }
  }

  public func writeAll<Bytes: ContiguousBytes>(_ bytes: Bytes) throws {
    try bytes.withUnsafeBytes { try writeAll($0) }
  }

  /// The status of the open file. Uses `fstat(2)`.
  public func status() throws -> FileStatus {
    var st = stat()
    guard Glibc.fstat(rawValue, &st) == 0 else { throw SystemError("stat") }
    return FileStatus(st)
  }

  /// The status of `name` in this directory, not following a final symlink. Uses `fstatat(2)`.
  public func status(of name: String, followSymlinks: Bool = false) throws -> FileStatus {
    var st = stat()
    let flags = followSymlinks ? 0 : AT_SYMLINK_NOFOLLOW
    guard Glibc.fstatat(rawValue, name, &st, flags) == 0 else { throw SystemError("stat", path: name) }
    return FileStatus(st)
  }

  /// Like `status(of:)`, returning nil when the entry does not exist.
  public func statusIfPresent(of name: String) throws -> FileStatus? {
    do { return try status(of: name) } catch let error as SystemError where error.errno == .noEntry {
      return nil
    }
  }

  /// Flushes the file's data and metadata to stable storage. Uses `fsync(2)`.
  public func sync() throws {
    guard retryingOnInterrupt({ Glibc.fsync(rawValue) }) == 0 else { throw SystemError("sync") }
  }

  /// Truncates or extends the file. Uses `ftruncate(2)`.
  public func truncate(to size: Int64) throws {
    guard retryingOnInterrupt({ Glibc.ftruncate(rawValue, off_t(size)) }) == 0 else {
      throw SystemError("truncate")
    }
  }

  /// Moves the file offset. Uses `lseek(2)`.
  @discardableResult
  public func seek(to offset: Int64) throws -> Int64 {
    let result = Glibc.lseek(rawValue, off_t(offset), SEEK_SET)
    guard result >= 0 else { throw SystemError("seek") }
    return Int64(result)
  }

  /// Changes permission bits. Uses `fchmod(2)`.
  public func setPermissions(_ mode: mode_t) throws {
    guard Glibc.fchmod(rawValue, mode) == 0 else { throw SystemError("change mode") }
  }

  /// Changes the owner and group. Uses `fchown(2)`.
  public func setOwner(_ uid: UInt32, _ gid: UInt32) throws {
    guard Glibc.fchown(rawValue, uid, gid) == 0 else { throw SystemError("change the owner of") }
  }

  /// Sets access and modification times. Uses `futimens(2)`.
  public func setTimes(access: Timespec, modification: Timespec) throws {
    var times = [access.timespec, modification.timespec]
    guard Glibc.futimens(rawValue, &times) == 0 else { throw SystemError("set times") }
  }

  /// Creates directory `name` here. Uses `mkdirat(2)`.
  public func makeDirectory(_ name: String, mode: mode_t = 0o755) throws {
    guard Glibc.mkdirat(rawValue, name, mode) == 0 else { throw SystemError("create directory", path: name) }
  }

  /// Removes file or symlink `name` here (a directory with `directory: true`). Uses `unlinkat(2)`.
  public func remove(_ name: String, directory: Bool = false) throws {
    guard Glibc.unlinkat(rawValue, name, directory ? AT_REMOVEDIR : 0) == 0 else {
      throw SystemError("remove", path: name)
    }
  }

  /// Renames `name` here to `newName` in `directory`, replacing it if it exists
  /// (or with `flags` from renameat2: noReplace, exchange). Uses `renameat2(2)`.
  public func rename(
    _ name: String, to newName: String, in directory: FileDescriptor? = nil,
    flags: RenameFlags = []
  ) throws {
    let target = (directory ?? self).rawValue
    guard appbox_renameat2(rawValue, name, target, newName, flags.rawValue) == 0 else {
      throw SystemError("rename", path: name)
    }
  }

  /// The target of symlink `name`, as raw bytes. Uses `readlinkat(2)`.
  public func readLink(_ name: String) throws -> [UInt8] {
    var buffer = [UInt8](repeating: 0, count: Int(PATH_MAX) + 1)
    let n = buffer.withUnsafeMutableBufferPointer { p in
      p.baseAddress!.withMemoryRebound(to: CChar.self, capacity: p.count) {
        Glibc.readlinkat(rawValue, name, $0, p.count)
      }
    }
    guard n >= 0 else { throw SystemError("read link", path: name) }
    return Array(buffer[0..<n])
  }

  /// Creates a symlink `name` here pointing at `target`. Uses `symlinkat(2)`.
  public func makeSymlink(_ name: String, target: String) throws {
    guard Glibc.symlinkat(target, rawValue, name) == 0 else {
      throw SystemError("create symlink", path: name)
    }
  }

  /// A new pipe, both ends close-on-exec. Uses `pipe2(2)`.
  public static func pipe() throws -> (read: FileDescriptor, write: FileDescriptor) {
    var fds: [Int32] = [0, 0]
    guard appbox_pipe_cloexec(&fds) == 0 else { throw SystemError("create pipe") }
    return (FileDescriptor(rawValue: fds[0]), FileDescriptor(rawValue: fds[1]))
  }

  /// Duplicates the descriptor (close-on-exec). Uses `fcntl(F_DUPFD_CLOEXEC)`.
  public func duplicate() throws -> FileDescriptor {
    let fd = Glibc.fcntl(rawValue, F_DUPFD_CLOEXEC, 0)
    guard fd >= 0 else { throw SystemError("duplicate descriptor") }
    return FileDescriptor(rawValue: fd)
  }
}

/// Flags for `renameat2(2)`.
public struct RenameFlags: OptionSet, Sendable {
  public let rawValue: UInt32
  public init(rawValue: UInt32) { self.rawValue = rawValue }
  /// Fail with EEXIST instead of replacing the destination.
  public static let noReplace = RenameFlags(rawValue: APPBOX_RENAME_NOREPLACE)
  /// Atomically swap source and destination.
  public static let exchange = RenameFlags(rawValue: APPBOX_RENAME_EXCHANGE)
}
