// AppboxStore owns SQLite: connections, statements, transactions and schema migrations.
// It is the only module that imports CSQLite; it depends on AppboxCore alone. Callers see
// `Database`, `Statement`, `SQLValue` and `StoreError`, never a C handle.
// (A README would be an unhandled resource for SwiftPM here, hence this note.)

import AppboxCore
import CSQLite
import Glibc

/// One SQLite connection to one database file.
///
/// Not thread-safe and deliberately not `Sendable`: the connection is opened with
/// `SQLITE_OPEN_NOMUTEX`, so each thread (or task) opens its own `Database`. SQLite's file
/// locking coordinates connections, including those of other processes.
///
/// Statements prepared on a database keep its connection alive; the handle is closed once
/// the `Database` and all of its statements are gone.
public final class Database {
  /// How to open the file.
  public enum Mode: Sendable {
    /// Read only; the file must exist.
    case readOnly
    /// Read and write; the file must exist.
    case readWrite
    /// Read and write, creating the file if it is missing.
    case readWriteCreate
  }

  /// `PRAGMA synchronous` levels.
  public enum Synchronous: String, Sendable {
    case off = "OFF"
    case normal = "NORMAL"
    case full = "FULL"
    case extra = "EXTRA"
  }

  /// How an outermost transaction takes its locks.
  public enum TransactionKind: String, Sendable {
    /// Take locks on first read or write.
    case deferred = "DEFERRED"
    /// Take the write lock now, so the transaction cannot fail later with `.busy` on upgrade.
    case immediate = "IMMEDIATE"
    /// Take the write lock now and, outside WAL mode, keep readers out.
    case exclusive = "EXCLUSIVE"
  }

  /// The path given at open.
  public let path: String

  let connection: Connection
  /// Statements returned by `cachedStatement(_:)`, by SQL text.
  private var statementCache: [String: Statement] = [:]
  /// Depth of `inTransaction` savepoints, used to name them uniquely.
  var savepointDepth = 0

  /// Opens (or creates) a database, enables foreign keys and extended result codes, sets the
  /// busy timeout, and reads the schema so that a file that is not a database (`.badData`)
  /// fails here rather than at first use. A failed open closes the half-opened handle.
  /// Read only on a full file system (the wal-index `-shm` cannot be made or grown there): the
  /// file is opened `immutable` when its WAL is empty, or with the wal-index in memory
  /// (`locking_mode = EXCLUSIVE`) when the WAL holds transactions; reading needs no space.
  /// Uses `sqlite3_open_v2` and `sqlite3_busy_timeout`.
  public init(path: String, mode: Mode = .readWriteCreate, busyTimeout: Duration = .seconds(5)) throws {
    var flags = SQLITE_OPEN_NOMUTEX
    switch mode {
    case .readOnly: flags |= SQLITE_OPEN_READONLY
    case .readWrite: flags |= SQLITE_OPEN_READWRITE
    case .readWriteCreate: flags |= SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE
    }
    let timeout = Database.busyTimeoutMilliseconds(busyTimeout)
    let connection: Connection
    do {
      connection = try Database.open(path, name: path, flags: flags, busyTimeout: timeout)
    } catch let error as StoreError where mode == .readOnly && error.isOutOfSpace {
      if Database.hasEmptyLog(path) {
        connection = try Database.open(
          Database.uri(path) + "?immutable=1", name: path, flags: flags | SQLITE_OPEN_URI,
          busyTimeout: timeout)
      } else {
        connection = try Database.open(
          path, name: path, flags: SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_READWRITE, busyTimeout: timeout,
          setup: "PRAGMA locking_mode = EXCLUSIVE")
      }
    }
    self.connection = connection
    self.path = path
  }

