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
    try copy(from: source, toRawName: Array(name.utf8), in: directory, mode: mode, displayPath: displayPath)
  }

  /// `copy(from:to:in:...)` for a destination name given as raw bytes.
  @discardableResult
  public static func copy(
    from source: FileDescriptor, toRawName name: [UInt8], in directory: FileDescriptor, mode: mode_t = 0o644,
    displayPath: String? = nil
  ) throws -> Int64 {
    let shown = displayPath ?? String(decoding: name, as: UTF8.self)
    let staged = try StagedFile(rawName: name, in: directory, mode: mode, displayPath: shown)
    let output = staged.descriptor
    var total: Int64 = 0
    var buffer = [UInt8](repeating: 0, count: 256 * 1024)
    while true {
      let count = try buffer.withUnsafeMutableBytes { try source.read(into: $0) }
      if count == 0 { break }
      try buffer.withUnsafeBytes {
        try output.writeAll(UnsafeRawBufferPointer(rebasing: $0[0..<count]))
      }
      total += Int64(count)
    }
    do {
      try staged.commit()
    } catch let error as SystemError where error.operation == "rename" {
      throw SystemError("replace", path: shown, errno: error.errno)
    }
    return total
  }
}
