import AppboxCore
import CSQLite
import Glibc
import Synchronization

/// Owns one `sqlite3*`. `Database` and every `Statement` hold a reference, so the handle is
/// closed only after the last statement prepared on it has been finalized.
final class Connection {
  let handle: OpaquePointer
  let path: String

  /// The wal-index (`-shm`) file, held open after its space was allocated (see
  /// `Database.preallocateWALIndex`): closed only after the handle, because closing any
  /// descriptor of a file drops the process's POSIX locks on it, SQLite's included.
  var walIndex: Int32 = -1
  /// Whether commits sync the WAL (`synchronous` FULL or EXTRA, SQLite's default): then a
  /// checkpoint that fails loses nothing (the WAL keeps what it could not copy).
  var commitsAreDurable = true
  /// How long a statement waits for another connection's lock (`sqlite3_busy_timeout`), in
  /// milliseconds; also bounds the retries of a journal-mode switch, which SQLite's busy
  /// handler does not cover.
  var busyTimeoutMilliseconds: Int32 = 0

  init(handle: OpaquePointer, path: String) {
    self.handle = handle
    self.path = path
  }

  /// Checkpoints the WAL first when this connection wrote (what closing would do, with its
  /// errors ignored), keeping a
  /// failure for `Database.takeCloseFailures()`: a checkpoint's fdatasync that fails is a
  /// write that did not reach the disk. Uses `sqlite3_wal_checkpoint_v2` and `sqlite3_close_v2`.
  deinit {
    // Only a connection that wrote: what others left in the WAL is theirs to checkpoint.
    if sqlite3_db_readonly(handle, "main") == 0 && sqlite3_total_changes64(handle) > 0 {
      let code = sqlite3_wal_checkpoint_v2(handle, nil, SQLITE_CHECKPOINT_PASSIVE, nil, nil)
      if code != SQLITE_OK && code & 0xFF != SQLITE_BUSY && code & 0xFF != SQLITE_LOCKED {
        CloseFailures.add(error(code, operation: "checkpoint the WAL", sql: nil), harmless: commitsAreDurable)
      }
    }
    sqlite3_close_v2(handle)
    if walIndex >= 0 { close(walIndex) }
  }

  /// The error for a failed call on this connection, with SQLite's current message.
  /// Uses `sqlite3_errmsg` and `sqlite3_system_errno`.
  func error(_ resultCode: Int32, operation: String, sql: String?) -> StoreError {
    StoreError.from(handle: handle, resultCode: resultCode, path: path, operation: operation, sql: sql)
  }

  /// An error appbox raises itself (no SQLite message to read).
  func error(
    _ resultCode: Int32, message: String, operation: String, sql: String?, kind: FailureKind? = nil
  ) -> StoreError {
    StoreError(
      extendedCode: resultCode, message: message, sql: sql, path: path, operation: operation, kind: kind)
  }
}

extension StoreError {
  /// Reads the message and, for open and I/O failures, the OS `errno` from a handle.
  /// Uses `sqlite3_errmsg` and `sqlite3_system_errno`.
  static func from(
    handle: OpaquePointer?, resultCode: Int32, path: String, operation: String, sql: String?
  ) -> StoreError {
    let message: String
    if let handle, let text = sqlite3_errmsg(handle) {
      message = String(cString: text)
    } else {
      message = String(cString: sqlite3_errstr(resultCode))
    }
    var systemErrno: Int32?
    let primary = resultCode & 0xFF
    if let handle, primary == SQLITE_CANTOPEN || primary == SQLITE_IOERR {
      let value = sqlite3_system_errno(handle)
      systemErrno = value == 0 ? nil : value
    }
    if primary == SQLITE_CANTOPEN, systemErrno == ENOENT, isFullFileSystem(creating: path) {
      // SQLite retries a failed create read-only, and keeps that attempt's errno: the file is
      // missing because there was no room to make it (it, or its -wal or -shm).
      systemErrno = ENOSPC
    }
    return StoreError(
      extendedCode: resultCode, message: message, sql: sql, path: path, operation: operation,
      systemErrno: systemErrno)
  }
}

/// Whether `path`'s directory exists while its file system has no inode or block left for
/// this process (so a file cannot be created there). Uses `statvfs(3)`.
private func isFullFileSystem(creating path: String) -> Bool {
  let directory = path.hasPrefix("/") ? String(path[..<(path.lastIndex(of: "/") ?? path.startIndex)]) : "."
  var info = statvfs()
  guard statvfs(directory.isEmpty ? "/" : directory, &info) == 0 else { return false }
  let root = geteuid() == 0
  let inodes = root ? info.f_ffree : info.f_favail
  let blocks = root ? info.f_bfree : info.f_bavail
  return (info.f_files > 0 && inodes == 0) || blocks == 0
}

/// Failures of connections as they closed (their checkpoints), kept for whoever reports.
enum CloseFailures {
  private static let failures = Mutex<[(error: StoreError, harmless: Bool)]>([])

  static func add(_ failure: StoreError, harmless: Bool) {
    failures.withLock { $0.append((failure, harmless)) }
  }

  static func take() -> [(error: StoreError, harmless: Bool)] {
    failures.withLock { failures in
      defer { failures.removeAll() }
      return failures
    }
  }
}
