import CSystem
import Glibc

// The `*at` calls by raw name bytes, for code that walks and rebuilds trees whose names
// need not be UTF-8 (the backup engine). Every call here refuses to follow a symlink in
// the final component; `openBeneath` (Beneath.swift) resolves whole paths.

extension FileDescriptor {
  /// Calls `body` with each entry of this directory (not "." or ".."): its NUL-terminated raw
  /// name, valid only during the call, the name's length, and its inode. Nothing is
  /// allocated per entry, which matters when a scan visits hundreds of thousands. Reads from
  /// the descriptor's current position (a fresh descriptor starts at the beginning).
  /// Uses `getdents64(2)` into `buffer` (32 KiB or more).
  public func forEachEntry(
    buffer: UnsafeMutableRawBufferPointer, _ body: (UnsafePointer<CChar>, Int, UInt64) throws -> Void
  ) throws {
    while true {
      let count = appbox_getdents64(rawValue, buffer.baseAddress, buffer.count)
      if count == 0 { return }
      guard count > 0 else { throw SystemError("list directory") }
      var offset = 0
      while offset < count {
        let record = UnsafeRawPointer(buffer.baseAddress! + offset)
        let length = Int(record.loadUnaligned(fromByteOffset: 16, as: UInt16.self))
        let inode = record.loadUnaligned(as: UInt64.self)
        let name = (record + 19).assumingMemoryBound(to: CChar.self)
        let nameLength = strlen(name)
        offset += length
        if name[0] == 0x2E && (nameLength == 1 || (nameLength == 2 && name[1] == 0x2E)) { continue }
        try body(name, nameLength, inode)
      }
    }
  }

  /// The status of entry `name` (a NUL-terminated C string), not following a symlink; nil
  /// when it does not exist. Uses `fstatat(2)` with `AT_SYMLINK_NOFOLLOW`.
  public func status(ofCName name: UnsafePointer<CChar>) throws -> FileStatus? {
    var st = stat()
    if Glibc.fstatat(rawValue, name, &st, AT_SYMLINK_NOFOLLOW) == 0 { return FileStatus(st) }
    if Errno.current == .noEntry { return nil }
    throw SystemError("stat", path: String(cString: name))
  }

  /// The status of entry `name` of this directory, not following a symlink; nil when it
  /// does not exist. Uses `fstatat(2)` with `AT_SYMLINK_NOFOLLOW`.
  public func status(ofRawName name: [UInt8]) throws -> FileStatus? {
    var st = stat()
    let result = withCName(name) { Glibc.fstatat(rawValue, $0, &st, AT_SYMLINK_NOFOLLOW) }
    if result == 0 { return FileStatus(st) }
    if Errno.current == .noEntry { return nil }
    throw SystemError("stat", path: String(decoding: name, as: UTF8.self))
  }

  /// Creates directory `name` here. Uses `mkdirat(2)`.
  public func makeDirectory(rawName name: [UInt8], mode: mode_t) throws {
    guard withCName(name, { Glibc.mkdirat(rawValue, $0, mode) }) == 0 else {
      throw SystemError("create directory", path: String(decoding: name, as: UTF8.self))
    }
  }

  /// Creates symlink `name` here pointing at `target` (both raw bytes). Uses `symlinkat(2)`.
  public func makeSymlink(rawName name: [UInt8], target: [UInt8]) throws {
    let result = withCName(target) { cTarget in withCName(name) { Glibc.symlinkat(cTarget, rawValue, $0) } }
    guard result == 0 else {
      throw SystemError("create symlink", path: String(decoding: name, as: UTF8.self))
    }
  }

  /// Creates a FIFO `name` here. Uses `mkfifoat(3)`.
  public func makeFIFO(rawName name: [UInt8], mode: mode_t) throws {
    guard withCName(name, { Glibc.mkfifoat(rawValue, $0, mode) }) == 0 else {
      throw SystemError("create FIFO", path: String(decoding: name, as: UTF8.self))
    }
  }

