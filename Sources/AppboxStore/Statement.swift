import CSQLite
import Foundation

/// One SQLite value, as bound to a parameter or read from a column.
public enum SQLValue: Sendable, Equatable {
  case null
  case integer(Int64)
  case real(Double)
  case text(String)
  case blob([UInt8])
}

/// A prepared statement. Parameter indexes are 1-based, as in SQL's `?1`; column indexes are
/// 0-based, as in SQLite's C API. Not thread-safe: use it on its database's thread only.
///
/// Binding after the statement has been stepped resets it first (keeping the other bindings),
/// so a hot insert loop is just `bind`, `bind`, `step` per row with no boxing into `SQLValue`.
public final class Statement {
  /// The statement's SQL text as given to `prepare`.
  public let sql: String
  /// Number of result columns. Uses `sqlite3_column_count`.
  public let columnCount: Int
  /// Number of parameters (the largest `?NNN` index). Uses `sqlite3_bind_parameter_count`.
  public let parameterCount: Int

  let connection: Connection
  let handle: OpaquePointer
  /// Set by `step`, cleared by `reset`: SQLite refuses bindings until a stepped statement is reset.
  private var needsReset = false

  /// Compiles exactly one statement; trailing whitespace, comments and `;` are allowed.
  /// Uses `sqlite3_prepare_v3`.
  init(connection: Connection, sql: String, persistent: Bool) throws {
    let flags = persistent ? UInt32(SQLITE_PREPARE_PERSISTENT) : 0
    var prepared: OpaquePointer?
    var extraStatement = false
    let resultCode = sql.withCString { text -> Int32 in
      var tail: UnsafePointer<CChar>?
      let code = sqlite3_prepare_v3(connection.handle, text, -1, flags, &prepared, &tail)
      if code == SQLITE_OK, let tail, tail.pointee != 0 {
        // Whatever is left must compile to nothing (whitespace or comments).
        var rest: OpaquePointer?
        if sqlite3_prepare_v3(connection.handle, tail, -1, 0, &rest, nil) != SQLITE_OK || rest != nil {
          extraStatement = true
        }
        sqlite3_finalize(rest)
      }
      return code
    }
    guard resultCode == SQLITE_OK else {
      sqlite3_finalize(prepared)
      throw connection.error(resultCode, operation: "prepare statement", sql: sql)
    }
    guard let prepared, !extraStatement else {
      sqlite3_finalize(prepared)
      let message = prepared == nil ? "no SQL statement to prepare" : "more than one SQL statement"
      throw connection.error(SQLITE_MISUSE, message: message, operation: "prepare statement", sql: sql)
    }
    self.connection = connection
    self.handle = prepared
    self.sql = sql
    self.columnCount = Int(sqlite3_column_count(prepared))
    self.parameterCount = Int(sqlite3_bind_parameter_count(prepared))
  }

  /// Uses `sqlite3_finalize`.
  deinit {
    sqlite3_finalize(handle)
  }

  // MARK: Running

  /// Advances to the next row: `true` when a row is available, `false` when done.
  /// Uses `sqlite3_step`.
  public func step() throws -> Bool {
    needsReset = true
    let resultCode = sqlite3_step(handle)
    if resultCode == SQLITE_ROW { return true }
    if resultCode == SQLITE_DONE { return false }
    throw connection.error(resultCode, operation: "execute statement", sql: sql)
  }

  /// Rewinds to before the first row, keeping bindings. The result code only repeats the
  /// last `step` error, which `step` already threw, so it is ignored. Uses `sqlite3_reset`.
  public func reset() {
    sqlite3_reset(handle)
    needsReset = false
  }

  /// Sets every parameter to NULL. Uses `sqlite3_clear_bindings`.
  public func clearBindings() {
    resetIfStepped()
    sqlite3_clear_bindings(handle)
  }

  /// Runs the statement to completion with its current bindings, discarding any rows,
  /// then resets it. Uses `sqlite3_step`.
  public func execute() throws {
    resetIfStepped()
    defer { reset() }
    while try step() {}
  }

