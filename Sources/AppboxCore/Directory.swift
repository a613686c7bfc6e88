import CSystem
import Glibc

/// One entry of a directory listing. Names are raw bytes: Linux names need not be UTF-8.
public struct DirectoryEntry: Sendable, Equatable {
  public var name: [UInt8]
  /// The type from `d_type`, or nil where the file system does not report it.
  public var type: FileType?
  public var inode: UInt64

  /// The name as a String (lossy for names that are not UTF-8).
  public var nameString: String { String(decoding: name, as: UTF8.self) }
}

extension FileDescriptor {
  /// The entries of this directory (without "." and ".."), in directory order.
  /// Uses `fdopendir(3)` and `readdir(3)` on a duplicate, so this descriptor stays open.
  public func entries() throws -> [DirectoryEntry] {
    let dup = Glibc.fcntl(rawValue, F_DUPFD_CLOEXEC, 0)
    guard dup >= 0 else { throw SystemError("list directory") }
    guard let stream = Glibc.fdopendir(dup) else {
      let error = SystemError("list directory")
      Glibc.close(dup)
      throw error
    }
    defer { Glibc.closedir(stream) }
    Glibc.rewinddir(stream)
    var result: [DirectoryEntry] = []
    while true {
      Glibc.errno = 0
      guard let entry = Glibc.readdir(stream) else {
        if Glibc.errno != 0 { throw SystemError("list directory") }
        return result
      }
      let namePointer = appbox_dirent_name(entry)!
      let length = strlen(namePointer)
      let name = UnsafeRawBufferPointer(start: namePointer, count: length)
      if (length == 1 && name[0] == 0x2E) || (length == 2 && name[0] == 0x2E && name[1] == 0x2E) { continue }
      let type: FileType?
      switch Int32(appbox_dirent_type(entry)) {
      case Int32(DT_REG): type = .regular
      case Int32(DT_DIR): type = .directory
      case Int32(DT_LNK): type = .symlink
      case Int32(DT_FIFO): type = .fifo
      case Int32(DT_CHR): type = .characterDevice
      case Int32(DT_BLK): type = .blockDevice
      case Int32(DT_SOCK): type = .socket
      default: type = nil
      }
      result.append(DirectoryEntry(name: Array(name), type: type, inode: appbox_dirent_ino(entry)))
    }
  }
}

/// Calls `body` with a NUL-terminated C string made of raw name bytes (which may not be UTF-8).
@inlinable
public func withCName<R>(_ name: [UInt8], _ body: (UnsafePointer<CChar>) throws -> R) rethrows -> R {
  var terminated = name
  terminated.append(0)
  return try terminated.withUnsafeBufferPointer { buffer in
    try buffer.baseAddress!.withMemoryRebound(to: CChar.self, capacity: buffer.count) { try body($0) }
  }
}
