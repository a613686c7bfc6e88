import AppboxCore
import Foundation
import Synchronization
import Testing

@testable import AppboxStore

private func randomBytes(_ count: Int) -> [UInt8] {
  var generator = SystemRandomNumberGenerator()
  return (0..<count).map { _ in UInt8.random(in: 0...255, using: &generator) }
}

/// Strings appended from several threads.
private final class LockedList: Sendable {
  private let lock = Mutex<[String]>([])
  func append(_ item: String) { lock.withLock { $0.append(item) } }
  var items: [String] { lock.withLock { $0 } }
}

@Suite struct DatabaseTests {
  @Test func everyValueTypeRoundTrips() throws {
    let directory = try TemporaryDirectory()
    let db = try Database(path: directory.path("types.db"))
    try db.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, v)")
    let values: [SQLValue] = [
      .null,
      .integer(0), .integer(Int64.min), .integer(Int64.max),
      .real(3.25), .real(-0.5), .real(1e300),
      .text(""), .text("héllo, 世界 🙂"), .text("nul\u{0}inside"),
      .blob([]), .blob([0, 0, 1, 0, 0]), .blob([0xFF, 0xFE, 0xC3, 0x28, 0x80]),
      .blob((0...255).map { UInt8($0) }),
    ]
    for (index, value) in values.enumerated() {
      try db.execute("INSERT INTO t(id, v) VALUES (?, ?)", .integer(Int64(index)), value)
    }
    let stored = try db.all("SELECT v FROM t ORDER BY id") { $0.value(0) }
    #expect(stored == values)
    // Empty text and empty blobs are values, not NULL.
    let types = try db.all("SELECT typeof(v) FROM t WHERE id IN (7, 10) ORDER BY id") { $0.text(0) }
    #expect(types == ["text", "blob"])
  }

  @Test func typedColumnReadersReturnTheStoredBytes() throws {
    let directory = try TemporaryDirectory()
    let db = try Database(path: directory.path("typed.db"))
    try db.execute("CREATE TABLE t(i INTEGER, r REAL, s TEXT, b BLOB, n)")
    let blob: [UInt8] = [0x00, 0xFF, 0x00, 0xC0, 0xAF]
    try db.execute(
      "INSERT INTO t VALUES (?, ?, ?, ?, ?)", .integer(-42), .real(2.5), .text("a\u{0}b"), .blob(blob), .null)
    let statement = try db.prepare("SELECT i, r, s, b, n FROM t")
    #expect(try statement.step())
    #expect(statement.columnCount == 5)
    #expect(statement.columnName(3) == "b")
    #expect(statement.int64(0) == -42)
    #expect(statement.int(0) == -42)
    #expect(statement.double(1) == 2.5)
    #expect(statement.text(2) == "a\u{0}b")
    #expect(statement.blob(3) == blob)
    #expect(statement.data(3) == Data(blob))
    #expect(statement.withUnsafeBlob(3) { Array($0) } == blob)
    #expect(statement.isNull(4))
    #expect(!statement.isNull(3))
    #expect(statement.text(4) == nil)
    #expect(statement.blob(4) == [])
    #expect(try !statement.step())
  }

  @Test func scalarFirstAndAllHelpers() throws {
    let db = try Database(path: ":memory:")
    try db.execute("CREATE TABLE t(x INTEGER); INSERT INTO t VALUES (1), (2), (3);")
    #expect(try db.scalar("SELECT sum(x) FROM t") == .integer(6))
    #expect(try db.scalar("SELECT x FROM t WHERE x > ?", .integer(5)) == nil)
    #expect(try db.first("SELECT x FROM t WHERE x >= ? ORDER BY x", .integer(2)) { $0.int64(0) } == 2)
    #expect(try db.all("SELECT x FROM t ORDER BY x DESC") { $0.int64(0) } == [3, 2, 1])
    // A helper whose statement is mid-iteration gets a private statement, not a restarted one.
    let nested = try db.all("SELECT x FROM t ORDER BY x") { row in
      try db.all("SELECT x FROM t ORDER BY x") { $0.int64(0) }.count * Int(row.int64(0))
    }
    #expect(nested == [3, 6, 9])
  }

  @Test func lastInsertRowIDAndChanges() throws {
    let db = try Database(path: ":memory:")
    try db.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, x)")
    try db.execute("INSERT INTO t(id, x) VALUES (41, 'a')")
    #expect(db.lastInsertRowID == 41)
    try db.execute("INSERT INTO t(x) VALUES ('b'), ('c')")
    #expect(db.lastInsertRowID == 43)
    try db.execute("UPDATE t SET x = 'z' WHERE id > ?", .integer(41))
    #expect(db.changes == 2)
    #expect(db.totalChanges == 5)
  }

  @Test func executeRunsEveryStatementAndNamesTheOneThatFails() throws {
    let directory = try TemporaryDirectory()
    let path = directory.path("multi.db")
    let db = try Database(path: path)
    let error = #expect(throws: StoreError.self) {
      try db.execute("CREATE TABLE a(x); INSERT INTO a VALUES (1);\n INSERT INTO missing VALUES (2);")
    }
    #expect(error?.sql?.hasPrefix("INSERT INTO missing") == true)
    #expect(error?.description.contains("missing") == true)
    #expect(error?.description.contains(path) == true)
    #expect(try db.scalar("SELECT count(*) FROM a") == .integer(1))
  }

  @Test func foreignKeysAreEnforced() throws {
    let db = try Database(path: ":memory:")
    try db.execute(
      """
      CREATE TABLE parent(id INTEGER PRIMARY KEY);
      CREATE TABLE child(parent INTEGER NOT NULL REFERENCES parent(id));
      """)
    let error = #expect(throws: StoreError.self) {
      try db.execute("INSERT INTO child VALUES (?)", .integer(7))
    }
    #expect(error?.code == 19)  // SQLITE_CONSTRAINT
    #expect(error?.kind == .cannotCreate)
  }

  @Test func randomBytesAreNotADatabase() throws {
    let directory = try TemporaryDirectory()
    let path = directory.path("random.db")
    try Data(randomBytes(8192)).write(to: URL(fileURLWithPath: path))
    let error = #expect(throws: StoreError.self) { try Database(path: path) }
    #expect(error?.kind == .badData)
    #expect(error?.code == 26)  // SQLITE_NOTADB
    #expect(error?.description.contains(path) == true)
  }

  @Test func aDamagedSchemaPageIsBadData() throws {
    let directory = try TemporaryDirectory()
    let path = directory.path("damaged.db")
    do {
      let db = try Database(path: path)
      try db.execute("CREATE TABLE t(x); INSERT INTO t VALUES (1);")
    }
    // Keep the 100-byte file header, so SQLite accepts the file, but wreck page 1's b-tree.
    var bytes = try [UInt8](Data(contentsOf: URL(fileURLWithPath: path)))
    for index in 100..<4096 { bytes[index] = 0xA5 }
    try Data(bytes).write(to: URL(fileURLWithPath: path))
    let error = #expect(throws: StoreError.self) { try Database(path: path) }
    #expect(error?.kind == .badData)
    #expect(error?.code == 11)  // SQLITE_CORRUPT
  }

  /// Descriptors of this process that refer to `path` (paths are unique per test, so tests
  /// running in parallel do not disturb the count).
  private func openDescriptors(to path: String) throws -> Int {
    let entries = try FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")
    return entries.filter { entry in
      (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/" + entry)) == path
    }.count
  }

  @Test func failedOpensAndReleasedDatabasesCloseTheirFiles() throws {
    let directory = try TemporaryDirectory()
    let path = directory.path("closing.db")
    do {
      let db = try Database(path: path)
      try db.execute("CREATE TABLE t(x)")
      #expect(try openDescriptors(to: path) == 1)
    }
    #expect(try openDescriptors(to: path) == 0)
    try Data(randomBytes(4096)).write(to: URL(fileURLWithPath: path))
    for _ in 0..<3 {
      #expect(throws: StoreError.self) { try Database(path: path) }
    }
    #expect(try openDescriptors(to: path) == 0)
  }

  @Test func openingAMissingFileWithoutCreateIsNotFound() throws {
    let directory = try TemporaryDirectory()
    let path = directory.path("absent.db")
    for mode in [Database.Mode.readOnly, .readWrite] {
      let error = #expect(throws: StoreError.self) { try Database(path: path, mode: mode) }
      #expect(error?.kind == .notFound)
      #expect(error?.code == 14)  // SQLITE_CANTOPEN
      #expect(error?.description.contains(path) == true)
    }
    #expect(!FileManager.default.fileExists(atPath: path))
  }

  @Test func writingThroughAReadOnlyConnectionIsDenied() throws {
    let directory = try TemporaryDirectory()
    let path = directory.path("ro.db")
    try Database(path: path).execute("CREATE TABLE t(x)")
    let db = try Database(path: path, mode: .readOnly)
    #expect(try db.scalar("SELECT count(*) FROM t") == .integer(0))
    let error = #expect(throws: StoreError.self) { try db.execute("INSERT INTO t VALUES (1)") }
    #expect(error?.kind == .denied)
    #expect(error?.code == 8)  // SQLITE_READONLY
  }

  @Test func syntaxErrorsNameTheSQLAndThePath() throws {
    let directory = try TemporaryDirectory()
    let path = directory.path("syntax.db")
    let db = try Database(path: path)
    let error = #expect(throws: StoreError.self) { try db.prepare("SELEKT 1") }
    #expect(error?.sql == "SELEKT 1")
    #expect(error?.operation == "prepare statement")
    let description = error?.description ?? ""
    #expect(description.contains("SELEKT 1"))
    #expect(description.contains(path))
    #expect(description.contains("syntax error"))
  }

  @Test func walModeIsActiveAndPersists() throws {
    let directory = try TemporaryDirectory()
    let path = directory.path("wal.db")
    let db = try Database(path: path)
    #expect(try db.journalMode() == "delete")
    try db.setJournalModeWAL()
    #expect(try db.journalMode() == "wal")
    try db.execute("CREATE TABLE t(x); INSERT INTO t VALUES (1);")
    #expect(FileManager.default.fileExists(atPath: path + "-wal"))
    let other = try Database(path: path, mode: .readOnly)
    #expect(try other.journalMode() == "wal")
    #expect(try other.scalar("SELECT x FROM t") == .integer(1))
  }

  /// Openers that switch a new database to WAL at the same moment all read it first (a
  /// shared lock) and then need it exclusively: SQLite answers one of them SQLITE_BUSY at
  /// once instead of waiting, to avoid the deadlock. Every opener must still succeed (this
  /// failed CI once as "database is locked" when eight keychain openers raced).
  @Test func openersRacingToSwitchToWALAllSucceed() throws {
    let directory = try TemporaryDirectory()
    let failures = LockedList()
    for round in 0..<20 {
      let path = directory.path("race-\(round).db")
      DispatchQueue.concurrentPerform(iterations: 8) { _ in
        do {
          let db = try Database(path: path)
          try db.setJournalModeWAL()
          if try db.journalMode() != "wal" { failures.append("not wal") }
        } catch { failures.append("\(error)") }
      }
    }
    #expect(failures.items.isEmpty)
  }

  /// A database already in WAL mode is not switched again, so a reader holding it open does
  /// not make a second opener wait at all.
  @Test func anAlreadyWALDatabaseIsNotSwitchedAgain() throws {
    let directory = try TemporaryDirectory()
    let path = directory.path("wal-again.db")
    let first = try Database(path: path)
    try first.setJournalModeWAL()
    try first.execute("CREATE TABLE t(x); INSERT INTO t VALUES (1); BEGIN IMMEDIATE;")
    let second = try Database(path: path, busyTimeout: .zero)
    try second.setJournalModeWAL()
    #expect(try second.journalMode() == "wal")
    try first.execute("COMMIT")
  }

  @Test func walIsRefusedForAnInMemoryDatabase() throws {
    let db = try Database(path: ":memory:")
    let error = #expect(throws: StoreError.self) { try db.setJournalModeWAL() }
    #expect(error?.kind == .unavailable)
    #expect(error?.description.contains("memory") == true)
  }

  @Test func synchronousLevelIsSet() throws {
    let directory = try TemporaryDirectory()
    let db = try Database(path: directory.path("sync.db"))
    try db.setSynchronous(.normal)
    #expect(try db.synchronous() == .normal)
    try db.setSynchronous(.full)
    #expect(try db.synchronous() == .full)
  }

  @Test func cachedStatementsAreReusedAndReset() throws {
    let db = try Database(path: ":memory:")
    try db.execute("CREATE TABLE t(x); INSERT INTO t VALUES (1), (2);")
    let first = try db.cachedStatement("SELECT x FROM t ORDER BY x")
    #expect(try first.step())
    #expect(first.int64(0) == 1)
    let second = try db.cachedStatement("SELECT x FROM t ORDER BY x")
    #expect(first === second)
    #expect(try second.step())
    #expect(second.int64(0) == 1)  // reset: starts again from the first row
    #expect(try db.prepare("SELECT x FROM t ORDER BY x") !== second)
  }

  @Test func statementsOutliveTheirDatabaseObject() throws {
    var db: Database? = try Database(path: ":memory:")
    try db?.execute("CREATE TABLE t(x); INSERT INTO t VALUES (7);")
    let statement = try #require(try db?.prepare("SELECT x FROM t"))
    db = nil
    #expect(try statement.first { $0.int64(0) } == 7)
  }

  @Test func busyTimeoutIsConvertedToWholeMilliseconds() {
    #expect(Database.busyTimeoutMilliseconds(.seconds(5)) == 5000)
    #expect(Database.busyTimeoutMilliseconds(.milliseconds(1)) == 1)
    #expect(Database.busyTimeoutMilliseconds(.microseconds(2500)) == 2)
    #expect(Database.busyTimeoutMilliseconds(.zero) == 0)
    #expect(Database.busyTimeoutMilliseconds(.seconds(-1)) == 0)
    #expect(Database.busyTimeoutMilliseconds(.seconds(Int64.max)) == Int32.max)
  }
}
