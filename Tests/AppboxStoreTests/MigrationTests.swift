import AppboxCore
import Foundation
import Testing

@testable import AppboxStore

private let createLog = "CREATE TABLE log(step TEXT NOT NULL)"

private func log(_ db: Database) throws -> [String] {
  try db.all("SELECT step FROM log ORDER BY rowid") { $0.text(0) ?? "" }
}

@Suite struct MigrationTests {
  @Test func migrationsRunOnceInOrderAndSetTheVersion() throws {
    let directory = try TemporaryDirectory()
    let path = directory.path("migrate.db")
    let migrations = [
      createLog,
      "INSERT INTO log VALUES ('two')",
      "INSERT INTO log VALUES ('three'); CREATE TABLE extra(x);",
    ]
    do {
      let db = try Database(path: path)
      #expect(try db.userVersion() == 0)
      try db.migrate(migrations)
      #expect(try db.userVersion() == 3)
      try db.migrate(migrations)
    }
    let reopened = try Database(path: path)
    try reopened.migrate(migrations)
    #expect(try reopened.userVersion() == 3)
    #expect(try log(reopened) == ["two", "three"])
  }

  @Test func onlyNewMigrationsRunLater() throws {
    let directory = try TemporaryDirectory()
    let db = try Database(path: directory.path("later.db"))
    try db.migrate([createLog, "INSERT INTO log VALUES ('v2')"])
    try db.migrate([createLog, "INSERT INTO log VALUES ('v2')", "INSERT INTO log VALUES ('v3')"])
    #expect(try db.userVersion() == 3)
    #expect(try log(db) == ["v2", "v3"])
  }

  @Test func aFailingMigrationLeavesTheEarlierOnesAndNothingOfItself() throws {
    let directory = try TemporaryDirectory()
    let db = try Database(path: directory.path("fail.db"))
    let error = #expect(throws: StoreError.self) {
      try db.migrate([
        createLog,
        "INSERT INTO log VALUES ('partial'); INSERT INTO nowhere VALUES (1);",
      ])
    }
    #expect(error?.operation == "migrate to schema version 2")
    #expect(error?.sql?.contains("nowhere") == true)
    #expect(try db.userVersion() == 1)
    #expect(try log(db) == [])
    #expect(!db.isInTransaction)
  }

  @Test func aDatabaseNewerThanTheMigrationsIsRefused() throws {
    let directory = try TemporaryDirectory()
    let path = directory.path("newer.db")
    let db = try Database(path: path)
    try db.migrate([createLog])
    try db.execute("PRAGMA user_version = 5")
    let error = #expect(throws: StoreError.self) { try db.migrate([createLog, "SELECT 1"]) }
    #expect(error?.kind == .badData)
    #expect(error?.description.contains("schema version 5") == true)
    #expect(error?.description.contains(path) == true)
    #expect(try db.userVersion() == 5)
  }

  @Test func anUpToDateReadOnlyDatabaseNeedsNoWrite() throws {
    let directory = try TemporaryDirectory()
    let path = directory.path("ro.db")
    try Database(path: path).migrate([createLog])
    let readOnly = try Database(path: path, mode: .readOnly)
    try readOnly.migrate([createLog])
    let error = #expect(throws: StoreError.self) {
      try readOnly.migrate([createLog, "INSERT INTO log VALUES ('x')"])
    }
    #expect(error?.kind == .denied)
  }
}
