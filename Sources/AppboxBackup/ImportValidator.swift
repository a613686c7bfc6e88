// The rules an imported archive must follow. It is untrusted input: one bad member refuses
// the whole archive (exit 65), before the home changes.
//
// Per member, in archive order (paths already placed in the home by ImportLayout):
// - the path (after libarchive applied any pax `path` override, so overrides are judged by
//   their effect) is relative, has no empty, `.` or `..` component, and starts with
//   Documents or Library, which must themselves be directories;
// - the type is a directory, regular file, symlink or hard link: no devices, FIFOs, sockets;
// - no setuid or setgid bit; extended attributes only in the `user.` namespace;
// - no path appears twice, except a directory repeated as a directory;
// - every parent is a directory seen or implied earlier: never a symlink (that would write
//   through a link) nor a file;
// - a hard link names an earlier regular file of the archive;
// - a symlink's target is not empty. It is data, stored as it is and never followed by
//   appbox (files are created through descriptors beneath the staging directory), so an
//   absolute or climbing target is accepted: an app can make such a link itself, and its
//   export must import back;
// - the member count and the sum of apparent sizes (a sparse file counts its full size) stay
//   within the limits, and the bytes of data (holes excluded) within the free space: a bomb
//   stops at the first header past them, before anything is written.

import AppboxCore
import Foundation

/// Bounds on what an import accepts.
public struct ImportLimits: Sendable {
  /// The most members an archive may have (skipped ones count too): `--max-members`.
  public var maxEntries: Int
  /// The most bytes the imported files may add up to, by apparent size (a sparse file counts
  /// its full length, holes included): `--max-size`. Data actually written is also capped by
  /// the free space.
  public var maxBytes: Int64

  public static let defaultMaxEntries = 1_000_000
  public static let defaultMaxBytes: Int64 = 64 << 30

  public init(maxEntries: Int = defaultMaxEntries, maxBytes: Int64 = defaultMaxBytes) {
    self.maxEntries = maxEntries
    self.maxBytes = maxBytes
  }

  /// The defaults, overridden by APPBOX_IMPORT_MAX_ENTRIES and APPBOX_IMPORT_MAX_BYTES.
  public static func from(environment: [String: String]) -> ImportLimits {
    var limits = ImportLimits()
    if let entries = environment["APPBOX_IMPORT_MAX_ENTRIES"].flatMap(Int.init), entries > 0 {
      limits.maxEntries = entries
    }
    if let bytes = environment["APPBOX_IMPORT_MAX_BYTES"].flatMap(Int64.init), bytes > 0 {
      limits.maxBytes = bytes
    }
    return limits
  }
}

struct ImportValidator {
  enum Kind { case directory, file, symlink }
  /// What to do with an admitted member.
  enum Admission {
    case directory
    case file
    case symlink
    case hardlink(target: [UInt8])
  }

  private(set) var known: [[UInt8]: Kind] = [:]
  private var entries = 0
  /// Apparent bytes of the files admitted, and bytes of their data (holes excluded).
  private(set) var bytes: Int64 = 0
  private(set) var dataBytes: Int64 = 0
  let maxEntries: Int
  let maxBytes: Int64
  /// The most data bytes that fit (free space less a reserve).
  let maxDataBytes: Int64

  /// The names a path may start with (nil: any, as in an app group's container).
  let allowedTopLevel: Set<[UInt8]>?

  init(
    maxEntries: Int, maxBytes: Int64, maxDataBytes: Int64 = .max, allowedTopLevel: Set<[UInt8]>? = topLevel
  ) {
    self.maxEntries = maxEntries
    self.maxBytes = maxBytes
    self.maxDataBytes = maxDataBytes
    self.allowedTopLevel = allowedTopLevel
  }

  static let topLevel: Set<[UInt8]> = [Array("Documents".utf8), Array("Library".utf8)]

  static func refuse(_ path: [UInt8], _ reason: String) -> BackupError {
    BackupError(.refusedArchive, "member '\(display(path))' \(reason)")
  }