  /// Opens `filename` and checks that it reads as a database; `setup` runs before that read.
  private static func open(
    _ filename: String, name path: String, flags: Int32, busyTimeout: Int32, setup: String? = nil
  ) throws -> Connection {
    var handle: OpaquePointer?
    let resultCode = sqlite3_open_v2(filename, &handle, flags, nil)
    guard resultCode == SQLITE_OK, let handle else {
      // SQLite usually returns a handle even on failure; it carries the message and errno.
      let error = StoreError.from(
        handle: handle, resultCode: resultCode, path: path, operation: "open database", sql: nil)
      sqlite3_close_v2(handle)
      throw error
    }
    // From here on the Connection owns the handle: throwing below closes it in its deinit.
    let connection = Connection(handle: handle, path: path)
    sqlite3_extended_result_codes(handle, 1)
    sqlite3_busy_timeout(handle, busyTimeout)
    connection.busyTimeoutMilliseconds = busyTimeout
    for sql in [setup, "PRAGMA foreign_keys = ON", "SELECT count(*) FROM sqlite_master"].compactMap({ $0 }) {
      let code = sqlite3_exec(handle, sql, nil, nil, nil)
      guard code == SQLITE_OK else { throw connection.error(code, operation: "open database", sql: sql) }
    }
    return connection
  }

  /// The checkpoints that failed as connections closed since the last call: `lost` those of
  /// databases whose commits do not sync (a write that did not reach the disk: the command
  /// fails), `harmless` those whose WAL was synced at each commit (a warning).
  public static func takeCloseFailures() -> (lost: [StoreError], harmless: [StoreError]) {
    let all = CloseFailures.take()
    return (all.filter { !$0.harmless }.map(\.error), all.filter(\.harmless).map(\.error))
  }

  /// Copies the WAL into the database now, syncing both, and fails when that fails (a
  /// database whose commits do not sync is durable only once checkpointed). Another
  /// connection reading is no failure: it is copied later. Uses `sqlite3_wal_checkpoint_v2`.
  public func checkpoint() throws {
    let code = sqlite3_wal_checkpoint_v2(connection.handle, nil, SQLITE_CHECKPOINT_PASSIVE, nil, nil)
    guard code == SQLITE_OK || code & 0xFF == SQLITE_BUSY || code & 0xFF == SQLITE_LOCKED else {
      throw connection.error(code, operation: "checkpoint the WAL", sql: nil)
    }
  }

  /// Whether the database's WAL is missing or empty (every transaction is in the file).
  private static func hasEmptyLog(_ path: String) -> Bool {
    var st = stat()
    return stat(path + "-wal", &st) != 0 || st.st_size == 0
  }

  /// A `file:` URI for `path` (SQLITE_OPEN_URI): `%`, `?` and `#` escaped.
  private static func uri(_ path: String) -> String {
    var result = "file:"
    for scalar in path.unicodeScalars {
      switch scalar {
      case "%": result += "%25"
      case "?": result += "%3F"
      case "#": result += "%23"
      default: result.unicodeScalars.append(scalar)
      }
    }
    return result
  }

  /// Whole milliseconds for `sqlite3_busy_timeout`: negative becomes 0, huge becomes `Int32.max`.
  static func busyTimeoutMilliseconds(_ duration: Duration) -> Int32 {
    let (seconds, attoseconds) = duration.components
    let total = seconds.multipliedReportingOverflow(by: 1000)
    guard !total.overflow else { return seconds < 0 ? 0 : Int32.max }
    let milliseconds = total.partialValue + attoseconds / 1_000_000_000_000_000
    return Int32(clamping: max(0, milliseconds))
  }

  // MARK: Statements

  /// Compiles one statement that the caller owns; it is finalized when released.
  /// Uses `sqlite3_prepare_v3`.
  public func prepare(_ sql: String) throws -> Statement {
    try Statement(connection: connection, sql: sql, persistent: false)
  }

  /// Returns this database's statement for `sql`, compiling it on first use, reset and with
  /// its bindings cleared. The same object comes back for the same text, so do not ask for it
  /// again while still stepping through its rows: that restarts it. Uses `sqlite3_prepare_v3`
  /// with `SQLITE_PREPARE_PERSISTENT`.
  public func cachedStatement(_ sql: String) throws -> Statement {
    if let statement = statementCache[sql] {
      statement.reset()
      statement.clearBindings()
      return statement
    }
    let statement = try Statement(connection: connection, sql: sql, persistent: true)
    statementCache[sql] = statement
    return statement
  }

