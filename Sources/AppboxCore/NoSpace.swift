// A full file system, said plainly: "no space left on /dev/loop0 at /mnt/data (needs about
// 12 MB)" instead of the errno (or SQLite's "disk I/O error (SQLite code 4874)", which is
// what a wal-index that cannot grow looks like).
//
// Errors of every module say whether a full disk (ENOSPC, EDQUOT, SQLITE_FULL, a wal-index
// that could not grow) is behind them (`SpaceAwareFailure`); an engine that knows how much it
// was about to write wraps such an error in a `NoSpaceError` with its estimate, and the command
// line turns any other one into a `NoSpaceError` when it reports it.

import Glibc

/// An error that can tell whether a full file system caused it, and at which path.
public protocol SpaceAwareFailure: AppboxFailure {
  /// Whether the operation failed for lack of space (or of quota) on a file system.
  var isOutOfSpace: Bool { get }
  /// The file or directory being written, when known.
  var spacePath: String? { get }
}

extension SystemError: SpaceAwareFailure {
  public var isOutOfSpace: Bool { errno == .noSpace || errno == .quotaExceeded }
  public var spacePath: String? { path }
}

extension Error {
  /// Whether a full file system is behind this error.
  public var isOutOfSpace: Bool { (self as? any SpaceAwareFailure)?.isOutOfSpace ?? false }
}

/// A write that found its file system full.
public struct NoSpaceError: AppboxFailure {
  /// What was being written (a path), for finding its file system.
  public var path: String
  /// About how many bytes the operation needed, when the engine knows.
  public var needed: Int64?
  /// The failure as it was raised ("Unable to write '…'").
  public var underlying: String
  public var kind: FailureKind { .io }

  public init(path: String, needed: Int64? = nil, underlying: any Error) {
    self.path = path
    self.needed = needed
    self.underlying = (underlying as? NoSpaceError)?.underlying ?? String(describing: underlying)
  }

  /// `error` as a NoSpaceError when a full disk is behind it (keeping an estimate it had),
  /// else nil.
  public static func from(_ error: any Error, path fallback: String? = nil, needed: Int64? = nil)
    -> NoSpaceError?
  {
    if let error = error as? NoSpaceError {
      var copy = error
      if copy.needed == nil { copy.needed = needed }
      return copy
    }
    guard let failure = error as? any SpaceAwareFailure, failure.isOutOfSpace,
      let path = failure.spacePath ?? fallback
    else { return nil }
    return NoSpaceError(path: path, needed: needed, underlying: error)
  }

  public var description: String {
    // "Unable to write 'x': no space left on device" → "Unable to write 'x'"
    var head = underlying
    for marker in [
      ": no space left on device", ": disk quota exceeded", ": database or disk is full", ": disk I/O error",
      " (No space left on device)",
    ] {
      if let range = head.range(of: marker) { head = String(head[..<range.lowerBound]) }
    }
    let megabytes = max(1, ((needed ?? 0) + 999_999) / 1_000_000)
    // A path relative to something unknown (a home) names no file system we can find.
    guard path.hasPrefix("/") else { return "\(head): no space left on device (needs about \(megabytes) MB)" }
    if FileSystemName.isOutOfInodes(path) {
      return "\(head): no space left on \(FileSystemName.of(path)): its inode table is full"
    }
    return "\(head): no space left on \(FileSystemName.of(path)) (needs about \(megabytes) MB)"
  }
}

/// The file system a path lives on, named for people: "/dev/loop0 at /mnt/data".
public enum FileSystemName {
  /// Whether the file system of `path` (or of its nearest existing parent) has blocks left
  /// but no inode for this process. Uses `statvfs(3)`.
  static func isOutOfInodes(_ path: String) -> Bool {
    var candidate = path
    var info = statvfs()
    while statvfs(candidate, &info) != 0 {
      let parent = splitPath(candidate).directory
      if parent == candidate || parent.isEmpty { return false }
      candidate = parent
    }
    let root = geteuid() == 0
    let inodes = root ? info.f_ffree : info.f_favail
    let blocks = root ? info.f_bfree : info.f_bavail
    return info.f_files > 0 && inodes == 0 && blocks > 0
  }

  public static func of(_ path: String) -> String {
    var candidate = path
    var st = stat()
    while stat(candidate, &st) != 0 {
      let parent = splitPath(candidate).directory
      if parent == candidate || parent.isEmpty { return path }
      candidate = parent
    }
    let device = UInt64(st.st_dev)
    let major = (device >> 8) & 0xfff | (device >> 32) & ~UInt64(0xfff)
    let minor = device & 0xff | (device >> 12) & ~UInt64(0xff)
    let wanted = "\(major):\(minor)"
    guard
      let table = try? FileDescriptor.open("/proc/self/mountinfo", O_RDONLY).closeAfter({ try $0.readAll() })
    else { return candidate }
    // id parent major:minor root mountpoint options [optional...] - type source superoptions
    var best: (point: String, source: String)?
    for line in String(decoding: table, as: UTF8.self).split(separator: "\n") {
      let fields = line.split(separator: " ").map(String.init)
      guard fields.count > 6, fields[2] == wanted, let dash = fields.firstIndex(of: "-"),
        dash + 2 < fields.count
      else { continue }
      let point = unescapeMountField(fields[4])
      if best == nil || point.count > best!.point.count {
        best = (point, unescapeMountField(fields[dash + 2]))
      }
    }
    guard let best else { return candidate }
    return best.source.hasPrefix("/") ? "\(best.source) at \(best.point)" : best.point
  }

  /// mountinfo writes space, tab, newline and backslash as octal escapes (`\040`).
  private static func unescapeMountField(_ field: String) -> String {
    var bytes: [UInt8] = []
    let raw = Array(field.utf8)
    var index = 0
    while index < raw.count {
      if raw[index] == UInt8(ascii: "\\"), index + 3 < raw.count,
        let value = UInt8(String(decoding: raw[(index + 1)...(index + 3)], as: UTF8.self), radix: 8)
      {
        bytes.append(value)
        index += 4
      } else {
        bytes.append(raw[index])
        index += 1
      }
    }
    return String(decoding: bytes, as: UTF8.self)
  }
}
