import CSystem
import Glibc

extension FileDescriptor {
  /// The names of this file's extended attributes, sorted. Uses `flistxattr(2)`.
  public func extendedAttributeNames() throws -> [String] {
    while true {
      let size = flistxattr(rawValue, nil, 0)
      if size < 0 {
        if Errno.current == .notSupported { return [] }
        throw SystemError("list extended attributes")
      }
      if size == 0 { return [] }
      var buffer = [CChar](repeating: 0, count: size)
      let n = flistxattr(rawValue, &buffer, size)
      if n < 0 {
        if Errno.current == Errno(rawValue: ERANGE) { continue }  // grew meanwhile
        throw SystemError("list extended attributes")
      }
      return buffer[0..<n].split(separator: 0).map {
        String(decoding: $0.map { UInt8(bitPattern: $0) }, as: UTF8.self)
      }
      .sorted()
    }
  }

  /// The value of extended attribute `name`, or nil when the file has none by that name.
  /// Uses `fgetxattr(2)`.
  public func extendedAttribute(_ name: String) throws -> [UInt8]? {
    while true {
      let size = fgetxattr(rawValue, name, nil, 0)
      if size < 0 {
        if Errno.current == .noData || Errno.current == .notSupported { return nil }
        throw SystemError("read extended attribute \(name)")
      }
      var buffer = [UInt8](repeating: 0, count: size)
      let n = buffer.withUnsafeMutableBytes { fgetxattr(rawValue, name, $0.baseAddress, size) }
      if n < 0 {
        if Errno.current == Errno(rawValue: ERANGE) { continue }
        if Errno.current == .noData { return nil }
        throw SystemError("read extended attribute \(name)")
      }
      return Array(buffer[0..<n])
    }
  }

  /// Sets extended attribute `name`. Uses `fsetxattr(2)`.
  public func setExtendedAttribute(_ name: String, _ value: [UInt8]) throws {
    let result = value.withUnsafeBytes { fsetxattr(rawValue, name, $0.baseAddress, value.count, 0) }
    guard result == 0 else { throw SystemError("set extended attribute \(name)") }
  }

  /// Removes extended attribute `name`; absent is not an error. Uses `fremovexattr(2)`.
  public func removeExtendedAttribute(_ name: String) throws {
    guard fremovexattr(rawValue, name) == 0 || Errno.current == .noData else {
      throw SystemError("remove extended attribute \(name)")
    }
  }
}

extension FileDescriptor {
  /// Whether entry `name` of this directory carries extended attribute `attribute`,
  /// without opening the entry or following a symlink there. Uses `lgetxattr(2)` through
  /// `/proc/self/fd`.
  public func entryHasExtendedAttribute(_ name: [UInt8], _ attribute: String) -> Bool {
    let path = Array("/proc/self/fd/\(rawValue)/".utf8) + name
    return withCName(path) { lgetxattr($0, attribute, nil, 0) >= 0 }
  }

  /// Flushes the whole file system holding this descriptor: one call that makes a
  /// freshly written tree durable. Uses `syncfs(2)`.
  public func syncFileSystem() throws {
    guard appbox_syncfs(rawValue) == 0 else { throw SystemError("sync file system") }
  }
}

extension FileDescriptor {
  /// Marks this directory as holding unrelated hierarchies (`chattr +T`), so ext4 spreads
  /// its subdirectories across block groups. Best effort: false where the file system has
  /// no such flag. Uses `ioctl(FS_IOC_SETFLAGS)`.
  @discardableResult
  public func markAsTopDirectory() -> Bool { appbox_mark_top_directory(rawValue) == 0 }
}