  /// Drops the cached statements; each is finalized once nothing else holds it.
  /// Uses `sqlite3_finalize`.
  public func clearStatementCache() {
    statementCache.removeAll()
  }

  /// For helpers that run a statement from start to finish: the cached statement, unless it
  /// is in the middle of a caller's iteration, in which case a private one.
  private func statementForOneShot(_ sql: String) throws -> Statement {
    if let statement = statementCache[sql], statement.isBusy {
      return try prepare(sql)
    }
    return try cachedStatement(sql)
  }

  // MARK: Executing

  /// Runs one or more `;`-separated statements without parameters, in order, stopping at the
  /// first failure (whose error names that statement). Uses `sqlite3_prepare_v3` and
  /// `sqlite3_step`.
  public func execute(_ sql: String) throws {
    let db = connection.handle
    try sql.withCString { start in
      var next: UnsafePointer<CChar>? = start
      while let current = next, current.pointee != 0 {
        var prepared: OpaquePointer?
        var tail: UnsafePointer<CChar>?
        let resultCode = sqlite3_prepare_v3(db, current, -1, 0, &prepared, &tail)
        guard resultCode == SQLITE_OK else {
          sqlite3_finalize(prepared)
          let rest = String(cString: current).drop(while: \.isWhitespace)
          throw connection.error(resultCode, operation: "prepare statement", sql: String(rest))
        }
        next = tail == current ? nil : tail
        guard let prepared else { continue }  // only whitespace or a comment
        defer { sqlite3_finalize(prepared) }
        var stepCode: Int32
        repeat {
          stepCode = sqlite3_step(prepared)
        } while stepCode == SQLITE_ROW
        guard stepCode == SQLITE_DONE else {
          let text = sqlite3_sql(prepared).map { String(cString: $0) } ?? sql
          throw connection.error(stepCode, operation: "execute statement", sql: text)
        }
      }
    }
  }

  /// Runs one statement with parameters bound in order, through a cached statement.
  /// Uses `sqlite3_step`.
  public func execute(_ sql: String, _ values: SQLValue...) throws {
    try statementForOneShot(sql).execute(values)
  }

  /// The first column of the first row, or nil when there is no row. Uses `sqlite3_step`.
  public func scalar(_ sql: String, _ values: SQLValue...) throws -> SQLValue? {
    let statement = try statementForOneShot(sql)
    try statement.bind(values)
    return try statement.first { $0.value(0) }
  }

  /// Maps the first row, or returns nil when there is none. Uses `sqlite3_step`.
  public func first<T>(_ sql: String, _ values: SQLValue..., map: (Statement) throws -> T) throws -> T? {
    let statement = try statementForOneShot(sql)
    try statement.bind(values)
    return try statement.first(map)
  }

  /// Maps every row. Uses `sqlite3_step`.
  public func all<T>(_ sql: String, _ values: SQLValue..., map: (Statement) throws -> T) throws -> [T] {
    let statement = try statementForOneShot(sql)
    try statement.bind(values)
    return try statement.rows(map)
  }

  // MARK: Connection state

  /// The rowid of the most recent successful INSERT on this connection.
  /// Uses `sqlite3_last_insert_rowid`.
  public var lastInsertRowID: Int64 { sqlite3_last_insert_rowid(connection.handle) }

  /// Rows changed by the most recent INSERT, UPDATE or DELETE. Uses `sqlite3_changes64`.
  public var changes: Int { Int(sqlite3_changes64(connection.handle)) }

  /// Rows changed since the connection opened. Uses `sqlite3_total_changes64`.
  public var totalChanges: Int { Int(sqlite3_total_changes64(connection.handle)) }

  /// Whether a transaction is open. Uses `sqlite3_get_autocommit`.
  public var isInTransaction: Bool { sqlite3_get_autocommit(connection.handle) == 0 }
}
