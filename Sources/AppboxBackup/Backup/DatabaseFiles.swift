// Which large files are databases: the files apps edit in place (SQLite under Core Data, GRDB
// or FMDB; Realm), told by the name's extension or by the header a database file starts with.
// A backup indexes a database's chunks the first time it reads it (StreamMode.indexed), so its
// first edit stores only the chunks that edit touched; any other large file is chunked lazily,
// once seen changing (docs/performance.md). A wrong answer costs time or bytes, never
// correctness: the file is stored whole either way.

import AppboxCore

enum DatabaseFiles {
  /// Extensions of database files (the last component's, ASCII, any case).
  static let extensions: Set<String> = ["sqlite", "sqlite3", "sqlitedb", "db", "db3", "realm"]

  /// SQLite's header string, the first 16 bytes of every database file.
  static let sqliteHeader = Array("SQLite format 3\u{0}".utf8)
  /// Realm's file format mnemonic, at offset 16 of its header.
  static let realmMnemonic = Array("T-DB".utf8)

  /// Whether the file at `path`, open as `fd`, is a database: by its name, else by its first
  /// 20 bytes (one pread).
  static func isDatabase(path: [UInt8], fd: FileDescriptor) -> Bool {
    if hasDatabaseExtension(path) { return true }
    var head = [UInt8](repeating: 0, count: 20)
    let count = (try? head.withUnsafeMutableBytes { try fd.readAll(into: $0, at: 0) }) ?? 0
    return isDatabase(leadingBytes: head[0..<count])
  }

  /// Whether `path`'s last component ends in a database extension.
  static func hasDatabaseExtension(_ path: [UInt8]) -> Bool {
    let name = path.lastIndex(of: UInt8(ascii: "/")).map { path[($0 + 1)...] } ?? path[...]
    guard let dot = name.lastIndex(of: UInt8(ascii: ".")), dot > name.startIndex else { return false }
    let suffix = name[(dot + 1)...]
    guard suffix.count >= 2, suffix.count <= 8 else { return false }
    return extensions.contains(
      String(decoding: suffix.map { $0 >= 0x41 && $0 <= 0x5A ? $0 | 0x20 : $0 }, as: UTF8.self))
  }

  /// Whether a file starting with `bytes` is a SQLite or Realm database.
  static func isDatabase(leadingBytes bytes: ArraySlice<UInt8>) -> Bool {
    if bytes.starts(with: sqliteHeader) { return true }
    return bytes.count >= 20 && bytes.dropFirst(16).prefix(4).elementsEqual(realmMnemonic)
  }
}
