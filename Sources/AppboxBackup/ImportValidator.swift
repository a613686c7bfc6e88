// The rules an imported archive must follow. It is untrusted input: one bad member refuses
// the whole archive (exit 65), before the home changes.
//
// Per member, in archive order:
// - the path (after libarchive applied any pax `path` override, so overrides are judged by
//   their effect) is relative, has no empty, `.` or `..` component, and starts with
//   Documents or Library, which must themselves be directories;
// - the type is a directory, regular file, symlink or hard link: no devices, FIFOs, sockets;
// - no setuid or setgid bit; extended attributes only in the `user.` namespace;
// - no path appears twice, except a directory repeated as a directory;
// - every parent is a directory seen or implied earlier: never a symlink (that would write
//   through a link) nor a file;
// - a hard link names an earlier regular file of the archive;
// - a symlink's target is relative and non-empty;
// - the entry count and the sum of declared sizes stay within the limits (a decompression
//   bomb stops at the first member past them, before its data is read).
// After the last member, every symlink is resolved over the archive's own tree, following
// its other symlinks the way the kernel would: one that leads above the home is refused.

import AppboxCore
import Foundation

/// Bounds on what an import accepts.
public struct ImportLimits: Sendable {
  public var maxEntries: Int
  /// The most bytes of file data an import may expand to (also capped by free space).
  public var maxBytes: Int64

  public init(maxEntries: Int = 1_000_000, maxBytes: Int64 = 64 << 30) {
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
  private(set) var symlinks: [(path: [UInt8], target: [UInt8])] = []
  private var entries = 0
  private var bytes: Int64 = 0
  let maxEntries: Int
  let maxBytes: Int64

  init(maxEntries: Int, maxBytes: Int64) {
    self.maxEntries = maxEntries
    self.maxBytes = maxBytes
  }

  static let topLevel: Set<[UInt8]> = [Array("Documents".utf8), Array("Library".utf8)]

  static func refuse(_ path: [UInt8], _ reason: String) -> BackupError {
    BackupError(.refusedArchive, "member '\(display(path))' \(reason)")
  }

  /// Checks one member; returns how to create it and the parent directories it implies
  /// (which the caller creates first, in order).
  mutating func admit(_ entry: ArchiveEntryFacts) throws -> (Admission, implied: [[UInt8]]) {
    let path = entry.path
    entries += 1
    guard entries <= maxEntries else {
      throw BackupError(.refusedArchive, "it has more than \(maxEntries) entries (APPBOX_IMPORT_MAX_ENTRIES)")
    }
    if path.first == UInt8(ascii: "/") { throw Self.refuse(path, "has an absolute path") }
    let components = path.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false).map(
      Array.init)
    for component in components {
      if component == Array("..".utf8) { throw Self.refuse(path, "climbs out with '..'") }
      if component.isEmpty || component == [UInt8(ascii: ".")] {
        throw Self.refuse(path, "has an empty or '.' component")
      }
    }
    guard let first = components.first, Self.topLevel.contains(first) else {
      throw Self.refuse(path, "is outside Documents and Library")
    }
    if components.count == 1 && entry.kind != .directory { throw Self.refuse(path, "must be a directory") }
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
          "member '\(display(path))' would make it expand beyond \(maxBytes) bytes (free space or APPBOX_IMPORT_MAX_BYTES)"
        )
      }
      bytes += entry.size
      kind = .file
      admission = .file
    case .symlink(let target):
      if target.isEmpty { throw Self.refuse(path, "is a symbolic link with an empty target") }
      if target.first == UInt8(ascii: "/") {
        throw Self.refuse(path, "is a symbolic link to an absolute path")
      }
      kind = .symlink
      admission = .symlink
      symlinks.append((path, target))
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

  /// Refuses symlinks that lead above the home, following the archive's other symlinks.
  func checkSymlinks() throws {
    let links = Dictionary(symlinks.map { ($0.path, $0.target) }, uniquingKeysWith: { first, _ in first })
    for (path, target) in symlinks {
      let directory = path.split(separator: UInt8(ascii: "/")).dropLast().map(Array.init)
      guard Self.resolve(target, from: directory, links: links, budget: 40) != nil else {
        throw Self.refuse(path, "is a symbolic link that leads outside the home ('\(display(target))')")
      }
    }
  }

  private static func resolve(
    _ target: [UInt8], from directory: [[UInt8]], links: [[UInt8]: [UInt8]], budget: Int
  )
    -> [[UInt8]]?
  {
    if target.first == UInt8(ascii: "/") || budget <= 0 { return nil }
    var current = directory
    for part in target.split(separator: UInt8(ascii: "/")).map(Array.init) {
      if part == [UInt8(ascii: ".")] { continue }
      if part == Array("..".utf8) {
        if current.isEmpty { return nil }
        current.removeLast()
        continue
      }
      current.append(part)
      let joined = Array(current.joined(separator: [UInt8(ascii: "/")]))
      if let next = links[joined] {
        current.removeLast()
        guard let resolved = resolve(next, from: current, links: links, budget: budget - 1) else {
          return nil
        }
        current = resolved
      }
    }
    return current
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
  var attributeNames: [String]
}
