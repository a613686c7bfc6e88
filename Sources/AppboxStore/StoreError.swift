import AppboxCore
import CSQLite
import Glibc

/// A failed SQLite call: the result code, SQLite's own message, the SQL being run and the
/// database path, so one line says what failed, where and why.
public struct StoreError: AppboxFailure {
  /// The extended result code (`SQLITE_IOERR_READ`, `SQLITE_CONSTRAINT_UNIQUE`, ...).
  /// Connections enable extended codes, so this is as precise as SQLite can be.
  public let extendedCode: Int32
  /// SQLite's message for the failure (`sqlite3_errmsg`), or appbox's own for checks it makes.
  public let message: String
  /// The statement that failed, when a statement was involved.
  public let sql: String?
  /// The database file, as given to `Database.init(path:)`.
  public let path: String
  /// What was being attempted: "open database", "execute statement", "migrate to version 3".
  public let operation: String
  /// The `errno` SQLite's OS layer saw, kept for open and I/O failures only.
  public let systemErrno: Int32?
  public let kind: FailureKind

  /// The primary result code (`SQLITE_BUSY`, `SQLITE_CORRUPT`, ...).
  public var code: Int32 { extendedCode & 0xFF }

  /// Makes an error; `kind` defaults to the classification of `extendedCode`.
  public init(
    extendedCode: Int32, message: String, sql: String?, path: String, operation: String,
    systemErrno: Int32? = nil, kind: FailureKind? = nil
  ) {
    self.extendedCode = extendedCode
    self.message = message
    self.sql = sql
    self.path = path
    self.operation = operation
    self.systemErrno = systemErrno
    self.kind = kind ?? StoreError.kind(forResultCode: extendedCode, systemErrno: systemErrno)
  }

  /// Classifies a result code. `SQLITE_CANTOPEN` alone cannot tell a missing file from a
  /// refused one, so the OS `errno` decides between `.notFound`, `.denied` and `.cannotCreate`.
  public static func kind(forResultCode resultCode: Int32, systemErrno: Int32? = nil) -> FailureKind {
    switch resultCode & 0xFF {
    case SQLITE_BUSY, SQLITE_LOCKED:
      return .busy
    case SQLITE_CORRUPT, SQLITE_NOTADB:
      return .badData
    case SQLITE_CANTOPEN:
      switch systemErrno {
      case EACCES, EPERM, EROFS: return .denied
      case ENOSPC, EDQUOT: return .io
      case ENOENT: return .notFound
      default: return .cannotCreate
      }
    case SQLITE_READONLY, SQLITE_PERM, SQLITE_AUTH:
      return .denied
    case SQLITE_CONSTRAINT:
      return .cannotCreate
    case SQLITE_RANGE, SQLITE_MISUSE:
      // A wrong parameter count or index, or API misuse: the caller's mistake, not the disk's.
      return .invalidArgument
    default:
      return .io
    }
  }

  /// One line: operation, path, message, code, and the SQL with whitespace collapsed.
  public var description: String {
    var line = "Unable to \(operation) on '\(path)': \(message) (SQLite code \(extendedCode))"
    if systemErrno == ENOSPC || systemErrno == EDQUOT {
      line += ": " + (systemErrno == ENOSPC ? "no space left on device" : "disk quota exceeded")
    }
    if let sql {
      line += "; SQL: \(StoreError.oneLine(sql, limit: 300))"
    }
    return line
  }

  private static func oneLine(_ text: String, limit: Int) -> String {
    let joined = text.split(whereSeparator: \.isWhitespace).joined(separator: " ")
    return joined.count > limit ? String(joined.prefix(limit)) + "…" : joined
  }
}

extension StoreError: SpaceAwareFailure {
  /// SQLITE_FULL, an I/O error whose errno is ENOSPC or EDQUOT, or a wal-index (`-shm`) that
  /// could not grow (SQLite extends it by writing, which a full file system refuses).
  public var isOutOfSpace: Bool {
    code == SQLITE_FULL || systemErrno == ENOSPC || systemErrno == EDQUOT
      || extendedCode == SQLITE_IOERR | (19 << 8)
  }
  public var spacePath: String? { path }
}
