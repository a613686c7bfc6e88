import AppboxCore
import Foundation
import Testing

@testable import AppboxStore

private struct Abort: Error {}

private func values(_ db: Database) throws -> [Int64] {
  try db.all("SELECT x FROM t ORDER BY x") { $0.int64(0) }
}

private func makeDatabase(_ directory: TemporaryDirectory, _ name: String = "tx.db") throws -> Database {
  let db = try Database(path: directory.path(name))
  try db.execute("CREATE TABLE t(x INTEGER)")
  return db
}

@Suite struct TransactionTests {
  @Test func commitKeepsWorkAndReturnsTheBodysValue() throws {
    let directory = try TemporaryDirectory()
    let db = try makeDatabase(directory)
    let result = try db.inTransaction {
      try db.execute("INSERT INTO t VALUES (1), (2)")
      #expect(db.isInTransaction)
      return "done"
    }
    #expect(result == "done")
    #expect(!db.isInTransaction)
    // Another connection sees the rows, so they were committed, not just visible locally.
    let other = try Database(path: directory.path("tx.db"))
    #expect(try values(other) == [1, 2])
  }

  @Test func throwingRollsEverythingBack() throws {
    let directory = try TemporaryDirectory()
    let db = try makeDatabase(directory)
    #expect(throws: Abort.self) {
      try db.inTransaction {
        try db.execute("INSERT INTO t VALUES (1)")
        try db.execute("CREATE TABLE u(y)")
        throw Abort()
      }
    }
    #expect(!db.isInTransaction)
    #expect(try values(db) == [])
    #expect(try db.scalar("SELECT count(*) FROM sqlite_master WHERE name = 'u'") == .integer(0))
  }

  @Test(arguments: [Database.TransactionKind.deferred, .immediate, .exclusive])
  func everyKindCommitsAndRollsBack(kind: Database.TransactionKind) throws {
    let directory = try TemporaryDirectory()
    let db = try makeDatabase(directory)
    try db.inTransaction(kind) { try db.execute("INSERT INTO t VALUES (1)") }
    #expect(throws: Abort.self) {
      try db.inTransaction(kind) {
        try db.execute("INSERT INTO t VALUES (2)")
        throw Abort()
      }
    }
    #expect(try values(db) == [1])
  }

  @Test func aFailedInnerTransactionUndoesOnlyItsOwnWork() throws {
    let directory = try TemporaryDirectory()
    let db = try makeDatabase(directory)
    try db.inTransaction {
      try db.execute("INSERT INTO t VALUES (1)")
      #expect(throws: Abort.self) {
        try db.inTransaction {
          try db.execute("INSERT INTO t VALUES (2)")
          try db.inTransaction { try db.execute("INSERT INTO t VALUES (3)") }
          throw Abort()
        }
      }
      try db.inTransaction { try db.execute("INSERT INTO t VALUES (4)") }
      try db.execute("INSERT INTO t VALUES (5)")
    }
    #expect(!db.isInTransaction)
    #expect(try values(db) == [1, 4, 5])
  }

  @Test func anOuterFailureUndoesCommittedInnerWork() throws {
    let directory = try TemporaryDirectory()
    let db = try makeDatabase(directory)
    #expect(throws: Abort.self) {
      try db.inTransaction {
        try db.inTransaction { try db.execute("INSERT INTO t VALUES (1)") }
        throw Abort()
      }
    }
    #expect(try values(db) == [])
  }

  @Test func aTransactionOpenedByHandIsNestedInto() throws {
    let directory = try TemporaryDirectory()
    let db = try makeDatabase(directory)
    try db.execute("BEGIN")
    try db.inTransaction { try db.execute("INSERT INTO t VALUES (1)") }
    #expect(db.isInTransaction)  // the savepoint did not commit the caller's transaction
    try db.execute("ROLLBACK")
    #expect(try values(db) == [])
  }

  @Test func beginImmediateIsBusyWhileAnotherConnectionWrites() throws {
    let directory = try TemporaryDirectory()
    let writer = try makeDatabase(directory, "busy.db")
    let blocked = try Database(path: directory.path("busy.db"), busyTimeout: .milliseconds(20))
    try writer.inTransaction {
      try writer.execute("INSERT INTO t VALUES (1)")
      let error = #expect(throws: StoreError.self) {
        try blocked.inTransaction(.immediate) { try blocked.execute("INSERT INTO t VALUES (2)") }
      }
      #expect(error?.kind == .busy)
      #expect(error?.code == 5)  // SQLITE_BUSY
      #expect(error?.sql == "BEGIN IMMEDIATE TRANSACTION")
      #expect(!blocked.isInTransaction)
    }
    // Once the writer commits, the other connection can write.
    try blocked.inTransaction(.immediate) { try blocked.execute("INSERT INTO t VALUES (2)") }
    #expect(try values(writer) == [1, 2])
  }

  @Test func aFailedStatementInsideRollsBackAndRethrowsItsError() throws {
    let directory = try TemporaryDirectory()
    let db = try makeDatabase(directory)
    try db.execute("CREATE UNIQUE INDEX one_x ON t(x)")
    let error = #expect(throws: StoreError.self) {
      try db.inTransaction {
        try db.execute("INSERT INTO t VALUES (1)")
        try db.execute("INSERT INTO t VALUES (1)")
      }
    }
    #expect(error?.kind == .cannotCreate)
    #expect(try values(db) == [])
  }
}