  /// Makes `name` in `directory` a new hard link to `existing` in this directory, never
  /// following a symlink. Uses `linkat(2)`.
  public func link(rawName existing: [UInt8], to name: [UInt8], in directory: FileDescriptor) throws {
    let result = withCName(existing) { old in
      withCName(name) { Glibc.linkat(rawValue, old, directory.rawValue, $0, 0) }
    }
    guard result == 0 else {
      throw SystemError("create hard link", path: String(decoding: name, as: UTF8.self))
    }
  }

  /// Removes entry `name` (a directory with `directory: true`). Uses `unlinkat(2)`.
  public func remove(rawName name: [UInt8], directory: Bool = false) throws {
    guard withCName(name, { Glibc.unlinkat(rawValue, $0, directory ? AT_REMOVEDIR : 0) }) == 0 else {
      throw SystemError("remove", path: String(decoding: name, as: UTF8.self))
    }
  }

  /// Renames entry `name` here to `newName` in `directory` (renameat2 `flags`). Uses `renameat2(2)`.
  public func rename(
    rawName name: [UInt8], to newName: [UInt8], in directory: FileDescriptor,
    flags: RenameFlags = []
  ) throws {
    let result = withCName(name) { old in
      withCName(newName) { appbox_renameat2(rawValue, old, directory.rawValue, $0, flags.rawValue) }
    }
    guard result == 0 else { throw SystemError("rename", path: String(decoding: name, as: UTF8.self)) }
  }

  /// Sets the modification time of entry `name` (a symlink itself, not its target); the
  /// access time is set to the same value. Uses `utimensat(2)` with `AT_SYMLINK_NOFOLLOW`.
  public func setTimes(ofRawName name: [UInt8], modification: Timespec) throws {
    var times = [modification.timespec, modification.timespec]
    guard withCName(name, { Glibc.utimensat(rawValue, $0, &times, AT_SYMLINK_NOFOLLOW) }) == 0 else {
      throw SystemError("set times", path: String(decoding: name, as: UTF8.self))
    }
  }

  /// The target of symlink `name`, raw bytes. Uses `readlinkat(2)`.
  public func readLink(rawName name: [UInt8]) throws -> [UInt8] {
    var buffer = [UInt8](repeating: 0, count: Int(PATH_MAX) + 1)
    let n = withCName(name) { cName in
      buffer.withUnsafeMutableBufferPointer { p in
        p.baseAddress!.withMemoryRebound(to: CChar.self, capacity: p.count) {
          Glibc.readlinkat(rawValue, cName, $0, p.count)
        }
      }
    }
    guard n >= 0 else { throw SystemError("read link", path: String(decoding: name, as: UTF8.self)) }
    return Array(buffer[0..<n])
  }

  /// The `user.*` extended attributes of this open file, sorted by name. Attributes of other
  /// namespaces (security, trusted, system) are not user data and are left out.
  /// Uses `flistxattr(2)` and `fgetxattr(2)`.
  public func userExtendedAttributes() throws -> [(name: String, value: [UInt8])] {
    var result: [(name: String, value: [UInt8])] = []
    for name in try extendedAttributeNames() where name.hasPrefix("user.") {
      if let value = try extendedAttribute(name) { result.append((name, value)) }
    }
    return result
  }

  /// Starts writing a range of this file's dirty pages to disk without waiting, so that a
  /// later `sync()` has little left to do. Advisory: failures are ignored.
  /// Uses `sync_file_range(2)` with `SYNC_FILE_RANGE_WRITE`.
  public func startWriteback(offset: Int64, length: Int64) {
    _ = appbox_start_writeback(rawValue, offset, length)
  }

  /// Bytes available to an unprivileged user on this descriptor's file system.
  /// Uses `fstatvfs(3)`.
  public func availableSpace() throws -> Int64 {
    var info = statvfs()
    guard Glibc.fstatvfs(rawValue, &info) == 0 else { throw SystemError("query free space") }
    return Int64(info.f_bavail) &* Int64(info.f_frsize)
  }
}
