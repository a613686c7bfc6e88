import Glibc

/// An open file descriptor that owns itself: it closes when it goes out of scope, and
/// `close()` consumes it, so a second close (or a use after close) does not compile.
///
/// `FileDescriptor` is the plain, copyable handle every system call wrapper takes; an owned
/// descriptor lends one through `borrowed` for the length of a call. Code that must hand
/// ownership to something else (a C library, a long-lived object) calls `release()` and
/// takes on closing it.
///
///     let file = try OwnedFileDescriptor.open(path, O_RDONLY)
///     let bytes = try file.borrowed.readAll()
///     // closed here, whichever way the scope is left
public struct OwnedFileDescriptor: ~Copyable {
  private let descriptor: FileDescriptor

  /// Takes ownership of `descriptor`: nothing else may close it now.
  public init(taking descriptor: FileDescriptor) { self.descriptor = descriptor }

  deinit { _ = Glibc.close(descriptor.rawValue) }

  /// The descriptor, for calls made while this value is alive. Do not close it and do not
  /// keep it beyond this value's lifetime.
  public var borrowed: FileDescriptor { descriptor }

  /// The raw number, for C calls made while this value is alive.
  public var rawValue: Int32 { descriptor.rawValue }

  /// Closes the descriptor now, ignoring errors (data that matters is fsynced first).
  /// Uses `close(2)`.
  public consuming func close() {}  // deinit runs when `self` is consumed

  /// Gives up ownership without closing: the caller must close the result.
  public consuming func release() -> FileDescriptor {
    let descriptor = self.descriptor
    discard self
    return descriptor
  }

  /// Opens `path` (relative paths against the current directory). Always adds `O_CLOEXEC`.
  /// Uses `open(2)`.
  public static func open(_ path: String, _ flags: Int32, mode: mode_t = 0o644) throws -> OwnedFileDescriptor
  {
    OwnedFileDescriptor(taking: try FileDescriptor.open(path, flags, mode: mode))
  }
}

extension FileDescriptor {
  /// Opens `name` relative to this directory and returns it owned. Uses `openat(2)`.
  public func openOwned(_ name: String, _ flags: Int32, mode: mode_t = 0o644, displayPath: String? = nil)
    throws
    -> OwnedFileDescriptor
  {
    OwnedFileDescriptor(taking: try open(name, flags, mode: mode, displayPath: displayPath))
  }

  /// Opens a directory entry by raw name bytes and returns it owned. Uses `openat(2)`.
  public func openOwned(rawName: [UInt8], _ flags: Int32, mode: mode_t = 0o644) throws -> OwnedFileDescriptor
  {
    OwnedFileDescriptor(taking: try open(rawName: rawName, flags, mode: mode))
  }

  /// A duplicate of this descriptor, owned. Uses `fcntl(F_DUPFD_CLOEXEC)`.
  public func duplicateOwned() throws -> OwnedFileDescriptor {
    OwnedFileDescriptor(taking: try duplicate())
  }
}
