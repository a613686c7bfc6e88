import AppboxCore
import CSQLite
import Glibc

extension Database {
  // MARK: Transactions

  /// Runs `body` in a transaction: commits when it returns, rolls back when it throws (and
  /// rethrows its error). Called while a transaction is already open, it uses a SAVEPOINT
  /// instead, so an inner failure undoes only the inner work; `kind` then has no effect.
  /// A failed COMMIT is rolled back too, so the connection never stays mid-transaction.
  /// Uses `BEGIN`, `SAVEPOINT` and `sqlite3_get_autocommit`.
  public func inTransaction<T>(_ kind: TransactionKind = .immediate, _ body: () throws -> T) throws -> T {
    if isInTransaction {
      return try inSavepoint(body)
    }
    try execute("BEGIN \(kind.rawValue) TRANSACTION")
    let result: T
    do {
      result = try body()
    } catch {
      rollbackIfOpen()
      throw error
    }
    do {
      try execute("COMMIT TRANSACTION")
    } catch {
      rollbackIfOpen()
      throw error
    }
    return result
  }

  private func inSavepoint<T>(_ body: () throws -> T) throws -> T {
    savepointDepth += 1
    defer { savepointDepth -= 1 }
    let name = "appbox_savepoint_\(savepointDepth)"
    try execute("SAVEPOINT \(name)")
    let result: T
    do {
      result = try body()
    } catch {
      // If SQLite already rolled the whole transaction back (disk full, I/O error), there is
      // no savepoint left; the caller's own rollback will find nothing to undo either.
      if isInTransaction {
        try? execute("ROLLBACK TRANSACTION TO SAVEPOINT \(name)")
        try? execute("RELEASE SAVEPOINT \(name)")
      }
      throw error
    }
    try execute("RELEASE SAVEPOINT \(name)")
    return result
  }

  /// Some errors (SQLITE_FULL, SQLITE_IOERR, ...) end the transaction inside SQLite; a second
  /// ROLLBACK would then fail and hide the original error.
  private func rollbackIfOpen() {
    if isInTransaction {
      try? execute("ROLLBACK TRANSACTION")
    }
  }

  // MARK: Migrations

  /// The schema version stored in the file header. Uses `PRAGMA user_version`.
  public func userVersion() throws -> Int {
    guard case .integer(let version) = try scalar("PRAGMA user_version") else { return 0 }
    return Int(version)
  }

  /// Brings the schema up to `migrations.count`: a database at version `v` runs
  /// `migrations[v...]` in order, each in its own immediate transaction that also sets
  /// `PRAGMA user_version` to its 1-based number, so a migration runs once or not at all.
  /// The version is re-read inside each transaction, so two processes migrating the same file
  /// do not both run a step. A database newer than `migrations.count` is refused with
  /// `.badData`: this code does not know its schema. Uses `PRAGMA user_version`.
  public func migrate(_ migrations: [String]) throws {
    let known = migrations.count
    if try checkedVersion(known: known) == known { return }
    while true {
      let done = try inTransaction(.immediate) { () throws -> Bool in
        let version = try checkedVersion(known: known)
        guard version < known else { return true }
        do {
          try execute(migrations[version])
        } catch let error as StoreError {
          throw StoreError(
            extendedCode: error.extendedCode, message: error.message, sql: error.sql, path: path,
            operation: "migrate to schema version \(version + 1)", systemErrno: error.systemErrno,
            kind: error.kind)
        }
        try execute("PRAGMA user_version = \(version + 1)")
        return false
      }
      if done { return }
    }
  }

  private func checkedVersion(known: Int) throws -> Int {
    let version = try userVersion()
    guard version <= known else {
      throw connection.error(
        SQLITE_ERROR,
        message: "schema version \(version) is newer than the newest this program knows (\(known))",
        operation: "migrate schema", sql: nil, kind: .badData)
    }
    return version
  }

  // MARK: Pragmas

