import Foundation
import Glibc

/// Writes whole files so that readers see the old content or the new, never a mix.
public enum AtomicFile {
  /// Writes `bytes` to `name` in `directory` as a `StagedFile`: a temp file beside it, fsync,
  /// `rename(2)` over the old one, fsync of the directory. Never follows a symlink at `name`
  /// (rename replaces the link itself). On failure the temp file is removed.
  public static func write<Bytes: ContiguousBytes>(
    _ bytes: Bytes, to name: String, in directory: FileDescriptor, mode: mode_t = 0o644, durable: Bool = true
  ) throws {
    let staged = try StagedFile(name, in: directory, mode: mode)
    try staged.descriptor.writeAll(bytes)
    try staged.commit(durable: durable)
  }

  /// Writes `bytes` to the file at `path` atomically (see `write(_:to:in:)`).
  public static func write<Bytes: ContiguousBytes>(_ bytes: Bytes, toPath path: String, mode: mode_t = 0o644)
    throws
  {
    let (dir, name) = splitPath(path)
    let directory = try FileDescriptor.open(dir, O_RDONLY | O_DIRECTORY)
    try directory.closeAfter { try write(bytes, to: name, in: $0, mode: mode) }
  }
}

/// Splits "a/b/c" into ("a/b", "c"), "c" into (".", "c") and "/c" into ("/", "c").
public func splitPath(_ path: String) -> (directory: String, name: String) {
  guard let slash = path.lastIndex(of: "/") else { return (".", path) }
  let dir = String(path[..<slash])
  return (dir.isEmpty ? "/" : dir, String(path[path.index(after: slash)...]))
}