  /// Counts one member read from the archive, imported or skipped.
  mutating func count() throws {
    entries += 1
    guard entries <= maxEntries else {
      throw BackupError(
        .refusedArchive, "it has more than \(maxEntries) members (--max-members raises the limit)")
    }
  }

  /// Checks one member; returns how to create it and the parent directories it implies
  /// (which the caller creates first, in order).
  mutating func admit(_ entry: ArchiveEntryFacts) throws -> (Admission, implied: [[UInt8]]) {
    let path = entry.path
    if path.first == UInt8(ascii: "/") { throw Self.refuse(path, "has an absolute path") }
    let components = path.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false).map(
      Array.init)
    for component in components {
      if component == Array("..".utf8) { throw Self.refuse(path, "climbs out with '..'") }
      if component.isEmpty || component == [UInt8(ascii: ".")] {
        throw Self.refuse(path, "has an empty or '.' component")
      }
    }
    guard let first = components.first, allowedTopLevel?.contains(first) ?? true else {
      throw Self.refuse(path, "is outside Documents and Library")
    }
    if allowedTopLevel != nil && components.count == 1 && entry.kind != .directory {
      throw Self.refuse(path, "must be a directory")
    }
    switch entry.kind {
    case .other: throw Self.refuse(path, "is a device file, FIFO or socket")
    default: break
    }
    if entry.permissions & 0o6000 != 0 { throw Self.refuse(path, "has the setuid or setgid bit") }
    if let attribute = entry.attributeNames.first(where: { !$0.hasPrefix("user.") }) {
      throw Self.refuse(path, "carries the extended attribute '\(attribute)' (only user.* are accepted)")
    }
    var implied: [[UInt8]] = []
    var prefix: [UInt8] = []
    for component in components.dropLast() {
      prefix = joinPath(prefix, component)
      switch known[prefix] {
      case .directory?: continue
      case .symlink?:
        throw Self.refuse(path, "would be written through the symbolic link '\(display(prefix))'")
      case .file?: throw Self.refuse(path, "is inside '\(display(prefix))', which is a file")
      case nil:
        known[prefix] = .directory
        implied.append(prefix)
      }
    }
    let kind: Kind
    let admission: Admission
    switch entry.kind {
    case .directory:
      kind = .directory
      admission = .directory
    case .regular:
      guard entry.size >= 0, entry.size <= maxBytes - bytes else {
        throw BackupError(
          .refusedArchive,
          "member '\(display(path))' would make the files add up to more than \(maxBytes) bytes "
            + "(a disk bomb? --max-size raises the limit)")
      }
      let data = min(max(entry.dataSize, 0), entry.size)
      guard data <= maxDataBytes - dataBytes else {
        throw BackupError(
          .refusedArchive,
          "member '\(display(path))' would need more than the \(maxDataBytes) bytes of free space left")
      }
      bytes += entry.size
      dataBytes += data
      kind = .file
      admission = .file
    case .symlink(let target):
      if target.isEmpty { throw Self.refuse(path, "is a symbolic link with an empty target") }
      if target.contains(0) { throw Self.refuse(path, "is a symbolic link whose target holds a NUL byte") }
      kind = .symlink
      admission = .symlink
    case .hardlink(let target):
      guard known[target] == .file else {
        throw Self.refuse(
          path, "is a hard link to '\(display(target))', which is not an earlier file of the archive")
      }
      kind = .file
      admission = .hardlink(target: target)
    case .other:
      throw Self.refuse(path, "is a device file, FIFO or socket")
    }
    if let existing = known[path] {
      if !(existing == .directory && kind == .directory) {
        throw Self.refuse(path, "appears twice in the archive")
      }
    }
    known[path] = kind
    return (admission, implied)
  }

}

/// The facts about a member the validator judges, independent of libarchive's types.
struct ArchiveEntryFacts {
  enum Kind: Equatable {
    case directory, regular
    case symlink([UInt8])
    case hardlink([UInt8])
    case other
  }
  var path: [UInt8]
  var kind: Kind
  var permissions: UInt32
  var size: Int64
  /// Bytes of data the archive holds for a regular file: its size, or less when sparse.
  var dataSize: Int64
  var attributeNames: [String]
}
