import AppboxCore
import CArchive

#if canImport(Glibc)
  import Glibc
#endif

/// A failed archive operation: what was being done, to which archive and member, and why.
///
/// `kind` is `.badData` for input that is not a (valid, complete) tar archive, `.io` when reading
/// or writing the underlying file failed (`ENOSPC`, `EIO`, `EBADF`, ...), and `.invalidArgument`
/// when the caller misused the API (data beyond the declared size, a bad compression level).
public struct ArchiveError: AppboxFailure, Equatable {
  /// The step that failed.
  public enum Operation: String, Sendable, Equatable {
    case open = "open"
    case writeHeader = "write the header of"
    case writeData = "write data of"
    case finishEntry = "finish"
    case finish = "finish writing"
    case readHeader = "read the next header of"
    case readData = "read data of"
    case skipData = "skip data of"
  }

  public var kind: FailureKind
  public var operation: Operation
  /// The archive's path, or a description such as `descriptor 7`.
  public var archive: String
  /// The member being handled, when there is one.
  public var entryPath: [UInt8]?
  /// libarchive's message, or ours.
  public var message: String
  /// The system error number behind the failure, when there is one.
  public var errno: Int32?

  public init(
    kind: FailureKind, operation: Operation, archive: String, entryPath: [UInt8]? = nil,
    message: String, errno: Int32? = nil
  ) {
    self.kind = kind
    self.operation = operation
    self.archive = archive
    self.entryPath = entryPath
    self.message = message
    self.errno = errno
  }

  public var description: String {
    var text = "Unable to \(operation.rawValue) "
    if let entryPath {
      text += "'\(String(decoding: entryPath, as: UTF8.self))' in "
    }
    text += "archive '\(archive)': \(message)"
    if let errno, errno > 0 {
      let reason = String(cString: strerror(errno))
      if !message.contains(reason) { text += " (\(reason))" }
    }
    return text
  }
}

/// libarchive's `ARCHIVE_*` status codes, which import as plain `Int32` macros.
enum ArchiveStatus {
  static let eof = ARCHIVE_EOF
  static let ok = ARCHIVE_OK
  static let retry = ARCHIVE_RETRY
  static let warn = ARCHIVE_WARN
  static let failed = ARCHIVE_FAILED
  static let fatal = ARCHIVE_FATAL
}

extension ArchiveError {
  /// Builds an error from the state libarchive keeps for `handle`.
  ///
  /// Uses `archive_error_string` and `archive_errno`.
  static func fromLibarchive(
    _ handle: OpaquePointer, kind: FailureKind, operation: Operation, archive: String,
    entryPath: [UInt8]?, fallback: String
  ) -> ArchiveError {
    let message = archive_error_string(handle).map { String(cString: $0) } ?? fallback
    // libarchive's own codes reuse errno values with other meanings (ARCHIVE_ERRNO_FILE_FORMAT is
    // EILSEQ, ARCHIVE_ERRNO_PROGRAMMER is EINVAL, ARCHIVE_ERRNO_MISC is -1): keep them out so the
    // message does not gain a misleading strerror. Real system errors come from our callbacks.
    let code = archive_errno(handle)
    let isPseudo = code <= 0 || code == EILSEQ || code == EINVAL
    return ArchiveError(
      kind: kind, operation: operation, archive: archive, entryPath: entryPath, message: message,
      errno: isPseudo ? nil : code)
  }
}

extension ArchiveError: SpaceAwareFailure {
  public var isOutOfSpace: Bool { errno == ENOSPC || errno == EDQUOT }
  public var spacePath: String? { archive }
}
