import AppboxCore
import Foundation
import Testing

@testable import AppboxStore

@Suite struct StatementTests {
  @Test func typedBindsStoreWhatWasBound() throws {
    let db = try Database(path: ":memory:")
    try db.execute("CREATE TABLE t(a, b, c, d, e, f, g, h)")
    let statement = try db.prepare("INSERT INTO t VALUES (?, ?, ?, ?, ?, ?, ?, ?)")
    #expect(statement.parameterCount == 8)
    try statement.bind(Int64(-7), at: 1)
    try statement.bind(12, at: 2)
    try statement.bind(0.125, at: 3)
    try statement.bind("text", at: 4)
    try statement.bind([0, 0xFF, 0] as [UInt8], at: 5)
    try statement.bind(Data([1, 0, 2]), at: 6)
    try [UInt8]([9, 8]).withUnsafeBytes { try statement.bind($0, at: 7) }
    try statement.bindNull(at: 8)
    try statement.execute()
    let row = try db.first("SELECT * FROM t") { row in (0..<row.columnCount).map { row.value($0) } }
    #expect(
      row == [
        .integer(-7), .integer(12), .real(0.125), .text("text"), .blob([0, 0xFF, 0]), .blob([1, 0, 2]),
        .blob([9, 8]), .null,
      ])
  }

  @Test func bindingAfterSteppingResetsAndKeepsOtherBindings() throws {
    let db = try Database(path: ":memory:")
    try db.execute("CREATE TABLE t(k, v)")
    let insert = try db.prepare("INSERT INTO t VALUES (?, ?)")
    try insert.bind("same", at: 2)
    for key in 1...3 {
      try insert.bind(Int64(key), at: 1)
      #expect(try !insert.step())
    }
    let rows = try db.all("SELECT k, v FROM t ORDER BY k") { "\($0.int64(0))=\($0.text(1) ?? "nil")" }
    #expect(rows == ["1=same", "2=same", "3=same"])
  }

  @Test func bindingTheWrongNumberOfValuesIsRefused() throws {
    let db = try Database(path: ":memory:")
    let statement = try db.prepare("SELECT ?, ?")
    let error = #expect(throws: StoreError.self) { try statement.bind([.integer(1)]) }
    #expect(error?.kind == .invalidArgument)
    #expect(error?.sql == "SELECT ?, ?")
    let outOfRange = #expect(throws: StoreError.self) { try statement.bind(Int64(1), at: 3) }
    #expect(outOfRange?.code == 25)  // SQLITE_RANGE
  }

  @Test func rebindingReplacesEveryValue() throws {
    let db = try Database(path: ":memory:")
    let statement = try db.prepare("SELECT ?1, ?2")
    try statement.bind([.integer(1), .text("x")])
    #expect(try statement.first { [$0.value(0), $0.value(1)] } == [.integer(1), .text("x")])
    try statement.bind([.null, .blob([])])
    #expect(try statement.first { [$0.value(0), $0.value(1)] } == [.null, .blob([])])
  }

  @Test func prepareTakesExactlyOneStatement() throws {
    let db = try Database(path: ":memory:")
    let twoStatements = #expect(throws: StoreError.self) { try db.prepare("SELECT 1; SELECT 2") }
    #expect(twoStatements?.kind == .invalidArgument)
    #expect(twoStatements?.message == "more than one SQL statement")
    let nothing = #expect(throws: StoreError.self) { try db.prepare("  -- just a comment") }
    #expect(nothing?.message == "no SQL statement to prepare")
    let trailing = try db.prepare("SELECT 1; -- fine\n ;")
    #expect(try trailing.first { $0.int64(0) } == 1)
  }

  @Test func rowsStartFromTheFirstRowEachTime() throws {
    let db = try Database(path: ":memory:")
    try db.execute("CREATE TABLE t(x); INSERT INTO t VALUES (1), (2), (3);")
    let statement = try db.prepare("SELECT x FROM t WHERE x >= ? ORDER BY x")
    try statement.bind(Int64(2), at: 1)
    #expect(try statement.step())  // leave it mid-iteration
    #expect(statement.isBusy)
    #expect(try statement.rows { $0.int64(0) } == [2, 3])
    #expect(!statement.isBusy)
    #expect(try statement.rows { $0.int64(0) } == [2, 3])
  }

  @Test func stepErrorsCarryTheStatement() throws {
    let db = try Database(path: ":memory:")
    try db.execute("CREATE TABLE t(x UNIQUE)")
    let insert = try db.prepare("INSERT INTO t VALUES (?)")
    try insert.execute([.integer(1)])
    let error = #expect(throws: StoreError.self) { try insert.execute([.integer(1)]) }
    #expect(error?.code == 19)  // SQLITE_CONSTRAINT
    #expect(error?.extendedCode == 2067)  // SQLITE_CONSTRAINT_UNIQUE: extended codes are on
    #expect(error?.sql == "INSERT INTO t VALUES (?)")
    #expect(error?.operation == "execute statement")
    // The statement is usable again after the failure.
    try insert.execute([.integer(2)])
    #expect(try db.scalar("SELECT count(*) FROM t") == .integer(2))
  }

  @Test func aHundredThousandRowsThroughOneReusedStatement() throws {
    let directory = try TemporaryDirectory()
    let db = try Database(path: directory.path("bulk.db"))
    try db.setJournalModeWAL()
    try db.setSynchronous(.normal)
    try db.execute("CREATE TABLE files(id INTEGER PRIMARY KEY, path TEXT NOT NULL, digest BLOB NOT NULL)")
    let count = 100_000
    try db.inTransaction {
      let insert = try db.cachedStatement("INSERT INTO files(id, path, digest) VALUES (?, ?, ?)")
      var digest = [UInt8](repeating: 0, count: 32)
      for id in 0..<count {
        digest[0] = UInt8(truncatingIfNeeded: id)
        digest[31] = UInt8(truncatingIfNeeded: id >> 8)
        try insert.bind(Int64(id), at: 1)
        try insert.bind("Documents/file-\(id).bin", at: 2)
        try insert.bind(digest, at: 3)
        _ = try insert.step()
      }
    }
    #expect(try db.scalar("SELECT count(*) FROM files") == .integer(Int64(count)))
    #expect(try db.scalar("SELECT sum(id) FROM files") == .integer(Int64(count * (count - 1) / 2)))
    let row = try db.first("SELECT path, digest FROM files WHERE id = ?", .integer(54_321)) {
      ($0.text(0), $0.blob(1))
    }
    #expect(row?.0 == "Documents/file-54321.bin")
    #expect(row?.1.count == 32)
    #expect(row?.1.first == UInt8(54_321 & 0xFF))
    #expect(row?.1.last == UInt8((54_321 >> 8) & 0xFF))
  }
}
