import Glibc

/// A POSIX error number with spelled-out names, so `catch let e as SystemError where e.errno == .noEntry` reads well.
public struct Errno: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
  public let rawValue: Int32
  public init(rawValue: Int32) { self.rawValue = rawValue }

  /// The calling thread's current `errno`.
  public static var current: Errno { Errno(rawValue: Glibc.errno) }

  public static let notPermitted = Errno(rawValue: EPERM)
  public static let noEntry = Errno(rawValue: ENOENT)
  public static let interrupted = Errno(rawValue: EINTR)
  public static let ioError = Errno(rawValue: EIO)
  public static let badDescriptor = Errno(rawValue: EBADF)
  public static let wouldBlock = Errno(rawValue: EWOULDBLOCK)
  public static let permissionDenied = Errno(rawValue: EACCES)
  public static let exists = Errno(rawValue: EEXIST)
  public static let crossDevice = Errno(rawValue: EXDEV)
  public static let notDirectory = Errno(rawValue: ENOTDIR)
  public static let isDirectory = Errno(rawValue: EISDIR)
  public static let invalidArgument = Errno(rawValue: EINVAL)
  public static let noSpace = Errno(rawValue: ENOSPC)
  public static let readOnlyFileSystem = Errno(rawValue: EROFS)
  public static let tooManyLinks = Errno(rawValue: ELOOP)
  public static let nameTooLong = Errno(rawValue: ENAMETOOLONG)
  public static let notEmpty = Errno(rawValue: ENOTEMPTY)
  public static let noSystemCall = Errno(rawValue: ENOSYS)
  public static let noData = Errno(rawValue: ENODATA)
  public static let notSupported = Errno(rawValue: EOPNOTSUPP)
  public static let quotaExceeded = Errno(rawValue: EDQUOT)
  /// ENOKEY: the file is encrypted and its key is not in the kernel (a locked device).
  public static let keyNotAvailable = Errno(rawValue: ENOKEY)
  public static let notTTY = Errno(rawValue: ENOTTY)
  public static let noDeviceOrAddress = Errno(rawValue: ENXIO)

  /// `strerror`'s text in lower case, as in "no such file or directory".
  public var description: String {
    guard let text = strerror(rawValue) else { return "errno \(rawValue)" }
    let message = String(cString: text)
    return message.prefix(1).lowercased() + message.dropFirst()
  }
}

/// Retries a system call while it fails with EINTR. Never use it for `close(2)`.
@inline(__always)
func retryingOnInterrupt<T: BinaryInteger>(_ call: () -> T) -> T {
  while true {
    let result = call()
    if result >= 0 || Glibc.errno != EINTR { return result }
  }
}