  /// Binds `values` to parameters 1...n and runs the statement to completion.
  /// Uses `sqlite3_step`.
  public func execute(_ values: [SQLValue]) throws {
    try bind(values)
    try execute()
  }

  /// Maps every row from the first, with the current bindings, then resets the statement.
  /// Uses `sqlite3_step`.
  public func rows<T>(_ map: (Statement) throws -> T) throws -> [T] {
    resetIfStepped()
    defer { reset() }
    var result: [T] = []
    while try step() {
      result.append(try map(self))
    }
    return result
  }

  /// Maps the first row, or returns nil when there is none, then resets the statement.
  /// Uses `sqlite3_step`.
  public func first<T>(_ map: (Statement) throws -> T) throws -> T? {
    resetIfStepped()
    defer { reset() }
    return try step() ? map(self) : nil
  }

  /// Whether the statement has stepped and not finished or been reset: it may be holding a
  /// read transaction open. Uses `sqlite3_stmt_busy`.
  public var isBusy: Bool { sqlite3_stmt_busy(handle) != 0 }

  private func resetIfStepped() {
    if needsReset { reset() }
  }

  // MARK: Binding

  /// Replaces all bindings: `values[0]` goes to parameter 1. The count must match
  /// `parameterCount`. Uses `sqlite3_clear_bindings` and the `sqlite3_bind_*` family.
  public func bind(_ values: [SQLValue]) throws {
    guard values.count == parameterCount else {
      throw connection.error(
        SQLITE_RANGE, message: "\(values.count) values for \(parameterCount) parameters",
        operation: "bind parameters", sql: sql)
    }
    clearBindings()
    for (offset, value) in values.enumerated() {
      try bind(value, at: offset + 1)
    }
  }

  /// Binds one value to a 1-based parameter index. Uses the `sqlite3_bind_*` family.
  public func bind(_ value: SQLValue, at index: Int) throws {
    switch value {
    case .null: try bindNull(at: index)
    case .integer(let number): try bind(number, at: index)
    case .real(let number): try bind(number, at: index)
    case .text(let string): try bind(string, at: index)
    case .blob(let bytes): try bind(bytes, at: index)
    }
  }

  /// Uses `sqlite3_bind_int64`.
  public func bind(_ value: Int64, at index: Int) throws {
    resetIfStepped()
    try check(sqlite3_bind_int64(handle, Int32(index), value), index)
  }

  /// Uses `sqlite3_bind_int64`.
  public func bind(_ value: Int, at index: Int) throws {
    try bind(Int64(value), at: index)
  }

  /// Uses `sqlite3_bind_double`.
  public func bind(_ value: Double, at index: Int) throws {
    resetIfStepped()
    try check(sqlite3_bind_double(handle, Int32(index), value), index)
  }

  /// Binds NULL. Uses `sqlite3_bind_null`.
  public func bindNull(at index: Int) throws {
    resetIfStepped()
    try check(sqlite3_bind_null(handle, Int32(index)), index)
  }

  /// Binds UTF-8 text; SQLite copies it. Uses `sqlite3_bind_text64`.
  public func bind(_ value: String, at index: Int) throws {
    resetIfStepped()
    var value = value
    let resultCode = value.withUTF8 { utf8 -> Int32 in
      // A NULL pointer would bind SQL NULL, so empty text gets a real (empty) C string.
      guard let base = utf8.baseAddress, !utf8.isEmpty else {
        return sqlite3_bind_text64(
          handle, Int32(index), "", 0, appbox_sqlite_transient(), UInt8(SQLITE_UTF8))
      }
      return base.withMemoryRebound(to: CChar.self, capacity: utf8.count) { text in
        sqlite3_bind_text64(
          handle, Int32(index), text, UInt64(utf8.count), appbox_sqlite_transient(), UInt8(SQLITE_UTF8))
      }
    }
    try check(resultCode, index)
  }

