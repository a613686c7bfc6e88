import Foundation
import CSystem
import Glibc

/// The lock was held by someone else for longer than the caller would wait.
public struct LockBusyError: AppboxFailure {
  public var what: String
  public var path: String
  public var kind: FailureKind { .busy }
  public var description: String { "\(what) is busy: another appbox process holds \(path); try again" }
}

/// An advisory `flock(2)` lock on a file, released when the object is released.
///
/// Released explicitly (`LOCK_UN`) before the descriptor is closed: a child forked by another
/// thread and not yet exec'd shares the open file description (O_CLOEXEC only closes it at the
/// exec), and a close alone would leave the lock held by that child for as long as it lingers.
public final class FileLock: @unchecked Sendable {
  public let descriptor: FileDescriptor
  public let path: String

  private init(descriptor: FileDescriptor, path: String) {
    self.descriptor = descriptor
    self.path = path
  }

  deinit {
    _ = appbox_flock(descriptor.rawValue, LOCK_UN)
    descriptor.close()
  }

  /// Takes the lock at `path` (creating the file), waiting up to `timeout`; throws
  /// `LockBusyError` naming `what` when it stays taken. Uses `flock(2)`.
  public static func acquire(
    _ path: String, exclusive: Bool = true, timeout: Duration = .seconds(3), what: String
  )
    throws -> FileLock
  {
    let fd = try FileDescriptor.open(path, O_RDWR | O_CREAT, mode: 0o600)
    let operation = (exclusive ? LOCK_EX : LOCK_SH) | LOCK_NB
    let deadline = ContinuousClock.now + timeout
    while true {
      if appbox_flock(fd.rawValue, operation) == 0 { return FileLock(descriptor: fd, path: path) }
      let errno = Errno.current
      guard errno == .wouldBlock || errno == .interrupted else {
        fd.close()
        throw SystemError("lock", path: path, errno: errno)
      }
      if ContinuousClock.now >= deadline {
        fd.close()
        throw LockBusyError(what: what, path: path)
      }
      usleep(20_000)
    }
  }

  /// Takes the lock only if it is free right now; nil when someone holds it.
  public static func attempt(_ path: String, exclusive: Bool = true) throws -> FileLock? {
    let fd = try FileDescriptor.open(path, O_RDWR | O_CREAT, mode: 0o600)
    if appbox_flock(fd.rawValue, (exclusive ? LOCK_EX : LOCK_SH) | LOCK_NB) == 0 {
      return FileLock(descriptor: fd, path: path)
    }
    let errno = Errno.current
    fd.close()
    if errno == .wouldBlock { return nil }
    throw SystemError("lock", path: path, errno: errno)
  }

  /// Turns an exclusive lock into a shared one (or back). Uses `flock(2)`.
  public func convert(exclusive: Bool) throws {
    guard appbox_flock(descriptor.rawValue, exclusive ? LOCK_EX : LOCK_SH) == 0 else {
      throw SystemError("lock", path: path)
    }
  }
}
