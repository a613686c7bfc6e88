import Glibc

extension AtomicFile {
  /// Copies everything `source` still has to read into `name` in `directory`, atomically:
  /// a temp file beside it (created with `O_EXCL | O_NOFOLLOW`), fsync, `rename(2)` over
  /// the old entry, fsync of the directory. Streams in 256 KiB chunks, so the size is
  /// not limited by memory. A symlink at `name` is replaced, never followed; on failure
  /// the temp file is removed and `name` is untouched. Returns the bytes copied.
  @discardableResult
  public static func copy(
    from source: FileDescriptor, to name: String, in directory: FileDescriptor, mode: mode_t = 0o644,
    displayPath: String? = nil
  ) throws -> Int64 {
    let temp = ".\(name).tmp-\(UInt32.random(in: 0...UInt32.max))"
    let shown = displayPath ?? name
    let fd = try directory.open(
      temp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, mode: mode, displayPath: shown)
    var total: Int64 = 0
    do {
      try fd.closeAfter { fd in
        var buffer = [UInt8](repeating: 0, count: 256 * 1024)
        while true {
          let count = try buffer.withUnsafeMutableBytes { try source.read(into: $0) }
          if count == 0 { break }
          try buffer.withUnsafeBytes { try fd.writeAll(UnsafeRawBufferPointer(rebasing: $0[0..<count])) }
          total += Int64(count)
        }
        try fd.setPermissions(mode)
        try fd.sync()
      }
      do {
        try directory.rename(temp, to: name)
      } catch let error as SystemError {
        throw SystemError("replace", path: shown, errno: error.errno)
      }
    } catch {
      try? directory.remove(temp)
      throw error
    }
    try directory.sync()
    return total
  }
}
