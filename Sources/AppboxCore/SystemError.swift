/// A failed system call: the operation, the path it was about, and the errno.
///
/// Renders as "Unable to open 'Documents/a.txt': permission denied".
public struct SystemError: AppboxFailure, Equatable {
  /// What was being done, as a verb phrase: "open", "create directory", "rename".
  public var operation: String
  /// The path involved, as the user would recognise it (often relative to a home).
  public var path: String?
  public var errno: Errno

  public init(_ operation: String, path: String? = nil, errno: Errno = .current) {
    self.operation = operation
    self.path = path
    self.errno = errno
  }

  public var kind: FailureKind {
    switch errno {
    case .noEntry, .notDirectory: return .notFound
    case .permissionDenied, .notPermitted, .crossDevice, .tooManyLinks: return .denied
    case .exists, .notEmpty, .readOnlyFileSystem: return .cannotCreate
    case .wouldBlock: return .busy
    case .keyNotAvailable: return .unavailable
    case .invalidArgument, .nameTooLong, .isDirectory: return .invalidArgument
    default: return .io
    }
  }

  public var description: String {
    if let path { return "Unable to \(operation) '\(path)': \(errno)" }
    return "Unable to \(operation): \(errno)"
  }
}