  /// Switches to write-ahead logging, which persists in the file, and checks that SQLite
  /// agreed (an in-memory database, for one, cannot). Uses `PRAGMA journal_mode = WAL`.
  /// `walIndexBytes`: how much of the wal-index to allocate up front (see
  /// `preallocateWALIndex`); 32 KiB serve each 4,096 frames of WAL.
  ///
  /// Connections switching one database at the same moment each hold a shared lock and ask
  /// for an exclusive one; SQLite answers one of them SQLITE_BUSY at once rather than wait
  /// into a deadlock, so a busy switch is retried until the connection's busy timeout has
  /// passed. A database already in WAL mode (the mode persists in the file) is not switched.
  public func setJournalModeWAL(walIndexBytes: Int = 64 << 10) throws {
    let mode = try switchToWALWaitingForOthers()
    guard mode == "wal" else {
      throw connection.error(
        SQLITE_ERROR, message: "journal mode stayed '\(mode)' instead of 'wal'",
        operation: "enable WAL", sql: "PRAGMA journal_mode = WAL", kind: .unavailable)
    }
    try preallocateWALIndex(bytes: walIndexBytes)
  }

  /// Allocates the wal-index file's blocks up front. SQLite maps `-shm` and writes it through
  /// memory; it grows the file by writing one byte per 4 KiB page, which on a file system of
  /// 1 KiB blocks allocates a quarter of each page: a store into the rest then needs a block,
  /// and on a full file system that is a SIGBUS, not an error. With the blocks allocated
  /// (fallocate) and the size already there, SQLite neither grows the file nor faults. Where
  /// there is no room for that, the database is not opened for writing (`.io`, out of space):
  /// it would fail to write soon anyway, and this way without a crash.
  /// Uses `open(2)` and `posix_fallocate(3)`.
  func preallocateWALIndex(bytes: Int) throws {
    guard connection.walIndex < 0 else { return }
    // A new database makes its `-shm` at its first read in WAL mode.
    _ = try scalar("SELECT count(*) FROM sqlite_master")
    let fd = open(path + "-shm", O_RDWR | O_CLOEXEC | O_NOFOLLOW)
    guard fd >= 0 else { return }  // `locking_mode = EXCLUSIVE`: the wal-index is in memory
    connection.walIndex = fd
    let code = posix_fallocate(fd, 0, off_t(bytes))
    guard code == 0 || code == EOPNOTSUPP || code == EINVAL else {
      throw StoreError(
        extendedCode: SQLITE_FULL, message: String(cString: strerror(code)).lowercased(), sql: nil,
        path: path, operation: "allocate the wal-index", systemErrno: code)
    }
  }

  /// The journal mode after asking for WAL: read first, switched only when not WAL yet, and
  /// retried with a growing pause while another connection holds the lock the switch needs.
  private func switchToWALWaitingForOthers() throws -> String {
    let budget = Duration.milliseconds(connection.busyTimeoutMilliseconds)
    let clock = ContinuousClock()
    let start = clock.now
    var pause = Duration.milliseconds(1)
    while true {
      do {
        let current = try journalMode(setting: nil)
        if current == "wal" { return current }
        return try journalMode(setting: "WAL")
      } catch let error as StoreError where error.code == SQLITE_BUSY || error.code == SQLITE_LOCKED {
        guard clock.now - start + pause <= budget else { throw error }
        usleep(useconds_t(pause / .microseconds(1)))
        pause = min(pause * 2, .milliseconds(50))
      }
    }
  }

  /// The current journal mode in lowercase ("delete", "wal", ...). Uses `PRAGMA journal_mode`.
  public func journalMode() throws -> String {
    try journalMode(setting: nil)
  }

  private func journalMode(setting mode: String?) throws -> String {
    let sql = mode.map { "PRAGMA journal_mode = \($0)" } ?? "PRAGMA journal_mode"
    guard case .text(let current) = try scalar(sql) else { return "" }
    return current.lowercased()
  }

  /// Sets how often SQLite waits for data to reach the disk. Uses `PRAGMA synchronous`.
  public func setSynchronous(_ level: Synchronous) throws {
    try execute("PRAGMA synchronous = \(level.rawValue)")
    connection.commitsAreDurable = level == .full || level == .extra
  }

  /// The current synchronous level. Uses `PRAGMA synchronous`.
  public func synchronous() throws -> Synchronous {
    guard case .integer(let level) = try scalar("PRAGMA synchronous") else { return .full }
    switch level {
    case 0: return .off
    case 1: return .normal
    case 3: return .extra
    default: return .full
    }
  }
}