  /// Binds bytes as a blob; SQLite copies them. An empty buffer binds an empty blob, not NULL.
  /// Uses `sqlite3_bind_blob64` or `sqlite3_bind_zeroblob`.
  public func bind(_ bytes: UnsafeRawBufferPointer, at index: Int) throws {
    resetIfStepped()
    let resultCode: Int32
    if let base = bytes.baseAddress, !bytes.isEmpty {
      resultCode = sqlite3_bind_blob64(
        handle, Int32(index), base, UInt64(bytes.count), appbox_sqlite_transient())
    } else {
      resultCode = sqlite3_bind_zeroblob(handle, Int32(index), 0)
    }
    try check(resultCode, index)
  }

  /// Binds a blob. Uses `sqlite3_bind_blob64`.
  public func bind(_ bytes: [UInt8], at index: Int) throws {
    try bytes.withUnsafeBytes { try bind($0, at: index) }
  }

  /// Binds a blob. Uses `sqlite3_bind_blob64`.
  public func bind(_ data: Data, at index: Int) throws {
    try data.withUnsafeBytes { try bind($0, at: index) }
  }

  @inline(__always)
  private func check(_ resultCode: Int32, _ index: Int) throws {
    if resultCode != SQLITE_OK {
      throw connection.error(resultCode, operation: "bind parameter \(index)", sql: sql)
    }
  }

  // MARK: Reading columns (0-based)

  /// Uses `sqlite3_column_int64`.
  public func int64(_ column: Int) -> Int64 {
    sqlite3_column_int64(handle, Int32(column))
  }

  /// Uses `sqlite3_column_int64`.
  public func int(_ column: Int) -> Int {
    Int(sqlite3_column_int64(handle, Int32(column)))
  }

  /// Uses `sqlite3_column_double`.
  public func double(_ column: Int) -> Double {
    sqlite3_column_double(handle, Int32(column))
  }

  /// The column as text, or nil when it is NULL. Invalid UTF-8 is replaced by U+FFFD.
  /// Uses `sqlite3_column_text`.
  public func text(_ column: Int) -> String? {
    guard let text = sqlite3_column_text(handle, Int32(column)) else { return nil }
    let count = Int(sqlite3_column_bytes(handle, Int32(column)))
    return String(decoding: UnsafeBufferPointer(start: text, count: count), as: UTF8.self)
  }

  /// The column's bytes (empty for NULL). Uses `sqlite3_column_blob`.
  public func blob(_ column: Int) -> [UInt8] {
    withUnsafeBlob(column) { Array($0) }
  }

  /// The column's bytes (empty for NULL). Uses `sqlite3_column_blob`.
  public func data(_ column: Int) -> Data {
    withUnsafeBlob(column) { Data($0) }
  }

  /// Lends the column's bytes without copying; valid only inside `body`.
  /// Uses `sqlite3_column_blob`.
  public func withUnsafeBlob<R>(_ column: Int, _ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
    // sqlite3_column_bytes must follow sqlite3_column_blob: the blob call may convert the value.
    let base = sqlite3_column_blob(handle, Int32(column))
    let count = Int(sqlite3_column_bytes(handle, Int32(column)))
    return try body(UnsafeRawBufferPointer(start: base, count: base == nil ? 0 : count))
  }

  /// Uses `sqlite3_column_type`.
  public func isNull(_ column: Int) -> Bool {
    sqlite3_column_type(handle, Int32(column)) == SQLITE_NULL
  }

  /// The column as stored, by its dynamic type. Uses `sqlite3_column_type`.
  public func value(_ column: Int) -> SQLValue {
    switch sqlite3_column_type(handle, Int32(column)) {
    case SQLITE_INTEGER: return .integer(int64(column))
    case SQLITE_FLOAT: return .real(double(column))
    case SQLITE_TEXT: return .text(text(column) ?? "")
    case SQLITE_BLOB: return .blob(blob(column))
    default: return .null
    }
  }

  /// Uses `sqlite3_column_name`.
  public func columnName(_ column: Int) -> String {
    sqlite3_column_name(handle, Int32(column)).map { String(cString: $0) } ?? ""
  }
}
