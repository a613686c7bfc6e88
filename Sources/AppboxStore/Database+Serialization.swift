import AppboxCore
import CSQLite

extension Database {
  /// Replaces this connection's main database (open it on ":memory:") with a database image
  /// that `fill` writes into SQLite's own buffer of `capacity` bytes, returning the image's
  /// size; read-only: nothing of it
  /// touches the disk. The image is untrusted data: its header is set to the rollback journal
  /// (an image in WAL mode could not be opened in memory), and the schema is read at once,
  /// so a file that is not a database fails here (`.badData`).
  /// Uses `sqlite3_malloc64` and `sqlite3_deserialize`.
  public func deserialize(capacity: Int, fill: (UnsafeMutableRawBufferPointer) throws -> Int) throws {
    guard capacity >= 100, let memory = sqlite3_malloc64(sqlite3_uint64(capacity)) else {
      throw connection.error(
        SQLITE_NOTADB,
        message: "a database image of \(capacity) bytes is too small, or there is no memory for it",
        operation: "load database image", sql: nil, kind: capacity < 100 ? .badData : .io)
    }
    let buffer = UnsafeMutableRawBufferPointer(start: memory, count: capacity)
    let size: Int
    do {
      size = try fill(buffer)
    } catch {
      sqlite3_free(memory)
      throw error
    }
    guard size >= 100, size <= capacity else {
      sqlite3_free(memory)
      throw connection.error(
        SQLITE_NOTADB, message: "a database image of \(size) bytes is too small",
        operation: "load database image",
        sql: nil, kind: .badData)
    }
    // File format read and write versions: 1 is the rollback journal, 2 WAL.
    buffer[18] = 1
    buffer[19] = 1
    let flags = UInt32(SQLITE_DESERIALIZE_FREEONCLOSE | SQLITE_DESERIALIZE_READONLY)
    let result = sqlite3_deserialize(
      connection.handle, "main", memory.assumingMemoryBound(to: UInt8.self), sqlite3_int64(size),
      sqlite3_int64(capacity), flags)
    // With FREEONCLOSE, SQLite frees the buffer even when it fails.
    guard result == SQLITE_OK else {
      throw connection.error(result, operation: "load database image", sql: nil)
    }
    _ = try scalar("SELECT count(*) FROM sqlite_master")
  }

  /// The main database as the bytes of a database file. Uses `sqlite3_serialize`.
  public func serialize() throws -> [UInt8] {
    var size: sqlite3_int64 = 0
    guard let bytes = sqlite3_serialize(connection.handle, "main", &size, 0) else {
      throw connection.error(
        SQLITE_NOMEM, message: "out of memory", operation: "serialize database", sql: nil)
    }
    defer { sqlite3_free(bytes) }
    return Array(UnsafeBufferPointer(start: bytes, count: Int(size)))
  }
}
