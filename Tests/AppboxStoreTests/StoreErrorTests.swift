import AppboxCore
import Glibc
import Testing

@testable import AppboxStore

@Suite struct StoreErrorTests {
  @Test func resultCodesMapToFailureKinds() {
    let expectations: [(Int32, Int32?, FailureKind)] = [
      (5, nil, .busy),  // SQLITE_BUSY
      (517, nil, .busy),  // SQLITE_BUSY_SNAPSHOT
      (6, nil, .busy),  // SQLITE_LOCKED
      (11, nil, .badData),  // SQLITE_CORRUPT
      (26, nil, .badData),  // SQLITE_NOTADB
      (14, ENOENT, .notFound),  // SQLITE_CANTOPEN
      (14, EACCES, .denied),
      (14, EISDIR, .cannotCreate),
      (8, nil, .denied),  // SQLITE_READONLY
      (3, nil, .denied),  // SQLITE_PERM
      (13, nil, .io),  // SQLITE_FULL
      (10, nil, .io),  // SQLITE_IOERR
      (266, nil, .io),  // SQLITE_IOERR_READ
      (19, nil, .cannotCreate),  // SQLITE_CONSTRAINT
      (2067, nil, .cannotCreate),  // SQLITE_CONSTRAINT_UNIQUE
      (25, nil, .invalidArgument),  // SQLITE_RANGE
      (1, nil, .io),  // SQLITE_ERROR
    ]
    for (code, systemErrno, kind) in expectations {
      #expect(StoreError.kind(forResultCode: code, systemErrno: systemErrno) == kind, "code \(code)")
    }
  }

  @Test func descriptionIsOneLineWithOperationPathMessageAndSQL() {
    let error = StoreError(
      extendedCode: 5, message: "database is locked", sql: "BEGIN\n  IMMEDIATE   TRANSACTION",
      path: "/data/registry.db", operation: "execute statement")
    #expect(
      error.description
        == "Unable to execute statement on '/data/registry.db': database is locked (SQLite code 5); "
        + "SQL: BEGIN IMMEDIATE TRANSACTION")
    #expect(error.kind == .busy)
    #expect(error.code == 5)
  }

  @Test func longSQLIsShortenedInTheDescriptionOnly() {
    let sql = "SELECT " + String(repeating: "x, ", count: 200) + "1"
    let error = StoreError(extendedCode: 1, message: "m", sql: sql, path: "p", operation: "o")
    #expect(error.sql == sql)
    #expect(error.description.hasSuffix("…"))
    #expect(error.description.count < 400)
  }

  @Test func anExplicitKindOverridesTheCode() {
    let error = StoreError(extendedCode: 1, message: "m", sql: nil, path: "p", operation: "o", kind: .badData)
    #expect(error.kind == .badData)
    #expect(!error.description.contains("SQL:"))
  }
}
